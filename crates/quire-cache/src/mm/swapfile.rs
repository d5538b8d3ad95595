//! The swap device: a [`Store`] cut into page-sized slots, and the per-slot counts that say who
//! still needs each one (the kernel's `swap_info_struct` and its `swap_map`, `mm/swapfile.c`).
//!
//! # The count of a slot (`swap_map`)
//!
//! | bits | meaning |
//! |---|---|
//! | 0–14 | swap entries (ptes) referring to the slot, at most [`MAX_COUNT`] |
//! | 15 | [`HAS_CACHE`]: a folio for the slot is in the swap cache (or being added to it) |
//!
//! A slot is free exactly when its count is 0. [`SwapDevice::alloc`] hands out a free slot with
//! `HAS_CACHE` set (reclaim adds the folio to the swap cache next); every swap pte that reclaim
//! writes adds one ([`SwapDevice::dup`], also for fork); zapping a swap pte or swapping it in
//! takes one off ([`SwapDevice::put`]); deleting the folio from the swap cache clears
//! `HAS_CACHE` ([`SwapDevice::clear_cache`]). Slots are found next-fit from where the last one
//! was found, under one lock (the kernel's per-cluster allocator is a scalability refinement of
//! the same idea).

use crate::sync::loom::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::mem::folio::FRAME_SIZE;
use crate::store::{Store, StoreError};

/// A folio of this slot is in the swap cache.
pub(crate) const HAS_CACHE: u16 = 0x8000;
/// The most swap entries that may refer to one slot.
pub(crate) const MAX_COUNT: u16 = 0x7fff;

struct SwapMap {
    counts: Vec<u16>,
    next: usize,
}

/// A swap device; see the [module documentation](self).
pub(crate) struct SwapDevice {
    store: Box<dyn Store>,
    map: Mutex<SwapMap>,
    used: AtomicU64,
    slots: u64,
}

impl SwapDevice {
    /// A device of `slots` slots on `store` (its first `slots` pages).
    pub(crate) fn new(store: Box<dyn Store>, slots: u64) -> SwapDevice {
        SwapDevice {
            store,
            map: Mutex::new(SwapMap {
                counts: vec![0; slots as usize],
                next: 0,
            }),
            used: AtomicU64::new(0),
            slots,
        }
    }

    fn map(&self) -> MutexGuard<'_, SwapMap> {
        self.map.lock()
    }

    /// Slots in the device.
    pub(crate) fn slots(&self) -> u64 {
        self.slots
    }

    /// Slots in use (lock-free, as of the last change).
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether more than half the slots are in use (the kernel's `vm_swap_full`): then a folio
    /// swapped in for writing gives its slot up rather than keep a copy that will be stale.
    pub(crate) fn is_half_full(&self) -> bool {
        self.used() * 2 > self.slots
    }

    /// A free slot, with `HAS_CACHE` set; `None` when every slot is in use.
    #[doc(alias = "folio_alloc_swap")]
    pub(crate) fn alloc(&self) -> Option<u64> {
        let mut m = self.map();
        let n = m.counts.len();
        if self.used() as usize >= n {
            return None;
        }
        for i in 0..n {
            let slot = (m.next + i) % n;
            if m.counts[slot] == 0 {
                m.counts[slot] = HAS_CACHE;
                m.next = (slot + 1) % n;
                self.used.fetch_add(1, Ordering::Relaxed);
                return Some(slot as u64);
            }
        }
        None
    }

    /// One more swap entry refers to `slot`; false (nothing changed) at [`MAX_COUNT`].
    #[doc(alias = "swap_duplicate")]
    pub(crate) fn dup(&self, slot: u64) -> bool {
        let mut m = self.map();
        let c = &mut m.counts[slot as usize];
        debug_assert!(*c != 0, "dup of a free slot {slot}");
        if *c & MAX_COUNT == MAX_COUNT {
            return false;
        }
        *c += 1;
        true
    }

    /// One swap entry referring to `slot` is gone; returns the count left (with `HAS_CACHE`).
    #[doc(alias = "swap_free")]
    pub(crate) fn put(&self, slot: u64) -> u16 {
        let mut m = self.map();
        let c = &mut m.counts[slot as usize];
        debug_assert!(*c & MAX_COUNT != 0, "put of slot {slot} with no entries");
        *c -= 1;
        let left = *c;
        if left == 0 {
            self.used.fetch_sub(1, Ordering::Relaxed);
        }
        left
    }

    /// A folio for `slot` entered the swap cache (a swap-in; `alloc` set the mark already for
    /// reclaim's own). The slot is in use: a swap entry refers to it.
    pub(crate) fn set_cache(&self, slot: u64) {
        let mut m = self.map();
        let c = &mut m.counts[slot as usize];
        debug_assert!(*c != 0, "set_cache on a free slot {slot}");
        *c |= HAS_CACHE;
    }

    /// The slot's folio left the swap cache (or never entered it); frees the slot if no swap
    /// entry refers to it.
    pub(crate) fn clear_cache(&self, slot: u64) {
        let mut m = self.map();
        let c = &mut m.counts[slot as usize];
        debug_assert!(*c & HAS_CACHE != 0, "slot {slot} has no cache");
        *c &= !HAS_CACHE;
        if *c == 0 {
            self.used.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Swap entries referring to `slot`.
    #[doc(alias = "swp_swapcount")]
    pub(crate) fn count(&self, slot: u64) -> u16 {
        self.map().counts[slot as usize] & MAX_COUNT
    }

    /// Writes one page to `slot`.
    #[doc(alias = "swap_writepage")]
    pub(crate) fn write(&self, slot: u64, page: &[u8]) -> Result<(), StoreError> {
        debug_assert_eq!(page.len(), FRAME_SIZE);
        self.store.write_all_at(slot * FRAME_SIZE as u64, page)
    }

    /// Reads one page from `slot` (a slot past the store's end reads as zeros: it was never
    /// written, which only a slot whose content is dead can be).
    #[doc(alias = "swap_read_folio")]
    pub(crate) fn read(&self, slot: u64, page: &mut [u8]) -> Result<(), StoreError> {
        debug_assert_eq!(page.len(), FRAME_SIZE);
        let n = self.store.read_full_at(slot * FRAME_SIZE as u64, page)?;
        page[n..].fill(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;

    #[test]
    fn slots_are_freed_when_the_last_user_goes() {
        let d = SwapDevice::new(Box::new(MemStore::new()), 3);
        let a = d.alloc().unwrap();
        let b = d.alloc().unwrap();
        let c = d.alloc().unwrap();
        assert_eq!(d.alloc(), None, "all three in use");
        assert_eq!(d.used(), 3);
        assert!(d.dup(a) && d.dup(a));
        d.clear_cache(a);
        assert_eq!(d.count(a), 2);
        assert_eq!(d.put(a), 1);
        assert_eq!(d.used(), 3);
        assert_eq!(d.put(a), 0);
        assert_eq!(d.used(), 2, "a is free again");
        assert_eq!(d.alloc(), Some(a));
        d.clear_cache(b);
        assert!(d.dup(c));
        assert_eq!(d.put(c), HAS_CACHE, "the cache still holds c");
        d.clear_cache(c);
        assert_eq!(d.used(), 1);
        assert!(!d.is_half_full());
    }

    #[test]
    fn a_slot_counts_up_to_its_limit() {
        let d = SwapDevice::new(Box::new(MemStore::new()), 1);
        let s = d.alloc().unwrap();
        for _ in 0..MAX_COUNT {
            assert!(d.dup(s));
        }
        assert!(!d.dup(s));
        assert_eq!(d.count(s), MAX_COUNT);
    }

    #[test]
    fn pages_round_trip_and_unwritten_slots_read_zero() {
        let d = SwapDevice::new(Box::new(MemStore::new()), 4);
        let page = vec![0x5a; FRAME_SIZE];
        d.write(2, &page).unwrap();
        let mut back = vec![1; FRAME_SIZE];
        d.read(2, &mut back).unwrap();
        assert_eq!(back, page);
        d.read(3, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0));
    }
}
