//! No frame is leaked: once every `CachedFile` of a cache is dropped, the cache holds nothing
//! (`cached_frames == 0`, `dirty_frames == 0`, no file) and every frame of the pool is free —
//! after reads with readahead still in flight, writes, copy-on-write past held references,
//! truncation, write-back failures, evictions, and invalidation racing with reads.
//!
//! The index counts are checked at once; the free frames within a bounded wait, since a
//! background thread (the flusher, a readahead job) may hold a reference to a folio for a
//! moment after its file closed.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quire::filemap::{CacheConfig, PageCache};
use quire::store::{Fault, MemStore};

use common::{check_no_leak, faulty, read_all, same, wait_for, PAGE};

/// This file's byte pattern (multiplier 37).
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    common::pattern_with(len, seed, 37)
}

#[test]
fn dropping_files_frees_every_frame_whatever_they_did() {
    let mut cfg = CacheConfig::new(1 << 20);
    cfg.readahead_max = 256 << 10;
    cfg.dirty_background = 128 << 10;
    cfg.dirty_limit = 384 << 10;
    cfg.flush_interval = Duration::from_millis(10);
    cfg.dirty_expire = Duration::from_millis(20);
    let cache = PageCache::new(cfg).unwrap();

    // Readahead in flight when the file goes: a large sequential read, dropped at once.
    for _ in 0..5 {
        let f = cache.open(MemStore::from_vec(pattern(4 << 20, 1))).unwrap();
        let mut buf = vec![0u8; 64 << 10];
        for off in (0..512 << 10).step_by(64 << 10) {
            f.read_at(off as u64, &mut buf).unwrap();
        }
        drop(f);
        check_no_leak(&cache, "readahead in flight");
    }

    // Writes (dirty data written back on close), copy-on-write past a held reference,
    // truncation, several handles, several files.
    let stores: Vec<_> = (0..3).map(|_| Arc::new(MemStore::new())).collect();
    let mut models = Vec::new();
    {
        let files: Vec<_> = stores
            .iter()
            .map(|s| cache.open(s.clone()).unwrap())
            .collect();
        let extra = files[0].reopen();
        for (i, f) in files.iter().enumerate() {
            let data = pattern(600_000 + i * 1000, i as u8);
            f.write_at(0, &data).unwrap();
            let r = f.read_folio(3).unwrap();
            f.write_at(3 * PAGE as u64 + 1, b"cow").unwrap();
            let mut model = data;
            model[3 * PAGE + 1..3 * PAGE + 4].copy_from_slice(b"cow");
            let at = r.index() as usize * PAGE;
            same(
                r.bytes().unwrap(),
                &pattern(600_000 + i * 1000, i as u8)[at..at + r.size()],
                "held",
            );
            drop(r);
            f.set_len(300_001).unwrap();
            model.truncate(300_001);
            models.push(model);
        }
        same(&read_all(&extra), &models[0], "through the extra handle");
        drop(files);
        assert_eq!(
            cache.stats_exact().files,
            1,
            "the extra handle keeps its file"
        );
    }
    check_no_leak(&cache, "written files");
    for (s, m) in stores.iter().zip(&models) {
        same(&s.contents(), m, "written back on close");
    }

    // A file whose write-back keeps failing: its data is dropped with it (nobody is left to
    // report to), and so are its frames.
    let store = faulty(Vec::new(), 1);
    store.add(Fault::write_error(0..1 << 30).persistent());
    let f = cache.open(store.clone()).unwrap();
    f.write_at(0, &pattern(100_000, 9)).unwrap();
    assert!(f.fsync().is_err());
    drop(f);
    check_no_leak(&cache, "failing write-back");

    // Evicted files: shadows hold no frames.
    let f = cache.open(MemStore::from_vec(pattern(3 << 20, 4))).unwrap();
    read_all(&f);
    cache.shrink(usize::MAX);
    read_all(&f);
    drop(f);
    check_no_leak(&cache, "evicted and refaulted");
}

#[test]
fn invalidate_racing_with_reads_writes_and_evictions_leaks_nothing() {
    // Invalidation erases shadow entries while readers insert folios over them; reclaim makes
    // new shadows all the time. Each thread checks what it reads; at the end nothing may be left.
    let mut cfg = CacheConfig::new(256 << 10);
    cfg.readahead_max = 32 << 10;
    cfg.max_folio_order = 3;
    let cache = PageCache::new(cfg).unwrap();
    let data = pattern(2 << 20, 5);
    let store = Arc::new(MemStore::from_vec(data.clone()));
    let f = cache.open(store.clone()).unwrap();
    let stop = AtomicBool::new(false);
    let written = std::sync::Mutex::new(data.clone());
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (f, stop, data) = (&f, &stop, &data);
            s.spawn(move || {
                let h = f.reopen();
                let mut x = 0x9e37_79b9u64 + t;
                let mut buf = vec![0u8; 3 * PAGE];
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Readers stay in the first half; the writer owns the second.
                    let off = (x as usize % (data.len() / 2 - buf.len())) & !0xff;
                    h.read_at(off as u64, &mut buf).unwrap();
                    same(&buf, &data[off..off + buf.len()], "a racing read");
                }
            });
        }
        {
            let (f, stop, written) = (&f, &stop, &written);
            s.spawn(move || {
                let h = f.reopen();
                let half = 1 << 20;
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let off = half + (i * 7919 * 13) % (half - 5000);
                    let w = pattern(5000, i as u8);
                    h.write_at(off as u64, &w).unwrap();
                    written.lock().unwrap()[off..off + 5000].copy_from_slice(&w);
                    i += 1;
                }
            });
        }
        let (f, stop) = (&f, &stop);
        s.spawn(move || {
            let h = f.reopen();
            while !stop.load(Ordering::Relaxed) {
                h.invalidate().unwrap();
                std::thread::yield_now();
            }
        });
        std::thread::sleep(Duration::from_millis(600));
        stop.store(true, Ordering::Relaxed);
    });
    let model = written.into_inner().unwrap();
    same(&read_all(&f), &model, "after the race");
    // Background reclaim may still be evicting what `read_all` brought in, between the two
    // counts: they must agree once it rests (a lost count would never agree).
    wait_for(
        "one file: its count is the cache's",
        Duration::from_secs(2),
        || cache.stats_exact().cached_frames == f.cached_frames(),
        || {
            format!(
                "cache {} frames, file {}",
                cache.stats_exact().cached_frames,
                f.cached_frames()
            )
        },
    );
    drop(f);
    check_no_leak(&cache, "after invalidate raced with reads");
    same(&store.contents(), &model, "written back");
}
