//! The page-table entry word of a [`super::Space`] (the kernel's `pte_t`, software only).
//!
//! One `u64` per virtual page, read and written under the space's page-table lock (the
//! kernel's `ptl`). Bits 0–7 are the entry's state; bits 12 and up hold a frame number when the
//! page is present, or a swap slot when it is swapped out. There is no dirty bit: writes through
//! a writable entry are recorded by the frame's hardware dirty bit ([`crate::mem::dirtybit`]),
//! the way s390 keeps a page's change bit in its storage key rather than in the pte.
//!
//! | bit(s) | name | meaning |
//! |---|---|---|
//! | 0 | `PRESENT` | bits 12.. are a frame number: the page is mapped, and the entry holds one reference on its folio and one unit of its mapcount |
//! | 1 | `WRITE` | present and writable: the space is the folio's only mapper (copy-on-write resolved) |
//! | 2 | `YOUNG` | accessed since reclaim last looked (`folio_referenced` clears it) |
//! | 3 | `SWAP` | not present, bits 12.. are a swap slot: the entry holds one count of the slot's `swap_map` |
//! | 4 | `MLOCK` | the page is locked in memory (`VM_LOCKED`); while present it holds one unit of its folio's mlock count |
//! | 5 | `NOWRITE` | writes are refused (`mprotect` to read-only): the kernel's `VM_WRITE` cleared |
//! | 6–11 | — | zero |
//! | 12–63 | frame or slot | see `PRESENT` and `SWAP` |
//!
//! An entry with neither `PRESENT` nor `SWAP` is *none*: the page was never touched (reads see
//! zeros), or was unmapped. `MLOCK` and `NOWRITE` describe the virtual page and survive every
//! state change of the entry.

/// The page is mapped: bits 12.. are its frame.
pub(crate) const PRESENT: u64 = 1 << 0;
/// The page may be written through this entry.
pub(crate) const WRITE: u64 = 1 << 1;
/// Accessed since reclaim last looked.
pub(crate) const YOUNG: u64 = 1 << 2;
/// Swapped out: bits 12.. are the swap slot.
pub(crate) const SWAP: u64 = 1 << 3;
/// Locked in memory (mlock).
pub(crate) const MLOCK: u64 = 1 << 4;
/// Writes refused (read-only protection).
pub(crate) const NOWRITE: u64 = 1 << 5;
/// The bits that describe the virtual page rather than what it maps.
pub(crate) const VMA_BITS: u64 = MLOCK | NOWRITE;

const SHIFT: u32 = 12;

/// The largest frame number or slot an entry can hold.
pub(crate) const MAX_TARGET: u64 = u64::MAX >> SHIFT;

/// A present entry for frame `pfn`, keeping the page's `VMA_BITS` from `old`.
#[inline]
pub(crate) fn present(old: u64, pfn: usize, writable: bool) -> u64 {
    (old & VMA_BITS) | ((pfn as u64) << SHIFT) | PRESENT | YOUNG | if writable { WRITE } else { 0 }
}

/// A swap entry for `slot`, keeping the page's `VMA_BITS` from `old`.
#[inline]
pub(crate) fn swap(old: u64, slot: u64) -> u64 {
    (old & VMA_BITS) | (slot << SHIFT) | SWAP
}

/// A none entry, keeping the page's `VMA_BITS` from `old`.
#[inline]
pub(crate) fn none(old: u64) -> u64 {
    old & VMA_BITS
}

/// The frame of a present entry or the slot of a swap entry.
#[inline]
pub(crate) fn target(pte: u64) -> u64 {
    pte >> SHIFT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_keep_the_page_bits_and_their_target() {
        let old = MLOCK | NOWRITE | YOUNG | WRITE | PRESENT | (7 << SHIFT);
        let p = present(old, 42, false);
        assert_eq!(target(p), 42);
        assert_eq!(p & (PRESENT | WRITE | SWAP), PRESENT);
        assert_eq!(p & VMA_BITS, MLOCK | NOWRITE);
        let s = swap(p, MAX_TARGET);
        assert_eq!(target(s), MAX_TARGET);
        assert_eq!(s & (PRESENT | SWAP | YOUNG), SWAP);
        assert_eq!(s & VMA_BITS, MLOCK | NOWRITE);
        assert_eq!(none(s), MLOCK | NOWRITE);
        assert_eq!(present(0, 3, true) & WRITE, WRITE);
    }
}
