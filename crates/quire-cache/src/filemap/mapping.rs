//! One cached file (the kernel's `address_space`): its index of folios, lookups, reads with
//! readahead, writes, truncation and invalidation. Write-back is in `writeback.rs`, eviction in
//! `reclaim.rs`; the rules they share are in the [module documentation](super).

use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Instant;

use super::readahead::{folio_orders, RaWindow, Readahead};
use super::{check_range, errno_of, Cache, FilemapError, FolioPtr, Result, DIRTY_MARK, PAGE_SIZE};
use crate::bio::{Bio, BioEnd, BioOp};
use crate::filemap::errseq::ErrSeq;
use crate::mem::folio::{
    Folio, FolioGuard, FolioRef, FrozenFolio, ACTIVE, DIRTY, FRAME_SHIFT, READAHEAD, REFERENCED,
    UPTODATE, WORKINGSET, WRITEBACK,
};
use crate::mem::pool::FramePool;
use crate::stats::{count, Event};
use crate::store::{Op, Result as StoreResult, Store, StoreError};
use crate::sync::bitwait::WaitPolicy;
use crate::sync::loom::SpinWait;
use crate::sync::rcu;
use crate::xarray::{Entry, XArray, XaError};

mod aio;
mod hit;
mod truncate;
pub(crate) use hit::Translation;

pub(crate) struct Mapping {
    pub(crate) id: usize,
    /// Names this mapping among every mapping of every cache the process ever made (never
    /// reused, never 0): the key of a thread's translations (`hit.rs`), which may outlive it.
    pub(crate) uid: u64,
    /// `uid` spread over the thread's translation slots (`hit.rs`), computed once.
    pub(crate) tlb_spread: u64,
    pub(crate) cache: Arc<Cache>,
    pub(crate) store: Box<dyn Store>,
    /// [`Store::keeps_evicted`], asked once: reclaim offers the store each clean folio it
    /// evicts (the kernel's cleancache).
    cleancache: bool,
    /// [`Store::completes_reads`], asked once: this file's read batches go to the store itself
    /// ([`Mapping::submit_reads`]).
    completes_reads: bool,
    pub(crate) pages: XArray<FolioPtr>,
    /// The file's length in bytes, including data not yet written back.
    size: AtomicU64,
    /// How far the store is known to hold the file's data: its length at open, raised by
    /// write-back, set by `set_len`. A store read that ends below it (and below `size`) means
    /// the store was cut behind the cache's back: the read fails with `UnexpectedEof` rather
    /// than caching zeros. Between it and `size` lie pages the cache extended the file over
    /// and has not written back yet: those are holes and read as zeros.
    pub(crate) store_size: AtomicU64,
    pub(crate) errseq: ErrSeq,
    /// Held shared by everything that inserts folios or writes, exclusive by truncation, so a
    /// folio is never inserted past a new end of file while the file is being cut.
    invalidate_lock: RwLock<()>,
    /// Orders the store's length changes against write-back: held shared while folios are
    /// written to the store, exclusively while the store's length is set from the file's (a
    /// write-back cutting the store back after writing a whole last page, a write-back
    /// extending the store before its batch, `set_len`). So a cut never uses a length read
    /// before another write-back extended the store past it, and an extension never uses a
    /// length read before a cut: whoever sets the store's length from `size` reads `size`
    /// while holding this exclusively (`set_len` publishes a new `size` before it takes it).
    ///
    /// Ordering: the invalidate lock (held by `set_len`, and by writers whose write may write
    /// a folio back) comes before this. It is held exclusively only around store calls, never
    /// while waiting for a folio's lock or write-back. A share belongs to a write request from
    /// before its submission to its completion, so a write-back call that has requests
    /// batched and not submitted submits them before it waits for a folio's lock or
    /// write-back (`write_back_range`): that folio's holder (a writer waiting for stable
    /// pages) may be waiting for a write-back that waits for this, exclusively, and so for
    /// those shares.
    pub(crate) store_len: super::writeback::StoreLenLock,
    /// Set by [`Mapping::close`] under `store_len` held exclusively: the store's length is
    /// not changed after (a background write-back that found the file before it was closed
    /// leaves it alone; another cache may have opened the store since).
    pub(crate) closed: AtomicBool,
    /// Frames of this file in the index.
    pub(crate) nr_frames: AtomicUsize,
    /// Bytes the store returned to this file's reads, ever (whatever engine ran them): the
    /// file's misses in bytes ([`super::CachedFile::store_bytes_read`]).
    pub(crate) read_bytes: AtomicU64,
    /// When the oldest data now dirty was dirtied (None when the file is clean).
    pub(crate) dirtied_at: Mutex<Option<Instant>>,
    /// Open handles ([`super::CachedFile`]s). The last one to go closes the mapping at once,
    /// even while a background thread (the flusher, reclaim, a readahead job) still holds an
    /// `Arc` of it for a moment.
    pub(crate) handles: AtomicUsize,
    /// The errno of the last write-back of this file if it failed, 0 if it succeeded: while
    /// it is set and the cache's dirty memory is at its limit, writes to the file are refused
    /// ([`FilemapError::DirtyLimit`]).
    pub(crate) wb_failing: AtomicI32,
    /// The spaces' mappings of the file (see [`super::immap`]).
    pub(crate) i_mmap: super::immap::IMmap,
    /// A space may have written past the end of the file in the page that holds the end (a
    /// mapping covers whole pages): before the file grows, that tail is zeroed, so that bytes
    /// past the old end never come back as file data (the kernel's `pagecache_isize_extended`
    /// and the zeroing of the page straddling the end at write-back).
    pub(crate) eof_tail_written: AtomicBool,
    this: Weak<Mapping>,
}

/// How many times [`Mapping::invalidate`] tries a folio that someone else holds a reference
/// to before leaving it cached (16 yields, then 100 µs sleeps: about 5 ms in all).
const INVALIDATE_TRIES: usize = 64;

/// How [`Mapping::remove_folio`] puts the index's reference.
pub(crate) enum IndexRef<'f, 'g, 'p> {
    /// Drop it (the caller holds another reference: its guard).
    Put,
    /// The folio is frozen by the caller: the reference is given up in the freeze.
    Frozen(&'f mut FrozenFolio<'g, 'p>),
}

/// A locked folio with one reference, as raw parts.
pub(crate) struct RawLocked(NonNull<Folio>);

// SAFETY: the lock and the reference travel with the value; `Folio` is `Sync`.
unsafe impl Send for RawLocked {}

/// What a read of a folio asks of the store: `want` bytes at `start`, of which the first
/// `valid` are file data and the first `expected` must be on the store.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadPlan {
    start: u64,
    want: usize,
    valid: usize,
    expected: usize,
}

/// The end of a folio read submitted to the I/O engine ([`crate::bio`]): owns the folio's lock
/// and reference, and the mapping (so the store and the pool) while the read is in flight.
pub(crate) struct ReadEnd {
    mapping: Arc<Mapping>,
    folio: Option<RawLocked>,
    plan: ReadPlan,
    /// Where the error goes, for a caller awaiting this folio.
    report: Option<aio::ReadReport>,
}

impl ReadEnd {
    /// Takes the folio back as a guard.
    fn guard(&mut self) -> Option<FolioGuard<'_>> {
        let RawLocked(ptr) = self.folio.take()?;
        // SAFETY: the lock and reference were given up with `into_raw` under the mapping's
        // policy when this end was made, and are taken back once (`folio` is now `None`).
        Some(unsafe {
            self.mapping
                .pool()
                .guard_from_raw(ptr, self.mapping.policy())
        })
    }
}

impl BioEnd for ReadEnd {
    fn store(&self) -> &dyn Store {
        &*self.mapping.store
    }

    fn end_io(mut self: Box<Self>, done: usize, res: StoreResult<()>) {
        let plan = self.plan;
        let mapping = self.mapping.clone();
        let report = self.report.take();
        if let Some(mut g) = self.guard() {
            match mapping.read_done(&mut g, plan, res.map(|()| done)) {
                // A folio a caller awaits was counted as its miss.
                Ok(()) if report.is_none() => count(Event::Readahead),
                Ok(()) => {}
                Err(e) => {
                    if let Some(r) = &report {
                        r.lock().unwrap().get_or_insert(e);
                    }
                }
            }
        }
    }
}

impl Drop for ReadEnd {
    /// A read dropped unrun (a store that panicked, an engine that stopped): the folio stays
    /// not up to date and unlocked, and the next reader reads it.
    fn drop(&mut self) {
        drop(self.guard());
    }
}

impl Mapping {
    /// A mapping of `store`, whose length is `size`, in `cache`.
    pub(crate) fn new_arc(
        id: usize,
        cache: Arc<Cache>,
        store: Box<dyn Store>,
        size: u64,
    ) -> Arc<Mapping> {
        let pages = XArray::with_node_list(cache.vm.shadow_nodes().clone(), id);
        let uid = hit::next_uid();
        Arc::new_cyclic(|this| Mapping {
            id,
            uid,
            tlb_spread: hit::tlb_spread(uid),
            cache,
            cleancache: store.keeps_evicted(),
            completes_reads: store.completes_reads(),
            store,
            pages,
            size: AtomicU64::new(size),
            store_size: AtomicU64::new(size),
            errseq: ErrSeq::new(),
            invalidate_lock: RwLock::new(()),
            store_len: Default::default(),
            closed: AtomicBool::new(false),
            nr_frames: AtomicUsize::new(0),
            read_bytes: AtomicU64::new(0),
            dirtied_at: Mutex::new(None),
            handles: AtomicUsize::new(0),
            wb_failing: AtomicI32::new(0),
            i_mmap: super::immap::IMmap::new(),
            eof_tail_written: AtomicBool::new(false),
            this: this.clone(),
        })
    }

    #[inline]
    pub(crate) fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn pool(&self) -> &FramePool {
        &self.cache.pool
    }

    #[inline]
    pub(crate) fn policy(&self) -> WaitPolicy {
        self.cache.config.wait_policy
    }

    // ---- lookups -------------------------------------------------------------------------

    /// The folio at `index` with a reference, lock-free (rule 5 of docs/RULES.md).
    #[doc(alias = "filemap_get_folio")]
    pub(crate) fn find_get(&self, index: u64) -> Option<FolioRef<'_>> {
        self.find_get_in(index, &rcu::pin())
    }

    /// [`Mapping::find_get`] under a guard the caller holds (and keeps across many lookups).
    #[inline]
    pub(crate) fn find_get_in(&self, index: u64, guard: &rcu::Guard) -> Option<FolioRef<'_>> {
        let mut cursor = self.pages.cursor(index, guard);
        let mut wait = SpinWait::new(64);
        loop {
            let folio = match cursor.load() {
                Some(Entry::Pointer(f)) => f,
                _ => return None,
            };
            if !folio.try_get() {
                // Frozen (written in place or being evicted) or freed meanwhile: look again.
                wait.wait();
                continue;
            }
            // SAFETY: `try_get` gave us a counted reference on this descriptor of our pool.
            let r = unsafe { self.pool().ref_from_raw(NonNull::from(folio)) };
            // Re-read the slot the walk reached (the kernel's `xas_reload`), not the whole path.
            match cursor.reload() {
                Some(Entry::Pointer(again)) if ptr::eq(again, folio) => return Some(r),
                _ => drop(r),
            }
        }
    }

    /// Whether `folio` (locked by the caller) is still this mapping's folio at `index`.
    pub(crate) fn still_mapped(&self, folio: &Folio, index: u64) -> bool {
        if folio.mapping() != self.id {
            return false;
        }
        let guard = rcu::pin();
        matches!(self.pages.load(index, &guard), Some(Entry::Pointer(p)) if ptr::eq(p, folio))
    }

    /// The folio at `index`, locked and checked to still be there.
    pub(crate) fn lock_folio(&self, index: u64) -> Option<FolioGuard<'_>> {
        loop {
            let f = self.find_get(index)?;
            let g = f.lock_with(self.policy());
            if self.still_mapped(&g, index) {
                return Some(g);
            }
        }
    }

    // ---- inserting -----------------------------------------------------------------------

    /// Allocates a folio of order at most `order` for `index`, inserts it locked (not up to
    /// date) into the index, and returns it. `None` if something is already there (or, when
    /// `must` is false, if memory is short).
    #[doc(alias = "filemap_add_folio")]
    fn insert_new(&self, index: u64, order: u32, must: bool) -> Result<Option<FolioGuard<'_>>> {
        let Some(folio) = self.cache.alloc(order, must)? else {
            return Ok(None);
        };
        let order = folio.order();
        debug_assert_eq!(index % (1u64 << order), 0);
        folio.set_index(index);
        let for_index = folio.clone().into_raw();
        let g = folio.lock_with(self.policy());
        g.set_mapping(self.id);
        match self.pages.add_with(
            self.cache.config.add_walks,
            index,
            order,
            Entry::Pointer(FolioPtr(for_index)),
        ) {
            Ok(shadow) => {
                if let Some(shadow) = shadow {
                    // Decides, before the folio reaches a list, whether it goes on the active one.
                    self.cache.vm.workingset_refault(&g, shadow);
                }
                let frames = 1usize << order;
                self.nr_frames.fetch_add(frames, Ordering::Relaxed);
                self.cache.cached.fetch_add(frames, Ordering::Relaxed);
                self.cache.vm.lru_add(self.pool(), &g);
                Ok(Some(g))
            }
            Err(rejected) => {
                // SAFETY: the index did not take the reference we made for it; it is ours.
                drop(unsafe { self.pool().ref_from_raw(for_index) });
                g.set_mapping(0);
                self.cache.vm.lru_del(self.pool(), &g);
                drop(g);
                match rejected.error {
                    XaError::Exists { .. } => Ok(None),
                    other => Err(FilemapError::Index(other)),
                }
            }
        }
    }

    /// Takes the locked `folio` out of the index if its slot still holds it, leaving `with`
    /// there (nothing, a shadow, or the copy that replaces it), and gives up the index's
    /// reference as `index_ref` says. Then fixes the counts, sets the folio's `mapping` to 0
    /// and takes it off its LRU list — in that order, which the LRU batches rely on (see
    /// `vmscan/swap.rs`). Dirty state is the caller's business. Returns whether the folio was
    /// there (if not, `with` is dropped). The kernel's `__filemap_remove_folio`.
    #[doc(alias = "__filemap_remove_folio")]
    pub(crate) fn remove_folio(
        &self,
        folio: &Folio,
        with: Option<Entry<FolioPtr>>,
        index_ref: IndexRef<'_, '_, '_>,
    ) -> bool {
        let index = folio.index();
        let frames = folio.nr_frames();
        let expected = Entry::Pointer(folio as *const Folio);
        match self.pages.cmpxchg(index, Some(expected), with) {
            Ok(Some(Entry::Pointer(old))) => drop(old),
            Ok(_) => unreachable!("cmpxchg matched a pointer"),
            Err(_) => return false,
        }
        match index_ref {
            // SAFETY: the index owned one counted reference to this folio; it no longer holds
            // the pointer, so the reference is ours to put (the caller's guard holds another).
            IndexRef::Put => drop(unsafe { self.pool().ref_from_raw(NonNull::from(folio)) }),
            // SAFETY: the index no longer holds the pointer; its reference ends in the freeze.
            IndexRef::Frozen(frozen) => unsafe {
                frozen.release_raw_refs(1);
            },
        }
        // A translation a `FileReader` keeps of this folio is stale from here: it must see the
        // byte sequence move (see `Translation`).
        folio.seq_bump();
        self.nr_frames.fetch_sub(frames, Ordering::Relaxed);
        self.cache.cached.fetch_sub(frames, Ordering::Relaxed);
        folio.set_mapping(0);
        self.cache.vm.lru_del(self.pool(), folio);
        true
    }

    /// Removes the locked folio from the index (it stays alive for whoever holds references),
    /// dropping its dirty state: its data is dead (truncation, or the file going away).
    pub(crate) fn delete_from_index(&self, g: &FolioGuard<'_>) {
        // Spaces mapping it fault again, and find the file shorter (or gone).
        self.unmap_folio(g);
        if g.clear_dirty() {
            self.cache.dirty.fetch_sub(g.nr_frames(), Ordering::Relaxed);
        }
        self.remove_folio(g, None, IndexRef::Put);
    }

    // ---- reading -------------------------------------------------------------------------

    /// Fills the locked folio from the store (bytes past the end of the file, and holes the
    /// cache extended the file over, read as zeros) and marks it up to date. On an error the
    /// folio stays not up to date, with ERROR set. A store that ends before the data it is known
    /// to hold (cut behind the cache's back) is an `UnexpectedEof` error, never zeros.
    pub(crate) fn read_into(&self, g: &mut FolioGuard<'_>) -> Result<()> {
        if g.is_uptodate() {
            return Ok(());
        }
        let plan = self.read_plan(g);
        let got = if plan.want > 0 {
            let buf = g.bytes_mut().expect("not up to date");
            self.store.read_full_at(plan.start, &mut buf[..plan.want])
        } else {
            Ok(0)
        };
        self.read_done(g, plan, got)
    }

    /// What reading the locked, not up-to-date folio `g` asks of the store.
    fn read_plan(&self, g: &FolioGuard<'_>) -> ReadPlan {
        let start = g.index() << FRAME_SHIFT;
        let size = self.size();
        // Loaded before the read. Below the file's length it only grows while this folio is
        // locked and not up to date (write-back raises it; `set_len` lowers it only past a new
        // end, after waiting for this folio's lock), so a read that ends below it did find the
        // store shorter than the cache left it.
        let on_store = self.store_size.load(Ordering::Acquire);
        let len = g.nr_frames() << FRAME_SHIFT;
        let valid = size.saturating_sub(start).min(len as u64) as usize;
        // Read whole pages: an O_DIRECT store needs aligned lengths.
        let want = ((valid as u64).div_ceil(PAGE_SIZE) as usize * PAGE_SIZE as usize).min(len);
        let expected = on_store.saturating_sub(start).min(valid as u64) as usize;
        ReadPlan {
            start,
            want,
            valid,
            expected,
        }
    }

    /// Finishes the read of `g` as `plan` said, the store having returned `got` (bytes read
    /// into the folio's first `plan.want`, or an error): zeroes what lies past the data and
    /// marks the folio up to date, or sets ERROR.
    fn read_done(
        &self,
        g: &mut FolioGuard<'_>,
        plan: ReadPlan,
        got: StoreResult<usize>,
    ) -> Result<()> {
        if let Ok(n) = got {
            self.read_bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        let buf = g.bytes_mut().expect("not up to date");
        match got {
            Ok(n) if n < plan.expected => {
                g.set_error();
                return Err(FilemapError::Store(StoreError::Io {
                    op: Op::Read,
                    offset: plan.start + n as u64,
                    kind: std::io::ErrorKind::UnexpectedEof,
                    errno: None,
                }));
            }
            Ok(n) => buf[n.min(plan.valid)..].fill(0),
            Err(e) => {
                g.set_error();
                return Err(e.into());
            }
        }
        g.clear_error();
        g.mark_uptodate();
        Ok(())
    }

    /// A request to read the locked, not-up-to-date folio `g` through the I/O engine, which
    /// then owns its lock and reference. `Err(g)`: nothing to read from the store (the folio
    /// lies past the data; [`Mapping::read_into`] zeroes it).
    /// The read's end reports an error to `report`, if given (a caller awaiting this folio).
    pub(super) fn read_bio_reporting<'p>(
        &self,
        g: FolioGuard<'p>,
        report: Option<aio::ReadReport>,
    ) -> std::result::Result<Bio, FolioGuard<'p>> {
        let plan = self.read_plan(&g);
        let Some(me) = self.this.upgrade() else {
            return Err(g);
        };
        if plan.want == 0 {
            return Err(g);
        }
        // The frames of a locked, not-up-to-date folio: nobody else reads or writes them until
        // the request's end marks the folio up to date and unlocks it.
        debug_assert!(!g.is_uptodate());
        let buf = g.pool().frame_ptr(g.pfn());
        let (ptr, _) = g.into_raw();
        Ok(Bio {
            op: BioOp::Read,
            offset: plan.start,
            buf,
            len: plan.want,
            more: Vec::new(),
            end: Box::new(ReadEnd {
                mapping: me,
                folio: Some(RawLocked(ptr)),
                plan,
                report,
            }),
        })
    }

    /// Marks an access to a folio the caller holds (see `vmscan/swap.rs`).
    #[inline]
    fn mark_accessed(&self, folio: &Folio) {
        self.cache
            .vm
            .mark_accessed(self.pool(), folio, folio.flags());
    }

    /// The up-to-date folio at `index`, reading (with readahead) on a miss; `None` if `index`
    /// is past the end of the file (which may have been cut while we looked). The caller marks
    /// the access.
    fn get_uptodate(&self, ra: &Readahead, index: u64, req: u64) -> Result<Option<FolioRef<'_>>> {
        loop {
            if let Some(f) = self.find_get(index) {
                let flags = f.flags();
                if flags & READAHEAD != 0 && f.clear_readahead() {
                    self.async_readahead(ra, &f);
                }
                if flags & UPTODATE != 0 {
                    count(Event::PageCacheHits);
                    return Ok(Some(f));
                }
                // Being read by somebody (wait for the lock), or an earlier read failed.
                let mut g = f.lock_with(self.policy());
                if !self.still_mapped(&g, index) {
                    continue;
                }
                self.read_into(&mut g)?;
                return Ok(Some(g.unlock()));
            }
            if index >= self.size().div_ceil(PAGE_SIZE) {
                return Ok(None);
            }
            count(Event::PageCacheMisses);
            let mut window = ra.on_miss(index, req);
            // A large random request is read in fair shares too: the rest misses again.
            window.size = window.size.min(self.ra_cap());
            self.readahead(window, Some(index))?;
        }
    }

    /// This mapping, counted (for requests in flight, which keep it alive).
    pub(crate) fn this(&self) -> Option<Arc<Mapping>> {
        self.this.upgrade()
    }

    /// The most pages one readahead window (or one random request's read) may take: an
    /// eighth of the budget, so that a window never evicts what the stream is about to read,
    /// nor most of what other files cache (a 1 MiB read on a 1 MiB budget is read 32 pages at
    /// a time). At least one page.
    pub(crate) fn ra_cap(&self) -> u64 {
        (self.pool().nr_frames() as u64 / 8).max(1)
    }

    /// Submits a batch of this file's reads: to the store itself where it completes reads
    /// ([`Store::completes_reads`]), else to the engine.
    #[doc(alias = "submit_bio")]
    pub(crate) fn submit_reads(&self, bios: Vec<Bio>) {
        if self.completes_reads {
            self.cache.bio.submit_to_store(&*self.store, bios);
        } else if bios.len() > 1 && self.cache.bio.merges_reads(&*self.store) {
            self.cache.bio.submit(crate::bio::merge_reads(bios));
        } else {
            self.cache.bio.submit(bios);
        }
    }

    /// The invalidate lock, shared. A thread whose own ring ([`crate::bio::ThreadRing`]) has
    /// reads in flight runs them to their end before it blocks here: the truncation holding
    /// the lock exclusively may be waiting for one of their folios, and only this thread can
    /// end them.
    pub(crate) fn invalidate_shared(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        match self.invalidate_lock.try_read() {
            Ok(g) => g,
            Err(std::sync::TryLockError::WouldBlock) => {
                crate::bio::local::drain_current_thread();
                self.invalidate_lock.read().unwrap()
            }
            Err(std::sync::TryLockError::Poisoned(e)) => panic!("invalidate lock poisoned: {e}"),
        }
    }

    /// Submits the read of a folio the calling thread awaits (an asynchronous read's own
    /// folio): to the store where it completes reads, else to the engine, which may put it on
    /// the thread's own ring ([`crate::bio::ThreadRing`]).
    pub(crate) fn submit_awaited_read(&self, bio: Bio) {
        if self.completes_reads {
            self.cache.bio.submit_to_store(&*self.store, vec![bio]);
        } else {
            self.cache.bio.submit_awaited(bio);
        }
    }

    /// The marker folio `f` was reached: read the stream's next window asynchronously.
    fn async_readahead(&self, ra: &Readahead, f: &Folio) {
        let first = f.index();
        let last = first + f.nr_frames() as u64 - 1;
        let window = ra.on_marker(first, last);
        if let Some(w) = window {
            // Best effort: a failure here is met again, and reported, by a synchronous read.
            let _ = self.readahead(w, None);
        }
    }

    /// Reads `w`: inserts a locked folio for every piece not cached (large folios where the
    /// alignment allows), reads the piece holding `sync` now, and hands the rest to the
    /// readahead threads. Stops at the first piece already cached or when memory is short.
    fn readahead(&self, w: RaWindow, sync: Option<u64>) -> Result<()> {
        let mut sync_guard = None;
        let mut batch = Vec::new();
        self.insert_window(w, sync, |g, holds_sync| {
            if holds_sync {
                sync_guard = Some(g);
            } else {
                self.push_read(g, None, &mut batch);
            }
        })?;
        // The window but the folio the caller waits for, as one batch (the kernel's plug);
        // the caller's folio is read here meanwhile, so its errors come back typed.
        self.submit_reads(batch);
        match sync_guard {
            Some(mut g) => self.read_into(&mut g),
            None => Ok(()),
        }
    }

    /// Inserts a locked folio for every piece of `w` not cached (large folios where the
    /// alignment allows), giving each to `each` with whether it holds page `sync`. Stops at the
    /// first piece already cached or when memory is short (the piece holding `sync` is
    /// allocated even then, one page at a time if a smaller folio is in the way).
    pub(super) fn insert_window<'a>(
        &'a self,
        w: RaWindow,
        sync: Option<u64>,
        mut each: impl FnMut(FolioGuard<'a>, bool),
    ) -> Result<()> {
        let _inv = self.invalidate_shared();
        let end_page = self.size().div_ceil(PAGE_SIZE);
        let end = (w.start + w.size).min(end_page);
        if let Some(s) = sync {
            if s >= end_page {
                return Ok(());
            }
        }
        let max_order = self.cache.config.max_folio_order;
        let mut pieces = folio_orders(w.start, end.saturating_sub(w.start), max_order);
        pieces.reverse();
        while let Some((idx, order)) = pieces.pop() {
            let holds_sync = sync.is_some_and(|s| s >= idx && s < idx + (1u64 << order));
            let g = match self.insert_new(idx, order, holds_sync)? {
                Some(g) => g,
                None if holds_sync && order > 0 => {
                    // A smaller folio is in the way: read the piece one page at a time.
                    for i in (idx..idx + (1u64 << order)).rev() {
                        pieces.push((i, 0));
                    }
                    continue;
                }
                // Already cached (the stream has caught up with data read before), or memory
                // is short: readahead stops here, as the kernel's does.
                None => break,
            };
            let covered = g.index()..g.index() + g.nr_frames() as u64;
            if g.nr_frames() < (1usize << order) {
                // The allocator gave a smaller folio: queue the rest of the piece, cut into the
                // largest aligned pieces again.
                let rest = folio_orders(covered.end, idx + (1u64 << order) - covered.end, order);
                pieces.extend(rest.into_iter().rev());
            }
            if w.marker.is_some_and(|m| covered.contains(&m)) {
                g.set_readahead();
            }
            let holds = sync.is_some_and(|s| covered.contains(&s));
            each(g, holds);
        }
        Ok(())
    }

    pub(crate) fn read_at(&self, ra: &Readahead, offset: u64, buf: &mut [u8]) -> Result<usize> {
        check_range(offset, buf.len())?;
        let size = self.size();
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let end = size.min(offset + buf.len() as u64);
        let last = (end - 1) >> FRAME_SHIFT;
        // A read that starts in the folio this thread's previous read through this handle ended
        // in does not mark it again (the kernel's `filemap_read`): reading a large folio in
        // small pieces is one use.
        let prev_end = ra.swap_read_end(end);
        let mut pos = offset;
        while pos < end {
            let index = pos >> FRAME_SHIFT;
            let f = match self.get_uptodate(ra, index, last - index + 1) {
                Ok(Some(f)) => f,
                // The file was cut under us: a short read up to where it was.
                Ok(None) => break,
                // The store was cut behind our back: a short read of what was there, if any.
                Err(e) if pos > offset && e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e),
            };
            if pos != offset || !continues_in(prev_end, &f) {
                self.mark_accessed(&f);
            }
            let start = f.index() << FRAME_SHIFT;
            let off = (pos - start) as usize;
            let n = (f.size() - off).min((end - pos) as usize);
            let at = (pos - offset) as usize;
            copy_out(&f, off, &mut buf[at..at + n]);
            pos += n as u64;
        }
        ra.note_read(offset >> FRAME_SHIFT, last);
        Ok((pos.min(end) - offset) as usize)
    }

    /// A zero-copy reader holds `f` and is about to borrow its bytes: if spaces map it,
    /// write-protect their ptes (`folio_mkclean`), so that no write through a mapping is in
    /// flight or can start without a write fault — and a write fault that sees this reference
    /// gives the spaces a copy instead (see `mm/file.rs`, and `Folio::reader_sees_mapping` for
    /// why the two sides see each other).
    fn stable_for_reader(&self, f: &FolioRef<'_>) {
        if !f.reader_sees_mapping() {
            return;
        }
        let g = f.clone().lock_with(self.policy());
        if g.is_mapped() {
            self.mkclean_folio(&g);
        }
    }

    /// [`Mapping::read_folio_unprotected`] for a zero-copy reader: the bytes stay put while
    /// the reference is held (see [`Mapping::stable_for_reader`]).
    #[doc(alias = "filemap_read_folio")]
    pub(crate) fn read_folio(&self, ra: &Readahead, index: u64) -> Result<FolioRef<'_>> {
        let f = self.read_folio_unprotected(ra, index)?;
        self.stable_for_reader(&f);
        Ok(f)
    }

    /// The up-to-date folio holding page `index`, read if needed, marked accessed; spaces that
    /// map it writable may still write it (a fault's own lookup).
    pub(crate) fn read_folio_unprotected(
        &self,
        ra: &Readahead,
        index: u64,
    ) -> Result<FolioRef<'_>> {
        let past_end = || {
            FilemapError::Store(StoreError::Io {
                op: Op::Read,
                offset: index.saturating_mul(PAGE_SIZE),
                kind: std::io::ErrorKind::UnexpectedEof,
                errno: None,
            })
        };
        if index >= self.size().div_ceil(PAGE_SIZE) {
            return Err(past_end());
        }
        let f = self.get_uptodate(ra, index, 1)?.ok_or_else(past_end)?;
        self.mark_accessed(&f);
        ra.note_read(index, index);
        Ok(f)
    }

    // ---- writing -------------------------------------------------------------------------

    /// The locked folio to write `pos .. end` into, starting at page `index`: the cached one,
    /// or a new one as large as the write covers (up to the configured order).
    fn lock_for_write(&self, index: u64, pos: u64, end: u64) -> Result<FolioGuard<'_>> {
        let mut order = 0;
        if pos == index << FRAME_SHIFT {
            while order < self.cache.config.max_folio_order
                && index % (1u64 << (order + 1)) == 0
                && (index + (1u64 << (order + 1))) << FRAME_SHIFT <= end
            {
                order += 1;
            }
        }
        loop {
            if let Some(g) = self.lock_folio(index) {
                return Ok(g);
            }
            if let Some(g) = self.insert_new(index, order, true)? {
                return Ok(g);
            }
            // Something overlapping is cached: fall back to one page.
            order = 0;
        }
    }

    /// Applies `f` to the bytes of the locked, up-to-date folio `g` (still mapped at its index):
    /// in place if nobody else holds a reference, otherwise on a copy that replaces it in the
    /// index, so readers keep the bytes they were reading. Returns the guard of the folio that
    /// now holds the data.
    ///
    /// Returns `None`, with `f` not applied and `g` unlocked, when readers hold the folio and no
    /// block of its order can be had for the copy (a large folio in a small or fragmented cache;
    /// the reader may even be the caller's own thread, so waiting for it could hang for ever):
    /// a dirty folio is then written back, a clean one is taken out of the index (its readers
    /// keep it), and the caller starts over — finding the folio clean, or not at all and then
    /// working on smaller folios read from the store.
    pub(crate) fn modify<'a>(
        &'a self,
        mut g: FolioGuard<'a>,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<Option<FolioGuard<'a>>> {
        let mut f = Some(f);
        // A space mapping the folio would keep the old bytes if it were replaced, and could be
        // writing them if changed in place: unmap it everywhere first (the writes the frames
        // recorded become DIRTY); the spaces fault again and find what the index holds.
        self.unmap_folio(&g);
        if self.modify_in_place(&mut g, &mut f) {
            return Ok(Some(g));
        }
        let index = g.index();
        let copy = self.cache.alloc(g.order(), true)?.expect("must allocate");
        if copy.order() != g.order() {
            drop(copy);
            if self.modify_in_place(&mut g, &mut f) {
                // The readers left meanwhile.
                return Ok(Some(g));
            }
            if g.is_dirty() {
                self.write_folio(g)?;
            } else {
                self.delete_from_index(&g);
            }
            return Ok(None);
        }
        let f = f.take().expect("not applied yet");
        copy.set_mapping(self.id);
        copy.set_index(index);
        let for_index = copy.clone().into_raw();
        let mut ng = copy.lock_with(self.policy());
        {
            let dst = ng.bytes_mut().expect("fresh folio");
            dst.copy_from_slice(g.bytes());
            f(dst);
        }
        ng.mark_uptodate();
        // The copy takes over the old folio's place on the lists (as migration does), before it
        // is visible.
        let lru_state = g.flags() & (ACTIVE | REFERENCED | WORKINGSET);
        if lru_state & ACTIVE != 0 {
            ng.set_active();
        }
        if lru_state & REFERENCED != 0 {
            ng.set_referenced();
        }
        if lru_state & WORKINGSET != 0 {
            ng.set_workingset();
        }
        // The copy replaces the folio in one step: a reader finds one or the other.
        let replaced =
            self.remove_folio(&g, Some(Entry::Pointer(FolioPtr(for_index))), IndexRef::Put);
        assert!(replaced, "a locked, mapped folio left its index");
        // `remove_folio` took the old folio's frames off the counts; the copy has as many.
        let frames = ng.nr_frames();
        self.nr_frames.fetch_add(frames, Ordering::Relaxed);
        self.cache.cached.fetch_add(frames, Ordering::Relaxed);
        // The copy takes over the old folio's dirty state (the index's marks moved with it).
        if g.clear_dirty() {
            ng.set_dirty();
        }
        self.cache.vm.lru_add(self.pool(), &ng);
        Ok(Some(ng))
    }

    /// Applies `f` in place if the count can be frozen (nobody but the index and `g` holds the
    /// folio); returns whether it did.
    fn modify_in_place(
        &self,
        g: &mut FolioGuard<'_>,
        f: &mut Option<impl FnOnce(&mut [u8])>,
    ) -> bool {
        // SAFETY: the folio is mapped (checked by the caller under its lock, and only a lock
        // holder removes it), so the index owns one raw reference; nobody uses that reference
        // during the freeze (lookups only use references they took themselves).
        match unsafe { g.freeze(1) } {
            Some(mut frozen) => {
                (f.take().expect("applied once"))(frozen.bytes_mut());
                true
            }
            None => false,
        }
    }

    /// Marks the locked folio dirty, in its flags, the index and the cache's count.
    pub(crate) fn mark_dirty(&self, g: &FolioGuard<'_>) {
        if !g.set_dirty() {
            self.cache.dirty.fetch_add(g.nr_frames(), Ordering::Relaxed);
            self.pages.set_mark(g.index(), DIRTY_MARK);
            self.dirtied_at
                .lock()
                .unwrap()
                .get_or_insert_with(Instant::now);
        }
    }

    pub(crate) fn write_at(&self, offset: u64, data: &[u8]) -> Result<usize> {
        let end = check_range(offset, data.len())?;
        if data.is_empty() {
            return Ok(0);
        }
        let mut pos = offset;
        let result = {
            let _inv = self.invalidate_shared();
            if end > self.size() {
                self.zero_eof_tail()?;
            }
            self.write_pages(offset, data, &mut pos, end)
        };
        match result {
            Ok(()) => Ok(data.len()),
            Err(_) if pos > offset => Ok((pos - offset) as usize),
            Err(e) => Err(e),
        }
    }

    fn write_pages(&self, offset: u64, data: &[u8], pos: &mut u64, end: u64) -> Result<()> {
        while *pos < end {
            // Throttled before each folio it dirties, holding the invalidate lock as the kernel
            // holds `i_rwsem` (the flusher does not need it).
            self.balance_dirty()?;
            let index = *pos >> FRAME_SHIFT;
            let mut g = self.lock_for_write(index, *pos, end)?;
            // Stable pages: the bytes under write-back must not change.
            g.wait_writeback_with(self.policy());
            let start = g.index() << FRAME_SHIFT;
            let off = (*pos - start) as usize;
            let n = (g.size() - off).min((end - *pos) as usize);
            let src = &data[(*pos - offset) as usize..][..n];
            let whole = off == 0 && n == g.size();
            if !g.is_uptodate() && !whole {
                // A partial write: the rest of the folio comes from the store (or is zero).
                self.read_into(&mut g)?;
            }
            if g.is_uptodate() {
                match self.modify(g, |b| b[off..off + n].copy_from_slice(src))? {
                    Some(ng) => g = ng,
                    // Written back or taken out of the index: this page starts over.
                    None => continue,
                }
            } else {
                g.bytes_mut().expect("not up to date")[off..off + n].copy_from_slice(src);
                g.mark_uptodate();
            }
            self.mark_accessed(&g);
            self.mark_dirty(&g);
            *pos += n as u64;
            self.size.fetch_max(*pos, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Replaces the locked folio `g` by the shadow entry `shadow` computes, if it is still
    /// this mapping's, clean, not under write-back, and held by nobody but the index and `g`;
    /// returns whether it did (reclaim's eviction, the kernel's `__remove_mapping`).
    #[doc(alias = "__remove_mapping")]
    pub(crate) fn evict(
        &self,
        g: &mut FolioGuard<'_>,
        shadow: &mut dyn FnMut(&Folio) -> u64,
    ) -> bool {
        if !self.still_mapped(g, g.index()) || g.is_dirty() || g.is_writeback() {
            return false;
        }
        // SAFETY: mapped (checked just now under the lock, and only a lock holder removes it),
        // so the index owns one raw reference; nobody uses it during the freeze.
        let Some(mut frozen) = (unsafe { g.freeze(1) }) else {
            return false;
        };
        let folio = frozen.folio();
        // Test again now that nobody else holds it: a write-back that failed after the test
        // above made it dirty again before putting its reference, which the freeze saw.
        if folio.flags() & (DIRTY | WRITEBACK) != 0 {
            return false;
        }
        if self.cleancache && folio.is_uptodate() {
            // A second tier below this one keeps a copy (frozen: the bytes cannot change).
            self.store
                .evicted_clean(folio.index() << FRAME_SHIFT, frozen.bytes());
        }
        let value = shadow(folio);
        self.remove_folio(
            folio,
            Some(Entry::Value(value)),
            IndexRef::Frozen(&mut frozen),
        )
    }

    /// Records a write-back failure for every handle's next `fsync`.
    #[doc(alias = "mapping_set_error")]
    pub(crate) fn record_error(&self, e: &StoreError) {
        crate::trace::slow_path!(warn, "write-back error recorded", file = self.id, error = e);
        self.errseq.set(errno_of(e));
    }
}

impl Mapping {
    /// The last handle is gone: write back what is dirty (errors can no longer be reported to
    /// anyone; the data of folios that still fail is dropped with the file, as the kernel drops
    /// it when an inode is evicted), then empty the index, give every frame back and leave the
    /// cache's file table. Nothing inserts folios once no handle is left, so this runs once in
    /// effect; running it again (from `Drop`) finds an empty index.
    pub(crate) fn close(&self) {
        let _ = self.write_back_range(0, u64::MAX, true);
        let mut found = Vec::new();
        self.pages.for_each(0, u64::MAX, None, |e| {
            found.push((e.index, e.entry.is_value()));
            std::ops::ControlFlow::Continue(())
        });
        for (index, is_value) in found {
            if is_value {
                let _ = self.pages.erase(index);
            } else if let Some(g) = self.lock_folio(index) {
                g.wait_writeback_with(self.policy());
                self.delete_from_index(&g);
            }
        }
        // Every write-back of the file's folios has ended (each was waited for above); one
        // still walking the file (the flusher's) finds no folio, and must not set the store's
        // length either.
        {
            let _len = self.store_len.exclusive();
            self.closed.store(true, Ordering::Relaxed);
        }
        self.cache.files.lock().unwrap().remove(&self.id);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        self.close();
    }
}

/// Copies `buf.len()` bytes at byte `off` of the up-to-date folio `f` into `buf`, with a raw
/// copy rather than through a borrow of the bytes: spaces that map the folio writable may be
/// writing it (shared memory; see `mm/file.rs`), and the copy holds what was there at that
/// moment.
#[inline]
fn copy_out(f: &FolioRef<'_>, off: usize, buf: &mut [u8]) {
    assert!(off + buf.len() <= f.size());
    // The callers found it up to date (the hit path's flags test, `get_uptodate`).
    debug_assert!(f.is_uptodate());
    // SAFETY: inside the folio's frames (checked), which stay allocated while `f` is held;
    // `buf` is the caller's and cannot overlap a pool frame lent to nobody as `&mut`; up to date,
    // so initialised. Writers that may race are spaces writing through raw pointers.
    unsafe { std::ptr::copy_nonoverlapping(f.as_ptr().add(off), buf.as_mut_ptr(), buf.len()) }
}

/// Whether a read whose previous one (by this thread, through this handle) ended at byte
/// `prev_end` continues in folio `f`: the byte before `prev_end` lies in it. Such a read does
/// not mark the folio accessed again (the kernel's `filemap_read`).
#[inline]
pub(super) fn continues_in(prev_end: Option<u64>, f: &Folio) -> bool {
    prev_end.is_some_and(|e| {
        let p = e.wrapping_sub(1) >> FRAME_SHIFT;
        let first = f.index();
        e > 0 && p >= first && p - first < f.nr_frames() as u64
    })
}
