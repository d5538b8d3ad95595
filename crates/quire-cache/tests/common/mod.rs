//! Helpers shared by the `filemap_*` integration tests: byte patterns, a deterministic
//! generator, byte-string comparison, whole-file reads, a quiet cache configuration, the
//! no-leak check, a faulty-store constructor and temporary directories (also used by the
//! `dcache_*` tests).
//!
//! Each test file includes this module with `mod common;`; not every file uses every helper.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quire::filemap::{CacheConfig, CachedFile, PageCache};
use quire::store::{FaultyStore, MemStore, Result as StoreResult, Store};

/// The size of a page (a base folio) in bytes.
pub const PAGE: usize = 4096;

/// `len` bytes of `i * mul + seed`, xor'ed with the page number (`i >> 12`) so that no two
/// pages of one pattern are alike. `mul` should be odd.
pub fn pattern_with(len: usize, seed: u8, mul: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(mul).wrapping_add(seed) ^ ((i >> 12) as u8))
        .collect()
}

/// [`pattern_with`] with the multiplier 31.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    pattern_with(len, seed, 31)
}

/// xorshift64*: a small deterministic generator for offsets, lengths and bytes.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % (n.max(1) as u64)) as usize
    }

    /// A number in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo)
    }

    /// `n` pseudo-random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let seed = self.next();
        (0..n)
            .map(|i| (seed.rotate_left((i % 64) as u32) as u8) ^ (i as u8))
            .collect()
    }
}

/// Asserts that two byte strings are equal, reporting the first difference (not the bytes).
#[track_caller]
pub fn same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: lengths {} and {}, first difference at {at:?}{}",
            got.len(),
            want.len(),
            at.map(|i| format!(" ({} != {})", got[i], want[i]))
                .unwrap_or_default()
        );
    }
}

/// Reads the whole file in one call.
#[track_caller]
pub fn read_all(f: &CachedFile) -> Vec<u8> {
    let mut buf = vec![0u8; f.len() as usize];
    assert_eq!(f.read_at(0, &mut buf).unwrap(), buf.len());
    buf
}

/// A cache whose flusher never runs on its own during a test (huge thresholds and expiry), so
/// that write-back happens only when asked for or when reclaim needs the memory.
pub fn quiet_config(capacity: usize) -> CacheConfig {
    let mut cfg = CacheConfig::new(capacity);
    cfg.dirty_background = capacity;
    cfg.dirty_limit = capacity;
    cfg.dirty_expire = Duration::from_secs(3600);
    cfg.flush_interval = Duration::from_secs(3600);
    cfg
}

/// Checks that a cache whose files are all gone holds nothing: the counts (cached and dirty
/// frames, open files) and the free frames, each within a bounded wait — a background thread (a
/// readahead job or an I/O completion holding the file's mapping, whose last reference closes
/// it; background reclaim with folios isolated; the flusher) may hold a reference for a moment
/// after the handle was dropped; then that the allocator agrees that no frame is handed out.
/// Every space, anonymous frame, swap-cache folio and swap slot is given back once the spaces
/// of `anon` are gone, and then nothing of `cache` leaks ([`check_no_leak`]). Background
/// reclaim, woken by the pressure a test made, may be in a round still, holding folios it
/// isolated from the swap cache: the trim skips those, and takes them once reclaim has put
/// them back. What never comes down is a leak.
#[track_caller]
pub fn check_anon_empty(cache: &PageCache, anon: &quire::mm::AnonMemory, what: &str) {
    let left = || {
        anon.trim_swap_cache();
        let s = anon.stats();
        (s.spaces, s.anon_frames, s.swap_cache_folios, s.swap_used)
    };
    wait_for(
        &format!("{what}: no space, folio or slot is left"),
        Duration::from_secs(10),
        || left() == (0, 0, 0, 0),
        || {
            format!(
                "(spaces, anon frames, swap cache, swap used) = {:?}",
                left()
            )
        },
    );
    check_no_leak(cache, what);
}

#[track_caller]
pub fn check_no_leak(cache: &PageCache, what: &str) {
    // A count that never comes down is a leak.
    let counts = || {
        let s = cache.stats_exact();
        (s.cached_frames, s.dirty_frames, s.files)
    };
    wait_for(
        &format!("{what}: nothing is cached once the files are gone"),
        Duration::from_secs(5),
        || counts() == (0, 0, 0),
        || format!("(cached, dirty, files) = {:?}", counts()),
    );
    wait_for(
        &format!("{what}: frames leaked"),
        Duration::from_secs(5),
        || {
            let s = cache.stats_exact();
            s.free_frames == s.frames
        },
        || {
            let s = cache.stats_exact();
            format!("{} of {} free", s.free_frames, s.frames)
        },
    );
    let b = cache.pool().stats();
    assert_eq!(b.allocated, 0, "{what}: the allocator agrees");
}

/// A fault-injecting in-memory store.
pub type Faulty = Arc<FaultyStore<MemStore>>;

/// A [`Faulty`] store holding `data` (also taken as synced), transferring in multiples of
/// `align` bytes.
pub fn faulty(data: Vec<u8>, align: usize) -> Faulty {
    Arc::new(FaultyStore::new(
        MemStore::from_vec(data).with_alignment(align),
    ))
}

/// A fresh temporary directory, removed (with everything in it) when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// A new empty directory whose name carries `tag`, this process and a counter.
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "quire-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Undo any chmod a test left behind, then remove.
        for e in walkdir(&self.0) {
            if e.is_dir() && !e.is_symlink() {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&e, std::fs::Permissions::from_mode(0o755));
            }
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `p` and everything below it (not following symbolic links).
fn walkdir(p: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![p.to_path_buf()];
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let ep = e.path();
            if ep.is_dir() && !ep.is_symlink() {
                out.extend(walkdir(&ep));
            } else {
                out.push(ep);
            }
        }
    }
    out
}

/// Frames on all of a cache's LRU lists together.
pub fn lru_total(s: &quire::filemap::CacheStats) -> usize {
    s.lru_frames.iter().sum()
}

/// Polls `cond` every millisecond until it holds; panics with `what` (and the last `describe()`)
/// if it does not within `limit`. For conditions a background thread (the flusher, background
/// reclaim) makes true shortly.
#[track_caller]
pub fn wait_for(
    what: &str,
    limit: Duration,
    mut cond: impl FnMut() -> bool,
    describe: impl Fn() -> String,
) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "{what}: not within {limit:?}: {}",
            describe()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Aborts the process unless dropped within `limit`: a test that hangs (a deadlock, an
/// allocation that never gives up) must fail rather than stall the suite; a panic in a
/// watchdog thread could not stop the stuck threads. Dropping it (also while unwinding from a
/// failed assertion) disarms it.
pub struct Watchdog(Arc<std::sync::atomic::AtomicBool>);

impl Watchdog {
    /// Arms a watchdog named `what`.
    pub fn arm(limit: Duration, what: &'static str) -> Watchdog {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while !d.load(std::sync::atomic::Ordering::Acquire) {
                if start.elapsed() > limit {
                    eprintln!("{what}: not finished after {limit:?}: hung");
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Sets the flag when dropped: put one in a thread scope's closure, so that a failed assertion
/// there stops the scope's looping threads (the scope joins them before it passes the panic on).
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A store that counts the pages read from it.
pub struct Counting {
    pub inner: MemStore,
    pub pages: AtomicU64,
}

impl Store for Counting {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> StoreResult<usize> {
        let n = self.inner.read_at(offset, buf)?;
        self.pages
            .fetch_add(n.div_ceil(PAGE) as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> StoreResult<usize> {
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

/// One file of `pages` pages, its bytes, and the pages read from its store.
pub struct File {
    pub f: CachedFile,
    pub data: Vec<u8>,
    pub store: Arc<Counting>,
}

impl File {
    pub fn open(cache: &PageCache, pages: usize, seed: u8) -> File {
        let data = pattern(pages * PAGE, seed);
        let store = Arc::new(Counting {
            inner: MemStore::from_vec(data.clone()),
            pages: AtomicU64::new(0),
        });
        let f = cache.open(store.clone()).unwrap();
        File { f, data, store }
    }

    /// Reads page `p` alone (one access, through a fresh handle) and checks its bytes.
    #[track_caller]
    pub fn read(&self, p: usize) {
        let mut b = vec![0u8; PAGE];
        self.f
            .reopen()
            .read_exact_at((p * PAGE) as u64, &mut b)
            .unwrap();
        same(&b, &self.data[p * PAGE..(p + 1) * PAGE], "page bytes");
    }

    pub fn misses(&self) -> u64 {
        self.store.pages.load(Ordering::Relaxed)
    }
}
