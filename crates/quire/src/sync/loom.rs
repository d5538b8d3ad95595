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

/// The mutex protocols are written against (loom's under `--cfg loom`, so that a model sees
/// its lock order).
#[cfg(loom)]
pub use loom::sync::{Mutex, MutexGuard};
/// The mutex protocols are written against (loom's under `--cfg loom`, so that a model sees
/// its lock order).
#[cfg(not(loom))]
pub use std::sync::{Mutex, MutexGuard};

/// Tells the processor (or, under loom, the model's scheduler) that this thread is spinning.
#[inline]
pub fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Gives up the rest of this thread's time slice (under loom: lets the scheduler switch).
#[inline]
pub fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}
