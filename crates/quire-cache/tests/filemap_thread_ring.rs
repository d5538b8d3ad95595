//! A thread's own ring (`quire::bio::ThreadRing`): the reads its futures await go there and
//! the thread runs their ends itself — the same bytes as the engine's path, wake-ups from other
//! threads never lost, a blocking wait inside a poll never stuck on the thread's own requests,
//! nothing left in flight or leaked when futures and handles go away.
//!
//! Where this process cannot have a ring of its own (io_uring refused), or the cache runs the
//! threads engine (`QUIRE_IO_ENGINE=threads`), the tests check that nothing goes to a thread's
//! ring and the reads still return the file's bytes.

mod common;

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use quire::bio::{IoEngineKind, ThreadRing};
use quire::filemap::{block_on, CachedFile, PageCache};
use quire::store::{FileStore, IoMode};

use common::{check_no_leak, pattern, quiet_config, Watchdog, PAGE};

/// A cache of `capacity` over a real file of `data` (O_DIRECT where the file system allows),
/// one page per folio, no readahead: every miss is one awaited read.
fn setup(data: &[u8], capacity: usize) -> (tempfile::TempDir, PageCache, CachedFile) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    std::fs::write(&path, data).unwrap();
    let mut cfg = quiet_config(capacity);
    cfg.readahead_max = 0;
    cfg.max_folio_order = 0;
    let cache = PageCache::new(cfg).unwrap();
    let f = cache
        .open(FileStore::open(&path, IoMode::PreferDirect).unwrap())
        .unwrap();
    (dir, cache, f)
}

/// Whether a future's misses can go to this thread's ring: the cache runs io_uring and the
/// thread can have a ring. With `QUIRE_REQUIRE_THREAD_RING=1` (CI's io_uring run) anything else
/// fails the test instead of skipping it.
fn local_possible(cache: &PageCache) -> bool {
    let kind = cache.stats_exact().io_engine.kind;
    let ring = ThreadRing::current().is_some();
    if std::env::var("QUIRE_REQUIRE_THREAD_RING").as_deref() == Ok("1") {
        assert!(
            kind == IoEngineKind::IoUring && ring,
            "QUIRE_REQUIRE_THREAD_RING=1: engine {kind}, thread ring available: {ring}"
        );
    }
    kind == IoEngineKind::IoUring && ring
}

/// Polls `fut` inside `ring` until it is done, parking in the ring between polls.
fn run_on<F: Future>(ring: &ThreadRing, mut fut: Pin<&mut F>, cx: &mut Context<'_>) -> F::Output {
    loop {
        if let Poll::Ready(out) = ring.enter(|| fut.as_mut().poll(cx)) {
            return out;
        }
        ring.park();
    }
}

/// This thread's ring where `cache`'s misses can go to it; else says why the test skips.
fn ring_for(cache: &PageCache) -> Option<ThreadRing> {
    let ring = ThreadRing::current().filter(|_| local_possible(cache));
    if ring.is_none() {
        eprintln!("skipped: no io_uring of this thread's own, or the threads engine");
    }
    ring
}

/// `block_on` reads through the thread's ring: every byte right over random reads of a file 8×
/// the cache (reclaim running), each miss counted as a request of the thread's ring.
#[test]
fn block_on_reads_through_the_threads_ring() {
    let _dog = Watchdog::arm(Duration::from_secs(60), "thread ring reads");
    let data = pattern(512 * PAGE, 3);
    let (_dir, cache, f) = setup(&data, 64 * PAGE);
    let local = local_possible(&cache);
    let before = cache.stats_exact().io;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let page = (x % 512) as usize;
        let mut buf = vec![0u8; PAGE];
        block_on(f.read_exact_at_async((page * PAGE) as u64, &mut buf)).unwrap();
        assert!(
            buf[..] == data[page * PAGE..(page + 1) * PAGE],
            "round {round}: page {page}"
        );
    }
    let io = cache.stats_exact().io.since(&before);
    assert_eq!(io.errors, 0, "{io:?}");
    if local {
        // No readahead, one page per folio: every request is an awaited miss, on the ring.
        assert!(io.local > 0, "{io:?}");
        assert_eq!(io.local, io.submitted, "{io:?}");
    } else {
        assert_eq!(io.local, 0, "{io:?}");
    }
    assert_eq!(ThreadRing::current().map_or(0, |r| r.in_flight()), 0);
    drop(f);
    check_no_leak(&cache, "thread ring reads");
}

/// A future polled inside a thread ring's `enter` puts its miss on the ring; the same poll then
/// reads the page with a blocking call, which finds the folio locked by that very request. The
/// thread must run its ring's requests before it sleeps (without that, it sleeps forever: the
/// watchdog fails the test).
#[test]
fn a_blocking_wait_inside_a_poll_runs_the_threads_own_requests() {
    let _dog = Watchdog::arm(Duration::from_secs(30), "blocking wait in a poll");
    let data = pattern(16 * PAGE, 4);
    let (_dir, cache, f) = setup(&data, 64 * PAGE);
    let Some(ring) = ring_for(&cache) else {
        return;
    };
    let mut a = vec![0u8; PAGE];
    let mut b = vec![0u8; PAGE];
    let waker = ring.waker();
    let mut cx = Context::from_waker(&waker);
    {
        let mut fut = pin!(f.read_exact_at_async(5 * PAGE as u64, &mut a));
        let first = ring.enter(|| {
            let first = fut.as_mut().poll(&mut cx);
            // The miss is this ring's until the thread reaps it.
            assert_eq!(ring.in_flight(), 1);
            f.read_exact_at(5 * PAGE as u64, &mut b).unwrap();
            first
        });
        assert!(
            first.is_pending(),
            "the page was not cached: the poll waits"
        );
        assert_eq!(ring.in_flight(), 0);
        assert!(b[..] == data[5 * PAGE..6 * PAGE]);
        // The future's folio is up to date: its next poll returns.
        run_on(&ring, fut.as_mut(), &mut cx).unwrap();
    }
    assert!(a == b);
    drop(f);
    check_no_leak(&cache, "blocking wait in a poll");
}

/// An `Unparker` wakes the parked thread from another thread, whether it comes while the thread
/// sleeps or before it parks (the wake-up is kept, never lost).
#[test]
fn unpark_from_another_thread_is_never_lost() {
    let _dog = Watchdog::arm(Duration::from_secs(60), "unpark");
    let Some(ring) = ThreadRing::current() else {
        assert!(
            std::env::var("QUIRE_REQUIRE_THREAD_RING").as_deref() != Ok("1"),
            "QUIRE_REQUIRE_THREAD_RING=1 and no thread ring"
        );
        eprintln!("skipped: no io_uring of this thread's own");
        return;
    };
    // Before the park: returns at once.
    ring.unparker().unpark();
    ring.park();
    // While parked, and racing the park: 2 000 hand-offs of a token between two threads.
    let turn = Arc::new(AtomicBool::new(false));
    let un = ring.unparker();
    let other = {
        let turn = turn.clone();
        std::thread::spawn(move || {
            for i in 0..2000u32 {
                while turn.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                if i % 2 == 0 {
                    std::thread::sleep(Duration::from_micros(50));
                }
                turn.store(true, Ordering::Release);
                un.unpark();
            }
        })
    };
    for _ in 0..2000 {
        while !turn.load(Ordering::Acquire) {
            ring.park();
        }
        turn.store(false, Ordering::Release);
    }
    other.join().unwrap();
}

/// Futures dropped while their reads are on the ring leave the reads to finish: the ring's
/// handle drains them when it goes, the pages are cached right, nothing is leaked.
#[test]
fn dropped_futures_and_handles_leave_nothing_in_flight() {
    let _dog = Watchdog::arm(Duration::from_secs(30), "dropped on the ring");
    let data = pattern(64 * PAGE, 6);
    let (_dir, cache, f) = setup(&data, 256 * PAGE);
    let Some(ring) = ring_for(&cache) else {
        return;
    };
    let waker = ring.waker();
    let mut cx = Context::from_waker(&waker);
    let mut bufs = vec![vec![0u8; PAGE]; 32];
    let mut pending = 0;
    for (i, b) in bufs.iter_mut().enumerate() {
        let mut fut = Box::pin(f.read_exact_at_async((2 * i * PAGE) as u64, b));
        if ring.enter(|| fut.as_mut().poll(&mut cx)).is_pending() {
            pending += 1;
        }
        // Dropped while its read is in flight.
    }
    assert_eq!(ring.in_flight(), pending);
    assert!(pending > 0);
    drop(ring);
    assert_eq!(ThreadRing::current().unwrap().in_flight(), 0);
    let s = cache.stats_exact().io;
    assert_eq!(s.in_flight, 0, "{s:?}");
    for i in 0..32 {
        let mut b = vec![0u8; PAGE];
        assert!(f.is_cached((2 * i * PAGE) as u64, PAGE), "page {}", 2 * i);
        f.read_exact_at((2 * i * PAGE) as u64, &mut b).unwrap();
        assert!(b[..] == data[2 * i * PAGE..(2 * i + 1) * PAGE]);
    }
    drop(f);
    check_no_leak(&cache, "dropped on the ring");
}

/// Many futures on one thread with its ring (a small executor): all their misses in flight on
/// the ring, every byte right, and the ring empty at the end.
#[test]
fn one_thread_ring_keeps_many_misses_in_flight() {
    let _dog = Watchdog::arm(Duration::from_secs(60), "many on the ring");
    let data = pattern(1024 * PAGE, 8);
    let (_dir, cache, f) = setup(&data, 128 * PAGE);
    let Some(ring) = ring_for(&cache) else {
        return;
    };
    let before = cache.stats_exact().io;
    let waker = ring.waker();
    let mut cx = Context::from_waker(&waker);
    let next = std::cell::Cell::new(0usize);
    let worker = || async {
        let mut buf = vec![0u8; PAGE];
        loop {
            let i = next.get();
            if i == 4000 {
                return;
            }
            next.set(i + 1);
            let page = (i * 7919) % 1024;
            f.read_exact_at_async((page * PAGE) as u64, &mut buf)
                .await
                .unwrap();
            assert!(
                buf[..] == data[page * PAGE..(page + 1) * PAGE],
                "page {page}"
            );
        }
    };
    let mut futs: Vec<_> = (0..32).map(|_| Some(Box::pin(worker()))).collect();
    let mut most = 0;
    while futs.iter().any(Option::is_some) {
        for slot in futs.iter_mut() {
            if let Some(fut) = slot {
                if ring.enter(|| fut.as_mut().poll(&mut cx)).is_ready() {
                    *slot = None;
                }
            }
            most = most.max(ring.in_flight());
        }
        if futs.iter().any(Option::is_some) {
            ring.park();
        }
    }
    assert_eq!(ring.in_flight(), 0);
    drop(futs);
    let io = cache.stats_exact().io.since(&before);
    assert!(
        most > 8,
        "misses of many futures on the ring at once: {most}"
    );
    assert!(io.local > 1000, "{io:?}");
    drop(f);
    check_no_leak(&cache, "many on the ring");
}

/// A truncation holds the file's invalidate lock while it waits for a folio whose read is on
/// this thread's ring; a second future polled here then misses and needs that lock shared. The
/// thread must run its ring's reads before it blocks on the lock (without that, neither thread
/// moves: the watchdog fails the test).
#[test]
fn a_truncation_waiting_for_the_rings_read_does_not_deadlock_the_ring() {
    let _dog = Watchdog::arm(Duration::from_secs(30), "truncation against the ring");
    let data = pattern(64 * PAGE, 7);
    let (_dir, cache, f) = setup(&data, 256 * PAGE);
    let Some(ring) = ring_for(&cache) else {
        return;
    };
    let waker = ring.waker();
    let mut cx = Context::from_waker(&waker);
    let mut a = vec![0u8; PAGE];
    let mut b = vec![0u8; PAGE];
    let f = Arc::new(f);
    let first_ok = {
        let mut first = pin!(f.read_exact_at_async(40 * PAGE as u64, &mut a));
        assert!(ring.enter(|| first.as_mut().poll(&mut cx)).is_pending());
        assert_eq!(ring.in_flight(), 1);
        // Another thread cuts the file below that page: it takes the invalidate lock and waits
        // for the page's folio, locked by the read on this thread's ring.
        let cutter = {
            let f = f.clone();
            std::thread::spawn(move || f.set_len(32 * PAGE as u64).unwrap())
        };
        std::thread::sleep(Duration::from_millis(200));
        // A second future misses a page below the cut: it needs the lock shared.
        let mut second = pin!(f.read_exact_at_async(8 * PAGE as u64, &mut b));
        run_on(&ring, second.as_mut(), &mut cx).unwrap();
        cutter.join().unwrap();
        // The first read began before the cut: it ends with the page as it was or an error.
        let first_ok = run_on(&ring, first.as_mut(), &mut cx).is_ok();
        first_ok
    };
    if first_ok {
        assert!(a[..] == data[40 * PAGE..41 * PAGE]);
    }
    assert!(b[..] == data[8 * PAGE..9 * PAGE]);
    assert_eq!(f.len(), 32 * PAGE as u64);
    drop(ring);
    drop(Arc::into_inner(f).unwrap());
    check_no_leak(&cache, "truncation against the ring");
}
