//! A folio whose write-back keeps failing (a store that returns EIO every time for its range)
//! while the cache is under memory pressure from other files' reads: background write-back
//! tries it a bounded number of times, then leaves it dirty and parked out of reclaim's way;
//! reclaim keeps freeing the clean files' folios; the data stays readable; an explicit `fsync`
//! tries it again and reports each failure once per handle; once the store heals, `fsync`
//! writes it and the folio is clean and reclaimable again.
//!
//! The failing store counts the write attempts that reach each failing page (a request is
//! counted on the page it starts in: a merged request that fails at its first page is that
//! page's attempt, and the pages after it are then tried one by one). Every figure asserted is
//! a count of work, never a time: the flusher and the expiry run every millisecond so that a
//! cache without a bound on its retries retries constantly, and the bounded waits below only
//! keep a hung test from stalling the suite.

mod common;

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quire::filemap::{CacheConfig, CachedFile, FilemapError, PageCache};
use quire::stats::Event;
use quire::store::{MemStore, Op, Result as StoreResult, Store, StoreError};
use quire::vmscan::Lru;

use common::{check_no_leak, pattern, same, wait_for, File, Watchdog, PAGE};

const EIO: i32 = 5;

/// Background write-back attempts a failing folio gets before it is parked (the library's
/// `WRITEBACK_MAX_TRIES`).
const MAX_TRIES: u64 = quire::filemap::WRITEBACK_MAX_TRIES as u64;

/// The failing file's pages, and those of them whose writes fail.
const FILE_PAGES: usize = 16;
const BAD: Range<usize> = 4..12;
const NR_BAD: u64 = (BAD.end - BAD.start) as u64;

/// Clean files read to keep the cache under pressure, and their pages each.
const CLEAN_FILES: usize = 3;
const CLEAN_PAGES: usize = 64;

/// A store that fails every write reaching pages `bad` while `failing` is set, and counts those
/// writes per page. A write that starts before the bad pages and reaches into them is cut
/// short at the first bad page (a short write, which the cache completes by writing the rest:
/// that rest is then the bad page's attempt).
struct FailingRange {
    inner: MemStore,
    bad: Range<usize>,
    failing: AtomicBool,
    attempts: Vec<AtomicU64>,
}

impl FailingRange {
    fn new(bad: Range<usize>) -> Arc<FailingRange> {
        Arc::new(FailingRange {
            inner: MemStore::from_vec(Vec::new()),
            attempts: bad.clone().map(|_| AtomicU64::new(0)).collect(),
            bad,
            failing: AtomicBool::new(true),
        })
    }

    /// Failed write attempts on each bad page so far.
    fn attempts(&self) -> Vec<u64> {
        self.attempts
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect()
    }

    fn heal(&self) {
        self.failing.store(false, Ordering::Relaxed);
    }
}

impl Store for FailingRange {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> StoreResult<usize> {
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> StoreResult<usize> {
        let (bs, be) = ((self.bad.start * PAGE) as u64, (self.bad.end * PAGE) as u64);
        let end = offset + buf.len() as u64;
        if self.failing.load(Ordering::Relaxed) && offset < be && end > bs {
            if offset < bs {
                return self.inner.write_at(offset, &buf[..(bs - offset) as usize]);
            }
            let page = offset as usize / PAGE;
            self.attempts[page - self.bad.start].fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::Io {
                op: Op::Write,
                offset,
                kind: std::io::ErrorKind::Other,
                errno: Some(EIO),
            });
        }
        self.inner.write_at(offset, buf)
    }

    fn sync(&self) -> StoreResult<()> {
        self.inner.sync()
    }

    fn len(&self) -> StoreResult<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> StoreResult<()> {
        self.inner.set_len(len)
    }
}

/// A cache of 64 frames whose flusher runs every millisecond and writes back anything dirty
/// for a millisecond: background write-back is always at work, so every retry the cache allows
/// itself happens during the test. The multi-generational LRU runs without its loop protection,
/// which would keep the healed file's folios resident against the clean files' loop (by
/// design): the last check is that they are evictable again, so pressure must age them out.
fn config(policy: &str) -> CacheConfig {
    let mut cfg = CacheConfig::new(64 * PAGE).with_reclaim(policy).unwrap();
    cfg.loop_protection = false;
    cfg.max_folio_order = 0;
    cfg.readahead_max = 4 * PAGE;
    cfg.dirty_background = 2 * PAGE;
    cfg.dirty_limit = 48 * PAGE;
    cfg.dirty_expire = Duration::from_millis(1);
    cfg.flush_interval = Duration::from_millis(1);
    cfg
}

/// Reads every page of every clean file `rounds` times, checking the bytes; returns the pages
/// read. The cache holds a third of them at most, so every round is reclaim's work.
fn pressure(clean: &[File], rounds: usize) -> usize {
    let mut n = 0;
    for _ in 0..rounds {
        for f in clean {
            for p in 0..CLEAN_PAGES {
                f.read(p);
                n += 1;
            }
        }
    }
    n
}

/// Asserts an `fsync` result: `Err(Writeback { errno: EIO })` when `fails`, `Ok` otherwise.
#[track_caller]
fn expect_fsync(h: &CachedFile, fails: bool, what: &str) {
    match (h.fsync(), fails) {
        (Ok(()), false) => {}
        (Err(FilemapError::Writeback { errno }), true) => assert_eq!(errno, EIO, "{what}"),
        (r, _) => panic!("{what}: fsync returned {r:?}, expected a failure: {fails}"),
    }
}

fn a_failing_folio_is_retried_a_bounded_number_of_times(policy: &str) {
    let cache = PageCache::new(config(policy)).unwrap();
    let lists = policy != "clock";
    let store = FailingRange::new(BAD);
    let a = cache.open(store.clone()).unwrap();
    let b = a.reopen();
    // Opened before anything failed, and never asked until the store heals.
    let c = a.reopen();
    let data = pattern(FILE_PAGES * PAGE, 7);
    a.write_at(0, &data).unwrap();
    let clean: Vec<File> = (0..CLEAN_FILES)
        .map(|i| File::open(&cache, CLEAN_PAGES, 20 + i as u8))
        .collect();

    // Reclaim under pressure, the flusher at work every millisecond: the failing pages are
    // tried at most MAX_TRIES times each, and reclaim goes on freeing the clean files' folios.
    let misses_before: u64 = clean.iter().map(File::misses).sum();
    let read = pressure(&clean, 8);
    assert_eq!(
        read,
        8 * CLEAN_FILES * CLEAN_PAGES,
        "{policy}: every read completed"
    );
    let misses: u64 = clean.iter().map(File::misses).sum::<u64>() - misses_before;
    assert!(
        misses >= (read / 2) as u64,
        "{policy}: the clean files did not fit, so reclaim evicted them: {misses} misses in {read} reads"
    );
    let attempts = store.attempts();
    assert!(
        attempts.iter().all(|&n| n <= MAX_TRIES),
        "{policy}: background write-back tried a failing page more than {MAX_TRIES} times: {attempts:?}"
    );
    // The flusher reached them all and gave each its tries (it runs every millisecond; this
    // waits only for its threads to have run).
    wait_for(
        &format!("{policy}: every failing page tried {MAX_TRIES} times"),
        Duration::from_secs(20),
        || store.attempts().iter().all(|&n| n == MAX_TRIES),
        || format!("{:?}", store.attempts()),
    );
    let s = cache.stats_exact();
    assert_eq!(
        s.vmstat.get(Event::WritebackRetriesExhausted),
        NR_BAD,
        "{policy}: every failing folio counted once as parked"
    );
    assert!(s.vmstat.get(Event::WritebackErrors) >= NR_BAD * MAX_TRIES);
    assert_eq!(
        s.dirty_frames, NR_BAD as usize,
        "{policy}: the failing pages stay dirty"
    );
    if lists {
        assert_eq!(
            s.lru(Lru::Unevictable),
            NR_BAD as usize,
            "{policy}: parked out of reclaim's way"
        );
    }
    // More pressure: parked, they are no longer tried at all.
    let before = store.attempts();
    pressure(&clean, 4);
    assert_eq!(
        store.attempts(),
        before,
        "{policy}: parked folios are not retried"
    );

    // The data is still there, byte for byte, failing pages included.
    let mut back = vec![0u8; data.len()];
    b.read_exact_at(0, &mut back).unwrap();
    same(&back, &data, "the failing file's data while it fails");
    // The pages outside the bad range reached the store.
    let inner = store.inner.contents();
    same(
        &inner[..BAD.start * PAGE],
        &data[..BAD.start * PAGE],
        "pages before the bad range",
    );
    same(
        &inner[BAD.end * PAGE..],
        &data[BAD.end * PAGE..],
        "pages after the bad range",
    );

    // An explicit fsync tries every failing page again, once, and reports the failure; so
    // does the next one; each handle hears of each failure once.
    let before = store.attempts();
    expect_fsync(&a, true, "a: fsync retries and fails");
    let after = store.attempts();
    assert!(
        before.iter().zip(&after).all(|(x, y)| y - x == 1),
        "{policy}: fsync tries each failing page once: {before:?} -> {after:?}"
    );
    expect_fsync(&a, true, "a: its own retry failed again");
    expect_fsync(&b, true, "b: its retry fails too");
    assert!(
        store.attempts().iter().all(|&n| n == MAX_TRIES + 3),
        "{policy}: three fsyncs, three tries: {:?}",
        store.attempts()
    );
    // Still parked after failed retries: background write-back leaves them alone.
    let before = store.attempts();
    pressure(&clean, 2);
    assert_eq!(
        store.attempts(),
        before,
        "{policy}: still parked after fsync failed"
    );
    assert_eq!(
        cache
            .stats_exact()
            .vmstat
            .get(Event::WritebackRetriesExhausted),
        NR_BAD,
        "{policy}: parked once each"
    );

    // The store heals: fsync writes the data and the folios are clean and reclaimable again.
    store.heal();
    expect_fsync(
        &a,
        true,
        "a: b's failure, not seen yet (the write-back succeeds)",
    );
    expect_fsync(&a, false, "a: clean now");
    expect_fsync(&b, false, "b: saw the last failure itself");
    expect_fsync(&c, true, "c: the failures it missed, once");
    expect_fsync(&c, false, "c: once");
    let s = cache.stats_exact();
    assert_eq!(s.dirty_frames, 0, "{policy}: clean after the store healed");
    if lists {
        assert_eq!(s.lru(Lru::Unevictable), 0, "{policy}: back on the lists");
    }
    same(
        &store.inner.synced_contents(),
        &data,
        "the store has it all",
    );
    let mut rounds = 0;
    while a.cached_frames() > 0 && rounds < 20 {
        pressure(&clean, 1);
        rounds += 1;
    }
    assert_eq!(
        a.cached_frames(),
        0,
        "{policy}: the healed file's folios were reclaimed under pressure"
    );
    drop((a, b, c, clean));
    check_no_leak(&cache, policy);
}

#[test]
fn bounded_retries_under_the_multi_generational_lru() {
    let _w = Watchdog::arm(Duration::from_secs(120), "lru-gen");
    a_failing_folio_is_retried_a_bounded_number_of_times("lru-gen");
}

#[test]
fn bounded_retries_under_the_classic_lists() {
    let _w = Watchdog::arm(Duration::from_secs(120), "lru");
    a_failing_folio_is_retried_a_bounded_number_of_times("lru");
}

#[test]
fn bounded_retries_under_the_clock() {
    let _w = Watchdog::arm(Duration::from_secs(120), "clock");
    a_failing_folio_is_retried_a_bounded_number_of_times("clock");
}

/// A write into a parked folio re-arms it: new data gets background write-back's tries again,
/// and is parked again after them if the store still fails.
#[test]
fn a_write_into_a_parked_folio_rearms_it() {
    let _w = Watchdog::arm(Duration::from_secs(120), "rearm");
    let cache = PageCache::new(config("lru-gen")).unwrap();
    let store = FailingRange::new(BAD);
    let a = cache.open(store.clone()).unwrap();
    let mut data = pattern(FILE_PAGES * PAGE, 9);
    a.write_at(0, &data).unwrap();
    wait_for(
        "every failing page parked",
        Duration::from_secs(20),
        || store.attempts().iter().all(|&n| n == MAX_TRIES),
        || format!("{:?}", store.attempts()),
    );
    let page = BAD.start + 2;
    let new = pattern(PAGE, 99);
    a.write_at((page * PAGE) as u64, &new).unwrap();
    data[page * PAGE..(page + 1) * PAGE].copy_from_slice(&new);
    let i = page - BAD.start;
    wait_for(
        "the rewritten page tried again",
        Duration::from_secs(20),
        || store.attempts()[i] == 2 * MAX_TRIES,
        || format!("{:?}", store.attempts()),
    );
    let clean: Vec<File> = (0..CLEAN_FILES)
        .map(|i| File::open(&cache, CLEAN_PAGES, 40 + i as u8))
        .collect();
    pressure(&clean, 4);
    let attempts = store.attempts();
    for (j, &n) in attempts.iter().enumerate() {
        let want = if j == i { 2 * MAX_TRIES } else { MAX_TRIES };
        assert_eq!(n, want, "page {}: {attempts:?}", BAD.start + j);
    }
    assert_eq!(
        cache
            .stats_exact()
            .vmstat
            .get(Event::WritebackRetriesExhausted),
        NR_BAD + 1,
        "parked twice"
    );
    same(&common::read_all(&a), &data, "the new bytes are cached");
    store.heal();
    expect_fsync(&a, true, "the failures, once");
    expect_fsync(&a, false, "clean");
    same(
        &store.inner.synced_contents(),
        &data,
        "the store has the new bytes",
    );
    drop((a, clean));
    check_no_leak(&cache, "rearm");
}
