//! `CachedFile::store_bytes_read`: a file's misses in bytes, counted by the cache whichever
//! engine read them — the store's own count where the store can count (threads calling
//! `read_at`), the exact bytes a workload must miss where it cannot (io_uring on the store's
//! file descriptor, which no `read_at` sees).
#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::{pattern, PAGE};
use quire::bio::{IoEngineChoice, IoEngineKind};
use quire::filemap::{CacheConfig, PageCache};
use quire::store::{FileStore, IoMode, MemStore, Result, Store};

/// A store that counts the bytes its `read_at` returned.
struct Counting {
    inner: MemStore,
    read: AtomicU64,
}

impl Store for Counting {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let n = self.inner.read_at(offset, buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> Result<()> {
        self.inner.sync()
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.inner.set_len(len)
    }
}

fn config(budget: usize, readahead: bool) -> CacheConfig {
    let mut cfg = CacheConfig::new(budget);
    if !readahead {
        cfg.readahead_max = 0;
        cfg.max_folio_order = 0;
    }
    cfg
}

#[test]
fn the_count_is_what_the_store_returned() {
    let len = 3 << 20;
    for readahead in [false, true] {
        let cache = PageCache::new(config(1 << 20, readahead)).unwrap();
        let store = Arc::new(Counting {
            inner: MemStore::from_vec(pattern(len, 3)),
            read: AtomicU64::new(0),
        });
        let file = cache.open(store.clone()).unwrap();
        let mut rng = common::Rng(0x5eed);
        let mut buf = vec![0u8; 3 * PAGE];
        // Random reads, a stream and rereads over a cache a third of the file: misses,
        // readahead and evictions.
        for i in 0..400 {
            let off = if i % 100 < 50 {
                rng.below(len - buf.len()) as u64
            } else {
                ((i % 50) * 14 * PAGE) as u64
            };
            file.read_exact_at(off, &mut buf).unwrap();
            // The store counts a read as it returns, the cache once the folio is filled;
            // readahead reads run on the engine's threads, so the cache's count may trail
            // for a moment, but never leads.
            let t0 = std::time::Instant::now();
            loop {
                let ours = file.store_bytes_read();
                let theirs = store.read.load(Ordering::Relaxed);
                assert!(
                    ours <= theirs,
                    "readahead {readahead}, read {i}: {ours} > {theirs}"
                );
                if ours == theirs {
                    break;
                }
                assert!(
                    t0.elapsed().as_secs() < 10,
                    "readahead {readahead}, read {i}: {ours} of {theirs} counted after 10 s"
                );
                std::thread::yield_now();
            }
        }
        assert!(file.store_bytes_read() > 0);
    }
}

#[test]
fn hits_cost_nothing_and_each_miss_its_bytes() {
    let cache = PageCache::new(config(4 << 20, false)).unwrap();
    let file = cache.open(MemStore::from_vec(pattern(1 << 20, 5))).unwrap();
    let other = cache.open(MemStore::from_vec(pattern(1 << 20, 6))).unwrap();
    let mut page = vec![0u8; PAGE];
    file.read_exact_at(7 * PAGE as u64, &mut page).unwrap();
    assert_eq!(file.store_bytes_read(), PAGE as u64);
    file.read_exact_at(7 * PAGE as u64 + 100, &mut page[..100])
        .unwrap();
    assert_eq!(file.store_bytes_read(), PAGE as u64, "a hit reads nothing");
    // Another handle of the same file shares the count; another file has its own.
    let again = file.reopen();
    again.read_exact_at(9 * PAGE as u64, &mut page).unwrap();
    assert_eq!(file.store_bytes_read(), 2 * PAGE as u64);
    assert_eq!(other.store_bytes_read(), 0);
}

/// Streams a 6 MiB file through a 16 MiB cache with folios of at most `order` over io_uring,
/// checking that every byte was read from the store exactly once, and returns the requests
/// the engine ran for it; `None` (skipped) where the kernel gives no io_uring.
fn stream_over_io_uring(order: u32) -> Option<u64> {
    let dir = env!("CARGO_TARGET_TMPDIR");
    let path =
        std::path::Path::new(dir).join(format!("quire-read-bytes-{}-{order}", std::process::id()));
    let len = 6 << 20;
    std::fs::write(&path, pattern(len, 9)).unwrap();
    let mut cfg = config(16 << 20, true);
    cfg.io_engine = IoEngineChoice::IoUring;
    cfg.max_folio_order = order;
    let cache = PageCache::new(cfg).unwrap();
    let engine = cache.stats_exact().io_engine;
    if engine.kind != IoEngineKind::IoUring {
        eprintln!("skipped: no io_uring here ({})", engine.reason);
        let _ = std::fs::remove_file(&path);
        return None;
    }
    let file = cache
        .open(FileStore::open(&path, IoMode::Buffered).unwrap())
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < len as u64 {
        off += file.read_at(off, &mut buf).unwrap() as u64;
    }
    // Readahead requests still in flight end before the count is final.
    let t0 = std::time::Instant::now();
    while file.store_bytes_read() < len as u64 && t0.elapsed().as_secs() < 10 {
        std::thread::yield_now();
    }
    assert_eq!(file.store_bytes_read(), len as u64, "order {order}");
    // Rereading it all hits.
    off = 0;
    while off < len as u64 {
        off += file.read_at(off, &mut buf).unwrap() as u64;
    }
    assert_eq!(file.store_bytes_read(), len as u64, "order {order}");
    Some(cache.stats_exact().io.submitted)
}

/// Over io_uring (where the kernel gives one) the store's `read_at` never runs for readahead,
/// yet a stream through a cache larger than the file reads each byte exactly once.
#[test]
fn io_uring_reads_are_counted() {
    if let Some(requests) = stream_over_io_uring(9) {
        assert!(
            requests > 0,
            "the stream's readahead went through the engine"
        );
    }
}

/// A readahead window of small folios goes to the ring as one request of many pieces (a
/// `readv`), not a request per folio: 1 536 pages in far fewer requests.
#[test]
fn io_uring_readahead_merges_a_window_of_small_folios() {
    if let Some(requests) = stream_over_io_uring(0) {
        assert!(requests > 0 && requests < 1536 / 16, "{requests} requests");
    }
}
