//! Dropping a cache stops its background reclaim thread (`quire-kswapd`), also while that
//! thread is busy: memory pressure from a reader, and dirty folios whose write-back is slow and
//! fails. Threads are counted by name in `/proc/self/task/*/comm`.
//!
//! This file holds a single test, so that no other test of this binary makes or drops caches
//! while it counts.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quire::filemap::{CacheConfig, PageCache, BACKGROUND_RECLAIM_MIN};
use quire::stats::Event;
use quire::store::{MemStore, Op, Store, StoreError};
use quire::vmscan::ReclaimPolicy;

use common::{pattern, quiet_config, wait_for, Watchdog, PAGE};

/// Threads of this process whose name is `name` (or starts with it, for `quire-io-`).
fn threads(name: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|comm| comm.trim_end().starts_with(name))
        .count()
}

/// Waits until exactly `n` threads are named `name`.
#[track_caller]
fn expect_threads(name: &str, n: usize, what: &str) {
    wait_for(
        what,
        Duration::from_secs(10),
        || threads(name) == n,
        || format!("{} threads named {name}, want {n}", threads(name)),
    );
}

/// A store whose writes take 5 ms and then fail (a dying disk).
struct SlowFailing(MemStore);

impl Store for SlowFailing {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> quire::store::Result<usize> {
        self.0.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, _: &[u8]) -> quire::store::Result<usize> {
        std::thread::sleep(Duration::from_millis(5));
        Err(StoreError::Io {
            op: Op::Write,
            offset,
            kind: std::io::ErrorKind::Other,
            errno: Some(5),
        })
    }

    fn sync(&self) -> quire::store::Result<()> {
        self.0.sync()
    }

    fn len(&self) -> quire::store::Result<u64> {
        self.0.len()
    }

    fn set_len(&self, len: u64) -> quire::store::Result<()> {
        self.0.set_len(len)
    }
}

#[test]
fn dropping_the_cache_stops_its_background_reclaim_thread() {
    let _w = Watchdog::arm(Duration::from_secs(60), "kswapd stop");
    if std::fs::metadata("/proc/self/task").is_err() {
        eprintln!("skipped: no /proc/self/task");
        return;
    }
    expect_threads("quire-kswapd", 0, "no cache yet");

    // Idle caches: one thread per LRU cache, none for the clock, none for a cache below
    // BACKGROUND_RECLAIM_MIN (its allocations reclaim for themselves).
    let mut caches: Vec<_> = (0..3)
        .map(|_| PageCache::new(CacheConfig::new(BACKGROUND_RECLAIM_MIN)).unwrap())
        .collect();
    let mut clock = CacheConfig::new(BACKGROUND_RECLAIM_MIN);
    clock.reclaim = ReclaimPolicy::Clock;
    caches.push(PageCache::new(clock).unwrap());
    caches.push(PageCache::new(CacheConfig::new(BACKGROUND_RECLAIM_MIN - (4 << 10))).unwrap());
    expect_threads(
        "quire-kswapd",
        3,
        "three LRU caches, a clock and a small cache",
    );
    // A clone is another handle on the same cache.
    let clone = caches[0].clone();
    caches.truncate(1);
    expect_threads("quire-kswapd", 1, "two dropped");
    caches.clear();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(threads("quire-kswapd"), 1, "a clone keeps the cache");
    drop(clone);
    expect_threads("quire-kswapd", 0, "every idle cache dropped");
    expect_threads("quire-flush", 0, "their flushers too");

    // A busy cache: a reader streams a file four times the budget while a third of the cache
    // is dirty on a store whose writes take 5 ms and fail, so reclaim keeps meeting folios it
    // cannot free and the flusher is always busy. The cache goes away while that goes on: the
    // reader drops its handle, the last one, the moment it is told to stop.
    let mut cfg = quiet_config(1 << 20);
    cfg.background_reclaim = true;
    cfg.readahead_max = 64 << 10;
    cfg.max_folio_order = 2;
    let cache = PageCache::new(cfg).unwrap();
    expect_threads("quire-kswapd", 1, "the busy cache");
    let a = cache.open(SlowFailing(MemStore::new())).unwrap();
    let dirty = pattern(80 * PAGE, 1);
    for (i, c) in dirty.chunks(4 * PAGE).enumerate() {
        a.write_at((i * 4 * PAGE) as u64, c).unwrap();
    }
    let b_data = pattern(4 << 20, 2);
    let b = cache
        .open(Arc::new(MemStore::from_vec(b_data.clone())))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            let mut off = 0;
            while !stop.load(Ordering::Relaxed) {
                b.read_exact_at(off as u64, &mut buf).unwrap();
                off = (off + buf.len()) % b_data.len();
            }
            drop(b);
        })
    };
    wait_for(
        "background reclaim at work",
        Duration::from_secs(20),
        || cache.stats_exact().vmstat.get(Event::KswapdWakeups) >= 3,
        || format!("{:?}", cache.stats_exact()),
    );
    // The cache handle goes first; then, at once, the reader drops its file while this thread
    // closes the dirty one (its write-back fails, slowly; its data is dropped with it).
    // Whichever goes last takes the cache with it, maybe in the middle of a reclaim round.
    drop(cache);
    stop.store(true, Ordering::Relaxed);
    drop(a);
    reader.join().unwrap();
    expect_threads("quire-kswapd", 0, "the busy cache dropped");
    expect_threads("quire-flush", 0, "its flusher too");
    expect_threads("quire-io-", 0, "and its readahead threads");
}
