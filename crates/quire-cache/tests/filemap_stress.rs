//! Bounded stress runs on caches much smaller than their files: the budget is never exceeded
//! (sampled while the run goes), nothing deadlocks (a watchdog aborts the process if a run
//! does not finish), no operation fails because the cache is full, the data is exact at the
//! end, and every frame comes back when the files are dropped.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quire::filemap::{CacheConfig, PageCache};
use quire::store::MemStore;

use common::{check_no_leak, read_all, same, Rng, PAGE};

/// Aborts the process if `done` is not set within `limit`: a deadlocked run must not hang the
/// test suite (a panic in the watchdog could not stop the stuck threads).
fn watchdog(done: Arc<AtomicBool>, limit: Duration, what: &'static str) {
    std::thread::spawn(move || {
        let start = Instant::now();
        while !done.load(Ordering::Acquire) {
            if start.elapsed() > limit {
                eprintln!("{what}: no progress after {limit:?}: deadlock");
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
}

/// Samples the cache's counts while `stop` is clear; returns how many samples it took.
fn sampler(cache: &PageCache, stop: &AtomicBool) -> u64 {
    let mut samples = 0;
    let mut max_cached = 0;
    while !stop.load(Ordering::Relaxed) {
        let s = cache.stats_exact();
        assert!(s.cached_frames <= s.frames, "over budget: {s:?}");
        assert!(s.free_frames <= s.frames, "{s:?}");
        assert!(s.dirty_frames <= s.frames, "{s:?}");
        let b = cache.pool().stats();
        assert!(
            b.allocated <= b.total,
            "the pool handed out more than it has: {b:?}"
        );
        assert_eq!(
            b.free + b.cached + b.allocated,
            b.total,
            "the pool's frames add up: {b:?}"
        );
        max_cached = max_cached.max(s.cached_frames);
        samples += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    assert!(max_cached > 0);
    samples
}

#[test]
fn four_threads_on_a_file_eight_times_the_cache() {
    const FILE: usize = 4 << 20;
    const THREADS: usize = 4;
    let mut cfg = CacheConfig::new(512 << 10);
    cfg.readahead_max = 64 << 10;
    cfg.max_folio_order = 4;
    cfg.dirty_background = 64 << 10;
    cfg.dirty_limit = 160 << 10;
    cfg.dirty_expire = Duration::from_millis(30);
    cfg.flush_interval = Duration::from_millis(10);
    let cache = PageCache::new(cfg).unwrap();
    let mut rng = Rng(0xabcdef);
    let initial = rng.bytes(FILE);
    let store = Arc::new(MemStore::from_vec(initial.clone()));
    let f = cache.open(store.clone()).unwrap();
    let model = Mutex::new(initial);
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let done = Arc::new(AtomicBool::new(false));
    watchdog(done.clone(), Duration::from_secs(60), "stress");
    let run = Duration::from_millis(1000);
    let region = FILE / THREADS;
    std::thread::scope(|s| {
        let sampled = s.spawn(|| sampler(&cache, &stop));
        for t in 0..THREADS {
            let (f, model, stop, ops) = (&f, &model, &stop, &ops);
            s.spawn(move || {
                let mut rng = Rng(t as u64 * 7919 + 1);
                let h = f.reopen();
                let (lo, hi) = (t * region, (t + 1) * region);
                let mut buf = vec![0u8; 64 << 10];
                while !stop.load(Ordering::Relaxed) {
                    match rng.below(10) {
                        0..=2 => {
                            let len = 1 + rng.below(24 << 10);
                            let off = lo + rng.below(hi - lo - len);
                            let w = rng.bytes(len);
                            assert_eq!(h.write_at(off as u64, &w).unwrap(), len);
                            model.lock().unwrap()[off..off + len].copy_from_slice(&w);
                        }
                        3..=5 => {
                            let len = 1 + rng.below(buf.len());
                            let off = lo + rng.below(hi - lo - len);
                            assert_eq!(h.read_at(off as u64, &mut buf[..len]).unwrap(), len);
                            same(&buf[..len], &model.lock().unwrap()[off..off + len], "read");
                        }
                        6 => {
                            // A sequential pass over a stretch of the region.
                            let start = lo + rng.below(hi - lo - (256 << 10));
                            for off in (start..start + (256 << 10)).step_by(32 << 10) {
                                let b = &mut buf[..32 << 10];
                                h.read_at(off as u64, b).unwrap();
                                same(b, &model.lock().unwrap()[off..off + b.len()], "scan");
                            }
                        }
                        7 => {
                            // Somebody else's region: unchecked bytes, checked length.
                            let off = rng.below(FILE - buf.len());
                            assert_eq!(h.read_at(off as u64, &mut buf).unwrap(), buf.len());
                        }
                        8 => {
                            // Hold two zero-copy references for a moment.
                            let p1 = lo / PAGE + rng.below(region / PAGE);
                            let p2 = lo / PAGE + rng.below(region / PAGE);
                            let r1 = h.read_folio(p1 as u64).unwrap();
                            let r2 = h.read_folio(p2 as u64).unwrap();
                            let at = (p1 - r1.index() as usize) * PAGE;
                            let m = model.lock().unwrap()[p1 * PAGE..(p1 + 1) * PAGE].to_vec();
                            same(&r1.bytes().unwrap()[at..at + PAGE], &m, "folio");
                            std::thread::yield_now();
                            drop((r1, r2));
                        }
                        _ => {
                            if rng.below(4) == 0 {
                                h.fsync().unwrap();
                            } else {
                                h.sync_range(lo as u64, region as u64).unwrap();
                            }
                        }
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(run);
        stop.store(true, Ordering::Relaxed);
        assert!(sampled.join().unwrap() > 10, "the sampler ran");
    });
    done.store(true, Ordering::Release);
    let ops = ops.load(Ordering::Relaxed);
    eprintln!("stress: {ops} operations in {run:?}");
    assert!(ops > 4 * THREADS as u64, "the threads made progress");
    let model = model.into_inner().unwrap();
    same(&read_all(&f), &model, "every byte after the run");
    f.fsync().unwrap();
    same(&store.synced_contents(), &model, "the store after fsync");
    drop(f);
    check_no_leak(&cache, "four threads on one file");
    let cache = PageCache::new(CacheConfig::new(1 << 20)).unwrap();
    let f = cache.open(store).unwrap();
    same(&read_all(&f), &model, "through a new cache");
}

#[test]
fn six_files_writing_past_the_dirty_limit_in_a_tiny_cache() {
    // Every thread writes its own file, sequentially and at random, far past the dirty limit
    // of a 64-frame cache, and reads back: writers are throttled and reclaim writes back, but
    // nothing fails and nothing waits for ever.
    const FILES: usize = 6;
    const FILE: usize = 1 << 20;
    let mut cfg = CacheConfig::new(256 << 10);
    cfg.readahead_max = 32 << 10;
    cfg.max_folio_order = 3;
    cfg.dirty_background = 32 << 10;
    cfg.dirty_limit = 96 << 10;
    cfg.dirty_expire = Duration::from_millis(20);
    cfg.flush_interval = Duration::from_millis(10);
    let cache = PageCache::new(cfg).unwrap();
    let stores: Vec<_> = (0..FILES).map(|_| Arc::new(MemStore::new())).collect();
    let stop = AtomicBool::new(false);
    let done = Arc::new(AtomicBool::new(false));
    watchdog(done.clone(), Duration::from_secs(60), "six files");
    let models: Vec<Vec<u8>> = std::thread::scope(|s| {
        let sampled = s.spawn(|| sampler(&cache, &stop));
        let workers: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(i, store)| {
                let (cache, stop) = (&cache, &stop);
                s.spawn(move || {
                    let f = cache.open(store.clone()).unwrap();
                    let mut rng = Rng(i as u64 + 99);
                    let mut model = Vec::new();
                    // Fill sequentially in 40 KiB writes.
                    while model.len() < FILE {
                        let w = rng.bytes(40 << 10);
                        f.write_at(model.len() as u64, &w).unwrap();
                        model.extend_from_slice(&w);
                    }
                    while !stop.load(Ordering::Relaxed) {
                        let len = 1 + rng.below(16 << 10);
                        let off = rng.below(model.len() - len);
                        if rng.below(2) == 0 {
                            let w = rng.bytes(len);
                            f.write_at(off as u64, &w).unwrap();
                            model[off..off + len].copy_from_slice(&w);
                        } else {
                            let mut b = vec![0u8; len];
                            f.read_at(off as u64, &mut b).unwrap();
                            same(&b, &model[off..off + len], "read back");
                        }
                    }
                    same(&read_all(&f), &model, "the whole file");
                    f.close().unwrap();
                    model
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(600));
        stop.store(true, Ordering::Relaxed);
        let models = workers.into_iter().map(|w| w.join().unwrap()).collect();
        assert!(sampled.join().unwrap() > 10);
        models
    });
    done.store(true, Ordering::Release);
    check_no_leak(&cache, "six files");
    for (store, model) in stores.iter().zip(&models) {
        same(&store.synced_contents(), model, "closed with fsync");
    }
}

#[test]
fn truncation_racing_with_readers_and_writers_never_shows_stale_bytes() {
    // The file holds a known pattern. One thread cuts it to random lengths and grows it back;
    // others write the pattern's own bytes at random places and read at random. Every byte
    // ever read must be the pattern's or zero (a cut zeroes what it removes; nothing else may
    // appear), and the final state must survive fsync and a new cache exactly.
    const FILE: usize = 1 << 20;
    for align in [1usize, 4096] {
        let mut cfg = CacheConfig::new(256 << 10);
        cfg.readahead_max = 32 << 10;
        cfg.max_folio_order = 3;
        cfg.dirty_background = 32 << 10;
        cfg.dirty_limit = 96 << 10;
        cfg.flush_interval = Duration::from_millis(5);
        cfg.dirty_expire = Duration::from_millis(10);
        let cache = PageCache::new(cfg).unwrap();
        let pattern = Rng(align as u64).bytes(FILE);
        let store = Arc::new(MemStore::from_vec(pattern.clone()).with_alignment(align));
        let f = cache.open(store.clone()).unwrap();
        let stop = AtomicBool::new(false);
        let done = Arc::new(AtomicBool::new(false));
        watchdog(done.clone(), Duration::from_secs(60), "truncation race");
        std::thread::scope(|s| {
            let (f, stop, pattern) = (&f, &stop, &pattern);
            s.spawn(move || {
                let h = f.reopen();
                let mut rng = Rng(5);
                while !stop.load(Ordering::Relaxed) {
                    h.set_len(rng.below(FILE) as u64).unwrap();
                    std::thread::yield_now();
                    if rng.below(2) == 0 {
                        h.set_len(FILE as u64).unwrap();
                    } else {
                        // Grow by writing the pattern's last byte at the end.
                        h.write_at(FILE as u64 - 1, &pattern[FILE - 1..]).unwrap();
                    }
                }
            });
            for t in 0..2u64 {
                s.spawn(move || {
                    let h = f.reopen();
                    let mut rng = Rng(t + 11);
                    while !stop.load(Ordering::Relaxed) {
                        let len = 1 + rng.below(20_000);
                        let off = rng.below(FILE - len);
                        h.write_at(off as u64, &pattern[off..off + len]).unwrap();
                    }
                });
            }
            for t in 0..2u64 {
                s.spawn(move || {
                    let h = f.reopen();
                    let mut rng = Rng(t + 21);
                    let mut buf = vec![0u8; 40_000];
                    while !stop.load(Ordering::Relaxed) {
                        let off = rng.below(FILE);
                        let n = h.read_at(off as u64, &mut buf).unwrap();
                        assert!(n <= FILE - off);
                        for (i, &b) in buf[..n].iter().enumerate() {
                            assert!(
                                b == pattern[off + i] || b == 0,
                                "a stale or garbage byte at {}: {b}",
                                off + i
                            );
                        }
                        if rng.below(4) == 0 {
                            let page = rng.below(FILE / PAGE) as u64;
                            if let Ok(r) = h.read_folio(page) {
                                let base = r.index() as usize * PAGE;
                                for (i, &b) in r.bytes().unwrap().iter().enumerate() {
                                    let want = pattern.get(base + i).copied().unwrap_or(0);
                                    assert!(b == want || b == 0, "a folio byte at {}", base + i);
                                }
                            }
                        }
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(400));
            stop.store(true, Ordering::Relaxed);
        });
        done.store(true, Ordering::Release);
        let now = read_all(&f);
        assert!(now
            .iter()
            .enumerate()
            .all(|(i, &b)| b == pattern[i] || b == 0));
        f.fsync().unwrap();
        same(&store.synced_contents(), &now, "the store after fsync");
        drop(f);
        check_no_leak(&cache, "truncation racing");
        let cache2 = PageCache::new(CacheConfig::new(1 << 20)).unwrap();
        let g = cache2.open(store.clone()).unwrap();
        same(
            &read_all(&g),
            &now,
            &format!("through a new cache (align {align})"),
        );
    }
}
