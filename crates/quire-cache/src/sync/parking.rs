//! The wait table: parking_lot_core in a normal build, a model-checkable stand-in under loom.
//!
//! Only [`crate::sync::bitwait`] parks threads. It goes through these two functions so that its
//! protocol (the waiters bit, filtered wake-ups, hand-off) can be checked by loom, whose threads
//! cannot sleep in parking_lot_core's table. Both implementations keep the guarantees bitwait
//! relies on:
//!
//! - `validate` runs under the lock of the key's queue; a thread it accepts is in the queue
//!   before that lock is released, so a waker that takes the lock later will find it;
//! - `filter` and `callback` of [`unpark_filter`] run under that same lock, in queue order
//!   (oldest waiter first), and `callback` learns whether any thread is still parked on the key;
//!   `callback` runs even when no thread is parked on the key, so bitwait's async waiters queue
//!   and leave inside it (with a filter that wakes nobody), under the lock their wakers take;
//! - `timed_out` runs under the lock too, after the thread left the queue, and learns whether it
//!   was the last thread on the key.

use std::time::Instant;

/// What [`park`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParkResult {
    /// A waker unparked this thread with this token.
    Unparked(usize),
    /// `validate` returned false; the thread never slept.
    Invalid,
    /// The deadline passed; the thread left the queue on its own.
    #[cfg_attr(loom, allow(dead_code))] // the loom stand-in has no clock
    TimedOut,
}

/// What a filter decides for one parked thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FilterOp {
    /// Wake this thread.
    Unpark,
    /// Leave it parked and look at the next.
    Skip,
    /// Leave it and every later thread parked.
    Stop,
}

/// What [`unpark_filter`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UnparkResult {
    /// How many threads were woken.
    pub unparked: usize,
    /// Whether threads are still parked on the key.
    pub have_more: bool,
}

#[cfg(not(loom))]
mod imp {
    use super::*;
    use parking_lot_core as plc;

    /// Parks the calling thread on `key` if `validate` (run under the queue lock) says so.
    #[inline]
    pub(crate) fn park(
        key: usize,
        validate: impl FnOnce() -> bool,
        timed_out: impl FnOnce(usize, bool),
        token: usize,
        deadline: Option<Instant>,
    ) -> ParkResult {
        // SAFETY: `validate` and `timed_out` only touch atomics and never call back into the
        // parking lot, which is parking_lot_core's only requirement.
        let r = unsafe {
            plc::park(
                key,
                validate,
                || {},
                timed_out,
                plc::ParkToken(token),
                deadline,
            )
        };
        match r {
            plc::ParkResult::Unparked(t) => ParkResult::Unparked(t.0),
            plc::ParkResult::Invalid => ParkResult::Invalid,
            plc::ParkResult::TimedOut => ParkResult::TimedOut,
        }
    }

    /// Wakes the threads parked on `key` that `filter` picks; `callback` runs before they wake
    /// and chooses the token they are woken with.
    #[inline]
    pub(crate) fn unpark_filter(
        key: usize,
        mut filter: impl FnMut(usize) -> FilterOp,
        callback: impl FnOnce(UnparkResult) -> usize,
    ) -> UnparkResult {
        // SAFETY: `filter` and `callback` only touch atomics, the waiters' records and the async
        // waiter table (under its own mutex, which never waits for the parking lot), and never
        // call back into the parking lot.
        let r = unsafe {
            plc::unpark_filter(
                key,
                |t| match filter(t.0) {
                    FilterOp::Unpark => plc::FilterOp::Unpark,
                    FilterOp::Skip => plc::FilterOp::Skip,
                    FilterOp::Stop => plc::FilterOp::Stop,
                },
                |r| {
                    plc::UnparkToken(callback(UnparkResult {
                        unparked: r.unparked_threads,
                        have_more: r.have_more_threads,
                    }))
                },
            )
        };
        UnparkResult {
            unparked: r.unparked_threads,
            have_more: r.have_more_threads,
        }
    }
}

#[cfg(loom)]
mod imp {
    //! One global queue behind a loom mutex; a parked thread sleeps in `loom::thread::park`
    //! until its record says it was woken. Deadlines are not modelled (loom has no clock).
    //!
    //! The queue lock is the one lock of every key, so everything that bitwait does under "the
    //! key's queue lock" — the threads' records and the async waiter table alike — is
    //! serialised by it, as parking_lot_core's bucket lock serialises it for one key.
    use super::*;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Mutex;
    // std's Arc, not loom's: a model that fails by deadlock leaves threads in the queue, and
    // loom drops the queue (a lazy static) after the execution, where a loom Arc may not be
    // dropped; that aborted the process instead of failing the model. The flag's ordering is
    // the loom atomic's; the Arc only keeps it alive.
    use std::sync::Arc;

    struct Parked {
        key: usize,
        token: usize,
        thread: loom::thread::Thread,
        /// 0 while parked; the unpark token + 1 once woken.
        woken: Arc<AtomicUsize>,
    }

    loom::lazy_static! {
        static ref QUEUE: Mutex<Vec<Parked>> = Mutex::new(Vec::new());
    }

    pub(crate) fn park(
        key: usize,
        validate: impl FnOnce() -> bool,
        _timed_out: impl FnOnce(usize, bool),
        token: usize,
        _deadline: Option<Instant>,
    ) -> ParkResult {
        let woken = Arc::new(AtomicUsize::new(0));
        {
            let mut q = QUEUE.lock().unwrap();
            if !validate() {
                return ParkResult::Invalid;
            }
            q.push(Parked {
                key,
                token,
                thread: loom::thread::current(),
                woken: woken.clone(),
            });
        }
        loop {
            let w = woken.load(Ordering::Acquire);
            if w != 0 {
                return ParkResult::Unparked(w - 1);
            }
            loom::thread::park();
        }
    }

    pub(crate) fn unpark_filter(
        key: usize,
        mut filter: impl FnMut(usize) -> FilterOp,
        callback: impl FnOnce(UnparkResult) -> usize,
    ) -> UnparkResult {
        let mut q = QUEUE.lock().unwrap();
        let mut picked = Vec::new();
        let mut i = 0;
        while i < q.len() {
            if q[i].key != key {
                i += 1;
                continue;
            }
            match filter(q[i].token) {
                FilterOp::Unpark => picked.push(q.remove(i)),
                FilterOp::Skip => i += 1,
                FilterOp::Stop => break,
            }
        }
        let result = UnparkResult {
            unparked: picked.len(),
            have_more: q.iter().any(|p| p.key == key),
        };
        let token = callback(result);
        drop(q);
        for p in picked {
            p.woken.store(token + 1, Ordering::Release);
            p.thread.unpark();
        }
        result
    }

    /// Runs `f` with the number of threads parked on `key`, under the queue lock.
    pub(crate) fn with_parked<R>(key: usize, f: impl FnOnce(usize) -> R) -> R {
        let q = QUEUE.lock().unwrap();
        f(q.iter().filter(|p| p.key == key).count())
    }
}

#[cfg(loom)]
pub(crate) use imp::with_parked;
pub(crate) use imp::{park, unpark_filter};
