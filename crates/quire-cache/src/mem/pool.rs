//! The frame pool: all the memory a cache will ever use, mapped once (rule 1 of docs/RULES.md).
//!
//! # Layout
//!
//! ```text
//!  base (2 MiB aligned)                                           base + capacity
//!  | frame 0 | frame 1 | ...                         | frame n-1 |
//!  descs: [Folio; n]  — one 64-byte descriptor per frame (the memmap), same index
//! ```
//!
//! - One anonymous private mapping of `capacity` bytes, a multiple of 4 KiB. The pool maps
//!   2 MiB − 4 KiB more than it needs and unmaps the slack on both sides so that `base` is
//!   2 MiB aligned: frame numbers then have the alignment of addresses, and a naturally aligned
//!   block of 2^k frames from the buddy allocator is a naturally aligned 4 KiB << k region — an
//!   order-9 folio can sit in one transparent huge page. The pool asks for huge pages with
//!   `madvise(MADV_HUGEPAGE)` and carries on if the kernel refuses
//!   ([`FramePool::huge_pages_advised`] tells which).
//! - The descriptor array is parallel to the frames: `descs[pfn]` describes frame `pfn`, and the
//!   head descriptor of a folio describes the folio (see [`crate::mem::folio`]). Descriptors are
//!   allocated with the pool and freed with it, never before, so a `&Folio` found by a lock-free
//!   reader always points at a live descriptor (possibly of a reused folio).
//! - The buddy allocator (`mem::buddy`) hands out frame numbers.
//! - Deferred frees: a folio whose last reference is put while a thread borrows its bytes
//!   without one (`mem/borrow.rs`) is not freed then but kept on the pool's deferred list, and
//!   freed by the first free, allocation that finds no block, [`FramePool::drain`] or count of
//!   free frames ([`FramePool::free_frames`], [`FramePool::stats`]) to find its borrow ended —
//!   so the borrower's end is a plain store, and allocation never fails for frames only a
//!   finished borrow held.
//!
//! Fresh anonymous memory is zero, but frames are reused: [`FramePool::alloc`] returns whatever
//! the last user left (the page cache fills folios by reading), [`FramePool::alloc_zeroed`]
//! clears them first.
//!
//! Dropping the pool unmaps the memory; the borrow checker keeps it alive while [`FolioRef`]s
//! exist (they borrow it).

use std::ffi::c_void;
use std::ptr::NonNull;

use rustix::mm::{self, Advice, MapFlags, ProtFlags};

use crate::mem::buddy::{Buddy, BuddyStats, MAX_ORDER};
use crate::mem::folio::{Folio, FolioGuard, FolioRef, FRAME_SHIFT, FRAME_SIZE};
use crate::sync::bitwait::WaitPolicy;
use crate::sync::loom::{fence, AtomicUsize, Mutex, Ordering};

/// Folios a [`FreeBatch`] holds before it frees them (the kernel's `PAGEVEC_SIZE` is 31).
const FREE_BATCH: usize = 32;

/// Folios freed together, from the frozen state their eviction left them in
/// ([`FolioGuard::free_frozen`]): one lock of the buddy allocator's order-0 cache and one look
/// at the deferred list for a whole round of reclaim, where a free of each folio as its last
/// reference goes takes them once per folio. The batch frees what it holds when full and when
/// dropped (the kernel's `free_unref_folios`).
#[doc(alias = "folio_batch")]
pub struct FreeBatch<'p> {
    pool: &'p FramePool,
    /// Frame number and order of each folio, reset already.
    blocks: [(u32, u32); FREE_BATCH],
    len: usize,
}

impl<'p> FreeBatch<'p> {
    /// Adds a folio whose count is zero, unlocked, and whose frames no borrow can read (see
    /// [`FolioGuard::free_frozen`], its one caller): its descriptor is reset now.
    pub(crate) fn push(&mut self, folio: &'p Folio) {
        let order = folio.reset_frozen_freed();
        let pfn = self.pool.pfn_of_desc(folio) as u32;
        self.blocks[self.len] = (pfn, order);
        self.len += 1;
        if self.len == FREE_BATCH {
            self.flush();
        }
    }

    /// Whether the batch frees into `pool`.
    pub(crate) fn is_of(&self, pool: &FramePool) -> bool {
        std::ptr::eq(self.pool, pool)
    }

    /// Frees what the batch holds now (dropping the batch does too).
    pub fn flush(&mut self) {
        if self.len == 0 {
            return;
        }
        // SAFETY: each block is a folio whose count reached zero in its freeze, reset in `push`
        // and freed nowhere else (its guard was consumed by `free_frozen`): one free of the
        // block `alloc` handed out at that frame with that order.
        unsafe { self.pool.buddy.free_many(&self.blocks[..self.len]) };
        self.len = 0;
        if self.pool.nr_deferred.load(Ordering::Relaxed) != 0 {
            self.pool.free_deferred();
        }
    }

    /// How many folios wait in the batch.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for FreeBatch<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The alignment of the pool's start: one order-[`MAX_ORDER`] block (2 MiB).
pub(crate) const POOL_ALIGN: usize = FRAME_SIZE << MAX_ORDER;

/// The largest capacity a pool accepts: frame numbers must fit the buddy allocator's `u32`s.
pub(crate) const MAX_CAPACITY: usize = ((u32::MAX - 1) as usize) << FRAME_SHIFT;

/// Why a pool could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// A capacity of zero bytes.
    #[error("frame pool capacity must be greater than zero")]
    Empty,
    /// A capacity that is not a whole number of frames.
    #[error("frame pool capacity {0} is not a multiple of the {FRAME_SIZE}-byte frame size")]
    NotFrameMultiple(usize),
    /// A capacity too large to index.
    #[error("frame pool capacity {capacity} is larger than the maximum {max}")]
    TooLarge {
        /// The capacity asked for.
        capacity: usize,
        /// The largest capacity accepted.
        max: usize,
    },
    /// The kernel refused the mapping.
    #[error("mapping {capacity} bytes for the frame pool failed: {source}")]
    Map {
        /// The capacity asked for.
        capacity: usize,
        /// What the kernel said.
        source: std::io::Error,
    },
}

/// The frame pool; see the [module documentation](self).
pub struct FramePool {
    base: NonNull<u8>,
    capacity: usize,
    descs: Box<[Folio]>,
    buddy: Buddy,
    huge: bool,
    /// Frame numbers of folios whose free found a borrower (see "Deferred frees").
    deferred: Mutex<Vec<usize>>,
    /// How many there are (read without the lock by every free).
    nr_deferred: AtomicUsize,
}

// SAFETY: the pool's memory is only reached through folios, whose access rules (module
// `folio`, "Access to the bytes") make concurrent use race-free; everything else in the pool is
// atomics or behind locks.
unsafe impl Send for FramePool {}
// SAFETY: as above.
unsafe impl Sync for FramePool {}

impl FramePool {
    /// Maps a pool of `capacity` bytes with order-0 caches sized for this machine (see
    /// `Buddy::new`).
    pub fn new(capacity: usize) -> Result<FramePool, PoolError> {
        let nr_frames = Self::check_capacity(capacity)?;
        Self::build(capacity, Buddy::new(nr_frames))
    }

    /// Maps a pool whose buddy allocator has `shards` order-0 cache shards of at most `high`
    /// frames each (`high == 0`: no caches). For tests and benchmarks.
    pub fn with_caches(
        capacity: usize,
        shards: usize,
        high: usize,
    ) -> Result<FramePool, PoolError> {
        let nr_frames = Self::check_capacity(capacity)?;
        Self::build(capacity, Buddy::with_caches(nr_frames, shards, high))
    }

    fn check_capacity(capacity: usize) -> Result<usize, PoolError> {
        if capacity == 0 {
            return Err(PoolError::Empty);
        }
        if !capacity.is_multiple_of(FRAME_SIZE) {
            return Err(PoolError::NotFrameMultiple(capacity));
        }
        if capacity > MAX_CAPACITY {
            return Err(PoolError::TooLarge {
                capacity,
                max: MAX_CAPACITY,
            });
        }
        Ok(capacity >> FRAME_SHIFT)
    }

    fn build(capacity: usize, buddy: Buddy) -> Result<FramePool, PoolError> {
        let map_err = |e: rustix::io::Errno| PoolError::Map {
            capacity,
            source: e.into(),
        };
        let len = capacity
            .checked_add(POOL_ALIGN - FRAME_SIZE)
            .ok_or(PoolError::TooLarge {
                capacity,
                max: MAX_CAPACITY,
            })?;
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing aliases
        // nothing.
        let raw = unsafe {
            mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(map_err)?;
        let start = raw as usize;
        let aligned = start.next_multiple_of(POOL_ALIGN);
        let head = aligned - start;
        let tail = len - head - capacity;
        // SAFETY: both ranges lie inside the mapping just made, outside the part we keep, and
        // nothing refers to them. Failure would only leave slack mapped, so it is ignored.
        unsafe {
            if head > 0 {
                let _ = mm::munmap(raw, head);
            }
            if tail > 0 {
                let _ = mm::munmap((aligned + capacity) as *mut c_void, tail);
            }
        }
        // SAFETY: advice on our own mapping; it does not change its contents.
        let huge =
            unsafe { mm::madvise(aligned as *mut c_void, capacity, Advice::LinuxHugepage) }.is_ok();
        let nr_frames = capacity >> FRAME_SHIFT;
        let descs = (0..nr_frames).map(|_| Folio::new()).collect();
        Ok(FramePool {
            // `aligned` is inside a successful mapping, so not null.
            base: NonNull::new(aligned as *mut u8).expect("mmap returned null"),
            capacity,
            descs,
            buddy,
            huge,
            deferred: Mutex::new(Vec::new()),
            nr_deferred: AtomicUsize::new(0),
        })
    }

    /// The pool's size in bytes.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The pool's size in frames.
    #[inline]
    pub fn nr_frames(&self) -> usize {
        self.descs.len()
    }

    /// Whether the kernel accepted `madvise(MADV_HUGEPAGE)` for the pool.
    pub fn huge_pages_advised(&self) -> bool {
        self.huge
    }

    /// The address of the pool's first byte (2 MiB aligned).
    #[inline]
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Allocates a folio of 2^`order` frames with one reference, unlocked, with no flags but
    /// its order, no owner and index 0. Its bytes are *not* zeroed. `None` when no block of that
    /// order is free (after draining the order-0 caches) or when `order > MAX_ORDER`.
    #[doc(alias = "folio_alloc")]
    pub fn alloc(&self, order: u32) -> Option<FolioRef<'_>> {
        let pfn = self.alloc_pfn(order)?;
        // The new owner writes these frames from here on; a reference-free reader of the folio
        // they last held must see that folio's free (its byte sequence moved) once it has read
        // any such write (see `folio.rs`, "The byte sequence"). Free on x86.
        fence(Ordering::Release);
        let folio = &self.descs[pfn];
        folio.init_allocated(order);
        Some(FolioRef::from_parts(folio, self))
    }

    /// As [`FramePool::alloc`], with the bytes zeroed.
    pub fn alloc_zeroed(&self, order: u32) -> Option<FolioRef<'_>> {
        let pfn = self.alloc_pfn(order)?;
        // As in `alloc`: before this owner's first write.
        fence(Ordering::Release);
        // SAFETY: the buddy allocator just handed these frames to us alone: no descriptor heads
        // them, so no reference or borrow of their bytes exists.
        unsafe { std::ptr::write_bytes(self.frame_ptr(pfn), 0, FRAME_SIZE << order) };
        let folio = &self.descs[pfn];
        folio.init_allocated(order);
        Some(FolioRef::from_parts(folio, self))
    }

    /// A block of 2^`order` frames from the buddy allocator, freeing the deferred folios whose
    /// borrows have ended if none is free.
    #[inline]
    fn alloc_pfn(&self, order: u32) -> Option<usize> {
        if let Some(pfn) = self.buddy.alloc(order) {
            return Some(pfn as usize);
        }
        if self.free_deferred() == 0 {
            return None;
        }
        self.buddy.alloc(order).map(|pfn| pfn as usize)
    }

    /// Broken: [`FramePool::alloc`] without its fence, for the loom models
    /// (`tests/loom_seq.rs`) to catch.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn broken_alloc_unfenced(&self, order: u32) -> Option<FolioRef<'_>> {
        let pfn = self.buddy.alloc(order)? as usize;
        let folio = &self.descs[pfn];
        folio.init_allocated(order);
        Some(FolioRef::from_parts(folio, self))
    }

    /// Takes a speculative reference on `folio` (see [`Folio::try_get`]): `None` if it is free,
    /// a tail, frozen, or not a descriptor of this pool. The folio may not be the one the caller
    /// was looking for any more: re-check the slot it came from.
    #[inline]
    pub fn try_get(&self, folio: &Folio) -> Option<FolioRef<'_>> {
        let pfn = self.pfn_of(folio)?;
        let folio = &self.descs[pfn];
        folio.try_get().then(|| FolioRef::from_parts(folio, self))
    }

    /// Turns a raw reference back into a [`FolioRef`].
    ///
    /// # Safety
    ///
    /// `folio` points at a descriptor of this pool on which the caller owns one raw reference
    /// (from [`FolioRef::into_raw`] or a successful [`Folio::try_get`]) that has not been given
    /// back, and the folio is not frozen by a freeze that counted that reference.
    #[inline]
    pub unsafe fn ref_from_raw(&self, folio: NonNull<Folio>) -> FolioRef<'_> {
        // SAFETY: the caller promises it is one of our descriptors, which live as long as `self`.
        let folio = unsafe { folio.as_ref() };
        debug_assert!(self.pfn_of(folio).is_some());
        debug_assert!(folio.ref_count() > 0);
        FolioRef::from_parts(folio, self)
    }

    /// Turns a raw lock and reference (from [`FolioGuard::into_raw`]) back into a guard.
    ///
    /// # Safety
    ///
    /// `folio` and `policy` come from [`FolioGuard::into_raw`] on a guard of this pool, and that
    /// lock and reference have not been taken back since.
    #[inline]
    pub unsafe fn guard_from_raw(
        &self,
        folio: NonNull<Folio>,
        policy: WaitPolicy,
    ) -> FolioGuard<'_> {
        // SAFETY: the caller promises it is one of our descriptors, which live as long as `self`.
        let folio = unsafe { folio.as_ref() };
        debug_assert!(self.pfn_of(folio).is_some());
        debug_assert!(folio.is_locked() && folio.ref_count() > 0);
        FolioGuard::from_parts(folio, self, policy)
    }

    /// The descriptor of frame `pfn` (`None` past the end). A head, a tail or free.
    #[inline]
    pub fn folio(&self, pfn: usize) -> Option<&Folio> {
        self.descs.get(pfn)
    }

    /// The frame number of a descriptor, if it belongs to this pool.
    #[inline]
    pub fn pfn_of(&self, folio: &Folio) -> Option<usize> {
        let off = (folio as *const Folio as usize).wrapping_sub(self.descs.as_ptr() as usize);
        let size = std::mem::size_of::<Folio>();
        (off.is_multiple_of(size) && off / size < self.descs.len()).then_some(off / size)
    }

    /// The frame number of one of our descriptors.
    #[inline]
    pub(crate) fn pfn_of_desc(&self, folio: &Folio) -> usize {
        let off = folio as *const Folio as usize - self.descs.as_ptr() as usize;
        off / std::mem::size_of::<Folio>()
    }

    /// The address of frame `pfn`.
    #[inline]
    pub(crate) fn frame_ptr(&self, pfn: usize) -> *mut u8 {
        debug_assert!(pfn < self.descs.len());
        // SAFETY: `pfn < nr_frames`, so the offset stays inside the mapping.
        unsafe { self.base.as_ptr().add(pfn << FRAME_SHIFT) }
    }

    /// Returns a folio whose last reference was just put.
    #[doc(alias = "free_unref_folios")]
    pub(crate) fn free_folio(&self, folio: &Folio) {
        // A borrower without a reference (`mem/borrow.rs`) may still read the frames: the
        // sequence moves (its check fails from here), and if a slot names the folio the free
        // waits on the deferred list for the borrow to end.
        folio.seq_retire();
        #[cfg(loom)]
        let scan = !super::borrow::broken::is(super::borrow::broken::FREE_SCAN);
        #[cfg(not(loom))]
        let scan = true;
        if scan && super::borrow::borrowed(folio) {
            let mut list = self.deferred.lock();
            list.push(self.pfn_of_desc(folio));
            // Under the lock, as the subtraction is, so that the count never goes below zero.
            self.nr_deferred.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.release(folio);
        if self.nr_deferred.load(Ordering::Relaxed) != 0 {
            self.free_deferred();
        }
    }

    /// A batch of folios to free together ([`FolioGuard::free_frozen`]), empty.
    pub fn free_batch(&self) -> FreeBatch<'_> {
        FreeBatch {
            pool: self,
            blocks: [(0, 0); FREE_BATCH],
            len: 0,
        }
    }

    /// Gives a retired folio's frames back to the buddy allocator.
    fn release(&self, folio: &Folio) {
        let order = folio.reset_freed();
        let pfn = self.pfn_of_desc(folio);
        // SAFETY: the folio's count went from 1 to 0 in `free_folio`'s caller, so this is the one
        // free of the block `alloc` handed out at `pfn` with this order (the order bits never
        // change while the folio is allocated): a deferred folio is released once, when it
        // leaves the list.
        unsafe { self.buddy.free(pfn as u32, order) };
    }

    /// Frees the deferred folios no borrow names any more; returns how many.
    ///
    /// No fence is needed before this scan. Every borrow that began after the free's scan
    /// fails its check (the sequence was retired before that scan's fence), and this scan
    /// comes after the free's (through the list's lock), so by coherence it reads each slot's
    /// word as the free's scan did or later: a slot that no longer names the folio was ended by
    /// a store (release) that this scan's load (acquire) reads or follows, and the borrower's
    /// reads happen before the frames are reused.
    #[cold]
    fn free_deferred(&self) -> usize {
        let mut list = self.deferred.lock();
        let before = list.len();
        #[cfg(loom)]
        if super::borrow::broken::is(super::borrow::broken::DEFERRED_NEVER_FREED) {
            return 0;
        }
        list.retain(|&pfn| {
            let folio = &self.descs[pfn];
            if super::borrow::named(folio) {
                return true;
            }
            self.release(folio);
            false
        });
        let freed = before - list.len();
        self.nr_deferred.fetch_sub(freed, Ordering::Relaxed);
        freed
    }

    /// Folios whose free waits for a borrow to end (see "Deferred frees").
    pub fn deferred_frees(&self) -> usize {
        self.nr_deferred.load(Ordering::Relaxed)
    }

    /// Returns the frames cached for order-0 allocations to the free lists; returns how many.
    #[doc(alias = "drain_all_pages")]
    pub fn drain(&self) -> usize {
        self.free_deferred();
        self.buddy.drain()
    }

    /// Counts the frames (a consistent snapshot; takes every allocator lock), after freeing the
    /// deferred folios whose borrows have ended.
    pub fn stats(&self) -> BuddyStats {
        if self.nr_deferred.load(Ordering::Relaxed) != 0 {
            self.free_deferred();
        }
        self.buddy.stats()
    }

    /// The free blocks of the buddy allocator as `(first frame, order)`, in frame order.
    pub fn free_blocks(&self) -> Vec<(u32, u32)> {
        self.buddy.free_blocks()
    }

    /// Frames that allocation can still hand out (free lists and caches). Takes every
    /// allocator lock; see [`FramePool::free_frames_hint`] for the lock-free reading.
    pub fn free_frames(&self) -> usize {
        self.stats().available()
    }

    /// Free frames (on the allocator's free lists and in its order-0 caches) at its last
    /// changes, without a lock: what reclaim's watermarks are checked against.
    #[inline]
    pub fn free_frames_hint(&self) -> usize {
        self.buddy.zone_free_frames() + self.buddy.cached_free_frames()
    }

    /// Whether a free block of at least `order` existed at the allocator's last change
    /// (lock-free; a hint).
    #[inline]
    pub fn has_free_block(&self, order: u32) -> bool {
        self.buddy.has_free_block(order)
    }
}

impl Drop for FramePool {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours; no `FolioRef` outlives the pool (they borrow it), and raw
        // references must be given back before the pool is dropped (`ref_from_raw`).
        unsafe {
            let _ = mm::munmap(self.base.as_ptr().cast(), self.capacity);
        }
    }
}

impl std::fmt::Debug for FramePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FramePool")
            .field("base", &self.base)
            .field("capacity", &self.capacity)
            .field("huge_pages_advised", &self.huge)
            .field("buddy", &self.buddy)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mem::folio::UPTODATE;

    #[test]
    fn rejects_bad_capacities() {
        assert!(matches!(FramePool::new(0), Err(PoolError::Empty)));
        assert!(matches!(
            FramePool::new(4097),
            Err(PoolError::NotFrameMultiple(4097))
        ));
        assert!(matches!(
            FramePool::new(MAX_CAPACITY + FRAME_SIZE),
            Err(PoolError::TooLarge { .. })
        ));
    }

    #[test]
    fn base_is_aligned_and_frames_are_usable() {
        let pool = FramePool::new(3 * POOL_ALIGN + 5 * FRAME_SIZE).unwrap();
        assert_eq!(pool.base() as usize % POOL_ALIGN, 0);
        assert_eq!(pool.nr_frames(), 3 * 512 + 5);
        let big = pool.alloc(MAX_ORDER).unwrap();
        assert_eq!(big.as_ptr() as usize % POOL_ALIGN, 0);
        assert_eq!(big.order(), MAX_ORDER);
        assert!(big.bytes().is_none(), "not up to date");
        let mut g = big.lock();
        g.bytes_mut().unwrap().fill(0xab);
        g.mark_uptodate();
        let r = g.unlock();
        assert!(r.flags() & UPTODATE != 0);
        assert!(r.bytes().unwrap().iter().all(|&b| b == 0xab));
        assert_eq!(r.bytes().unwrap().len(), 2 << 20);
        drop(r);
        assert_eq!(pool.stats().allocated, 0);
    }
}
