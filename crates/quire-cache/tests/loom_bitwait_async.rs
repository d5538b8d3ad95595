//! Loom models of bitwait's async waiters (`quire::sync::bitwait::{lock_async,
//! wait_clear_async}`, `sync/bitwait_async.rs`) over the loom stand-in for the wait table:
//! futures queue and are woken under the same queue lock as sleeping threads, so that
//!
//! - a future queueing while the lock is released is never forgotten (a lost wake-up leaves
//!   `block_on` parked for ever, which loom reports as a deadlock);
//! - a lock handed off to a future is taken for it, so it completes as the only owner (loom
//!   reports two owners' accesses to the data as a race);
//! - a future dropped while a waker hands it the lock unlocks it, and one dropped after it was
//!   woken passes its wake-up on to the next locker;
//! - `WAITERS` stays set while a thread or a future waits, and a clear that wakes the last
//!   thread does not clear it under a queued future;
//! - and at the end nobody waits, no lock is held and `WAITERS` is clear.
//!
//! Each model also runs against a deliberately broken variant of the protocol
//! (`quire::sync::bitwait::async_broken`) and must fail there.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 CARGO_TARGET_DIR=target/loom cargo test -p quire-cache --release --test loom_bitwait_async -- --test-threads=1`
//! (one at a time: the models set the process-wide lock unfairness).
#![cfg(loom)]

use std::future::Future;
use std::task::{Context, Poll, Wake, Waker};

use loom::cell::UnsafeCell;
// std's Arc, not loom's: a model that fails by deadlock unwinds its threads, and a loom Arc may
// not be dropped while loom tears an execution down.
use loom::thread;
use quire::sync::bitwait::{self, async_broken as broken, LOCKED};
use quire::sync::loom::{AtomicU64, Ordering};
use std::sync::Arc;

mod loom_support;
use loom_support::{fails, model};

const WRITEBACK: u64 = 1 << 4;

struct Shared {
    word: AtomicU64,
    data: UnsafeCell<u32>,
}

// SAFETY: `data` is only touched while holding the bit lock in `word` (or after every other
// thread was joined); loom checks exactly that, and reports any access the lock does not order.
unsafe impl Sync for Shared {}

impl Shared {
    fn new(word: u64) -> Arc<Shared> {
        Arc::new(Shared {
            word: AtomicU64::new(word),
            data: UnsafeCell::new(0),
        })
    }

    /// The critical section: loom flags any access that the lock does not order.
    fn bump(&self) {
        // SAFETY: called only while holding the bit lock, so no other thread touches `data`.
        self.data.with_mut(|d| unsafe { *d += 1 });
    }

    fn data(&self) -> u32 {
        // SAFETY: called once every thread that wrote `data` was joined.
        self.data.with(|d| unsafe { *d })
    }
}

/// Runs a future on this loom thread, parking between polls (loom's own `block_on` needs its
/// `futures` feature). A wake-up that never comes leaves the thread parked: loom reports a
/// deadlock.
fn block_on<F: Future>(f: F) -> F::Output {
    struct Unparker(thread::Thread);
    impl Wake for Unparker {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    /// Leaks the future if loom unwinds this thread (a failed model): its drop would run the
    /// protocol again inside an execution that is being torn down.
    struct LeakOnUnwind<F>(Option<std::pin::Pin<Box<F>>>);
    impl<F> Drop for LeakOnUnwind<F> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                std::mem::forget(self.0.take());
            }
        }
    }
    let waker = Waker::from(std::sync::Arc::new(Unparker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = LeakOnUnwind(Some(Box::pin(f)));
    loop {
        if let Poll::Ready(v) = f.0.as_mut().expect("a future").as_mut().poll(&mut cx) {
            return v;
        }
        thread::park();
    }
}

loom::lazy_static! {
    /// Whether this execution checks the waiters invariant midway (`invariant`).
    static ref MIDWAY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
}

/// Every model's start: the variants in `which` broken, the lock unfairness set. A broken
/// variant is also run with `midway` false, so that it must be caught by what the bug does (a
/// lost wake-up, a leaked lock, a race), not only by the invariant check.
fn start(which: usize, unfairness: u32, midway: bool) {
    broken::set(which);
    bitwait::set_lock_unfairness(unfairness);
    MIDWAY.store(midway, std::sync::atomic::Ordering::Relaxed);
}

/// Checks "WAITERS is set while a thread or a future waits on the word", under the queue lock.
fn invariant(word: &AtomicU64) {
    if MIDWAY.load(std::sync::atomic::Ordering::Relaxed) {
        assert!(
            bitwait::waiters_invariant_holds(word),
            "somebody waits but WAITERS is clear"
        );
    }
}

/// Every model's end: nobody waits, the lock is free, `WAITERS` is clear.
fn end(word: &AtomicU64) {
    assert_eq!(bitwait::waiters(word), (0, 0), "nobody is left waiting");
    assert_eq!(
        word.load(Ordering::Relaxed),
        0,
        "no lock and no WAITERS left"
    );
}

/// Polls the lock future once, with a waker that does nothing, and drops it; unlocks if the
/// poll took the lock. Returns whether it did.
fn lock_once_then_drop(word: &AtomicU64) -> bool {
    let mut f = Box::pin(bitwait::lock_async(word));
    let got = f.as_mut().poll(&mut Context::from_waker(Waker::noop())) == Poll::Ready(());
    invariant(word);
    drop(f);
    if got {
        bitwait::unlock(word);
    }
    invariant(word);
    got
}

/// A future locks while the owner unlocks (and, with `sleeper`, a thread locks too): whether
/// the future queues before the unlock's `fetch_and` (then the unlock sees WAITERS and wakes
/// it) or after (then it sees the lock free under the queue lock and tries again), it completes
/// owning the lock.
fn queueing_racing_an_unlock(which: usize, sleeper: bool, midway: bool) {
    start(which, 5, midway);
    let s = Shared::new(LOCKED);
    let fut = {
        let s = s.clone();
        thread::spawn(move || {
            block_on(bitwait::lock_async(&s.word));
            s.bump();
            bitwait::unlock(&s.word);
            invariant(&s.word);
        })
    };
    let locker = sleeper.then(|| {
        let s = s.clone();
        thread::spawn(move || {
            bitwait::lock(&s.word);
            s.bump();
            bitwait::unlock(&s.word);
        })
    });
    // The word starts locked by this thread.
    s.bump();
    bitwait::unlock(&s.word);
    invariant(&s.word);
    fut.join().unwrap();
    if let Some(t) = locker {
        t.join().unwrap();
    }
    assert_eq!(s.data(), 2 + u32::from(sleeper));
    end(&s.word);
}

#[test]
fn queueing_racing_an_unlock_is_never_lost() {
    model(|| queueing_racing_an_unlock(0, false, true));
}

#[test]
fn queueing_beside_a_sleeper_racing_an_unlock_is_never_lost() {
    model(|| queueing_racing_an_unlock(0, true, true));
}

#[test]
fn broken_queueing_without_waiters_is_caught() {
    // By the invariant check, and without it by the lost wake-up (a deadlock).
    assert!(fails(|| queueing_racing_an_unlock(
        broken::QUEUE_WITHOUT_WAITERS,
        false,
        true
    )));
    assert!(fails(|| queueing_racing_an_unlock(
        broken::QUEUE_WITHOUT_WAITERS,
        false,
        false
    )));
}

/// With unfairness 0 every queued future asks for hand-off: the unlock takes the lock for it
/// while a thread races for the lock (by `try_lock`, then as a sleeper asking for hand-off too).
fn hand_off_racing_a_locker(which: usize) {
    start(which, 0, true);
    let s = Shared::new(LOCKED);
    let fut = {
        let s = s.clone();
        thread::spawn(move || {
            block_on(bitwait::lock_async(&s.word));
            s.bump();
            bitwait::unlock(&s.word);
            invariant(&s.word);
        })
    };
    let locker = {
        let s = s.clone();
        thread::spawn(move || {
            bitwait::lock(&s.word);
            s.bump();
            bitwait::unlock(&s.word);
            invariant(&s.word);
        })
    };
    s.bump();
    bitwait::unlock(&s.word);
    fut.join().unwrap();
    locker.join().unwrap();
    assert_eq!(s.data(), 3);
    end(&s.word);
    bitwait::set_lock_unfairness(5);
}

#[test]
fn hand_off_to_a_future_racing_a_locker() {
    model(|| hand_off_racing_a_locker(0));
}

#[test]
fn broken_hand_off_without_the_lock_is_caught() {
    assert!(fails(|| hand_off_racing_a_locker(
        broken::HANDOFF_WITHOUT_LOCK
    )));
    bitwait::set_lock_unfairness(5);
}

/// A future queued with hand-off is dropped while the owner unlocks: the unlock may hand it the
/// lock just before the drop takes its entry out; the drop must then unlock.
fn drop_racing_a_hand_off(which: usize, midway: bool) {
    start(which, 0, midway);
    let w = Arc::new(AtomicU64::new(LOCKED));
    let t = {
        let w = w.clone();
        thread::spawn(move || {
            lock_once_then_drop(&w);
        })
    };
    bitwait::unlock(&w);
    t.join().unwrap();
    end(&w);
    bitwait::set_lock_unfairness(5);
}

#[test]
fn drop_racing_a_hand_off_leaks_no_lock() {
    model(|| drop_racing_a_hand_off(0, true));
}

#[test]
fn broken_drop_keeping_a_handed_off_lock_is_caught() {
    assert!(fails(|| drop_racing_a_hand_off(
        broken::DROP_KEEPS_HANDOFF,
        false
    )));
    bitwait::set_lock_unfairness(5);
}

/// A future and a sleeping thread wait for the lock; the unlock wakes one of them — the future
/// if it queued first — and the future is dropped: if it was the one woken, it must wake the
/// thread in its place.
fn drop_racing_a_wake(which: usize, midway: bool) {
    start(which, 5, midway);
    let w = Arc::new(AtomicU64::new(LOCKED));
    let fut = {
        let w = w.clone();
        thread::spawn(move || {
            lock_once_then_drop(&w);
        })
    };
    let locker = {
        let w = w.clone();
        thread::spawn(move || {
            bitwait::lock(&w);
            bitwait::unlock(&w);
        })
    };
    bitwait::unlock(&w);
    fut.join().unwrap();
    locker.join().unwrap();
    end(&w);
}

#[test]
fn drop_racing_a_wake_passes_it_on() {
    model(|| drop_racing_a_wake(0, true));
}

#[test]
fn broken_drop_swallowing_a_wake_is_caught() {
    assert!(fails(|| drop_racing_a_wake(
        broken::DROP_SWALLOWS_WAKE,
        false
    )));
}

/// A future waits for the lock and a thread for write-back on one word: ending the write-back
/// wakes the last sleeping thread, but WAITERS must stay set for the future, or the unlock
/// would not look for it.
fn threads_and_futures_share_waiters(which: usize, midway: bool) {
    start(which, 5, midway);
    let w = Arc::new(AtomicU64::new(LOCKED | WRITEBACK));
    let fut = {
        let w = w.clone();
        thread::spawn(move || {
            block_on(bitwait::lock_async(&w));
            invariant(&w);
            bitwait::unlock(&w);
        })
    };
    let sleeper = {
        let w = w.clone();
        thread::spawn(move || {
            bitwait::wait_clear(&w, WRITEBACK);
            invariant(&w);
        })
    };
    bitwait::clear_and_wake(&w, WRITEBACK);
    invariant(&w);
    bitwait::unlock(&w);
    fut.join().unwrap();
    sleeper.join().unwrap();
    end(&w);
}

#[test]
fn threads_and_futures_share_the_waiters_bit() {
    model(|| threads_and_futures_share_waiters(0, true));
}

#[test]
fn broken_wake_forgetting_futures_is_caught() {
    // By the invariant check, and without it by the lost wake-up (a deadlock).
    assert!(fails(|| threads_and_futures_share_waiters(
        broken::WAKE_FORGETS_FUTURES,
        true
    )));
    assert!(fails(|| threads_and_futures_share_waiters(
        broken::WAKE_FORGETS_FUTURES,
        false
    )));
}

/// Async waiters of write-back are all woken by its end, while an async locker of the same word
/// is not (it waits for the other bit), and WAITERS is cleared once both are gone.
#[test]
fn shared_async_waiters_of_one_bit() {
    model(|| {
        start(0, 5, true);
        let w = Arc::new(AtomicU64::new(LOCKED | WRITEBACK));
        let waiter = {
            let w = w.clone();
            thread::spawn(move || {
                block_on(bitwait::wait_clear_async(&w, WRITEBACK));
                assert_eq!(w.load(Ordering::Acquire) & WRITEBACK, 0);
            })
        };
        let locker = {
            let w = w.clone();
            thread::spawn(move || {
                block_on(bitwait::lock_async(&w));
                bitwait::unlock(&w);
            })
        };
        bitwait::clear_and_wake(&w, WRITEBACK);
        bitwait::unlock(&w);
        waiter.join().unwrap();
        locker.join().unwrap();
        end(&w);
    });
}
