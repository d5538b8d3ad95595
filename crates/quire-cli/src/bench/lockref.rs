//! Suite `lockref`: reference traffic on one shared count, lockref against the spinlock it
//! replaced (and a parking_lot mutex as a third reference point).
//!
//! Case `get-put`: `threads` threads (1, 2 and 16) all hammer ONE count. Each operation is one
//! reference taken and dropped again, the way path walking pins and unpins a dentry:
//!
//! - `lockref` (`RefPolicy::Cmpxchg`): `get`, then `put_or_lock` as `dput` does — the put is a
//!   lock-free decrement while the count stays above one, and only the last reference would come
//!   back with the lock held. The count starts at 1 (a reference the benchmark itself holds, as
//!   the dcache's parent pointer holds a dentry), so every put is the lock-free kind unless the
//!   compare-and-swap loop gives up.
//! - `spinlock` (`RefPolicy::Spinlock`): the same two calls; under this policy each of them takes
//!   the test-and-test-and-set lock, changes the count and unlocks — the pre-lockref dcache.
//! - `mutex`: a `parking_lot::Mutex<i64>` around a plain count, doing the same logical work:
//!   lock, increment, unlock; lock, decrement if above one (else the "last reference" branch,
//!   which drops it under the lock just the same), unlock.
//!
//! Metrics: `ops_per_s` (get+put pairs per wall-clock second) and `ops_per_cpu_s` (per CPU second
//! of the process, from getrusage), plus `slow_paths_per_op` for `lockref` (how often the
//! compare-and-swap loop fell back to the lock). Quick mode measures each (variant, threads) once
//! for 0.4 s; full mode three times for 1 s each, variants interleaved, and reports the median.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use quire::stats::Event;
use quire::sync::lockref::{LockRef, RefPolicy};

use super::harness::{measure, Measurement};
use super::{Bench, Suite};

const CASE: &str = "get-put";
const THREADS: [usize; 3] = [1, 2, 16];
const VARIANTS: [&str; 3] = ["spinlock", "lockref", "mutex"];
/// Operations between two looks at the stop flag.
const BATCH: u64 = 256;

pub const SUITE: Suite = Suite {
    name: "lockref",
    about: "get+put on one shared count: lockref vs spinlock vs mutex (threads 1, 2, 16)",
    variants: &VARIANTS,
    steps: |p| (p.threads(&THREADS).len() * VARIANTS.len() * repeats(p.quick)) as u64,
    run,
};

fn repeats(quick: bool) -> usize {
    if quick {
        1
    } else {
        3
    }
}

fn duration(quick: bool) -> Duration {
    if quick {
        Duration::from_millis(400)
    } else {
        Duration::from_secs(1)
    }
}

/// Keeps the shared count on a cache line of its own, away from the stop flag and the stacks.
#[repr(align(128))]
struct Padded<T>(T);

fn run_lockref(threads: usize, d: Duration, policy: RefPolicy) -> Measurement {
    let r = Padded(LockRef::with_policy(1, policy));
    let m = measure(threads, d, |_, stop: &AtomicBool| {
        let r = &r.0;
        let mut ops = 0;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..BATCH {
                r.get();
                if let Some(mut g) = r.put_or_lock() {
                    // Never reached while the benchmark holds its own reference; if it were,
                    // dput would decide the dentry's fate here. Drop the reference under the lock.
                    g.dec();
                }
            }
            ops += BATCH;
        }
        ops
    });
    assert_eq!(r.0.count(), 1, "lockref get/put pairs must balance");
    m
}

fn run_mutex(threads: usize, d: Duration) -> Measurement {
    let c = Padded(Mutex::new(1i64));
    let m = measure(threads, d, |_, stop: &AtomicBool| {
        let c = &c.0;
        let mut ops = 0;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..BATCH {
                *c.lock() += 1;
                let mut g = c.lock();
                if *g > 1 {
                    *g -= 1;
                } else {
                    last_reference(&mut g);
                }
            }
            ops += BATCH;
        }
        ops
    });
    assert_eq!(*c.0.lock(), 1, "mutex get/put pairs must balance");
    m
}

/// The "last reference" branch of the mutex variant's put, as for `put_or_lock` returning the
/// lock: never reached while the benchmark holds its own reference; drops it under the lock.
#[cold]
fn last_reference(count: &mut i64) {
    *count -= 1;
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn run(b: &mut Bench) -> anyhow::Result<()> {
    let quick = b.quick();
    let d = duration(quick);
    b.compare(CASE, "spinlock", "lockref");
    // results[threads][variant] = one (ops_per_s, ops_per_cpu_s, slow_paths_per_op) per repeat.
    let thread_counts = b.threads(&THREADS).to_vec();
    let mut results = vec![vec![Vec::new(); VARIANTS.len()]; thread_counts.len()];
    for _ in 0..repeats(quick) {
        for (ti, &threads) in thread_counts.iter().enumerate() {
            for (vi, &variant) in VARIANTS.iter().enumerate() {
                if !b.wants(variant) {
                    continue;
                }
                b.step(&format!("{CASE} {variant} x{threads}"));
                let m = match variant {
                    "lockref" => run_lockref(threads, d, RefPolicy::Cmpxchg),
                    "spinlock" => run_lockref(threads, d, RefPolicy::Spinlock),
                    _ => run_mutex(threads, d),
                };
                results[ti][vi].push((
                    m.ops_per_s(),
                    m.ops_per_cpu_s(),
                    m.per_op(Event::LockrefSlowPaths),
                ));
            }
        }
    }
    for (ti, &threads) in thread_counts.iter().enumerate() {
        for (vi, &variant) in VARIANTS.iter().enumerate() {
            let runs = &results[ti][vi];
            if runs.is_empty() {
                continue; // not run (`--variants`)
            }
            let ops_per_s = median(runs.iter().map(|r| r.0).collect());
            let ops_per_cpu_s = median(runs.iter().map(|r| r.1).collect());
            b.record(CASE, variant, threads, "ops_per_s", ops_per_s, "1/s");
            b.record(
                CASE,
                variant,
                threads,
                "ops_per_cpu_s",
                ops_per_cpu_s,
                "1/s",
            );
            if variant == "lockref" {
                let slow = median(runs.iter().map(|r| r.2).collect());
                b.record(CASE, variant, threads, "slow_paths_per_op", slow, "1");
            }
        }
    }
    Ok(())
}
