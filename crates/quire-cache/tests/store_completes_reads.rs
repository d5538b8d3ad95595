//! Stores that complete reads themselves (`Store::completes_reads`, `Store::submit_reads`):
//! the engine hands them a batch's reads, they finish them later on threads of their own (as
//! an object store's runtime does), and a request they drop ends with an error that unlocks
//! its folio — a later read still gets the right bytes.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quire::filemap::{block_on, PageCache};
use quire::store::{MemStore, ReadRequest, Store};

use common::{check_no_leak, pattern, quiet_config, Watchdog, PAGE};

/// How a [`Deferred`] store treats the reads handed to it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Completes them on a thread of its own, a few milliseconds later, last first.
    Later,
    /// Drops them uncompleted.
    Drop,
}

/// A memory store that completes reads handed to it on a thread of its own.
struct Deferred {
    inner: Arc<MemStore>,
    mode: Mode,
    /// Requests handed over, and calls of `submit_reads`.
    handed: AtomicUsize,
    calls: AtomicUsize,
    /// Reads made through `read_at`.
    sync_reads: AtomicUsize,
    /// The largest batch handed over at once.
    largest: Mutex<usize>,
}

impl Deferred {
    fn new(data: Vec<u8>, mode: Mode) -> Arc<Deferred> {
        Arc::new(Deferred {
            inner: Arc::new(MemStore::from_vec(data)),
            mode,
            handed: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            sync_reads: AtomicUsize::new(0),
            largest: Mutex::new(0),
        })
    }
}

impl Store for Deferred {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> quire::store::Result<usize> {
        self.sync_reads.fetch_add(1, Ordering::Relaxed);
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
    fn completes_reads(&self) -> bool {
        true
    }
    fn submit_reads(&self, reqs: Vec<ReadRequest>) {
        self.handed.fetch_add(reqs.len(), Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        {
            let mut l = self.largest.lock().unwrap();
            *l = (*l).max(reqs.len());
        }
        // Offsets come in the order submitted: ascending within a batch.
        assert!(reqs.windows(2).all(|w| w[0].offset() < w[1].offset()));
        match self.mode {
            Mode::Drop => drop(reqs),
            Mode::Later => {
                let inner = self.inner.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(2));
                    for mut r in reqs.into_iter().rev() {
                        let off = r.offset();
                        let res = inner.read_full_at(off, r.buf());
                        r.complete(res);
                    }
                });
            }
        }
    }
}

fn cache(capacity: usize) -> PageCache {
    let mut cfg = quiet_config(capacity);
    cfg.max_folio_order = 0;
    PageCache::new(cfg).unwrap()
}

/// A sequential reader's readahead windows go to the store in batches and are completed on
/// the store's threads; every byte read is right and no frame is left behind.
#[test]
fn readahead_windows_are_completed_by_the_store() {
    let _dog = Watchdog::arm(Duration::from_secs(60), "deferred readahead");
    let data = pattern(256 * PAGE, 11);
    let store = Deferred::new(data.clone(), Mode::Later);
    let cache = cache(4 << 20);
    let f = cache.open(store.clone()).unwrap();
    let mut buf = vec![0u8; 3 * PAGE + 17];
    let mut off = 0;
    while off < data.len() {
        let n = f.read_at(off as u64, &mut buf).unwrap();
        assert!(n > 0);
        assert_eq!(&buf[..n], &data[off..off + n], "at {off}");
        off += n;
    }
    let handed = store.handed.load(Ordering::Relaxed);
    assert!(handed > 0, "no read was handed to the store");
    assert!(
        *store.largest.lock().unwrap() > 1,
        "readahead never handed a window of several folios"
    );
    assert_eq!(
        handed + store.sync_reads.load(Ordering::Relaxed),
        256,
        "every page is read once, by one path or the other"
    );
    let io = cache.stats_exact().io;
    assert!(io.submitted >= handed as u64, "{io:?}");
    drop(f);
    check_no_leak(&cache, "after the reads");
}

/// The async API's misses go to the store too, and are awaited.
#[test]
fn async_misses_are_completed_by_the_store() {
    let _dog = Watchdog::arm(Duration::from_secs(60), "deferred async");
    let data = pattern(64 * PAGE, 3);
    let store = Deferred::new(data.clone(), Mode::Later);
    let mut cfg = quiet_config(4 << 20);
    cfg.readahead_max = 0;
    cfg.max_folio_order = 0;
    let cache = PageCache::new(cfg).unwrap();
    let f = cache.open(store.clone()).unwrap();
    for page in (0..64).rev() {
        let mut buf = vec![0u8; PAGE];
        block_on(f.read_exact_at_async((page * PAGE) as u64, &mut buf)).unwrap();
        assert_eq!(buf, &data[page * PAGE..(page + 1) * PAGE]);
    }
    assert_eq!(store.sync_reads.load(Ordering::Relaxed), 0);
    assert_eq!(store.handed.load(Ordering::Relaxed), 64);
    let io = cache.stats_exact().io;
    assert_eq!(io.errors, 0, "{io:?}");
    drop(f);
    check_no_leak(&cache, "after the reads");
}

/// A store that drops what it was handed: the requests end with an error, their folios are
/// unlocked, and reading them again (through `read_at`) gets the right bytes.
#[test]
fn dropped_requests_unlock_their_folios() {
    let _dog = Watchdog::arm(Duration::from_secs(60), "dropped requests");
    let data = pattern(128 * PAGE, 7);
    let store = Deferred::new(data.clone(), Mode::Drop);
    let cache = cache(4 << 20);
    let f = cache.open(store.clone()).unwrap();
    let mut buf = vec![0u8; PAGE];
    for page in 0..128 {
        // A failed readahead page is read again by the reader itself; the async read of a page
        // whose request was dropped reports the error, and a blocking read then succeeds.
        match f.read_at((page * PAGE) as u64, &mut buf) {
            Ok(n) => assert_eq!(&buf[..n], &data[page * PAGE..page * PAGE + n]),
            Err(e) => panic!("blocking read of page {page}: {e}"),
        }
    }
    assert!(store.handed.load(Ordering::Relaxed) > 0);
    assert!(cache.stats_exact().io.errors > 0);
    let mut buf = vec![0u8; PAGE];
    f.invalidate().unwrap();
    let r = block_on(f.read_exact_at_async(5 * PAGE as u64, &mut buf));
    let e = r.expect_err("a dropped request is an error to its waiter");
    assert_eq!(
        std::io::Error::from(e).raw_os_error(),
        Some(libc::ECANCELED)
    );
    f.read_exact_at(5 * PAGE as u64, &mut buf)
        .expect("a failed read is not remembered: the next one goes to the store");
    assert_eq!(buf, &data[5 * PAGE..6 * PAGE]);
    drop(f);
    check_no_leak(&cache, "after the reads");
}

/// A memory store that keeps what reclaim offers it (`keeps_evicted`): the kernel's cleancache.
struct Keeping {
    inner: MemStore,
    kept: Mutex<Vec<(u64, Vec<u8>)>>,
}

impl Store for Keeping {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> quire::store::Result<usize> {
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
    fn keeps_evicted(&self) -> bool {
        true
    }
    fn evicted_clean(&self, offset: u64, data: &[u8]) {
        self.kept.lock().unwrap().push((offset, data.to_vec()));
    }
}

/// Reclaim offers every clean folio it evicts, with the bytes the store has there; dirty data
/// is written back first and offered only once clean.
#[test]
fn reclaim_offers_evicted_clean_folios() {
    let _dog = Watchdog::arm(Duration::from_secs(60), "cleancache");
    let data = pattern(1024 * PAGE, 13);
    let store = Arc::new(Keeping {
        inner: MemStore::from_vec(data.clone()),
        kept: Mutex::new(Vec::new()),
    });
    let cache = PageCache::new(quiet_config(1 << 20)).unwrap();
    let f = cache.open(store.clone()).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    for i in 0..(data.len() / buf.len()) {
        f.read_exact_at((i * buf.len()) as u64, &mut buf).unwrap();
    }
    f.write_all_at(0, &[0xee; PAGE]).unwrap();
    for i in 0..(data.len() / buf.len()) {
        f.read_exact_at((i * buf.len()) as u64, &mut buf).unwrap();
    }
    let kept = store.kept.lock().unwrap();
    let bytes: usize = kept.iter().map(|(_, d)| d.len()).sum();
    assert!(
        bytes >= data.len() - (1 << 20),
        "a file 4x the budget read twice: {bytes} bytes offered"
    );
    let mut now = data.clone();
    now[..PAGE].fill(0xee);
    for (off, d) in kept.iter() {
        let o = *off as usize;
        // Page 0 was rewritten in between: either version, as it was when evicted.
        if o == 0 {
            assert!(d[..PAGE] == data[..PAGE] || d[..PAGE] == now[..PAGE]);
            assert_eq!(&d[PAGE..], &data[PAGE..d.len()]);
        } else {
            assert_eq!(&d[..], &data[o..o + d.len()], "offered bytes at {o}");
        }
    }
}
