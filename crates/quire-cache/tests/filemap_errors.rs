//! Faults from the store (rule 6 of docs/RULES.md): write-back errors reach every handle's `fsync`
//! exactly once and never lose the data; read errors reach the reader as typed errors and leave
//! the cache usable; short transfers are completed; sync errors reach the caller.
//!
//! The caches here have a flusher that never runs on its own (huge thresholds and expiry), so
//! that every write-back attempt is one the test asked for and the error counts are exact.

mod common;

use std::io;
use std::time::Duration;

use quire::filemap::{CachedFile, FilemapError, PageCache};
use quire::store::{Fault, Op, StoreError};

use common::{check_no_leak, faulty, quiet_config, read_all, same, PAGE};

const EIO: i32 = 5;

/// This file's byte pattern (multiplier 29).
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    common::pattern_with(len, seed, 29)
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

#[test]
fn a_one_shot_write_error_reaches_each_of_three_handles_once() {
    for align in [1usize, 4096] {
        let store = faulty(Vec::new(), align);
        let cache = PageCache::new(quiet_config(4 << 20)).unwrap();
        let a = cache.open(store.clone()).unwrap();
        let b = a.reopen();
        let c = b.reopen();
        let data = pattern(10 * PAGE + 300, 1);
        a.write_at(0, &data).unwrap();
        let id = store.add(Fault::write_error(3 * PAGE as u64..3 * PAGE as u64 + 1));
        expect_fsync(&a, true, "a sees the failure");
        assert_eq!(store.fired(id), 1);
        assert!(
            cache.stats_exact().dirty_frames > 0,
            "the failed folio stays dirty"
        );
        same(&read_all(&a), &data, "the data is still cached");
        expect_fsync(&a, false, "a: rewritten, and already reported");
        expect_fsync(&a, false, "a: nothing new");
        expect_fsync(&b, true, "b sees it once");
        expect_fsync(&b, false, "b: once only");
        expect_fsync(&c, true, "c sees it once");
        expect_fsync(&c, false, "c: once only");
        // A handle opened after everyone saw it starts clean.
        let d = c.reopen();
        expect_fsync(&d, false, "d was opened after the error was seen");
        assert_eq!(cache.stats_exact().dirty_frames, 0);
        same(
            &store.inner().synced_contents(),
            &data,
            "the store has it all",
        );
    }
}

#[test]
fn an_error_nobody_has_seen_reaches_a_handle_opened_after_it() {
    let store = faulty(Vec::new(), 1);
    let cache = PageCache::new(quiet_config(4 << 20)).unwrap();
    let a = cache.open(store.clone()).unwrap();
    let data = pattern(5 * PAGE, 2);
    a.write_at(0, &data).unwrap();
    store.add(Fault::write_error(0..PAGE as u64));
    // The failure happens in a cache-wide sync, which no handle's fsync sees directly.
    assert!(cache.sync_all().is_err());
    let late = a.reopen();
    expect_fsync(
        &late,
        true,
        "opened after the failure, before anyone saw it",
    );
    expect_fsync(&late, false, "once");
    expect_fsync(&a, true, "a had not seen it either");
    expect_fsync(&a, false, "once");
    same(
        &store.inner().synced_contents(),
        &data,
        "written on the retry",
    );
}

#[test]
fn a_persistent_write_error_loses_nothing_and_is_reported_once_per_failure() {
    for align in [1usize, 4096] {
        let base = pattern(16 * PAGE, 3);
        let store = faulty(base.clone(), align);
        let cache = PageCache::new(quiet_config(4 << 20)).unwrap();
        let a = cache.open(store.clone()).unwrap();
        let b = a.reopen();
        let c = a.reopen();
        let mut expect = base.clone();
        for (off, len) in [
            (100usize, 5000usize),
            (6 * PAGE + 7, 3 * PAGE),
            (15 * PAGE, 9000),
        ] {
            let w = pattern(len, off as u8);
            a.write_at(off as u64, &w).unwrap();
            if off + len > expect.len() {
                expect.resize(off + len, 0);
            }
            expect[off..off + len].copy_from_slice(&w);
        }
        let id = store.add(Fault::write_error(7 * PAGE as u64..8 * PAGE as u64).persistent());
        // Every fsync while the fault lasts tries again, fails again, and reports it.
        expect_fsync(&a, true, "a, first failure");
        expect_fsync(&a, true, "a, a new failure (its own retry)");
        // Invalidation writes back first (failing again) and keeps the failing dirty folio.
        let _ = a.invalidate();
        same(&read_all(&a), &expect, "after invalidate");
        expect_fsync(&b, true, "b, its retry failed");
        assert!(store.fired(id) >= 3);
        // Nothing is lost while it fails: cached, dirty, readable by every handle.
        same(&read_all(&c), &expect, "cached data while failing");
        assert!(cache.stats_exact().dirty_frames > 0);
        // The rest of the file did reach the store.
        let inner = store.inner().contents();
        same(
            &inner[..7 * PAGE],
            &expect[..7 * PAGE],
            "pages before the fault",
        );
        same(
            &inner[8 * PAGE..],
            &expect[8 * PAGE..],
            "pages after the fault",
        );

        store.clear();
        // a has not seen b's failure: reported once, though this write-back succeeds.
        expect_fsync(&a, true, "a, b's failure not seen yet");
        expect_fsync(&a, false, "a, clean now");
        expect_fsync(&b, false, "b saw the last failure itself");
        // c never asked: one report covers all the failures it missed.
        expect_fsync(&c, true, "c, the failures it missed");
        expect_fsync(&c, false, "c, once");
        let s = cache.stats_exact();
        assert_eq!(s.dirty_frames, 0);
        same(
            &store.inner().synced_contents(),
            &expect,
            "all of it in the store",
        );
        // And a new cache reads it all back.
        drop((a, b, c));
        let cache2 = PageCache::new(quiet_config(1 << 20)).unwrap();
        let f = cache2.open(store.clone()).unwrap();
        same(&read_all(&f), &expect, "in a new cache");
    }
}

#[test]
fn write_errors_under_memory_pressure_keep_the_data() {
    // A cache of 64 frames and a file of 256 pages: reclaim must write back to evict, and the
    // pages of the faulty range cannot be written while the fault lasts.
    let mut cfg = quiet_config(256 << 10);
    cfg.max_folio_order = 2;
    cfg.readahead_max = 32 << 10;
    cfg.dirty_background = 32 << 10;
    cfg.dirty_limit = 128 << 10;
    cfg.dirty_expire = Duration::from_millis(50);
    cfg.flush_interval = Duration::from_millis(20);
    let cache = PageCache::new(cfg).unwrap();
    let store = faulty(Vec::new(), 1);
    let a = cache.open(store.clone()).unwrap();
    let b = a.reopen();
    let bad = 40 * PAGE as u64..44 * PAGE as u64;
    let id = store.add(Fault::write_error(bad.clone()).persistent());
    let data = pattern(256 * PAGE, 4);
    for (i, chunk) in data.chunks(3 * PAGE + 17).enumerate() {
        let off = i * (3 * PAGE + 17);
        assert_eq!(a.write_at(off as u64, chunk).unwrap(), chunk.len());
        let s = cache.stats_exact();
        assert!(s.cached_frames <= s.frames);
    }
    same(&read_all(&b), &data, "read back under pressure");
    assert!(store.fired(id) > 0, "the fault was met");
    assert!(a.fsync().is_err());
    store.clear();
    // Failures may have happened in the flusher or reclaim before this fsync: each handle sees
    // at most one report, then clean fsyncs.
    let _ = a.fsync();
    expect_fsync(&a, false, "a, after the fault cleared");
    let _ = b.fsync();
    expect_fsync(&b, false, "b, after the fault cleared");
    same(&store.inner().synced_contents(), &data, "nothing was lost");
    drop((a, b));
    check_no_leak(&cache, "after write errors under pressure");
    let s = cache.stats_exact();
    assert_eq!(
        (s.free_frames, s.cached_frames, s.dirty_frames),
        (s.frames, 0, 0)
    );
}

#[test]
fn read_errors_reach_read_at_typed_and_leave_the_cache_usable() {
    for align in [1usize, 4096] {
        let data = pattern(32 * PAGE + 1000, 5);
        let store = faulty(data.clone(), align);
        let mut cfg = quiet_config(4 << 20);
        cfg.readahead_max = 0;
        let cache = PageCache::new(cfg).unwrap();
        let f = cache.open(store.clone()).unwrap();

        // Once: the read fails with the store's typed error, then succeeds.
        let id = store.add(Fault::read_error(5 * PAGE as u64..6 * PAGE as u64));
        let mut buf = vec![0u8; 3 * PAGE];
        match f.read_at(4 * PAGE as u64, &mut buf) {
            Err(
                ref e @ FilemapError::Store(StoreError::Io {
                    op, offset, errno, ..
                }),
            ) => {
                assert_eq!(op, Op::Read);
                assert_eq!(offset, 5 * PAGE as u64);
                assert_eq!(errno, Some(EIO));
                assert_eq!(e.kind(), io::ErrorKind::Other, "the fault's kind");
            }
            other => panic!("expected a read error, got {other:?}"),
        }
        assert_eq!(store.fired(id), 1);
        assert_eq!(f.read_at(4 * PAGE as u64, &mut buf).unwrap(), buf.len());
        same(&buf, &data[4 * PAGE..7 * PAGE], "after a one-shot fault");

        // Persistent: every read of the page fails, others work; zero-copy reads fail too.
        let id = store.add(Fault::read_error(9 * PAGE as u64..10 * PAGE as u64).persistent());
        for _ in 0..3 {
            assert!(matches!(
                f.read_at(9 * PAGE as u64 + 10, &mut [0u8; 10]),
                Err(FilemapError::Store(StoreError::Io { op: Op::Read, .. }))
            ));
        }
        assert!(f.read_folio(9).is_err());
        assert_eq!(f.read_at(10 * PAGE as u64, &mut buf).unwrap(), buf.len());
        same(&buf, &data[10 * PAGE..13 * PAGE], "a neighbour");
        // A partial write there needs the page first: it fails, and changes nothing.
        assert!(f.write_at(9 * PAGE as u64 + 100, b"lost?").is_err());
        assert_eq!(f.len() as usize, data.len());
        // A whole-page write needs no read: it succeeds.
        let whole = vec![0x5Au8; PAGE];
        f.write_at(11 * PAGE as u64, &whole).unwrap();
        store.add(Fault::read_error(11 * PAGE as u64..12 * PAGE as u64).persistent());
        f.write_at(11 * PAGE as u64, &whole).unwrap();
        assert!(store.fired(id) >= 4);
        store.clear();
        let mut expect = data.clone();
        expect[11 * PAGE..12 * PAGE].fill(0x5A);
        same(&read_all(&f), &expect, "after the fault cleared");
        f.fsync().unwrap();
        same(&store.inner().synced_contents(), &expect, "in the store");
        drop(f);
        check_no_leak(&cache, "after read errors");
        let s = cache.stats_exact();
        assert_eq!(
            (s.free_frames, s.cached_frames),
            (s.frames, 0),
            "no folio left behind"
        );
    }
}

#[test]
fn read_errors_during_readahead_are_met_by_the_reader() {
    let data = pattern(4 << 20, 6);
    let mut cfg = quiet_config(16 << 20);
    cfg.readahead_max = 512 << 10;
    let cache = PageCache::new(cfg).unwrap();
    for persistent in [false, true] {
        let store = faulty(data.clone(), 1);
        let f = cache.open(store.clone()).unwrap();
        let bad = (1 << 20) + 3 * PAGE;
        let mut fault = Fault::read_error(bad as u64..bad as u64 + 1);
        if persistent {
            fault = fault.persistent();
        }
        store.add(fault);
        let mut buf = vec![0u8; 64 << 10];
        let mut pos = 0;
        let mut failed_at = None;
        while pos < data.len() {
            match f.read_at(pos as u64, &mut buf) {
                Ok(n) => {
                    assert_eq!(n, buf.len());
                    same(&buf, &data[pos..pos + n], "a sequential read");
                    pos += n;
                }
                Err(e) => {
                    assert!(persistent, "a one-shot fault is retried by the reader: {e}");
                    assert!(
                        (pos..pos + buf.len()).contains(&bad),
                        "failed at {pos}, the fault is at {bad}"
                    );
                    assert!(matches!(
                        e,
                        FilemapError::Store(StoreError::Io { op: Op::Read, .. })
                    ));
                    failed_at = Some(pos);
                    store.clear();
                }
            }
        }
        assert_eq!(failed_at.is_some(), persistent);
        same(&read_all(&f), &data, "the whole file");
    }
}

#[test]
fn short_reads_and_short_writes_are_completed() {
    for align in [1usize, 4096] {
        // With an aligned store a short transfer can only stop at a page boundary.
        let max = if align == 1 { 1000 } else { PAGE };
        let data = pattern(64 * PAGE + 123, 7);
        let store = faulty(data.clone(), align);
        let cache = PageCache::new(quiet_config(4 << 20)).unwrap();
        let f = cache.open(store.clone()).unwrap();
        let r = store.add(Fault::short_read(0..data.len() as u64, max).persistent());
        same(&read_all(&f), &data, &format!("short reads, align {align}"));
        assert!(store.fired(r) > 0);
        store.clear();

        let w = store.add(Fault::short_write(0..1 << 30, max).persistent());
        let mut expect = data.clone();
        let big = pattern(20 * PAGE + 77, 8);
        f.write_at(3 * PAGE as u64 + 5, &big).unwrap();
        expect[3 * PAGE + 5..3 * PAGE + 5 + big.len()].copy_from_slice(&big);
        f.write_at(data.len() as u64 + 50, b"tail").unwrap();
        expect.resize(data.len() + 50, 0);
        expect.extend_from_slice(b"tail");
        f.fsync().unwrap();
        assert!(store.fired(w) > 0);
        same(&store.inner().synced_contents(), &expect, "short writes");

        // A write that makes no progress at all is an error (never a silent loss), once.
        store.clear();
        let z = store.add(Fault::short_write(0..PAGE as u64, 0));
        f.write_at(10, b"again").unwrap();
        expect[10..15].copy_from_slice(b"again");
        let g = f.reopen();
        expect_fsync(&f, true, "a zero-length write");
        assert_eq!(store.fired(z), 1);
        expect_fsync(&f, false, "retried");
        expect_fsync(&g, true, "the other handle");
        same(
            &store.inner().synced_contents(),
            &expect,
            "after the zero write",
        );
        drop((f, g));
        let cache2 = PageCache::new(quiet_config(1 << 20)).unwrap();
        let h = cache2.open(store.clone()).unwrap();
        same(&read_all(&h), &expect, "in a new cache");
    }
}

#[test]
fn a_sync_error_reaches_the_caller() {
    let store = faulty(Vec::new(), 1);
    let cache = PageCache::new(quiet_config(1 << 20)).unwrap();
    let f = cache.open(store.clone()).unwrap();
    let g = f.reopen();
    let data = pattern(3 * PAGE, 9);
    f.write_at(0, &data).unwrap();
    store.add(Fault::sync_error());
    // A failed sync may have lost written data: it is recorded like a write-back error, so the
    // caller and every other handle hear of it once.
    match f.fsync() {
        Err(FilemapError::Writeback { errno: 5 }) => {}
        other => panic!("expected a sync error, got {other:?}"),
    }
    f.fsync().unwrap();
    match g.fsync() {
        Err(FilemapError::Writeback { errno: 5 }) => {}
        other => panic!("expected the other handle to see the sync error, got {other:?}"),
    }
    g.fsync().unwrap();
    same(
        &store.inner().synced_contents(),
        &data,
        "synced on the retry",
    );
}

#[test]
fn flush_writes_back_without_syncing_and_reports_errors_once_per_handle() {
    for align in [1usize, 4096] {
        let store = faulty(Vec::new(), align);
        let cache = PageCache::new(quiet_config(4 << 20)).unwrap();
        let a = cache.open(store.clone()).unwrap();
        let b = a.reopen();
        let data = pattern(6 * PAGE + 10, 4);
        a.write_at(0, &data).unwrap();
        let syncs = store.inner().sync_count();
        a.flush().unwrap();
        assert_eq!(
            cache.stats_exact().dirty_frames,
            0,
            "align {align}: written back"
        );
        same(&store.inner().contents(), &data, "the store holds the data");
        assert_eq!(store.inner().sync_count(), syncs, "align {align}: no sync");

        a.write_at(PAGE as u64, &data[..PAGE]).unwrap();
        let id = store.add(Fault::write_error(PAGE as u64..PAGE as u64 + 1));
        match a.flush() {
            Err(FilemapError::Writeback { errno }) => assert_eq!(errno, EIO),
            r => panic!("align {align}: flush returned {r:?}"),
        }
        assert_eq!(store.fired(id), 1);
        assert!(
            cache.stats_exact().dirty_frames > 0,
            "the failed folio stays dirty"
        );
        a.flush().unwrap();
        expect_fsync(&b, true, "the other handle hears of it once");
        expect_fsync(&b, false, "once only");
        assert_eq!(cache.stats_exact().dirty_frames, 0);
    }
}
