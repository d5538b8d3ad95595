use super::*;
use std::sync::atomic::AtomicBool;
use std::sync::Barrier;
use std::time::{Duration, Instant};

const POLICIES: [RefPolicy; 2] = [RefPolicy::Cmpxchg, RefPolicy::Spinlock];

fn each_policy(f: impl Fn(RefPolicy)) {
    for p in POLICIES {
        f(p);
    }
}

#[test]
fn layout_and_policy() {
    assert_eq!(RefPolicy::default(), RefPolicy::Cmpxchg);
    assert_eq!(LockRef::new(3).policy(), RefPolicy::Cmpxchg);
    assert_eq!(
        LockRef::with_policy(3, RefPolicy::Spinlock).policy(),
        RefPolicy::Spinlock
    );
    for c in [0, 1, -1, DEAD_COUNT, i32::MAX, i32::MIN] {
        assert_eq!(count_of(pack(c, 0)), c);
        assert_eq!(count_of(pack(c, LOCKED)), c);
        assert_eq!(pack(c, LOCKED) & LOCK_MASK, LOCKED);
        assert_eq!(pack(c, 0) & LOCK_MASK, 0);
    }
    // Adding ONE to the word changes the count alone, wrapping at i32::MAX.
    assert_eq!(count_of(pack(-1, 0).wrapping_add(ONE)), 0);
    assert_eq!(count_of(pack(i32::MAX, 0).wrapping_add(ONE)), i32::MIN);
    assert_eq!(pack(i32::MAX, 0).wrapping_add(ONE) & LOCK_MASK, 0);
    assert_eq!(count_of(pack(0, 0).wrapping_sub(ONE)), -1);
    assert_eq!(pack(0, 0).wrapping_sub(ONE) & LOCK_MASK, 0);
    fn send_sync<T: Send + Sync>() {}
    send_sync::<LockRef>();
    // The word and the policy byte, padded to the word's alignment.
    assert_eq!(std::mem::size_of::<LockRef>(), 16);
}

#[test]
fn get_is_unconditional() {
    each_policy(|p| {
        for start in [0, 1, 5, -1, DEAD_COUNT] {
            let r = LockRef::with_policy(start, p);
            r.get();
            assert_eq!(r.count(), start + 1, "{p:?} from {start}");
            assert!(!r.is_locked());
        }
    });
}

#[test]
fn get_not_zero_refuses_zero_and_dead() {
    each_policy(|p| {
        let r = LockRef::with_policy(1, p);
        assert!(r.get_not_zero());
        assert_eq!(r.count(), 2);
        for start in [0, -1, DEAD_COUNT] {
            let r = LockRef::with_policy(start, p);
            assert!(!r.get_not_zero(), "{p:?} from {start}");
            assert_eq!(r.count(), start);
            assert!(!r.is_locked());
        }
    });
}

#[test]
fn get_not_dead_accepts_zero_refuses_dead() {
    each_policy(|p| {
        for start in [0, 1, 7] {
            let r = LockRef::with_policy(start, p);
            assert!(r.get_not_dead(), "{p:?} from {start}");
            assert_eq!(r.count(), start + 1);
        }
        for start in [-1, DEAD_COUNT] {
            let r = LockRef::with_policy(start, p);
            assert!(!r.get_not_dead(), "{p:?} from {start}");
            assert_eq!(r.count(), start);
            assert!(!r.is_locked());
        }
    });
}

#[test]
fn put_not_zero_stops_at_one() {
    each_policy(|p| {
        let r = LockRef::with_policy(3, p);
        assert!(r.put_not_zero());
        assert_eq!(r.count(), 2);
        assert!(r.put_not_zero());
        assert_eq!(r.count(), 1);
        assert!(!r.put_not_zero());
        assert_eq!(r.count(), 1);
        for start in [0, DEAD_COUNT] {
            let r = LockRef::with_policy(start, p);
            assert!(!r.put_not_zero());
            assert_eq!(r.count(), start);
        }
        assert!(!r.is_locked());
    });
}

#[test]
fn put_return_reaches_zero_and_refuses_below() {
    each_policy(|p| {
        let r = LockRef::with_policy(2, p);
        assert_eq!(r.put_return(), Some(1));
        assert_eq!(r.put_return(), Some(0));
        assert_eq!(r.count(), 0);
        assert_eq!(r.put_return(), None);
        assert_eq!(r.count(), 0);
        let d = LockRef::with_policy(DEAD_COUNT, p);
        assert_eq!(d.put_return(), None);
        assert_eq!(d.count(), DEAD_COUNT);
        assert!(!r.is_locked() && !d.is_locked());
    });
}

#[test]
fn put_return_never_takes_the_lock() {
    // Lock-free policy: a locked word makes put_return give up rather than wait.
    let r = LockRef::new(5);
    let g = r.lock();
    assert_eq!(r.put_return(), None);
    drop(g);
    assert_eq!(r.count(), 5);
    assert_eq!(r.put_return(), Some(4));
}

#[test]
fn put_or_lock_at_one_returns_the_lock_count_unchanged() {
    each_policy(|p| {
        let r = LockRef::with_policy(3, p);
        assert!(r.put_or_lock().is_none());
        assert_eq!(r.count(), 2);
        assert!(r.put_or_lock().is_none());
        assert_eq!(r.count(), 1);
        {
            let mut g = r.put_or_lock().expect("count 1 hands back the lock");
            assert_eq!(g.count(), 1);
            assert!(r.is_locked());
            assert!(r.try_lock().is_none());
            // What dput does with the last reference: drop it under the lock.
            g.dec();
            assert_eq!(g.count(), 0);
        }
        assert!(!r.is_locked());
        assert_eq!(r.count(), 0);
        for start in [0, DEAD_COUNT] {
            let r = LockRef::with_policy(start, p);
            let g = r.put_or_lock().expect("count <= 1 hands back the lock");
            assert_eq!(g.count(), start);
            drop(g);
            assert_eq!(r.count(), start);
        }
    });
}

#[test]
fn guard_operations() {
    each_policy(|p| {
        let r = LockRef::with_policy(4, p);
        {
            let mut g = r.lock();
            assert_eq!(g.count(), 4);
            assert!(std::ptr::eq(g.lockref(), &r));
            g.inc();
            g.inc();
            g.dec();
            assert_eq!(g.count(), 5);
            assert_eq!(r.count(), 5, "the word follows the guard");
            assert!(!g.is_dead());
            assert!(g.get_not_dead());
            assert_eq!(g.count(), 6);
            g.set_count(0);
            assert!(g.get_not_dead(), "zero is not dead");
            g.mark_dead();
            assert!(g.is_dead());
            assert_eq!(g.count(), DEAD_COUNT);
            assert!(!g.get_not_dead());
            assert_eq!(g.count(), DEAD_COUNT);
        }
        assert!(r.is_dead());
        assert!(!r.is_locked());
        assert!(!r.get_not_zero());
        assert!(!r.get_not_dead());
        assert_eq!(r.put_return(), None);
        assert!(!r.put_not_zero());
        assert_eq!(r.count(), DEAD_COUNT);
        // Unconditional get and a locked decrement still move a dead count, and it stays dead.
        r.get();
        assert_eq!(r.count(), DEAD_COUNT + 1);
        assert!(r.is_dead());
    });
}

#[test]
fn try_lock_excludes() {
    each_policy(|p| {
        let r = LockRef::with_policy(1, p);
        let g = r.try_lock().expect("free");
        assert!(r.is_locked());
        assert!(r.try_lock().is_none());
        drop(g);
        assert!(!r.is_locked());
        assert!(r.try_lock().is_some());
        assert!(!r.is_locked());
    });
}

#[test]
fn operations_wait_for_the_lock() {
    // While a holder has the lock, get (either policy) must wait and then land on the
    // holder's final count, not on the value it had when the lock was taken.
    each_policy(|p| {
        let r = LockRef::with_policy(10, p);
        let started = AtomicBool::new(false);
        std::thread::scope(|s| {
            let mut g = r.lock();
            let h = s.spawn(|| {
                started.store(true, std::sync::atomic::Ordering::SeqCst);
                r.get();
            });
            while !started.load(std::sync::atomic::Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            std::thread::sleep(Duration::from_millis(20));
            g.set_count(100);
            assert_eq!(r.count(), 100, "nobody changed the count under the lock");
            drop(g);
            h.join().unwrap();
        });
        assert_eq!(r.count(), 101);
    });
}

#[test]
fn slow_path_is_counted_when_locked() {
    // A get that finds the word locked gives up on the lock-free loop, counts a slow path and
    // waits for the lock. The counter is global (other tests may add to it), so wait until it
    // moves while we hold the lock, then let the get through.
    let r = LockRef::new(1);
    let before = stats::read(Event::LockrefSlowPaths);
    std::thread::scope(|s| {
        let g = r.lock();
        let h = s.spawn(|| r.get());
        let deadline = Instant::now() + Duration::from_secs(10);
        while stats::read(Event::LockrefSlowPaths) == before {
            assert!(
                Instant::now() < deadline,
                "the get never took the slow path"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(r.count(), 1, "the get must not land while the lock is held");
        drop(g);
        h.join().unwrap();
    });
    assert_eq!(r.count(), 2);
}

/// Many threads get and put on one count for a bounded time (mixing every kind of put and
/// some locked sections); afterwards the count must be exactly where it started, and every
/// thread's own tally of successful gets and puts must balance.
fn stress(policy: RefPolicy) {
    const THREADS: usize = 6;
    const BASE: i32 = 1;
    let r = LockRef::with_policy(BASE, policy);
    let barrier = Barrier::new(THREADS);
    let deadline = Instant::now() + Duration::from_millis(200);
    let total_ops: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (r, barrier) = (&r, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let mut ops = 0u64;
                    let mut i = t as u64;
                    while Instant::now() < deadline {
                        for _ in 0..64 {
                            i = i.wrapping_mul(6364136223846793005).wrapping_add(1);
                            // Take a reference: BASE is never dropped, so the count is
                            // at least 1 and every conditional get must succeed.
                            match (i >> 33) % 3 {
                                0 => r.get(),
                                1 => assert!(r.get_not_zero()),
                                _ => assert!(r.get_not_dead()),
                            }
                            // ... and drop it again.
                            match (i >> 40) % 4 {
                                0 => {
                                    if let Some(mut g) = r.put_or_lock() {
                                        g.dec();
                                    }
                                }
                                1 => {
                                    if !r.put_not_zero() {
                                        r.lock().dec();
                                    }
                                }
                                2 => {
                                    if r.put_return().is_none() {
                                        r.lock().dec();
                                    }
                                }
                                _ => {
                                    let mut g = r.lock();
                                    assert!(g.count() > BASE, "we hold a reference above the base");
                                    g.dec();
                                }
                            }
                            ops += 1;
                        }
                    }
                    ops
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert!(total_ops > 0);
    assert_eq!(
        r.count(),
        BASE,
        "{policy:?} after {total_ops} get/put pairs"
    );
    assert!(!r.is_locked());
}

#[test]
fn stress_cmpxchg() {
    stress(RefPolicy::Cmpxchg);
}

#[test]
fn stress_spinlock() {
    stress(RefPolicy::Spinlock);
}

#[test]
fn stress_gets_then_puts_add_up() {
    // Each thread takes N references, then drops them all: the count must peak at exactly
    // BASE + THREADS * N (checked by a thread that waits for everyone's gets) and return.
    for p in POLICIES {
        const THREADS: usize = 4;
        const N: i32 = 20_000;
        let r = LockRef::with_policy(1, p);
        let gets_done = Barrier::new(THREADS + 1);
        let check_done = Barrier::new(THREADS + 1);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..N {
                        r.get();
                    }
                    gets_done.wait();
                    check_done.wait();
                    for _ in 0..N {
                        if let Some(mut g) = r.put_or_lock() {
                            g.dec();
                        }
                    }
                });
            }
            gets_done.wait();
            assert_eq!(r.count(), 1 + THREADS as i32 * N, "{p:?}");
            check_done.wait();
        });
        assert_eq!(r.count(), 1, "{p:?}");
    }
}

mod model {
    //! A proptest state machine: sequences of operations on one thread, against a plain
    //! `i32` and a flag for "locked".
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Get,
        GetNotZero,
        GetNotDead,
        PutNotZero,
        PutReturn,
        /// put_or_lock; if the lock comes back, apply the inner guard op.
        PutOrLock(GuardOp),
        /// lock, apply a guard op, unlock.
        Locked(GuardOp),
    }

    #[derive(Clone, Copy, Debug)]
    enum GuardOp {
        Nothing,
        Inc,
        Dec,
        MarkDead,
        Set(i32),
        GetNotDead,
    }

    fn guard_op() -> impl Strategy<Value = GuardOp> {
        prop_oneof![
            Just(GuardOp::Nothing),
            Just(GuardOp::Inc),
            Just(GuardOp::Dec),
            Just(GuardOp::MarkDead),
            (-3i32..4).prop_map(GuardOp::Set),
            Just(GuardOp::GetNotDead),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Get),
            2 => Just(Op::GetNotZero),
            2 => Just(Op::GetNotDead),
            2 => Just(Op::PutNotZero),
            2 => Just(Op::PutReturn),
            2 => guard_op().prop_map(Op::PutOrLock),
            1 => guard_op().prop_map(Op::Locked),
        ]
    }

    fn apply_guard(g: &mut LockRefGuard<'_>, m: &mut i32, op: GuardOp) {
        match op {
            GuardOp::Nothing => {}
            GuardOp::Inc => {
                g.inc();
                *m += 1;
            }
            GuardOp::Dec => {
                g.dec();
                *m -= 1;
            }
            GuardOp::MarkDead => {
                g.mark_dead();
                *m = DEAD_COUNT;
            }
            GuardOp::Set(n) => {
                g.set_count(n);
                *m = n;
            }
            GuardOp::GetNotDead => {
                let want = *m >= 0;
                assert_eq!(g.get_not_dead(), want);
                if want {
                    *m += 1;
                }
            }
        }
        assert_eq!(g.count(), *m);
        assert_eq!(g.is_dead(), *m < 0);
    }

    proptest! {
        #[test]
        fn matches_a_plain_count(start in -3i32..4, ops in prop::collection::vec(op(), 0..64)) {
            for p in POLICIES {
                let r = LockRef::with_policy(start, p);
                let mut m = start;
                for op in &ops {
                    match *op {
                        Op::Get => {
                            r.get();
                            m += 1;
                        }
                        Op::GetNotZero => {
                            let want = m > 0;
                            prop_assert_eq!(r.get_not_zero(), want);
                            if want { m += 1; }
                        }
                        Op::GetNotDead => {
                            let want = m >= 0;
                            prop_assert_eq!(r.get_not_dead(), want);
                            if want { m += 1; }
                        }
                        Op::PutNotZero => {
                            let want = m > 1;
                            prop_assert_eq!(r.put_not_zero(), want);
                            if want { m -= 1; }
                        }
                        Op::PutReturn => {
                            let want = (m > 0).then(|| m - 1);
                            prop_assert_eq!(r.put_return(), want);
                            if let Some(n) = want { m = n; }
                        }
                        Op::PutOrLock(g_op) => {
                            match r.put_or_lock() {
                                None => {
                                    prop_assert!(m > 1);
                                    m -= 1;
                                }
                                Some(mut g) => {
                                    prop_assert!(m <= 1);
                                    prop_assert_eq!(g.count(), m);
                                    prop_assert!(r.is_locked());
                                    apply_guard(&mut g, &mut m, g_op);
                                }
                            }
                        }
                        Op::Locked(g_op) => {
                            let mut g = r.lock();
                            prop_assert_eq!(g.count(), m);
                            apply_guard(&mut g, &mut m, g_op);
                        }
                    }
                    prop_assert!(!r.is_locked());
                    prop_assert_eq!(r.count(), m);
                    prop_assert_eq!(r.is_dead(), m < 0);
                }
            }
        }
    }
}
