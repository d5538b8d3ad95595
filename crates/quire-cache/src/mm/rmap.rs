//! The reverse map of anonymous memory (the kernel's `mm/rmap.c`): from a folio to every
//! (space, virtual page) that maps it, and what is done through it — unmapping for reclaim
//! (`try_to_unmap`), gathering the young bits (`folio_referenced`), and the dirty-bit transfer
//! when a folio's last mapping goes (`page_remove_rmap`), skipped where the content is dead.
//!
//! A family ([`AnonVma`], the kernel's `anon_vma`) is the set of spaces forked, directly or not,
//! from one space. An anonymous folio's `mapping` is its family's id and its `index` its
//! virtual page, which fork does not change; so the ptes that may map a folio are the entries
//! at `index` of the family's spaces, and the walk checks each one's frame. (The kernel chains
//! an `anon_vma` per process so that a child's own copies are not looked for in its parent;
//! one list per family walks a few spaces more and is simpler to keep right.)

use std::sync::{Arc, Mutex, Weak};

use super::pte::{self, MLOCK, PRESENT, YOUNG};
use super::space::SpaceInner;
use super::{mapcount, mlock_count, AnonInner, DirtyTest, MAPCOUNT_ONE, MLOCK_ONE, RMAP_TESTING};
use crate::mem::folio::{Folio, ANON};
use crate::stats::Event;

/// A family of spaces sharing anonymous folios through fork (`anon_vma`).
pub(crate) struct AnonVma {
    pub(crate) id: usize,
    /// Its spaces, oldest first (a fork appends the child).
    pub(crate) spaces: Mutex<Vec<Weak<SpaceInner>>>,
}

impl AnonVma {
    fn members(&self) -> Vec<Arc<SpaceInner>> {
        self.spaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

/// The flag-word step of a pte going away: one mapping less, in one read-modify-write that
/// also tells, atomically, whether this was the last mapping and whether the folio was in the
/// swap cache at that moment (reclaim sets `SWAPCACHE` with a read-modify-write of the same word
/// and then reads the mapcount: see [`swapcache_rmw`]). The last one also sets `RMAP_TESTING`,
/// which [`end_test`] clears once the dirty bit is tested (see [`first_map_rmw`]). Returns the
/// word before.
pub(crate) fn unmap_rmw(f: &Folio) -> u64 {
    f.update_owner_bits(|w| {
        debug_assert!(mapcount(w) >= 1, "mapcount underflow on {f:?}");
        let w = w - MAPCOUNT_ONE;
        if mapcount(w) == 0 {
            w | RMAP_TESTING
        } else {
            w
        }
    })
}

/// The last unmap's dirty-bit test is done.
pub(crate) fn end_test(f: &Folio) {
    f.clear_owner_bits(RMAP_TESTING);
}

/// The flag-word step of a new pte of a file folio (the caller holds the folio lock): one
/// mapping more; whether the caller may clear the frames' dirty bit — it is the first mapping
/// and no last unmap is still to test the bit (a write through the pte that went would be
/// lost if the clear came between that unmap and its test).
pub(crate) fn first_map_rmw(f: &Folio) -> bool {
    let old = f.add_owner_bits(MAPCOUNT_ONE);
    debug_assert!(mapcount(old) < super::MAX_MAPCOUNT);
    mapcount(old) == 0 && old & RMAP_TESTING == 0
}

/// A write fault about to make a pte of the file folio `f` writable (holding the folio lock,
/// its mapcount unit already taken if the pte is new: `own_pte_counted`) asks whether anyone
/// beyond the index, the ptes and itself holds the folio — a zero-copy reader, which must keep
/// its bytes. The mapcount was raised (by this fault, or by the one that made the pte) before
/// the count is read with a read-modify-write; a reader takes its reference with one and then
/// reads the mapcount ([`Folio::reader_sees_mapping`]): one of the two sees the other.
///
/// A borrower without a reference (`mem/borrow.rs`) counts as a reader: it names the folio in
/// its slot, fences and reads the mapcount; the scan comes after a fence of its own.
pub(crate) fn writer_sees_readers(f: &Folio, own_pte_counted: bool) -> bool {
    let count = f.ref_count_rmw();
    let expected = 1 + mapcount(f.flags()) + u64::from(!own_pte_counted);
    #[cfg(loom)]
    let scan = !crate::mem::borrow::broken::is(crate::mem::borrow::broken::WRITER_SCAN);
    #[cfg(not(loom))]
    let scan = true;
    u64::from(count) > expected || (scan && crate::mem::borrow::borrowed(f))
}

/// What `add_to_swap`'s flag-word step found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SwapcacheFate {
    /// Still mapped: its last unmap, whenever it comes, sees `SWAPCACHE` and tests the dirty
    /// bit; reclaim goes on.
    Mapped,
    /// Its last unmap came before and saw no `SWAPCACHE`: that unmap took the content for dead
    /// and ended the folio's life as anonymous memory (`anon_death`).
    DeadUnmapped,
    /// Its last unmap came between the set and the read: that unmap saw `SWAPCACHE` and left
    /// the folio to the swap cache, so the content's death is reclaim's to finish.
    DeadOurs,
}

/// `add_to_swap`'s flag-word step (the folio locked by reclaim): sets `SWAPCACHE`, learning in
/// the same read-modify-write whether the folio was still mapped, and if it was, reads the
/// mapcount again. The last unmap's read-modify-write falls before the set (it saw no
/// `SWAPCACHE`), between the set and the read (it saw it), or after the read (it sees it):
/// exactly one side ends a dead folio's life, and a folio reclaim goes on with is tested when
/// its last mapping goes.
pub(crate) fn swapcache_rmw(f: &Folio) -> SwapcacheFate {
    let old = f.set_swapcache_word();
    if mapcount(old) == 0 {
        SwapcacheFate::DeadUnmapped
    } else if mapcount(f.flags()) == 0 {
        SwapcacheFate::DeadOurs
    } else {
        SwapcacheFate::Mapped
    }
}

/// The flag-word protocol of the reverse map, for the loom models (`tests/loom_mm.rs`), with
/// deliberately broken variants that the models must catch.
#[cfg(loom)]
#[doc(hidden)]
pub mod model {
    use super::*;

    /// A pte of `f` is made (no first-map rule).
    pub fn map(f: &Folio) {
        f.add_owner_bits(MAPCOUNT_ONE);
    }
    /// See `unmap_rmw`: (was it the last mapping, was the folio in the swap cache then).
    pub fn unmap(f: &Folio) -> (bool, bool) {
        let old = unmap_rmw(f);
        (mapcount(old) == 1, old & crate::mem::folio::SWAPCACHE != 0)
    }
    /// See `end_test`.
    pub fn end_test(f: &Folio) {
        super::end_test(f)
    }
    /// See `first_map_rmw`.
    pub fn first_map(f: &Folio) -> bool {
        first_map_rmw(f)
    }
    /// Broken: clears on any first mapping, ignoring a test in progress.
    pub fn first_map_ignoring_test(f: &Folio) -> bool {
        mapcount(f.add_owner_bits(MAPCOUNT_ONE)) == 0
    }
    /// See `writer_sees_readers`.
    pub fn writer_sees_readers(f: &Folio, own_pte_counted: bool) -> bool {
        super::writer_sees_readers(f, own_pte_counted)
    }
    /// Broken: reads the count before the mapcount is raised (the fence does not help then).
    pub fn writer_checking_before_counting(f: &Folio) -> bool {
        // The index's reference, the other ptes' and the fault's own.
        let readers = u64::from(f.ref_count()) > 2 + mapcount(f.flags());
        map(f);
        readers
    }
    /// Broken: reads the count with a plain load, which may miss a reader's reference while
    /// the reader misses the raised mapcount.
    pub fn writer_with_a_plain_load(f: &Folio) -> bool {
        map(f);
        u64::from(f.ref_count()) > 1 + mapcount(f.flags())
    }
    /// See `reader_sees_mapping`.
    pub fn reader_sees_mapping(f: &Folio) -> bool {
        f.reader_sees_mapping()
    }
    /// See `swapcache_rmw`: 0 still mapped, 1 the unmap ended the folio, 2 reclaim must.
    pub fn add_to_swap(f: &Folio) -> u8 {
        swapcache_rmw(f) as u8
    }
    /// Broken: reads the mapcount before setting `SWAPCACHE`.
    pub fn add_to_swap_checking_first(f: &Folio) -> u8 {
        let mapped = mapcount(f.flags()) != 0;
        f.set_swapcache();
        if mapped {
            0
        } else {
            1
        }
    }
    /// Broken: sets `SWAPCACHE` and reads the mapcount after, but takes every dead folio for
    /// ended by its unmap (the death of a folio unmapped between the two is nobody's).
    pub fn add_to_swap_without_handoff(f: &Folio) -> u8 {
        f.set_swapcache();
        if mapcount(f.flags()) != 0 {
            0
        } else {
            1
        }
    }
}

/// Why reclaim could not unmap a folio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnmapFailed {
    /// A space maps it locked.
    Mlocked,
    /// A page-table lock was busy, a swap count full, or a mapping appeared meanwhile.
    Busy,
}

impl AnonInner {
    /// The family with this id, if any space of it lives.
    pub(crate) fn family(&self, id: usize) -> Option<Arc<AnonVma>> {
        self.families
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .and_then(Weak::upgrade)
    }

    /// A new pte maps `f` (the caller holds that space's page-table lock and gives the pte a
    /// reference): one more mapping (`folio_add_anon_rmap`, `folio_dup_anon_rmap`).
    #[doc(alias = "folio_add_anon_rmap_pte")]
    pub(crate) fn add_rmap(&self, f: &Folio) {
        let old = f.add_owner_bits(MAPCOUNT_ONE);
        debug_assert!(mapcount(old) < super::MAX_MAPCOUNT);
    }

    /// A pte mapping `f` is gone (the caller holds that space's page-table lock, and puts the
    /// pte's reference afterwards). When it was the last mapping, the frame's dirty bit is
    /// tested and transferred as the rule says (see the [module documentation](super)); an
    /// anonymous folio outside the swap cache then dies: it leaves its family and its list.
    /// `reclaim` says reclaim's own unmap is asking (it always tests).
    #[doc(alias = "page_remove_rmap")]
    #[doc(alias = "folio_remove_rmap_pte")]
    pub(crate) fn remove_rmap(&self, f: &Folio, reclaim: bool) {
        let old = unmap_rmw(f);
        if mapcount(old) != 1 {
            return;
        }
        let anon = old & ANON != 0;
        let in_swap_cache = old & crate::mem::folio::SWAPCACHE != 0;
        let test = reclaim
            || match self.dirty_test {
                #[cfg(feature = "bench-internals")]
                DirtyTest::Always => true,
                DirtyTest::SkipDeadAnon => !anon || in_swap_cache,
                #[cfg(test)]
                DirtyTest::SkipAllAnon => !anon,
            };
        if test && self.test_dirty(f) {
            if anon {
                f.set_dirty();
            } else {
                // A space wrote the file page: the page cache's dirty state (flags, index
                // mark, count) takes it.
                self.cache.mark_mapped_dirty(f);
            }
        }
        end_test(f);
        if anon && !in_swap_cache {
            self.anon_death(f);
        }
    }

    /// The present pte `e`, which mapped `f`, is gone (the caller cleared it under its space's
    /// page-table lock): its mlock unit, its mapping (the dirty-bit transfer, see
    /// [`AnonInner::remove_rmap`]) and its counted reference go with it (`zap_present_pte`).
    pub(crate) fn pte_gone(&self, f: &Folio, e: u64, reclaim: bool) {
        if e & MLOCK != 0 {
            self.munlock_folio(f);
        }
        self.remove_rmap(f, reclaim);
        // SAFETY: the pte held one counted reference on `f`, now ours to put.
        drop(unsafe { self.cache.pool().ref_from_raw(std::ptr::NonNull::from(f)) });
    }

    /// Tests and clears the frame's hardware dirty bit; whether it was set (counted as
    /// `dirty_tests`, and `dirty_transfers` when set).
    #[doc(alias = "page_test_and_clear_dirty")]
    pub(crate) fn test_dirty(&self, f: &Folio) -> bool {
        self.counters().count(Event::DirtyTests);
        let set = self.dirty.test_and_clear(self.pfn(f), f.nr_frames());
        if set {
            self.counters().count(Event::DirtyTransfers);
        }
        set
    }

    /// An anonymous folio's content is dead (no mapping, no swap cache): it leaves its family
    /// and its LRU list; the references still held on it free it.
    pub(crate) fn anon_death(&self, f: &Folio) {
        // Dead content is not dirty: nobody will write it anywhere.
        f.clear_dirty();
        f.set_mapping(0);
        self.cache.vm().lru_del(self.cache.pool(), f);
        self.frames
            .fetch_sub(f.nr_frames(), std::sync::atomic::Ordering::Relaxed);
    }

    /// One more pte maps `f` locked: the mlock count goes up, and the folio to the unevictable
    /// list when it was not there (`mlock_folio`).
    pub(crate) fn mlock_folio(&self, f: &Folio) {
        let old = f.add_owner_bits(MLOCK_ONE);
        if mlock_count(old) == 0 {
            self.sync_unevictable(f);
        }
    }

    /// One pte mapping `f` locked is gone or unlocked (`munlock_folio`).
    pub(crate) fn munlock_folio(&self, f: &Folio) {
        let old = f.sub_owner_bits(MLOCK_ONE);
        debug_assert!(mlock_count(old) >= 1);
        if mlock_count(old) == 1 {
            self.sync_unevictable(f);
        }
    }

    /// Puts `f` on the unevictable list or off it as its mlock count (and the page cache's
    /// `WB_FAILED`, see [`crate::vmscan::unevictable`]) says *now*, read under the LRU lock (also for a folio reclaim holds isolated: its flag then decides where
    /// reclaim puts it back, and a racing munlock's own sync corrects it).
    pub(crate) fn sync_unevictable(&self, f: &Folio) {
        self.cache.vm().sync_unevictable(self.cache.pool(), f, &|| {
            crate::vmscan::unevictable(f.flags())
        });
    }

    /// Clears the young bit of every pte mapping `f`; returns how many had it
    /// (`folio_referenced`). Page tables whose lock is busy are passed over.
    pub(crate) fn folio_referenced(&self, f: &Folio) -> usize {
        let Some(family) = self.family(f.mapping()) else {
            return 0;
        };
        let pfn = self.pfn(f) as u64;
        let mut young = 0;
        for s in family.members() {
            let Ok(mut pt) = s.pt.try_lock() else {
                continue;
            };
            let Some(e) = pt.get_mut(f.index() as usize) else {
                continue;
            };
            if *e & PRESENT != 0 && pte::target(*e) == pfn && *e & YOUNG != 0 {
                *e &= !YOUNG;
                young += 1;
            }
        }
        young
    }

    /// Replaces every pte mapping the locked folio `f` (in the swap cache at `slot`) with a swap
    /// entry for `slot`, transferring the dirty bit when the last goes (`try_to_unmap`). Stops
    /// at a pte mapped locked — after the spaces before it in the family were unmapped, as the
    /// kernel's walk does.
    pub(crate) fn try_to_unmap(&self, f: &Folio, slot: u64) -> Result<(), UnmapFailed> {
        let swap = self.swap.as_ref().ok_or(UnmapFailed::Busy)?;
        let family = self.family(f.mapping()).ok_or(UnmapFailed::Busy)?;
        let pfn = self.pfn(f) as u64;
        let pool = self.cache.pool();
        for s in family.members() {
            if mapcount(f.flags()) == 0 {
                break;
            }
            let Ok(mut pt) = s.pt.try_lock() else {
                return Err(UnmapFailed::Busy);
            };
            let Some(e) = pt.get_mut(f.index() as usize) else {
                continue;
            };
            if *e & PRESENT == 0 || pte::target(*e) != pfn {
                continue;
            }
            if *e & MLOCK != 0 {
                return Err(UnmapFailed::Mlocked);
            }
            if !swap.dup(slot) {
                return Err(UnmapFailed::Busy);
            }
            *e = pte::swap(*e, slot);
            self.remove_rmap(f, true);
            // SAFETY: the pte held one counted reference on `f`, now ours to put; the caller's
            // own reference keeps the count above zero.
            drop(unsafe { pool.ref_from_raw(std::ptr::NonNull::from(f)) });
        }
        if mapcount(f.flags()) == 0 {
            Ok(())
        } else {
            Err(UnmapFailed::Busy)
        }
    }
}
