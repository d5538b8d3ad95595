//! The asynchronous reads (`read_at_async`, `read_folio_async`, `write_at_async`) and
//! `prefetch`: the same bytes and errors as the blocking calls, many misses in flight from one
//! thread, and futures dropped at any point while reclaim runs leave nothing locked, waiting or
//! leaked.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use quire::filemap::{block_on, PageCache};
use quire::store::{Fault, FaultyStore, FileStore, IoMode, MemStore, Store};
use quire::FilemapError;

use common::{check_no_leak, pattern, quiet_config, Watchdog, PAGE};

/// Polls every future of `futs` on this thread until all are done (a tiny join-all): the
/// futures' misses are in flight together.
fn join_all<T>(futs: Vec<Pin<Box<dyn Future<Output = T> + '_>>>) -> Vec<T> {
    struct Flag(AtomicBool, std::thread::Thread);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::Release);
            self.1.unpark();
        }
    }
    let flag = Arc::new(Flag(AtomicBool::new(true), std::thread::current()));
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let mut slots: Vec<_> = futs.into_iter().map(Some).collect();
    let mut out: Vec<Option<T>> = slots.iter().map(|_| None).collect();
    let mut left = slots.len();
    while left > 0 {
        if !flag.0.swap(false, Ordering::AcqRel) {
            std::thread::park_timeout(Duration::from_millis(10));
            continue;
        }
        for (i, slot) in slots.iter_mut().enumerate() {
            if let Some(f) = slot {
                if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                    out[i] = Some(v);
                    *slot = None;
                    left -= 1;
                }
            }
        }
    }
    out.into_iter().map(Option::unwrap).collect()
}

/// A memory store whose reads wait at a gate until it opens (and count themselves).
struct Gated {
    inner: MemStore,
    open: Mutex<bool>,
    opened: Condvar,
    reads: AtomicUsize,
}

impl Gated {
    fn new(data: Vec<u8>) -> Arc<Gated> {
        Arc::new(Gated {
            inner: MemStore::from_vec(data),
            open: Mutex::new(false),
            opened: Condvar::new(),
            reads: AtomicUsize::new(0),
        })
    }
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

impl Store for Gated {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> quire::store::Result<usize> {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
        drop(open);
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> quire::store::Result<usize> {
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

fn cache(capacity: usize) -> PageCache {
    let mut cfg = quiet_config(capacity);
    cfg.readahead_max = 0;
    cfg.max_folio_order = 0;
    PageCache::new(cfg).unwrap()
}

#[test]
fn futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let cache = cache(1 << 20);
    let f = cache.open(MemStore::from_vec(vec![1; 8192])).unwrap();
    let mut buf = [0u8; 10];
    let fut = f.read_at_async(0, &mut buf);
    send(&fut);
    drop(fut);
    send(&f.read_folio_async(0));
    send(&f.write_at_async(0, b"x"));
}

/// One thread, 32 reads of distinct pages at once: all 32 are queued in the engine before the
/// store returns anything, and every read gets its page.
#[test]
fn one_thread_keeps_many_misses_in_flight() {
    let _dog = Watchdog::arm(Duration::from_secs(30), "many in flight");
    let data = pattern(64 * PAGE, 5);
    let store = Gated::new(data.clone());
    let cache = cache(1 << 20);
    let f = cache.open(store.clone()).unwrap();
    let opener = {
        let (store, cache) = (store.clone(), cache.clone());
        std::thread::spawn(move || {
            // The gate opens once the 32 reads are in the engine (or after 10 s, for the
            // assertions below to report): a fixed pause opens it too early whenever a loaded
            // machine holds the submitting thread back for longer.
            let start = Instant::now();
            while cache.stats().io.in_flight < 32 && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(1));
            }
            store.open();
        })
    };
    let mut bufs = vec![vec![0u8; PAGE]; 32];
    type Read<'a> = Pin<Box<dyn Future<Output = Result<usize, FilemapError>> + 'a>>;
    let futs: Vec<Read<'_>> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, b)| {
            Box::pin(f.read_at_async((2 * i * PAGE) as u64, b)) as Pin<Box<dyn Future<Output = _>>>
        })
        .collect();
    for r in join_all(futs) {
        assert_eq!(r.unwrap(), PAGE);
    }
    opener.join().unwrap();
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(
            &b[..],
            &data[2 * i * PAGE..(2 * i + 1) * PAGE],
            "page {}",
            2 * i
        );
    }
    let s = cache.stats_exact();
    assert!(
        s.io.max_in_flight >= 32,
        "32 misses from one thread in flight at once: {:?}",
        s.io
    );
    assert_eq!(store.reads.load(Ordering::Relaxed), 32);
    drop(f);
    check_no_leak(&cache, "many in flight");
}

/// Random reads of every size, async and blocking, through io_uring (a real file, O_DIRECT
/// where the file system allows) and through the threads (a memory store): the same bytes.
#[test]
fn async_reads_return_what_blocking_reads_do() {
    let _dog = Watchdog::arm(Duration::from_secs(60), "async reads");
    let data = pattern(256 * PAGE + 123, 9);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    std::fs::write(&path, &data).unwrap();
    let stores: Vec<Box<dyn Store>> = vec![
        Box::new(FileStore::open(&path, IoMode::PreferDirect).unwrap()),
        Box::new(MemStore::from_vec(data.clone())),
    ];
    for store in stores {
        let mut cfg = quiet_config(256 << 10); // 64 frames: reclaim runs
        cfg.readahead_max = 64 << 10;
        let cache = PageCache::new(cfg).unwrap();
        let f = cache.open_boxed(store).unwrap();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..300 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let off = x % (data.len() as u64 + 2 * PAGE as u64);
            let len = (x >> 40) as usize % (5 * PAGE) + 1;
            let mut a = vec![0u8; len];
            let mut b = vec![0u8; len];
            let na = block_on(f.read_at_async(off, &mut a)).unwrap();
            let nb = f.read_at(off, &mut b).unwrap();
            assert_eq!(na, nb, "round {round}: at {off}, {len} bytes");
            assert_eq!(a[..na], b[..nb], "round {round}");
            let want = data.len().saturating_sub(off as usize).min(len);
            assert_eq!(na, want);
            assert_eq!(&a[..na], &data[off as usize..off as usize + na]);
        }
        // Sequential: readahead windows through the engine.
        let mut all = vec![0u8; data.len()];
        block_on(f.read_exact_at_async(0, &mut all)).unwrap();
        assert!(all == data);
        let s = cache.stats_exact();
        assert!(s.io.submitted > 0 && s.io.errors == 0, "{:?}", s.io);
        drop(f);
        check_no_leak(&cache, "async reads");
    }
}

/// A read error comes back typed from the async read, the folio is not cached as data, and the
/// next read (once the store works) gets the bytes.
#[test]
fn read_errors_reach_the_awaiting_caller() {
    let _dog = Watchdog::arm(Duration::from_secs(30), "read errors");
    let data = pattern(16 * PAGE, 3);
    let store = FaultyStore::new(MemStore::from_vec(data.clone()));
    let id = store.add(Fault::read_error(4 * PAGE as u64..5 * PAGE as u64).persistent());
    let store = Arc::new(store);
    let cache = cache(1 << 20);
    let f = cache.open(store.clone()).unwrap();
    let mut buf = vec![0u8; PAGE];
    let err = block_on(f.read_at_async(4 * PAGE as u64, &mut buf)).unwrap_err();
    match &err {
        FilemapError::Store(e) => assert_eq!(e.offset(), 4 * PAGE as u64, "{err}"),
        other => panic!("not a store error: {other:?}"),
    }
    assert_eq!(err.kind(), std::io::ErrorKind::Other);
    // Again: the failed folio is read again (and fails again), no stale state.
    assert!(block_on(f.read_folio_async(4)).is_err());
    store.remove(id);
    block_on(f.read_exact_at_async(4 * PAGE as u64, &mut buf)).unwrap();
    assert_eq!(&buf[..], &data[4 * PAGE..5 * PAGE]);
    // Past the end: a short read, and read_folio_async's UnexpectedEof.
    assert_eq!(
        block_on(f.read_at_async(16 * PAGE as u64, &mut buf)).unwrap(),
        0
    );
    let eof = block_on(f.read_folio_async(16)).unwrap_err();
    assert_eq!(eof.kind(), std::io::ErrorKind::UnexpectedEof);
    drop(f);
    check_no_leak(&cache, "read errors");
}

/// A partial-page write to an uncached page reads the page first (awaited), then writes.
#[test]
fn async_writes_keep_the_rest_of_the_page() {
    let data = pattern(8 * PAGE, 11);
    let cache = cache(1 << 20);
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    block_on(f.write_all_at_async(PAGE as u64 + 100, b"hello")).unwrap();
    block_on(f.write_all_at_async(10 * PAGE as u64 - 3, b"past the end")).unwrap();
    let mut want = data.clone();
    want[PAGE + 100..PAGE + 105].copy_from_slice(b"hello");
    want.resize(10 * PAGE - 3, 0);
    want.extend_from_slice(b"past the end");
    let mut got = vec![0u8; want.len()];
    f.read_exact_at(0, &mut got).unwrap();
    assert!(got == want);
    f.fsync().unwrap();
    drop(f);
    check_no_leak(&cache, "async writes");
}

/// `prefetch` submits every uncached page of the ranges in one call and returns; the reads
/// that follow find them (no further store reads), and cached pages are skipped.
#[test]
fn prefetch_puts_the_ranges_in_flight_and_skips_what_is_cached() {
    let data = pattern(64 * PAGE, 13);
    let store = Gated::new(data.clone());
    let cache = cache(1 << 20);
    let f = cache.open(store.clone()).unwrap();
    store.open();
    let mut buf = vec![0u8; PAGE];
    f.read_exact_at(3 * PAGE as u64, &mut buf).unwrap();
    let before = store.reads.load(Ordering::Relaxed);
    let pages = f
        .prefetch(&[
            0..8 * PAGE as u64,
            20 * PAGE as u64 + 1..21 * PAGE as u64,
            1 << 40..(1 << 40) + 1,
        ])
        .unwrap();
    assert_eq!(pages, 8 - 1 + 1, "pages 0..8 but the cached 3, and page 20");
    let mut all = vec![0u8; 8 * PAGE];
    f.read_exact_at(0, &mut all).unwrap();
    assert_eq!(&all[..], &data[..8 * PAGE]);
    f.read_exact_at(20 * PAGE as u64, &mut buf).unwrap();
    assert_eq!(store.reads.load(Ordering::Relaxed) - before, 8);
    let again = std::slice::from_ref(&(0..8 * PAGE as u64));
    assert!(f.prefetch(again).unwrap() == 0, "all cached");
    drop(f);
    check_no_leak(&cache, "prefetch");
}

/// Futures dropped after 0, 1 or more polls, at random, while other threads read through a
/// cache 16 times smaller than the file (reclaim runs all along): afterwards every page reads
/// right, nothing is locked, and every frame comes back.
#[test]
fn dropped_futures_leave_nothing_behind() {
    let _dog = Watchdog::arm(Duration::from_secs(120), "cancellation stress");
    let data = pattern(256 * PAGE, 17);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    std::fs::write(&path, &data).unwrap();
    let mut cfg = quiet_config(64 << 10); // 16 frames
    cfg.readahead_max = 32 << 10;
    let cache = PageCache::new(cfg).unwrap();
    let f = Arc::new(
        cache
            .open(FileStore::open(&path, IoMode::PreferDirect).unwrap())
            .unwrap(),
    );
    let mem = Arc::new(cache.open(MemStore::from_vec(data.clone())).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let background: Vec<_> = (0..2)
        .map(|t| {
            let (f, stop, data) = (f.clone(), stop.clone(), data.clone());
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 + t;
                let mut buf = vec![0u8; PAGE];
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let p = (x % 256) as usize;
                    f.read_exact_at((p * PAGE) as u64, &mut buf).unwrap();
                    assert_eq!(&buf[..], &data[p * PAGE..(p + 1) * PAGE]);
                }
            })
        })
        .collect();
    let noop = Waker::noop();
    let mut cx = Context::from_waker(noop);
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut dropped_waiting = 0;
    for _ in 0..3000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let p = (x % 256) as usize;
        let polls = (x >> 20) % 4;
        let file = if x >> 40 & 1 == 0 { &*f } else { &*mem };
        let mut buf = vec![0u8; 2 * PAGE];
        let mut fut = Box::pin(file.read_at_async((p * PAGE) as u64, &mut buf));
        let mut done = false;
        for _ in 0..polls {
            if fut.as_mut().poll(&mut cx).is_ready() {
                done = true;
                break;
            }
            std::thread::yield_now();
        }
        drop(fut);
        dropped_waiting += usize::from(!done && polls > 0);
        if done {
            let n = buf.len().min(data.len() - p * PAGE);
            assert_eq!(&buf[..n], &data[p * PAGE..p * PAGE + n]);
        }
    }
    assert!(
        dropped_waiting > 100,
        "only {dropped_waiting} futures dropped while waiting"
    );
    stop.store(true, Ordering::Relaxed);
    for t in background {
        t.join().unwrap();
    }
    // Every page reads right, blocking and async, and no folio stayed locked.
    let mut all = vec![0u8; data.len()];
    for file in [&*f, &*mem] {
        block_on(file.read_exact_at_async(0, &mut all)).unwrap();
        assert!(all == data);
        file.read_exact_at(0, &mut all).unwrap();
        assert!(all == data);
    }
    cache.check_lru().unwrap();
    drop((f, mem));
    check_no_leak(&cache, "cancellation stress");
}
