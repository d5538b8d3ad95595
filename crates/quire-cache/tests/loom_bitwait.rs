//! Loom models of the waiters-bit protocol (`quire::sync::bitwait`) over the loom stand-in for
//! the wait table: mutual exclusion, no lost wake-up (a lost one leaves a thread parked forever,
//! which loom reports as a deadlock), hand-off, and "WAITERS is set while anybody sleeps".
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use quire::sync::bitwait::{self, WaitPolicy, LOCKED, WAITERS};
use quire::sync::loom::{AtomicU64, Ordering};

mod loom_support;
use loom_support::model;

const WRITEBACK: u64 = 1 << 4;

struct Shared {
    word: AtomicU64,
    data: UnsafeCell<u32>,
}

fn lockers(policy: WaitPolicy, threads: usize) {
    model(move || {
        let s = Arc::new(Shared {
            word: AtomicU64::new(0),
            data: UnsafeCell::new(0),
        });
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || {
                    policy.lock(&s.word);
                    // loom flags any access that is not ordered by the lock.
                    // SAFETY: the lock is held, so no other thread touches `data` now.
                    s.data.with_mut(|d| unsafe { *d += 1 });
                    policy.unlock(&s.word);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        // SAFETY: every thread that wrote `data` was joined.
        assert_eq!(s.data.with(|d| unsafe { *d }), threads as u32);
        assert_eq!(s.word.load(Ordering::Relaxed) & LOCKED, 0);
    });
}

#[test]
fn exact_two_lockers() {
    lockers(WaitPolicy::Exact, 2);
}

#[test]
fn exact_three_lockers() {
    lockers(WaitPolicy::Exact, 3);
}

#[test]
fn always_lookup_two_lockers() {
    lockers(WaitPolicy::AlwaysLookup, 2);
}

#[test]
fn unfiltered_wake_all_two_lockers() {
    lockers(WaitPolicy::UnfilteredWakeAll, 2);
}

#[test]
fn handoff_with_zero_unfairness() {
    // Every sleeping locker asks for hand-off at once: the unlocker must take the lock on its
    // behalf, and mutual exclusion and progress must still hold.
    bitwait::set_lock_unfairness(0);
    lockers(WaitPolicy::Exact, 3);
    bitwait::set_lock_unfairness(5);
}

#[test]
fn shared_and_exclusive_waiters_of_one_bit() {
    model(|| {
        let s = Arc::new(Shared {
            word: AtomicU64::new(LOCKED),
            data: UnsafeCell::new(0),
        });
        // The initial owner writes, then unlocks.
        let owner = {
            let s = s.clone();
            thread::spawn(move || {
                // SAFETY: the word starts locked by this thread: nobody else touches `data` yet.
                s.data.with_mut(|d| unsafe { *d = 7 });
                bitwait::unlock(&s.word);
            })
        };
        let waiter = {
            let s = s.clone();
            thread::spawn(move || {
                bitwait::wait_clear(&s.word, LOCKED);
                // wait_clear has acquire semantics; the owner's write happened before the unlock
                // that let us through, or the locker's one did.
            })
        };
        let locker = {
            let s = s.clone();
            thread::spawn(move || {
                bitwait::lock(&s.word);
                // SAFETY: the lock is held, so no other thread touches `data` now.
                s.data.with_mut(|d| unsafe { *d += 1 });
                bitwait::unlock(&s.word);
            })
        };
        owner.join().unwrap();
        waiter.join().unwrap();
        locker.join().unwrap();
        // SAFETY: every thread that wrote `data` was joined.
        assert_eq!(s.data.with(|d| unsafe { *d }), 8);
    });
}

#[test]
fn clear_and_wake_other_bit() {
    // A write-back waiter and a locker on one word: each clear wakes only its own bit's waiters,
    // and nobody is left asleep.
    model(|| {
        let w = Arc::new(AtomicU64::new(LOCKED | WRITEBACK));
        let wb = {
            let w = w.clone();
            thread::spawn(move || bitwait::wait_clear(&w, WRITEBACK))
        };
        let lk = {
            let w = w.clone();
            thread::spawn(move || {
                bitwait::lock(&w);
                bitwait::unlock(&w);
            })
        };
        bitwait::unlock(&w);
        bitwait::clear_and_wake(&w, WRITEBACK);
        wb.join().unwrap();
        lk.join().unwrap();
        assert_eq!(w.load(Ordering::Relaxed) & (LOCKED | WRITEBACK), 0);
    });
}

#[test]
fn waiters_bit_set_while_anybody_sleeps() {
    model(|| {
        let w = Arc::new(AtomicU64::new(0));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let w = w.clone();
                thread::spawn(move || {
                    bitwait::lock(&w);
                    assert!(bitwait::waiters_invariant_holds(&w));
                    bitwait::unlock(&w);
                    assert!(bitwait::waiters_invariant_holds(&w));
                })
            })
            .collect();
        assert!(bitwait::waiters_invariant_holds(&w));
        for h in hs {
            h.join().unwrap();
        }
        assert!(bitwait::waiters_invariant_holds(&w));
        // Once everybody is done nobody sleeps; WAITERS may linger only if a sleeper gave up
        // its sleep after setting it (then the next clear clears it).
        let _ = w.load(Ordering::Relaxed) & WAITERS;
    });
}
