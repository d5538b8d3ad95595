//! One cached file (the kernel's `address_space`): its index of folios, lookups, inserts,
//! removal and eviction. Reads with readahead are in `mapping/read.rs`, writes in
//! `mapping/write.rs`, the fast hits in `mapping/hit.rs`, the asynchronous reads in
//! `mapping/aio.rs`, truncation and invalidation in `mapping/truncate.rs`; write-back is in
//! `writeback.rs`. The rules they share are in the [module documentation](super).

use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Instant;

use crossbeam_utils::CachePadded;

use super::readahead::{Pieces, RaWindow, Readahead};
use super::{check_range, errno_of, Cache, FilemapError, FolioPtr, Result, DIRTY_MARK, PAGE_SIZE};
use crate::bio::{Bio, BioEnd, BioOp};
use crate::filemap::errseq::ErrSeq;
use crate::mem::folio::{
    Folio, FolioGuard, FolioRef, FreeTicket, FrozenFolio, ACTIVE, DIRTY, FRAME_SHIFT, READAHEAD,
    REFERENCED, UPTODATE, WORKINGSET, WRITEBACK,
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
mod read;
mod truncate;
mod write;
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
    /// Frames of this file in the index. On a cache line of its own: reclaim's thread lowers
    /// it as readers raise it, and no field a reader writes on a miss should move with it.
    pub(crate) nr_frames: CachePadded<AtomicUsize>,
    /// Bytes the store returned to this file's reads, ever (whatever engine ran them): the
    /// file's misses in bytes ([`super::CachedFile::store_bytes_read`]).
    pub(crate) read_bytes: CachePadded<AtomicU64>,
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
            nr_frames: CachePadded::new(AtomicUsize::new(0)),
            read_bytes: CachePadded::new(AtomicU64::new(0)),
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
        self.cache.config.wait_policy()
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
            self.cache.config.add_walks(),
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
        let removed = self.unindex_folio(folio, with, index_ref);
        if removed {
            self.cache.vm.lru_del(self.pool(), folio);
        }
        removed
    }

    /// [`Mapping::remove_folio`] for a folio that reclaim has isolated, which leaves it on no
    /// list: it was taken off its list under the LRU lock, it is not waiting in an add batch
    /// (only a folio being inserted is, and it is on no list until the batch links it), and
    /// nothing links it again but reclaim's own putback, which skips a folio whose `mapping`
    /// is 0. So the LRU lock, which the unlink would take for every evicted folio — and which
    /// the threads adding new folios want at the same time — is not taken.
    fn unindex_folio(
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

    /// Replaces the locked folio `g` by the shadow entry `shadow` computes, if it is still
    /// this mapping's, clean, not under write-back, and held by nobody but the index and `g`
    /// (reclaim's eviction, the kernel's `__remove_mapping`). If it did, the folio is left
    /// frozen with only `g`'s reference, for `g` to free ([`FolioGuard::free_frozen`]).
    #[doc(alias = "__remove_mapping")]
    pub(crate) fn evict<'p>(
        &self,
        g: &mut FolioGuard<'p>,
        shadow: &mut dyn FnMut(&Folio) -> u64,
    ) -> Option<FreeTicket<'p>> {
        if !self.still_mapped(g, g.index()) || g.is_dirty() || g.is_writeback() {
            return None;
        }
        // SAFETY: mapped (checked just now under the lock, and only a lock holder removes it),
        // so the index owns one raw reference; nobody uses it during the freeze.
        let mut frozen = unsafe { g.freeze(1) }?;
        let folio = frozen.folio();
        // Test again now that nobody else holds it: a write-back that failed after the test
        // above made it dirty again before putting its reference, which the freeze saw.
        if folio.flags() & (DIRTY | WRITEBACK) != 0 {
            return None;
        }
        if self.cleancache && folio.is_uptodate() {
            // A second tier below this one keeps a copy (frozen: the bytes cannot change).
            self.store
                .evicted_clean(folio.index() << FRAME_SHIFT, frozen.bytes());
        }
        let value = shadow(folio);
        // Reclaim isolated it: on no list (see `unindex_folio`).
        debug_assert!(!folio.is_lru() && !folio.is_lru_pending());
        if !self.unindex_folio(
            folio,
            Some(Entry::Value(value)),
            IndexRef::Frozen(&mut frozen),
        ) {
            return None;
        }
        // The index's reference went with its slot: the guard's is the last.
        Some(
            frozen
                .end_for_free()
                .expect("a freeze of the guard's and the index's references only"),
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
