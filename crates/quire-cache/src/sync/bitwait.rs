//! Waiting on bits of a 64-bit flag word: the folio lock and its waits, after the kernel's
//! `folio_lock`, `folio_wait_bit_common` and `PG_waiters`.
//!
//! A folio's flag word holds, among its state bits, a lock bit. Threads that find a bit in the
//! way (the lock taken, write-back under way) sleep in a hashed wait table until the bit is
//! cleared. Three mechanisms keep that cheap:
//!
//! 1. **The waiters bit.** A thread that goes to sleep on a word first sets [`WAITERS`] in it,
//!    under the wait-table lock. Clearing a bit is then one atomic read-modify-write that also
//!    returns the old word; only if `WAITERS` was set does the clearing thread touch the wait
//!    table. The uncontended unlock never hashes, never takes a table lock.
//! 2. **Exact, filtered wake-ups.** Each sleeper parks on the address of its word, with a park
//!    token pointing at a small record on its stack: which bit it waits for and whether it waits
//!    to *take* the bit (exclusive: a locker) or only for the bit to be clear (shared: "wait for
//!    write-back"). Clearing a bit wakes every shared waiter of that bit and the first exclusive
//!    one — never a thread waiting on another word or another bit, and one locker per unlock.
//!    `WAITERS` is cleared inside the waker's callback, under the table lock, exactly when no
//!    thread is left parked on the word.
//! 3. **Lock hand-off.** A woken locker may lose the race for the lock to a thread that just
//!    arrived. After [`lock_unfairness`] lost races it asks for hand-off: the next unlocker then
//!    takes the lock *on the waiter's behalf* inside the wake filter and wakes it as the owner,
//!    so no locker starves.
//!
//! # Async waiters
//!
//! [`lock_async`] and [`wait_clear_async`] (and the [`WaitPolicy`] methods of the same names)
//! are futures that wait the same way without blocking a thread, after the kernel's
//! `wait_page_queue` (`IOCB_WAITQ`): a contended future queues an entry holding its
//! [`Waker`](std::task::Waker) in an async waiter table keyed like the wait table, and is woken
//! by the same clears under the same rules. Both populations are queued, woken and counted under
//! the one wait-table lock of their key, so that `WAITERS` stays set while a thread *or* a future
//! waits, and is cleared when neither is left; a clear wakes every shared waiter of the bit and
//! exactly one exclusive waiter, thread or future — the oldest, by a ticket each takes when it
//! queues; a lock can be handed off to a future, which then completes owning it. Dropping a
//! future takes its entry out, and unlocks a lock handed to it meanwhile (or passes on a wake-up
//! it can no longer use). The mechanism is described in `sync/bitwait_async.rs`.
//!
//! # The flag word
//!
//! bitwait owns bits 0 and 1 of every word it is used on; the word's owner (the folio) defines
//! the rest and sets or tests them with plain atomics.
//!
//! | bit | name | set by | cleared by |
//! |---|---|---|---|
//! | 0 | [`LOCKED`] | [`try_lock`] / [`lock`] (`fetch_or`, acquire), or a waker handing the lock off | [`unlock`] (`fetch_and`, release) |
//! | 1 | [`WAITERS`] | a sleeper's validate step (or a future's queueing), under the wait-table lock, just before it sleeps | a waker's (or a leaving waiter's) callback, under that lock, when no thread is left parked on the word and no future queued on it |
//! | 2.. | the owner's | the owner | the owner, with [`clear_and_wake`] when somebody may wait for it |
//!
//! Invariant: while a thread sleeps on a word or a future is queued on it, `WAITERS` is set in
//! it. The converse does not hold: a thread that set `WAITERS` and then found the bit already
//! clear does not sleep, and the next clear pays one needless table lookup, which then clears
//! `WAITERS`.
//!
//! # The "before" policies
//!
//! [`WaitPolicy`] restores, for the benchmarks, what the kernel did before each mechanism
//! (rule 7 of docs/RULES.md; its "before" variants come with the feature `bench-internals`):
//! `WaitPolicy::AlwaysLookup` has no waiters bit, so every clear looks the
//! word up in the table; `WaitPolicy::UnfilteredWakeAll` parks every sleeper on one of 256
//! shared queues and wakes the whole queue on every clear, so sleepers wake for other words and
//! other bits, re-test and sleep again. The free functions of this module are the exact policy;
//! the policy methods compile to the same code when the policy is a constant.
//!
//! Every wait can be bounded by a [`Cancel`] (a deadline and/or a flag another thread sets),
//! after the kernel's killable waits: the wait returns an error and leaves nothing behind.
//! No wait relies on a timeout for correctness.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32 as StdAtomicU32, Ordering as StdOrdering};
use std::time::Instant;

use crate::stats::{count, Event};
use crate::sync::bitwait_async::{self as asynch, broken};
use crate::sync::loom::{AtomicBool, AtomicU64, Mutex, Ordering};
use crate::sync::parking::{self, FilterOp, ParkResult};

pub use crate::sync::bitwait_async::{lock_async, wait_clear_async, LockFuture, WaitClearFuture};

/// The deliberately broken variants of the async waiters, for the loom models.
#[cfg(loom)]
#[doc(hidden)]
pub use crate::sync::bitwait_async::broken as async_broken;

/// The lock bit.
pub const LOCKED: u64 = 1 << 0;
/// Somebody may be sleeping on this word; see the [module documentation](self).
pub const WAITERS: u64 = 1 << 1;

/// How many races a woken locker may lose before it asks for the lock to be handed to it.
static LOCK_UNFAIRNESS: StdAtomicU32 = StdAtomicU32::new(5);

/// Run by a thread before it waits in the slow path: a layer above that may have made this
/// thread the only one able to end what it is about to wait for gets it done first (`bio`'s
/// thread rings: a thread's ring runs its requests' ends only when the thread reaps it). Set
/// once; the function checks cheaply whether it has anything to do.
static BEFORE_SLEEP: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets the hook run before a thread waits in the slow path (the first setting stays).
pub(crate) fn set_before_sleep(f: fn()) {
    let _ = BEFORE_SLEEP.set(f);
}

/// Sets how many races a woken locker may lose before the lock is handed to it (the kernel's
/// `page_lock_unfairness`). Zero hands the lock off on the first wake-up; the default is 5.
pub fn set_lock_unfairness(n: u32) {
    LOCK_UNFAIRNESS.store(n, StdOrdering::Relaxed);
}

/// The current lock unfairness; see [`set_lock_unfairness`].
pub fn lock_unfairness() -> u32 {
    LOCK_UNFAIRNESS.load(StdOrdering::Relaxed)
}

/// Unpark tokens: why a sleeper was woken.
const WOKEN_NORMAL: usize = 0;
/// The waker took the lock for this (exclusive) sleeper: it returns as the owner.
const WOKEN_HANDOFF: usize = 1;
/// A [`Cancel`] was triggered.
const WOKEN_CANCEL: usize = 2;

/// Which implementation of the waits to use (rule 7 of docs/RULES.md). `Exact` is the default and what
/// the free functions of this module do; the "before" variants come with the feature
/// `bench-internals`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum WaitPolicy {
    /// The waiters bit, exact keyed wake-ups, wake-one for lockers, hand-off.
    #[default]
    Exact,
    /// As `Exact` but without the waiters bit: every clear looks the word up in the table.
    #[cfg(feature = "bench-internals")]
    AlwaysLookup,
    /// No waiters bit filtering by word or bit: 256 shared queues, every clear wakes all of one
    /// queue, and woken threads re-test and sleep again. No hand-off.
    #[cfg(feature = "bench-internals")]
    UnfilteredWakeAll,
}

/// Why a bounded wait gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// The deadline passed before the bit cleared.
    #[error("wait timed out")]
    TimedOut,
    /// The wait was cancelled.
    #[error("wait cancelled")]
    Cancelled,
}

/// What a sleeper is waiting for. Lives on the sleeper's stack; its address is the park token, so
/// a waker's filter can read it while the sleeper is parked (and only then).
struct Waiter {
    /// The bit (a mask with one bit set) this thread waits on.
    bit: u64,
    /// Whether it waits to take the bit (a locker) rather than for it to clear.
    exclusive: bool,
    /// Whether the waker should take the lock on this thread's behalf. Written by the owner only
    /// while it is not parked; read by wakers only while it is.
    handoff: Cell<bool>,
    /// Its place in line among the threads and futures waiting on its key, taken in `validate`
    /// (under the queue lock) each time it parks; read by wakers while it is parked.
    ticket: Cell<u64>,
    /// The cancel this wait is bound by, or null.
    cancel: *const Cancel,
}

/// Bounds a wait: a deadline, a flag that another thread can set with [`Cancel::cancel`], or
/// both. One `Cancel` may bound any number of waits, on any threads, at once.
pub struct Cancel {
    deadline: Option<Instant>,
    cancelled: AtomicBool,
    /// The waits now bound by this cancel, so that [`Cancel::cancel`] can wake them.
    waits: Mutex<Vec<Registration>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct Registration {
    /// The sleeper's `Waiter` address (its park token).
    waiter: usize,
    /// The wait-table key it parks on.
    key: usize,
    /// The address of the word it waits on.
    word: usize,
    policy: WaitPolicy,
}

impl Default for Cancel {
    fn default() -> Self {
        Cancel::new()
    }
}

impl Cancel {
    /// A cancel with no deadline, triggered only by [`Cancel::cancel`].
    pub fn new() -> Cancel {
        Cancel {
            deadline: None,
            cancelled: AtomicBool::new(false),
            waits: Mutex::new(Vec::new()),
        }
    }

    /// A cancel that also expires at `deadline`.
    pub fn with_deadline(deadline: Instant) -> Cancel {
        Cancel {
            deadline: Some(deadline),
            ..Cancel::new()
        }
    }

    /// The deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Cancels every wait bound by this cancel, now and later: each returns
    /// [`WaitError::Cancelled`] unless it already got what it waited for.
    pub fn cancel(&self) {
        // Pairs with the sleeper's registration then flag test in `validate`: either the sleeper
        // sees the flag and does not sleep, or we see its registration and wake it.
        self.cancelled.store(true, Ordering::SeqCst);
        let waits = self.waits.lock();
        for r in waits.iter() {
            count(Event::WaitTableLookups);
            let word = r.word as *const AtomicU64;
            let uses_bit = r.policy.uses_waiters_bit();
            parking::unpark_filter(
                r.key,
                |token| {
                    if token == r.waiter {
                        FilterOp::Unpark
                    } else {
                        FilterOp::Skip
                    }
                },
                |res| {
                    if !res.have_more && uses_bit && !asynch::any_waiting(r.key) {
                        // SAFETY: the sleeper is registered, so it is inside a wait on `word`
                        // and the word outlives that wait; it cannot deregister while we hold
                        // `waits`.
                        unsafe { (*word).fetch_and(!WAITERS, Ordering::Relaxed) };
                    }
                    WOKEN_CANCEL
                },
            );
        }
    }

    fn check(&self) -> Result<(), WaitError> {
        if self.is_cancelled() {
            return Err(WaitError::Cancelled);
        }
        match self.deadline {
            Some(d) if Instant::now() >= d => Err(WaitError::TimedOut),
            _ => Ok(()),
        }
    }

    fn register(&self, r: Registration) {
        self.waits.lock().push(r);
    }

    fn deregister(&self, waiter: usize) {
        let mut waits = self.waits.lock();
        if let Some(i) = waits.iter().position(|r| r.waiter == waiter) {
            waits.swap_remove(i);
        }
    }
}

/// Removes a wait's registration when the wait ends, however it ends.
struct Registered<'a> {
    cancel: &'a Cancel,
    waiter: usize,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.cancel.deregister(self.waiter);
    }
}

/// The shared queues of `WaitPolicy::UnfilteredWakeAll`: 256 distinct addresses to park on.
#[cfg(feature = "bench-internals")]
static SHARED_QUEUES: [u8; 256] = [0; 256];

impl WaitPolicy {
    #[inline(always)]
    pub(super) fn uses_waiters_bit(self) -> bool {
        #[cfg(feature = "bench-internals")]
        return !matches!(self, WaitPolicy::AlwaysLookup);
        #[cfg(not(feature = "bench-internals"))]
        true
    }

    /// Whether every clear wakes every waiter of a shared queue (`UnfilteredWakeAll`), with no
    /// hand-off.
    #[inline(always)]
    pub(super) fn wakes_all(self) -> bool {
        #[cfg(feature = "bench-internals")]
        return self == WaitPolicy::UnfilteredWakeAll;
        #[cfg(not(feature = "bench-internals"))]
        false
    }

    /// The wait-table key a sleeper on `word` parks on.
    #[inline]
    pub(super) fn key(self, word: &AtomicU64) -> usize {
        let addr = word as *const AtomicU64 as usize;
        #[cfg(feature = "bench-internals")]
        if self == WaitPolicy::UnfilteredWakeAll {
            let h = (addr >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56;
            return &SHARED_QUEUES[h] as *const u8 as usize;
        }
        addr
    }

    /// Takes the lock bit if it is free. Acquire ordering on success.
    #[inline(always)]
    #[doc(alias = "folio_trylock")]
    pub fn try_lock(self, word: &AtomicU64) -> bool {
        try_lock(word)
    }

    /// Takes the lock bit, sleeping while another thread holds it.
    #[inline(always)]
    #[doc(alias("folio_lock", "__folio_lock"))]
    pub fn lock(self, word: &AtomicU64) {
        if !try_lock(word) {
            // Without a cancel the wait cannot fail.
            let _ = wait_slow(word, LOCKED, true, self, None);
        }
    }

    /// Takes the lock bit, or gives up when `cancel` says so.
    #[inline]
    #[doc(alias = "folio_lock_killable")]
    pub fn lock_cancellable(self, word: &AtomicU64, cancel: &Cancel) -> Result<(), WaitError> {
        if try_lock(word) {
            return Ok(());
        }
        wait_slow(word, LOCKED, true, self, Some(cancel))
    }

    /// Releases the lock bit (release ordering) and wakes a waiter if one may be sleeping.
    #[inline(always)]
    #[doc(alias = "folio_unlock")]
    pub fn unlock(self, word: &AtomicU64) {
        self.clear_and_wake(word, LOCKED);
    }

    /// Sleeps until `bit` is clear (acquire ordering on return).
    #[inline(always)]
    #[doc(alias = "folio_wait_bit")]
    pub fn wait_clear(self, word: &AtomicU64, bit: u64) {
        if word.load(Ordering::Acquire) & bit != 0 {
            let _ = wait_slow(word, bit, false, self, None);
        }
    }

    /// Sleeps until `bit` is clear, or gives up when `cancel` says so.
    #[inline]
    #[doc(alias = "folio_wait_bit_killable")]
    pub fn wait_clear_cancellable(
        self,
        word: &AtomicU64,
        bit: u64,
        cancel: &Cancel,
    ) -> Result<(), WaitError> {
        if word.load(Ordering::Acquire) & bit == 0 {
            return Ok(());
        }
        wait_slow(word, bit, false, self, Some(cancel))
    }

    /// Clears `bit` with one release read-modify-write, then wakes its waiters — touching the
    /// wait table only if the word says somebody may be waiting (or always, under
    /// `WaitPolicy::AlwaysLookup`).
    #[inline(always)]
    #[doc(alias = "clear_bit_unlock_is_negative_byte")]
    pub fn clear_and_wake(self, word: &AtomicU64, bit: u64) {
        let prev = word.fetch_and(!bit, Ordering::Release);
        if !self.uses_waiters_bit() || prev & WAITERS != 0 {
            self.wake_bit(word, bit);
        }
    }

    /// Wakes the waiters of `bit`, for an owner that cleared it some other way. Always looks up
    /// the wait table.
    #[cold]
    #[doc(alias("folio_wake_bit", "wake_up_page_bit"))]
    pub fn wake_bit(self, word: &AtomicU64, bit: u64) {
        count(Event::WaitTableLookups);
        let key = self.key(word);
        let uses_bit = self.uses_waiters_bit();
        // The futures of the key: woken by the same rules, under the same lock, in the callback.
        let futures = asynch::Wake::new(key, word, bit);
        if self.wakes_all() {
            parking::unpark_filter(
                key,
                |_| FilterOp::Unpark,
                |res| {
                    let futures_left = futures.wake_all();
                    if !res.have_more && !futures_left {
                        word.fetch_and(!WAITERS, Ordering::Relaxed);
                    }
                    WOKEN_NORMAL
                },
            );
            futures.finish();
            return;
        }
        let mut woke_exclusive = false;
        let handed_off = Cell::new(false);
        parking::unpark_filter(
            key,
            |token| {
                // SAFETY: every token parked on an exact key is the address of a `Waiter` on the
                // stack of a thread that stays parked (so the record lives) until this filter
                // and callback have run.
                let w = unsafe { &*(token as *const Waiter) };
                if w.bit != bit {
                    return FilterOp::Skip;
                }
                if word.load(Ordering::Relaxed) & bit != 0 {
                    // Set again (stolen, handed off, a new write-back): everybody left will be
                    // woken by the next clear.
                    return FilterOp::Stop;
                }
                if !w.exclusive {
                    return FilterOp::Unpark;
                }
                if woke_exclusive {
                    return FilterOp::Skip;
                }
                woke_exclusive = true;
                if !futures.thread_goes_first(w.ticket.get()) {
                    // A future queued before this thread takes the one exclusive wake-up: the
                    // callback wakes it.
                    return FilterOp::Skip;
                }
                if w.handoff.get() {
                    if word.fetch_or(LOCKED, Ordering::Acquire) & LOCKED != 0 {
                        return FilterOp::Stop;
                    }
                    handed_off.set(true);
                }
                FilterOp::Unpark
            },
            |res| {
                let futures_left = futures.wake() && !broken::is(broken::WAKE_FORGETS_FUTURES);
                if !res.have_more && !futures_left && uses_bit {
                    word.fetch_and(!WAITERS, Ordering::Relaxed);
                }
                if handed_off.get() {
                    WOKEN_HANDOFF
                } else {
                    WOKEN_NORMAL
                }
            },
        );
        futures.finish();
    }
}

/// Takes the lock bit if it is free. Acquire ordering on success.
#[inline(always)]
#[doc(alias = "folio_trylock")]
pub fn try_lock(word: &AtomicU64) -> bool {
    word.fetch_or(LOCKED, Ordering::Acquire) & LOCKED == 0
}

/// Takes the lock bit, sleeping while another thread holds it.
#[inline(always)]
#[doc(alias("folio_lock", "__folio_lock"))]
pub fn lock(word: &AtomicU64) {
    WaitPolicy::Exact.lock(word)
}

/// Takes the lock bit, or gives up when `cancel` says so; on error the lock is not held and no
/// trace of the wait is left.
#[inline]
#[doc(alias = "folio_lock_killable")]
pub fn lock_cancellable(word: &AtomicU64, cancel: &Cancel) -> Result<(), WaitError> {
    WaitPolicy::Exact.lock_cancellable(word, cancel)
}

/// Releases the lock bit: one release read-modify-write; the wait table is touched only if
/// [`WAITERS`] was set.
#[inline(always)]
#[doc(alias = "folio_unlock")]
pub fn unlock(word: &AtomicU64) {
    WaitPolicy::Exact.unlock(word)
}

/// Sleeps until `bit` is clear (acquire ordering on return): "wait until unlocked", "wait for
/// write-back".
#[inline(always)]
#[doc(alias = "folio_wait_bit")]
pub fn wait_clear(word: &AtomicU64, bit: u64) {
    WaitPolicy::Exact.wait_clear(word, bit)
}

/// Sleeps until `bit` is clear, or gives up when `cancel` says so.
#[inline]
#[doc(alias = "folio_wait_bit_killable")]
pub fn wait_clear_cancellable(
    word: &AtomicU64,
    bit: u64,
    cancel: &Cancel,
) -> Result<(), WaitError> {
    WaitPolicy::Exact.wait_clear_cancellable(word, bit, cancel)
}

/// Clears `bit` (release) and wakes its waiters: "end of write-back".
#[inline(always)]
#[doc(alias = "clear_bit_unlock_is_negative_byte")]
pub fn clear_and_wake(word: &AtomicU64, bit: u64) {
    WaitPolicy::Exact.clear_and_wake(word, bit)
}

/// Sets `bit`, returning whether it was already set.
#[inline(always)]
pub fn set_bit(word: &AtomicU64, bit: u64) -> bool {
    word.fetch_or(bit, Ordering::AcqRel) & bit != 0
}

/// The slow path of every wait: sleep on `word` until `bit` is clear (shared) or taken by this
/// thread (exclusive), or `cancel` fires.
#[cold]
fn wait_slow(
    word: &AtomicU64,
    bit: u64,
    exclusive: bool,
    policy: WaitPolicy,
    cancel: Option<&Cancel>,
) -> Result<(), WaitError> {
    let waiter = Waiter {
        bit,
        exclusive,
        handoff: Cell::new(false),
        ticket: Cell::new(0),
        cancel: cancel.map_or(std::ptr::null(), |c| c as *const Cancel),
    };
    let token = &waiter as *const Waiter as usize;
    let key = policy.key(word);
    let uses_bit = policy.uses_waiters_bit();
    let deadline = cancel.and_then(|c| c.deadline);
    let _registered = cancel.map(|c| {
        c.register(Registration {
            waiter: token,
            key,
            word: word as *const AtomicU64 as usize,
            policy,
        });
        Registered {
            cancel: c,
            waiter: token,
        }
    });
    debug_assert!(waiter.cancel.is_null() || cancel.is_some());
    if let Some(before_sleep) = BEFORE_SLEEP.get() {
        before_sleep();
    }
    let mut woken = false;
    let mut lost_races = 0u32;
    loop {
        let got = if exclusive {
            try_lock(word)
        } else {
            word.load(Ordering::Acquire) & bit == 0
        };
        if got {
            return Ok(());
        }
        if woken {
            count(Event::SpuriousWakeups);
            if exclusive {
                lost_races += 1;
            }
        }
        if let Some(c) = cancel {
            c.check()?;
        }
        waiter
            .handoff
            .set(exclusive && !policy.wakes_all() && lost_races >= lock_unfairness());
        count(Event::WaitTableLookups);
        let result = parking::park(
            key,
            || {
                let now = if uses_bit {
                    word.fetch_or(WAITERS, Ordering::Relaxed)
                } else {
                    word.load(Ordering::Relaxed)
                };
                let sleep = now & bit != 0 && !cancel.is_some_and(|c| c.is_cancelled());
                if sleep {
                    count(Event::Sleeps);
                    waiter.ticket.set(asynch::next_ticket());
                } else if uses_bit && now & WAITERS == 0 {
                    // We set WAITERS and do not sleep after all. Nobody else sleeps on the word
                    // (a sleeper would have set it), and nobody can start to while we hold the
                    // queue's lock: take it back, so a cancelled or lucky wait leaves no trace.
                    word.fetch_and(!WAITERS, Ordering::Relaxed);
                }
                sleep
            },
            |key, was_last| {
                if was_last && uses_bit && !asynch::any_waiting(key) {
                    word.fetch_and(!WAITERS, Ordering::Relaxed);
                }
            },
            token,
            deadline,
        );
        match result {
            ParkResult::Unparked(why) => {
                count(Event::Wakeups);
                if why == WOKEN_HANDOFF && exclusive {
                    count(Event::LockHandoffs);
                    // The waker set LOCKED for us with acquire ordering, and the unpark
                    // orders its work before our return.
                    return Ok(());
                }
                // A cancel wake-up is not a spurious one: the loop re-tests, then reports it.
                woken = why != WOKEN_CANCEL;
            }
            ParkResult::Invalid => woken = false,
            ParkResult::TimedOut => return Err(WaitError::TimedOut),
        }
    }
}

/// Whether the waiters invariant holds for `word` right now: if any thread is parked on it or
/// any future queued on it, [`WAITERS`] is set. For the loom models.
#[cfg(loom)]
#[doc(hidden)]
pub fn waiters_invariant_holds(word: &AtomicU64) -> bool {
    let key = WaitPolicy::Exact.key(word);
    parking::with_parked(key, |parked| {
        (parked == 0 && asynch::waiting(key) == 0) || word.load(Ordering::Relaxed) & WAITERS != 0
    })
}

/// How many threads are parked on `word` and how many futures are queued on it, read under the
/// queue lock. For the loom models.
#[cfg(loom)]
#[doc(hidden)]
pub fn waiters(word: &AtomicU64) -> (usize, usize) {
    let key = WaitPolicy::Exact.key(word);
    parking::with_parked(key, |parked| (parked, asynch::waiting(key)))
}

/// Held by the unit tests that depend on [`lock_unfairness`] (a process-wide setting) while
/// they set and use it, so that tests running at once do not change it under each other.
#[cfg(all(test, not(loom)))]
pub(crate) static UNFAIRNESS_TEST_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(all(test, not(loom)))]
mod tests;
