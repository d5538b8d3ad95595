//! The swap cache and the reclaim of anonymous folios (the kernel's `mm/swap_state.c` and the
//! anonymous branch of `shrink_folio_list`).
//!
//! The swap cache is an [`XArray`] keyed by swap slot, holding one counted reference on each
//! folio in it; such a folio carries `SWAPCACHE` and its slot in `private`, and its slot carries
//! `HAS_CACHE`. It is what lets a page be in memory and in swap at once: reclaim puts a folio
//! there before unmapping it (so every pte it replaces can name the slot, and a fault on one of
//! them finds the folio while it is being written), and a swap-in puts the folio it reads there
//! (so that the other spaces' entries for the slot find the same folio). Changes happen under
//! the array's lock with the folio locked; lookups take the array's lock for the moment of the
//! load and `try_get` (a frozen folio is on its way out: look again).
//!
//! # Reclaiming an anonymous folio (locked, isolated by reclaim)
//!
//! | step | what | fails → |
//! |---|---|---|
//! | references | with `check_references`, any young pte: activate | `Activate` |
//! | `add_to_swap` | not in the swap cache: take a slot, set `SWAPCACHE`, insert | swap full: `Activate` |
//! | `try_to_unmap` | every pte → a swap entry for the slot; the last one tests the dirty bit | locked pte: `Unevictable`; busy: `Keep` |
//! | dead? | no swap entry refers to the slot (every mapper exited): nothing to write | — |
//! | `pageout` | `DIRTY`: clear it, write the page to its slot | I/O error: dirty again, `Keep` |
//! | free | freeze (only reclaim and the swap cache hold it), delete from the swap cache | a reference held: `Keep` |

use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use super::rmap::{SwapcacheFate, UnmapFailed};
use super::swapfile::SwapDevice;
use super::{mapcount, AnonInner};
use crate::filemap::FolioPtr;
use crate::mem::folio::{Folio, FolioGuard, FolioRef, FRAME_SIZE, SWAPCACHE};
use crate::mem::pool::FramePool;
use crate::stats::Event;
use crate::vmscan::{AnonFate, AnonOwner};
use crate::xarray::{Entry, XArray};

/// The swap cache; see the [module documentation](self).
pub(crate) struct SwapCache {
    xa: XArray<FolioPtr>,
    len: std::sync::atomic::AtomicUsize,
}

/// What a lookup found.
pub(crate) enum Lookup<'p> {
    /// The folio, with a reference.
    Found(FolioRef<'p>),
    /// Nothing for that slot.
    Absent,
    /// A folio that is being removed (frozen): look again.
    Busy,
}

impl SwapCache {
    pub(crate) fn new() -> SwapCache {
        SwapCache {
            xa: XArray::new(),
            len: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Folios in the cache.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// The folio for `slot`, with a reference (`swap_cache_get_folio`).
    #[doc(alias = "swap_cache_get_folio")]
    pub(crate) fn lookup<'p>(&self, pool: &'p FramePool, slot: u64) -> Lookup<'p> {
        let xa = self.xa.lock();
        match xa.load(slot) {
            Some(Entry::Pointer(f)) => match pool.try_get(f) {
                Some(r) => Lookup::Found(r),
                None => Lookup::Busy,
            },
            _ => Lookup::Absent,
        }
    }

    /// Inserts `f` (locked by the caller, `SWAPCACHE` set) for `slot`, giving the cache the
    /// counted reference `r`, and marks the slot `HAS_CACHE` (under the array's lock, so that
    /// the mark follows the entry); false (and `r` put back) if the slot has a folio already.
    fn insert(&self, slot: u64, r: FolioRef<'_>, swap: &SwapDevice) -> bool {
        let mut xa = self.xa.lock();
        if xa.load(slot).is_some() {
            return false;
        }
        let ptr = r.into_raw();
        if xa.store(slot, Some(Entry::Pointer(FolioPtr(ptr)))).is_err() {
            unreachable!("a folio pointer is always a valid entry");
        }
        swap.set_cache(slot);
        self.len.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Removes the entry of `slot` if it is `f`, clearing the slot's `HAS_CACHE`; whether it
    /// did. The cache's reference on `f` becomes the caller's to put or to account for.
    fn remove(&self, slot: u64, f: &Folio, swap: &SwapDevice) -> bool {
        let mut xa = self.xa.lock();
        match xa.load(slot) {
            Some(Entry::Pointer(p)) if std::ptr::eq(p, f) => {
                xa.erase(slot);
                swap.clear_cache(slot);
                self.len.fetch_sub(1, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    /// Every folio still in the cache, for the teardown.
    fn take_all(&self) -> Vec<(u64, NonNull<Folio>)> {
        let mut out = Vec::new();
        self.xa.for_each(0, u64::MAX, None, |e| {
            if let Entry::Pointer(p) = e.entry {
                out.push((e.index, NonNull::from(p)));
            }
            std::ops::ControlFlow::Continue(())
        });
        out
    }

    /// Empties the cache when the anonymous memory goes (no space is left).
    pub(crate) fn drain(&self, anon: &AnonInner) {
        let (Some(swap), pool) = (&anon.swap, anon.cache.pool()) else {
            return;
        };
        for (slot, ptr) in self.take_all() {
            // SAFETY: descriptors of the pool live as long as it, and `anon` keeps the pool.
            let f = unsafe { ptr.as_ref() };
            if self.remove(slot, f, swap) {
                f.clear_swapcache();
                f.set_mapping(0);
                anon.cache.vm().lru_del(pool, f);
                anon.frames.fetch_sub(f.nr_frames(), Ordering::Relaxed);
                // SAFETY: the cache's counted reference, removed from the cache just now.
                drop(unsafe { pool.ref_from_raw(ptr) });
            }
        }
    }
}

/// Why `add_to_swap` did not add.
enum AddFailed {
    /// Every slot is in use.
    Full,
    /// The folio's last mapping went meanwhile, outside the swap cache: its content is dead.
    Dead,
}

impl AnonInner {
    /// Puts the locked folio in the swap cache under a new slot (`add_to_swap`).
    fn add_to_swap(&self, g: &FolioGuard<'_>) -> Result<u64, AddFailed> {
        let swap = self.swap.as_ref().ok_or(AddFailed::Full)?;
        let slot = swap.alloc().ok_or(AddFailed::Full)?;
        let fate = super::rmap::swapcache_rmw(g);
        if fate != SwapcacheFate::Mapped {
            // The last mapping went meanwhile: the content is dead, nothing to write.
            g.clear_swapcache();
            swap.clear_cache(slot);
            if fate == SwapcacheFate::DeadOurs {
                // That unmap saw SWAPCACHE and left the folio to us.
                self.anon_death(g);
            }
            return Err(AddFailed::Dead);
        }
        g.set_private(slot as usize);
        let r = g
            .pool()
            .try_get(g.folio())
            .expect("the guard holds a reference");
        let inserted = self.swap_cache.insert(slot, r, swap);
        debug_assert!(inserted, "a new slot has no folio");
        Ok(slot)
    }

    /// Takes the locked folio, which some space still maps, out of the swap cache and frees
    /// its slot (a write fault made it the sole owner, and swap is filling up): its content now
    /// exists only in memory, so it is dirty (`folio_free_swap`).
    #[doc(alias = "folio_free_swap")]
    pub(crate) fn free_swap(&self, g: &FolioGuard<'_>) {
        let slot = g.private() as u64;
        let Some(swap) = &self.swap else { return };
        if !g.is_swapcache() || !self.swap_cache.remove(slot, g.folio(), swap) {
            return;
        }
        g.set_dirty();
        g.clear_swapcache();
        g.set_private(0);
        // SAFETY: the cache's counted reference, removed just now; the caller's guard and the
        // mapping ptes keep the count above zero.
        drop(unsafe { g.pool().ref_from_raw(NonNull::from(g.folio())) });
    }

    /// Frees the locked, unmapped folio from the swap cache if only the caller and the cache
    /// hold it; whether it did (`__remove_mapping` for the swap cache).
    fn remove_unmapped(&self, g: &mut FolioGuard<'_>) -> bool {
        let slot = g.private() as u64;
        let Some(swap) = &self.swap else { return false };
        // SAFETY: the folio is in the swap cache (SWAPCACHE, checked by the caller under the
        // lock, and only a lock holder removes it), which owns one raw reference; nobody uses it
        // during the freeze.
        let Some(mut frozen) = (unsafe { g.freeze(1) }) else {
            return false;
        };
        let f = frozen.folio();
        if mapcount(f.flags()) != 0 || !self.swap_cache.remove(slot, f, swap) {
            return false;
        }
        // SAFETY: the swap cache's reference, removed with the entry just now.
        let released = unsafe { frozen.release_raw_refs(1) };
        debug_assert!(released);
        f.clear_swapcache();
        f.set_private(0);
        drop(frozen);
        self.anon_death(g.folio());
        true
    }

    /// Writes the locked, unmapped, dirty folio to its slot (`pageout`).
    fn pageout(&self, g: &FolioGuard<'_>) -> bool {
        let Some(swap) = &self.swap else { return false };
        let slot = g.private() as u64;
        g.clear_dirty();
        // Unmapped (mapcount 0, checked under the folio lock, and mapping it again needs the
        // lock), so nothing writes the frame while we read it.
        match swap.write(slot, &g.bytes()[..FRAME_SIZE]) {
            Ok(()) => {
                self.counters().count(Event::Swapouts);
                true
            }
            Err(_) => {
                g.set_dirty();
                g.set_error();
                false
            }
        }
    }

    /// Frees the swap cache's folios that nobody needs (see [`super::AnonMemory::trim_swap_cache`]).
    pub(crate) fn trim_swap_cache(&self) -> usize {
        let Some(swap) = &self.swap else { return 0 };
        let pool = self.cache.pool();
        let mut freed = 0;
        for (slot, ptr) in self.swap_cache.take_all() {
            if swap.count(slot) != 0 {
                continue;
            }
            // SAFETY: a descriptor of the pool, which `self` keeps alive.
            let f = unsafe { ptr.as_ref() };
            let Some(r) = pool.try_get(f) else { continue };
            let Ok(mut g) = r.try_lock() else { continue };
            if g.is_swapcache()
                && g.private() as u64 == slot
                && mapcount(g.flags()) == 0
                && swap.count(slot) == 0
                && self.remove_unmapped(&mut g)
            {
                freed += 1;
            }
        }
        freed
    }

    /// A swap entry for `slot` is gone (zapped, or swapped in); when it was the last and a
    /// folio for the slot sits unmapped in the swap cache, frees it now if its lock is free
    /// (`free_swap_and_cache`) — else reclaim frees it when it gets there.
    #[doc(alias = "free_swap_and_cache")]
    pub(crate) fn swap_entry_gone(&self, slot: u64) {
        let Some(swap) = &self.swap else { return };
        let left = swap.put(slot);
        if left != super::swapfile::HAS_CACHE {
            return;
        }
        let pool = self.cache.pool();
        if let Lookup::Found(r) = self.swap_cache.lookup(pool, slot) {
            if let Ok(mut g) = r.try_lock() {
                if g.is_swapcache()
                    && g.private() as u64 == slot
                    && mapcount(g.flags()) == 0
                    && swap.count(slot) == 0
                {
                    self.remove_unmapped(&mut g);
                }
            }
        }
    }

    /// Reads `slot` into a new folio and puts it in the swap cache, or finds the one there;
    /// returns it with a reference, unlocked (`swapin_readahead` for one page,
    /// `read_swap_cache_async`). `None`: look again (a folio was on its way out, or another
    /// thread added one first).
    #[doc(alias = "read_swap_cache_async")]
    pub(crate) fn swapin(
        &self,
        slot: u64,
        family: usize,
        index: u64,
        page: u64,
    ) -> Result<Option<FolioRef<'_>>, super::MmError> {
        let pool = self.cache.pool();
        match self.swap_cache.lookup(pool, slot) {
            Lookup::Found(r) => return Ok(Some(r)),
            Lookup::Busy => {
                std::thread::yield_now();
                return Ok(None);
            }
            Lookup::Absent => {}
        }
        let swap = self
            .swap
            .as_ref()
            .expect("a swap entry implies a swap device");
        let r = self.alloc_folio()?;
        let mut g = r.lock();
        g.set_anon();
        g.set_swapcache();
        g.set_private(slot as usize);
        g.set_index(index);
        g.set_mapping(family);
        let cache_ref = pool
            .try_get(g.folio())
            .expect("the guard holds a reference");
        // The slot is referred to by our pte, so it stays allocated; a folio for it that is on
        // its way out may still be in the cache, in which case the insert fails: look again.
        if !self.swap_cache.insert(slot, cache_ref, swap) {
            g.clear_swapcache();
            g.set_mapping(0);
            return Ok(None);
        }
        self.frames.fetch_add(1, Ordering::Relaxed);
        let bytes = g.bytes_mut().expect("a new folio is not up to date");
        if let Err(source) = swap.read(slot, bytes) {
            // Leave nothing behind: the page stays in swap.
            self.swap_cache.remove(slot, g.folio(), swap);
            g.clear_swapcache();
            // SAFETY: the swap cache's counted reference, removed just now; the guard's own
            // keeps the count above zero.
            drop(unsafe { pool.ref_from_raw(NonNull::from(g.folio())) });
            self.anon_death(g.folio());
            return Err(super::MmError::SwapIn { page, source });
        }
        g.mark_uptodate();
        // The folio now equals its slot: clear the frame's dirty bit (our read wrote it).
        self.dirty.clear(g.pfn(), 1);
        self.counters().count(Event::Swapins);
        self.counters().count(Event::AnonFaults);
        self.cache.vm().lru_add(pool, g.folio());
        Ok(Some(g.unlock()))
    }

    /// Allocates an order-0 folio for anonymous memory (reclaiming as the cache does).
    pub(crate) fn alloc_folio(&self) -> Result<FolioRef<'_>, super::MmError> {
        match self.cache.alloc(0, true) {
            Ok(Some(r)) => Ok(r),
            _ => Err(super::MmError::NoMemory {
                frames: self.cache.pool().nr_frames(),
            }),
        }
    }
}

impl AnonOwner for AnonInner {
    fn shrink_anon(&self, g: &mut FolioGuard<'_>, check_references: bool) -> AnonFate {
        if self.swap.is_none() {
            return AnonFate::Activate;
        }
        let flags = g.flags();
        if check_references && mapcount(flags) > 0 && self.folio_referenced(g.folio()) > 0 {
            return AnonFate::Activate;
        }
        let slot = if flags & SWAPCACHE == 0 {
            match self.add_to_swap(g) {
                Ok(slot) => slot,
                Err(AddFailed::Full) => return AnonFate::Activate,
                Err(AddFailed::Dead) => return AnonFate::Freed,
            }
        } else {
            g.private() as u64
        };
        if mapcount(g.flags()) > 0 {
            match self.try_to_unmap(g.folio(), slot) {
                Ok(()) => {}
                Err(UnmapFailed::Mlocked) => {
                    self.sync_unevictable(g);
                    return AnonFate::Unevictable;
                }
                Err(UnmapFailed::Busy) => return AnonFate::Keep,
            }
        }
        let swap = self.swap.as_ref().expect("checked above");
        let dead = swap.count(slot) == 0;
        if !dead && g.is_dirty() && !self.pageout(g) {
            return AnonFate::Keep;
        }
        if self.remove_unmapped(g) {
            AnonFate::Freed
        } else {
            AnonFate::Keep
        }
    }

    fn can_swap(&self) -> bool {
        self.swap.as_ref().is_some_and(|s| s.used() < s.slots())
    }

    #[cfg(feature = "bench-internals")]
    fn owns(&self, f: &Folio) -> bool {
        (f.is_swapcache()
            && {
                let pool = self.cache.pool();
                matches!(self.swap_cache.lookup(pool, f.private() as u64), Lookup::Found(r) if std::ptr::eq(r.folio(), f))
            })
            || self.family(f.mapping()).is_some()
    }
}
