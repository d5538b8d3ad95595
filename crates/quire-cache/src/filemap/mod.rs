//! The page cache proper, after `mm/filemap.c`: cached files with a fixed memory budget.
//!
//! A [`PageCache`] owns one [`FramePool`] (the whole memory budget) and the background threads
//! (the flusher and the readahead I/O workers). [`PageCache::open`] wraps a [`Store`] in a
//! mapping — the `address_space`: an [`XArray`] of folios and shadow entries, the file's length
//! and its write-back error sequence — and returns a [`CachedFile`], one open handle with its
//! own readahead state and its own position in the error sequence. [`CachedFile::reopen`] gives
//! another handle on the same mapping. Many files share one cache and one budget.
//!
//! # The index and its references
//!
//! Every folio in a mapping's index holds one counted reference owned by the index (a raw
//! reference: [`FolioRef::into_raw`]); its flag word has [`LRU`](crate::mem::folio::LRU) set
//! while it is there, and its `mapping` field holds the mapping's id. The index's marks:
//!
//! | mark | meaning |
//! |---|---|
//! | [`DIRTY_MARK`] | the folio is DIRTY |
//! | [`WRITEBACK_MARK`] | the folio is under write-back |
//!
//! # Lookups (rule 5 of docs/RULES.md)
//!
//! A lookup pins an epoch guard, loads the slot, takes a speculative reference with
//! [`Folio::try_get`] (which fails on a free or frozen descriptor) and loads the slot again: if
//! it still holds the same folio, the reference is good; otherwise it is put back and the lookup
//! starts over. Descriptors are never freed (rule 1 of docs/RULES.md), so the speculative reference is always
//! safe to attempt.
//!
//! # Changing bytes
//!
//! A reader holding a reference may be reading an up-to-date folio's bytes without a lock, so
//! bytes change only (a) before the folio is up to date, under its lock, (b) with the count
//! frozen (no reference but the index's and the writer's), or (c) in a copy that replaces the
//! folio in the index (copy on write) when readers hold references. Writers also wait for
//! write-back to finish, so the bytes being written to the store are stable.
//!
//! # Write-back (rule 6 of docs/RULES.md)
//!
//! Writes mark folios DIRTY (and [`DIRTY_MARK`] in the index) and count dirty frames
//! cache-wide. A background flusher writes back when dirty memory passes
//! [`CacheConfig::dirty_background`] or data has been dirty longer than
//! [`CacheConfig::dirty_expire`]; writers wait when it passes [`CacheConfig::dirty_limit`].
//! A failed write-back leaves the folio dirty (the data is not dropped), sets ERROR on it and
//! records the error in the mapping's [`ErrSeq`], which every handle's `fsync` reports once.
//!
//! # The budget
//!
//! Frames never exceed the pool. Reclaim is [`crate::vmscan`]'s: every folio in an index is on
//! one of the cache's LRU lists; background reclaim keeps some frames free, and an evicted
//! folio's slot keeps a shadow entry, so that a later insert over it is a *refault* whose
//! distance tells whether the folio belongs to the working set. The cache is reclaim's
//! [`Owners`](crate::vmscan): it evicts folios for it, deletes shadow nodes and wakes the
//! flusher when reclaim meets dirty folios.
//!
//! # Mapped folios
//!
//! Spaces of [`crate::mm`] may map a file's folios (`Space::map_file`); the file's reverse map
//! (`immap.rs`) lists those mappings. A folio some space maps has a mapcount (owner bits of its
//! flag word) and one reference per pte, so the page cache unmaps it before it changes it
//! (`write_at`), drops it (truncation, close) or reclaim evicts it, and write-protects it
//! before writing it back (`folio_mkclean`) or lending a zero-copy reader its bytes (the next
//! write through a mapping then gets a copy; see `mm/file.rs`).
//!
//! A folio leaves its index in one place, `Mapping::remove_folio`: its slot gets the
//! replacement (nothing, a shadow, or a copy), the index's reference is put, the counts are
//! fixed, its `mapping` is set to 0 and it is taken off its LRU list, in that order (see
//! `vmscan/swap.rs` for why).

mod block_on;
pub mod errseq;
pub(crate) mod immap;
pub(crate) mod mapping;
mod owned;
pub mod readahead;
mod reader;
mod stats;
mod std_io;
mod workers;
mod writeback;

use std::collections::HashMap;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::bio::IoEngineChoice;
use crate::mem::folio::{Folio, FolioGuard, FolioRef, FRAME_SHIFT};
use crate::mem::pool::{FramePool, PoolError};
use crate::stats::Snapshot;
use crate::store::{Store, StoreError};
use crate::sync::bitwait::WaitPolicy;
use crate::vmscan::{self, Lru, ReclaimPolicy, VmConfig, Vmscan, Watermarks, NR_LRU_LISTS};
use crate::xarray::{AddWalks, ListedNode, Mark, XArray, XaPointer};

pub use block_on::block_on;
pub use errseq::{ErrSeq, ErrSeqSince};
use mapping::Mapping;
pub use owned::OwnedFolio;
pub use readahead::{RaState, RaWindow, Readahead};
pub use reader::{FileReader, REPIN_EVERY, TRANSLATIONS};
pub use stats::CacheStats;
pub use std_io::FileCursor;

/// The index mark of dirty folios.
pub const DIRTY_MARK: Mark = Mark::M0;
/// The index mark of folios under write-back.
pub const WRITEBACK_MARK: Mark = Mark::M1;

/// Bytes in a page (a base frame).
pub const PAGE_SIZE: u64 = 1 << FRAME_SHIFT;

/// The largest length a cached file may have: the store's limit rounded down to a whole page,
/// so that write-back, which writes whole pages to stores that need aligned requests, never
/// goes past the store's limit with a page the cache accepted.
pub const MAX_FILE_SIZE: u64 = crate::store::MAX_OFFSET & !(PAGE_SIZE - 1);

/// How a [`PageCache`] is set up. Sizes are in bytes. Start from [`CacheConfig::new`] and set
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
/// The switches that bring back each mechanism's "before" (rule 7 of docs/RULES.md) are fields
/// too, left out of this documentation: they exist for `quire bench`, and the defaults are the
/// mechanisms this crate is about. The reclaim policy is a documented choice
/// ([`CacheConfig::reclaim`], [`CacheConfig::loop_protection`]).
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
    /// Blocking I/O threads of the engine: all of its I/O with [`crate::bio::IoEngineKind::Threads`], the
    /// I/O of stores without a file descriptor with io_uring. Default 2 (0: requests run on
    /// the thread that submits them, so readahead is synchronous).
    pub io_threads: usize,
    /// The I/O engine under the stores (see [`crate::bio`]). Default
    /// [`IoEngineChoice::Auto`] (io_uring where the kernel allows it), or what
    /// `QUIRE_IO_ENGINE` names.
    pub io_engine: IoEngineChoice,
    /// The folio lock's wait policy (the default is the exact one; others are for benchmarks).
    #[doc(hidden)] // a "before" policy for `quire bench`
    pub wait_policy: WaitPolicy,
    /// The index insert's walk policy (single walk by default; multi for benchmarks).
    #[doc(hidden)] // a "before" policy for `quire bench`
    pub add_walks: AddWalks,
    /// How long an allocation may wait for reclaim to free memory before reporting
    /// [`FilemapError::NoMemory`] (every frame pinned by references or locks). Default 5 s.
    pub alloc_timeout: Duration,
    /// Which reclaim runs: the multi-generational LRU (the default), the classic active and
    /// inactive lists, or the clock they replaced. See [`crate::vmscan`].
    pub reclaim: ReclaimPolicy,
    /// Whether the multi-generational LRU protects a resident share of loops larger than the
    /// cache by adaptive insertion (default on; see [`crate::vmscan::lru_gen`]). Ignored by
    /// the other policies.
    pub loop_protection: bool,
    /// Whether refaults may activate folios as part of the working set (default on; off counts
    /// refaults only, for benchmarks).
    #[doc(hidden)] // a "before" policy for `quire bench`
    pub workingset: bool,
    /// Whether the shadow shrinker keeps the index nodes holding only shadow entries below
    /// one per 16 frames of the budget (default on; off lets them grow, for benchmarks).
    #[doc(hidden)] // a "before" policy for `quire bench`
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
            wait_policy: WaitPolicy::Exact,
            add_walks: AddWalks::Single,
            alloc_timeout: Duration::from_secs(5),
            reclaim: ReclaimPolicy::MultiGen,
            loop_protection: true,
            workingset: true,
            shadow_shrinker: true,
        }
    }
}

/// Errors of the page cache. Nothing cached is lost when one is returned.
#[derive(Debug, thiserror::Error)]
pub enum FilemapError {
    /// `offset + len` is past [`MAX_FILE_SIZE`] (or overflows): `EFBIG` for a file system.
    #[error("offset {offset} with length {len} is past the largest file offset")]
    Overflow {
        /// The offset asked for.
        offset: u64,
        /// The length asked for.
        len: u64,
    },
    /// The backing store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Write-back of this file failed since this handle last asked; the data is still cached
    /// and dirty, and will be written again.
    #[error("write-back failed: {}", io::Error::from_raw_os_error(*errno))]
    Writeback {
        /// The error number (EIO for faults without one).
        errno: i32,
    },
    /// The frame pool could not be made.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A configuration value is out of range.
    #[error("bad cache configuration: {0}")]
    Config(String),
    /// An index operation failed (an internal inconsistency; nothing was changed).
    #[error(transparent)]
    Index(#[from] crate::xarray::XaError),
    /// The cache's background threads could not be started.
    #[error("could not start the cache's threads: {0}")]
    Threads(std::io::Error),
    /// No memory could be freed in time: every frame is pinned by references or locks.
    #[error("the page cache has no reclaimable memory (all {frames} frames are in use)")]
    NoMemory {
        /// Frames in the cache.
        frames: usize,
    },
    /// The cache's dirty memory is at its limit and the last write-back of this file failed:
    /// the write is refused (nothing more of it is written) rather than let the file's
    /// unwritable data fill the cache. Writes go through again once a write-back of the file
    /// succeeds, or dirty memory falls below the limit.
    #[error("dirty memory is at its limit and write-back of this file fails: {}", io::Error::from_raw_os_error(*errno))]
    DirtyLimit {
        /// The error of the file's last write-back (EIO for faults without one).
        errno: i32,
    },
}

impl FilemapError {
    /// The error's [`io::ErrorKind`].
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            FilemapError::Overflow { .. } => io::ErrorKind::FileTooLarge,
            FilemapError::Config(_) | FilemapError::Index(_) => io::ErrorKind::InvalidInput,
            FilemapError::Store(e) => e.kind(),
            FilemapError::Writeback { errno } | FilemapError::DirtyLimit { errno } => {
                io::Error::from_raw_os_error(*errno).kind()
            }
            FilemapError::Pool(_) | FilemapError::NoMemory { .. } => io::ErrorKind::OutOfMemory,
            FilemapError::Threads(e) => e.kind(),
        }
    }
}

/// The result type of page cache operations.
pub type Result<T, E = FilemapError> = std::result::Result<T, E>;

/// The errno recorded for a store error in a mapping's [`ErrSeq`].
fn errno_of(e: &StoreError) -> u16 {
    const EIO: i32 = 5;
    let errno = match e {
        StoreError::Io { errno: Some(n), .. } => *n,
        _ => EIO,
    };
    u16::try_from(errno).unwrap_or(EIO as u16)
}

/// Checks that `offset + len` stays within a file.
fn check_range(offset: u64, len: usize) -> Result<u64> {
    let len = len as u64;
    match offset.checked_add(len) {
        Some(end) if end <= MAX_FILE_SIZE => Ok(end),
        _ => Err(FilemapError::Overflow { offset, len }),
    }
}

/// A mapping's handle on a folio in its index: the descriptor's address. Dropping it puts
/// nothing: the index's counted reference is taken and put explicitly by the mapping, which
/// knows the pool. Descriptors are never freed, so no grace period is needed.
pub(crate) struct FolioPtr(pub(crate) NonNull<Folio>);

// SAFETY: a `FolioPtr` is an address of a descriptor that lives as long as the pool; `Folio` is
// `Sync`.
unsafe impl Send for FolioPtr {}
// SAFETY: as for `Send`: shared access to a `FolioPtr` gives only the address.
unsafe impl Sync for FolioPtr {}

// SAFETY: `into_raw` returns the descriptor address, 64-byte aligned and valid for shared access
// as long as the pool lives (the mapping that owns the array keeps the pool alive); `from_raw`
// takes back exactly such an address.
unsafe impl XaPointer for FolioPtr {
    type Target = Folio;
    const NEEDS_GRACE_PERIOD: bool = false;

    fn into_raw(this: Self) -> NonNull<Folio> {
        this.0
    }

    unsafe fn from_raw(ptr: NonNull<Folio>) -> Self {
        FolioPtr(ptr)
    }
}

/// The shared state of a cache; mappings hold it alive.
pub(crate) struct Cache {
    pool: FramePool,
    config: CacheConfig,
    /// Live mappings by id, for the flusher and for reclaim (folio → mapping).
    files: Mutex<HashMap<usize, Weak<Mapping>>>,
    next_id: AtomicUsize,
    /// Frames of folios in an index.
    cached: AtomicUsize,
    /// Frames of dirty folios.
    dirty: AtomicUsize,
    /// Frames of folios under write-back.
    writeback: AtomicUsize,
    /// Reclaim: the LRU lists, workingset, background reclaim.
    vm: Vmscan,
    workers: workers::Workers,
    /// The I/O engine: reads and writes of folios in batches.
    pub(crate) bio: crate::bio::Engine,
    /// The anonymous memory on this cache's budget, if any (see [`crate::mm`]): where reclaim
    /// sends anonymous folios.
    anon: std::sync::RwLock<Option<Weak<dyn vmscan::AnonOwner>>>,
}

impl Cache {
    pub(crate) fn mapping(&self, id: usize) -> Option<Arc<Mapping>> {
        self.files.lock().unwrap().get(&id).and_then(Weak::upgrade)
    }

    fn mappings(&self) -> Vec<Arc<Mapping>> {
        self.files
            .lock()
            .unwrap()
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    fn dirty_background_frames(&self) -> usize {
        self.config.dirty_background >> FRAME_SHIFT
    }

    fn dirty_limit_frames(&self) -> usize {
        (self.config.dirty_limit >> FRAME_SHIFT).max(1)
    }

    /// A space's write to the file folio `f` was found when its last pte went: `f` becomes
    /// dirty in its file, if it is still there (see [`immap`]).
    pub(crate) fn mark_mapped_dirty(&self, f: &Folio) {
        if let Some(m) = self.mapping(f.mapping()) {
            m.mark_dirty_mapped(f);
        }
    }

    /// The frame pool.
    pub(crate) fn pool(&self) -> &FramePool {
        &self.pool
    }

    /// The reclaim state.
    pub(crate) fn vm(&self) -> &Vmscan {
        &self.vm
    }

    /// Makes `owner` the cache's anonymous memory, unless another one is alive; whether it did.
    pub(crate) fn set_anon(&self, owner: Weak<dyn vmscan::AnonOwner>) -> bool {
        let mut a = self.anon.write().unwrap_or_else(|e| e.into_inner());
        if a.as_ref().is_some_and(|w| w.strong_count() > 0) {
            return false;
        }
        *a = Some(owner);
        true
    }

    fn anon_owner(&self) -> Option<Arc<dyn vmscan::AnonOwner>> {
        self.anon
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(Weak::upgrade)
    }

    /// Allocates a folio of at most `order` for the page cache, reclaiming as the policy says;
    /// see [`Vmscan::alloc`].
    pub(crate) fn alloc(&self, order: u32, must: bool) -> Result<Option<FolioRef<'_>>> {
        self.vm
            .alloc(&self.pool, self, order, must)
            .map_err(|vmscan::NoMemory| FilemapError::NoMemory {
                frames: self.pool.nr_frames(),
            })
    }
}

impl vmscan::Owners for Cache {
    fn evict(&self, g: &mut FolioGuard<'_>, shadow: &mut dyn FnMut(&Folio) -> u64) -> bool {
        match self.mapping(g.mapping()) {
            Some(m) => m.evict(g, shadow),
            None => false,
        }
    }

    fn write_back(&self, g: FolioGuard<'_>) {
        if let Some(m) = self.mapping(g.mapping()) {
            if m.still_mapped(&g, g.index()) {
                let _ = m.write_folio(g);
            }
        }
    }

    fn wake_flusher(&self) {
        self.workers.kick_for_reclaim();
    }

    fn delete_shadow_node(&self, n: &ListedNode) -> bool {
        self.mapping(n.token)
            .is_some_and(|m| m.pages.delete_listed(n))
    }

    fn shrink_anon(&self, g: &mut FolioGuard<'_>, check_references: bool) -> vmscan::AnonFate {
        match self.anon_owner() {
            Some(a) => a.shrink_anon(g, check_references),
            None => vmscan::AnonFate::Keep,
        }
    }

    fn can_swap(&self) -> bool {
        self.anon_owner().is_some_and(|a| a.can_swap())
    }

    fn unmap_file(&self, g: &mut FolioGuard<'_>, check_references: bool) -> vmscan::MappedFate {
        match self.mapping(g.mapping()) {
            Some(m) => m.reclaim_unmap(g, check_references),
            None => vmscan::MappedFate::Keep,
        }
    }
}

impl vmscan::Balance for Cache {
    fn kswapd_balance(&self, order: u32, stop: &dyn Fn() -> bool) -> bool {
        self.vm.balance(&self.pool, self, order, stop)
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.vm.stop();
        self.workers.stop();
        self.bio.stop();
        // Batched folios hold references, which must be put before the pool goes.
        self.vm.drain_all(&self.pool);
    }
}

/// A page cache: one memory budget shared by any number of files. Cloning gives another handle
/// on the same cache.
#[derive(Clone)]
pub struct PageCache {
    cache: Arc<Cache>,
}

impl PageCache {
    /// Makes a cache as `config` says, with its flusher and readahead threads.
    pub fn new(config: CacheConfig) -> Result<PageCache> {
        if config.max_folio_order > crate::mem::buddy::MAX_ORDER {
            return Err(FilemapError::Config(format!(
                "max_folio_order {} is above {}",
                config.max_folio_order,
                crate::mem::buddy::MAX_ORDER
            )));
        }
        if config.dirty_limit == 0 || config.dirty_limit < config.dirty_background {
            return Err(FilemapError::Config(format!(
                "dirty_limit {} must be positive and at least dirty_background {}",
                config.dirty_limit, config.dirty_background
            )));
        }
        let pool = FramePool::new(config.capacity)?;
        let bio = crate::bio::Engine::start(
            config.io_engine,
            config.io_threads,
            (pool.base(), pool.capacity()),
        )
        .map_err(FilemapError::Threads)?;
        let vm = Vmscan::new(VmConfig {
            policy: config.reclaim,
            workingset: config.workingset,
            loop_protection: config.loop_protection,
            shadow_shrinker: config.shadow_shrinker,
            frames: pool.nr_frames(),
            largest_folio: 1 << config.max_folio_order,
            wait_policy: config.wait_policy,
            alloc_timeout: config.alloc_timeout,
        });
        let cache = Arc::new(Cache {
            pool,
            files: Mutex::new(HashMap::new()),
            next_id: AtomicUsize::new(1),
            cached: AtomicUsize::new(0),
            dirty: AtomicUsize::new(0),
            writeback: AtomicUsize::new(0),
            vm,
            workers: workers::Workers::new(),
            bio,
            anon: std::sync::RwLock::new(None),
            config,
        });
        let started = cache
            .workers
            .spawn(Arc::downgrade(&cache), &cache.config)
            .and_then(|()| {
                let weak: Weak<Cache> = Arc::downgrade(&cache);
                cache.vm.start_kswapd(weak)
            });
        started.map_err(FilemapError::Threads)?;
        Ok(PageCache { cache })
    }

    /// Opens `store` as a cached file: a new mapping, with its length read from the store.
    pub fn open(&self, store: impl Store + 'static) -> Result<CachedFile> {
        self.open_boxed(Box::new(store))
    }

    /// [`PageCache::open`] for a boxed store.
    pub fn open_boxed(&self, store: Box<dyn Store>) -> Result<CachedFile> {
        let len = store.len()?;
        let id = self.cache.next_id.fetch_add(1, Ordering::Relaxed);
        let mapping = Mapping::new_arc(id, self.cache.clone(), store, len);
        self.cache
            .files
            .lock()
            .unwrap()
            .insert(id, Arc::downgrade(&mapping));
        Ok(CachedFile::new(mapping))
    }

    /// The configuration the cache was made with.
    pub fn config(&self) -> &CacheConfig {
        &self.cache.config
    }

    /// The frame pool (the memory budget).
    pub fn pool(&self) -> &FramePool {
        &self.cache.pool
    }

    /// The cache's shared state, for the layers built on it (`mm`).
    pub(crate) fn shared(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// What the cache holds now. First applies the folio batches waiting to be applied and
    /// returns the allocator's per-thread caches to its free lists, so that the figures add up
    /// (every cached folio on one list, freed frames counted free).
    pub fn stats(&self) -> CacheStats {
        let c = &self.cache;
        c.vm.drain_all(&c.pool);
        c.pool.drain();
        let mappings = c.mappings();
        let index_nodes: usize = mappings.iter().map(|m| m.pages.node_count()).sum();
        CacheStats {
            frames: c.pool.nr_frames(),
            free_frames: c.pool.free_frames(),
            cached_frames: c.cached.load(Ordering::Relaxed),
            dirty_frames: c.dirty.load(Ordering::Relaxed),
            writeback_frames: c.writeback.load(Ordering::Relaxed),
            files: mappings.len(),
            lru_frames: c.vm.list_sizes(),
            index_nodes,
            index_heap_bytes: index_nodes * XArray::<FolioPtr>::NODE_BYTES,
            shadow_nodes: c.vm.shadow_nodes().len(),
            max_shadow_nodes: c.vm.max_shadow_nodes(),
            nonresident_age: c.vm.nonresident_age(),
            watermarks: c.vm.watermarks(),
            lru_gen: c.vm.lru_gen_stats(&c.pool),
            io_engine: c.bio.info().clone(),
            io: c.bio.stats(),
            vmstat: c.vm.counters.snapshot(),
        }
    }

    /// Checks the LRU lists against the indexes (for tests; stops the world for a moment by
    /// holding the LRU lock): under the LRU policy every folio in an index is on exactly one
    /// list and every listed folio is in an index, and the lists' frame counts add up to the
    /// cached frames. Applies the waiting batches first. Folios that reclaim holds isolated
    /// at the moment are allowed off the lists.
    pub fn check_lru(&self) -> std::result::Result<(), String> {
        let c = &self.cache;
        c.vm.drain_all(&c.pool);
        let anon = c.anon_owner();
        c.vm.check_lists(&c.pool, &|f: &Folio| {
            if f.is_anon() {
                return anon.as_ref().is_some_and(|a| a.owns(f));
            }
            c.mapping(f.mapping())
                .is_some_and(|m| m.still_mapped(f, f.index()))
        })
    }

    /// Writes back every dirty folio of every file and waits for it (like `sync(2)`); returns
    /// the first error met. Errors are also recorded for each file's `fsync`.
    pub fn sync_all(&self) -> Result<()> {
        let mut first = None;
        for m in self.cache.mappings() {
            if let Err(e) = m.write_back_range(0, u64::MAX, true) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Runs reclaim in this thread until at least `frames` frames were freed or a round frees
    /// nothing; returns the frames freed. Under the LRU policy dirty folios at the inactive
    /// tail are left to the flusher (woken), so call [`PageCache::sync_all`] first to make
    /// everything reclaimable; the clock policy writes them back itself.
    pub fn shrink(&self, frames: usize) -> usize {
        let c = &self.cache;
        let mut freed = 0;
        while freed < frames {
            let got = c.vm.try_to_free_pages(&c.pool, &**c, frames - freed);
            if got == 0 {
                break;
            }
            freed += got;
        }
        freed
    }
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache")
            .field("stats", &self.stats())
            .finish()
    }
}

/// The error of a read that found the file ending at `offset`.
fn short_read(offset: u64) -> FilemapError {
    FilemapError::Store(StoreError::Io {
        op: crate::store::Op::Read,
        offset,
        kind: io::ErrorKind::UnexpectedEof,
        errno: None,
    })
}

/// One open handle on a cached file: the mapping, plus this handle's readahead state and its
/// position in the file's write-back error sequence. Made by [`PageCache::open`].
///
/// Reads and writes are positional, like `pread` and `pwrite` (there is no file position;
/// many threads may use one handle at once). Besides its own methods, which return the typed
/// [`FilemapError`], a `CachedFile` implements `std::os::unix::fs::FileExt` (see that impl for
/// how the two sets of names coexist), and [`CachedFile::cursor`] gives a [`FileCursor`] with
/// `Read`, `Write` and `Seek`.
///
/// ```
/// use std::io::{Read, Write};
/// use quire::{CacheConfig, MemStore, PageCache};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cache = PageCache::new(CacheConfig::new(8 << 20))?;
/// let file = cache.open(MemStore::new())?;
/// file.write_all_at(0, b"positional")?;
/// let mut text = String::new();
/// file.cursor().read_to_string(&mut text)?;
/// assert_eq!(text, "positional");
/// write!(file.cursor(), "cursor")?; // a cursor starts at 0
/// assert_eq!(file.len(), 10);
/// file.close()?; // fsync, reporting its error (dropping a handle cannot)
/// # Ok(())
/// # }
/// ```
pub struct CachedFile {
    mapping: Arc<Mapping>,
    ra: Readahead,
    since: Mutex<ErrSeqSince>,
}

impl CachedFile {
    fn new(mapping: Arc<Mapping>) -> CachedFile {
        let max =
            ((mapping.cache.config.readahead_max as u64) >> FRAME_SHIFT).min(mapping.ra_cap());
        mapping.handles.fetch_add(1, Ordering::Relaxed);
        let since = mapping.errseq.sample();
        CachedFile {
            mapping,
            ra: Readahead::new(max),
            since: Mutex::new(since),
        }
    }

    /// Another handle on the same file, with its own readahead state, that will see write-back
    /// errors recorded from now on (and any that nobody has seen yet).
    pub fn reopen(&self) -> CachedFile {
        CachedFile::new(self.mapping.clone())
    }

    /// The file's length in bytes (including data written but not yet written back).
    pub fn len(&self) -> u64 {
        self.mapping.size()
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads up to `buf.len()` bytes at `offset` into `buf`; returns how many (fewer at the end
    /// of the file, 0 at or past it).
    ///
    /// A read that lies in one cached folio is served without taking a reference on it (a
    /// copy validated by the folio's byte sequence; see [`crate::mem::folio`]); anything else
    /// takes the full path. [`CachedFile::reader`] saves the read-side critical section each
    /// call enters too.
    #[doc(alias = "filemap_read")]
    #[inline]
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        // The thread's translation first, inline in the caller: a hit on a folio this thread
        // found before costs no walk, no pin and no call.
        let m = &*self.mapping;
        if let Some(t) = m.thread_translation(offset >> FRAME_SHIFT) {
            if let Some(n) =
                m.read_at_translated(&self.ra, &t, offset, buf, |end| self.ra.swap_read_end(end))
            {
                crate::stats::count(crate::stats::Event::PageCacheHits);
                return Ok(n);
            }
        }
        self.read_at_untranslated(offset, buf)
    }

    /// [`CachedFile::read_at`] when the thread's translation did not serve: a hit found by a
    /// walk under a pin (its translation kept for the next time), or the full path.
    #[inline(never)]
    fn read_at_untranslated(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let m = &*self.mapping;
        let hit = {
            let guard = crate::sync::rcu::pin();
            m.read_at_hit(&self.ra, offset, buf, &guard, |end| {
                self.ra.swap_read_end(end)
            })
        };
        match hit {
            Some((n, t)) => {
                m.remember_translation(&t);
                crate::stats::count(crate::stats::Event::PageCacheHits);
                Ok(n)
            }
            None => m.read_at(&self.ra, offset, buf),
        }
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with
    /// [`io::ErrorKind::UnexpectedEof`] (as a store error) if the file is shorter.
    pub fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.read_at(offset, buf)?;
        if n < buf.len() {
            return Err(short_read(offset + n as u64));
        }
        Ok(())
    }

    /// A reader of this handle that keeps its read-side critical section across hits (see
    /// [`FileReader`]): for a thread that reads much, one per thread.
    pub fn reader(&self) -> FileReader<'_> {
        FileReader::new(self)
    }

    /// The up-to-date folio holding page `index`, read from the store if needed, without
    /// copying: its bytes are `bytes()` of the returned reference; page `index` starts at byte
    /// `(index - folio.index()) * 4096` of them. Bytes past the end of the file read as zeros.
    /// Fails past the end of the file with an `UnexpectedEof` store error.
    #[doc(alias = "read_cache_folio")]
    pub fn read_folio(&self, index: u64) -> Result<FolioRef<'_>> {
        let m = &*self.mapping;
        if let Some(t) = m.thread_translation(index) {
            if let Some(f) = m.read_folio_translated(&self.ra, &t, index) {
                crate::stats::count(crate::stats::Event::PageCacheHits);
                return Ok(f);
            }
        }
        let hit = {
            let guard = crate::sync::rcu::pin();
            m.read_folio_hit(&self.ra, index, &guard)
        };
        match hit {
            Some((f, t)) => {
                m.remember_translation(&t);
                crate::stats::count(crate::stats::Event::PageCacheHits);
                Ok(f)
            }
            None => m.read_folio(&self.ra, index),
        }
    }

    /// Runs `f` on the bytes of the up-to-date folio holding page `index` and on the folio's
    /// first page (page `index` starts at byte `(index - first) * 4096` of them), reading it
    /// from the store if needed: [`CachedFile::read_folio`] for a borrow that ends with `f`.
    /// Bytes past the end of the file read as zeros. Fails past the end of the file with an
    /// `UnexpectedEof` store error.
    ///
    /// A hit through the calling thread's translation of the folio (any earlier hit on it
    /// leaves one) takes no reference: the thread names the folio in a slot of its own, which
    /// writers, eviction and the free look at (`mem/borrow.rs`), so the hit writes no line
    /// another thread reads. Other calls (the first after a miss, a borrow inside `f`) take a
    /// reference for the duration of `f`. Either way the bytes stay stable while `f` runs: a
    /// write to the folio meanwhile (from another thread, or from `f` itself) goes to a copy,
    /// and eviction passes it by. Nothing waits for a borrow to end, so `f` may block, but like
    /// a reference a borrow keeps the folio's frames from being reused: keep it short.
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::from_vec(b"hello".repeat(2000)))?;
    /// let word = file.with_folio(1, |bytes, first| {
    ///     let at = (1 - first) as usize * 4096;
    ///     bytes[at..at + 5].to_vec()
    /// })?;
    /// assert_eq!(word, b"elloh", "byte 4096 is the second of a \"hello\"");
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias = "filemap_read")]
    #[inline]
    pub fn with_folio<R>(&self, index: u64, f: impl FnOnce(&[u8], u64) -> R) -> Result<R> {
        match self.mapping.with_folio_translated(&self.ra, index, f) {
            Ok(r) => {
                crate::stats::count(crate::stats::Event::PageCacheHits);
                Ok(r)
            }
            Err(f) => self.with_folio_referenced(index, f),
        }
    }

    /// [`CachedFile::with_folio`] through a reference: the walked hit, or the full path.
    #[inline(never)]
    fn with_folio_referenced<R>(&self, index: u64, f: impl FnOnce(&[u8], u64) -> R) -> Result<R> {
        Ok(lend(&self.read_folio(index)?, f))
    }

    /// [`CachedFile::read_folio`] as an [`OwnedFolio`]: a reference that borrows neither this
    /// handle nor the cache (`'static`), for a zero-copy buffer that must outlive them or move
    /// across threads — with the `bytes` feature, `OwnedFolio::into_bytes`. Its bytes are
    /// stable while it lives, like [`CachedFile::read_folio`]'s; it keeps the cache's memory
    /// alive until dropped.
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::from_vec(vec![7u8; 4096]))?;
    /// let before = file.read_folio_owned(0)?;
    /// file.write_all_at(0, b"new")?;
    /// assert_eq!(&before[..3], &[7, 7, 7], "a snapshot: writes go to a copy");
    /// assert_eq!(&file.read_folio_owned(0)?[..3], b"new");
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_folio_owned(&self, index: u64) -> Result<OwnedFolio> {
        let f = self.mapping.read_folio(&self.ra, index)?;
        Ok(OwnedFolio::new(f, self.mapping.cache.clone()))
    }

    /// [`CachedFile::read_folio`] for a fault of a space, which does not borrow the bytes: a
    /// folio spaces map writable stays so.
    #[doc(alias = "filemap_fault")]
    pub(crate) fn fault_folio(&self, index: u64) -> Result<FolioRef<'_>> {
        self.mapping.read_folio_unprotected(&self.ra, index)
    }

    /// The file this handle opens (for `mm`'s file mappings).
    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        &self.mapping
    }

    /// How many mappings of spaces the file has (`mm`'s `Space::map_file`; each piece a
    /// partial munmap leaves counts once).
    pub fn mappings(&self) -> usize {
        self.mapping.i_mmap.len()
    }

    /// Writes `data` at `offset`, extending the file if it ends past the end, and returns how
    /// many bytes it wrote, like `pwrite`: all of them, or — when an error stops the write
    /// after a prefix of whole pieces was written — that prefix's length (the error comes
    /// from the next call, as it would from `pwrite`). It fails only when nothing was written.
    /// [`CachedFile::write_all_at`] completes the write or fails.
    ///
    /// Pages the write covers only in part are read first if not cached (a failed read stops
    /// the write there). The data is dirty in the cache until written back; the writer may
    /// wait if dirty memory is above the limit ([`CacheConfig::dirty_limit`]), and is refused
    /// with [`FilemapError::DirtyLimit`] if it stays there while this file's write-back fails.
    #[doc(alias = "generic_perform_write")]
    #[doc(alias = "pwrite")]
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<usize> {
        self.mapping.write_at(offset, data)
    }

    /// Writes all of `data` at `offset` or fails: [`CachedFile::write_at`] until everything is
    /// written. On an error, a prefix of `data` may have been written.
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::new())?;
    /// file.write_all_at(8192, b"past the end")?;
    /// assert_eq!(file.len(), 8192 + 12);
    /// let mut buf = [0xffu8; 4];
    /// file.read_exact_at(8188, &mut buf)?;
    /// assert_eq!(&buf, &[0, 0, 0, 0], "a gap reads as zeros");
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_all_at(&self, mut offset: u64, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let n = self.write_at(offset, data)?;
            if n == 0 {
                // `write_at` fails rather than write nothing; never loop on it.
                return Err(FilemapError::Store(StoreError::WriteZero { offset }));
            }
            offset += n as u64;
            data = &data[n..];
        }
        Ok(())
    }

    // ---- asynchronous counterparts ------------------------------------------------------

    /// [`CachedFile::read_at`] that awaits misses instead of blocking the thread: a miss
    /// submits its readahead window (the wanted folio included) to the I/O engine as one batch
    /// and the task waits in the folio's wait queue, woken when the read ends (the kernel's
    /// io_uring buffered read with `IOCB_WAITQ`). Hits complete without awaiting. Any executor
    /// runs it (std futures only).
    ///
    /// Cancel-safe: dropping the future leaves nothing locked and no waiter; reads it started
    /// finish into frame memory (never into `buf`) and stay cached. Allocation may still
    /// reclaim on the polling thread, as in [`CachedFile::read_at`].
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::from_vec(vec![7; 64 << 10]))?;
    /// let mut buf = [0u8; 100];
    /// // Any executor; this one is a few lines of std (see the crate's examples for tokio).
    /// let n = quire::filemap::block_on(file.read_at_async(10_000, &mut buf))?;
    /// assert_eq!((n, buf[0]), (100, 7));
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias("filemap_read", "IOCB_WAITQ"))]
    pub async fn read_at_async(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.mapping.read_at_async(&self.ra, offset, buf).await
    }

    /// Whether every byte of `offset .. offset + len` (cut at the end of the file) is cached
    /// and up to date right now, so that a read of it would not wait for the store: for a
    /// server that reads hits inline and hands misses to [`CachedFile::read_at_async`] on its
    /// runtime. A snapshot: reclaim may take a folio a moment later.
    #[doc(alias = "filemap_range_uptodate")]
    pub fn is_cached(&self, offset: u64, len: usize) -> bool {
        self.mapping.is_cached(offset, len)
    }

    /// [`CachedFile::read_exact_at`] that awaits misses ([`CachedFile::read_at_async`]).
    pub async fn read_exact_at_async(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.read_at_async(offset, buf).await?;
        if n < buf.len() {
            return Err(short_read(offset + n as u64));
        }
        Ok(())
    }

    /// [`CachedFile::read_folio`] that awaits a miss ([`CachedFile::read_at_async`]).
    #[doc(alias = "read_cache_folio")]
    pub async fn read_folio_async(&self, index: u64) -> Result<FolioRef<'_>> {
        self.mapping.read_folio_async(&self.ra, index).await
    }

    /// [`CachedFile::write_at`] that awaits, instead of blocking on, the reads a write needs:
    /// the pages it covers only in part that are not cached are read first
    /// ([`CachedFile::read_folio_async`]), then the write is made in the cache. Dirty
    /// throttling ([`CacheConfig::dirty_limit`]) may still block the thread for a moment.
    pub async fn write_at_async(&self, offset: u64, data: &[u8]) -> Result<usize> {
        if data.is_empty() {
            return self.write_at(offset, data);
        }
        check_range(offset, data.len())?;
        let end = offset + data.len() as u64;
        let size = self.len();
        for pos in [offset, end - 1] {
            let index = pos >> FRAME_SHIFT;
            let page_start = index << FRAME_SHIFT;
            let whole = offset <= page_start && end >= page_start + PAGE_SIZE;
            if !whole && page_start < size {
                self.read_folio_async(index).await?;
            }
        }
        self.write_at(offset, data)
    }

    /// [`CachedFile::write_all_at`] that awaits reads ([`CachedFile::write_at_async`]).
    pub async fn write_all_at_async(&self, mut offset: u64, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let n = self.write_at_async(offset, data).await?;
            if n == 0 {
                return Err(FilemapError::Store(StoreError::WriteZero { offset }));
            }
            offset += n as u64;
            data = &data[n..];
        }
        Ok(())
    }

    /// Starts reading every page of the byte ranges `ranges` that is not cached, as one batch
    /// of requests to the I/O engine, and returns without waiting: a synchronous caller's way
    /// to put many misses in flight at once (`readahead(2)`, `POSIX_FADV_WILLNEED`), after
    /// which its reads of those pages hit or wait for reads already under way. Pages already
    /// cached are skipped; ranges past the end of the file are cut to it; it stops early when
    /// memory is short. Returns the pages submitted.
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::from_vec(vec![1; 1 << 20]))?;
    /// let pages = file.prefetch(&[0..8192, 100_000..104_096])?;
    /// assert!(pages >= 3);
    /// let mut buf = [0u8; 8192];
    /// file.read_exact_at(0, &mut buf)?; // waits for the read under way, if any
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias("readahead", "force_page_cache_ra", "POSIX_FADV_WILLNEED"))]
    pub fn prefetch(&self, ranges: &[std::ops::Range<u64>]) -> Result<u64> {
        self.mapping.prefetch(ranges)
    }

    /// A [`FileCursor`] at the start of the file: `std::io::{Read, Write, Seek}` on this
    /// handle.
    pub fn cursor(&self) -> FileCursor<&CachedFile> {
        FileCursor::new(self)
    }

    /// Sets the file's length: cutting drops every folio wholly past the end (dirty data there
    /// is dead) and zeroes the tail of the last one; growing reads as zeros.
    #[doc(alias = "truncate_setsize")]
    pub fn set_len(&self, len: u64) -> Result<()> {
        self.mapping.set_len(len)
    }

    /// Writes back every dirty folio of the file, waits for all write-back, syncs the store,
    /// and reports a write-back error recorded since this handle last reported one.
    #[doc(alias("vfs_fsync_range", "file_write_and_wait_range"))]
    pub fn fsync(&self) -> Result<()> {
        self.sync_range(0, u64::MAX)
    }

    /// Writes back every dirty folio of the file and waits for all write-back, then reports a
    /// write-back error recorded since this handle last reported one — [`CachedFile::fsync`]
    /// without syncing the store: the data has reached the store, not stable storage (what
    /// NFS does when a file is closed, so that `close` can report the error).
    #[doc(alias = "filemap_flush")]
    pub fn flush(&self) -> Result<()> {
        let written = self.mapping.write_back_range(0, u64::MAX, true);
        let mut since = self.since.lock().unwrap();
        if let Some(errno) = self.mapping.errseq.check_and_advance(&mut since) {
            return Err(FilemapError::Writeback {
                errno: i32::from(errno),
            });
        }
        written
    }

    /// [`CachedFile::fsync`] for the bytes `offset .. offset + len` only (the store is still
    /// synced whole).
    #[doc(alias = "sync_file_range")]
    pub fn sync_range(&self, offset: u64, len: u64) -> Result<()> {
        let first = offset >> FRAME_SHIFT;
        let last = offset.saturating_add(len.max(1) - 1) >> FRAME_SHIFT;
        let written = self.mapping.write_back_range(first, last, true);
        let synced = self.mapping.store.sync().map_err(|e| {
            // A failed sync may have lost written data: every handle must hear of it.
            self.mapping.record_error(&e);
            FilemapError::from(e)
        });
        let mut since = self.since.lock().unwrap();
        if let Some(errno) = self.mapping.errseq.check_and_advance(&mut since) {
            return Err(FilemapError::Writeback {
                errno: i32::from(errno),
            });
        }
        written.and(synced)
    }

    /// Writes back the file's dirty data and then drops every folio of it that nobody is using;
    /// returns the frames freed. Dirty folios that could not be written stay cached.
    #[doc(alias = "invalidate_mapping_pages")]
    pub fn invalidate(&self) -> Result<usize> {
        let _ = self.mapping.write_back_range(0, u64::MAX, true);
        Ok(self.mapping.invalidate())
    }

    /// Frames of this file in the cache.
    pub fn cached_frames(&self) -> usize {
        self.mapping.nr_frames.load(Ordering::Relaxed)
    }

    /// Bytes read from the store into this file's cache since it was opened (by every handle
    /// of it): its misses, readahead included, in bytes, whichever I/O engine read them — a
    /// file's hit ratio is `1 - store_bytes_read / bytes asked for`. The kernel's per-task
    /// `read_bytes` (`/proc/<pid>/io`), kept per file.
    #[doc(alias = "read_bytes")]
    pub fn store_bytes_read(&self) -> u64 {
        self.mapping.read_bytes.load(Ordering::Relaxed)
    }

    /// Closes the handle after an `fsync`, reporting its error: dropping a handle also writes
    /// back dirty data (once the file's last handle goes), but cannot report a failure.
    pub fn close(self) -> Result<()> {
        self.fsync()
    }
}

impl Drop for CachedFile {
    /// The file's last handle closes it now (write-back, then every folio freed), rather than
    /// whichever thread happens to drop the mapping's last `Arc`.
    fn drop(&mut self) {
        if self.mapping.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.mapping.close();
        }
    }
}

impl std::fmt::Debug for CachedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedFile")
            .field("id", &self.mapping.id)
            .field("len", &self.len())
            .field("cached_frames", &self.cached_frames())
            .finish()
    }
}

/// `f` run on the bytes and first page of `folio`, a reference `read_folio` returned (so up to
/// date): the referenced path of the handle's and the reader's `with_folio`.
fn lend<R>(folio: &FolioRef<'_>, f: impl FnOnce(&[u8], u64) -> R) -> R {
    let bytes = folio
        .bytes()
        .expect("read_folio returns an up-to-date folio");
    f(bytes, folio.index())
}
