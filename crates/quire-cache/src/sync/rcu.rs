//! The read side of quire's lock-free lookups, after the kernel's RCU.
//!
//! A reader calls [`pin`] and keeps the returned [`Guard`] for as long as it dereferences shared
//! pointers it loaded (XArray nodes, dentries). A writer that unlinks an object hands it to
//! [`Guard::defer_destroy`] (or [`Guard::defer`]); it is freed only once every guard that could
//! have seen it has been dropped — a grace period.
//!
//! In a normal build this is crossbeam-epoch. Under `--cfg loom` it is a small stand-in that the
//! model checker can see through: a global count of live guards, with deferred work run when a
//! writer or the last reader finds the count at zero. That is a valid (if eager) grace period:
//! an object is only handed over after it was unlinked, so a reader that pins after the hand-over
//! cannot reach it, and a reader that pinned before keeps the count above zero.

#[cfg(not(loom))]
mod imp {
    /// A pinned read-side critical section; see the [module documentation](super).
    pub struct Guard {
        inner: crossbeam_epoch::Guard,
    }

    /// Enters a read-side critical section.
    #[inline]
    pub fn pin() -> Guard {
        Guard {
            inner: crossbeam_epoch::pin(),
        }
    }

    impl Guard {
        /// Runs `f` after every guard that exists now has been dropped.
        pub fn defer<F: FnOnce() + Send + 'static>(&self, f: F) {
            self.inner.defer(f);
        }

        /// Drops `Box::from_raw(ptr)` after every guard that exists now has been dropped.
        ///
        /// # Safety
        ///
        /// `ptr` must come from `Box::into_raw`, must already be unreachable for readers that pin
        /// from now on, and must not be freed by anybody else.
        pub unsafe fn defer_destroy<T: Send + 'static>(&self, ptr: *mut T) {
            let ptr = SendPtr(ptr);
            // SAFETY: the caller promises that `ptr` came from `Box::into_raw`, is unlinked and is
            // owned by this call; crossbeam runs the closure only after every guard that could
            // have loaded it is gone.
            unsafe {
                self.inner.defer_unchecked(move || {
                    let ptr = ptr;
                    drop(Box::from_raw(ptr.0));
                });
            }
        }

        /// Pushes this thread's deferred work to the global queue so it can run sooner.
        pub fn flush(&self) {
            self.inner.flush();
        }

        /// Leaves the critical section and enters a new one, so that a guard kept across many
        /// lookups does not hold back grace periods. Pointers loaded before are not to be used
        /// after.
        #[inline]
        pub fn repin(&mut self) {
            self.inner.repin();
        }

        /// Leaves the critical section while `f` runs (if this is the thread's only guard), and
        /// enters a new one after: for slow work (I/O, sleeping) under a long-lived guard.
        #[inline]
        pub fn repin_after<R>(&mut self, f: impl FnOnce() -> R) -> R {
            self.inner.repin_after(f)
        }
    }

    struct SendPtr<T>(*mut T);
    // SAFETY: the pointer is only dereferenced (to free it) by the deferred closure, once, and
    // `T: Send` so it may be dropped on whichever thread runs the closure.
    unsafe impl<T: Send> Send for SendPtr<T> {}
}

#[cfg(loom)]
mod imp {
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Mutex;

    type Deferred = Box<dyn FnOnce() + Send>;

    loom::lazy_static! {
        static ref READERS: AtomicUsize = AtomicUsize::new(0);
        static ref PENDING: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());
    }

    /// A pinned read-side critical section; see the [module documentation](super).
    pub struct Guard {
        _private: (),
    }

    /// Enters a read-side critical section.
    pub fn pin() -> Guard {
        READERS.fetch_add(1, Ordering::SeqCst);
        Guard { _private: () }
    }

    fn run_if_quiescent() {
        let work: Vec<Deferred> = {
            let mut pending = PENDING.lock().unwrap();
            // Only this guard (if the caller holds one) may remain; see `Drop`.
            if READERS.load(Ordering::SeqCst) != 0 {
                return;
            }
            std::mem::take(&mut *pending)
        };
        for f in work {
            f();
        }
    }

    impl Guard {
        /// Runs `f` after every guard that exists now has been dropped.
        pub fn defer<F: FnOnce() + Send + 'static>(&self, f: F) {
            PENDING.lock().unwrap().push(Box::new(f));
        }

        /// Drops `Box::from_raw(ptr)` after every guard that exists now has been dropped.
        ///
        /// # Safety
        ///
        /// As for the normal build: `ptr` comes from `Box::into_raw`, is unlinked, and is owned
        /// by this call.
        pub unsafe fn defer_destroy<T: Send + 'static>(&self, ptr: *mut T) {
            let addr = ptr as usize;
            // SAFETY: forwarded from the caller's promise; the box is freed once, after the
            // grace period.
            self.defer(move || unsafe { drop(Box::from_raw(addr as *mut T)) });
        }

        /// Runs deferred work if no reader is left.
        pub fn flush(&self) {}

        /// Leaves the critical section and enters a new one.
        pub fn repin(&mut self) {
            if READERS.fetch_sub(1, Ordering::SeqCst) == 1 {
                run_if_quiescent();
            }
            READERS.fetch_add(1, Ordering::SeqCst);
        }

        /// Leaves the critical section while `f` runs, and enters a new one after.
        pub fn repin_after<R>(&mut self, f: impl FnOnce() -> R) -> R {
            if READERS.fetch_sub(1, Ordering::SeqCst) == 1 {
                run_if_quiescent();
            }
            let r = f();
            READERS.fetch_add(1, Ordering::SeqCst);
            r
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            if READERS.fetch_sub(1, Ordering::SeqCst) == 1 {
                run_if_quiescent();
            }
        }
    }
}

pub use imp::{pin, Guard};
