//! Write, fsync, drop the cache, reopen the store with a new cache, verify every byte: with an
//! in-memory store (whose synced image is what a crash would leave) and with a real file, opened
//! with `O_DIRECT` where the file system allows it and buffered as well.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use quire::filemap::{CacheConfig, CachedFile, PageCache};
use quire::store::{FileStore, IoMode, MemStore, Store, StoreError};

use common::{check_no_leak, same, Rng, TempDir, PAGE};

fn read_all(f: &CachedFile) -> Vec<u8> {
    let mut buf = vec![0u8; f.len() as usize];
    let mut pos = 0;
    // In 100 KiB pieces, so that readahead follows a stream.
    while pos < buf.len() {
        let end = (pos + (100 << 10)).min(buf.len());
        assert_eq!(
            f.read_at(pos as u64, &mut buf[pos..end]).unwrap(),
            end - pos
        );
        pos = end;
    }
    buf
}

/// A small cache: the file below is three times its size, so writing it evicts and writes back.
fn small_cache() -> PageCache {
    let mut cfg = CacheConfig::new(1 << 20);
    cfg.readahead_max = 128 << 10;
    PageCache::new(cfg).unwrap()
}

/// Writes a mix of large aligned, small unaligned and extending writes, a truncation and a
/// re-extension; returns the model of the file.
fn write_mix(f: &CachedFile, rng: &mut Rng, start: Vec<u8>) -> Vec<u8> {
    let mut model = start;
    let target = 3 << 20;
    // Sequential large writes to grow the file (extending it past the store's end).
    while model.len() < target {
        let len = (64 << 10) + rng.below(64 << 10);
        let w = rng.bytes(len);
        let off = model.len();
        assert_eq!(f.write_at(off as u64, &w).unwrap(), len);
        model.extend_from_slice(&w);
    }
    // Random overwrites, some inside one page, some across many.
    for i in 0..200 {
        let len = if i % 10 == 0 {
            1 + rng.below(100 << 10)
        } else {
            1 + rng.below(3000)
        };
        let off = rng.below(model.len() - len);
        let w = rng.bytes(len);
        f.write_at(off as u64, &w).unwrap();
        model[off..off + len].copy_from_slice(&w);
    }
    // Cut in the middle of a page, then grow with a hole and an unaligned tail.
    let cut = model.len() - 200_000 - 1234;
    f.set_len(cut as u64).unwrap();
    model.truncate(cut);
    let w = rng.bytes(5000);
    let off = cut + 70_000;
    f.write_at(off as u64, &w).unwrap();
    model.resize(off, 0);
    model.extend_from_slice(&w);
    assert_eq!(f.len() as usize, model.len());
    assert_ne!(model.len() % PAGE, 0, "the file ends inside a page");
    model
}

#[test]
fn write_fsync_and_reopen_with_a_mem_store() {
    for align in [1usize, 4096] {
        let mut rng = Rng(0x1234_5678 + align as u64);
        let initial = rng.bytes(300_000);
        let store = Arc::new(MemStore::from_vec(initial.clone()).with_alignment(align));
        let cache = small_cache();
        let f = cache.open(store.clone()).unwrap();
        let model = write_mix(&f, &mut rng, initial);
        same(&read_all(&f), &model, "before fsync");
        f.fsync().unwrap();
        same(
            &store.synced_contents(),
            &model,
            "the synced image after fsync",
        );
        assert_eq!(cache.stats_exact().dirty_frames, 0);
        drop(f);
        check_no_leak(&cache, "a mem store");
        drop(cache);

        let cache = small_cache();
        let f = cache.open(store.clone()).unwrap();
        assert_eq!(f.len() as usize, model.len());
        same(&read_all(&f), &model, "through a new cache");
        // Every byte, page by page in random order too (no readahead stream).
        let pages = model.len().div_ceil(PAGE);
        let mut order: Vec<usize> = (0..pages).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let mut buf = vec![0u8; PAGE];
        for p in order {
            let n = f.read_at((p * PAGE) as u64, &mut buf).unwrap();
            let want = &model[p * PAGE..(p * PAGE + PAGE).min(model.len())];
            assert_eq!(n, want.len());
            same(&buf[..n], want, "a page read at random");
        }
    }
}

#[test]
fn dropping_the_last_handle_writes_back() {
    let mut rng = Rng(99);
    let store = Arc::new(MemStore::new());
    let cache = small_cache();
    let f = cache.open(store.clone()).unwrap();
    let model = write_mix(&f, &mut rng, Vec::new());
    let g = f.reopen();
    drop(f);
    // (Whether data is still dirty here depends on the flusher, so ask for the file itself.)
    assert_eq!(
        cache.stats_exact().files,
        1,
        "another handle keeps the file open"
    );
    drop(g);
    check_no_leak(&cache, "the last handle dropped");
    same(
        &store.contents(),
        &model,
        "written back when the file closed",
    );
    let cache = small_cache();
    let f = cache.open(store.clone()).unwrap();
    same(&read_all(&f), &model, "through a new cache");
}

/// Opens `path` in `mode`, falling back to buffered where `O_DIRECT` is refused; returns the
/// store and whether it is direct.
fn open_store(path: &std::path::Path, mode: IoMode, create: bool) -> FileStore {
    let open = |mode| {
        if create {
            FileStore::create(path, mode)
        } else {
            FileStore::open(path, mode)
        }
    };
    match open(mode) {
        Ok(s) => s,
        Err(StoreError::DirectUnsupported { .. }) => {
            eprintln!("O_DIRECT refused for {}; buffered instead", path.display());
            open(IoMode::PreferDirect).unwrap()
        }
        Err(e) => panic!("opening {}: {e}", path.display()),
    }
}

#[test]
fn write_fsync_and_reopen_with_a_real_file() {
    let dir = TempDir::new("persist");
    for mode in [IoMode::Direct, IoMode::Buffered] {
        let path = dir.0.join(format!("{mode:?}.dat"));
        let mut rng = Rng(0xfeed + mode as u64);
        let initial = rng.bytes(123_457);
        std::fs::write(&path, &initial).unwrap();
        let store = open_store(&path, mode, false);
        if mode == IoMode::Direct {
            assert_eq!(store.alignment(), if store.is_direct() { 4096 } else { 1 });
        }
        let direct = store.is_direct();
        eprintln!("{mode:?}: O_DIRECT {direct}");
        let cache = small_cache();
        let f = cache.open(store).unwrap();
        assert_eq!(f.len(), initial.len() as u64);
        let model = write_mix(&f, &mut rng, initial);
        f.fsync().unwrap();
        drop(f);
        check_no_leak(&cache, "written to a real file");
        drop(cache);
        // What the kernel has, read without quire: every byte, and the exact length.
        let on_disk = std::fs::read(&path).unwrap();
        same(
            &on_disk,
            &model,
            &format!("the file on disk ({mode:?}, direct {direct})"),
        );

        let cache = small_cache();
        let f = cache.open(open_store(&path, mode, false)).unwrap();
        same(
            &read_all(&f),
            &model,
            &format!("through a new cache ({mode:?})"),
        );
        // One more round on the reopened file: overwrite the tail, fsync, compare again.
        let tail = rng.bytes(10_000);
        let off = model.len() - 3000;
        f.write_at(off as u64, &tail).unwrap();
        let mut model = model;
        model.truncate(off);
        model.extend_from_slice(&tail);
        f.fsync().unwrap();
        same(
            &std::fs::read(&path).unwrap(),
            &model,
            "after the second fsync",
        );
        drop(f);
        check_no_leak(&cache, "read back from a real file");
    }
    // A file created by quire itself.
    let path = dir.0.join("created.dat");
    let cache = small_cache();
    let f = cache.open(open_store(&path, IoMode::Direct, true)).unwrap();
    assert!(f.is_empty());
    let mut rng = Rng(7);
    let model = write_mix(&f, &mut rng, Vec::new());
    f.close().unwrap();
    same(&std::fs::read(&path).unwrap(), &model, "a created file");
    check_no_leak(&cache, "a created file");
}

/// An aligned in-memory store (like an `O_DIRECT` file) on which cutting the length is slow;
/// it counts the cuts that started, so a test can act while one is in progress.
struct SlowCut {
    inner: MemStore,
    cuts_started: std::sync::atomic::AtomicU64,
}

impl Store for SlowCut {
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
        if len < self.inner.len()? {
            self.cuts_started.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(3));
        }
        self.inner.set_len(len)
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
}

#[test]
fn cutting_the_store_back_after_a_whole_last_page_keeps_a_concurrent_extension() {
    // With an aligned store the partial last page is written whole and the store is then cut
    // back to the file's length. Meanwhile another thread extends the file — with a write that
    // it syncs, or with set_len — and the cut must not undo that.
    let store = Arc::new(SlowCut {
        inner: MemStore::new().with_alignment(4096),
        cuts_started: std::sync::atomic::AtomicU64::new(0),
    });
    let mut cfg = CacheConfig::new(4 << 20);
    cfg.dirty_background = 4 << 20;
    cfg.dirty_limit = 4 << 20;
    cfg.dirty_expire = std::time::Duration::from_secs(3600);
    cfg.flush_interval = std::time::Duration::from_secs(3600);
    let cache = PageCache::new(cfg).unwrap();
    let f = cache.open(store.clone()).unwrap();
    let mut model = vec![7u8; 10_000];
    f.write_at(0, &model).unwrap();
    f.fsync().unwrap();
    for round in 0..12u8 {
        let size = model.len();
        let tail = [round; 10];
        f.write_at(size as u64 - 10, &tail).unwrap();
        model[size - 10..].copy_from_slice(&tail);
        let ext = [round ^ 0xff; 100];
        let at = size + 5000;
        let grow = round % 2 == 1;
        let before = store.cuts_started.load(Ordering::SeqCst);
        std::thread::scope(|s| {
            s.spawn(|| f.fsync().unwrap());
            s.spawn(|| {
                let g = f.reopen();
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while store.cuts_started.load(Ordering::SeqCst) == before {
                    assert!(std::time::Instant::now() < deadline, "no cut started");
                    std::thread::yield_now();
                }
                // The fsync's cut is in progress: extend the file.
                if grow {
                    g.set_len(at as u64 + 100).unwrap();
                } else {
                    g.write_at(at as u64, &ext).unwrap();
                    g.sync_range(at as u64, ext.len() as u64).unwrap();
                }
            });
        });
        model.resize(at, 0);
        if grow {
            model.resize(at + 100, 0);
        } else {
            model.extend_from_slice(&ext);
        }
        f.fsync().unwrap();
        same(
            &store.inner.synced_contents(),
            &model,
            &format!("round {round}: the store after both (grow: {grow})"),
        );
    }
    drop(f);
    let cache = PageCache::new(CacheConfig::new(1 << 20)).unwrap();
    let f = cache.open(store.clone()).unwrap();
    same(&read_all(&f), &model, "through a new cache");
}
