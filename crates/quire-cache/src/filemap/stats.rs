//! [`CacheStats`]: what a [`super::PageCache`] holds and has done, as a struct and printed as
//! `/proc/meminfo` and `/proc/vmstat` print theirs.

use crate::stats::Snapshot;
use crate::vmscan::{Lru, Watermarks, NR_LRU_LISTS};

/// What the cache holds, and what its reclaim has done so far, as
/// [`PageCache::stats`](super::PageCache::stats) reads it from the counters: each figure is
/// exact at its last change, but they are read one after another, not at one moment. Folios
/// waiting in a per-CPU batch (15 at most per batch) are not yet on the LRU lists
/// (`lru_frames`, `lru_gen`), and frames freed while a zero-copy borrow of them was live are
/// not yet free (`free_frames`) until the allocator frees them; with the `bench-internals`
/// feature, `PageCache::stats_exact` applies the batches and frees those first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheStats {
    /// Frames in the pool.
    pub frames: usize,
    /// Frames free in the allocator (including its per-thread caches), at its last change.
    pub free_frames: usize,
    /// Frames of folios in some mapping's index.
    pub cached_frames: usize,
    /// Frames of dirty folios.
    pub dirty_frames: usize,
    /// Frames of folios under write-back (`NR_WRITEBACK`); with `dirty_frames`, what the dirty
    /// limit counts.
    pub writeback_frames: usize,
    /// Files open (mappings not yet closed).
    pub files: usize,
    /// Frames on each LRU list, indexed by [`Lru`] (all zero under the clock policy); folios
    /// still in a per-CPU batch are not counted yet.
    pub lru_frames: [usize; NR_LRU_LISTS],
    /// Index nodes of the files, and the heap bytes they take (beside the budget); kept as
    /// one count beside the shadow-node list, so nodes of a file that was just closed count
    /// until its index is freed.
    pub index_nodes: usize,
    /// `index_nodes` times the size of a node.
    pub index_heap_bytes: usize,
    /// Index nodes holding only shadow entries (on the shadow shrinker's list).
    pub shadow_nodes: usize,
    /// The most shadow nodes the shrinker keeps.
    pub max_shadow_nodes: usize,
    /// The workingset's non-resident age (frames evicted plus frames activated, ever).
    pub nonresident_age: u64,
    /// The free-frame watermarks background and direct reclaim work to.
    pub watermarks: Watermarks,
    /// The multi-generational LRU's generations, tiers and feedback (the kernel's debugfs
    /// `lru_gen`); `None` under the other policies.
    pub lru_gen: Option<crate::vmscan::LruGenStats>,
    /// The I/O engine under the stores, and why it was chosen ([`crate::bio`]).
    pub io_engine: crate::bio::EngineInfo,
    /// What the I/O engine did: requests, submissions, resubmissions, errors, depth.
    pub io: crate::bio::EngineStats,
    /// This cache's counters since it was made: reclaim, refaults, batches
    /// (`pgscan`, `pgsteal`, `workingset_refault`, ... as in `/proc/vmstat`). Events counted
    /// only globally ([`crate::stats`]) read 0 here.
    pub vmstat: Snapshot,
}

impl CacheStats {
    /// Frames on one LRU list.
    pub fn lru(&self, lru: Lru) -> usize {
        self.lru_frames[lru as usize]
    }
}

impl std::fmt::Display for CacheStats {
    /// `/proc/vmstat` style: one `name value` line per figure — the fields by their names, the
    /// LRU lists as `nr_inactive_anon` ... `nr_unevictable` (frames, as the kernel's `nr_*`
    /// counts pages), the watermarks as `watermark_min`/`_low`/`_high`, under the
    /// multi-generational LRU its state ([`CacheStats::lru_gen`]: `lru_gen_max_seq`, the frames
    /// of each live generation as `lru_gen_<seq>_anon`/`_file`, the probation lists and target,
    /// the protected tier index, the loop protection's counts), the I/O engine (`io_engine
    /// io_uring` or `threads`, then its `io_*` counts), then the cache's counters
    /// ([`CacheStats::vmstat`]).
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::from_vec(vec![1; 64 << 10]))?;
    /// file.read_exact_at(0, &mut [0; 100])?;
    /// let text = cache.stats().to_string();
    /// assert!(text.lines().any(|l| l == "frames 1024"));
    /// assert!(text.lines().any(|l| l.starts_with("nr_inactive_file ")));
    /// assert!(text.lines().any(|l| l.starts_with("lru_gen_max_seq ")));
    /// # Ok(())
    /// # }
    /// ```
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lines: [(&str, u64); 15] = [
            ("frames", self.frames as u64),
            ("free_frames", self.free_frames as u64),
            ("cached_frames", self.cached_frames as u64),
            ("dirty_frames", self.dirty_frames as u64),
            ("writeback_frames", self.writeback_frames as u64),
            ("files", self.files as u64),
            ("index_nodes", self.index_nodes as u64),
            ("index_heap_bytes", self.index_heap_bytes as u64),
            ("shadow_nodes", self.shadow_nodes as u64),
            ("max_shadow_nodes", self.max_shadow_nodes as u64),
            ("nonresident_age", self.nonresident_age),
            ("watermark_min", self.watermarks.min as u64),
            ("watermark_low", self.watermarks.low as u64),
            ("watermark_high", self.watermarks.high as u64),
            ("watermark_max_gap", self.watermarks.max_gap as u64),
        ];
        for (name, value) in lines {
            writeln!(f, "{name} {value}")?;
        }
        for lru in Lru::ALL {
            writeln!(f, "nr_{} {}", lru.name(), self.lru(lru))?;
        }
        if let Some(g) = &self.lru_gen {
            writeln!(f, "lru_gen_max_seq {}", g.max_seq)?;
            writeln!(f, "lru_gen_min_seq_anon {}", g.min_seq[0])?;
            writeln!(f, "lru_gen_min_seq_file {}", g.min_seq[1])?;
            for &(seq, anon, file) in &g.gens {
                writeln!(f, "lru_gen_{seq}_anon {anon}")?;
                writeln!(f, "lru_gen_{seq}_file {file}")?;
            }
            writeln!(f, "lru_gen_probation_anon {}", g.probation[0])?;
            writeln!(f, "lru_gen_probation_file {}", g.probation[1])?;
            writeln!(f, "lru_gen_probation_target {}", g.probation_target)?;
            writeln!(f, "lru_gen_tier_idx_anon {}", g.tier_idx[0])?;
            writeln!(f, "lru_gen_tier_idx_file {}", g.tier_idx[1])?;
            writeln!(f, "lru_gen_candidates_rejected {}", g.rejected)?;
            writeln!(f, "lru_gen_candidates_admitted {}", g.admitted)?;
        }
        writeln!(f, "io_engine {}", self.io_engine.kind)?;
        let io = &self.io;
        writeln!(f, "io_submitted {}", io.submitted)?;
        writeln!(f, "io_batches {}", io.batches)?;
        writeln!(f, "io_resubmitted {}", io.resubmitted)?;
        writeln!(f, "io_errors {}", io.errors)?;
        writeln!(f, "io_in_flight {}", io.in_flight)?;
        writeln!(f, "io_max_in_flight {}", io.max_in_flight)?;
        writeln!(f, "io_depth_sum {}", io.depth_sum)?;
        writeln!(f, "io_local {}", io.local)?;
        write!(f, "{}", self.vmstat)
    }
}
