//! Async waiters on bits of a flag word: futures that wait for a bit to clear or take the lock
//! bit, after the kernel's `wait_page_queue` (the entries that `IOCB_WAITQ` reads and
//! `__folio_lock_async` put on a folio's wait queue instead of sleeping).
//!
//! A future that finds its bit in the way does not park a thread. It puts an *entry* in the
//! async waiter table, hashed by the same key a thread would park on: the bit, whether it waits
//! to take the bit (exclusive: a locker) or for it to clear (shared), whether it asks for
//! hand-off, a ticket (its place in line), and a node shared with the future that holds its
//! [`Waker`] and its state. The entry leaves the table when a waker wakes it or when the future
//! is dropped.
//!
//! # One lock for both populations
//!
//! The waiters bit is sound only if "does anybody still wait on this word?" is answered under
//! one lock for sleeping threads and futures alike: two tables, each deciding on its own that
//! its side is empty, would clear `WAITERS` under the other's waiter and lose its wake-up. So the
//! async table is touched only from closures that run under the parking queue lock of the
//! entry's key — [`parking::unpark_filter`]'s filter and callback (the callback runs under that
//! lock even when no thread is parked), and `park`'s `timed_out` — and the table's own mutexes
//! (one per shard, for keys whose queues hash apart) nest inside it.
//!
//! | step | sleeping thread (`bitwait`) | future (this module) |
//! |---|---|---|
//! | queue | `park`'s `validate`: `fetch_or(WAITERS)`, sleep if the bit is still set | a callback under the key's lock: `fetch_or(WAITERS)`, queue the entry if the bit is still set |
//! | take `WAITERS` back | if it was clear and the thread does not sleep | the same, if the entry is not queued |
//! | wake | `wake_bit`'s filter | `wake_bit`'s callback, before the lock drops |
//! | leave on its own | `timed_out` / cancel | `Drop`, in a callback under the key's lock |
//! | clear `WAITERS` | when neither threads nor entries are left on the key | the same |
//!
//! A ticket (a global counter read under the key's lock) is taken each time a thread parks or an
//! entry is queued, so the two queues of one key merge into one line, oldest first.
//!
//! # Wake-up rules
//!
//! Clearing a bit wakes, under the key's lock, every shared waiter of that bit — threads and
//! futures — and exactly one exclusive waiter: the oldest of either kind. `wake_bit`'s filter
//! meets the threads in line; at the first exclusive thread it compares its ticket with the
//! oldest exclusive entry of the bit, and skips the thread if the entry is older. Its callback
//! then wakes the shared entries and, if no thread took the exclusive wake-up, the oldest
//! exclusive entry. As for threads, a waker that finds the bit set again stops (whoever set it
//! will clear it and wake), and an exclusive waiter that asks for hand-off is woken as the owner:
//! the waker takes [`LOCKED`] for it. The callback clears `WAITERS` exactly when no thread and no
//! entry is left on the key. `WaitPolicy::UnfilteredWakeAll` wakes every entry of its shared
//! queue, as it wakes every thread; `WaitPolicy::AlwaysLookup` has no waiters bit.
//!
//! Woken entries are taken out of the table and marked under the lock; their wakers are called
//! after the lock drops (a waker may run any code). A woken future re-tests its bit when it is
//! polled, and queues again if it lost the race: after [`lock_unfairness`] lost races its entry
//! asks for hand-off, as a sleeping thread's record does.
//!
//! # The states of an entry's node
//!
//! | state | meaning | set by |
//! |---|---|---|
//! | `QUEUED` | the entry is in the table | the future, before it queues the entry under the key's lock |
//! | `WOKEN` | a waker took the entry out: the bit was clear | a waker, under the key's lock |
//! | `HANDOFF` | a waker took the entry out and took `LOCKED` for it: the future owns the lock | a waker, under the key's lock |
//!
//! The future reads the state without the lock (acquire; the waker stores it with release): a
//! state other than `QUEUED` is final until the future queues again. The node's waker is kept
//! current by each poll under the node's own mutex, which the waker also takes to clone it, and
//! the poll re-reads the state after storing the waker: either the waker clones the new waker or
//! the poll sees the entry woken.
//!
//! # Cancellation
//!
//! Dropping a future leaves nothing behind. A queued future takes its entry out under the key's
//! lock (clearing `WAITERS` if it was the last waiter). If a waker got there first, the drop
//! finishes the waker's work: a future handed the lock (`HANDOFF`) unlocks it, waking the next
//! waiter; an exclusive future woken without the lock (`WOKEN`) passes its wake-up on with
//! [`WaitPolicy::wake_bit`], since the waker woke no other locker in its place. A future that
//! completed owns what it waited for (the lock, for [`LockFuture`]), and its drop does nothing.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering as StdOrdering;
use std::sync::atomic::{AtomicU64 as StdAtomicU64, AtomicUsize as StdAtomicUsize};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::stats::{count, Event};
use crate::sync::bitwait::{lock_unfairness, try_lock, WaitPolicy, LOCKED, WAITERS};
use crate::sync::loom::{AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::sync::parking::{self, FilterOp};

/// The entry is in the table.
const QUEUED: usize = 0;
/// A waker took the entry out: the bit was clear when it looked.
const WOKEN: usize = 1;
/// A waker took the entry out and took the lock for it.
const HANDOFF: usize = 2;

/// What an entry shares with its future.
struct Node {
    /// `QUEUED`, `WOKEN` or `HANDOFF`; see the module documentation.
    state: AtomicUsize,
    /// The waker of the future's latest poll.
    waker: Mutex<Option<Waker>>,
}

/// One queued future: the async sibling of a parked thread's `Waiter` record (the kernel's
/// `wait_page_queue`).
struct Entry {
    /// The wait-table key (the word's address, or a shared queue's).
    key: usize,
    /// The bit waited on.
    bit: u64,
    /// Whether it waits to take the bit (a locker).
    exclusive: bool,
    /// Whether a waker should take the lock on its behalf.
    handoff: bool,
    /// Its place in line among the threads and entries of its key.
    ticket: u64,
    node: Arc<Node>,
}

/// Hands out tickets: taken under a key's queue lock, so that each key's threads and entries are
/// numbered in the order they queued.
static TICKETS: crossbeam_utils::CachePadded<StdAtomicU64> =
    crossbeam_utils::CachePadded::new(StdAtomicU64::new(0));

/// A new ticket, for a thread about to park or an entry about to be queued (under the key's
/// lock).
#[inline]
pub(super) fn next_ticket() -> u64 {
    TICKETS.fetch_add(1, StdOrdering::Relaxed)
}

/// One shard of the async table: the entries of the keys that hash to it, oldest first.
///
/// Every access is made under the parking queue lock of the entry's key (see the module
/// documentation); the mutex only keeps apart keys whose queue locks differ. It is `std`'s even
/// under loom: the loom stand-in for the wait table has one queue lock for every key, so the
/// mutex is never contended there, and loom sees the ordering through the queue lock.
struct Shard {
    /// How many entries the shard holds: written under `entries`' lock, read without it under a
    /// key's queue lock (every entry of that key was added and is removed under that lock, so a
    /// zero means none of them is there).
    len: StdAtomicUsize,
    entries: std::sync::Mutex<Vec<Entry>>,
}

impl Shard {
    const fn new() -> Shard {
        Shard {
            len: StdAtomicUsize::new(0),
            entries: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Whether the shard may hold entries (false: it holds none of the caller's key).
    #[inline]
    fn maybe_any(&self) -> bool {
        self.len.load(StdOrdering::Relaxed) != 0
    }

    fn lock(&self) -> ShardGuard<'_> {
        #[cfg(loom)]
        let entries = match self.entries.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                panic!("the async waiter table was touched outside the wait-table lock")
            }
        };
        #[cfg(not(loom))]
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ShardGuard {
            len: &self.len,
            entries,
        }
    }
}

/// A locked shard; keeps `len` equal to the number of entries.
struct ShardGuard<'a> {
    len: &'a StdAtomicUsize,
    entries: std::sync::MutexGuard<'a, Vec<Entry>>,
}

impl ShardGuard<'_> {
    fn push(&mut self, e: Entry) {
        self.entries.push(e);
        self.len.store(self.entries.len(), StdOrdering::Relaxed);
    }

    /// Takes out the `i`th entry, keeping the order of the rest.
    fn remove(&mut self, i: usize) -> Entry {
        let e = self.entries.remove(i);
        self.len.store(self.entries.len(), StdOrdering::Relaxed);
        e
    }

    fn any_of(&self, key: usize) -> bool {
        self.entries.iter().any(|e| e.key == key)
    }
}

#[cfg(not(loom))]
const SHARDS: usize = 64;

#[cfg(not(loom))]
static TABLE: [crossbeam_utils::CachePadded<Shard>; SHARDS] =
    [const { crossbeam_utils::CachePadded::new(Shard::new()) }; SHARDS];

/// The shard of `key`.
#[cfg(not(loom))]
#[inline]
fn shard(key: usize) -> &'static Shard {
    let h = (key >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
    &TABLE[h % SHARDS]
}

#[cfg(loom)]
loom::lazy_static! {
    // One shard, made afresh for each model execution.
    static ref TABLE: Shard = Shard::new();
}

/// The shard of `key`.
#[cfg(loom)]
fn shard(_key: usize) -> &'static Shard {
    &TABLE
}

/// Whether any future waits on `key`. Call under `key`'s queue lock.
pub(super) fn any_waiting(key: usize) -> bool {
    let s = shard(key);
    s.maybe_any() && s.lock().any_of(key)
}

/// How many futures wait on `key`. Call under `key`'s queue lock.
#[cfg(loom)]
pub(super) fn waiting(key: usize) -> usize {
    let s = shard(key);
    if !s.maybe_any() {
        return 0;
    }
    s.lock().entries.iter().filter(|e| e.key == key).count()
}

/// Who got the one exclusive wake-up of a clear.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Exclusive {
    /// Not decided yet.
    Undecided,
    /// A parked thread.
    Thread,
    /// The oldest exclusive entry, older than every exclusive thread of the bit.
    Entry,
}

/// The async half of one [`WaitPolicy::wake_bit`]: its methods run in `wake_bit`'s filter and
/// callback, under the key's queue lock; [`Wake::finish`] calls the wakers after that lock drops.
pub(super) struct Wake<'a> {
    key: usize,
    word: &'a AtomicU64,
    bit: u64,
    exclusive: Cell<Exclusive>,
    /// The nodes woken, whose wakers [`Wake::finish`] calls.
    woken: RefCell<Vec<Arc<Node>>>,
}

impl<'a> Wake<'a> {
    pub(super) fn new(key: usize, word: &'a AtomicU64, bit: u64) -> Wake<'a> {
        Wake {
            key,
            word,
            bit,
            exclusive: Cell::new(Exclusive::Undecided),
            woken: RefCell::new(Vec::new()),
        }
    }

    /// For the filter, at the first exclusive thread of the bit (its ticket `ticket`): whether
    /// that thread takes the exclusive wake-up, or an older exclusive entry does (then the
    /// callback wakes it, and the filter skips every exclusive thread).
    pub(super) fn thread_goes_first(&self, ticket: u64) -> bool {
        let s = shard(self.key);
        let older = s.maybe_any()
            && s.lock().entries.iter().any(|e| {
                e.key == self.key && e.bit == self.bit && e.exclusive && e.ticket < ticket
            });
        self.exclusive.set(if older {
            Exclusive::Entry
        } else {
            Exclusive::Thread
        });
        !older
    }

    /// For the callback: wakes the entries of the bit by the rules of the module documentation.
    /// Returns whether any entry is left on the key.
    pub(super) fn wake(&self) -> bool {
        let s = shard(self.key);
        if !s.maybe_any() {
            return false;
        }
        let mut t = s.lock();
        let mut woken = self.woken.borrow_mut();
        let mut exclusive_done = self.exclusive.get() == Exclusive::Thread;
        let mut left = false;
        let mut i = 0;
        while i < t.entries.len() {
            let e = &t.entries[i];
            if e.key != self.key {
                i += 1;
                continue;
            }
            if e.bit != self.bit || (e.exclusive && exclusive_done) {
                left = true;
                i += 1;
                continue;
            }
            if self.word.load(Ordering::Relaxed) & self.bit != 0 {
                // Set again (stolen, handed off, a new write-back): whoever set it wakes the
                // rest when it clears it.
                left = true;
                break;
            }
            let state = if e.exclusive {
                exclusive_done = true;
                if e.handoff {
                    if !broken::is(broken::HANDOFF_WITHOUT_LOCK)
                        && self.word.fetch_or(LOCKED, Ordering::Acquire) & LOCKED != 0
                    {
                        left = true;
                        break;
                    }
                    HANDOFF
                } else {
                    WOKEN
                }
            } else {
                WOKEN
            };
            let e = t.remove(i);
            // Release: pairs with the future's acquire load; with `HANDOFF` it passes on what
            // our acquire `fetch_or` of the lock saw.
            e.node.state.store(state, Ordering::Release);
            woken.push(e.node);
        }
        left
    }

    /// For the callback of `WaitPolicy::UnfilteredWakeAll`: wakes every entry of the (shared)
    /// key, to re-test and queue again. Returns whether any is left (never).
    pub(super) fn wake_all(&self) -> bool {
        let s = shard(self.key);
        if !s.maybe_any() {
            return false;
        }
        let mut t = s.lock();
        let mut woken = self.woken.borrow_mut();
        let mut i = 0;
        while i < t.entries.len() {
            if t.entries[i].key != self.key {
                i += 1;
                continue;
            }
            let e = t.remove(i);
            e.node.state.store(WOKEN, Ordering::Release);
            woken.push(e.node);
        }
        false
    }

    /// Calls the wakers of the woken entries. Call after the queue lock dropped.
    pub(super) fn finish(self) {
        for node in self.woken.into_inner() {
            // Clone, and wake without the node's lock: the waker may poll the future at once.
            let waker = node.waker.lock().clone();
            if let Some(w) = waker {
                w.wake();
            }
        }
    }
}

/// The common part of [`LockFuture`] and [`WaitClearFuture`].
struct Wait<'a> {
    word: &'a AtomicU64,
    bit: u64,
    exclusive: bool,
    policy: WaitPolicy,
    /// The node of this future's entry: made at the first queueing, reused by the later ones.
    node: Option<Arc<Node>>,
    /// Whether an entry was queued and the future has not yet seen it woken (or taken it out).
    queued: bool,
    /// Whether the last entry was woken (a failed re-test after it is a spurious wake-up).
    woken: bool,
    /// How many races for the lock this locker lost after being woken.
    lost_races: u32,
    done: bool,
}

impl<'a> Wait<'a> {
    fn new(word: &'a AtomicU64, bit: u64, exclusive: bool, policy: WaitPolicy) -> Wait<'a> {
        debug_assert!(bit.is_power_of_two() && bit != WAITERS);
        debug_assert!(!exclusive || bit == LOCKED);
        Wait {
            word,
            bit,
            exclusive,
            policy,
            node: None,
            queued: false,
            woken: false,
            lost_races: 0,
            done: false,
        }
    }

    fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        assert!(!self.done, "a bitwait future was polled after it completed");
        loop {
            if self.queued {
                let node = self.node.as_ref().expect("a queued wait has a node");
                match node.state.load(Ordering::Acquire) {
                    QUEUED => {
                        {
                            let mut w = node.waker.lock();
                            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                                *w = Some(cx.waker().clone());
                            }
                        }
                        // A waker that cloned the old waker before we stored ours had marked
                        // the entry first: look again.
                        if node.state.load(Ordering::Acquire) == QUEUED {
                            return Poll::Pending;
                        }
                        continue;
                    }
                    HANDOFF => {
                        // The waker took the lock for us with acquire ordering, and its release
                        // store of the state passed that on.
                        self.queued = false;
                        self.done = true;
                        count(Event::Wakeups);
                        count(Event::LockHandoffs);
                        return Poll::Ready(());
                    }
                    _ => {
                        self.queued = false;
                        self.woken = true;
                        count(Event::Wakeups);
                    }
                }
            }
            let got = if self.exclusive {
                try_lock(self.word)
            } else {
                self.word.load(Ordering::Acquire) & self.bit == 0
            };
            if got {
                self.done = true;
                return Poll::Ready(());
            }
            if self.woken {
                self.woken = false;
                count(Event::SpuriousWakeups);
                if self.exclusive {
                    self.lost_races += 1;
                }
            }
            let handoff =
                self.exclusive && !self.policy.wakes_all() && self.lost_races >= lock_unfairness();
            if self.queue(handoff, cx.waker()) {
                self.queued = true;
                return Poll::Pending;
            }
            // The bit was clear under the lock: test it again.
        }
    }

    /// Queues an entry if the bit is still set, under the key's queue lock (setting `WAITERS`
    /// first, as a sleeping thread's `validate` does). Returns whether it was queued.
    fn queue(&mut self, handoff: bool, waker: &Waker) -> bool {
        let node = self.node.get_or_insert_with(|| {
            Arc::new(Node {
                state: AtomicUsize::new(QUEUED),
                waker: Mutex::new(None),
            })
        });
        {
            // The node is in no table: only a late waker of its last entry may still clone the
            // waker (a spurious wake-up at worst).
            let mut w = node.waker.lock();
            if !w.as_ref().is_some_and(|w| w.will_wake(waker)) {
                *w = Some(waker.clone());
            }
        }
        node.state.store(QUEUED, Ordering::Relaxed);
        let key = self.policy.key(self.word);
        let uses_bit = self.policy.uses_waiters_bit() && !broken::is(broken::QUEUE_WITHOUT_WAITERS);
        let (word, bit, exclusive) = (self.word, self.bit, self.exclusive);
        let mut queued = false;
        count(Event::WaitTableLookups);
        // `Stop` at the first thread of the key: we wake nobody, we only want the lock.
        parking::unpark_filter(
            key,
            |_| FilterOp::Stop,
            |_| {
                let now = if uses_bit {
                    word.fetch_or(WAITERS, Ordering::Relaxed)
                } else {
                    word.load(Ordering::Relaxed)
                };
                if now & bit != 0 {
                    shard(key).lock().push(Entry {
                        key,
                        bit,
                        exclusive,
                        handoff,
                        ticket: next_ticket(),
                        node: node.clone(),
                    });
                    queued = true;
                } else if uses_bit && now & WAITERS == 0 {
                    // We set WAITERS and queue nothing after all; nobody else waits on the word
                    // (a waiter would have set it), and nobody can start to while we hold the
                    // queue's lock: take it back.
                    word.fetch_and(!WAITERS, Ordering::Relaxed);
                }
                0
            },
        );
        if queued {
            count(Event::AsyncWaits);
        }
        queued
    }

    /// Takes a queued entry out of the table, and finishes whatever a waker that got there first
    /// started (see "Cancellation" in the module documentation).
    fn cancel(&mut self) {
        if !self.queued {
            return;
        }
        self.queued = false;
        let node = self.node.as_ref().expect("a queued wait has a node");
        let mut state = node.state.load(Ordering::Acquire);
        if state == QUEUED {
            let key = self.policy.key(self.word);
            let uses_bit = self.policy.uses_waiters_bit();
            let word = self.word;
            count(Event::WaitTableLookups);
            parking::unpark_filter(
                key,
                // Stop at the first thread of the key: `have_more` then says whether there is one.
                |_| FilterOp::Stop,
                |res| {
                    let mut t = shard(key).lock();
                    if let Some(i) = t.entries.iter().position(|e| Arc::ptr_eq(&e.node, node)) {
                        t.remove(i);
                        if uses_bit && !res.have_more && !t.any_of(key) {
                            word.fetch_and(!WAITERS, Ordering::Relaxed);
                        }
                    }
                    0
                },
            );
            // Out of the table now: no waker can change it any more.
            state = node.state.load(Ordering::Acquire);
        }
        match state {
            HANDOFF if !broken::is(broken::DROP_KEEPS_HANDOFF) => {
                // We own the lock the waker took for us: pass it on.
                count(Event::LockHandoffs);
                self.policy.unlock(self.word);
            }
            WOKEN
                if self.exclusive
                    && !self.policy.wakes_all()
                    && !broken::is(broken::DROP_SWALLOWS_WAKE) =>
            {
                // We were the one locker this clear woke: wake the next in our place.
                self.policy.wake_bit(self.word, self.bit);
            }
            _ => {}
        }
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl std::fmt::Debug for Wait<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wait")
            .field("bit", &self.bit)
            .field("exclusive", &self.exclusive)
            .field("policy", &self.policy)
            .field("queued", &self.queued)
            .field("done", &self.done)
            .finish()
    }
}

/// Takes the lock bit of a word: the future of [`lock_async`] and [`WaitPolicy::lock_async`].
///
/// Completes owning the lock (acquire ordering): the caller unlocks it with
/// [`unlock`](crate::sync::bitwait::unlock) as after [`lock`](crate::sync::bitwait::lock).
/// Dropped before it completes, it leaves no waiter behind and holds no lock — a lock handed to
/// it meanwhile is unlocked and passed on.
#[doc(alias("wait_page_queue", "IOCB_WAITQ"))]
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct LockFuture<'a>(Wait<'a>);

impl Future for LockFuture<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().0.poll_wait(cx)
    }
}

/// Waits for a bit of a word to clear: the future of [`wait_clear_async`] and
/// [`WaitPolicy::wait_clear_async`].
///
/// Completes once it saw the bit clear (acquire ordering). Dropped before, it leaves no waiter
/// behind.
#[doc(alias("wait_page_queue", "IOCB_WAITQ"))]
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct WaitClearFuture<'a>(Wait<'a>);

impl Future for WaitClearFuture<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().0.poll_wait(cx)
    }
}

impl WaitPolicy {
    /// Takes the lock bit without blocking a thread: the future completes owning the lock. The
    /// first poll tries the lock; a contended one queues an async waiter, woken by the rules of
    /// the sleeping lockers (one locker per unlock, oldest first, hand-off after
    /// [`lock_unfairness`] lost races).
    #[inline]
    #[doc(alias("folio_lock_async", "__folio_lock_async"))]
    pub fn lock_async(self, word: &AtomicU64) -> LockFuture<'_> {
        LockFuture(Wait::new(word, LOCKED, true, self))
    }

    /// Waits for `bit` to clear without blocking a thread (acquire ordering on completion).
    #[inline]
    #[doc(alias = "folio_wait_bit")]
    pub fn wait_clear_async(self, word: &AtomicU64, bit: u64) -> WaitClearFuture<'_> {
        WaitClearFuture(Wait::new(word, bit, false, self))
    }
}

/// Takes the lock bit without blocking a thread: the future completes owning the lock. See
/// [`WaitPolicy::lock_async`].
///
/// ```
/// use quire::sync::bitwait::{lock_async, unlock};
/// use std::future::Future;
/// use std::sync::atomic::AtomicU64;
/// use std::task::{Context, Poll, Waker};
///
/// let word = AtomicU64::new(0);
/// let mut fut = std::pin::pin!(lock_async(&word));
/// // Uncontended: the first poll takes the lock.
/// assert_eq!(fut.as_mut().poll(&mut Context::from_waker(Waker::noop())), Poll::Ready(()));
/// unlock(&word);
/// ```
#[inline]
#[doc(alias("folio_lock_async", "__folio_lock_async"))]
pub fn lock_async(word: &AtomicU64) -> LockFuture<'_> {
    WaitPolicy::Exact.lock_async(word)
}

/// Waits for `bit` to clear without blocking a thread: "wait for write-back" for async callers.
/// See [`WaitPolicy::wait_clear_async`].
#[inline]
#[doc(alias = "folio_wait_bit")]
pub fn wait_clear_async(word: &AtomicU64, bit: u64) -> WaitClearFuture<'_> {
    WaitPolicy::Exact.wait_clear_async(word, bit)
}

/// Deliberately broken variants of the protocol, for the loom models
/// (`tests/loom_bitwait_async.rs`) to catch; each is off unless a model turns it on. Never
/// broken outside loom.
#[doc(hidden)]
// Reachable only under loom (`bitwait::async_broken`).
#[cfg_attr(not(loom), allow(unreachable_pub))]
pub mod broken {
    /// Queueing does not set `WAITERS`: an unlock does not look for the entry.
    pub const QUEUE_WITHOUT_WAITERS: usize = 1;
    /// A hand-off wakes the future as the owner without taking the lock for it.
    pub const HANDOFF_WITHOUT_LOCK: usize = 2;
    /// A dropped future keeps a lock handed to it.
    pub const DROP_KEEPS_HANDOFF: usize = 4;
    /// A dropped locker woken without the lock does not pass its wake-up on.
    pub const DROP_SWALLOWS_WAKE: usize = 8;
    /// `wake_bit` clears `WAITERS` when no thread is left, forgetting the futures.
    pub const WAKE_FORGETS_FUTURES: usize = 16;

    crate::sync::loom::broken_switches!();
}

#[cfg(all(test, not(loom)))]
mod tests;
