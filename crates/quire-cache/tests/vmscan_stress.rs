//! The LRU lists against a model under stress: every cached folio on exactly
//! one list, counts that add up, no lost byte and no leaked frame, while reclaim, background
//! reclaim and the flusher run all the time in a cache much smaller than its files.
//!
//! What "on exactly one list" is checked by: [`PageCache::check_lru`] walks every list under
//! the LRU lock (links both ways, each folio on the list its flags name, frame counts) and
//! finds every listed folio in its file's index; the sum of the lists equal to the cached
//! frames then means no cached folio is missing from the lists either (a folio on two lists
//! would be counted twice, one on none would be missing). `check_lru` needs no truncation or
//! removal in flight, so it runs after the threaded phase and between the operations of a
//! single-threaded one; the sum needs no folio held off the lists by a reclaim round, so it is
//! waited for.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quire::filemap::{CacheConfig, CachedFile, PageCache};
use quire::stats::Event;
use quire::store::MemStore;

use common::{check_no_leak, lru_total, read_all, same, wait_for, Rng, StopOnDrop, Watchdog, PAGE};

/// A small cache where reclaim, background reclaim and the flusher never rest: 128 frames.
fn config() -> CacheConfig {
    let mut cfg = CacheConfig::new(512 << 10);
    // (A budget this small reclaims in the allocating threads by default: background reclaim
    // is asked for, to race it too.)
    cfg.background_reclaim = true;
    cfg.readahead_max = 32 << 10;
    cfg.max_folio_order = 3;
    cfg.io_threads = 1;
    cfg.dirty_background = 32 << 10;
    cfg.dirty_limit = 96 << 10;
    cfg.dirty_expire = Duration::from_millis(20);
    cfg.flush_interval = Duration::from_millis(10);
    cfg
}

/// Waits until every cached frame is on a list (a reclaim round may hold a few isolated for a
/// moment), and checks the lists.
#[track_caller]
fn lists_hold_every_cached_folio(cache: &PageCache, what: &str) {
    cache.check_lru().unwrap_or_else(|e| panic!("{what}: {e}"));
    wait_for(
        what,
        Duration::from_secs(10),
        || {
            let s = cache.stats_exact();
            lru_total(&s) == s.cached_frames
        },
        || format!("lists and cached frames differ: {:?}", cache.stats_exact()),
    );
}

/// Reclaim's counters add up.
#[track_caller]
fn counters_add_up(cache: &PageCache, what: &str) {
    // Background reclaim counts a batch's steals after evicting it: take figures read while
    // no batch was in flight.
    let mut v = cache.stats_exact().vmstat;
    wait_for(
        what,
        Duration::from_secs(5),
        || {
            v = cache.stats_exact().vmstat;
            v.get(Event::PgSteal) == v.get(Event::Evictions)
        },
        || format!("{:?}", cache.stats_exact().vmstat),
    );
    let get = |e: Event| v.get(e);
    assert!(get(Event::PgSteal) > 0, "{what}: reclaim ran: {v:?}");
    assert_eq!(
        get(Event::PgSteal),
        get(Event::Evictions),
        "{what}: every frame stolen left a shadow: {v:?}"
    );
    assert!(get(Event::PgScan) >= get(Event::PgSteal), "{what}: {v:?}");
    assert!(
        get(Event::WorkingsetActivate) <= get(Event::WorkingsetRefault),
        "{what}: {v:?}"
    );
    assert!(
        get(Event::WorkingsetRestore) <= get(Event::WorkingsetActivate),
        "{what}: {v:?}"
    );
}

/// One file and its model.
struct Owned {
    f: CachedFile,
    store: Arc<MemStore>,
    model: Mutex<Vec<u8>>,
}

/// Largest file length the operations make.
const MAX_LEN: usize = 512 << 10;

/// One random operation on `o` by its owner (the only thread that changes the file), checked
/// against its model.
fn step(o: &Owned, rng: &mut Rng, buf: &mut [u8], what: &str) {
    let mut m = o.model.lock().unwrap();
    match rng.below(20) {
        0..=5 => {
            let len = 1 + rng.below(16 << 10);
            let off = rng.below((m.len() + 8192).min(MAX_LEN - len));
            let w = rng.bytes(len);
            assert_eq!(o.f.write_at(off as u64, &w).unwrap(), len, "{what}");
            if m.len() < off + len {
                m.resize(off + len, 0);
            }
            m[off..off + len].copy_from_slice(&w);
        }
        6..=11 => {
            let off = rng.below(m.len() + 100);
            let len = 1 + rng.below(buf.len());
            let n = o.f.read_at(off as u64, &mut buf[..len]).unwrap();
            let want = m.len().saturating_sub(off).min(len);
            assert_eq!(n, want, "{what}: read length at {off}");
            same(&buf[..n], &m[off.min(m.len())..][..n], what);
        }
        12 => {
            // Cut, and sometimes grow back with zeros.
            let len = rng.range(m.len() / 2, m.len() + 1);
            o.f.set_len(len as u64).unwrap();
            m.truncate(len);
            if rng.below(2) == 0 {
                let grow = (len + rng.below(64 << 10)).min(MAX_LEN);
                o.f.set_len(grow as u64).unwrap();
                m.resize(grow, 0);
            }
        }
        13 => o.f.fsync().unwrap(),
        14 => {
            o.f.invalidate().unwrap();
        }
        15 => {
            // Hold two folios for a moment, zero-copy.
            if m.len() >= PAGE {
                let pages = m.len() / PAGE;
                let (p1, p2) = (rng.below(pages), rng.below(pages));
                let r1 = o.f.read_folio(p1 as u64).unwrap();
                let r2 = o.f.read_folio(p2 as u64).unwrap();
                let at = (p1 - r1.index() as usize) * PAGE;
                same(
                    &r1.bytes().unwrap()[at..at + PAGE],
                    &m[p1 * PAGE..(p1 + 1) * PAGE],
                    what,
                );
                std::thread::yield_now();
                drop((r1, r2));
            }
        }
        _ => {
            // A sequential pass over a stretch.
            let start = rng.below(m.len().max(1));
            let end = (start + (128 << 10)).min(m.len());
            let mut off = start;
            while off < end {
                let n = (end - off).min(buf.len());
                assert_eq!(o.f.read_at(off as u64, &mut buf[..n]).unwrap(), n);
                same(&buf[..n], &m[off..off + n], what);
                off += n;
            }
        }
    }
}

fn open_files(cache: &PageCache, n: usize, len: usize) -> Vec<Owned> {
    (0..n)
        .map(|i| {
            let data = Rng(i as u64 + 1).bytes(len);
            let store = Arc::new(MemStore::from_vec(data.clone()));
            Owned {
                f: cache.open(store.clone()).unwrap(),
                store,
                model: Mutex::new(data),
            }
        })
        .collect()
}

/// Checks every file against its model and its store after `sync_all`, then closes them and
/// checks that nothing is left.
fn finish(cache: &PageCache, files: Vec<Owned>, what: &str) {
    cache.sync_all().unwrap();
    for o in &files {
        let m = o.model.lock().unwrap();
        same(&read_all(&o.f), &m, what);
        same(&o.store.contents(), &m, what);
    }
    assert_eq!(cache.stats_exact().dirty_frames, 0, "{what}");
    lists_hold_every_cached_folio(cache, what);
    // Background reclaim, woken by the reads above, may evict between the two counts: they
    // must agree once it rests (a lost count would never agree).
    let counts = || {
        let per_file: usize = files.iter().map(|o| o.f.cached_frames()).sum();
        (per_file, cache.stats_exact().cached_frames)
    };
    wait_for(
        &format!("{what}: the files' frames are the cache's"),
        Duration::from_secs(10),
        || {
            let (per_file, cached) = counts();
            per_file == cached
        },
        || format!("(per file, cached) = {:?}", counts()),
    );
    counters_add_up(cache, what);
    drop(files);
    let s = cache.stats_exact();
    assert_eq!(lru_total(&s), 0, "{what}: the lists are empty: {s:?}");
    check_no_leak(cache, what);
}

/// Three threads each own a file (a model per file: reads, writes, cuts, fsyncs,
/// invalidations, folios held, sequential passes); a fourth reads, invalidates and syncs all of
/// them unchecked; a fifth samples the cache. The files total 1.1 MiB in a 512 KiB cache, so
/// reclaim and write-back never rest.
#[test]
fn threads_on_three_files_keep_the_lists_and_the_data_whole() {
    const FILES: usize = 3;
    let _w = Watchdog::arm(Duration::from_secs(60), "lru stress");
    let cache = PageCache::new(config()).unwrap();
    let files = open_files(&cache, FILES, 384 << 10);
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        for (t, o) in files.iter().enumerate() {
            let (stop, ops) = (&stop, &ops);
            s.spawn(move || {
                let _stop = StopOnDrop(stop);
                let mut rng = Rng(t as u64 * 7919 + 3);
                let mut buf = vec![0u8; 48 << 10];
                let what = format!("file {t}");
                while !stop.load(Ordering::Relaxed) {
                    step(o, &mut rng, &mut buf, &what);
                    ops.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        s.spawn(|| {
            let mut rng = Rng(99);
            let mut buf = vec![0u8; 32 << 10];
            let handles: Vec<_> = files.iter().map(|o| o.f.reopen()).collect();
            while !stop.load(Ordering::Relaxed) {
                let h = &handles[rng.below(FILES)];
                match rng.below(64) {
                    0 => {
                        h.invalidate().unwrap();
                    }
                    1..=4 => h.sync_range(rng.below(MAX_LEN) as u64, 64 << 10).unwrap(),
                    _ => {
                        let off = rng.below(MAX_LEN);
                        let n = h.read_at(off as u64, &mut buf).unwrap();
                        assert!(n <= buf.len());
                    }
                }
            }
        });
        s.spawn(|| {
            let mut samples = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let st = cache.stats_exact();
                assert!(st.cached_frames <= st.frames, "{st:?}");
                assert!(st.dirty_frames <= st.frames, "{st:?}");
                assert!(lru_total(&st) <= st.frames, "{st:?}");
                samples += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
            assert!(samples > 10);
        });
        std::thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::Relaxed);
    });
    let ops = ops.load(Ordering::Relaxed);
    let s = cache.stats_exact();
    eprintln!("{ops} operations: {:?}", s.vmstat);
    assert!(ops > 100, "the threads made progress");
    assert!(s.vmstat.get(Event::KswapdWakeups) > 0);
    finish(&cache, files, "threaded");
}

/// The same operations from one thread on two files, with the lists checked every 20
/// operations (background reclaim and the flusher still run meanwhile).
#[test]
fn the_lists_check_out_between_the_operations_of_a_single_thread() {
    let _w = Watchdog::arm(Duration::from_secs(60), "lru single thread");
    let cache = PageCache::new(config()).unwrap();
    let files = open_files(&cache, 2, 384 << 10);
    let mut rng = Rng(42);
    let mut buf = vec![0u8; 48 << 10];
    for op in 0..2000 {
        let i = rng.below(files.len());
        step(&files[i], &mut rng, &mut buf, &format!("op {op}"));
        if op % 20 == 19 {
            cache
                .check_lru()
                .unwrap_or_else(|e| panic!("after op {op}: {e}"));
        }
        if op % 200 == 199 {
            lists_hold_every_cached_folio(&cache, &format!("after op {op}"));
        }
    }
    finish(&cache, files, "single thread");
}
