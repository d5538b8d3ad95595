//! A file's reverse map (the kernel's `i_mmap`): the spaces' mappings of the file, and what the
//! page cache does through them before it frees, changes or writes a folio that a space maps.
//!
//! `filemap` sits below `mm`, so it knows a mapping only as a [`FileVma`]: the file pages it
//! covers, and one operation — apply a [`RmapOp`] to the page-table entries of that mapping that
//! map a given folio. `mm` implements it (a space's file mapping) and adds and removes its
//! mappings here as spaces map and unmap the file.
//!
//! # When the page cache walks it
//!
//! | caller | holds | op | why |
//! |---|---|---|---|
//! | write-back of a mapped folio (`write_folio`) | the folio lock | `Mkclean`, then a dirty-bit test | the kernel's `folio_mkclean`: write-protect every pte (the next write through one faults and dirties the folio again) and take the writes the frames recorded, so the bytes written out are the last ones and stay put while they go |
//! | a `write_at` that changes a mapped folio (`modify`), truncation, close | the folio lock | `Unmap { reclaim: false }` | a folio is replaced by a copy, zeroed or dropped: every space must fault again and find what the index holds now (`unmap_mapping_range`) |
//! | reclaim of a mapped file folio | the folio lock | `Referenced`, then `Unmap { reclaim: true }` | young ptes keep the folio (activated); otherwise every pte goes, the last one transferring the dirty bit, and the folio is then evicted or written back like any other |
//!
//! # Lock order
//!
//! folio lock → the `i_mmap` list (only to copy out the mappings) → a space's page-table lock →
//! the index lock. Waiting walks (`Mkclean`, `Unmap { reclaim: false }`) block on page-table locks,
//! which the lock order allows: nothing that holds a page-table lock waits for a folio lock (a
//! fault of a file page takes the folio lock first). Reclaim only tries them, as for anonymous
//! memory. A space's code run inside its page-table lock (the closures of `Space::with_page`)
//! must therefore not call back into the page cache.

use std::ops::Range;
use std::sync::Arc;

use crate::sync::loom::{Mutex, MutexGuard};

use super::mapping::Mapping;
use crate::mem::folio::{Folio, FolioGuard};
use crate::vmscan::MappedFate;

/// What to do to each pte of a mapping that maps a folio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RmapOp {
    /// Remove it (the last removal tests the frames' dirty bit and transfers it). With
    /// `reclaim`, page-table locks are only tried and a pte mapped locked (mlock) stops the
    /// walk; without, locks are waited for and mlocked ptes go too (truncation, a write).
    Unmap {
        /// Reclaim is asking.
        reclaim: bool,
    },
    /// Write-protect it (`folio_mkclean`).
    Mkclean,
    /// Clear its young bit, counting those set (`folio_referenced`); busy tables are passed
    /// over.
    Referenced,
}

/// What one mapping's walk did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RmapResult {
    /// The op was applied to this many ptes.
    Done(usize),
    /// A page-table lock was busy (reclaim's unmap only).
    Busy,
    /// A pte maps the folio locked (reclaim's unmap only).
    Mlocked,
}

/// One space's mapping of a range of a file, as the file's reverse map sees it (the kernel's
/// `vm_area_struct` on `i_mmap`).
pub(crate) trait FileVma: Send + Sync {
    /// The file pages the mapping covers.
    fn file_pages(&self) -> Range<u64>;
    /// Applies `op` to every pte of the mapping that maps the folio `f`, which the caller holds
    /// locked.
    fn rmap_one(&self, f: &Folio, op: RmapOp) -> RmapResult;
    /// Tests and clears the dirty bit of `f`'s frames (counted as a dirty test); whether a
    /// write was recorded (`page_test_and_clear_dirty`), or `None` if the mapping's space is
    /// gone (ask another mapping).
    fn test_and_clear_dirty(&self, f: &Folio) -> Option<bool>;
}

/// The mappings of one file (`i_mmap`).
pub(crate) struct IMmap {
    vmas: Mutex<Vec<Arc<dyn FileVma>>>,
}

impl IMmap {
    pub(crate) fn new() -> IMmap {
        IMmap {
            vmas: Mutex::new(Vec::new()),
        }
    }

    fn list(&self) -> MutexGuard<'_, Vec<Arc<dyn FileVma>>> {
        self.vmas.lock()
    }

    /// The mappings that cover any of `pages`.
    fn covering(&self, pages: Range<u64>) -> Vec<Arc<dyn FileVma>> {
        self.list()
            .iter()
            .filter(|v| {
                let r = v.file_pages();
                r.start < pages.end && pages.start < r.end
            })
            .cloned()
            .collect()
    }

    /// Mappings of the file.
    pub(crate) fn len(&self) -> usize {
        self.list().len()
    }
}

impl Mapping {
    /// Adds a space's mapping of this file to its reverse map.
    #[doc(alias = "vma_interval_tree_insert")]
    pub(crate) fn i_mmap_add(&self, vma: Arc<dyn FileVma>) {
        self.i_mmap.list().push(vma);
    }

    /// Removes a mapping added with [`Mapping::i_mmap_add`] (the same `Arc`).
    #[doc(alias = "vma_interval_tree_remove")]
    pub(crate) fn i_mmap_remove(&self, vma: &Arc<dyn FileVma>) {
        self.i_mmap
            .list()
            .retain(|v| !std::ptr::addr_eq(Arc::as_ptr(v), Arc::as_ptr(vma)));
    }

    fn folio_pages(f: &Folio) -> Range<u64> {
        f.index()..f.index() + f.nr_frames() as u64
    }

    /// Removes every pte mapping the locked folio, waiting for page-table locks
    /// (`unmap_mapping_folio`). Writes the frames recorded reach `DIRTY` on the last removal.
    #[doc(alias = "unmap_mapping_folio")]
    pub(crate) fn unmap_folio(&self, g: &FolioGuard<'_>) {
        if !g.is_mapped() {
            return;
        }
        for vma in self.i_mmap.covering(Self::folio_pages(g)) {
            vma.rmap_one(g, RmapOp::Unmap { reclaim: false });
        }
        // New ptes are only made with the folio locked, by faults: none can have appeared.
        debug_assert!(
            !g.is_mapped(),
            "a locked folio stayed mapped: {:?}",
            g.folio()
        );
    }

    /// Write-protects every pte mapping the locked folio and moves the writes its frames
    /// recorded to `DIRTY` (`folio_mkclean`); called by write-back before it clears `DIRTY`, so
    /// the bytes it writes cannot change until it ends and a later write faults and dirties the
    /// folio again.
    #[doc(alias = "folio_mkclean")]
    pub(crate) fn mkclean_folio(&self, g: &FolioGuard<'_>) {
        let vmas = self.i_mmap.covering(Self::folio_pages(g));
        for vma in &vmas {
            vma.rmap_one(g, RmapOp::Mkclean);
        }
        // The bit lives in the cache's anonymous memory: any mapping whose space lives asks it.
        if vmas.iter().find_map(|v| v.test_and_clear_dirty(g)) == Some(true) {
            self.mark_dirty_mapped(g);
        }
    }

    /// Reclaim's unmap of the locked, mapped folio (`folio_check_references` and
    /// `try_to_unmap` for a file folio).
    pub(crate) fn reclaim_unmap(&self, g: &FolioGuard<'_>, check_references: bool) -> MappedFate {
        let vmas = self.i_mmap.covering(Self::folio_pages(g));
        if check_references {
            let young: usize = vmas
                .iter()
                .map(|v| match v.rmap_one(g, RmapOp::Referenced) {
                    RmapResult::Done(n) => n,
                    _ => 0,
                })
                .sum();
            if young > 0 {
                return MappedFate::Activate;
            }
        }
        for vma in &vmas {
            match vma.rmap_one(g, RmapOp::Unmap { reclaim: true }) {
                RmapResult::Done(_) => {}
                RmapResult::Busy => return MappedFate::Keep,
                RmapResult::Mlocked => return MappedFate::Unevictable,
            }
        }
        if g.is_mapped() {
            MappedFate::Keep
        } else {
            MappedFate::Unmapped
        }
    }

    /// A write that a space made through a mapping of `f` reached the page cache (the last
    /// unmap found the frames' dirty bit set): `f` becomes dirty — in its flags, the index and
    /// the cache's count — if it is still this file's folio. The caller may not hold the folio
    /// lock (a zap holds only its page-table lock); the index lock orders this against
    /// truncation, which takes the folio out of the index before it unmaps it.
    #[doc(alias = "folio_mark_dirty")]
    pub(crate) fn mark_dirty_mapped(&self, f: &Folio) {
        let index = f.index();
        let mut xa = self.pages.lock();
        let here = f.mapping() == self.id
            && matches!(xa.load(index), Some(crate::xarray::Entry::Pointer(p)) if std::ptr::eq(p, f));
        if !here {
            return;
        }
        if f.set_dirty() {
            drop(xa);
            if f.is_wb_failed() {
                // A write into a folio parked after failed write-backs re-arms it.
                self.rearm_writeback(f, index);
            }
            return;
        }
        self.cache
            .dirty
            .fetch_add(f.nr_frames(), std::sync::atomic::Ordering::Relaxed);
        xa.set_mark(index, super::DIRTY_MARK);
        drop(xa);
        self.dirtied_at
            .lock()
            .unwrap()
            .get_or_insert_with(std::time::Instant::now);
    }
}
