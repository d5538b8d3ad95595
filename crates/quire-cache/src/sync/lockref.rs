//! A lock and a reference count in one 64-bit word (the kernel's `lib/lockref.c`).
//!
//! A [`LockRef`] lets reference traffic run without taking the lock: while the lock half of the
//! word is free, `get` and `put` are a single compare-and-swap on the whole word, so a reference
//! is taken or dropped without ever writing the lock. Only when the lock is held (someone is
//! changing the object's state, or is deciding whether the object dies), or when the
//! compare-and-swap keeps losing races, does an operation fall back to taking the lock and
//! changing the count under it. This is what made path walking scale in the kernel: every
//! dentry on a path is pinned and unpinned, and before lockref each of those took `d_lock`.
//!
//! # The word
//!
//! | bits    | name     | meaning                                                    |
//! |---------|----------|------------------------------------------------------------|
//! | 0       | `LOCKED` | the spinlock is held; only the holder writes the word      |
//! | 1..=31  | —        | reserved, always zero                                      |
//! | 32..=63 | count    | the reference count, an `i32` in two's complement          |
//!
//! | lock half | count | state                                                       |
//! |-----------|-------|-------------------------------------------------------------|
//! | 0         | n ≥ 1 | live and referenced; gets and puts run lock-free            |
//! | 0         | 0     | live, unreferenced (e.g. a cached dentry nobody uses)       |
//! | 0         | n < 0 | dead ([`DEAD_COUNT`], set by [`LockRefGuard::mark_dead`]):  |
//! |           |       | every conditional get refuses                               |
//! | 1         | any   | locked: the lock-free path keeps off; the holder owns it    |
//!
//! The count sits in the high half so that adding or subtracting `1 << 32` changes the count
//! and nothing else (the carry out of bit 63 is simply lost, which is `i32` wrapping).
//!
//! # Two policies
//!
//! [`RefPolicy::Cmpxchg`] (the default) is lockref. `RefPolicy::Spinlock` (feature
//! `bench-internals`) is the "before" (rule 7 of docs/RULES.md): every operation takes the
//! spinlock, changes the count and unlocks, as the
//! dcache did before lockref. The policy is a plain field next to the word, read once per
//! operation: on the default path the switch costs one well-predicted branch on a value in the
//! same cache line as the word.
//!
//! # Memory ordering
//!
//! - The lock is acquired with an `Acquire` read-modify-write and released with a `Release`
//!   store, like any lock.
//! - The count is a single atomic location, and every change to it is either a successful
//!   compare-and-swap against the current, unlocked word or a store by the lock holder, who is
//!   the only writer while the word is locked. So no update can be lost or doubled whatever the
//!   orderings; the orderings only decide what *else* a thread may rely on after it saw a count.
//! - A refusal (`false`, `None`) reports the count the call saw; it may have moved by the time
//!   the call returns. Every caller of a refused operation falls back to something safe (the
//!   lock, a slower lookup), as in the kernel.
//! - [`LockRef::get`] is `Relaxed`, like `Arc::clone`: the caller already holds a reference (or
//!   the lock), so whatever it may touch is already ordered before it.
//! - Every decrement is `Release` (`put_not_zero`, the lock-free half of `put_or_lock`), so that
//!   a thread which later decides that the object is unused — under the lock, whose `Acquire`
//!   read-modify-write reads from (or after, in the release sequence of) that decrement —
//!   sees everything the putter did while it held its reference. This is the hand-over to the
//!   locked path: `put_or_lock` returns the lock at count 1 precisely so that its caller may
//!   tear the object down.
//! - [`LockRef::put_return`] is `AcqRel`: the caller that sees `Some(0)` owns the last reference
//!   without taking the lock, so it must both publish its own accesses and see everyone else's
//!   (the `Arc::drop` argument).
//! - `get_not_zero` and `get_not_dead` are `Acquire` on success: they are how a lookup that found
//!   the object without holding a reference (under an epoch guard) gains one, so it must see the
//!   state published by whoever last released the object — the unlock that brought the count up
//!   from zero, or the puts before it. On x86 every locked instruction is a full barrier, so none
//!   of this costs anything there; on weaker machines it is what the protocol needs and no more.
//! - Loads that only feed a compare-and-swap, and failed compare-and-swaps, are `Relaxed`: the
//!   compare-and-swap itself decides.
//!
//! # Spinning
//!
//! The lock is test-and-test-and-set: spin on plain loads with [`spin_loop`](crate::sync::loom::spin_loop) until the lock half
//! reads free, then try to set `LOCKED` with a compare-and-swap of the whole word (a failure
//! because a lock-free get or put moved the count meanwhile is retried at once). A compare-and-swap
//! rather than a `fetch_or`, so that nobody but the holder ever writes a locked word: a waiter
//! does not dirty the holder's cache line, and the holder can write the count and unlock with
//! plain stores, as the kernel's `spin_unlock` does. (It also keeps every write to a locked word
//! in one thread's program order, which loom needs to see that a spinning waiter makes progress.)
//!
//! Unlike the kernel's, a user-space lock holder can be preempted. A waiter that has spun for
//! [`SPINS_BEFORE_YIELD`] rounds without seeing the lock free therefore yields its time slice on
//! every further round, so that an oversubscribed machine does not burn whole time slices on a
//! preempted holder (with pure spinning, 16 threads on 2 cores ran the spinlock policy about ten
//! times slower than with the yield). Both policies share this lock; under `Cmpxchg` it is only
//! taken by the callers' locked sections and by the rare fallback of the lock-free loop.

use crate::stats::{self, Event};
use crate::sync::loom::{AtomicU64, Ordering, SpinWait};
use std::fmt;

/// Bit 0: the spinlock.
const LOCKED: u64 = 1;
/// The whole lock half of the word (bits 0..=31).
const LOCK_MASK: u64 = 0xFFFF_FFFF;
/// The count's unit: adding it to the word adds one to the count.
const ONE: u64 = 1 << 32;

/// How many compare-and-swap attempts the lock-free path makes before it takes the lock (the
/// kernel's `CMPXCHG_LOOP` retry budget).
pub const CMPXCHG_TRIES: u32 = 100;

/// How many rounds a waiter for the lock spins on [`spin_loop`](crate::sync::loom::spin_loop) before it starts yielding its time
/// slice on every round.
pub const SPINS_BEFORE_YIELD: u32 = 128;

/// The count that [`LockRefGuard::mark_dead`] stores: negative, and far enough from zero that
/// stray gets and puts cannot bring it back to a live value.
pub const DEAD_COUNT: i32 = -128;

#[inline(always)]
const fn count_of(word: u64) -> i32 {
    (word >> 32) as u32 as i32
}

#[inline(always)]
const fn pack(count: i32, lock: u64) -> u64 {
    ((count as u32 as u64) << 32) | lock
}

/// Which implementation a [`LockRef`] uses (rule 7 of docs/RULES.md): chosen per `LockRef` at
/// construction; the lock-free path is the default. The "before", `Spinlock`, comes with the
/// feature `bench-internals`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RefPolicy {
    /// lockref: compare-and-swap on the whole word while it is unlocked, at most
    /// [`CMPXCHG_TRIES`] attempts, then the lock.
    #[default]
    Cmpxchg,
    /// The "before": every operation takes the test-and-test-and-set lock.
    #[cfg(feature = "bench-internals")]
    Spinlock,
}

/// A spinlock and a signed reference count in one 64-bit word. See the [module
/// documentation](self) for the word layout and the memory orderings.
pub struct LockRef {
    word: AtomicU64,
    policy: RefPolicy,
}

/// What one run of the lock-free loop did.
enum Cas {
    /// The word was changed to this value.
    Done(u64),
    /// The operation's condition was false for the (unlocked) word; nothing was changed.
    Refused,
    /// The lock was seen held, or the retry budget ran out; nothing was changed.
    Busy,
}

impl LockRef {
    /// A `LockRef` holding `count`, unlocked, with the default (lock-free) policy.
    pub fn new(count: i32) -> LockRef {
        LockRef::with_policy(count, RefPolicy::Cmpxchg)
    }

    /// A `LockRef` holding `count`, unlocked, with the given policy.
    pub fn with_policy(count: i32, policy: RefPolicy) -> LockRef {
        LockRef {
            word: AtomicU64::new(pack(count, 0)),
            policy,
        }
    }

    /// The policy chosen at construction.
    #[inline]
    pub fn policy(&self) -> RefPolicy {
        self.policy
    }

    /// The count at some recent moment (racy; for statistics, assertions and tests).
    #[inline]
    pub fn count(&self) -> i32 {
        count_of(self.word.load(Ordering::Relaxed))
    }

    /// Whether the count is negative at some recent moment (racy).
    #[inline]
    pub fn is_dead(&self) -> bool {
        self.count() < 0
    }

    /// Whether the lock is held at some recent moment (racy).
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) & LOCKED != 0
    }

    #[inline(always)]
    fn spinlock(&self) -> bool {
        #[cfg(feature = "bench-internals")]
        return self.policy == RefPolicy::Spinlock;
        #[cfg(not(feature = "bench-internals"))]
        false
    }

    /// The lock-free loop: while the word is unlocked, ask `f` for the new word and try to
    /// install it, at most [`CMPXCHG_TRIES`] times. `f` returns `None` when the operation's
    /// condition is false for the word it was shown.
    #[inline(always)]
    fn cmpxchg_loop(&self, success: Ordering, mut f: impl FnMut(u64) -> Option<u64>) -> Cas {
        let mut old = self.word.load(Ordering::Relaxed);
        let mut tries = CMPXCHG_TRIES;
        while old & LOCK_MASK == 0 {
            let Some(new) = f(old) else {
                return Cas::Refused;
            };
            match self
                .word
                .compare_exchange_weak(old, new, success, Ordering::Relaxed)
            {
                Ok(_) => return Cas::Done(new),
                Err(seen) => old = seen,
            }
            tries -= 1;
            if tries == 0 {
                break;
            }
        }
        Cas::Busy
    }

    /// The lock-free path gave up: count it and take the lock.
    #[cold]
    #[inline(never)]
    fn lock_slow(&self) -> LockRefGuard<'_> {
        stats::count(Event::LockrefSlowPaths);
        self.lock()
    }

    /// Adds one to the count, whatever it is (the caller already holds a reference or knows the
    /// object is live).
    #[inline]
    #[doc(alias = "lockref_get")]
    pub fn get(&self) {
        if !self.spinlock() {
            if let Cas::Done(_) =
                self.cmpxchg_loop(Ordering::Relaxed, |w| Some(w.wrapping_add(ONE)))
            {
                return;
            }
            self.lock_slow().inc();
        } else {
            self.lock().inc();
        }
    }

    /// Adds one to the count unless it is zero or negative (unused or dead). Returns whether a
    /// reference was taken.
    #[inline]
    #[must_use = "false means no reference was taken"]
    #[doc(alias = "lockref_get_not_zero")]
    pub fn get_not_zero(&self) -> bool {
        let mut g = if !self.spinlock() {
            match self.cmpxchg_loop(Ordering::Acquire, |w| {
                (count_of(w) > 0).then(|| w.wrapping_add(ONE))
            }) {
                Cas::Done(_) => return true,
                Cas::Refused => return false,
                Cas::Busy => self.lock_slow(),
            }
        } else {
            self.lock()
        };
        if g.count() > 0 {
            g.inc();
            true
        } else {
            false
        }
    }

    /// Adds one to the count unless it is negative (dead); zero is fine. Returns whether a
    /// reference was taken.
    #[inline]
    #[must_use = "false means no reference was taken"]
    #[doc(alias = "lockref_get_not_dead")]
    pub fn get_not_dead(&self) -> bool {
        if !self.spinlock() {
            match self.cmpxchg_loop(Ordering::Acquire, |w| {
                (count_of(w) >= 0).then(|| w.wrapping_add(ONE))
            }) {
                Cas::Done(_) => true,
                Cas::Refused => false,
                Cas::Busy => self.lock_slow().get_not_dead(),
            }
        } else {
            self.lock().get_not_dead()
        }
    }

    /// Subtracts one from the count only if the result stays at least one. Returns `false`, and
    /// changes nothing, if the count is one or less.
    #[inline]
    #[must_use = "false means the reference was not dropped"]
    #[doc(alias = "lockref_put_not_zero")]
    pub fn put_not_zero(&self) -> bool {
        let mut g = if !self.spinlock() {
            match self.cmpxchg_loop(Ordering::Release, |w| {
                (count_of(w) > 1).then(|| w.wrapping_sub(ONE))
            }) {
                Cas::Done(_) => return true,
                Cas::Refused => return false,
                Cas::Busy => self.lock_slow(),
            }
        } else {
            self.lock()
        };
        if g.count() > 1 {
            g.dec();
            true
        } else {
            false
        }
    }

    /// Subtracts one from the count if it is positive, without ever taking the lock, and
    /// returns the new count (which may be zero). Returns `None`, having changed nothing, if the
    /// count is zero or negative, if the word is locked, or if the compare-and-swap kept losing
    /// races; the caller then falls back to the lock itself.
    ///
    /// Under `RefPolicy::Spinlock` this takes the lock instead, and returns `None` only for a
    /// count that is zero or negative.
    #[inline]
    #[must_use = "None means the reference was not dropped"]
    #[doc(alias = "lockref_put_return")]
    pub fn put_return(&self) -> Option<i32> {
        if !self.spinlock() {
            match self.cmpxchg_loop(Ordering::AcqRel, |w| {
                (count_of(w) > 0).then(|| w.wrapping_sub(ONE))
            }) {
                Cas::Done(new) => Some(count_of(new)),
                Cas::Refused | Cas::Busy => None,
            }
        } else {
            let mut g = self.lock();
            if g.count() > 0 {
                g.dec();
                Some(g.count())
            } else {
                None
            }
        }
    }

    /// Subtracts one from the count if it is greater than one, and returns `None`. Otherwise
    /// (the count is one, zero or dead) returns the lock held, with the count unchanged: the
    /// caller is dropping what may be the last reference and decides under the lock what
    /// happens to the object (the kernel's `dput`).
    #[inline]
    #[must_use = "Some means the reference was not dropped and the lock is held"]
    #[doc(alias = "lockref_put_or_lock")]
    pub fn put_or_lock(&self) -> Option<LockRefGuard<'_>> {
        let mut g = if !self.spinlock() {
            match self.cmpxchg_loop(Ordering::Release, |w| {
                (count_of(w) > 1).then(|| w.wrapping_sub(ONE))
            }) {
                Cas::Done(_) => return None,
                Cas::Refused => self.lock(),
                Cas::Busy => self.lock_slow(),
            }
        } else {
            self.lock()
        };
        if g.count() <= 1 {
            return Some(g);
        }
        g.dec();
        None
    }

    /// Takes the lock, spinning (and, after [`SPINS_BEFORE_YIELD`] rounds, yielding) until it is
    /// free.
    #[inline]
    pub fn lock(&self) -> LockRefGuard<'_> {
        match self.lock_from(self.word.load(Ordering::Relaxed)) {
            Some(g) => g,
            None => self.lock_contended(),
        }
    }

    /// Takes the lock if it is free right now.
    #[inline]
    #[must_use = "dropping the guard unlocks at once"]
    pub fn try_lock(&self) -> Option<LockRefGuard<'_>> {
        self.lock_from(self.word.load(Ordering::Relaxed))
    }

    /// The test-and-set half: starting from a word seen as `w`, and for as long as the word reads
    /// unlocked, try to set `LOCKED` on exactly that word. A failure because a lock-free
    /// operation moved the count is retried at once; `None` once the word is seen locked.
    #[inline(always)]
    fn lock_from(&self, mut w: u64) -> Option<LockRefGuard<'_>> {
        while w & LOCKED == 0 {
            match self.word.compare_exchange_weak(
                w,
                w | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(LockRefGuard::new(self, count_of(w))),
                Err(seen) => w = seen,
            }
        }
        None
    }

    /// The test half: spin on plain loads until the word reads unlocked, then test-and-set.
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) -> LockRefGuard<'_> {
        let mut wait = SpinWait::new(SPINS_BEFORE_YIELD);
        loop {
            wait.wait();
            if let Some(g) = self.lock_from(self.word.load(Ordering::Relaxed)) {
                return g;
            }
        }
    }
}

impl fmt::Debug for LockRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.word.load(Ordering::Relaxed);
        f.debug_struct("LockRef")
            .field("count", &count_of(w))
            .field("locked", &(w & LOCKED != 0))
            .field("policy", &self.policy)
            .finish()
    }
}

/// The lock of a [`LockRef`], held; the count can be read and changed through it. Dropping the
/// guard unlocks (a `Release` store of the final count with the lock half cleared).
///
/// While the lock is held nobody else writes the word: lock-free operations and other lockers
/// alike only compare-and-swap against unlocked values. So the guard keeps the count beside it
/// and writes the whole word with plain stores.
#[must_use = "dropping the guard unlocks at once"]
pub struct LockRefGuard<'a> {
    lockref: &'a LockRef,
    count: i32,
}

impl<'a> LockRefGuard<'a> {
    #[inline]
    fn new(lockref: &'a LockRef, count: i32) -> Self {
        LockRefGuard { lockref, count }
    }

    /// The count (exact: nobody else can change it while the lock is held).
    #[inline]
    pub fn count(&self) -> i32 {
        self.count
    }

    /// Sets the count.
    #[inline]
    pub fn set_count(&mut self, n: i32) {
        self.count = n;
        // Relaxed: only the holder writes the word now; the unlock's Release store publishes.
        self.lockref.word.store(pack(n, LOCKED), Ordering::Relaxed);
    }

    /// Adds one to the count (wrapping, like the lock-free path).
    #[inline]
    pub fn inc(&mut self) {
        self.set_count(self.count.wrapping_add(1));
    }

    /// Subtracts one from the count (wrapping, like the lock-free path).
    #[inline]
    pub fn dec(&mut self) {
        self.set_count(self.count.wrapping_sub(1));
    }

    /// Marks the object dead: the count becomes [`DEAD_COUNT`], and from now on every
    /// conditional get ([`LockRef::get_not_zero`], [`LockRef::get_not_dead`]) refuses.
    #[inline]
    #[doc(alias = "lockref_mark_dead")]
    pub fn mark_dead(&mut self) {
        self.set_count(DEAD_COUNT);
    }

    /// Whether the count is negative (dead).
    #[inline]
    pub fn is_dead(&self) -> bool {
        self.count < 0
    }

    /// Adds one to the count unless it is dead; returns whether it did.
    #[inline]
    #[must_use = "false means no reference was taken"]
    #[doc(alias = "lockref_get_not_dead")]
    pub fn get_not_dead(&mut self) -> bool {
        if self.count < 0 {
            return false;
        }
        self.inc();
        true
    }

    /// The `LockRef` this guard locks.
    #[inline]
    pub fn lockref(&self) -> &'a LockRef {
        self.lockref
    }
}

impl Drop for LockRefGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.lockref
            .word
            .store(pack(self.count, 0), Ordering::Release);
    }
}

impl fmt::Debug for LockRefGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockRefGuard")
            .field("count", &self.count)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
