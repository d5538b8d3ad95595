//! `PageCache::stats` reads counters only: once the per-CPU batches are applied
//! (`stats_exact`), its figures are those that visiting every file and counting under the
//! allocator's locks give, and they follow files opening, growing and closing.

mod common;

use quire::filemap::{CacheConfig, CacheStats, PageCache};
use quire::store::MemStore;
use quire::vmscan::NR_LRU_LISTS;

const PAGE: usize = 4096;

/// The figures `stats` reads from counters, which must agree with `stats_exact`'s once the
/// batches are applied. The event counters, the I/O engine's figures and the generations' ages
/// are left out: background threads may move them between two calls.
fn figures(s: &CacheStats) -> [usize; 9 + NR_LRU_LISTS] {
    let mut out = [0; 9 + NR_LRU_LISTS];
    out[..9].copy_from_slice(&[
        s.frames,
        s.free_frames,
        s.cached_frames,
        s.dirty_frames,
        s.writeback_frames,
        s.files,
        s.index_nodes,
        s.index_heap_bytes,
        s.shadow_nodes,
    ]);
    out[9..].copy_from_slice(&s.lru_frames);
    out
}

/// Reads every page of `f`.
fn read_whole(f: &quire::CachedFile) {
    let mut buf = vec![0u8; PAGE];
    for off in (0..f.len()).step_by(PAGE) {
        f.read_exact_at(off, &mut buf).unwrap();
    }
}

#[test]
fn counters_agree_with_the_exact_figures_once_the_batches_are_applied() {
    // Room for every file (6 300 pages): no reclaim runs in the background between two reads
    // of the figures.
    let mut cfg = CacheConfig::new(64 << 20);
    cfg.readahead_max = 0;
    let cache = PageCache::new(cfg).unwrap();
    // Files large enough that their indexes need nodes (64 pages per node).
    let files: Vec<_> = (0..6)
        .map(|i| {
            cache
                .open(MemStore::from_vec(vec![i as u8; (i + 1) * 300 * PAGE]))
                .unwrap()
        })
        .collect();
    for f in &files {
        read_whole(f);
    }
    let exact = cache.stats_exact();
    assert!(exact.index_nodes > 0, "{exact:?}");
    assert_eq!(exact.files, 6);
    assert_eq!(
        figures(&cache.stats()),
        figures(&exact),
        "nothing changed since the batches were applied"
    );

    // A file closed takes its index nodes out of the count.
    let mut files = files;
    drop(files.pop());
    let exact = cache.stats_exact();
    assert_eq!(exact.files, 5);
    assert_eq!(figures(&cache.stats()), figures(&exact));

    // Eviction leaves shadow entries in nodes that stay counted until the shrinker or the
    // file's close frees them.
    cache.shrink(usize::MAX);
    let exact = cache.stats_exact();
    assert_eq!(figures(&cache.stats()), figures(&exact));
    drop(files);
    common::check_no_leak(&cache, "all files closed");
    let exact = cache.stats_exact();
    assert_eq!((exact.files, exact.index_nodes), (0, 0));
    assert_eq!(figures(&cache.stats()), figures(&exact));
}

#[test]
fn stats_leaves_the_batches_alone() {
    let mut cfg = CacheConfig::new(16 << 20);
    cfg.readahead_max = 0;
    let cache = PageCache::new(cfg).unwrap();
    let f = cache.open(MemStore::from_vec(vec![1u8; 4 * PAGE])).unwrap();
    read_whole(&f);
    // Four folios just added sit in this CPU's batch, off the lists, until it fills or is
    // applied: reading the figures does not apply it.
    let listed = |s: &quire::filemap::CacheStats| s.lru_frames.iter().sum::<usize>();
    let before = cache.stats();
    assert_eq!(before.cached_frames, 4);
    assert!(listed(&before) < 4, "{before:?}");
    assert_eq!(listed(&cache.stats()), listed(&before));
    cache.drain_batches();
    assert_eq!(listed(&cache.stats()), 4);
}
