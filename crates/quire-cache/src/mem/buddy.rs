//! The buddy allocator: blocks of 2^order contiguous frames (order 0 to [`MAX_ORDER`]), after the
//! kernel's page allocator (`mm/page_alloc.c`).
//!
//! The allocator deals in frame numbers (pfns) only; it never touches the memory behind them.
//! [`crate::mem::pool::FramePool`] puts it under the frame mapping and the descriptors.
//!
//! # Free lists ("the zone")
//!
//! One lock guards one doubly linked free list per order. A free block is linked through two
//! arrays indexed by its first frame (`next`, `prev`), and `state[pfn]` records that `pfn` heads a
//! free block of a given order, so that freeing a block can find its buddy (`pfn ^ (1 << order)`)
//! in constant time and merge with it, order by order, up to [`MAX_ORDER`]. Allocating takes the
//! smallest free block that is large enough and splits it, putting the unused halves back on the
//! lists of lower orders.
//!
//! At start the frames `0..nr_frames` are cut into the largest naturally aligned blocks that fit
//! (2 MiB blocks, and smaller ones at the end when the count is not a multiple of 512). Freeing
//! everything merges back into exactly that layout; see [`Buddy::initial_blocks`].
//!
//! # Per-CPU-ish caches for order 0 ("pcp")
//!
//! Order-0 allocations are the common case (one 4 KiB page of a file) and must not serialise on
//! the zone lock. Each thread is assigned (round robin, on first use) one of a few cache shards;
//! a shard is a small stack of free frames behind its own lock. Allocation pops from the
//! thread's shard and, when it is empty, refills [`Buddy::pcp_batch`] frames from the zone in one
//! go; freeing pushes onto the shard and, when it holds more than [`Buddy::pcp_high`] frames,
//! returns a batch to the zone. Frames in a shard count as *free* for accounting, but the zone
//! sees them as allocated, so they do not merge with their buddies until they are returned.
//!
//! [`Buddy::drain`] empties every shard into the zone. An allocation that finds no block drains
//! the shards and tries once more before it reports failure, so the whole capacity is usable:
//! when no allocation or free is under way concurrently, an allocation fails only if no free
//! block of the order exists after merging. (Another thread may refill its shard between the
//! drain and the retry; then the allocation fails although frames are cached there, which is the
//! same transient shortage the kernel has with its per-CPU lists.)
//!
//! Lock order: a shard, then the zone. Shards are never locked while the zone is held, and
//! never two at once.
//!
//! # Accounting
//!
//! Allocated frames are counted where they are handed out or taken back: per shard for order 0
//! through the caches, in the zone for everything else. Counts are signed, because a frame may
//! be allocated through one shard and freed through another. [`Buddy::stats`] locks everything
//! and reports free (in the zone), cached (in shards) and allocated frames; when no operation is
//! under way, `free + cached + allocated == nr_frames` — the tests check it.

use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize as StdAtomicUsize, Ordering as StdOrdering};

use crate::sync::loom::{Mutex, MutexGuard};

/// The largest order: blocks of 2^9 frames = 2 MiB.
pub const MAX_ORDER: u32 = 9;
/// How many orders there are (`0..=MAX_ORDER`).
pub const NR_ORDERS: usize = MAX_ORDER as usize + 1;

/// "No frame" in the free-list links.
const NIL: u32 = u32::MAX;
/// `state[pfn]` for a frame that does not head a free block in the zone.
const NOT_FREE: u8 = 0xff;
/// `zone_top` when the zone has no free block.
const NO_BLOCK: usize = usize::MAX;

/// The most frames one cache shard keeps.
const PCP_HIGH_MAX: usize = 128;

/// The free lists, behind the zone lock.
struct Zone {
    /// Next free block on the same list, by first frame.
    next: Vec<u32>,
    /// Previous free block on the same list, by first frame.
    prev: Vec<u32>,
    /// The order of the free block headed by this frame, or [`NOT_FREE`].
    state: Vec<u8>,
    /// First block of each order's list.
    heads: [u32; NR_ORDERS],
    /// Blocks on each order's list.
    nr_blocks: [usize; NR_ORDERS],
    /// Frames on all lists.
    free_frames: usize,
    /// Frames handed out straight from the zone (not through a shard) and not yet freed to it.
    allocated: isize,
}

impl Zone {
    fn new(nr_frames: usize) -> Zone {
        let mut z = Zone {
            next: vec![NIL; nr_frames],
            prev: vec![NIL; nr_frames],
            state: vec![NOT_FREE; nr_frames],
            heads: [NIL; NR_ORDERS],
            nr_blocks: [0; NR_ORDERS],
            free_frames: 0,
            allocated: 0,
        };
        // Insert in reverse so that the lists come out in address order (low frames first).
        for (pfn, order) in Buddy::initial_blocks(nr_frames).into_iter().rev() {
            z.push(pfn, order);
        }
        z
    }

    /// Puts the free block `pfn` of `order` at the head of its list (no merging).
    fn push(&mut self, pfn: u32, order: u32) {
        let o = order as usize;
        let head = self.heads[o];
        self.next[pfn as usize] = head;
        self.prev[pfn as usize] = NIL;
        if head != NIL {
            self.prev[head as usize] = pfn;
        }
        self.heads[o] = pfn;
        self.state[pfn as usize] = order as u8;
        self.nr_blocks[o] += 1;
        self.free_frames += 1 << order;
    }

    /// Takes the free block `pfn` of `order` off its list.
    fn unlink(&mut self, pfn: u32, order: u32) {
        let o = order as usize;
        debug_assert_eq!(self.state[pfn as usize], order as u8);
        let (n, p) = (self.next[pfn as usize], self.prev[pfn as usize]);
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            self.heads[o] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
        self.state[pfn as usize] = NOT_FREE;
        self.nr_blocks[o] -= 1;
        self.free_frames -= 1 << order;
    }

    /// The largest order with a free block, or [`NO_BLOCK`].
    fn top_order(&self) -> usize {
        (0..NR_ORDERS)
            .rev()
            .find(|&k| self.heads[k] != NIL)
            .unwrap_or(NO_BLOCK)
    }

    /// Takes a block of exactly `order` off the lists, splitting a larger one if needed.
    fn take(&mut self, order: u32) -> Option<u32> {
        let found = (order..=MAX_ORDER).find(|&k| self.heads[k as usize] != NIL)?;
        let pfn = self.heads[found as usize];
        self.unlink(pfn, found);
        // Split: keep the low half, free the high half, down to the wanted order.
        let mut k = found;
        while k > order {
            k -= 1;
            self.push(pfn + (1 << k), k);
        }
        Some(pfn)
    }

    /// Returns the block `pfn` of `order` to the lists, merging it with free buddies.
    fn give(&mut self, mut pfn: u32, mut order: u32) {
        debug_assert_eq!(
            self.state[pfn as usize], NOT_FREE,
            "double free of frame {pfn}"
        );
        while order < MAX_ORDER {
            let buddy = pfn ^ (1 << order);
            // A buddy outside the pool, or not a free block of the same order, stops the merge.
            // (A block that is only partly inside the pool is never free: see `initial_blocks`.)
            if buddy as usize >= self.state.len() || self.state[buddy as usize] != order as u8 {
                break;
            }
            self.unlink(buddy, order);
            pfn = pfn.min(buddy);
            order += 1;
        }
        self.push(pfn, order);
    }
}

/// The zone, locked; publishes [`Buddy::zone_free_frames`] and the largest free order on drop.
struct ZoneGuard<'a> {
    zone: MutexGuard<'a, Zone>,
    buddy: &'a Buddy,
}

impl std::ops::Deref for ZoneGuard<'_> {
    type Target = Zone;
    fn deref(&self) -> &Zone {
        &self.zone
    }
}

impl std::ops::DerefMut for ZoneGuard<'_> {
    fn deref_mut(&mut self) -> &mut Zone {
        &mut self.zone
    }
}

impl Drop for ZoneGuard<'_> {
    fn drop(&mut self) {
        self.buddy
            .zone_free
            .store(self.zone.free_frames, StdOrdering::Relaxed);
        self.buddy
            .zone_top
            .store(self.zone.top_order(), StdOrdering::Relaxed);
    }
}

/// One cache shard: free order-0 frames and the signed count of frames allocated through it.
struct Pcp {
    frames: Vec<u32>,
    allocated: isize,
}

/// A consistent picture of the allocator's frames, taken with every lock held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuddyStats {
    /// Frames the allocator manages.
    pub total: usize,
    /// Frames on the zone's free lists.
    pub free: usize,
    /// Free frames held in the order-0 caches.
    pub cached: usize,
    /// Frames handed out and not yet freed.
    pub allocated: usize,
    /// Free blocks of each order on the zone's lists.
    pub free_blocks: [usize; NR_ORDERS],
}

impl BuddyStats {
    /// Frames available to allocation: on the free lists or in the caches.
    pub fn available(&self) -> usize {
        self.free + self.cached
    }
}

/// The buddy allocator; see the [module documentation](self).
pub struct Buddy {
    zone: Mutex<Zone>,
    /// Frames on the zone's free lists, as of the last change (written under the zone lock,
    /// read without it: the watermark checks of reclaim).
    zone_free: StdAtomicUsize,
    /// The largest order with a free block on the zone's lists, or `NO_BLOCK` (written under
    /// the zone lock).
    zone_top: StdAtomicUsize,
    /// Free frames held in the order-0 caches (changed under the shard's lock).
    cached_free: StdAtomicUsize,
    pcp: Box<[CachePadded<Mutex<Pcp>>]>,
    pcp_high: usize,
    pcp_batch: usize,
    nr_frames: usize,
}

thread_local! {
    /// This thread's shard number (taken modulo each allocator's shard count), or `usize::MAX`.
    static MY_SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_THREAD: StdAtomicUsize = StdAtomicUsize::new(0);

/// How many shards per-thread structures have on this machine (the allocator's order-0
/// caches, the LRU batches, a cache's counters): twice the CPUs, a power of two, 2 to 64 — so
/// that threads up to twice the CPUs, numbered round robin, each get one of their own.
pub(crate) fn nr_shards() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (2 * cpus).next_power_of_two().clamp(2, 64)
}

/// This thread's number, given round robin on first use: the shard index of per-thread caches
/// (taken modulo the number of shards).
pub(crate) fn thread_number() -> usize {
    MY_SHARD.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_THREAD.fetch_add(1, StdOrdering::Relaxed);
        s.set(v);
        v
    })
}

impl Buddy {
    /// An allocator over frames `0..nr_frames`, all free, with order-0 caches sized for this
    /// machine and pool: a few shards (twice the CPUs, at least 2, at most 64, a power of two),
    /// each holding at most `min(128, nr_frames / (16 * shards))` frames. A pool too small for
    /// caches of at least 4 frames gets none.
    ///
    /// # Panics
    ///
    /// If `nr_frames >= u32::MAX` (16 TiB of 4 KiB frames); [`crate::mem::pool::FramePool::new`]
    /// rejects such sizes with an error first.
    pub fn new(nr_frames: usize) -> Buddy {
        let shards = nr_shards();
        let high = (nr_frames / (16 * shards)).min(PCP_HIGH_MAX);
        let high = if high < 4 { 0 } else { high };
        Buddy::with_caches(nr_frames, shards, high)
    }

    /// An allocator with `shards` order-0 cache shards of at most `high` frames each (`high == 0`
    /// disables the caches). Refills and overflows move `max(1, high / 4)` frames at a time.
    ///
    /// # Panics
    ///
    /// If `nr_frames >= u32::MAX`.
    pub fn with_caches(nr_frames: usize, shards: usize, high: usize) -> Buddy {
        assert!(
            nr_frames < NIL as usize,
            "buddy allocator: {nr_frames} frames is too many"
        );
        let shards = if high == 0 { 0 } else { shards.max(1) };
        let pcp = (0..shards)
            .map(|_| {
                CachePadded::new(Mutex::new(Pcp {
                    frames: Vec::with_capacity(high + 1),
                    allocated: 0,
                }))
            })
            .collect();
        let zone = Zone::new(nr_frames);
        let (free, top) = (zone.free_frames, zone.top_order());
        Buddy {
            zone: Mutex::new(zone),
            zone_free: StdAtomicUsize::new(free),
            zone_top: StdAtomicUsize::new(top),
            cached_free: StdAtomicUsize::new(0),
            pcp,
            pcp_high: high,
            pcp_batch: (high / 4).max(1),
            nr_frames,
        }
    }

    /// The largest naturally aligned blocks that tile frames `0..nr_frames`, in address order:
    /// what the free lists hold at start and again after everything has been freed and drained.
    pub fn initial_blocks(nr_frames: usize) -> Vec<(u32, u32)> {
        let mut blocks = Vec::new();
        let mut pfn = 0usize;
        while pfn < nr_frames {
            let mut order = MAX_ORDER;
            while !pfn.is_multiple_of(1 << order) || pfn + (1 << order) > nr_frames {
                order -= 1;
            }
            blocks.push((pfn as u32, order));
            pfn += 1 << order;
        }
        blocks
    }

    /// Frames managed.
    pub fn nr_frames(&self) -> usize {
        self.nr_frames
    }

    /// The most free frames one order-0 cache shard holds (0: no caches).
    pub fn pcp_high(&self) -> usize {
        self.pcp_high
    }

    /// Frames moved between a shard and the zone at a time.
    pub fn pcp_batch(&self) -> usize {
        self.pcp_batch
    }

    /// Number of order-0 cache shards.
    pub fn pcp_shards(&self) -> usize {
        self.pcp.len()
    }

    /// Locks the zone; the guard publishes the free count and the largest free order when it
    /// is dropped.
    fn zone(&self) -> ZoneGuard<'_> {
        ZoneGuard {
            zone: self.zone.lock(),
            buddy: self,
        }
    }

    /// Frames on the zone's free lists at the last change, read without a lock.
    #[inline]
    pub fn zone_free_frames(&self) -> usize {
        self.zone_free.load(StdOrdering::Relaxed)
    }

    /// Free frames held in the order-0 caches at the last change, read without a lock.
    #[inline]
    pub fn cached_free_frames(&self) -> usize {
        self.cached_free.load(StdOrdering::Relaxed)
    }

    /// Whether the zone had a free block of at least `order` at the last change (lock-free).
    #[inline]
    pub fn has_free_block(&self, order: u32) -> bool {
        let top = self.zone_top.load(StdOrdering::Relaxed);
        top != NO_BLOCK && top >= order as usize
    }

    fn my_shard(&self) -> &Mutex<Pcp> {
        &self.pcp[thread_number() % self.pcp.len()]
    }

    /// Allocates a block of 2^`order` frames, naturally aligned (its first frame is a multiple of
    /// 2^`order`), and returns its first frame. `None` when no such block is free after the
    /// caches were drained, or when `order > MAX_ORDER`.
    #[doc(alias("__alloc_pages", "rmqueue"))]
    pub fn alloc(&self, order: u32) -> Option<u32> {
        if order > MAX_ORDER {
            return None;
        }
        if order == 0 && self.pcp_high > 0 {
            if let Some(pfn) = self.alloc_cached() {
                return Some(pfn);
            }
        } else if let Some(pfn) = self.alloc_zone(order) {
            return Some(pfn);
        }
        // Out of blocks: whatever sits in the caches may merge into what we need.
        self.drain();
        self.alloc_zone(order)
    }

    /// Order 0 through this thread's shard, refilling it from the zone when it is empty.
    fn alloc_cached(&self) -> Option<u32> {
        let mut pcp = self.my_shard().lock();
        let pfn = match pcp.frames.pop() {
            Some(pfn) => pfn,
            None => {
                {
                    let mut zone = self.zone();
                    for _ in 0..self.pcp_batch {
                        match zone.take(0) {
                            Some(pfn) => pcp.frames.push(pfn),
                            None => break,
                        }
                    }
                }
                self.cached_free
                    .fetch_add(pcp.frames.len(), StdOrdering::Relaxed);
                pcp.frames.pop()?
            }
        };
        self.cached_free.fetch_sub(1, StdOrdering::Relaxed);
        pcp.allocated += 1;
        Some(pfn)
    }

    fn alloc_zone(&self, order: u32) -> Option<u32> {
        let mut zone = self.zone();
        let pfn = zone.take(order)?;
        zone.allocated += 1 << order;
        Some(pfn)
    }

    /// Returns the block that starts at frame `pfn` with 2^`order` frames.
    ///
    /// # Safety
    ///
    /// `pfn` must have been returned by [`Buddy::alloc`] of this allocator with this `order`, and
    /// not freed since. (The allocator itself stays memory safe either way, but whoever hands the
    /// frames' memory out relies on no frame being handed out twice.)
    #[doc(alias("__free_pages", "free_one_page"))]
    pub unsafe fn free(&self, pfn: u32, order: u32) {
        debug_assert!(order <= MAX_ORDER && (pfn as usize) < self.nr_frames);
        debug_assert_eq!(pfn % (1 << order), 0, "misaligned free of frame {pfn}");
        if order == 0 && self.pcp_high > 0 {
            self.cache_frame(&mut self.my_shard().lock(), pfn);
        } else {
            self.free_to_zone(pfn, order);
        }
    }

    /// Frees several blocks (frame number, order) at once: the order-0 ones under one lock of
    /// the calling thread's cache shard, as [`Buddy::free`] would one by one.
    ///
    /// # Safety
    ///
    /// As [`Buddy::free`], for each block.
    pub unsafe fn free_many(&self, blocks: &[(u32, u32)]) {
        if self.pcp_high == 0 {
            for &(pfn, order) in blocks {
                // SAFETY: the caller's promise, block by block.
                unsafe { self.free(pfn, order) };
            }
            return;
        }
        let mut pcp = self.my_shard().lock();
        for &(pfn, order) in blocks {
            debug_assert!(order <= MAX_ORDER && (pfn as usize) < self.nr_frames);
            debug_assert_eq!(pfn % (1 << order), 0, "misaligned free of frame {pfn}");
            if order == 0 {
                self.cache_frame(&mut pcp, pfn);
            } else {
                self.free_to_zone(pfn, order);
            }
        }
    }

    /// Puts a freed frame in the locked order-0 cache `pcp`; past [`Buddy::pcp_high`], gives the
    /// oldest back (keeping the recently freed, cache-warm ones), so the shard never holds more
    /// than `pcp_high + 1` (the capacity it keeps).
    fn cache_frame(&self, pcp: &mut Pcp, pfn: u32) {
        pcp.allocated -= 1;
        pcp.frames.push(pfn);
        self.cached_free.fetch_add(1, StdOrdering::Relaxed);
        if pcp.frames.len() > self.pcp_high {
            let n = self.pcp_batch.min(pcp.frames.len());
            let mut zone = self.zone();
            for pfn in pcp.frames.drain(..n) {
                zone.give(pfn, 0);
            }
            self.cached_free.fetch_sub(n, StdOrdering::Relaxed);
        }
    }

    /// Gives a freed block straight to the zone's free lists.
    fn free_to_zone(&self, pfn: u32, order: u32) {
        let mut zone = self.zone();
        zone.allocated -= 1 << order;
        zone.give(pfn, order);
    }

    /// Returns every frame held in the order-0 caches to the free lists (where it merges with its
    /// buddies). Returns how many frames were moved.
    #[doc(alias = "drain_all_pages")]
    pub fn drain(&self) -> usize {
        let mut moved = 0;
        let mut frames = Vec::new();
        for shard in self.pcp.iter() {
            {
                let mut pcp = shard.lock();
                if pcp.frames.is_empty() {
                    continue;
                }
                std::mem::swap(&mut frames, &mut pcp.frames);
                pcp.frames.reserve(self.pcp_high + 1);
                self.cached_free
                    .fetch_sub(frames.len(), StdOrdering::Relaxed);
            }
            let mut zone = self.zone();
            moved += frames.len();
            for pfn in frames.drain(..) {
                zone.give(pfn, 0);
            }
        }
        moved
    }

    /// Counts frames, with every shard and the zone locked at once (a consistent snapshot).
    pub fn stats(&self) -> BuddyStats {
        let shards: Vec<_> = self.pcp.iter().map(|s| s.lock()).collect();
        let zone = self.zone();
        let cached = shards.iter().map(|p| p.frames.len()).sum();
        let allocated = zone.allocated + shards.iter().map(|p| p.allocated).sum::<isize>();
        BuddyStats {
            total: self.nr_frames,
            free: zone.free_frames,
            cached,
            allocated: usize::try_from(allocated).expect("buddy: negative allocated count"),
            free_blocks: zone.nr_blocks,
        }
    }

    /// The free blocks on the zone's lists as `(first frame, order)`, sorted by frame (for tests
    /// and diagnostics; takes the zone lock and walks every list).
    pub fn free_blocks(&self) -> Vec<(u32, u32)> {
        let zone = self.zone();
        let mut v = Vec::new();
        for order in 0..=MAX_ORDER {
            let mut pfn = zone.heads[order as usize];
            while pfn != NIL {
                v.push((pfn, order));
                pfn = zone.next[pfn as usize];
            }
        }
        v.sort_unstable();
        v
    }
}

impl std::fmt::Debug for Buddy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buddy")
            .field("nr_frames", &self.nr_frames)
            .field("pcp_shards", &self.pcp.len())
            .field("pcp_high", &self.pcp_high)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn initial_layout_tiles_the_range() {
        assert_eq!(Buddy::initial_blocks(0), vec![]);
        assert_eq!(Buddy::initial_blocks(1), vec![(0, 0)]);
        assert_eq!(Buddy::initial_blocks(3), vec![(0, 1), (2, 0)]);
        assert_eq!(Buddy::initial_blocks(512), vec![(0, 9)]);
        assert_eq!(
            Buddy::initial_blocks(512 + 256 + 3),
            vec![(0, 9), (512, 8), (768, 1), (770, 0)]
        );
        assert_eq!(
            Buddy::initial_blocks(1024),
            vec![(0, 9), (512, 9)],
            "no order above MAX_ORDER"
        );
    }

    #[test]
    fn split_and_merge() {
        let b = Buddy::with_caches(512, 1, 0);
        let a = b.alloc(0).unwrap();
        assert_eq!(a, 0);
        // One block of each order 0..9 remains: 1, 2, 4, ... 256 frames.
        assert_eq!(b.stats().free_blocks, [1, 1, 1, 1, 1, 1, 1, 1, 1, 0]);
        let c = b.alloc(3).unwrap();
        assert_eq!(c % 8, 0);
        // SAFETY: both blocks came from `alloc` with these orders and are freed once.
        unsafe {
            b.free(a, 0);
            b.free(c, 3);
        }
        assert_eq!(b.free_blocks(), vec![(0, 9)]);
        assert_eq!(b.alloc(10), None);
    }

    #[test]
    fn exhausts_exactly_and_drains_caches_on_failure() {
        let b = Buddy::with_caches(64, 2, 8);
        let got: Vec<u32> = std::iter::from_fn(|| b.alloc(0)).collect();
        assert_eq!(got.len(), 64);
        let mut sorted = got.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 64);
        for &pfn in &got {
            // SAFETY: each frame was allocated once above and is freed once.
            unsafe { b.free(pfn, 0) };
        }
        // Some frames now sit in the cache; an order-3 allocation must still find a block.
        let s = b.stats();
        assert_eq!(s.allocated, 0);
        assert_eq!(s.free + s.cached, 64);
        let big: Vec<u32> = std::iter::from_fn(|| b.alloc(3)).collect();
        assert_eq!(big.len(), 8, "the caches were drained so everything merged");
    }

    #[test]
    fn free_many_frees_mixed_orders_once_and_keeps_the_cache_under_its_mark() {
        for high in [0, 4] {
            let b = Buddy::with_caches(64, 1, high);
            let small: Vec<u32> = (0..24).map(|_| b.alloc(0).unwrap()).collect();
            let big: Vec<u32> = (0..3).map(|_| b.alloc(2).unwrap()).collect();
            let mut blocks: Vec<(u32, u32)> = small.iter().map(|&p| (p, 0)).collect();
            // Orders interleaved, as a round of reclaim frees them.
            for (i, &p) in big.iter().enumerate() {
                blocks.insert(4 * i + 1, (p, 2));
            }
            // SAFETY: each block was allocated above with its order and is freed once.
            unsafe { b.free_many(&blocks) };
            let s = b.stats();
            assert_eq!(s.allocated, 0, "high {high}");
            assert_eq!(s.free + s.cached, 64, "high {high}");
            assert!(
                s.cached <= high,
                "the cache holds {} over its mark {high}",
                s.cached
            );
            // Everything is free exactly once: the whole range comes back as whole blocks.
            b.drain();
            let all: Vec<u32> = std::iter::from_fn(|| b.alloc(3)).collect();
            assert_eq!(all.len(), 8, "high {high}: merged back into order-3 blocks");
            assert_eq!(b.alloc(0), None, "high {high}: a frame was freed twice");
        }
    }
}
