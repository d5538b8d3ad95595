//! Suite `pagelock`: the folio lock's waiters bit and its filtered, wake-one waits, each against
//! its "before".
//!
//! - case `uncontended`: one thread locks and unlocks many distinct flag words. `waiters-bit`
//!   never touches the wait table; `always-lookup` (no waiters bit) looks the word up on every
//!   unlock, as the kernel did before PG_waiters.
//! - case `handoff`: 64 threads on 16 flag words lock a random word, touch the 4 KiB page it
//!   guards, and unlock. `exact` wakes one locker per unlock, keyed by word and bit;
//!   `unfiltered-wake-all` parks everybody on 256 shared queues and wakes a whole queue per
//!   unlock, so sleepers wake for other words, re-test and sleep again.
//! - case `handoff-io`: as `handoff`, but the holder gives up the CPU once while holding the lock,
//!   as the kernel's page lock is held across the read that fills the page. On a machine with few
//!   cores this is what makes sleepers pile up behind a lock; with a short critical section and
//!   two cores, `handoff` rarely has more than one sleeper per word.

use std::cell::UnsafeCell;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use quire::stats::Event;
use quire::sync::bitwait::WaitPolicy;

use super::harness::{measure, Rng};
use super::{Bench, Suite};

pub const SUITE: Suite = Suite {
    name: "pagelock",
    about: "folio lock: waiters bit (uncontended) and filtered wake-one hand-off (contended)",
    variants: &[
        "always-lookup",
        "waiters-bit",
        "unfiltered-wake-all",
        "exact",
    ],
    steps: |_| 6,
    run,
};

const UNCONTENDED_WORDS: usize = 1 << 16;
const HANDOFF_THREADS: usize = 64;
const HANDOFF_WORDS: usize = 16;
const PAGE: usize = 4096;

fn run(b: &mut Bench) -> anyhow::Result<()> {
    let secs = if b.quick() { 0.6 } else { 2.0 };
    uncontended(b, Duration::from_secs_f64(secs));
    let dur = Duration::from_secs_f64(secs * 1.5);
    handoff(b, dur, "handoff", false);
    handoff(b, dur, "handoff-io", true);
    Ok(())
}

/// Locks and unlocks word after word; `op` is one lock + unlock with the policy inlined.
fn uncontended_loop(words: &[AtomicU64], stop: &AtomicBool, op: impl Fn(&AtomicU64)) -> u64 {
    let mut ops = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for w in words {
            op(black_box(w));
        }
        ops += words.len() as u64;
    }
    ops
}

fn uncontended(b: &mut Bench, dur: Duration) {
    let case = "uncontended";
    b.compare(case, "always-lookup", "waiters-bit");
    let words: Vec<AtomicU64> = (0..UNCONTENDED_WORDS).map(|_| AtomicU64::new(0)).collect();
    for (variant, policy) in [
        ("always-lookup", WaitPolicy::AlwaysLookup),
        ("waiters-bit", WaitPolicy::Exact),
    ] {
        if !b.wants(variant) {
            continue;
        }
        b.step(&format!("{case} {variant}"));
        let m = measure(1, dur, |_, stop| match policy {
            WaitPolicy::Exact => uncontended_loop(&words, stop, |w| {
                WaitPolicy::Exact.lock(w);
                WaitPolicy::Exact.unlock(w);
            }),
            WaitPolicy::AlwaysLookup => uncontended_loop(&words, stop, |w| {
                WaitPolicy::AlwaysLookup.lock(w);
                WaitPolicy::AlwaysLookup.unlock(w);
            }),
            _ => unreachable!("not a variant of this case"),
        });
        let ns = m.elapsed.as_nanos() as f64 / m.ops.max(1) as f64;
        b.record(case, variant, 1, "ns_per_op", ns, "ns");
        b.record(
            case,
            variant,
            1,
            "table_lookups_per_op",
            m.per_op(Event::WaitTableLookups),
            "1",
        );
    }
}

/// A flag word and the page it guards.
#[repr(align(64))]
struct Guarded {
    word: AtomicU64,
    page: UnsafeCell<[u8; PAGE]>,
}

// SAFETY: `page` is only touched while holding the word's lock bit.
unsafe impl Sync for Guarded {}

fn handoff(b: &mut Bench, dur: Duration, case: &str, io: bool) {
    b.compare(case, "unfiltered-wake-all", "exact");
    let slots: Vec<Guarded> = (0..HANDOFF_WORDS)
        .map(|_| Guarded {
            word: AtomicU64::new(0),
            page: UnsafeCell::new([0; PAGE]),
        })
        .collect();
    for (variant, policy) in [
        ("unfiltered-wake-all", WaitPolicy::UnfilteredWakeAll),
        ("exact", WaitPolicy::Exact),
    ] {
        if !b.wants(variant) {
            continue;
        }
        b.step(&format!("{case} {variant}"));
        let m = measure(HANDOFF_THREADS, dur, |t, stop| {
            let mut rng = Rng::new(t as u64 + 1);
            let mut ops = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let g = &slots[rng.below(HANDOFF_WORDS as u64) as usize];
                policy.lock(&g.word);
                // SAFETY: we hold the lock bit that guards this page.
                let page = unsafe { &mut *g.page.get() };
                for line in page.chunks_exact_mut(64) {
                    line[0] = line[0].wrapping_add(1);
                }
                if io {
                    // The page lock is held across the read that fills the page: give the CPU
                    // away while holding it, as a thread waiting for I/O would.
                    std::thread::yield_now();
                }
                policy.unlock(&g.word);
                ops += 1;
            }
            ops
        });
        let threads = HANDOFF_THREADS;
        b.record(case, variant, threads, "ops_per_s", m.ops_per_s(), "1/s");
        b.record(
            case,
            variant,
            threads,
            "handoffs_per_cpu_s",
            m.ops_per_cpu_s(),
            "1/s",
        );
        b.record(
            case,
            variant,
            threads,
            "wakeups_per_op",
            m.per_op(Event::Wakeups),
            "1",
        );
        b.record(
            case,
            variant,
            threads,
            "spurious_wakeups_per_op",
            m.per_op(Event::SpuriousWakeups),
            "1",
        );
        b.record(
            case,
            variant,
            threads,
            "ctx_switches_per_op",
            m.ctx_switches as f64 / m.ops.max(1) as f64,
            "1",
        );
    }
}
