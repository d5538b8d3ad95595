//! `fsync` against a flusher that never rests: every byte written before an `fsync` must be in
//! the store's synced image when it returns, also when the flusher took the folio for write-back
//! just as `fsync` looked for dirty folios (a write-back `fsync` neither writes nor waits for is
//! data a crash loses). And `sync_all` (`fsync` where `fsync` here is `fdatasync`): one store
//! call, its failure heard by every handle.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quire::filemap::{CacheConfig, FilemapError, PageCache};
use quire::store::{Fault, FaultyStore, FileStore, IoMode, MemStore, Result as StoreResult, Store};

use common::{Rng, StopOnDrop, Watchdog, PAGE};

const PAGES: usize = 8;

#[test]
fn fsync_returns_only_after_every_earlier_write_is_synced() {
    let _w = Watchdog::arm(Duration::from_secs(60), "fsync race");
    let mut cfg = CacheConfig::new(1 << 20);
    // The flusher writes whatever is dirty every millisecond.
    cfg.dirty_background = 0;
    cfg.dirty_expire = Duration::ZERO;
    cfg.flush_interval = Duration::from_millis(1);
    let cache = PageCache::new(cfg).unwrap();
    let store = Arc::new(MemStore::from_vec(vec![0; PAGES * PAGE]));
    let f = cache.open(store.clone()).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // A second writer keeps the flusher busy on other pages of the file.
        let (g, stop) = (f.reopen(), &stop);
        s.spawn(move || {
            let mut rng = Rng(3);
            while !stop.load(Ordering::Relaxed) {
                let page = PAGES / 2 + rng.below(PAGES / 2);
                g.write_at((page * PAGE) as u64, &[rng.below(256) as u8; 64])
                    .unwrap();
            }
        });
        // Spinning threads, so that the flusher is sometimes preempted in the middle of taking a
        // folio for write-back (these machines have two cores).
        for _ in 0..2 {
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let _stop = StopOnDrop(stop);
        let mut rng = Rng(5);
        let start = Instant::now();
        let mut rounds = 0u32;
        while rounds < 2_000 || start.elapsed() < Duration::from_secs(3) {
            rounds += 1;
            let page = rng.below(PAGES / 2);
            let byte = (rounds % 251) as u8 + 1;
            f.write_at((page * PAGE + 100) as u64, &[byte]).unwrap();
            // Give the flusher a moment to pick the folio up, sometimes.
            if rounds.is_multiple_of(3) {
                std::thread::sleep(Duration::from_micros(rng.below(1500) as u64));
            }
            f.fsync().unwrap();
            let synced = store.synced_contents();
            assert_eq!(
                synced[page * PAGE + 100],
                byte,
                "round {rounds}: the write to page {page} is not in the synced image after fsync"
            );
            if start.elapsed() > Duration::from_secs(20) {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
}

/// A store that counts its two syncs apart and records which threads wrote to it.
#[derive(Default)]
struct Recording {
    inner: MemStore,
    syncs: AtomicU64,
    syncs_all: AtomicU64,
    writers: std::sync::Mutex<Vec<std::thread::ThreadId>>,
}

impl Recording {
    fn new(len: usize) -> Arc<Recording> {
        Arc::new(Recording {
            inner: MemStore::from_vec(vec![0; len]),
            ..Default::default()
        })
    }
}

impl Store for Recording {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> StoreResult<usize> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> StoreResult<usize> {
        self.writers
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> StoreResult<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync()
    }
    fn sync_all(&self) -> StoreResult<()> {
        self.syncs_all.fetch_add(1, Ordering::Relaxed);
        self.inner.sync()
    }
    fn len(&self) -> StoreResult<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> StoreResult<()> {
        self.inner.set_len(len)
    }
}

#[test]
fn sync_all_syncs_the_store_once_with_its_metadata_and_fsync_only_its_data() {
    let cache = PageCache::new(CacheConfig::new(1 << 20)).unwrap();
    let store = Recording::new(PAGES * PAGE);
    let f = cache.open(store.clone()).unwrap();
    let counts = || {
        (
            store.syncs.load(Ordering::Relaxed),
            store.syncs_all.load(Ordering::Relaxed),
        )
    };

    f.write_at(PAGE as u64 + 7, b"all").unwrap();
    f.sync_all().unwrap();
    // One store call: the data and the other metadata together, never a data sync before it.
    assert_eq!(counts(), (0, 1));
    assert_eq!(&store.inner.synced_contents()[PAGE + 7..PAGE + 10], b"all");

    f.write_at(3 * PAGE as u64, b"data").unwrap();
    f.fsync().unwrap();
    assert_eq!(counts(), (1, 1));
    assert_eq!(
        &store.inner.synced_contents()[3 * PAGE..3 * PAGE + 4],
        b"data"
    );
}

#[test]
fn a_failed_sync_all_is_reported_to_every_handle_once() {
    let cache = PageCache::new(CacheConfig::new(1 << 20)).unwrap();
    let store = Arc::new(FaultyStore::new(MemStore::from_vec(vec![0; PAGES * PAGE])));
    let f = cache.open(store.clone()).unwrap();
    let g = f.reopen();
    f.write_at(0, b"lost?").unwrap();
    store.add(Fault::sync_error());
    assert!(
        f.sync_all().is_err(),
        "the store's failed fsync is this call's error"
    );
    // The other handle hears of it at its next sync, once; the fault fired once.
    assert!(matches!(
        g.fsync(),
        Err(FilemapError::Writeback { errno: 5 })
    ));
    g.fsync().unwrap();
    f.sync_all().unwrap();
}

#[test]
fn an_fsync_whose_write_back_is_one_request_writes_on_its_own_thread() {
    let cache = PageCache::new(CacheConfig::new(1 << 20)).unwrap();
    let store = Recording::new(PAGES * PAGE);
    let f = cache.open(store.clone()).unwrap();
    let me = std::thread::current().id();
    let writers = || std::mem::take(&mut *store.writers.lock().unwrap());

    // Two adjacent dirty pages (a log's append): one request, run by the thread that waits.
    f.write_at(PAGE as u64 - 3, &[7; PAGE]).unwrap();
    f.fsync().unwrap();
    // (A request of several pages is a `write_at` per page for a store without a descriptor.)
    let w = writers();
    assert!(!w.is_empty() && w.iter().all(|t| *t == me), "{w:?}");
    assert_eq!(
        &store.inner.synced_contents()[PAGE - 3..2 * PAGE - 3],
        &[7; PAGE]
    );

    // Pages apart: several requests, which the engine's threads run side by side.
    for page in [0, 2, 4, 6] {
        f.write_at((page * PAGE) as u64, &[9; 16]).unwrap();
    }
    f.fsync().unwrap();
    let w = writers();
    assert_eq!(w.len(), 4);
    assert!(w.iter().all(|t| *t != me), "{w:?}");
    let synced = store.inner.synced_contents();
    for page in [0, 2, 4, 6] {
        assert_eq!(&synced[page * PAGE..page * PAGE + 16], &[9; 16]);
    }
}

#[test]
fn an_fsync_of_adjacent_pages_on_a_file_store_writes_them_whole() {
    // Run on the calling thread with the store's descriptor: one vectored write of the
    // merged pages, at whatever offset they start, direct I/O where the file system has it.
    let dir = tempfile::tempdir().unwrap();
    for mode in [IoMode::Buffered, IoMode::PreferDirect] {
        let path = dir.path().join(format!("{mode:?}"));
        let cache = PageCache::new(CacheConfig::new(1 << 20)).unwrap();
        let f = cache
            .open(Arc::new(FileStore::create(&path, mode).unwrap()))
            .unwrap();
        let mut want = vec![0u8; 3 * PAGE];
        f.write_at(0, &want).unwrap();
        f.fsync().unwrap();
        // Sixteen pages from the middle of one, past the file's end: one merged request.
        let mut rng = Rng(11);
        let data: Vec<u8> = (0..16 * PAGE).map(|_| rng.below(256) as u8).collect();
        let at = 2 * PAGE + 100;
        f.write_at(at as u64, &data).unwrap();
        f.fsync().unwrap();
        want.resize(at + data.len(), 0);
        want[at..].copy_from_slice(&data);
        assert_eq!(std::fs::read(&path).unwrap(), want, "{mode:?}");
        // And again over what is there, pages in the middle only.
        f.write_at(5 * PAGE as u64, &[0xAB; 3 * PAGE]).unwrap();
        f.fsync().unwrap();
        want[5 * PAGE..8 * PAGE].fill(0xAB);
        assert_eq!(std::fs::read(&path).unwrap(), want, "{mode:?}");
    }
}
