//! The atomics facade: `std`'s atomics in a normal build, loom's under `--cfg loom`.
//!
//! Every protocol in quire (the waiters bit, lockref, the lock-free index reads) is written
//! against these names, so the same code is model-checked by the loom tests and run for real
//! everywhere else. Counters that are not part of a protocol (see [`crate::stats`]) use `std`
//! atomics directly.

#[cfg(loom)]
pub use loom::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub use std::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

#[cfg(loom)]
use loom::sync as imp;
#[cfg(not(loom))]
use std::sync as imp;

/// The guard of a [`Mutex`] (std's or loom's).
pub use imp::MutexGuard;

/// The mutex every protocol is written against: `std::sync::Mutex` normally, loom's under
/// `--cfg loom` (so that a model sees its lock order).
///
/// Locking ignores poisoning. A thread that panics while it holds one of quire's mutexes panics
/// on an assertion about a caller's bug or a broken invariant, and every critical section leaves
/// its data consistent before it can reach one; refusing the lock to every later thread would
/// turn one failed operation into a dead cache.
#[derive(Default)]
pub struct Mutex<T>(imp::Mutex<T>);

impl<T> Mutex<T> {
    /// A mutex holding `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Mutex<T> {
        Mutex(imp::Mutex::new(value))
    }

    /// A mutex holding `value`.
    #[cfg(loom)]
    pub fn new(value: T) -> Mutex<T> {
        Mutex(imp::Mutex::new(value))
    }

    /// Waits for the lock and returns its guard.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The lock's guard if nobody holds it.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The value, through a unique borrow (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<T> std::fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mutex { .. }")
    }
}

/// Spin-then-yield waiting for a condition another thread will make true soon: the first
/// `spins` rounds are [`spin_loop`] hints, then each round gives up the time slice
/// ([`yield_now`]), so a waiter whose holder was preempted does not burn its own slice. Under
/// loom every round is a yield to the model's scheduler.
///
/// ```
/// # use quire::sync::loom::{AtomicBool, Ordering, SpinWait};
/// let ready = AtomicBool::new(true);
/// let mut wait = SpinWait::new(64);
/// while !ready.load(Ordering::Acquire) {
///     wait.wait();
/// }
/// ```
#[derive(Clone, Debug)]
pub struct SpinWait {
    spun: u32,
    spins: u32,
}

impl SpinWait {
    /// A wait that spins `spins` rounds before it starts yielding.
    #[inline]
    pub const fn new(spins: u32) -> SpinWait {
        SpinWait { spun: 0, spins }
    }

    /// One round of waiting.
    #[inline]
    pub fn wait(&mut self) {
        if self.spun < self.spins {
            self.spun += 1;
            spin_loop();
        } else {
            yield_now();
        }
    }
}

/// Tells the processor that this thread is spinning (under loom: yields to the model's
/// scheduler, which must see a spinning thread give way).
#[cfg(loom)]
pub use loom::thread::yield_now as spin_loop;
/// Tells the processor that this thread is spinning (under loom: yields to the model's
/// scheduler, which must see a spinning thread give way).
#[cfg(not(loom))]
pub use std::hint::spin_loop;

/// Gives up the rest of this thread's time slice (under loom: lets the scheduler switch).
#[cfg(loom)]
pub use loom::thread::yield_now;
/// Gives up the rest of this thread's time slice (under loom: lets the scheduler switch).
#[cfg(not(loom))]
pub use std::thread::yield_now;

/// The switches of a mechanism's deliberately broken variants, for its loom models: `set(which)`
/// turns on the variants in `which` (a set of the module's constants) for one model execution,
/// `is(which)` asks at the decision point. Never on outside loom (`is` is `false`).
macro_rules! broken_switches {
    () => {
        #[cfg(loom)]
        loom::lazy_static! {
            // Per model execution; not part of the modelled protocol.
            static ref WHICH: std::sync::atomic::AtomicUsize =
                std::sync::atomic::AtomicUsize::new(0);
        }

        /// Breaks the variants in `which` (a set of the constants above) for this model
        /// execution.
        #[cfg(loom)]
        pub fn set(which: usize) {
            WHICH.store(which, std::sync::atomic::Ordering::Relaxed);
        }

        /// Whether `which` is broken in this execution.
        #[inline(always)]
        pub(crate) fn is(which: usize) -> bool {
            #[cfg(loom)]
            {
                WHICH.load(std::sync::atomic::Ordering::Relaxed) & which != 0
            }
            #[cfg(not(loom))]
            {
                let _ = which;
                false
            }
        }
    };
}
pub(crate) use broken_switches;
