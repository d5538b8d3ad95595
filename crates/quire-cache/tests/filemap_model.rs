//! The page cache against a model file image (a `Vec<u8>`).
//!
//! - `random_ops_on_four_threads_match_the_model`: four threads run random operations (writes,
//!   reads, zero-copy reads held across a write, sequential scans, fsync, sync_range,
//!   invalidate, reopen, eviction and truncation) on one file in a cache a fraction of its size,
//!   so eviction, readahead, write-back and dirty throttling all happen. Each thread owns a region
//!   of the file whose edges fall inside pages, so neighbours share pages but never bytes, and
//!   every read of a thread's own bytes is checked exactly; truncation, which touches everyone,
//!   runs alone (an `RwLock` gate). After every fsync the store's synced image must hold the
//!   thread's bytes. At the end every byte is compared, then the file is synced, everything is
//!   dropped (no frame may be left), and a new cache reads the store back byte for byte.
//! - `model_state_machine`: a proptest state machine (one thread) of writes, reads, zero-copy
//!   reads, set_len, fsync, sync_range, invalidate, eviction and drop-and-reopen against a `Vec`,
//!   on a cache of 16 frames.

mod common;

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use proptest::prelude::*;
use quire::filemap::{CacheConfig, CachedFile, PageCache};
use quire::store::MemStore;

use common::{check_no_leak, quiet_config, read_all, same, Rng, PAGE};

// ---- four threads against a shared model --------------------------------------------------

/// The file's length outside truncations.
const FULL: usize = 1_200_000;
/// Region edges (thread `t` owns `EDGES[t] .. EDGES[t + 1]`), inside pages on purpose.
const EDGES: [usize; 5] = [0, 300_123, 600_000, 901_777, FULL];
const THREADS: usize = 4;

struct Shared {
    store: Arc<MemStore>,
    cache: PageCache,
    model: Mutex<Vec<u8>>,
    /// Held shared by every operation, exclusively by truncation.
    gate: RwLock<()>,
}

impl Shared {
    fn model_range(&self, a: usize, b: usize) -> Vec<u8> {
        self.model.lock().unwrap()[a..b].to_vec()
    }
}

/// One thread's run: `ops` random operations on its own region.
fn worker(sh: &Shared, base: &CachedFile, t: usize, seed: u64, ops: usize) {
    let mut rng = Rng(seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let (lo, hi) = (EDGES[t], EDGES[t + 1]);
    let mut h = base.reopen();
    for _ in 0..ops {
        let op = rng.below(100);
        if op < 3 {
            // Truncate to a random length, check it, and grow back to FULL.
            let _x = sh.gate.write().unwrap();
            let len = rng.below(FULL + 1);
            h.set_len(len as u64).unwrap();
            assert_eq!(h.len() as usize, len);
            let mut model = sh.model.lock().unwrap();
            model.truncate(len);
            let from = len.saturating_sub(6000);
            let mut buf = vec![0xA5u8; 12_000];
            let n = h.read_at(from as u64, &mut buf).unwrap();
            assert_eq!(n, len - from, "a read across the new end is short");
            same(&buf[..n], &model[from..], "bytes before the new end");
            assert!(buf[n..].iter().all(|&b| b == 0xA5));
            if rng.below(2) == 0 {
                h.set_len(FULL as u64).unwrap();
            } else if len < FULL {
                // Grow with a write at the very end: a hole of zeros.
                h.write_at(FULL as u64 - 1, &[0]).unwrap();
            }
            model.resize(FULL, 0);
            assert_eq!(h.len() as usize, FULL);
            continue;
        }
        let _g = sh.gate.read().unwrap();
        match op {
            3..=34 => {
                // A write inside the region: small, or a large aligned one where it fits.
                let (off, len) = if rng.below(5) == 0 && hi - lo > 70_000 {
                    let a = lo.div_ceil(PAGE) * PAGE;
                    let off = a + rng.below((hi - a - 65_536) / PAGE) * PAGE;
                    (off, 65_536)
                } else {
                    let off = rng.range(lo, hi);
                    (off, 1 + rng.below((hi - off).min(20_000)))
                };
                let w = rng.bytes(len);
                assert_eq!(h.write_at(off as u64, &w).unwrap(), len);
                sh.model.lock().unwrap()[off..off + len].copy_from_slice(&w);
            }
            35..=64 => {
                let off = rng.range(lo, hi);
                let len = 1 + rng.below((hi - off).min(30_000));
                let mut buf = vec![0u8; len];
                assert_eq!(h.read_at(off as u64, &mut buf).unwrap(), len);
                same(&buf, &sh.model_range(off, off + len), "a read");
            }
            65..=69 => {
                // A sequential scan of the region (readahead).
                let mut buf = vec![0u8; 16 << 10];
                let mut pos = lo;
                while pos < hi {
                    let n = buf.len().min(hi - pos);
                    assert_eq!(h.read_at(pos as u64, &mut buf[..n]).unwrap(), n);
                    same(&buf[..n], &sh.model_range(pos, pos + n), "a scan");
                    pos += n;
                }
            }
            70..=79 => {
                // Zero copy: check our bytes of a page; sometimes write them while holding it.
                let page = rng.range(lo / PAGE, (hi - 1) / PAGE + 1);
                let r = h.read_folio(page as u64).unwrap();
                let fstart = r.index() as usize * PAGE;
                let a = lo.max(page * PAGE);
                let b = hi.min((page + 1) * PAGE);
                let old = sh.model_range(a, b);
                let bytes = r.bytes().unwrap();
                same(&bytes[a - fstart..b - fstart], &old, "a folio's bytes");
                if rng.below(2) == 0 {
                    let w = rng.bytes(b - a);
                    h.write_at(a as u64, &w).unwrap();
                    sh.model.lock().unwrap()[a..b].copy_from_slice(&w);
                    same(
                        &bytes[a - fstart..b - fstart],
                        &old,
                        "a held folio after a write",
                    );
                    let mut now = vec![0u8; b - a];
                    h.read_at(a as u64, &mut now).unwrap();
                    same(&now, &w, "the write, past the held folio");
                }
            }
            80..=85 => {
                h.fsync().unwrap();
                let synced = sh.store.synced_contents();
                same(
                    &synced[lo..hi],
                    &sh.model_range(lo, hi),
                    "synced after fsync",
                );
            }
            86..=89 => {
                h.sync_range(lo as u64, (hi - lo) as u64).unwrap();
                // The store may end inside the region when the file was grown past it by a
                // write at the very end (not in this range): what lies past the store's end
                // must then be a hole, zeros in the file.
                let synced = sh.store.synced_contents();
                let model = sh.model_range(lo, hi);
                let end = synced.len().clamp(lo, hi);
                if end > lo {
                    same(
                        &synced[lo..end],
                        &model[..end - lo],
                        "synced after sync_range",
                    );
                }
                assert!(
                    model[end - lo..].iter().all(|&b| b == 0),
                    "data past the store's end after sync_range"
                );
            }
            90..=92 => {
                h.invalidate().unwrap();
            }
            93..=95 => {
                h = h.reopen();
            }
            _ => {
                sh.cache.shrink(16);
            }
        }
    }
}

fn run_threads(align: usize, seed: u64, ops: usize) {
    let mut rng = Rng(seed);
    let initial = rng.bytes(FULL);
    let store = Arc::new(MemStore::from_vec(initial.clone()).with_alignment(align));
    let mut cfg = CacheConfig::new(512 << 10);
    cfg.readahead_max = 64 << 10;
    cfg.max_folio_order = 4;
    cfg.dirty_background = 64 << 10;
    cfg.dirty_limit = 192 << 10;
    cfg.dirty_expire = Duration::from_millis(50);
    cfg.flush_interval = Duration::from_millis(20);
    let cache = PageCache::new(cfg).unwrap();
    let base = cache.open(store.clone()).unwrap();
    let sh = Shared {
        store: store.clone(),
        cache: cache.clone(),
        model: Mutex::new(initial),
        gate: RwLock::new(()),
    };
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (sh, base) = (&sh, &base);
            s.spawn(move || worker(sh, base, t, seed, ops));
        }
    });
    let model = sh.model.lock().unwrap().clone();
    assert_eq!(base.len() as usize, FULL);
    same(&read_all(&base), &model, "every byte after the run");
    base.fsync().unwrap();
    same(&store.synced_contents(), &model, "the store after fsync");
    drop(base);
    drop(sh);
    check_no_leak(&cache, "after the threads");
    drop(cache);

    let cache = PageCache::new(CacheConfig::new(2 << 20)).unwrap();
    let f = cache.open(store.clone()).unwrap();
    same(&read_all(&f), &model, "every byte through a new cache");
}

#[test]
fn random_ops_on_four_threads_match_the_model() {
    let seed = std::env::var("QUIRE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0001u64);
    run_threads(1, seed, 500);
}

#[test]
fn random_ops_on_four_threads_match_the_model_on_an_aligned_store() {
    let seed = std::env::var("QUIRE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0002u64);
    run_threads(4096, seed, 500);
}

// ---- a single-thread state machine ---------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Write { off: usize, len: usize, seed: u8 },
    Read { off: usize, len: usize },
    ReadFolio { page: usize },
    SetLen { len: usize },
    Fsync,
    SyncRange { off: usize, len: usize },
    Invalidate,
    Shrink,
    ReopenHandle,
    DropAndReopen,
}

const MAX: usize = 96 << 10;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..MAX, 0..20_000usize, any::<u8>())
            .prop_map(|(off, len, seed)| Op::Write { off, len, seed }),
        2 => (0..MAX / PAGE, 1..4usize, any::<u8>()).prop_map(|(p, n, seed)| Op::Write {
            off: p * PAGE,
            len: n * PAGE,
            seed
        }),
        5 => (0..MAX + 8000, 0..24_000usize).prop_map(|(off, len)| Op::Read { off, len }),
        2 => (0..MAX / PAGE + 2).prop_map(|page| Op::ReadFolio { page }),
        2 => (0..MAX).prop_map(|len| Op::SetLen { len }),
        1 => Just(Op::Fsync),
        1 => (0..MAX, 0..30_000usize).prop_map(|(off, len)| Op::SyncRange { off, len }),
        1 => Just(Op::Invalidate),
        1 => Just(Op::Shrink),
        1 => Just(Op::ReopenHandle),
        1 => Just(Op::DropAndReopen),
    ]
}

/// A cache of 16 frames with no background activity (readahead synchronous, the flusher idle),
/// so that the machine is deterministic: write-back happens when asked or when reclaim needs
/// the memory. (The threads test above runs with everything in the background.)
fn small_cache() -> PageCache {
    let mut cfg = quiet_config(64 << 10);
    cfg.readahead_max = 16 << 10;
    cfg.max_folio_order = 2;
    cfg.io_threads = 0;
    PageCache::new(cfg).unwrap()
}

fn run_machine(align: usize, initial_len: usize, ops: &[Op]) {
    let initial: Vec<u8> = (0..initial_len).map(|i| (i * 7 + i / 4096) as u8).collect();
    let store = Arc::new(MemStore::from_vec(initial.clone()).with_alignment(align));
    let mut model = initial;
    let mut cache = small_cache();
    let mut f = cache.open(store.clone()).unwrap();
    for (step, op) in ops.iter().enumerate() {
        let ctx = format!("step {step}: {op:?}");
        match *op {
            Op::Write { off, len, seed } => {
                let w: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(13) ^ seed)
                    .collect();
                assert_eq!(f.write_at(off as u64, &w).unwrap(), len, "{ctx}");
                if len > 0 {
                    if model.len() < off + len {
                        model.resize(off + len, 0);
                    }
                    model[off..off + len].copy_from_slice(&w);
                }
            }
            Op::Read { off, len } => {
                let mut buf = vec![0xA5u8; len];
                let n = f.read_at(off as u64, &mut buf).unwrap();
                let want = model.len().saturating_sub(off).min(len);
                assert_eq!(n, want, "{ctx}");
                if n > 0 {
                    same(&buf[..n], &model[off..off + n], &ctx);
                }
                assert!(buf[n..].iter().all(|&b| b == 0xA5), "{ctx}: untouched");
            }
            Op::ReadFolio { page } => {
                let pages = model.len().div_ceil(PAGE);
                match f.read_folio(page as u64) {
                    Ok(r) => {
                        assert!(page < pages, "{ctx}: a folio past the end");
                        let at = (page - r.index() as usize) * PAGE;
                        let bytes = &r.bytes().unwrap()[at..at + PAGE];
                        let end = model.len().min((page + 1) * PAGE);
                        let valid = end - page * PAGE;
                        same(&bytes[..valid], &model[page * PAGE..end], &ctx);
                        assert!(bytes[valid..].iter().all(|&b| b == 0), "{ctx}: zeros");
                    }
                    Err(e) => {
                        assert!(page >= pages, "{ctx}: {e}");
                        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
                    }
                }
            }
            Op::SetLen { len } => {
                f.set_len(len as u64).unwrap();
                model.resize(len, 0);
            }
            Op::Fsync => {
                f.fsync().unwrap();
                same(&store.synced_contents(), &model, &ctx);
            }
            Op::SyncRange { off, len } => {
                f.sync_range(off as u64, len as u64).unwrap();
                let end = model.len().min(off + len);
                if len > 0 && off < end {
                    // The store may end before the range does when the file was extended by
                    // a write past the range: what lies past the store's end is then a hole.
                    let synced = store.synced_contents();
                    let stored = synced.len().clamp(off, end);
                    if stored > off {
                        same(&synced[off..stored], &model[off..stored], &ctx);
                    }
                    assert!(
                        model[stored..end].iter().all(|&b| b == 0),
                        "{ctx}: data past the store's end ({})",
                        synced.len()
                    );
                }
            }
            Op::Invalidate => {
                f.invalidate().unwrap();
                assert_eq!(f.cached_frames(), 0, "{ctx}");
                same(&store.contents(), &model, &ctx);
            }
            Op::Shrink => {
                cache.shrink(usize::MAX);
                let s = cache.stats_exact();
                assert!(s.cached_frames <= s.frames);
            }
            Op::ReopenHandle => f = f.reopen(),
            Op::DropAndReopen => {
                drop(f);
                check_no_leak(&cache, "dropped before reopening");
                same(
                    &store.contents(),
                    &model,
                    &format!("{ctx}: written back on close"),
                );
                cache = small_cache();
                f = cache.open(store.clone()).unwrap();
            }
        }
        assert_eq!(f.len() as usize, model.len(), "{ctx}: length");
        let s = cache.stats_exact();
        assert!(s.cached_frames <= s.frames, "{ctx}");
    }
    same(&read_all(&f), &model, "at the end");
    f.fsync().unwrap();
    same(&store.synced_contents(), &model, "synced at the end");
    drop(f);
    check_no_leak(&cache, "at the end");
    let cache = small_cache();
    let f = cache.open(store.clone()).unwrap();
    same(&read_all(&f), &model, "through a new cache");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn model_state_machine(
        align in prop_oneof![Just(1usize), Just(4096usize)],
        initial_len in prop_oneof![Just(0usize), 0..MAX],
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        run_machine(align, initial_len, &ops);
    }
}
