use super::*;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

const WRITEBACK: u64 = 1 << 4;

#[test]
fn uncontended_lock_unlock_never_sets_waiters() {
    let w = AtomicU64::new(0);
    for _ in 0..1000 {
        lock(&w);
        assert_eq!(w.load(Ordering::Relaxed), LOCKED);
        unlock(&w);
        assert_eq!(w.load(Ordering::Relaxed), 0);
    }
}

#[test]
fn try_lock_and_other_bits_survive() {
    let w = AtomicU64::new(1 << 10);
    assert!(try_lock(&w));
    assert!(!try_lock(&w));
    unlock(&w);
    assert_eq!(w.load(Ordering::Relaxed), 1 << 10);
    assert!(!set_bit(&w, WRITEBACK));
    assert!(set_bit(&w, WRITEBACK));
    clear_and_wake(&w, WRITEBACK);
    assert_eq!(w.load(Ordering::Relaxed), 1 << 10);
}

/// Many threads increment a plain counter under the bit lock; every policy must keep mutual
/// exclusion and lose no wake-up (the test would hang).
fn mutual_exclusion(policy: WaitPolicy, threads: usize, iters: usize) {
    struct Shared {
        word: AtomicU64,
        value: std::cell::UnsafeCell<u64>,
    }
    // SAFETY: `value` is only touched while holding the bit lock.
    unsafe impl Sync for Shared {}
    let s = Arc::new(Shared {
        word: AtomicU64::new(0),
        value: std::cell::UnsafeCell::new(0),
    });
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let s = &s;
            scope.spawn(move || {
                for _ in 0..iters {
                    policy.lock(&s.word);
                    // SAFETY: we hold the lock.
                    unsafe { *s.value.get() += 1 };
                    policy.unlock(&s.word);
                }
            });
        }
    });
    // SAFETY: every thread has finished.
    assert_eq!(unsafe { *s.value.get() }, (threads * iters) as u64);
    assert_eq!(s.word.load(Ordering::Relaxed) & LOCKED, 0);
}

#[test]
fn mutual_exclusion_exact() {
    mutual_exclusion(WaitPolicy::Exact, 8, 5000);
}

#[test]
fn mutual_exclusion_always_lookup() {
    mutual_exclusion(WaitPolicy::AlwaysLookup, 8, 5000);
}

#[test]
fn mutual_exclusion_unfiltered_wake_all() {
    mutual_exclusion(WaitPolicy::UnfilteredWakeAll, 8, 5000);
}

#[test]
fn wait_clear_wakes_all_shared_waiters() {
    let w = Arc::new(AtomicU64::new(WRITEBACK));
    let done = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let (w, done) = (w.clone(), done.clone());
            std::thread::spawn(move || {
                wait_clear(&w, WRITEBACK);
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
        })
        .collect();
    // Let them sleep; correctness does not depend on it, only what this test exercises.
    while w.load(Ordering::Relaxed) & WAITERS == 0 {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(done.load(std::sync::atomic::Ordering::SeqCst), 0);
    clear_and_wake(&w, WRITEBACK);
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(done.load(std::sync::atomic::Ordering::SeqCst), 4);
    assert_eq!(
        w.load(Ordering::Relaxed) & WAITERS,
        0,
        "WAITERS cleared exactly"
    );
}

#[test]
fn waiting_on_another_bit_is_not_woken_by_unlock() {
    let w = Arc::new(AtomicU64::new(WRITEBACK | LOCKED));
    let h = {
        let w = w.clone();
        std::thread::spawn(move || wait_clear(&w, WRITEBACK))
    };
    while w.load(Ordering::Relaxed) & WAITERS == 0 {
        std::thread::yield_now();
    }
    unlock(&w);
    // The writeback waiter is still parked, so WAITERS must stay set.
    std::thread::sleep(Duration::from_millis(20));
    assert!(!h.is_finished());
    assert_ne!(w.load(Ordering::Relaxed) & WAITERS, 0);
    clear_and_wake(&w, WRITEBACK);
    h.join().unwrap();
    assert_eq!(w.load(Ordering::Relaxed), 0);
}

#[test]
fn deadline_expires_and_leaves_no_trace() {
    let w = AtomicU64::new(LOCKED);
    let c = Cancel::with_deadline(Instant::now() + Duration::from_millis(30));
    assert_eq!(lock_cancellable(&w, &c), Err(WaitError::TimedOut));
    assert_eq!(w.load(Ordering::Relaxed), LOCKED, "no WAITERS left behind");
    assert!(c.waits.lock().is_empty());
    let c = Cancel::with_deadline(Instant::now() + Duration::from_millis(10));
    assert_eq!(
        wait_clear_cancellable(&w, LOCKED, &c),
        Err(WaitError::TimedOut)
    );
    assert_eq!(w.load(Ordering::Relaxed), LOCKED);
}

#[test]
fn cancel_wakes_sleepers_and_leaves_no_trace() {
    let w = Arc::new(AtomicU64::new(LOCKED));
    let c = Arc::new(Cancel::new());
    let hs: Vec<_> = (0..3)
        .map(|i| {
            let (w, c) = (w.clone(), c.clone());
            std::thread::spawn(move || {
                if i == 0 {
                    wait_clear_cancellable(&w, LOCKED, &c)
                } else {
                    lock_cancellable(&w, &c)
                }
            })
        })
        .collect();
    while c.waits.lock().len() < 3 {
        std::thread::yield_now();
    }
    c.cancel();
    for h in hs {
        assert_eq!(h.join().unwrap(), Err(WaitError::Cancelled));
    }
    assert_eq!(w.load(Ordering::Relaxed), LOCKED, "no WAITERS left behind");
    // A cancelled Cancel refuses at once, even for a free lock only after trying it.
    unlock(&w);
    assert_eq!(lock_cancellable(&w, &c), Ok(()));
    unlock(&w);
}

#[test]
fn cancel_one_waiter_leaves_the_other_waiting() {
    let w = Arc::new(AtomicU64::new(LOCKED));
    let c = Arc::new(Cancel::new());
    let waiting = {
        let w = w.clone();
        std::thread::spawn(move || lock(&w))
    };
    let cancelled = {
        let (w, c) = (w.clone(), c.clone());
        std::thread::spawn(move || lock_cancellable(&w, &c))
    };
    while c.waits.lock().is_empty() {
        std::thread::yield_now();
    }
    c.cancel();
    assert_eq!(cancelled.join().unwrap(), Err(WaitError::Cancelled));
    // The other locker may not have parked yet, but once it has, WAITERS is set.
    unlock(&w);
    waiting.join().unwrap();
    assert_eq!(w.load(Ordering::Relaxed) & LOCKED, LOCKED);
    unlock(&w);
    assert_eq!(w.load(Ordering::Relaxed), 0);
}

#[test]
fn unlock_hands_the_lock_to_a_waiter_that_asked_for_it() {
    // With unfairness 0 a sleeping locker asks for hand-off at once: the unlock that wakes it
    // takes the lock on its behalf, so the word is still LOCKED when `unlock` returns.
    let _serial = UNFAIRNESS_TEST_LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let saved = lock_unfairness();
    set_lock_unfairness(0);
    let before = crate::stats::read(Event::LockHandoffs);
    let w = Arc::new(AtomicU64::new(LOCKED));
    let got = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waiter = {
        let (w, got, release) = (w.clone(), got.clone(), release.clone());
        std::thread::spawn(move || {
            lock(&w);
            got.store(true, std::sync::atomic::Ordering::SeqCst);
            while !release.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::yield_now();
            }
            unlock(&w);
        })
    };
    // WAITERS is set under the wait-table lock just before the waiter is queued, so the
    // unlock below, which takes that lock, finds it.
    while w.load(Ordering::Relaxed) & WAITERS == 0 {
        std::thread::yield_now();
    }
    unlock(&w);
    let now = w.load(Ordering::Relaxed);
    set_lock_unfairness(saved);
    assert_ne!(now & LOCKED, 0, "the lock went straight to the waiter");
    release.store(true, std::sync::atomic::Ordering::SeqCst);
    waiter.join().unwrap();
    assert!(got.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(w.load(Ordering::Relaxed), 0);
    assert!(crate::stats::read(Event::LockHandoffs) > before);
}
