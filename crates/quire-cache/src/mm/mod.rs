//! Anonymous memory on the cache's budget: address spaces with software page tables, fork with
//! copy-on-write, swap, mlock, and the reverse map — technique 5, after the kernel's
//! `mm/memory.c`, `mm/rmap.c`, `mm/swap_state.c`, `mm/swapfile.c` and `mm/mlock.c`.
//!
//! # The pieces
//!
//! | quire | kernel | what |
//! |---|---|---|
//! | [`AnonMemory`] | the machine's anonymous memory and its swap | made over a [`PageCache`]: its folios share the cache's frame pool, LRU lists and reclaim |
//! | [`Space`] | `mm_struct` with one `vm_area_struct` | a range of virtual pages, a page table (`pte`), faults, fork, mlock, munmap |
//! | `AnonVma` (`mm/rmap.rs`) | `anon_vma` | a *family* of spaces forked from one another; every anonymous folio names its family (`mapping`) and its virtual page (`index`) |
//! | `swapfile` (`mm/swapfile.rs`) | `swap_info_struct`, `swap_map` | slots on a swap [`Store`], counted |
//! | `swap_state` (`mm/swap_state.rs`) | the swap cache | an [`XArray`](crate::xarray::XArray) of folios keyed by slot |
//!
//! # An anonymous folio
//!
//! Order 0, flags `ANON | UPTODATE`, on the anonymous LRU lists (or the unevictable one),
//! `mapping` its family's id, `index` its virtual page (the same in every space of the family,
//! as fork keeps addresses). Two counters live in the flag word's owner bits (see
//! [`crate::mem::folio`]): the **mapcount** (bits 32–47, present ptes mapping it) and the
//! **mlock count** (bits 48–63, present ptes mapping it with `MLOCK`). References: one per
//! present pte, one for the swap cache, and any a thread holds for a moment.
//!
//! `DIRTY` on an anonymous folio means *its swap copy is stale or missing*: set when the folio
//! is made (first touch, a copy-on-write copy) and when it leaves the swap cache while mapped;
//! cleared when it is written to swap and when it is read from swap. Writes through a writable
//! pte do **not** set it: the frame's hardware dirty bit records them (the MMU's, through
//! [`crate::mem::dirtybit`]) until the reverse map transfers it.
//!
//! # The dirty-bit transfer on the last unmap (`page_remove_rmap`)
//!
//! When a folio's last mapping goes (munmap, a space dropped, a copy-on-write replacing it,
//! reclaim's unmap), the writes its frame recorded must reach `DIRTY` — unless nobody can ever
//! read them. With [`DirtyTest::SkipDeadAnon`] (the default) the hardware bit is tested and
//! cleared for file folios and for anonymous folios **in the swap cache**, and not for anonymous
//! folios outside it: their content dies with the mapping. The swap-cache condition is needed: a
//! folio swapped in (clean, its slot current) and then
//! written in place has its only record of the write in the hardware bit; if a space forked
//! from the writer mlocked it, reclaim unmaps the writer (leaving a swap entry) and fails on the
//! locker; when the locker exits its last unmap must transfer the bit, or reclaim frees a folio
//! it thinks clean and the writer reads stale bytes from swap (the unit tests in `mm/tests.rs`).
//! `DirtyTest::Always` (feature `bench-internals`) tests on every last unmap (the "before",
//! rule 7 of docs/RULES.md). Reclaim's own unmap always tests. Tests are counted as `dirty_tests`,
//! transfers as `dirty_transfers`.
//!
//! # Lock order
//!
//! folio lock → a family's space list (briefly) → a space's page-table lock → the LRU lock →
//! the swap map. A fault holds its page-table lock and only *tries* folio locks (on failure it
//! drops the page-table lock, waits for the folio and starts over); reclaim holds the folio
//! lock and only *tries* page-table locks (on failure it keeps the folio). Neither waits for
//! the other, so neither can deadlock, even when a fault's allocation reclaims.
//!
//! # Access to the bytes
//!
//! A space hands out a page's bytes only inside its page-table lock ([`Space::with_page`],
//! [`Space::with_page_mut`], [`Space::read`], [`Space::write`]). `&mut [u8]` is lent only through
//! a writable pte, which exists only while the space is the folio's sole mapper (mapcount 1, no
//! swap entry referring to its slot); `&[u8]` through any present pte. Reclaim reads a folio for
//! swap-out only after unmapping every pte, holding the folio lock; a copy-on-write copy reads
//! the source under the copier's page-table lock while it is mapped read-only everywhere. So a
//! `&mut` never aliases another borrow, and the closure API is the "TLB flush": once an unmap
//! holds the page-table lock, no access through the old entry is in progress or can start.

mod file;
pub(crate) mod pte;
mod rmap;
mod space;
pub(crate) mod swap_state;
pub(crate) mod swapfile;
#[cfg(all(test, not(loom)))]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use thiserror::Error;

pub use file::SharedPage;
#[cfg(loom)]
#[doc(hidden)]
pub use rmap::model;
pub use space::{PageState, Space, MAX_SPACE_PAGES};

use crate::filemap::{Cache, FilemapError, PageCache};
use crate::mem::dirtybit::{DirtyBitKind, DirtyBitMode, DirtyBits};
use crate::mem::folio::{Folio, FRAME_SIZE};
use crate::stats::{Event, Snapshot};
use crate::store::{Store, StoreError};
use rmap::AnonVma;
use swap_state::SwapCache;
use swapfile::SwapDevice;

/// When the last mapping of a folio goes, whether its hardware dirty bit is tested (rule 7 of
/// docs/RULES.md: `Always`, with the feature `bench-internals`, is the "before").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DirtyTest {
    /// Test file folios and anonymous folios in the swap cache; skip anonymous folios outside
    /// it, whose content is dead.
    #[default]
    SkipDeadAnon,
    /// Test every folio (the kernel before the patch): the "before" policy for `quire bench`.
    #[cfg(feature = "bench-internals")]
    Always,
    /// Skip every anonymous folio, in the swap cache or not: the patch *without* the condition
    /// its review asked for. Loses writes (see the module documentation), so it exists only in
    /// the crate's unit tests, which show that it does.
    #[cfg(test)]
    SkipAllAnon,
}

/// How an [`AnonMemory`] is set up.
pub struct AnonConfig {
    /// The swap device's store, and how many page slots of it to use. `None`: no swap, so
    /// anonymous memory is never reclaimed.
    pub swap: Option<(Box<dyn Store>, u64)>,
    /// Which folios' dirty bits are tested on their last unmap (a "before" policy for
    /// `quire bench`: the default is the mechanism).
    #[cfg(feature = "bench-internals")]
    pub dirty_test: DirtyTest,
    /// The dirty bit asked for: the hardware one where the kernel grants it (the default), or
    /// the software one.
    pub dirty_bit: DirtyBitMode,
}

impl AnonConfig {
    /// No swap, the seed's rule, the hardware dirty bit where granted.
    pub fn new() -> AnonConfig {
        AnonConfig {
            swap: None,
            #[cfg(feature = "bench-internals")]
            dirty_test: DirtyTest::default(),
            dirty_bit: DirtyBitMode::Auto,
        }
    }

    /// The rule for the dirty test: the default's unless the feature `bench-internals` chose
    /// another.
    fn dirty_test(&self) -> DirtyTest {
        #[cfg(feature = "bench-internals")]
        return self.dirty_test;
        #[cfg(not(feature = "bench-internals"))]
        DirtyTest::default()
    }

    /// Swap on `store`, `slots` pages of it.
    pub fn with_swap(mut self, store: impl Store + 'static, slots: u64) -> AnonConfig {
        self.swap = Some((Box::new(store), slots));
        self
    }
}

impl Default for AnonConfig {
    fn default() -> AnonConfig {
        AnonConfig::new()
    }
}

impl std::fmt::Debug for AnonConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnonConfig")
            .field("swap_slots", &self.swap.as_ref().map(|(_, n)| *n))
            .field("dirty_test", &self.dirty_test())
            .field("dirty_bit", &self.dirty_bit)
            .finish()
    }
}

/// What can go wrong with anonymous memory. Nothing is lost on an error: the page keeps what it
/// held (in memory or in swap).
#[derive(Debug, Error)]
pub enum MmError {
    /// A virtual page outside the space.
    #[error("page {page} is outside the space of {pages} pages")]
    OutOfRange {
        /// The page asked for.
        page: u64,
        /// Pages in the space.
        pages: u64,
    },
    /// A write to a page protected read-only.
    #[error("page {page} is read-only")]
    ReadOnly {
        /// The page.
        page: u64,
    },
    /// No frame could be had: every frame stayed pinned, locked or unswappable (swap full or
    /// absent) for the cache's allocation timeout.
    #[error("out of memory: {frames} frames all in use and none could be reclaimed (swap full or absent)")]
    NoMemory {
        /// Frames in the pool.
        frames: usize,
    },
    /// Reading a page back from swap failed; the page stays in swap.
    #[error("swap-in of page {page} failed: {source}")]
    SwapIn {
        /// The page.
        page: u64,
        /// The store's error.
        source: StoreError,
    },
    /// Too many spaces map one folio, or refer to one swap slot.
    #[error("too many mappings of page {page}")]
    TooManyMappings {
        /// The page.
        page: u64,
    },
    /// The swap store is smaller than the slots asked for, or unreadable.
    #[error("swap device: {0}")]
    Swap(String),
    /// The cache already has anonymous memory (one per cache).
    #[error("the page cache already has anonymous memory")]
    AlreadyAttached,
    /// A page of a file mapping past the end of the file (mapped past it, or the file was
    /// truncated since): the kernel's `SIGBUS`.
    #[error("page {page} lies past the end of the mapped file ({file_pages} pages)")]
    PastEof {
        /// The page (of the space at a fault, of the file at `map_file`).
        page: u64,
        /// Pages in the file now.
        file_pages: u64,
    },
    /// Reading or dirtying a page of a mapped file failed (an I/O error of its store, or the
    /// dirty limit while its write-back fails); the page is unchanged.
    #[error("mapped file: {0}")]
    File(#[source] FilemapError),
    /// A file mapping would overlap another one.
    #[error("page {page} is already mapped from a file")]
    Overlap {
        /// The first page of the overlap.
        page: u64,
    },
    /// A page of a file mapping asked for as `&[u8]` / `&mut [u8]`: other spaces may write it
    /// at the same time, so it is only lent as shared memory (`Space::with_shared_page`).
    #[error("page {page} is a shared file page: use with_shared_page")]
    SharedPage {
        /// The page.
        page: u64,
    },
    /// An offset or length outside a page, or a word access not aligned to 8 bytes.
    #[error("{len} bytes at offset {offset} do not fit in a page (or are not an aligned word)")]
    BadOffset {
        /// The offset.
        offset: usize,
        /// The length.
        len: usize,
    },
    /// A write through a page lent for reading.
    #[error("the page was lent for reading only")]
    NotWritable,
    /// A file of another page cache: a space maps only files of the cache its memory is on.
    #[error("the file belongs to another page cache")]
    OtherCache,
    /// An empty or reversed range of pages.
    #[error("empty range of pages {start}..{end}")]
    EmptyRange {
        /// Its start.
        start: u64,
        /// Its end.
        end: u64,
    },
}

/// The mapcount's unit in the flag word.
pub(crate) const MAPCOUNT_ONE: u64 = 1 << 32;
/// The mapcount's bits in the flag word (32–47).
pub(crate) const MAPCOUNT_MASK: u64 = crate::mem::folio::MAPCOUNT_BITS;
/// The mlock count's unit in the flag word.
pub(crate) const MLOCK_ONE: u64 = 1 << 48;
/// The mlock count's bits in the flag word (48–62).
pub(crate) const MLOCK_MASK: u64 = 0x7fff << 48;
/// Bit 63: the last unmap of the folio is testing its frames' dirty bit. Set in the same
/// read-modify-write that takes the mapcount to zero and cleared after the test, so that a
/// first mapping that comes meanwhile knows not to clear the bit the test is about to read.
pub(crate) const RMAP_TESTING: u64 = 1 << 63;
/// The most ptes that may map one folio (the mlock count, never above the mapcount, has 15
/// bits).
pub(crate) const MAX_MAPCOUNT: u64 = 0x7fff;

/// A folio's mapcount, from its flag word.
#[inline]
pub(crate) fn mapcount(flags: u64) -> u64 {
    (flags & MAPCOUNT_MASK) >> 32
}

/// A folio's mlock count, from its flag word.
#[inline]
pub(crate) fn mlock_count(flags: u64) -> u64 {
    (flags & MLOCK_MASK) >> 48
}

/// The state shared by an [`AnonMemory`] handle, its spaces and the cache's reclaim.
pub(crate) struct AnonInner {
    cache: Arc<Cache>,
    dirty_test: DirtyTest,
    dirty: DirtyBits,
    swap: Option<SwapDevice>,
    swap_cache: SwapCache,
    /// Live families by id (a folio's `mapping`).
    families: Mutex<HashMap<usize, Weak<AnonVma>>>,
    next_family: AtomicUsize,
    /// Spaces alive.
    spaces: AtomicUsize,
    /// Frames of anonymous folios alive (mapped or in the swap cache).
    frames: AtomicUsize,
}

/// Anonymous memory on a page cache's budget, with its swap device; makes [`Space`]s. See the
/// [module documentation](self). Cloning gives another handle on the same memory.
#[derive(Clone)]
pub struct AnonMemory {
    inner: Arc<AnonInner>,
}

/// What anonymous memory holds at one moment.
#[derive(Clone, Debug)]
pub struct AnonStats {
    /// The dirty bit in use.
    pub dirty_bit: DirtyBitKind,
    /// Why the hardware dirty bit is not in use, if it is not.
    pub dirty_bit_fallback: Option<String>,
    /// Which folios are tested on their last unmap.
    pub dirty_test: DirtyTest,
    /// Spaces alive.
    pub spaces: usize,
    /// Frames of anonymous folios (mapped or in the swap cache).
    pub anon_frames: usize,
    /// Folios in the swap cache.
    pub swap_cache_folios: usize,
    /// Swap slots in use, and in the device.
    pub swap_used: u64,
    /// See `swap_used`.
    pub swap_slots: u64,
    /// The cache's counters (`dirty_tests`, `dirty_transfers`, `cow_copies`, `cow_reuses`,
    /// `pswpout`, `pswpin`, `anon_faults`, and reclaim's).
    pub vmstat: Snapshot,
}

impl AnonStats {
    /// One counter.
    pub fn get(&self, e: Event) -> u64 {
        self.vmstat.get(e)
    }
}

impl AnonMemory {
    /// Anonymous memory on `cache`'s budget. Registers the frame pool for the hardware dirty
    /// bit (or falls back to the software one, keeping the reason) — the first time anything
    /// maps the cache's frames.
    pub fn new(cache: &PageCache, config: AnonConfig) -> Result<AnonMemory, MmError> {
        let shared = cache.shared().clone();
        let dirty_test = config.dirty_test();
        let swap = match config.swap {
            None => None,
            Some((store, slots)) => {
                if slots == 0 || slots > pte::MAX_TARGET {
                    return Err(MmError::Swap(format!("{slots} slots")));
                }
                let need = slots * FRAME_SIZE as u64;
                let len = store.len().map_err(|e| MmError::Swap(e.to_string()))?;
                if len < need {
                    store.set_len(need).map_err(|e| {
                        MmError::Swap(format!("cannot size the store to {need} bytes: {e}"))
                    })?;
                }
                Some(SwapDevice::new(store, slots))
            }
        };
        let pool = shared.pool();
        let dirty = DirtyBits::new(pool.base(), pool.nr_frames(), config.dirty_bit);
        let inner = Arc::new(AnonInner {
            cache: shared.clone(),
            dirty_test,
            dirty,
            swap,
            swap_cache: SwapCache::new(),
            families: Mutex::new(HashMap::new()),
            next_family: AtomicUsize::new(1),
            spaces: AtomicUsize::new(0),
            frames: AtomicUsize::new(0),
        });
        let weak: Weak<dyn crate::vmscan::AnonOwner> =
            Arc::downgrade(&(inner.clone() as Arc<dyn crate::vmscan::AnonOwner>));
        if !shared.set_anon(weak) {
            return Err(MmError::AlreadyAttached);
        }
        Ok(AnonMemory { inner })
    }

    /// A new space of `pages` virtual pages, all none (reading zeros), writable.
    pub fn new_space(&self, pages: u64) -> Result<Space, MmError> {
        Space::new(&self.inner, pages)
    }

    /// The dirty bit in use.
    pub fn dirty_bit(&self) -> DirtyBitKind {
        self.inner.dirty.kind()
    }

    /// What the memory holds now (drains the LRU batches first, so that the figures add up).
    pub fn stats(&self) -> AnonStats {
        let i = &self.inner;
        i.cache.vm().drain_all(i.cache.pool());
        AnonStats {
            dirty_bit: i.dirty.kind(),
            dirty_bit_fallback: i.dirty.fallback_reason().map(str::to_owned),
            dirty_test: i.dirty_test,
            spaces: i.spaces.load(Ordering::Relaxed),
            anon_frames: i.frames.load(Ordering::Relaxed),
            swap_cache_folios: i.swap_cache.len(),
            swap_used: i.swap.as_ref().map_or(0, SwapDevice::used),
            swap_slots: i.swap.as_ref().map_or(0, SwapDevice::slots),
            vmstat: i.cache.vm().counters.snapshot(),
        }
    }

    /// Frees what the swap cache holds that nobody needs any more (folios whose slot no swap
    /// entry refers to and that no space maps), as reclaim would when it reached them; returns
    /// how many it freed. Folios locked at the moment are left for reclaim.
    pub fn trim_swap_cache(&self) -> usize {
        self.inner.trim_swap_cache()
    }
}

impl std::fmt::Debug for AnonMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnonMemory")
            .field("dirty_bit", &self.inner.dirty.kind())
            .field("dirty_test", &self.inner.dirty_test)
            .field("spaces", &self.inner.spaces.load(Ordering::Relaxed))
            .finish()
    }
}

impl AnonInner {
    fn counters(&self) -> &crate::stats::Counters {
        &self.cache.vm().counters
    }

    fn pfn(&self, f: &Folio) -> usize {
        self.cache.pool().pfn_of_desc(f)
    }
}

impl Drop for AnonInner {
    fn drop(&mut self) {
        // Every space is gone (each holds the memory alive); what is left is in the swap cache.
        self.swap_cache.drain(self);
    }
}
