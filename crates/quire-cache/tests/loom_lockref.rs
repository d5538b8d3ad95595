//! Loom models of `sync::lockref`: every interleaving (up to the preemption bound) of a few
//! threads doing gets, puts and locked sections on one `LockRef`.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p quire-cache --release --test loom_lockref`.
//!
//! What is checked, for both policies:
//! - no count is lost or doubled: after every thread has taken and dropped its references by
//!   whichever path (lock-free, refused and redone under the lock, handed the lock by
//!   `put_or_lock`), the count is exactly where the arithmetic says;
//! - exactly one thread drops the last reference, and it sees (loom's race detector on plain
//!   cells) everything every other holder wrote before its put — the Release/Acquire hand-over;
//! - `mark_dead` under the lock excludes `get_not_zero` and `get_not_dead`: a racing get either
//!   landed before the death (and the killer saw it in the count) or was refused;
//! - a reference taken by `get_not_zero` sees what the thread that published the object (under
//!   the lock, from count zero) wrote;
//! - the lock excludes other lockers, and the holder's stores never overwrite a lock-free change.
//!
//! A limit of loom shapes the models: a thread waiting for the lock spins with
//! `loom::thread::yield_now`, and when TWO threads spin at once loom may schedule them against
//! each other forever (a switch after a yield costs no preemption), so no model finishes. Every
//! model therefore lets at most one thread wait for the lock at a time: at most two threads ever
//! take the lock concurrently, and a third thread only uses operations that never wait
//! (`put_return` under the lock-free policy), leaving anything else to main after the join.
//!
//! And a second one: every racing operation runs in a spawned thread while main only spawns and
//! joins. With the main thread as one of the racers, loom 0.7 was seen to miss interleavings (a
//! deliberately weakened ordering went undetected until the racer moved to a spawned thread).
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use quire::sync::lockref::{LockRef, RefPolicy, DEAD_COUNT};

mod loom_support;
use loom_support::model;

const POLICIES: [RefPolicy; 2] = [RefPolicy::Cmpxchg, RefPolicy::Spinlock];

/// An object with a reference count and a plain field per holder, written before the holder
/// drops its reference and read by whoever drops the last one.
struct Obj {
    refs: LockRef,
    notes: [UnsafeCell<u32>; 3],
    last: AtomicUsize,
}

impl Obj {
    fn new(count: i32, policy: RefPolicy) -> Obj {
        Obj {
            refs: LockRef::with_policy(count, policy),
            notes: [UnsafeCell::new(0), UnsafeCell::new(0), UnsafeCell::new(0)],
            last: AtomicUsize::new(0),
        }
    }

    fn write_note(&self, who: usize) {
        // SAFETY: only thread `who` writes note `who`, and only while it holds a reference;
        // the only reader is the thread that drops the last reference, which loom checks to
        // happen after this write.
        self.notes[who].with_mut(|p| unsafe { *p = who as u32 + 1 });
    }

    /// Called by the one thread that brought the count to zero: the notes of the first
    /// `holders` holders must all be visible.
    fn last_put(&self, holders: usize) {
        self.last.fetch_add(1, Ordering::Relaxed);
        for h in 0..holders {
            // SAFETY: each writer wrote before its put; the last put happens after every put
            // (loom reports a race here if the orderings do not make it so).
            let v = self.notes[h].with(|p| unsafe { *p });
            assert_eq!(
                v,
                h as u32 + 1,
                "holder {h}'s write is not visible to the last put"
            );
        }
    }

    /// Drops a reference under the lock (the fallback of every put that could not).
    fn put_locked(&self, holders: usize) {
        let mut g = self.refs.lock();
        assert!(g.count() >= 1, "the caller still holds a reference");
        g.dec();
        if g.count() == 0 {
            self.last_put(holders);
        }
    }
}

/// Three holders of one reference each, each dropping it by a different path; the last one must
/// see every holder's write.
///
/// - thread 0: write, `put_or_lock` (and, handed the lock at count 1, `dec` under it);
/// - thread 1: write, `put_not_zero`, and if refused, `dec` under the lock;
/// - thread 2: write, `put_return` (lock-free policy: it never waits); if that could not put,
///   main drops thread 2's reference under the lock after joining everyone. Under the spinlock
///   policy `put_return` takes the lock, so thread 2 leaves its put to main.
#[test]
fn no_lost_or_doubled_count() {
    for policy in POLICIES {
        model(move || {
            // Each thread starts with one reference.
            let obj = Arc::new(Obj::new(3, policy));
            let lock_free = policy == RefPolicy::Cmpxchg;

            let o = obj.clone();
            let t0 = thread::spawn(move || {
                o.write_note(0);
                if let Some(mut g) = o.refs.put_or_lock() {
                    assert_eq!(g.count(), 1, "handed the lock only at one (we hold one)");
                    g.dec();
                    o.last_put(3);
                }
            });

            let o = obj.clone();
            let t1 = thread::spawn(move || {
                o.write_note(1);
                if !o.refs.put_not_zero() {
                    o.put_locked(3);
                }
            });

            let o = obj.clone();
            let t2 = thread::spawn(move || {
                o.write_note(2);
                if !lock_free {
                    return false;
                }
                match o.refs.put_return() {
                    Some(0) => o.last_put(3),
                    Some(n) => assert!(n > 0),
                    None => return false,
                }
                true
            });

            t0.join().unwrap();
            t1.join().unwrap();
            if !t2.join().unwrap() {
                if lock_free {
                    obj.put_locked(3);
                } else {
                    assert_eq!(obj.refs.put_return(), Some(0));
                    obj.last_put(3);
                }
            }
            assert_eq!(obj.refs.count(), 0);
            assert!(!obj.refs.is_locked());
            assert_eq!(obj.last.load(Ordering::Relaxed), 1, "exactly one last put");
        });
    }
}

/// An unconditional `get` by a holder racing another holder's puts: thread 0 holds one
/// reference, takes a second with `get` and drops both (`put_not_zero`, falling back to the
/// lock, then `put_or_lock`); thread 1 drops its one with `put_or_lock`. The count ends at zero,
/// and exactly one thread, the last, sees both writes.
#[test]
fn get_races_puts() {
    for policy in POLICIES {
        model(move || {
            let obj = Arc::new(Obj::new(2, policy));
            let put_or_lock = |o: &Obj| {
                if let Some(mut g) = o.refs.put_or_lock() {
                    assert_eq!(g.count(), 1, "handed the lock only at one (we hold one)");
                    g.dec();
                    o.last_put(2);
                }
            };
            let o = obj.clone();
            let t0 = thread::spawn(move || {
                o.refs.get();
                o.write_note(0);
                if !o.refs.put_not_zero() {
                    o.put_locked(2);
                }
                put_or_lock(&o);
            });
            let o = obj.clone();
            let t1 = thread::spawn(move || {
                o.write_note(1);
                put_or_lock(&o);
            });
            t0.join().unwrap();
            t1.join().unwrap();
            assert_eq!(obj.refs.count(), 0);
            assert!(!obj.refs.is_locked());
            assert_eq!(obj.last.load(Ordering::Relaxed), 1, "exactly one last put");
        });
    }
}

/// Gets and puts with a base reference that is never dropped: the count ends exactly where the
/// arithmetic says, and no conditional get or put is refused (the count stays >= 1, and >= 2
/// while a putter holds its own reference).
#[test]
fn gets_and_puts_balance() {
    for policy in POLICIES {
        model(move || {
            let r = Arc::new(LockRef::with_policy(1, policy));
            let r0 = r.clone();
            let t0 = thread::spawn(move || {
                assert!(r0.get_not_zero());
                assert!(
                    r0.put_or_lock().is_none(),
                    "the base keeps the count above one"
                );
            });
            let r1 = r.clone();
            let t1 = thread::spawn(move || {
                assert!(r1.get_not_dead());
                assert!(r1.put_not_zero(), "the base keeps the count above one");
                r1.get();
            });
            t0.join().unwrap();
            t1.join().unwrap();
            r.get();
            assert_eq!(r.put_return(), Some(2));
            // The base, and the reference thread 1 kept.
            assert_eq!(r.count(), 2);
            assert!(!r.is_locked());
        });
    }
}

/// A killer marks the object dead under the lock while a getter tries to take references with
/// `get_not_dead` and `get_not_zero` (in the given order). Each get either happened before the
/// death — and the killer saw it in the count — or was refused; none lands after the death.
fn mark_dead_excludes(start: i32, not_zero_first: bool) {
    for policy in POLICIES {
        model(move || {
            let r = Arc::new(LockRef::with_policy(start, policy));

            let r0 = r.clone();
            let killer = thread::spawn(move || {
                let mut g = r0.lock();
                let seen = g.count();
                g.mark_dead();
                assert!(g.is_dead());
                assert!(!g.get_not_dead());
                seen
            });

            let r1 = r.clone();
            let getter = thread::spawn(move || {
                if not_zero_first {
                    let z = r1.get_not_zero();
                    (z, r1.get_not_dead())
                } else {
                    let d = r1.get_not_dead();
                    (r1.get_not_zero(), d)
                }
            });

            let seen = killer.join().unwrap();
            let (zero_ok, dead_ok) = getter.join().unwrap();
            let got = zero_ok as i32 + dead_ok as i32;
            // Every successful get is in the count the killer saw; none landed afterwards.
            assert_eq!(seen, start + got, "killer saw {seen}, {got} gets succeeded");
            assert_eq!(r.count(), DEAD_COUNT, "a get landed after the death");
            assert!(r.is_dead());
            if start == 0 && (not_zero_first || !dead_ok) {
                // Before the death the count was zero, after it dead: get_not_zero can only win
                // after the getter's own get_not_dead raised the count.
                assert!(!zero_ok);
            }
            assert!(!r.get_not_dead());
            assert!(!r.get_not_zero());
        });
    }
}

#[test]
fn mark_dead_excludes_gets_from_one() {
    mark_dead_excludes(1, false);
    mark_dead_excludes(1, true);
}

#[test]
fn mark_dead_excludes_gets_from_zero() {
    mark_dead_excludes(0, false);
    mark_dead_excludes(0, true);
}

/// An object published from count zero under the lock: a reader that wins `get_not_zero` sees
/// what the publisher wrote before it unlocked.
#[test]
fn get_not_zero_sees_the_published_object() {
    for policy in POLICIES {
        model(move || {
            let obj = Arc::new(Obj::new(0, policy));
            let o = obj.clone();
            let publisher = thread::spawn(move || {
                o.write_note(0);
                let mut g = o.refs.lock();
                g.set_count(1);
            });
            let o = obj.clone();
            let reader = thread::spawn(move || {
                if o.refs.get_not_zero() {
                    // SAFETY: the publisher wrote note 0 before the unlock that made the count
                    // non-zero; loom checks that our successful get happens after it.
                    let v = o.notes[0].with(|p| unsafe { *p });
                    assert_eq!(v, 1);
                }
            });
            publisher.join().unwrap();
            reader.join().unwrap();
            let c = obj.refs.count();
            assert!(c == 1 || c == 2, "count {c}");
        });
    }
}

/// Two threads that each lock (incrementing a plain cell and the count under the lock) and also
/// take and drop references lock-free: the lock excludes the other locker, and no lock-free
/// change is overwritten by the holder's plain stores or lost to it.
#[test]
fn lock_excludes_and_keeps_lock_free_counts() {
    for policy in POLICIES {
        model(move || {
            let obj = Arc::new(Obj::new(1, policy));
            let bump = |o: &Obj| {
                let mut g = o.refs.lock();
                // SAFETY: note 0 is only touched under the lock.
                o.notes[0].with_mut(|p| unsafe { *p += 1 });
                g.inc();
            };
            let o = obj.clone();
            let t0 = thread::spawn(move || {
                o.refs.get();
                bump(&o);
                assert!(o.refs.put_not_zero());
            });
            let o = obj.clone();
            let t1 = thread::spawn(move || {
                bump(&o);
                o.refs.get();
                assert!(o.refs.put_not_zero());
            });
            t0.join().unwrap();
            t1.join().unwrap();
            // SAFETY: every other thread has been joined.
            let v = obj.notes[0].with(|p| unsafe { *p });
            assert_eq!(v, 2);
            assert_eq!(obj.refs.count(), 1 + 2);
            assert!(!obj.refs.is_locked());
        });
    }
}
