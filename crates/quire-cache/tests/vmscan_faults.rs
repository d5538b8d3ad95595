//! Reclaim under faults: the dirty hard limit when a file's
//! write-back fails for good, write-back errors of folios at the inactive tail, and a cache
//! whose every frame is pinned or locked.

mod common;

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quire::filemap::{CacheConfig, FilemapError, PageCache};
use quire::stats::Event;
use quire::store::{Fault, FaultKind, MemStore, Op, Store, StoreError, MAX_OFFSET};
use quire::vmscan::ReclaimPolicy;

use common::{
    check_no_leak, faulty, lru_total, pattern, quiet_config, read_all, same, wait_for, StopOnDrop,
    Watchdog, PAGE,
};

const MIB: usize = 1 << 20;
const EIO: i32 = 5;
const ENOSPC: i32 = 28;

/// Writes at or past `from` fail with ENOSPC, for ever: a full disk.
fn disk_full_from(from: u64) -> Fault {
    Fault {
        kind: FaultKind::Error {
            kind: io::ErrorKind::StorageFull,
            errno: Some(ENOSPC),
        },
        ..Fault::write_error(from..MAX_OFFSET).persistent()
    }
}

/// The scenario: a 4 MiB cache; file A's store takes 8 MiB and then fails every write
/// with ENOSPC; file B holds 3 MiB of clean, fsynced data — more than is left free once A's
/// dirty data sits at the dirty limit, so every pass over B evicts B's own folios. Writing A
/// must end in `DirtyLimit` (ENOSPC): never a hang, never `NoMemory`, dirty memory never
/// more than a folio or two over the limit (see the assertion); B's reads go on succeeding,
/// with the right bytes, all along and after. Once the disk has room again, A's fsync succeeds and every byte A's writes
/// accepted is in the store.
#[test]
fn a_file_whose_write_back_fails_is_stopped_at_the_dirty_limit_and_clean_reads_go_on() {
    let _w = Watchdog::arm(Duration::from_secs(120), "dirty limit");
    let mut cfg = CacheConfig::new(4 * MIB);
    // A `NoMemory` (the bug this guards against) would show after this long instead of 5 s.
    cfg.alloc_timeout = Duration::from_secs(2);
    let cache = PageCache::new(cfg).unwrap();
    let limit = cache.config().dirty_limit / PAGE;
    // Writes below are 64 KiB and aligned: one folio of 16 frames each.
    const CHUNK: usize = 64 << 10;
    let folio = CHUNK / PAGE;

    let b_store = Arc::new(MemStore::new());
    let b = cache.open(b_store.clone()).unwrap();
    let b_data = pattern(3 * MIB, 9);
    b.write_at(0, &b_data).unwrap();
    b.fsync().unwrap();
    same(&b_store.synced_contents(), &b_data, "B is on its store");

    let a_store = faulty(Vec::new(), 1);
    let full = a_store.add(disk_full_from(8 * MIB as u64));
    let a = cache.open(a_store.clone()).unwrap();

    let stop = AtomicBool::new(false);
    let passes = AtomicUsize::new(0);
    let mut model: Vec<u8> = Vec::new();
    let max_dirty = std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        let (b, b_data, stop, passes) = (&b, &b_data, &stop, &passes);
        let reader = s.spawn(move || {
            let h = b.reopen();
            let mut buf = vec![0u8; b_data.len()];
            while !stop.load(Ordering::Relaxed) {
                match h.read_at(0, &mut buf) {
                    Ok(n) => assert_eq!(n, buf.len()),
                    Err(e) => panic!("a read of clean data failed: {e:?}"),
                }
                same(&buf, b_data, "B");
                passes.fetch_add(1, Ordering::Relaxed);
            }
        });
        let sampler = s.spawn(|| {
            let mut max = 0;
            while !stop.load(Ordering::Relaxed) {
                max = max.max(cache.stats_exact().dirty_frames);
                std::thread::sleep(Duration::from_micros(500));
            }
            max
        });

        // Write A until it is refused. The dirty limit is 1.6 MiB: past 8 MiB the refusal
        // must come within that much more (twice it, to leave room for write-back races).
        let mut round = 0u8;
        let refused_at = loop {
            let w = common::pattern_with(CHUNK, round, 37);
            round = round.wrapping_add(1);
            match a.write_at(model.len() as u64, &w) {
                Ok(n) => model.extend_from_slice(&w[..n]),
                Err(FilemapError::DirtyLimit { errno }) => {
                    assert_eq!(errno, ENOSPC, "the error of A's write-back");
                    break model.len();
                }
                Err(e) => panic!("A's write at {} failed with {e:?}", model.len()),
            }
            assert!(
                model.len() <= 8 * MIB + 2 * limit * PAGE,
                "A's writes were never refused: {} bytes accepted, {:?}",
                model.len(),
                cache.stats_exact()
            );
        };
        eprintln!(
            "A refused at {} MiB, {} frames dirty",
            refused_at as f64 / MIB as f64,
            cache.stats_exact().dirty_frames
        );
        assert!(refused_at >= 8 * MIB, "A's store took 8 MiB");
        assert!(a_store.fired(full) > 0);
        // Refused again as long as the disk is full (one more folio may get through, see
        // below; whatever does is part of the model).
        let mut refused = 0;
        for _ in 0..3 {
            let w = common::pattern_with(CHUNK, round, 37);
            round = round.wrapping_add(1);
            match a.write_at(model.len() as u64, &w) {
                Err(FilemapError::DirtyLimit { errno: ENOSPC }) => refused += 1,
                Ok(n) => model.extend_from_slice(&w[..n]),
                r => panic!("A's write after the refusal: {r:?}"),
            }
        }
        assert!(refused >= 2, "A's writes refused again: {refused} of 3");
        // B keeps being read in full while A's dirty data sits at the limit.
        let p0 = passes.load(Ordering::Relaxed);
        wait_for(
            "three more passes over B",
            Duration::from_secs(60),
            || passes.load(Ordering::Relaxed) >= p0 + 3 || reader.is_finished(),
            || format!("{:?}", cache.stats_exact()),
        );
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        sampler.join().unwrap()
    });
    eprintln!(
        "dirty limit {limit} frames, most dirty sampled {max_dirty}, {} passes over B",
        passes.load(Ordering::Relaxed)
    );
    // The writer's own folio may pass the limit (it is checked before each folio is dirtied).
    let slack = folio;
    assert!(
        max_dirty <= limit + slack,
        "dirty memory stays within two folios of the limit: {max_dirty} > {limit} + {slack}"
    );
    let unwritable = (model.len() - 8 * MIB) / PAGE;
    assert!(
        unwritable <= limit + slack,
        "A's writes past the full disk stopped at the limit: {unwritable} frames accepted"
    );
    // Dirty, or under a write-back that will fail and leave it dirty again (the flusher keeps
    // trying, a whole batch of folios at a time).
    let s = cache.stats_exact();
    assert!(
        s.dirty_frames + s.writeback_frames >= limit - folio,
        "A's data is still dirty: {s:?}"
    );

    // Room on the disk again: A's data goes out.
    a_store.clear();
    let mut tries = 0;
    loop {
        match a.fsync() {
            Ok(()) => break,
            Err(FilemapError::Writeback { errno }) => assert_eq!(errno, ENOSPC),
            Err(e) => panic!("A's fsync: {e:?}"),
        }
        tries += 1;
        assert!(tries < 5, "A's fsync keeps failing after the fault is gone");
    }
    same(
        &a_store.inner().synced_contents(),
        &model,
        "everything A's writes accepted is on the store",
    );
    assert_eq!(cache.stats_exact().dirty_frames, 0);
    // And A takes writes again.
    let more = pattern(CHUNK, 77);
    a.write_at(model.len() as u64, &more).unwrap();
    model.extend_from_slice(&more);
    a.fsync().unwrap();
    same(
        &a_store.inner().synced_contents(),
        &model,
        "after the fault",
    );
    same(&read_all(&b), &b_data, "B at the end");
    cache.check_lru().unwrap();
    drop((a, b));
    check_no_leak(&cache, "dirty limit");
}

/// Writes that reach past `full` fail with ENOSPC after 3 ms; others go to the memory store.
struct SlowFull {
    inner: MemStore,
    full: u64,
}

impl Store for SlowFull {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> quire::store::Result<usize> {
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> quire::store::Result<usize> {
        if offset + buf.len() as u64 > self.full {
            std::thread::sleep(Duration::from_millis(3));
            return Err(StoreError::Io {
                op: Op::Write,
                offset,
                kind: io::ErrorKind::StorageFull,
                errno: Some(ENOSPC),
            });
        }
        self.inner.write_at(offset, buf)
    }

    fn sync(&self) -> quire::store::Result<()> {
        self.inner.sync()
    }

    fn len(&self) -> quire::store::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> quire::store::Result<()> {
        self.inner.set_len(len)
    }
}

/// A writer that meets the dirty limit while one of its file's failing write-backs is in
/// flight is held to the limit plus its own folio: frames under write-back count against the
/// limit (the kernel's `NR_FILE_DIRTY + NR_WRITEBACK`), since a write-back that fails leaves
/// its folio dirty again.
///
/// A 4 MiB cache (limit 409 frames), a store that takes 1 MiB and then fails each write after
/// 3 ms, 64 KiB writes (16-frame folios). Counting only dirty frames, 27 folios (432 frames)
/// past the full point were accepted: the flusher, writing the failing folios one after
/// another, kept one out of the count nearly all the time.
#[test]
fn a_write_back_in_flight_counts_against_the_dirty_limit() {
    let _w = Watchdog::arm(Duration::from_secs(60), "dirty limit in flight");
    const CHUNK: usize = 64 << 10;
    let cache = PageCache::new(CacheConfig::new(4 * MIB)).unwrap();
    let limit = cache.config().dirty_limit / PAGE;
    let full = MIB as u64;
    let a = cache
        .open(SlowFull {
            inner: MemStore::new(),
            full,
        })
        .unwrap();
    let mut off = 0u64;
    loop {
        match a.write_at(off, &[1u8; CHUNK]) {
            Ok(n) => off += n as u64,
            Err(FilemapError::DirtyLimit { errno }) => {
                assert_eq!(errno, ENOSPC);
                break;
            }
            Err(e) => panic!("write at {off}: {e:?}"),
        }
        assert!(off < 16 * MIB as u64, "never refused");
    }
    let unwritable = (off - full) as usize / PAGE;
    assert!(
        unwritable <= limit + CHUNK / PAGE,
        "{unwritable} frames of unwritable data accepted, limit {limit} + one folio"
    );
    // Closing tries each folio once more (3 ms each) and drops what cannot be written.
    drop(a);
    check_no_leak(&cache, "dirty limit in flight");
}

/// Dirty folios whose write-back fails for good reach the inactive tail again and again while
/// another file streams through the cache: reclaim parks them and the flusher tries them
/// (and fails), but they stay dirty, cached and listed, with their data; once the store works
/// again, fsync writes them all.
#[test]
fn dirty_folios_whose_write_back_fails_stay_dirty_and_listed_under_pressure() {
    let _w = Watchdog::arm(Duration::from_secs(60), "write-back error at the tail");
    let mut cfg = quiet_config(MIB);
    cfg.max_folio_order = 2;
    cfg.readahead_max = 64 << 10;
    let cache = PageCache::new(cfg).unwrap();
    let a_store = faulty(Vec::new(), 1);
    let a = cache.open(a_store.clone()).unwrap();
    // 64 frames dirty, in 16 folios of 4 pages.
    let data = pattern(64 * PAGE, 3);
    for (i, c) in data.chunks(4 * PAGE).enumerate() {
        a.write_at((i * 4 * PAGE) as u64, c).unwrap();
    }
    let eio = a_store.add(Fault::write_error(0..MAX_OFFSET).persistent());
    assert_eq!(cache.stats_exact().dirty_frames, 64);

    let b_data = pattern(4 * MIB, 4);
    let b = cache
        .open(Arc::new(MemStore::from_vec(b_data.clone())))
        .unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        let sampler = s.spawn(|| {
            let mut samples = 0;
            while !stop.load(Ordering::Relaxed) {
                let s = cache.stats_exact();
                assert!(s.dirty_frames <= 64, "{s:?}");
                assert_eq!(a.cached_frames(), 64, "A's dirty folios are never evicted");
                samples += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
            samples
        });
        let mut buf = vec![0u8; 64 << 10];
        for _ in 0..3 {
            for off in (0..b_data.len()).step_by(buf.len()) {
                b.read_exact_at(off as u64, &mut buf).unwrap();
                same(&buf, &b_data[off..off + buf.len()], "B");
            }
        }
        stop.store(true, Ordering::Relaxed);
        assert!(sampler.join().unwrap() > 0);
    });
    let s = cache.stats_exact();
    eprintln!("{} write-backs failed: {:?}", a_store.fired(eio), s.vmstat);
    // Nobody but the flusher, woken by reclaim, tried to write A.
    assert!(
        a_store.fired(eio) > 0,
        "reclaim met A's dirty folios and woke the flusher"
    );
    assert!(
        s.vmstat.get(Event::PgSteal) >= (2 * b_data.len() / PAGE) as u64,
        "three passes over B, four times the cache, went through it"
    );
    assert!(
        s.vmstat.get(Event::PgActivate) > 0,
        "dirty folios at the tail are parked"
    );
    // A write-back may be in flight (its folio is counted clean meanwhile): wait it out.
    wait_for(
        "A's folios dirty again",
        Duration::from_secs(10),
        || cache.stats_exact().dirty_frames == 64,
        || format!("{:?}", cache.stats_exact()),
    );
    assert_eq!(a.cached_frames(), 64);
    cache.check_lru().unwrap();
    wait_for(
        "every cached folio on a list",
        Duration::from_secs(10),
        || {
            let s = cache.stats_exact();
            lru_total(&s) == s.cached_frames
        },
        || format!("{:?}", cache.stats_exact()),
    );
    same(&read_all(&a), &data, "A's data, never dropped");
    match a.fsync() {
        Err(FilemapError::Writeback { errno }) => assert_eq!(errno, EIO),
        r => panic!("A's fsync must report the failed write-back: {r:?}"),
    }
    a_store.clear();
    let mut tries = 0;
    while a.fsync().is_err() {
        tries += 1;
        assert!(tries < 5, "A's fsync keeps failing after the fault is gone");
    }
    same(
        &a_store.inner().synced_contents(),
        &data,
        "all of A written",
    );
    assert_eq!(cache.stats_exact().dirty_frames, 0);
    drop((a, b));
    check_no_leak(&cache, "write-back error at the tail");
}

/// With every frame held — half by references, half by folio locks — an allocation gives up
/// with `NoMemory` once `alloc_timeout` has passed, under either reclaim policy, and changes
/// nothing; once the folios are let go, the same calls succeed.
#[test]
fn with_every_frame_pinned_or_locked_allocations_fail_with_no_memory_after_the_timeout() {
    for policy in [ReclaimPolicy::Lru, ReclaimPolicy::Clock] {
        let what = format!("{policy:?}");
        let _w = Watchdog::arm(Duration::from_secs(60), "every frame pinned");
        let mut cfg = quiet_config(256 << 10);
        cfg.max_folio_order = 0;
        cfg.readahead_max = 0;
        cfg.io_threads = 0;
        cfg.alloc_timeout = Duration::from_millis(200);
        cfg.reclaim = policy;
        let cache = PageCache::new(cfg).unwrap();
        let frames = cache.stats_exact().frames;
        assert_eq!(frames, 64);
        let data = pattern(80 * PAGE, 5);
        let f = cache
            .open(Arc::new(MemStore::from_vec(data.clone())))
            .unwrap();
        let mut held = Vec::new();
        for p in 0..frames as u64 {
            held.push(f.read_folio(p).unwrap());
        }
        let s = cache.stats_exact();
        assert_eq!((s.cached_frames, s.free_frames), (frames, 0), "{what}");
        let locked: Vec<_> = held.drain(..frames / 2).map(|r| r.lock()).collect();

        let no_memory = |r: Result<(), FilemapError>, op: &str| match r {
            Err(FilemapError::NoMemory { frames: n }) => assert_eq!(n, frames),
            r => panic!("{what}: {op}: {r:?}"),
        };
        let t = Instant::now();
        no_memory(f.read_folio(frames as u64).map(drop), "read_folio");
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(10),
            "{what}: gave up after {took:?}"
        );
        let mut b = vec![0u8; PAGE];
        no_memory(
            f.read_at((frames * PAGE) as u64, &mut b).map(drop),
            "read_at",
        );
        // A write into a page not cached, and one into a cached page that a reference holds
        // (pages 32..64; this thread holds the locks of 0..32), which needs a copy: both
        // refused, nothing changed.
        no_memory(f.write_at((75 * PAGE) as u64, &[7; 100]).map(drop), "write");
        no_memory(
            f.write_at((50 * PAGE) as u64, &[7; 100]).map(drop),
            "write over a pinned page",
        );
        assert_eq!(f.len(), data.len() as u64, "{what}");
        assert_eq!(cache.stats_exact().dirty_frames, 0, "{what}");

        drop(locked);
        drop(held);
        f.read_exact_at((frames * PAGE) as u64, &mut b).unwrap();
        same(&b, &data[frames * PAGE..][..PAGE], &what);
        same(&read_all(&f), &data, &what);
        cache.check_lru().unwrap();
        let s = cache.stats_exact();
        assert!(s.vmstat.get(Event::DirectReclaims) > 0, "{what}");
        drop(f);
        check_no_leak(&cache, &what);
    }
}
