//! Suite `stats`: what a monitor that reads [`PageCache::stats`] every millisecond costs the
//! readers of the cache it watches.
//!
//! The suite opens 100 files of 1 MiB each (128 KiB with `--quick`) from memory stores in a
//! 256 MiB cache (32 MiB with `--quick`), reads each whole once so that all of them are cached,
//! and then runs case `monitor-1ms`: random 4 KiB reads at 4 KiB-aligned offsets of random
//! files on 2 threads (one handle per file, shared by the threads), while a third thread reads
//! the cache's figures every millisecond (a sleep of 1 ms between two calls), as a monitoring
//! loop would.
//!
//! - `no-monitor`: the readers alone, the reference the other two are measured against.
//! - `drain-and-visit` (before): the monitor calls `PageCache::stats_exact`, which applies
//!   every CPU's folio batches, returns the allocator's per-thread caches to its free lists,
//!   counts the free frames under the allocator's locks and visits every file to count its
//!   index nodes — the figures exact at one moment.
//! - `counters` (after): the monitor calls [`PageCache::stats`], which reads the counters only.
//!
//! Metrics: `iops` (reads per wall-clock second of both readers), `iops_share_unmonitored`
//! (that figure over `no-monitor`'s from the same run: 1 when the monitor costs the readers
//! nothing) and `ns_per_stats` (the mean time of one call of the monitor). Quick mode measures
//! each variant once for 0.5 s; full mode three times for 2 s each, variants interleaved, and
//! reports the median.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::ensure;
use quire::filemap::{CacheConfig, CachedFile, PageCache};
use quire::store::MemStore;

use super::harness::{measure, Rng};
use super::read::PAGE;
use super::{Bench, Suite};

const CASE: &str = "monitor-1ms";
/// Reader threads.
const THREADS: usize = 2;
/// Files open in the cache.
const FILES: usize = 100;
/// The time between two calls of the monitor.
const INTERVAL: Duration = Duration::from_millis(1);
/// The variants: the readers alone, then the "before" and "after" monitors.
const VARIANTS: [&str; 3] = ["no-monitor", "drain-and-visit", "counters"];

pub const SUITE: Suite = Suite {
    name: "stats",
    about: "hot random reads on 2 threads while a monitor reads the cache's stats every 1 ms",
    variants: &VARIANTS,
    steps: |p| (1 + VARIANTS.len() * repeats(p.quick)) as u64,
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
    Duration::from_secs_f64(if quick { 0.5 } else { 2.0 })
}

/// One measured run of a variant: reads per second, and the monitor's mean ns per call.
fn run_variant(cache: &PageCache, files: &[CachedFile], variant: &str, quick: bool) -> (f64, f64) {
    let file_len = files[0].len();
    let stop = AtomicBool::new(false);
    let (mut calls, mut spent) = (0u64, Duration::ZERO);
    let m = std::thread::scope(|s| {
        let monitor = (variant != "no-monitor").then(|| {
            let stop = &stop;
            s.spawn(move || {
                let (mut calls, mut spent) = (0u64, Duration::ZERO);
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    if variant == "drain-and-visit" {
                        black_box(cache.stats_exact());
                    } else {
                        black_box(cache.stats());
                    }
                    spent += t0.elapsed();
                    calls += 1;
                    std::thread::sleep(INTERVAL);
                }
                (calls, spent)
            })
        });
        let m = measure(THREADS, duration(quick), |t, stop| {
            let mut rng = Rng::new(0x57a7_5000 + t as u64);
            let mut buf = vec![0u8; PAGE];
            let pages = file_len / PAGE as u64;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    let f = &files[rng.below(FILES as u64) as usize];
                    let off = rng.below(pages) * PAGE as u64;
                    let got = f.read_at(off, &mut buf).expect("a cached read");
                    debug_assert_eq!(got, PAGE);
                    black_box(&buf);
                }
                n += 64;
            }
            n
        });
        stop.store(true, Ordering::Relaxed);
        if let Some(h) = monitor {
            (calls, spent) = h.join().expect("the monitor thread panicked");
        }
        m
    });
    let ns = spent.as_nanos() as f64 / calls.max(1) as f64;
    (m.ops_per_s(), ns)
}

fn run(b: &mut Bench) -> anyhow::Result<()> {
    let quick = b.quick();
    let file_len: usize = if quick { 128 << 10 } else { 1 << 20 };
    let budget: usize = if quick { 32 << 20 } else { 256 << 20 };
    b.step("opening and reading the files");
    let mut cfg = CacheConfig::new(budget);
    // Every file stays cached: no readahead beyond the files, no flusher to wake.
    cfg.readahead_max = 0;
    let cache = PageCache::new(cfg)?;
    let files = (0..FILES)
        .map(|i| {
            let mut data = vec![0u8; file_len];
            data.chunks_mut(PAGE)
                .for_each(|p| p[..8].copy_from_slice(&(i as u64).to_le_bytes()));
            cache.open(MemStore::from_vec(data))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut buf = vec![0u8; PAGE];
    for (i, f) in files.iter().enumerate() {
        for off in (0..file_len as u64).step_by(PAGE) {
            ensure!(f.read_at(off, &mut buf)? == PAGE, "short read of file {i}");
            ensure!(
                buf[..8] == (i as u64).to_le_bytes(),
                "wrong bytes in file {i}"
            );
        }
    }
    ensure!(
        cache.stats_exact().cached_frames * PAGE == FILES * file_len,
        "every file cached"
    );
    let mut iops: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    for _ in 0..repeats(quick) {
        for (v, variant) in VARIANTS.iter().enumerate() {
            if !b.wants(variant) {
                continue;
            }
            b.step(&format!("{CASE} / {variant}"));
            let (r, n) = run_variant(&cache, &files, variant, quick);
            iops[v].push(r);
            ns[v].push(n);
        }
    }
    let median = |xs: &mut Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        xs.get(xs.len() / 2).copied()
    };
    let alone = median(&mut iops[0].clone());
    for (v, variant) in VARIANTS.iter().enumerate() {
        let Some(r) = median(&mut iops[v]) else {
            continue;
        };
        b.record(CASE, variant, THREADS, "iops", r, "1/s");
        if v == 0 {
            continue;
        }
        if let Some(alone) = alone {
            b.record(
                CASE,
                variant,
                THREADS,
                "iops_share_unmonitored",
                r / alone,
                "ratio",
            );
        }
        if let Some(n) = median(&mut ns[v]) {
            b.record(CASE, variant, THREADS, "ns_per_stats", n, "ns");
        }
    }
    b.compare(CASE, "drain-and-visit", "counters");
    Ok(())
}
