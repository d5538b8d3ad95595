//! [`PageCache`]: the memory budget, the background threads and the files that share them;
//! and its shared state, [`Cache`], which every mapping holds alive and reclaim calls back.

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::mapping::Mapping;
use super::{workers, CacheConfig, CacheStats, CachedFile, FilemapError, Result};
use crate::mem::folio::{Folio, FolioGuard, FolioRef, FreeTicket, FRAME_SHIFT};
use crate::mem::pool::FramePool;
use crate::store::Store;
use crate::vmscan::{self, VmConfig, Vmscan};
use crate::xarray::{ListedNode, XArray, XaPointer};

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
    pub(super) pool: FramePool,
    pub(super) config: CacheConfig,
    /// Live mappings by id, for the flusher and for reclaim (folio → mapping).
    pub(super) files: Mutex<HashMap<usize, Weak<Mapping>>>,
    pub(super) next_id: AtomicUsize,
    /// Frames of folios in an index.
    pub(super) cached: AtomicUsize,
    /// Frames of dirty folios.
    pub(super) dirty: AtomicUsize,
    /// Frames of folios under write-back.
    pub(super) writeback: AtomicUsize,
    /// Reclaim: the LRU lists, workingset, background reclaim.
    pub(super) vm: Vmscan,
    pub(super) workers: workers::Workers,
    /// The I/O engine: reads and writes of folios in batches.
    pub(crate) bio: crate::bio::Engine,
    /// The anonymous memory on this cache's budget, if any (see [`crate::mm`]): where reclaim
    /// sends anonymous folios.
    pub(super) anon: std::sync::RwLock<Option<Weak<dyn vmscan::AnonOwner>>>,
}

impl Cache {
    pub(crate) fn mapping(&self, id: usize) -> Option<Arc<Mapping>> {
        self.files.lock().unwrap().get(&id).and_then(Weak::upgrade)
    }

    pub(super) fn mappings(&self) -> Vec<Arc<Mapping>> {
        self.files
            .lock()
            .unwrap()
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    pub(super) fn dirty_background_frames(&self) -> usize {
        self.config.dirty_background >> FRAME_SHIFT
    }

    pub(super) fn dirty_limit_frames(&self) -> usize {
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

    pub(super) fn anon_owner(&self) -> Option<Arc<dyn vmscan::AnonOwner>> {
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
    fn evict<'p>(
        &self,
        g: &mut FolioGuard<'p>,
        shadow: &mut dyn FnMut(&Folio) -> u64,
        memo: &mut vmscan::OwnerMemo,
    ) -> Option<FreeTicket<'p>> {
        let id = g.mapping();
        memo.get(id, || self.mapping(id))?.evict(g, shadow)
    }

    fn write_back(&self, g: FolioGuard<'_>) {
        if g.is_wb_failed() {
            // Parked after failed write-backs: only an explicit write-back retries it.
            return;
        }
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

    fn kswapd_wanted(&self) -> bool {
        self.vm.below_low(&self.pool)
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
            workingset: config.workingset(),
            loop_protection: config.loop_protection,
            shadow_shrinker: config.shadow_shrinker(),
            frames: pool.nr_frames(),
            largest_folio: 1 << config.max_folio_order,
            wait_policy: config.wait_policy(),
            alloc_timeout: config.alloc_timeout,
            background_reclaim: config.background_reclaim,
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

    /// What the cache holds now, read from its counters: cheap enough for a monitor to call
    /// often, it neither applies the per-CPU folio batches nor visits the files nor takes the
    /// allocator's locks. So the LRU lists' sizes leave out the folios still waiting in a
    /// batch (15 at most per batch), and the free frames those freed while a zero-copy borrow
    /// of them was live, until the allocator frees them (see [`CacheStats`]).
    pub fn stats(&self) -> CacheStats {
        let c = &self.cache;
        let index_nodes = c.vm.shadow_nodes().array_nodes();
        CacheStats {
            frames: c.pool.nr_frames(),
            free_frames: c.pool.free_frames_hint(),
            cached_frames: c.cached.load(Ordering::Relaxed),
            dirty_frames: c.dirty.load(Ordering::Relaxed),
            writeback_frames: c.writeback.load(Ordering::Relaxed),
            files: c.files.lock().unwrap().len(),
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

    /// Applies the folio batches waiting on every CPU and returns the allocator's per-thread
    /// caches to its free lists (freeing the folios whose borrows have ended), so that the
    /// figures [`PageCache::stats`] reads add up: every cached folio on one list, every freed
    /// frame counted free. Takes every batch's lock and the allocator's; for tests and
    /// `quire bench`.
    #[cfg(feature = "bench-internals")]
    pub fn drain_batches(&self) {
        let c = &self.cache;
        c.vm.drain_all(&c.pool);
        c.pool.drain();
    }

    /// [`PageCache::stats`] with every figure exact at one moment, for tests and `quire bench`:
    /// first [`PageCache::drain_batches`], then the free frames counted under the allocator's
    /// locks, and the files and their index nodes counted by visiting every file.
    #[cfg(feature = "bench-internals")]
    pub fn stats_exact(&self) -> CacheStats {
        self.drain_batches();
        let c = &self.cache;
        let mappings = c.mappings();
        let index_nodes: usize = mappings.iter().map(|m| m.pages.node_count()).sum();
        CacheStats {
            free_frames: c.pool.free_frames(),
            files: mappings.len(),
            index_nodes,
            index_heap_bytes: index_nodes * XArray::<FolioPtr>::NODE_BYTES,
            ..self.stats()
        }
    }

    /// Checks the LRU lists against the indexes, for tests (it stops the world for a moment by
    /// holding the LRU lock): under the LRU policy every folio in an index is on exactly one
    /// list and every listed folio is in an index, and the lists' frame counts add up to the
    /// cached frames. Applies the waiting batches first. Folios that reclaim holds isolated
    /// at the moment are allowed off the lists.
    #[cfg(feature = "bench-internals")]
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
