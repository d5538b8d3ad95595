//! [`CacheConfig`]: how a page cache is set up.

use std::time::Duration;

use crate::bio::IoEngineChoice;
use crate::sync::bitwait::WaitPolicy;
use crate::vmscan::{ReclaimPolicy, UnknownReclaimPolicy};
use crate::xarray::AddWalks;

/// The smallest budget that [`CacheConfig::new`] gives background reclaim: 4 MiB (1 024
/// frames). See [`CacheConfig::background_reclaim`].
pub const BACKGROUND_RECLAIM_MIN: usize = 4 << 20;

/// How a [`PageCache`](super::PageCache) is set up. Sizes are in bytes. Start from
/// [`CacheConfig::new`] and set
/// the fields to change:
///
/// ```
/// use std::time::Duration;
/// use quire::CacheConfig;
///
/// let mut config = CacheConfig::new(64 << 20); // a 64 MiB budget
/// config.readahead_max = 512 << 10;
/// config.dirty_expire = Duration::from_secs(1);
/// ```
///
/// With the `bench-internals` feature, the switches that bring back each mechanism's "before"
/// (rule 7 of docs/RULES.md) are fields too: [`wait_policy`](#structfield.wait_policy),
/// [`add_walks`](#structfield.add_walks), [`workingset`](#structfield.workingset) and
/// [`shadow_shrinker`](#structfield.shadow_shrinker). They exist for `quire bench`, which
/// measures both sides; without the feature the cache always runs the mechanisms this crate is
/// about (the switches' defaults). The reclaim policy is a documented choice either way
/// ([`CacheConfig::reclaim`], [`CacheConfig::loop_protection`]).
///
/// The reclaim policy is chosen by name, from the policies [`ReclaimPolicy::names`] lists
/// (`"lru-gen"`, the default; `"lru"`; `"clock"`); an unknown name is an error:
///
/// ```
/// use quire::CacheConfig;
///
/// let config = CacheConfig::new(64 << 20).with_reclaim("clock")?;
/// assert_eq!(config.reclaim.name(), "clock");
/// assert!(CacheConfig::new(64 << 20).with_reclaim("arc").is_err());
/// # Ok::<(), quire::vmscan::UnknownReclaimPolicy>(())
/// ```
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// The memory budget: the frame pool's size (a multiple of 4 KiB).
    pub capacity: usize,
    /// The largest readahead window per handle (0 disables readahead). Default 2 MiB. Windows
    /// (and the reads of large random requests) never take more than an eighth of the budget.
    pub readahead_max: usize,
    /// The largest folio order used for readahead and large writes (0..=9). Default 9 (2 MiB).
    pub max_folio_order: u32,
    /// Dirty memory above which the flusher starts writing back. Default a tenth of capacity.
    pub dirty_background: usize,
    /// Dirty memory above which writers wait for write-back. Default two fifths of capacity.
    pub dirty_limit: usize,
    /// Data dirty for longer than this is written back by the flusher. Default 5 s.
    pub dirty_expire: Duration,
    /// How often the flusher wakes up on its own. Default 500 ms.
    pub flush_interval: Duration,
    /// Blocking I/O threads of the engine: all of its I/O with
    /// [`crate::bio::IoEngineKind::Threads`], the
    /// I/O of stores without a file descriptor with io_uring. Default 2 (0: requests run on
    /// the thread that submits them, so readahead is synchronous).
    pub io_threads: usize,
    /// The I/O engine under the stores (see [`crate::bio`]). Default
    /// [`IoEngineChoice::Auto`] (io_uring where the kernel allows it), or what
    /// `QUIRE_IO_ENGINE` names.
    pub io_engine: IoEngineChoice,
    /// The folio lock's wait policy: [`WaitPolicy::Exact`] by default (the waiters bit and
    /// filtered wake-ups); the others bring back what those replaced, for `quire bench`.
    #[cfg(feature = "bench-internals")]
    pub wait_policy: WaitPolicy,
    /// The index insert's walk policy: [`AddWalks::Single`] by default (one tree walk per
    /// insert); [`AddWalks::Multi`] brings back the separate walks, for `quire bench`.
    #[cfg(feature = "bench-internals")]
    pub add_walks: AddWalks,
    /// How long an allocation may wait for reclaim to free memory before reporting
    /// [`FilemapError::NoMemory`](super::FilemapError::NoMemory) (every frame pinned by references
    /// or locks). Default 5 s.
    pub alloc_timeout: Duration,
    /// Whether a background thread (the kernel's kswapd) reclaims ahead of the allocations,
    /// keeping free frames between the watermarks; without it an allocation that finds the
    /// free frames at their minimum reclaims a small batch itself. Default: on from
    /// [`BACKGROUND_RECLAIM_MIN`] up. Background reclaim needs headroom to run ahead in —
    /// at least 16 frames and a round of 32 — which below that size is over a twentieth of
    /// the budget, kept free rather than caching; and a single reader that misses all the time
    /// spends more waiting for the thread's rounds (their lock and cache lines moving between
    /// cores) than it saves. Ignored by the clock, which always reclaims in the allocating
    /// thread. See `vmscan::Watermarks::direct`.
    pub background_reclaim: bool,
    /// Which reclaim runs, by name: the multi-generational LRU (`"lru-gen"`, the default), the
    /// classic active and inactive lists (`"lru"`), or the clock they replaced (`"clock"`). Set
    /// it with [`CacheConfig::with_reclaim`] or [`ReclaimPolicy::by_name`]. See
    /// [`crate::vmscan`].
    pub reclaim: ReclaimPolicy,
    /// Whether the multi-generational LRU protects a resident share of loops larger than the
    /// cache by adaptive insertion (default on; see `vmscan::lru_gen`). Ignored by
    /// the other policies.
    pub loop_protection: bool,
    /// Whether refaults may activate folios as part of the working set (default on; off counts
    /// refaults only, for `quire bench`).
    #[cfg(feature = "bench-internals")]
    pub workingset: bool,
    /// Whether the shadow shrinker keeps the index nodes holding only shadow entries below
    /// one per 16 frames of the budget (default on; off lets them grow, for `quire bench`).
    #[cfg(feature = "bench-internals")]
    pub shadow_shrinker: bool,
}

impl CacheConfig {
    /// Defaults for a cache of `capacity` bytes.
    pub fn new(capacity: usize) -> CacheConfig {
        CacheConfig {
            capacity,
            readahead_max: 2 << 20,
            max_folio_order: 9,
            dirty_background: capacity / 10,
            dirty_limit: capacity / 5 * 2,
            dirty_expire: Duration::from_secs(5),
            flush_interval: Duration::from_millis(500),
            io_threads: 2,
            io_engine: IoEngineChoice::from_env().unwrap_or_default(),
            #[cfg(feature = "bench-internals")]
            wait_policy: WaitPolicy::Exact,
            #[cfg(feature = "bench-internals")]
            add_walks: AddWalks::Single,
            alloc_timeout: Duration::from_secs(5),
            background_reclaim: capacity >= BACKGROUND_RECLAIM_MIN,
            reclaim: ReclaimPolicy::default(),
            loop_protection: true,
            #[cfg(feature = "bench-internals")]
            workingset: true,
            #[cfg(feature = "bench-internals")]
            shadow_shrinker: true,
        }
    }

    /// This configuration with the reclaim policy registered as `name` (see
    /// [`ReclaimPolicy::names`]).
    pub fn with_reclaim(mut self, name: &str) -> Result<CacheConfig, UnknownReclaimPolicy> {
        self.reclaim = ReclaimPolicy::by_name(name)?;
        Ok(self)
    }

    /// The folio lock's wait policy: the configured one with `bench-internals`, else the exact
    /// one (a constant, so the lock's fast path pays nothing for the switch).
    #[inline]
    pub(crate) fn wait_policy(&self) -> WaitPolicy {
        #[cfg(feature = "bench-internals")]
        return self.wait_policy;
        #[cfg(not(feature = "bench-internals"))]
        return WaitPolicy::Exact;
    }

    /// The index insert's walk policy: the configured one with `bench-internals`, else the
    /// single walk.
    #[inline]
    pub(crate) fn add_walks(&self) -> AddWalks {
        #[cfg(feature = "bench-internals")]
        return self.add_walks;
        #[cfg(not(feature = "bench-internals"))]
        return AddWalks::Single;
    }

    /// Whether refaults may activate folios: the configured switch with `bench-internals`,
    /// else on.
    pub(crate) fn workingset(&self) -> bool {
        #[cfg(feature = "bench-internals")]
        return self.workingset;
        #[cfg(not(feature = "bench-internals"))]
        return true;
    }

    /// Whether the shadow shrinker runs: the configured switch with `bench-internals`, else
    /// on.
    pub(crate) fn shadow_shrinker(&self) -> bool {
        #[cfg(feature = "bench-internals")]
        return self.shadow_shrinker;
        #[cfg(not(feature = "bench-internals"))]
        return true;
    }
}
