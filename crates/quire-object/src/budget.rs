//! What an object cache holds beside its page cache, and the bound on all of it together.
//!
//! The page cache's frames are `capacity` bytes, fixed at start. Beside them the cache holds,
//! each bounded:
//!
//! | what | bound |
//! |---|---|
//! | the frames' descriptors (the memmap) | `capacity` / 64 |
//! | upload buffers: parts and single PUT bodies being read from staging and sent, every file together | [`BackingConfig::upload_bound`]: `parts_in_flight` × `part_size` |
//! | disk tier offers waiting for its writer | [`crate::tier::queue_bound_for`] the frames (with a tier): a 16th of them, 1 to 8 MiB |
//! | staging files' pages in the kernel's page cache | 2 × 4 MiB per file being written back |
//! | disk tier files' pages in the kernel's page cache | 4 MiB (the writer's batch) |
//! | GET bodies and their copies, the runtime, the client, the heap | [`FIXED_OVERHEAD`] |
//!
//! So resident memory (and what a memory cgroup charges, page cache included) stays within
//! [`MemoryStats::budget`]: `capacity` + `capacity` / 64 + [`FIXED_OVERHEAD`] +
//! `parts_in_flight` × `part_size` + the tier's queue bound (with a tier), plus 8 MiB per
//! file being written at once. A FUSE mount adds its channel's buffers (`quire stat`'s
//! `fuse_ring_buffer_bytes`).
//!
//! A memory budget given as one figure (`quire mount URL --capacity`, a `CachedStore` built with
//! [`frame_pool_within`]) pays for what grows with the cache: the frames, their descriptors and
//! the tier's queue; the frames are what is left. What does not grow with it stays beside the
//! budget as a fixed overhead: code, runtime, heap, a mount's channel buffers, and the upload
//! buffers of files being written. Resident memory then stays within the budget +
//! [`FIXED_OVERHEAD`] + the channel's buffers + the upload bound.

use std::sync::atomic::Ordering;

use crate::{BackingConfig, ObjectCache};

/// What the cache holds beside the frames and the bounded buffers above: the fetches' buffers
/// in flight (at most a readahead window of [`crate::READAHEAD_MAX`]), the runtime and its
/// threads' stacks, the HTTP client, the index of cached files and the heap's slack.
pub const FIXED_OVERHEAD: u64 = 40 << 20;

/// The memory an object cache holds, as `quire stat` shows it (`memory_*` lines).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// The page cache's frames (`--capacity`).
    pub frame_pool: u64,
    /// Upload buffers held now, the most at once, and their bound.
    pub upload: u64,
    /// The most upload buffer bytes held at once.
    pub upload_max: u64,
    /// The bound on upload buffers.
    pub upload_bound: u64,
    /// Disk tier offers waiting for the writer now, and their bound (0 without a tier).
    pub tier_queued: u64,
    /// The most tier offer bytes that waited at once.
    pub tier_queued_max: u64,
    /// The bound on tier offers waiting.
    pub tier_queue_bound: u64,
    /// Staged bytes that may be in the kernel's page cache.
    pub staging_cached: u64,
    /// The process's resident memory (`VmRSS`), 0 where it cannot be read.
    pub rss: u64,
    /// The bound resident memory stays within, without a FUSE channel's buffers and the
    /// staging page cache of files being written (see the [module docs](self)).
    pub budget: u64,
}

/// The bound on what a cache of `capacity` bytes over a backing configured by `config` holds
/// (see the [module docs](self)).
pub fn budget(capacity: u64, config: &BackingConfig, tier: bool) -> u64 {
    capacity + capacity / 64 + FIXED_OVERHEAD + config.upload_bound() + tier_queue(capacity, tier)
}

/// The bound on the disk tier's queue of offers under `frames` bytes of frames, 0 without a tier.
fn tier_queue(frames: u64, tier: bool) -> u64 {
    if tier {
        crate::tier::queue_bound_for(frames)
    } else {
        0
    }
}

/// The frame pool that fits in a memory budget of `memory` bytes together with what the cache
/// holds in proportion to it: the frames' descriptors (a 64th of the frames) and the disk
/// tier's queue of offers (with `tier`: [`crate::tier::queue_bound_for`] the frames). Whole
/// frames (4 KiB), and from 4 MiB up whole 2 MiB, the largest folio (with a part of one at its
/// end, a 32 MiB budget's pool read a cold sequential stream about 10% slower); `None` where
/// less than 1 MiB of frames would be left.
///
/// This is how `quire mount URL --capacity` and a `CachedStore` sized by a budget read their
/// budget: everything that grows with the cache, not only its frames. What stays outside it
/// does not grow with it: [`FIXED_OVERHEAD`] (code, runtime, heap), a mount's channel buffers,
/// and the upload buffers of files being written.
pub fn frame_pool_within(memory: u64, tier: bool) -> Option<usize> {
    const FRAME: u64 = 4096;
    let used = |frames: u64| frames + frames / 64 + tier_queue(frames, tier);
    // What a pool takes grows with it: the most whole frames that fit, by bisection.
    let (mut lo, mut hi) = (0u64, memory / FRAME + 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if used(mid * FRAME) <= memory {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let mut frames = lo * FRAME;
    if frames >= 4 << 20 {
        frames &= !((2 << 20) - 1);
    }
    (frames >= 1 << 20 && used(frames) <= memory)
        .then(|| usize::try_from(frames).ok())
        .flatten()
}

/// The process's resident memory, from `/proc/self/statm`.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

impl ObjectCache {
    /// What the cache holds now, against its bound.
    pub fn memory(&self) -> MemoryStats {
        let capacity = self.page_cache().config().capacity as u64;
        let stats = self.backing().stats();
        let config = self.backing().config();
        let tier = self.tier().map(|t| t.stats());
        MemoryStats {
            frame_pool: capacity,
            upload: stats.upload_bytes,
            upload_max: stats.upload_bytes_max,
            upload_bound: config.upload_bound(),
            tier_queued: tier.as_ref().map_or(0, |t| t.queued),
            tier_queued_max: tier.as_ref().map_or(0, |t| t.queued_max),
            tier_queue_bound: tier.as_ref().map_or(0, |t| t.queue_bound),
            staging_cached: self
                .backing()
                .inner
                .counters
                .staging_cached
                .load(Ordering::Relaxed),
            rss: rss(),
            budget: budget(capacity, config, tier.is_some()),
        }
    }
}

impl std::fmt::Display for MemoryStats {
    /// One `name value` line each, as `/proc/vmstat` does.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "memory_frame_pool_bytes {}", self.frame_pool)?;
        writeln!(f, "memory_upload_bytes {}", self.upload)?;
        writeln!(f, "memory_upload_bytes_max {}", self.upload_max)?;
        writeln!(f, "memory_upload_bound {}", self.upload_bound)?;
        writeln!(f, "memory_tier_queued_bytes {}", self.tier_queued)?;
        writeln!(f, "memory_tier_queued_bytes_max {}", self.tier_queued_max)?;
        writeln!(f, "memory_tier_queue_bound {}", self.tier_queue_bound)?;
        writeln!(f, "memory_staging_page_cache_bytes {}", self.staging_cached)?;
        writeln!(f, "memory_rss_bytes {}", self.rss)?;
        writeln!(f, "memory_budget_bytes {}", self.budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_pool_and_what_it_brings_fit_the_budget() {
        for memory in [
            2u64 << 20,
            20 << 20,
            32 << 20,
            64 << 20,
            150 << 20,
            256 << 20,
            (256 << 20) + 12345,
            8 << 30,
        ] {
            for tier in [false, true] {
                let Some(frames) = frame_pool_within(memory, tier) else {
                    assert!(memory < 4 << 20, "{memory} {tier}");
                    continue;
                };
                let frames = frames as u64;
                assert_eq!(frames % 4096, 0);
                let used = |f: u64| {
                    let q = if tier {
                        crate::tier::queue_bound_for(f)
                    } else {
                        0
                    };
                    f + f / 64 + q
                };
                assert!(used(frames) <= memory, "{} > {memory}", used(frames));
                // Tight: from 4 MiB up whole 2 MiB (the largest folio), another of which would
                // not fit; below, another frame would not.
                let step = if frames >= 4 << 20 { 2 << 20 } else { 4096 };
                assert_eq!(frames % step, 0);
                assert!(
                    used(frames + step) > memory,
                    "{frames} leaves room in {memory}"
                );
                if tier {
                    let q = crate::tier::queue_bound_for(frames);
                    assert!((1 << 20..=crate::tier::QUEUED_MAX).contains(&q));
                    assert!(q <= frames / 16 || q == 1 << 20);
                }
            }
        }
    }

    #[test]
    fn a_budget_too_small_for_its_parts_has_no_frame_pool() {
        assert_eq!(frame_pool_within(0, false), None);
        assert_eq!(frame_pool_within(1 << 20, false), None);
        assert_eq!(frame_pool_within(2 << 20, true), None);
        assert!(frame_pool_within(2 << 20, false).is_some());
    }
}
