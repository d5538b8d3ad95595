//! A doorbell: how one thread that sleeps in the kernel waiting for something else (an io_uring
//! waiting for completions) is also woken by other threads, with no wake-up lost.
//!
//! The sleeper keeps a futex wait on `word` in flight beside what it really waits for (in
//! io_uring, an `IORING_OP_FUTEX_WAIT` request; the kernel compares `word` with the value the
//! wait was armed with and sleeps only while they are equal). A ringer bumps `word` and wakes
//! the futex only if it takes `asleep`, so a ring costs one atomic swap while the sleeper is
//! awake. Used by the engine's reaper (`bio/uring.rs`) and by a thread's own ring
//! (`bio/local.rs`).
//!
//! | field | written by | meaning |
//! |---|---|---|
//! | `notified` | ringers set it, the sleeper takes it ([`Doorbell::take`]) | a ring since the sleeper last took one: its next sleep must not happen |
//! | `asleep` | the sleeper sets it in [`Doorbell::prepare_sleep`] and clears it in [`Doorbell::woke`]; a ringer swaps it to false | the sleeper is (about to be) asleep: the ringer that takes it bumps `word` and wakes the futex |
//! | `word` | bumped by the ringer that took `asleep` | the futex the sleeper's wait is armed on |
//!
//! Why no ring is lost: the sleeper reads `word` *before* it sets `asleep` and re-checks
//! `notified`, and arms its wait with that value. A ringer sets `notified` before it swaps
//! `asleep`. Every access to `asleep` and `notified` on these two paths is a read-modify-write
//! (the re-check is `fetch_or(false)`): two stores each followed by a plain load of the other
//! flag would need sequential consistency to forbid both loads missing (the store-buffer
//! pattern), which loom does not model; with read-modify-writes, acquire and release alone
//! forbid it — the sleeper's swap of `asleep` reads the ringer's, or the ringer's reads the
//! sleeper's. Either the sleeper's re-check sees `notified` (it does not sleep),
//! or the ringer's swap sees `asleep` and bumps `word` after the sleeper read it: the wait,
//! armed with the old value, then either finds the word changed or is woken by the futex wake
//! that follows the bump. A wait armed in an earlier round and still in flight was armed with
//! a value the word still holds (every bump is followed by a wake, which ends it), so it is
//! woken the same way.
//!
//! Under `--cfg loom` the futex is a model (`Doorbell::futex_wait`: a mutex and a condition
//! variable; the value compared under the mutex as the kernel does under its hash bucket lock),
//! and `tests/loom_doorbell.rs` checks the protocol, and a deliberately broken variant of it
//! (`broken`).

use crate::sync::loom::{AtomicBool, AtomicU32, Ordering};

/// See the [module documentation](self).
#[derive(Default)]
pub struct Doorbell {
    word: AtomicU32,
    asleep: AtomicBool,
    notified: AtomicBool,
    #[cfg(loom)]
    futex: (loom::sync::Mutex<()>, loom::sync::Condvar),
}

impl Doorbell {
    /// A doorbell nobody has rung.
    pub fn new() -> Doorbell {
        Doorbell::default()
    }

    /// Wakes the sleeper, or makes its next [`prepare_sleep`](Self::prepare_sleep) refuse.
    pub fn ring(&self) {
        self.notified.swap(true, Ordering::SeqCst);
        if self.asleep.swap(false, Ordering::SeqCst) {
            self.word.fetch_add(1, Ordering::SeqCst);
            self.futex_wake();
        }
    }

    /// Rings so that a wait armed on the word ends even if the sleeper is not marked asleep
    /// (to stop a sleeper whose wait may still be in flight).
    pub fn ring_always(&self) {
        self.notified.store(true, Ordering::SeqCst);
        self.asleep.store(false, Ordering::SeqCst);
        self.word.fetch_add(1, Ordering::SeqCst);
        self.futex_wake();
    }

    /// Takes a ring that came since the last take: whether there was one.
    pub fn take(&self) -> bool {
        self.notified.swap(false, Ordering::SeqCst)
    }

    /// Before the sleeper sleeps: the value to arm its futex wait with, or `None` where a ring
    /// came (it must not sleep; the ring stays to be [`take`](Self::take)n).
    pub fn prepare_sleep(&self) -> Option<u32> {
        if broken::is(broken::READ_WORD_LATE) {
            self.asleep.store(true, Ordering::SeqCst);
            if self.notified.load(Ordering::SeqCst) {
                self.asleep.store(false, Ordering::SeqCst);
                return None;
            }
            return Some(self.word.load(Ordering::SeqCst));
        }
        let val = self.word.load(Ordering::SeqCst);
        self.asleep.swap(true, Ordering::SeqCst);
        if !broken::is(broken::NO_RECHECK) && self.notified.fetch_or(false, Ordering::SeqCst) {
            self.asleep.store(false, Ordering::SeqCst);
            return None;
        }
        Some(val)
    }

    /// After the sleep (woken, or for what it really waited for).
    pub fn woke(&self) {
        self.asleep.store(false, Ordering::SeqCst);
    }

    /// The futex word, for the sleeper's wait request.
    #[cfg(not(loom))]
    pub fn word(&self) -> &std::sync::atomic::AtomicU32 {
        &self.word
    }

    /// Under `--cfg loom` the word is loom's and has no address the kernel could wait on; the
    /// I/O engines that arm kernel waits are not part of any model.
    #[cfg(loom)]
    pub fn word(&self) -> &std::sync::atomic::AtomicU32 {
        panic!("a doorbell's word under --cfg loom is a model, not a futex the kernel can wait on")
    }

    #[cfg(not(loom))]
    fn futex_wake(&self) {
        // SAFETY: FUTEX_WAKE on a live u32 of ours; it reads nothing else.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            );
        }
    }

    #[cfg(loom)]
    fn futex_wake(&self) {
        let _g = self.futex.0.lock().unwrap();
        self.futex.1.notify_all();
    }

    /// The model of the kernel's futex wait: sleeps while `word` holds `val`, until a wake.
    #[cfg(loom)]
    pub fn futex_wait(&self, val: u32) {
        let g = self.futex.0.lock().unwrap();
        if self.word.load(Ordering::SeqCst) == val {
            drop(self.futex.1.wait(g).unwrap());
        }
    }
}

/// A waker that rings the doorbell.
impl std::task::Wake for Doorbell {
    fn wake(self: std::sync::Arc<Self>) {
        self.ring();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.ring();
    }
}

// Public under loom, where tests/loom_doorbell.rs turns them on; the crate's own otherwise.
#[cfg(loom)]
#[doc(hidden)]
pub mod broken;
#[cfg(not(loom))]
#[allow(unreachable_pub)]
pub(crate) mod broken;
