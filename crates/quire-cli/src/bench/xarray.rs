//! Suite `xarray`: the page-cache index (technique 4 of docs/RULES.md).
//!
//! Case `load`: random lock-free loads over 2^20 (1,048,576) populated indices 0..2^20 — the
//! pages of a 4 GiB file — by 1 and 2 threads; `xarray` (an epoch guard pinned per load, as a
//! page-cache lookup does) against `rwlock-btreemap` (a `parking_lot::RwLock<BTreeMap<u64, _>>`,
//! read-locked per load). Both hold the same `&'static u64` per index and every load reads the
//! pointee. The index is the same size in quick mode: the xarray's ~16,000 leaves (~9 MiB) and
//! the B-tree's nodes must not fit in the CPU caches. Metric `ops_per_s`; the xarray's counted
//! `walks_per_op` is recorded too.
//!
//! Cases `add-over-shadow` (order 0) and `add-over-shadow-order2` (order 2): the refault path.
//! 2^16 indices (a 256 MiB file) hold shadow entries (order-0 shadows for order-0 inserts,
//! order-2 shadows for order-2 inserts — no split needed); a round inserts a pointer entry over
//! every one of them in a random order, timed, then evicts them back to shadows, untimed.
//! `single-walk` is [`XArray::add`], `multi-walk` the pre-patch [`XArray::add_multi_walk`];
//! rounds alternate between them on fresh arrays. Metrics `inserts_per_s` (inserts per second of
//! timed insert phases) and `walks_per_insert` (the `xa_walks` counter delta over the timed
//! phases divided by the inserts: counted, not assumed). Threads 1.
//!
//! Quick mode: 0.4 s per (variant, threads) load run and 0.5 s of timed inserts per variant and
//! case (about 5–6 s with populating); full mode: loads three times 1 s (median), inserts 2 s.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use quire::stats::{self, Event};
use quire::sync::rcu;
use quire::xarray::{Entry, XArray};

use super::harness::{measure, Rng};
use super::{Bench, Suite};

const LOAD: &str = "load";
const ADD0: &str = "add-over-shadow";
const ADD2: &str = "add-over-shadow-order2";
const LOAD_KEYS: u64 = 1 << 20;
const ADD_KEYS: u64 = 1 << 16;
const THREADS: [usize; 2] = [1, 2];
/// Loads between two looks at the stop flag.
const BATCH: u64 = 256;

pub const SUITE: Suite = Suite {
    name: "xarray",
    about:
        "random loads (xarray vs RwLock<BTreeMap>) and inserts over shadows (single vs multi walk)",
    variants: &["rwlock-btreemap", "xarray", "multi-walk", "single-walk"],
    steps: |p| (1 + p.threads(&THREADS).len() * 2 * load_repeats(p.quick) + 2) as u64,
    run,
};

fn load_repeats(quick: bool) -> usize {
    if quick {
        1
    } else {
        3
    }
}

fn load_duration(quick: bool) -> Duration {
    if quick {
        Duration::from_millis(400)
    } else {
        Duration::from_secs(1)
    }
}

fn add_duration(quick: bool) -> Duration {
    if quick {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(2)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// One `u64` per index, living as long as the program (like folio descriptors, never freed).
fn pages(n: u64) -> &'static [u64] {
    Box::leak((0..n).collect::<Vec<u64>>().into_boxed_slice())
}

fn run(b: &mut Bench) -> anyhow::Result<()> {
    let quick = b.quick();
    run_load(b, quick)?;
    run_add(b, quick)?;
    Ok(())
}

fn run_load(b: &mut Bench, quick: bool) -> anyhow::Result<()> {
    let want = [b.wants("rwlock-btreemap"), b.wants("xarray")];
    if !want.contains(&true) {
        return Ok(());
    }
    b.compare(LOAD, "rwlock-btreemap", "xarray");
    b.step("load: populating 2^20 indices");
    let pages = pages(LOAD_KEYS);
    let xa: XArray<&'static u64> = XArray::new();
    let mut map = BTreeMap::new();
    for (i, p) in pages.iter().enumerate() {
        if let Err(e) = xa.store(i as u64, Some(Entry::Pointer(p))) {
            anyhow::bail!("populating the xarray: {e}");
        }
        map.insert(i as u64, p);
    }
    let map = RwLock::new(map);
    let d = load_duration(quick);
    // results[threads][variant] = (ops_per_s, walks_per_op) per repeat.
    let thread_counts = b.threads(&THREADS).to_vec();
    let mut results = vec![[Vec::new(), Vec::new()]; thread_counts.len()];
    for _ in 0..load_repeats(quick) {
        for (ti, &threads) in thread_counts.iter().enumerate() {
            if want[0] {
                b.step(&format!("load rwlock-btreemap x{threads}"));
                let m = measure(threads, d, |t, stop: &AtomicBool| {
                    let mut rng = Rng::new(0xB7EE + t as u64);
                    let (mut ops, mut sum) = (0u64, 0u64);
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..BATCH {
                            let i = rng.below(LOAD_KEYS);
                            if let Some(p) = map.read().get(&i) {
                                sum = sum.wrapping_add(**p);
                            }
                        }
                        ops += BATCH;
                    }
                    std::hint::black_box(sum);
                    ops
                });
                results[ti][0].push((m.ops_per_s(), 0.0));
            }
            if !want[1] {
                continue;
            }
            b.step(&format!("load xarray x{threads}"));
            let m = measure(threads, d, |t, stop: &AtomicBool| {
                let mut rng = Rng::new(0xB7EE + t as u64);
                let (mut ops, mut sum) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..BATCH {
                        let i = rng.below(LOAD_KEYS);
                        let g = rcu::pin();
                        if let Some(Entry::Pointer(p)) = xa.load(i, &g) {
                            sum = sum.wrapping_add(*p);
                        }
                    }
                    ops += BATCH;
                }
                std::hint::black_box(sum);
                ops
            });
            results[ti][1].push((m.ops_per_s(), m.per_op(Event::XaWalks)));
        }
    }
    for (ti, &threads) in thread_counts.iter().enumerate() {
        for (vi, variant) in ["rwlock-btreemap", "xarray"].into_iter().enumerate() {
            let runs = &results[ti][vi];
            if runs.is_empty() {
                continue; // not run (`--variants`)
            }
            b.record(
                LOAD,
                variant,
                threads,
                "ops_per_s",
                median(runs.iter().map(|r| r.0).collect()),
                "1/s",
            );
            if vi == 1 {
                let walks = median(runs.iter().map(|r| r.1).collect());
                b.record(LOAD, variant, threads, "walks_per_op", walks, "1");
            }
        }
    }
    Ok(())
}

/// Inserts and walks of the timed phases of one variant.
#[derive(Default)]
struct AddTotals {
    inserts: u64,
    walks: u64,
    time: Duration,
}

/// One round: a fresh array of shadows, a timed insert over each, an untimed eviction back to
/// shadows, repeated until `budget` of timed inserts.
fn add_round(
    order: u32,
    multi: bool,
    pages: &'static [u64],
    perm: &[u64],
    totals: &mut AddTotals,
) -> anyhow::Result<()> {
    let xa: XArray<&'static u64> = XArray::new();
    let step = 1u64 << order;
    for &i in perm {
        if let Err(e) = xa.store_order(i, order, Some(Entry::Value(i))) {
            anyhow::bail!("populating shadows: {e}");
        }
    }
    // Timed: the refaults.
    let walks0 = stats::read(Event::XaWalks);
    let t0 = Instant::now();
    for &i in perm {
        let page = &pages[(i / step) as usize];
        let r = if multi {
            xa.add_multi_walk(i, order, Entry::Pointer(page))
        } else {
            xa.add(i, order, Entry::Pointer(page))
        };
        match r {
            Ok(Some(shadow)) if shadow == i => {}
            Ok(other) => anyhow::bail!("insert at {i} found shadow {other:?}"),
            Err(e) => anyhow::bail!("insert at {i}: {e}"),
        }
    }
    totals.time += t0.elapsed();
    totals.walks += stats::read(Event::XaWalks) - walks0;
    totals.inserts += perm.len() as u64;
    // Untimed: evict them again (and check they are all there), then drop the array.
    for &i in perm {
        match xa.store(i, Some(Entry::Value(i))) {
            Ok(Some(Entry::Pointer(_))) => {}
            _ => anyhow::bail!("index {i} lost its entry"),
        }
    }
    Ok(())
}

fn run_add(b: &mut Bench, quick: bool) -> anyhow::Result<()> {
    let budget = add_duration(quick);
    let pages = pages(ADD_KEYS);
    let want = [b.wants("multi-walk"), b.wants("single-walk")];
    if !want.contains(&true) {
        return Ok(());
    }
    for (case, order) in [(ADD0, 0u32), (ADD2, 2u32)] {
        b.compare(case, "multi-walk", "single-walk");
        b.step(&format!("{case}: inserts over shadows"));
        // Every index of the range, in a random order, at the order's alignment.
        let mut perm: Vec<u64> = (0..ADD_KEYS >> order).map(|i| i << order).collect();
        let mut rng = Rng::new(0x5AD0 + order as u64);
        for k in (1..perm.len()).rev() {
            perm.swap(k, rng.below(k as u64 + 1) as usize);
        }
        let mut totals = [AddTotals::default(), AddTotals::default()];
        // Alternate rounds until both variants (those asked for) had their budget of timed
        // inserts.
        let short = |totals: &[AddTotals; 2], vi: usize| want[vi] && totals[vi].time < budget;
        while (0..2).any(|vi| short(&totals, vi)) {
            for (vi, multi) in [true, false].into_iter().enumerate() {
                if short(&totals, vi) {
                    add_round(order, multi, pages, &perm, &mut totals[vi])?;
                }
            }
        }
        for (vi, variant) in ["multi-walk", "single-walk"].into_iter().enumerate() {
            let t = &totals[vi];
            if !want[vi] {
                continue;
            }
            b.record(
                case,
                variant,
                1,
                "inserts_per_s",
                t.inserts as f64 / t.time.as_secs_f64(),
                "1/s",
            );
            b.record(
                case,
                variant,
                1,
                "walks_per_insert",
                t.walks as f64 / t.inserts as f64,
                "1",
            );
        }
    }
    Ok(())
}
