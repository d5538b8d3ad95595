//! The page cache's semantics, one behaviour per test: short reads at the end of a file,
//! overflowing offsets, truncation (zeroing the tail of a partial page, dropping the pages past
//! the end, re-extension reading zeros), partial writes over uncached pages, copy-on-write past
//! zero-copy readers, readahead, refaults after eviction, invalidation, `sync_range`, one I/O for
//! many readers of one missing page, and files sharing one budget.
//!
//! The event counters are global and shared with the tests running beside these, so only their
//! increases are asserted, never exact values; exact checks use per-file state instead
//! (`cached_frames`, the store's contents).

mod common;

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use quire::filemap::{CacheConfig, CachedFile, FilemapError, PageCache, MAX_FILE_SIZE};
use quire::stats::{self, Event};
use quire::store::{self, FileStore, IoMode, MemStore, Store};

use common::{check_no_leak, pattern, quiet_config, same, PAGE};

/// Reads the whole file (and checks that a read at its end returns nothing).
fn read_all(f: &CachedFile) -> Vec<u8> {
    let mut buf = vec![0xA5u8; f.len() as usize];
    assert_eq!(f.read_at(0, &mut buf).unwrap(), buf.len());
    assert_eq!(f.read_at(f.len(), &mut [0u8; 16]).unwrap(), 0);
    buf
}

/// Waits up to 5 s for `cond`.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn reads_past_the_end_are_short_and_touch_nothing_else() {
    let data = pattern(10_000, 7);
    let cache = PageCache::new(quiet_config(1 << 20)).unwrap();
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();

    let mut buf = vec![0xAAu8; 4096];
    assert_eq!(f.read_at(8000, &mut buf).unwrap(), 2000);
    same(&buf[..2000], &data[8000..], "bytes");
    assert!(
        buf[2000..].iter().all(|&b| b == 0xAA),
        "bytes past a short read are left alone"
    );
    let mut buf = vec![0xAAu8; 100];
    assert_eq!(f.read_at(10_000, &mut buf).unwrap(), 0);
    assert_eq!(f.read_at(10_001, &mut buf).unwrap(), 0);
    assert_eq!(f.read_at(1 << 50, &mut buf).unwrap(), 0);
    assert!(buf.iter().all(|&b| b == 0xAA));
    assert_eq!(f.read_at(0, &mut []).unwrap(), 0);
    // An empty write past the end writes nothing and does not extend the file.
    assert_eq!(f.write_at(50_000, &[]).unwrap(), 0);
    assert_eq!(f.len(), 10_000);

    let e = f.read_exact_at(9000, &mut [0u8; 2000]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);

    // The last page, zero copy: the bytes past the end of the file are zeros.
    let r = f.read_folio(2).unwrap();
    let off = ((2 - r.index()) as usize) * PAGE;
    let page = &r.bytes().unwrap()[off..off + PAGE];
    same(&page[..10_000 - 2 * PAGE], &data[2 * PAGE..], "bytes");
    assert!(page[10_000 - 2 * PAGE..].iter().all(|&b| b == 0));
    drop(r);
    let e = f.read_folio(3).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    assert!(f.read_folio(u64::MAX).is_err());

    // A write past the end: the gap reads as zeros, the new end is exact.
    f.write_at(20_000, &[9u8; 100]).unwrap();
    assert_eq!(f.len(), 20_100);
    let mut buf = vec![0xAAu8; 4096];
    assert_eq!(f.read_at(19_000, &mut buf).unwrap(), 1100);
    assert!(buf[..1000].iter().all(|&b| b == 0));
    assert!(buf[1000..1100].iter().all(|&b| b == 9));
    assert!(buf[1100..].iter().all(|&b| b == 0xAA));
    let all = read_all(&f);
    same(&all[..10_000], &data[..], "bytes");
    assert!(all[10_000..20_000].iter().all(|&b| b == 0));
}

#[test]
fn overflowing_offsets_are_typed_errors_and_change_nothing() {
    let data = pattern(9000, 3);
    let store = Arc::new(MemStore::from_vec(data.clone()));
    let cache = PageCache::new(quiet_config(1 << 20)).unwrap();
    let f = cache.open(store.clone()).unwrap();
    let max = MAX_FILE_SIZE;

    let overflow = |r: Result<usize, FilemapError>| match r {
        Err(e @ FilemapError::Overflow { .. }) => assert_eq!(e.kind(), io::ErrorKind::FileTooLarge),
        other => panic!("expected an overflow error, got {other:?}"),
    };
    overflow(f.read_at(u64::MAX, &mut [0u8; 1]));
    overflow(f.read_at(u64::MAX - 10, &mut [0u8; 100]));
    overflow(f.read_at(max - 1, &mut [0u8; 2]));
    assert_eq!(
        f.read_at(max - 1, &mut [0u8; 1]).unwrap(),
        0,
        "in range, past the end"
    );
    overflow(f.write_at(max - 2, &[1, 2, 3]));
    overflow(f.write_at(u64::MAX - 1, &[1, 2, 3]));
    overflow(f.write_at(u64::MAX, &[1]));
    assert!(matches!(
        f.set_len(max + 1),
        Err(FilemapError::Overflow { .. })
    ));
    assert!(matches!(
        f.set_len(u64::MAX),
        Err(FilemapError::Overflow { .. })
    ));
    f.sync_range(u64::MAX - 5, u64::MAX).unwrap();
    assert_eq!(f.len(), 9000);
    same(&read_all(&f), &data, "bytes");
    f.fsync().unwrap();
    same(&store.synced_contents(), &data, "nothing reached the store");

    // The very last byte a file may hold is in range for the cache; the in-memory store cannot
    // grow that far, so write-back fails — reported by fsync, the data kept.
    assert_eq!(f.write_at(max - 1, b"z").unwrap(), 1);
    assert_eq!(f.len(), max);
    let mut b = [0u8; 1];
    assert_eq!(f.read_at(max - 1, &mut b).unwrap(), 1);
    assert_eq!(b[0], b'z');
    assert!(matches!(f.fsync(), Err(FilemapError::Writeback { .. })));
    assert_eq!(f.read_at(max - 1, &mut b).unwrap(), 1, "still cached");
    assert_eq!(b[0], b'z');
    // Cutting the file back drops the page that could not be written.
    f.set_len(9000).unwrap();
    assert_eq!(f.len(), 9000);
    f.fsync().unwrap();
    same(&read_all(&f), &data, "bytes");
    same(&store.synced_contents(), &data, "bytes");
    let e = cache.open(MemStore::new().with_limit(1 << 20)).unwrap();
    assert!(e.set_len(2 << 20).is_err());
    assert_eq!(e.len(), 0, "a failed set_len changes nothing");
}

#[test]
fn the_largest_file_the_cache_accepts_is_also_written_back() {
    // tmpfs holds files up to the kernel's offset limit (sparse) and takes O_DIRECT (Linux 6.6+):
    // the last byte the cache accepts must reach it, also through whole-page direct writes.
    let dir = std::path::Path::new("/dev/shm");
    if !dir.is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    assert_eq!(MAX_FILE_SIZE % 4096, 0, "a whole number of pages");
    for mode in [IoMode::Buffered, IoMode::PreferDirect] {
        let path = dir.join(format!("quire-max-{}-{mode:?}", std::process::id()));
        let cache = PageCache::new(quiet_config(1 << 20)).unwrap();
        let f = cache.open(FileStore::create(&path, mode).unwrap()).unwrap();
        assert_eq!(f.write_at(MAX_FILE_SIZE - 1, b"z").unwrap(), 1);
        // One byte further is refused at once, as EFBIG.
        let e = f.write_at(MAX_FILE_SIZE - 1, b"zz").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge, "{mode:?}");
        f.fsync()
            .unwrap_or_else(|e| panic!("{mode:?}: the accepted byte is written back: {e}"));
        drop(f);
        let again = cache
            .open(FileStore::open(&path, IoMode::Buffered).unwrap())
            .unwrap();
        assert_eq!(again.len(), MAX_FILE_SIZE, "{mode:?}");
        let mut b = [0u8; 1];
        again.read_exact_at(MAX_FILE_SIZE - 1, &mut b).unwrap();
        assert_eq!(&b, b"z", "{mode:?}");
        drop(again);
        std::fs::remove_file(&path).unwrap();
    }
}

/// Where the page holding the new end is when the file is cut.
#[derive(Clone, Copy, Debug)]
enum Where {
    Dirty,
    Clean,
    Uncached,
}

#[test]
fn truncate_zeroes_the_tail_drops_the_rest_and_re_extension_reads_zeros() {
    for align in [1usize, 4096] {
        for place in [Where::Dirty, Where::Clean, Where::Uncached] {
            let mut cfg = quiet_config(1 << 20);
            cfg.max_folio_order = 0; // One page per folio: the counts below are exact.
            let cache = PageCache::new(cfg).unwrap();
            let store = Arc::new(MemStore::new().with_alignment(align));
            let f = cache.open(store.clone()).unwrap();
            let data = pattern(40_000, 11);
            f.write_at(0, &data).unwrap();
            assert_eq!(f.cached_frames(), 10);
            match place {
                Where::Dirty => {}
                Where::Clean => f.fsync().unwrap(),
                Where::Uncached => {
                    f.invalidate().unwrap();
                    assert_eq!(f.cached_frames(), 0);
                    // Bring back one page past the new end (clean).
                    f.read_at(8 * PAGE as u64, &mut [0u8; 10]).unwrap();
                }
            }
            f.set_len(5000).unwrap();
            assert_eq!(f.len(), 5000, "{align} {place:?}");
            assert!(
                f.cached_frames() <= 2,
                "pages past the end are dropped ({align} {place:?}): {}",
                f.cached_frames()
            );
            same(&read_all(&f), &data[..5000], "bytes");
            let mut buf = [0xAAu8; 64];
            assert_eq!(f.read_at(4990, &mut buf).unwrap(), 10);
            same(&buf[..10], &data[4990..5000], "bytes");
            let r = f.read_folio(1).unwrap();
            let tail = &r.bytes().unwrap()[5000 - PAGE..];
            assert!(
                tail.iter().all(|&b| b == 0),
                "the tail of the partial page is zero ({align} {place:?})"
            );
            drop(r);

            // Grow again: everything past 5000 reads as zeros, cached or not.
            f.set_len(30_000).unwrap();
            let mut expect = data[..5000].to_vec();
            expect.resize(30_000, 0);
            same(&read_all(&f), &expect, &format!("{align} {place:?}"));
            // A write past the new end, leaving a hole.
            f.write_at(40_000, b"end").unwrap();
            expect.resize(40_000, 0);
            expect.extend_from_slice(b"end");
            same(&read_all(&f), &expect, "bytes");
            f.fsync().unwrap();
            same(
                &store.synced_contents(),
                &expect,
                &format!("{align} {place:?}"),
            );
            f.invalidate().unwrap();
            same(&read_all(&f), &expect, "re-read from the store");
        }
    }
}

#[test]
fn truncate_inside_a_large_folio_zeroes_its_tail() {
    for place in [Where::Dirty, Where::Clean, Where::Uncached] {
        let cache = PageCache::new(quiet_config(4 << 20)).unwrap();
        let store = Arc::new(MemStore::new());
        let f = cache.open(store.clone()).unwrap();
        let data = pattern(256 << 10, 5);
        f.write_at(0, &data).unwrap();
        let r = f.read_folio(1).unwrap();
        assert!(r.nr_frames() > 1, "a large write makes a large folio");
        drop(r);
        match place {
            Where::Dirty => {}
            Where::Clean => f.fsync().unwrap(),
            Where::Uncached => {
                f.invalidate().unwrap();
                assert_eq!(f.cached_frames(), 0);
                // A sequential read brings it back as large folios through readahead.
                read_all(&f);
                let r = f.read_folio(1).unwrap();
                assert!(r.nr_frames() > 1, "readahead makes large folios");
            }
        }
        let cut = 3 * PAGE as u64 + 123;
        f.set_len(cut).unwrap();
        same(&read_all(&f), &data[..cut as usize], &format!("{place:?}"));
        f.set_len(256 << 10).unwrap();
        let mut expect = data[..cut as usize].to_vec();
        expect.resize(256 << 10, 0);
        same(&read_all(&f), &expect, &format!("re-extended ({place:?})"));
        // Pages of the straddling folio past the end were zeroed, not just hidden.
        let r = f.read_folio(5).unwrap();
        let off = ((5 - r.index()) as usize) * PAGE;
        assert!(r.bytes().unwrap()[off..off + PAGE].iter().all(|&b| b == 0));
        drop(r);
        f.fsync().unwrap();
        same(&store.synced_contents(), &expect, &format!("{place:?}"));
        drop(f);
        let cache2 = PageCache::new(quiet_config(1 << 20)).unwrap();
        let g = cache2.open(store.clone()).unwrap();
        same(
            &read_all(&g),
            &expect,
            &format!("in a new cache ({place:?})"),
        );
    }
}

#[test]
fn a_write_into_an_uncached_page_reads_the_rest_from_the_store() {
    for align in [1usize, 4096] {
        let data = pattern(5 * PAGE + 1000, 21);
        let store = Arc::new(MemStore::from_vec(data.clone()).with_alignment(align));
        let cache = PageCache::new(quiet_config(1 << 20)).unwrap();
        let f = cache.open(store.clone()).unwrap();
        let mut expect = data.clone();
        // Inside one page, across two pages (partial at both ends), and into the partial last
        // page past the end of the file.
        for (off, len, seed) in [
            (PAGE + 100, 5, 1u8),
            (3 * PAGE - 300, 700, 2),
            (5 * PAGE + 900, 300, 3),
        ] {
            let w = pattern(len, seed.wrapping_mul(77));
            f.write_at(off as u64, &w).unwrap();
            if off + len > expect.len() {
                expect.resize(off + len, 0);
            }
            expect[off..off + len].copy_from_slice(&w);
        }
        assert_eq!(f.len() as usize, expect.len());
        same(&read_all(&f), &expect, &format!("align {align}"));
        f.fsync().unwrap();
        same(&store.synced_contents(), &expect, &format!("align {align}"));
        f.invalidate().unwrap();
        same(&read_all(&f), &expect, "bytes");
    }
}

#[test]
fn a_folio_reference_keeps_its_bytes_while_another_thread_writes() {
    let data = pattern(512 << 10, 9);
    let store = Arc::new(MemStore::from_vec(data.clone()));
    let cache = PageCache::new(quiet_config(8 << 20)).unwrap();
    let f = cache.open(store.clone()).unwrap();
    // A sequential read: large folios from readahead.
    read_all(&f);
    let mut expect = data.clone();
    for index in [1u64, 70] {
        let r = f.read_folio(index).unwrap();
        let before = r.bytes().unwrap().to_vec();
        let base = r.index() as usize * PAGE;
        same(&before[..], &expect[base..base + before.len()], "bytes");
        let page_off = (index as usize) * PAGE;
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            // A reader thread checks the reference while the writer runs.
            let checker = s.spawn(|| {
                let mut checks = 0u64;
                loop {
                    same(r.bytes().unwrap(), &before[..], "a held folio changed");
                    checks += 1;
                    if stop.load(Ordering::Acquire) {
                        return checks;
                    }
                }
            });
            s.spawn(|| {
                for i in 0..50u8 {
                    f.write_at((page_off + 10 + i as usize) as u64, &[i; 200])
                        .unwrap();
                }
                // A whole-page write too.
                f.write_at(page_off as u64, &[0xEE; PAGE]).unwrap();
                stop.store(true, Ordering::Release);
            });
            assert!(checker.join().unwrap() > 0);
        });
        same(r.bytes().unwrap(), &before[..], "bytes");
        // The file has the new bytes.
        let mut page = vec![0u8; PAGE];
        f.read_at(page_off as u64, &mut page).unwrap();
        assert!(page.iter().all(|&b| b == 0xEE));
        // A new reference sees them too, and the old one still sees the old ones.
        let r2 = f.read_folio(index).unwrap();
        let off2 = ((index - r2.index()) as usize) * PAGE;
        assert!(r2.bytes().unwrap()[off2..off2 + PAGE]
            .iter()
            .all(|&b| b == 0xEE));
        same(r.bytes().unwrap(), &before[..], "bytes");
        drop(r);
        drop(r2);
        expect[page_off..page_off + PAGE].fill(0xEE);
    }
    same(&read_all(&f), &expect, "bytes");
    f.fsync().unwrap();
    same(
        &store.synced_contents(),
        &expect,
        "the copies were written back",
    );
    drop(f);
    // Every frame comes back (within a bounded wait: a read's end on the I/O engine's thread
    // may hold a folio for a moment after the reader it woke went on).
    check_no_leak(&cache, "old folios were freed with their references");
}

#[test]
fn sequential_reads_read_ahead_into_large_folios_and_random_reads_do_not() {
    let data = pattern(2 << 20, 13);
    let mut cfg = quiet_config(8 << 20);
    cfg.readahead_max = 256 << 10;
    let cache = PageCache::new(cfg).unwrap();
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    let before = stats::read(Event::Readahead);
    let mut buf = vec![0u8; 16 << 10];
    let mut pos = 0usize;
    while pos < 512 << 10 {
        f.read_at(pos as u64, &mut buf).unwrap();
        same(&buf[..], &data[pos..pos + buf.len()], "bytes");
        pos += buf.len();
    }
    eventually("the readahead counter to increase", || {
        stats::read(Event::Readahead) > before
    });
    eventually("pages past the reader to be cached", || {
        f.cached_frames() > (512 << 10) / PAGE
    });
    let r = f.read_folio(100).unwrap();
    assert!(r.nr_frames() > 1, "readahead fills large folios");
    drop(r);
    same(&read_all(&f), &data, "bytes");

    // Random single-page reads on a fresh handle of a fresh file: exactly the pages read.
    let g = cache.open(MemStore::from_vec(data.clone())).unwrap();
    let pages = [100u64, 37, 250, 5, 180, 77, 300];
    for &p in &pages {
        let mut b = vec![0u8; PAGE];
        g.read_at(p * PAGE as u64, &mut b).unwrap();
        same(&b[..], &data[p as usize * PAGE..][..PAGE], "bytes");
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(g.cached_frames(), pages.len(), "random reads read no more");
}

#[test]
fn evictions_leave_shadows_that_count_refaults() {
    let data = pattern(256 << 10, 17);
    let cache = PageCache::new(quiet_config(4 << 20)).unwrap();
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    same(&read_all(&f), &data, "bytes");
    eventually("readahead to settle", || {
        f.cached_frames() == (256 << 10) / PAGE
    });
    let evictions = stats::read(Event::Evictions);
    let freed = cache.shrink(usize::MAX);
    assert_eq!(
        freed,
        (256 << 10) / PAGE,
        "every clean, unused folio is evicted"
    );
    assert_eq!(f.cached_frames(), 0);
    assert_eq!(cache.stats_exact().cached_frames, 0);
    assert!(stats::read(Event::Evictions) > evictions);
    let refaults = stats::read(Event::WorkingsetRefault);
    let mut b = vec![0u8; PAGE];
    f.read_at(7 * PAGE as u64, &mut b).unwrap();
    same(&b[..], &data[7 * PAGE..8 * PAGE], "bytes");
    assert!(
        stats::read(Event::WorkingsetRefault) > refaults,
        "a read over a shadow entry is a refault"
    );
    same(&read_all(&f), &data, "bytes");
}

#[test]
fn invalidate_frees_clean_folios_and_writes_back_dirty_ones() {
    let data = pattern(64 * PAGE, 19);
    let store = Arc::new(MemStore::from_vec(data.clone()));
    let mut cfg = quiet_config(4 << 20);
    cfg.max_folio_order = 0;
    cfg.readahead_max = 0;
    let cache = PageCache::new(cfg).unwrap();
    let f = cache.open(store.clone()).unwrap();
    same(&read_all(&f), &data, "bytes");
    assert_eq!(f.cached_frames(), 64);
    let free = cache.stats_exact().free_frames;
    let held = f.read_folio(10).unwrap();
    assert_eq!(f.invalidate().unwrap(), 63, "all but the folio in use");
    assert_eq!(f.cached_frames(), 1);
    // A readahead thread may put its last reference a moment after the reader saw the data.
    eventually("the frames to be free", || {
        cache.stats_exact().free_frames == free + 63
    });
    same(held.bytes().unwrap(), &data[10 * PAGE..11 * PAGE], "held");
    drop(held);
    assert_eq!(f.invalidate().unwrap(), 1);
    assert_eq!(f.cached_frames(), 0);

    // Dirty data is written back first, then dropped.
    let mut expect = data.clone();
    for p in [3usize, 4, 40] {
        let w = pattern(100, p as u8);
        f.write_at((p * PAGE + 50) as u64, &w).unwrap();
        expect[p * PAGE + 50..p * PAGE + 150].copy_from_slice(&w);
    }
    assert_eq!(cache.stats_exact().dirty_frames, 3);
    assert_eq!(f.invalidate().unwrap(), 3);
    assert_eq!(f.cached_frames(), 0);
    let s = cache.stats_exact();
    assert_eq!((s.dirty_frames, s.cached_frames), (0, 0));
    same(&store.contents(), &expect, "bytes");
    same(&read_all(&f), &expect, "bytes");
}

#[test]
fn sync_range_writes_back_only_the_range() {
    let store = Arc::new(MemStore::new());
    let mut cfg = quiet_config(4 << 20);
    cfg.max_folio_order = 0;
    let cache = PageCache::new(cfg).unwrap();
    let f = cache.open(store.clone()).unwrap();
    let a = pattern(2 * PAGE, 1);
    let b = pattern(2 * PAGE, 2);
    let far = 1u64 << 20;
    f.write_at(0, &a).unwrap();
    f.write_at(far, &b).unwrap();
    assert_eq!(cache.stats_exact().dirty_frames, 4);
    f.sync_range(0, a.len() as u64).unwrap();
    assert_eq!(cache.stats_exact().dirty_frames, 2);
    let synced = store.synced_contents();
    same(&synced[..a.len()], &a[..], "bytes");
    assert!(
        synced.len() <= far as usize,
        "the far range was not written: {}",
        synced.len()
    );
    // One byte of the far range: only its page.
    f.sync_range(far + 5, 1).unwrap();
    assert_eq!(cache.stats_exact().dirty_frames, 1);
    let synced = store.synced_contents();
    same(
        &synced[far as usize..far as usize + PAGE],
        &b[..PAGE],
        "bytes",
    );
    // The last byte of the far range: its page.
    f.sync_range(far + 2 * PAGE as u64 - 1, 1).unwrap();
    assert_eq!(cache.stats_exact().dirty_frames, 0);
    let mut expect = a.clone();
    expect.resize(far as usize, 0);
    expect.extend_from_slice(&b);
    same(&store.synced_contents(), &expect, "bytes");
    f.sync_range(far * 8, 100).unwrap();
}

/// A store that counts reads per offset and makes each one slow, so that concurrent readers of
/// one page overlap.
struct CountingStore {
    inner: MemStore,
    reads: Mutex<HashMap<u64, u32>>,
}

impl Store for CountingStore {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> store::Result<usize> {
        *self.reads.lock().unwrap().entry(offset).or_default() += 1;
        std::thread::sleep(Duration::from_millis(30));
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> store::Result<usize> {
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> store::Result<()> {
        self.inner.sync()
    }
    fn len(&self) -> store::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> store::Result<()> {
        self.inner.set_len(len)
    }
}

#[test]
fn several_readers_of_a_missing_page_issue_one_read() {
    let data = pattern(64 * PAGE, 23);
    let store = Arc::new(CountingStore {
        inner: MemStore::from_vec(data.clone()),
        reads: Mutex::new(HashMap::new()),
    });
    let mut cfg = quiet_config(4 << 20);
    cfg.readahead_max = 0;
    let cache = PageCache::new(cfg).unwrap();
    let f = cache.open(store.clone()).unwrap();
    const THREADS: usize = 8;
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (f, barrier, data) = (&f, &barrier, &data);
            s.spawn(move || {
                // Each thread its own handle, as separate openers would have.
                let h = f.reopen();
                barrier.wait();
                let mut b = vec![0u8; 100];
                h.read_at((5 * PAGE + t) as u64, &mut b).unwrap();
                same(&b[..], &data[5 * PAGE + t..][..100], "bytes");
                let r = h.read_folio(9).unwrap();
                same(r.bytes().unwrap(), &data[9 * PAGE..10 * PAGE], "bytes");
            });
        }
    });
    let reads = store.reads.lock().unwrap();
    assert_eq!(reads.get(&(5 * PAGE as u64)), Some(&1), "{reads:?}");
    assert_eq!(reads.get(&(9 * PAGE as u64)), Some(&1), "{reads:?}");
    assert_eq!(reads.len(), 2, "{reads:?}");
}

#[test]
fn files_share_one_budget() {
    let a_data = pattern(1 << 20, 29);
    let b_data = pattern(1 << 20, 31);
    let mut cfg = CacheConfig::new(256 << 10);
    cfg.readahead_max = 64 << 10;
    cfg.max_folio_order = 4;
    let cache = PageCache::new(cfg).unwrap();
    let a = cache.open(MemStore::from_vec(a_data.clone())).unwrap();
    let b = cache.open(MemStore::from_vec(b_data.clone())).unwrap();
    assert_eq!(cache.stats_exact().files, 2);
    let mut ba = vec![0u8; 8192];
    let mut bb = vec![0u8; 8192];
    for off in (0..1 << 20).step_by(8192) {
        a.read_at(off as u64, &mut ba).unwrap();
        b.read_at(off as u64, &mut bb).unwrap();
        same(&ba[..], &a_data[off..off + 8192], "bytes");
        same(&bb[..], &b_data[off..off + 8192], "bytes");
        let s = cache.stats_exact();
        assert!(s.cached_frames <= s.frames);
        assert!(a.cached_frames() + b.cached_frames() <= s.frames);
    }
    assert!(a.cached_frames() > 0 && b.cached_frames() > 0);
    drop(a);
    eventually("the first file to go", || cache.stats_exact().files == 1);
    same(&read_all(&b), &b_data, "bytes");
    drop(b);
    eventually("both files to go", || cache.stats_exact().files == 0);
    check_no_leak(&cache, "both files gone");
}

#[test]
fn a_write_under_its_own_reference_to_a_large_folio_completes_when_no_copy_fits() {
    // A thread holds a zero-copy reference to a large folio and writes into it. The copy for
    // copy-on-write needs a block as large as the folio; here none can be had (the other half
    // of the pool has a page pinned), so the write must take another way instead of waiting
    // for a reader that is the writer itself.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut cfg = quiet_config(1 << 20);
        cfg.max_folio_order = 7;
        let cache = PageCache::new(cfg).unwrap();
        let store = Arc::new(MemStore::new());
        let a = cache.open(store.clone()).unwrap();
        let data = pattern(512 << 10, 3);
        a.write_at(0, &data).unwrap();
        let r = a.read_folio(5).unwrap();
        assert_eq!(r.nr_frames(), 128, "one folio of half the cache");
        let b = cache.open(MemStore::from_vec(vec![1u8; PAGE])).unwrap();
        let pin = b.read_folio(0).unwrap();
        let before = r.bytes().unwrap().to_vec();
        a.write_at(5 * PAGE as u64 + 7, b"written").unwrap();
        a.write_at(200 * PAGE as u64, b"and past the folio")
            .unwrap();
        same(r.bytes().unwrap(), &before, "the held folio");
        let mut expect = data.clone();
        expect[5 * PAGE + 7..5 * PAGE + 14].copy_from_slice(b"written");
        expect.resize(200 * PAGE, 0);
        expect.extend_from_slice(b"and past the folio");
        same(&read_all(&a), &expect, "the file");
        drop(r);
        drop(pin);
        a.fsync().unwrap();
        same(&store.synced_contents(), &expect, "the store");
        drop((a, b));
        let s = cache.stats_exact();
        assert_eq!((s.cached_frames, s.dirty_frames), (0, 0));
        tx.send(()).unwrap();
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("the write hung"),
        Err(e) => panic!("the test thread failed: {e}"),
    }
}
