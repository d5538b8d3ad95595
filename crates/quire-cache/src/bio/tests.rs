//! The engines against real files, injected faults and a full queue. Each test runs on both
//! engines where io_uring is available (and says "skipped" for io_uring where it is not).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::mem::pool::FramePool;
use crate::store::{Fault, FaultyStore, FileStore, IoMode, MemStore};

/// A request's end for the tests: keeps the store, reports `(tag, done, result)`.
struct TestEnd {
    store: Arc<dyn Store>,
    tag: usize,
    tx: mpsc::Sender<(usize, usize, Result<(), StoreError>)>,
}

impl BioEnd for TestEnd {
    fn store(&self) -> &dyn Store {
        &*self.store
    }
    fn end_io(self: Box<Self>, done: usize, res: Result<(), StoreError>) {
        self.tx.send((self.tag, done, res)).unwrap();
    }
}

type Ended = mpsc::Sender<(usize, usize, Result<(), StoreError>)>;

/// A one-page request `op` between frame `frame` of `pool` and page `page` of `store`,
/// reporting to `tx` under `tag`.
fn page_bio(
    op: BioOp,
    pool: &FramePool,
    frame: usize,
    page: usize,
    store: &Arc<dyn Store>,
    tag: usize,
    tx: &Ended,
) -> Bio {
    Bio {
        op,
        offset: (page * 4096) as u64,
        buf: pool.frame_ptr(frame),
        len: 4096,
        more: Vec::new(),
        end: Box::new(TestEnd {
            store: store.clone(),
            tag,
            tx: tx.clone(),
        }),
    }
}

fn engines(frames: (*mut u8, usize)) -> Vec<Engine> {
    let mut out = vec![Engine::start(IoEngineChoice::Threads, 2, frames).unwrap()];
    let u = Engine::start(IoEngineChoice::IoUring, 2, frames).unwrap();
    if u.info().kind == IoEngineKind::IoUring {
        out.push(u);
    } else {
        eprintln!("skipped io_uring: {}", u.info().reason);
    }
    out
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i / 4096 * 7 + i % 251) as u8).collect()
}

fn temp_file(data: &[u8], mode: IoMode) -> (tempfile::TempDir, Arc<dyn Store>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, data).unwrap();
    let store = FileStore::open(&path, mode).unwrap();
    (dir, Arc::new(store))
}

fn collect(
    rx: &mpsc::Receiver<(usize, usize, Result<(), StoreError>)>,
    n: usize,
) -> Vec<(usize, usize, Result<(), StoreError>)> {
    let mut got: Vec<_> = (0..n)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(20))
                .expect("a request never ended")
        })
        .collect();
    got.sort_by_key(|g| g.0);
    got
}

/// Reads `pages` pages of a file into frames of a pool, one request per page, one batch.
fn read_pages(engine: &Engine, pool: &FramePool, store: &Arc<dyn Store>, pages: usize) {
    let (tx, rx) = mpsc::channel();
    let bios = (0..pages)
        .map(|i| page_bio(BioOp::Read, pool, i, i, store, i, &tx))
        .collect();
    engine.submit(bios);
    for (tag, done, res) in collect(&rx, pages) {
        assert!(res.is_ok(), "page {tag}: {res:?}");
        assert_eq!(done, 4096, "page {tag}");
    }
}

fn frames(pool: &FramePool, pages: usize) -> &[u8] {
    // SAFETY: the test's requests have all ended; nothing else uses the pool's memory.
    unsafe { std::slice::from_raw_parts(pool.base(), pages * 4096) }
}

/// Runs `body` on a file of `pages` patterned pages, buffered and direct, on each engine, with
/// a pool of as many frames, zeroed before each run: `body(engine, pool, store, data, mode)`.
/// The engine is stopped after.
fn on_each_engine(
    pages: usize,
    mut body: impl FnMut(&Engine, &FramePool, &Arc<dyn Store>, &[u8], IoMode),
) {
    let data = pattern(pages * 4096);
    let pool = FramePool::new(pages * 4096).unwrap();
    for mode in [IoMode::Buffered, IoMode::PreferDirect] {
        let (_dir, store) = temp_file(&data, mode);
        for engine in engines((pool.base(), pool.capacity())) {
            // SAFETY: no request is in flight; the pool's memory is ours.
            unsafe { std::ptr::write_bytes(pool.base(), 0, pool.capacity()) };
            body(&engine, &pool, &store, &data, mode);
            engine.stop();
        }
    }
}

#[test]
fn a_batch_of_reads_lands_in_the_frames_buffered_and_direct() {
    let pages = 64;
    on_each_engine(pages, |engine, pool, store, data, mode| {
        read_pages(engine, pool, store, pages);
        assert!(
            frames(pool, pages) == data,
            "{:?} {mode:?}: bytes",
            engine.info()
        );
        let s = engine.stats();
        assert_eq!(s.submitted, pages as u64, "{:?}", engine.info());
        assert_eq!((s.in_flight, s.errors), (0, 0));
        assert!(s.max_in_flight >= 1 && s.batches >= 1);
    });
}

#[test]
fn io_uring_registers_the_frames_and_keeps_many_in_flight() {
    let pages = 256;
    let data = pattern(pages * 4096);
    let pool = FramePool::new(pages * 4096).unwrap();
    let (_dir, store) = temp_file(&data, IoMode::PreferDirect);
    let engine = Engine::start(IoEngineChoice::IoUring, 0, (pool.base(), pool.capacity())).unwrap();
    if engine.info().kind != IoEngineKind::IoUring {
        eprintln!("skipped: {}", engine.info().reason);
        return;
    }
    read_pages(&engine, &pool, &store, pages);
    assert!(frames(&pool, pages) == &data[..]);
    let s = engine.stats();
    // One batch: every request was submitted before the first completion was reaped.
    assert_eq!(s.max_in_flight, pages as u64, "{s:?}");
    // The k-th request of the one batch joined k in flight: mean depth (pages + 1) / 2.
    let n = pages as u64;
    assert_eq!(s.depth_sum, n * (n + 1) / 2, "{s:?}");
    assert!(
        (s.mean_depth() - (n + 1) as f64 / 2.0).abs() < 1e-9,
        "{s:?}"
    );
    assert!(s.batches <= 2, "{s:?}");
    engine.stop();
}

#[test]
fn more_requests_than_the_ring_holds_all_end() {
    // 3 000 requests over a completion queue of 512: submitters wait for room.
    let n = 3000;
    let data = pattern(16 * 4096);
    let pool = FramePool::new(16 * 4096).unwrap();
    let (_dir, store) = temp_file(&data, IoMode::Buffered);
    for engine in engines((pool.base(), pool.capacity())) {
        let (tx, rx) = mpsc::channel();
        let bios = (0..n)
            .map(
                |i| // Many requests read the same page into the same frame: the same bytes.
page_bio(BioOp::Read, &pool, i % 16, i % 16, &store, i, &tx),
            )
            .collect();
        engine.submit(bios);
        let got = collect(&rx, n);
        assert!(got.iter().all(|g| g.1 == 4096 && g.2.is_ok()));
        let s = engine.stats();
        assert_eq!((s.submitted, s.in_flight), (n as u64, 0));
        assert!(s.max_in_flight <= 512, "{s:?}");
        engine.stop();
    }
}

#[test]
fn reads_stop_at_the_end_of_the_store() {
    let data = pattern(10_000);
    let pool = FramePool::new(4 * 4096).unwrap();
    let (_dir, store) = temp_file(&data, IoMode::Buffered);
    for engine in engines((pool.base(), pool.capacity())) {
        let (tx, rx) = mpsc::channel();
        let bio =
            |tag: usize, page: usize| page_bio(BioOp::Read, &pool, page, page, &store, tag, &tx);
        engine.submit(vec![bio(0, 2), bio(1, 3)]);
        let got = collect(&rx, 2);
        assert_eq!((got[0].1, got[0].2.is_ok()), (10_000 - 8192, true));
        assert_eq!(
            (got[1].1, got[1].2.is_ok()),
            (0, true),
            "past the end: nothing"
        );
        engine.stop();
    }
}

#[test]
fn writes_reach_the_file_and_errors_are_reported_once() {
    let pool = FramePool::new(8 * 4096).unwrap();
    let data = pattern(8 * 4096);
    // SAFETY: no request is in flight.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), pool.base(), data.len()) };
    for engine in engines((pool.base(), pool.capacity())) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w");
        let store: Arc<dyn Store> =
            Arc::new(FileStore::create(&path, IoMode::PreferDirect).unwrap());
        let (tx, rx) = mpsc::channel();
        let bios = (0..8)
            .map(|i| page_bio(BioOp::Write, &pool, i, i, &store, i, &tx))
            .collect();
        engine.submit(bios);
        assert!(collect(&rx, 8).iter().all(|g| g.1 == 4096 && g.2.is_ok()));
        assert_eq!(std::fs::read(&path).unwrap(), data, "{:?}", engine.info());

        // A descriptor opened read-only: the write fails with EBADF, reported once.
        let fd: std::os::fd::OwnedFd = std::fs::File::open(&path).unwrap().into();
        let ro: Arc<dyn Store> = Arc::new(FileStore::from_fd(fd, &path).unwrap());
        engine.submit(vec![page_bio(BioOp::Write, &pool, 0, 0, &ro, 0, &tx)]);
        let got = collect(&rx, 1);
        let err = got[0].2.clone().unwrap_err();
        assert_eq!(err.offset(), 0);
        assert_eq!(std::io::Error::from(err).raw_os_error(), Some(libc::EBADF));
        assert!(
            rx.recv_timeout(Duration::from_millis(50)).is_err(),
            "ended once"
        );
        assert_eq!(engine.stats().errors, 1);
        engine.stop();
    }
}

#[test]
fn short_transfers_and_errors_of_stores_without_a_descriptor() {
    // A FaultyStore has no descriptor: the threads run it, under either engine.
    let data = pattern(4 * 4096);
    let pool = FramePool::new(4 * 4096).unwrap();
    for engine in engines((pool.base(), pool.capacity())) {
        let faulty = FaultyStore::new(MemStore::from_vec(data.clone()));
        faulty.add(Fault::short_read(0..4096, 1000).times(3));
        faulty.add(Fault::read_error(8192..12288));
        faulty.add(Fault::short_write(12288..16384, 100));
        let store: Arc<dyn Store> = Arc::new(faulty);
        let (tx, rx) = mpsc::channel();
        let bio = |tag, op, page| page_bio(op, &pool, page, page, &store, tag, &tx);
        engine.submit(vec![
            bio(0, BioOp::Read, 0),
            bio(1, BioOp::Read, 2),
            bio(2, BioOp::Write, 3),
        ]);
        let got = collect(&rx, 3);
        assert_eq!(
            (got[0].1, got[0].2.is_ok()),
            (4096, true),
            "short reads retried"
        );
        assert_eq!(&frames(&pool, 1)[..4096], &data[..4096]);
        assert_eq!(got[1].2.clone().unwrap_err().offset(), 8192);
        assert_eq!(
            (got[2].1, got[2].2.is_ok()),
            (4096, true),
            "short write retried"
        );
        let s = engine.stats();
        assert!(s.resubmitted >= 3, "{s:?}");
        assert_eq!(s.errors, 1);
        engine.stop();
    }
}

#[test]
fn without_threads_a_batch_runs_on_the_submitter() {
    let data = pattern(4096);
    let pool = FramePool::new(4096).unwrap();
    let store: Arc<dyn Store> = Arc::new(MemStore::from_vec(data.clone()));
    let engine = Engine::start(IoEngineChoice::Threads, 0, (pool.base(), pool.capacity())).unwrap();
    let (tx, rx) = mpsc::channel();
    engine.submit(vec![page_bio(BioOp::Read, &pool, 0, 0, &store, 0, &tx)]);
    let got = rx.try_recv().expect("ended before submit returned");
    assert_eq!((got.1, got.2.is_ok()), (4096, true));
    assert_eq!(frames(&pool, 1), &data[..]);
}

#[test]
fn the_environment_names_the_engine() {
    assert_eq!(
        IoEngineChoice::from_env().is_some(),
        std::env::var("QUIRE_IO_ENGINE")
            .is_ok_and(
                |v| ["auto", "io_uring", "io-uring", "uring", "threads"].contains(&v.as_str())
            )
    );
    let e = Engine::start(IoEngineChoice::Threads, 1, (std::ptr::null_mut(), 0)).unwrap();
    assert_eq!(e.info().kind, IoEngineKind::Threads);
    assert_eq!(e.info().kind.to_string(), "threads");
    e.stop();
}

/// A write of several pieces of frame memory (a write-back's merge of adjacent folios): one
/// request, the pieces land one after another in the store, on both engines.
#[test]
fn a_write_of_several_pieces_lands_in_order() {
    let pool = FramePool::new(4 * 4096).unwrap();
    let data = pattern(4 * 4096);
    // SAFETY: no request is in flight.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), pool.base(), data.len()) };
    for engine in engines((pool.base(), pool.capacity())) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v");
        let store: Arc<dyn Store> =
            Arc::new(FileStore::create(&path, IoMode::PreferDirect).unwrap());
        let (tx, rx) = mpsc::channel();
        engine.submit(vec![Bio {
            op: BioOp::Write,
            offset: 4096,
            buf: pool.frame_ptr(3),
            len: 4096,
            more: vec![(pool.frame_ptr(0), 8192), (pool.frame_ptr(2), 4096)],
            end: Box::new(TestEnd {
                store: store.clone(),
                tag: 0,
                tx: tx.clone(),
            }),
        }]);
        let got = collect(&rx, 1);
        assert_eq!(
            (got[0].1, got[0].2.is_ok()),
            (4 * 4096, true),
            "{:?}",
            engine.info()
        );
        let back = std::fs::read(&path).unwrap();
        let mut want = vec![0u8; 4096];
        want.extend_from_slice(&data[3 * 4096..]);
        want.extend_from_slice(&data[..2 * 4096]);
        want.extend_from_slice(&data[2 * 4096..3 * 4096]);
        assert!(back == want, "{:?}: pieces in order", engine.info());
        assert_eq!(engine.stats().submitted, 1);
        engine.stop();
    }
}

/// The reads of pages `pages` (store page i into frame i), one request each, reporting under
/// their page number.
fn page_reads(pool: &FramePool, store: &Arc<dyn Store>, pages: &[usize], tx: &Ended) -> Vec<Bio> {
    pages
        .iter()
        .map(|&i| page_bio(BioOp::Read, pool, i, i, store, i, tx))
        .collect()
}

/// Each request's pieces as (store offset, length) runs: what `merge_reads` made of a batch.
fn shape(bios: &[Bio]) -> Vec<(u64, usize, BioOp)> {
    bios.iter().map(|b| (b.offset, b.total(), b.op)).collect()
}

#[test]
fn merging_joins_adjacent_reads_of_one_store_only() {
    let pool = FramePool::new(1024 * 4096).unwrap();
    let a: Arc<dyn Store> = Arc::new(MemStore::from_vec(pattern(600 * 4096)));
    let b: Arc<dyn Store> = Arc::new(MemStore::from_vec(pattern(600 * 4096)));
    let (tx, _rx) = mpsc::channel();
    // 0 1 2 | 4 5 (a gap) | 6 of another store | a write at 7 | 8 9
    let mut bios = page_reads(&pool, &a, &[0, 1, 2, 4, 5], &tx);
    bios.extend(page_reads(&pool, &b, &[6], &tx));
    bios.push(page_bio(BioOp::Write, &pool, 7, 7, &a, 7, &tx));
    bios.extend(page_reads(&pool, &a, &[8, 9], &tx));
    let merged = merge_reads(bios);
    assert_eq!(
        shape(&merged),
        [
            (0, 3 * 4096, BioOp::Read),
            (4 * 4096, 2 * 4096, BioOp::Read),
            (6 * 4096, 4096, BioOp::Read),
            (7 * 4096, 4096, BioOp::Write),
            (8 * 4096, 2 * 4096, BioOp::Read),
        ]
    );
    // A run longer than a request may carry is cut at MAX_MERGED_PIECES pieces...
    let all: Vec<usize> = (0..MAX_MERGED_PIECES + 10).collect();
    let merged = merge_reads(page_reads(&pool, &a, &all, &tx));
    assert_eq!(
        shape(&merged),
        [
            (0, MAX_MERGED_PIECES * 4096, BioOp::Read),
            ((MAX_MERGED_PIECES * 4096) as u64, 10 * 4096, BioOp::Read),
        ]
    );
    // ... and at MAX_MERGED_BYTES: reads of 64 pages each (as large folios would be).
    let big = |first: usize| Bio {
        op: BioOp::Read,
        offset: (first * 4096) as u64,
        buf: pool.frame_ptr(first),
        len: 64 * 4096,
        more: Vec::new(),
        end: Box::new(TestEnd {
            store: a.clone(),
            tag: first,
            tx: tx.clone(),
        }),
    };
    let per = MAX_MERGED_BYTES / (64 * 4096);
    let merged = merge_reads((0..per + 1).map(|i| big(64 * i)).collect());
    assert_eq!(
        shape(&merged),
        [
            (0, MAX_MERGED_BYTES, BioOp::Read),
            (MAX_MERGED_BYTES as u64, 64 * 4096, BioOp::Read),
        ]
    );
}

#[test]
fn a_merged_read_fills_every_piece_and_ends_each() {
    let pages = 48;
    on_each_engine(pages, |engine, pool, store, data, mode| {
        let (tx, rx) = mpsc::channel();
        let all: Vec<usize> = (0..pages).collect();
        let bios = merge_reads(page_reads(pool, store, &all, &tx));
        assert_eq!(bios.len(), 1);
        let before = engine.stats().submitted;
        engine.submit(bios);
        for (tag, done, res) in collect(&rx, pages) {
            assert!(res.is_ok(), "page {tag}: {res:?}");
            assert_eq!(done, 4096, "page {tag}");
        }
        assert!(frames(pool, pages) == data, "{:?} {mode:?}", engine.info());
        assert_eq!(engine.stats().submitted - before, 1, "one request");
    });
}

#[test]
fn a_merged_read_that_stops_early_ends_the_rest_with_what_stopped_it() {
    let pages = 8;
    let pool = FramePool::new(pages * 4096).unwrap();
    // The store ends 1 000 bytes into page 5: pages 0..5 whole, page 5 short, 6 and 7 empty,
    // all without an error (the end of a file).
    let short: Arc<dyn Store> = Arc::new(MemStore::from_vec(pattern(5 * 4096 + 1000)));
    // An error at page 3: pages 0..3 whole, 3 and after with the error.
    let faulty = FaultyStore::new(MemStore::from_vec(pattern(pages * 4096)));
    faulty.add(Fault::read_error(3 * 4096..4 * 4096).persistent());
    let faulty: Arc<dyn Store> = Arc::new(faulty);
    let engine = Engine::start(IoEngineChoice::Threads, 2, (pool.base(), pool.capacity())).unwrap();
    let all: Vec<usize> = (0..pages).collect();
    for (store, expect) in [
        (
            &short,
            [4096, 4096, 4096, 4096, 4096, 1000, 0, 0].map(|n| (n, true)),
        ),
        (
            &faulty,
            [4096, 4096, 4096, 0, 0, 0, 0, 0].map(|n| (n, n > 0)),
        ),
    ] {
        let (tx, rx) = mpsc::channel();
        engine.submit(merge_reads(page_reads(&pool, store, &all, &tx)));
        let got: Vec<(usize, bool)> = collect(&rx, pages)
            .into_iter()
            .map(|(_, done, res)| (done, res.is_ok()))
            .collect();
        assert_eq!(got, expect);
    }
    engine.stop();
}
