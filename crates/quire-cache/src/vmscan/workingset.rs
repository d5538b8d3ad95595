//! Workingset detection, after the kernel's `mm/workingset.c`: shadow entries that remember
//! when a folio was evicted, the refault distance that tells whether a refaulting folio belongs
//! to the working set, and the shrinker that keeps the memory of shadow nodes bounded.
//!
//! # The non-resident age
//!
//! Each cache keeps one counter, the *non-resident age*, advanced by the folio's frames on every
//! eviction and every activation (the kernel's `lruvec->nonresident_age`). Between two readings
//! it tells the least number of accesses to inactive folios that happened meanwhile: a folio
//! entering the inactive list pushes one out of memory, or one activated leaves it.
//!
//! # Shadow entries
//!
//! When reclaim evicts a folio, its slot in the index keeps a *shadow* value instead:
//!
//! | bits | meaning |
//! |---|---|
//! | 0 | the folio was in the working set: `WORKINGSET` was set (it had been active) |
//! | 1–60 | the non-resident age when it was evicted (modulo 2^60) |
//!
//! Under the multi-generational LRU ([`super::lru_gen`]) the shadow also keeps the folio's
//! uses, for its tier:
//!
//! | bits | meaning |
//! |---|---|
//! | 0 | `WORKINGSET` was set |
//! | 1–3 | uses beyond the first (0..=4) |
//! | 4 | evicted from its type's probation list (loop protection) |
//! | 5–60 | the non-resident age when it was evicted (modulo 2^56) |
//!
//! # Refaults
//!
//! When a folio is read in over a shadow, the *refault distance* is the age now minus the age
//! at eviction: at least that many accesses to other inactive folios happened while it was out
//! of memory. Had the inactive list been that much longer, the folio would have been found in
//! memory; and the only memory the inactive list could have had more of is what the active list
//! holds. So if the distance is at most the size of the active list (the *workingset size*,
//! counted over the file lists, and over the anonymous lists too once anonymous memory can be
//! swapped), the folio is activated at once, as part of the working set: it gets `ACTIVE` and
//! `WORKINGSET`, the age advances as for any activation, and reclaim is told to put pressure on
//! the current active list (a new working set may be forming). A refault of a folio whose
//! shadow says it was in the working set counts as a *restore*.
//!
//! # Shadow nodes
//!
//! Shadows live in the index's nodes, on the heap beside the budget. The index lists every
//! node that holds only shadows (`xarray::NodeList`), oldest first, and after every
//! round of reclaim the shrinker deletes the oldest ones while there are more than
//! `Vmscan::max_shadow_nodes`: one per sixteen frames of the budget. A shadow is useful only
//! while its refault distance can still be within the workingset size — at most the budget —
//! and with 64 slots a node, one node per sixteen frames keeps four times the budget's worth of
//! shadows when nodes are full, and still the budget's worth when only a quarter of their slots
//! hold shadows. (The kernel allows one per eight pages for a density of 1/8; quire halves
//! that so that all index nodes, not just the shadow nodes, stay under 2% of the budget:
//! 576-byte nodes, one per 16 frames of 4 KiB, is 0.88%.)

use std::sync::atomic::Ordering;

use super::{Lru, Owners, Vmscan};
use crate::mem::folio::Folio;
use crate::stats::Event;

/// Bits of the non-resident age a shadow keeps.
const AGE_BITS: u32 = 60;
const AGE_MASK: u64 = (1 << AGE_BITS) - 1;
/// The shadow's "was in the working set" bit.
const WORKINGSET_BIT: u64 = 1;

/// A shadow entry's value, from the age at eviction and whether the folio was in the working
/// set (the kernel's `pack_shadow`).
#[inline]
pub(crate) fn pack_shadow(age: u64, workingset: bool) -> u64 {
    ((age & AGE_MASK) << 1) | u64::from(workingset)
}

/// The age at eviction and the working-set bit of a shadow (the kernel's `unpack_shadow`).
#[inline]
pub(crate) fn unpack_shadow(shadow: u64) -> (u64, bool) {
    ((shadow >> 1) & AGE_MASK, shadow & WORKINGSET_BIT != 0)
}

/// Bits of the non-resident age a multi-generational shadow keeps.
const GEN_AGE_BITS: u32 = AGE_BITS - 4;
/// The mask of those bits (refault distances are taken modulo it).
pub(crate) const GEN_AGE_MASK: u64 = (1 << GEN_AGE_BITS) - 1;

/// What a multi-generational shadow keeps of an evicted folio (the kernel's `lru_gen_eviction`
/// token, plus where the folio was evicted from).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GenShadow {
    /// The non-resident age at eviction (modulo 2^56).
    pub age: u64,
    /// Its uses beyond the first (at most 7 are kept).
    pub uses: u64,
    /// Whether `WORKINGSET` was set.
    pub workingset: bool,
    /// Whether it was evicted from its type's probation list (loop protection).
    pub probation: bool,
}

impl GenShadow {
    /// The shadow's value: bit 0 `workingset`, bits 1–3 `uses`, bit 4 `probation`, bits 5–60
    /// the age.
    #[inline]
    pub(crate) fn pack(self) -> u64 {
        ((self.age & GEN_AGE_MASK) << 5)
            | (u64::from(self.probation) << 4)
            | (self.uses.min(7) << 1)
            | u64::from(self.workingset)
    }

    /// The shadow a value holds.
    #[inline]
    pub(crate) fn unpack(shadow: u64) -> GenShadow {
        GenShadow {
            age: (shadow >> 5) & GEN_AGE_MASK,
            uses: (shadow >> 1) & 7,
            workingset: shadow & WORKINGSET_BIT != 0,
            probation: shadow & (1 << 4) != 0,
        }
    }
}

/// What a refault came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refault {
    /// The refault distance (frames).
    pub distance: u64,
    /// Whether the folio was activated as part of the working set.
    pub activated: bool,
    /// Whether it had been in the working set before it was evicted.
    pub restored: bool,
}

impl Vmscan {
    /// The non-resident age now.
    pub(crate) fn nonresident_age(&self) -> u64 {
        self.nonresident_age.load(Ordering::Relaxed)
    }

    /// Advances the age by `frames` (an eviction or an activation).
    #[inline]
    pub(crate) fn workingset_activation(&self, frames: usize) {
        self.nonresident_age
            .fetch_add(frames as u64, Ordering::Relaxed);
    }

    /// The shadow to leave for `folio`, which is being evicted now, as the policy packs it;
    /// advances the age. The kernel's `workingset_eviction`.
    pub(crate) fn workingset_eviction(&self, folio: &Folio) -> u64 {
        self.policy().eviction(self, folio)
    }

    /// The classic shadow of `folio`: the age and whether it was in the working set.
    pub(crate) fn classic_eviction(&self, folio: &Folio) -> u64 {
        let age = self
            .nonresident_age
            .fetch_add(folio.nr_frames() as u64, Ordering::Relaxed);
        self.counters
            .add(Event::Evictions, folio.nr_frames() as u64);
        pack_shadow(age, folio.is_workingset())
    }

    /// The frames of the working set a refault competes with: the active file list (and, once
    /// anonymous memory can be swapped out, the anonymous lists).
    pub(crate) fn workingset_size(&self) -> u64 {
        self.lruvec.size(Lru::ActiveFile) as u64
    }

    /// `folio`, not yet on any list, is being read in over `shadow`: the policy counts the
    /// refault and marks where the folio is to be added. The kernel's `workingset_refault`.
    pub(crate) fn workingset_refault(&self, folio: &Folio, shadow: u64) -> Refault {
        self.policy().refault(self, folio, shadow)
    }

    /// The classic refault of a shadow left by [`Vmscan::classic_eviction`]: counts it and, if
    /// the policy may activate (`may_activate`), workingset detection is on and the refault
    /// distance is within the workingset size, sets `ACTIVE` and `WORKINGSET` so that it is
    /// added to the active list.
    pub(crate) fn classic_refault(
        &self,
        folio: &Folio,
        shadow: u64,
        may_activate: bool,
    ) -> Refault {
        let nr = folio.nr_frames() as u64;
        let (evicted, was_workingset) = unpack_shadow(shadow);
        let distance = self.nonresident_age().wrapping_sub(evicted) & AGE_MASK;
        self.counters.add(Event::WorkingsetRefault, nr);
        let mut r = Refault {
            distance,
            activated: false,
            restored: false,
        };
        if !self.workingset || !may_activate {
            return r;
        }
        if distance > self.workingset_size() {
            return r;
        }
        folio.set_active();
        folio.set_workingset();
        self.workingset_activation(nr as usize);
        self.counters.add(Event::WorkingsetActivate, nr);
        r.activated = true;
        if was_workingset {
            self.counters.add(Event::WorkingsetRestore, nr);
            r.restored = true;
        }
        r
    }

    /// Shadow nodes the shrinker keeps at most.
    pub(crate) fn max_shadow_nodes(&self) -> usize {
        self.max_shadow_nodes
    }

    /// Deletes the oldest shadow nodes while there are more than the limit, at most `budget`
    /// of them per call (so one call stays short); returns how many it freed. The kernel's
    /// `scan_shadow_nodes`.
    #[doc(alias = "scan_shadow_nodes")]
    pub(crate) fn shrink_shadow_nodes(&self, owners: &dyn Owners, budget: usize) -> usize {
        if !self.shadow_shrinker {
            return 0;
        }
        let mut freed = 0;
        let mut tries = 0;
        while self.shadow_nodes.len() > self.max_shadow_nodes && tries < budget {
            tries += 1;
            let Some(n) = self.shadow_nodes.rotate_oldest() else {
                break;
            };
            if owners.delete_shadow_node(&n) {
                freed += 1;
            }
        }
        if freed > 0 {
            self.counters
                .add(Event::WorkingsetNodereclaim, freed as u64);
        }
        freed
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn shadows_round_trip() {
        for (age, ws) in [(0, false), (1, true), (AGE_MASK, true), (12345, false)] {
            assert_eq!(unpack_shadow(pack_shadow(age, ws)), (age, ws));
        }
        // The age wraps; a shadow always fits the index's 63-bit values.
        assert_eq!(unpack_shadow(pack_shadow(AGE_MASK + 5, false)).0, 4);
        assert!(pack_shadow(u64::MAX, true) <= crate::xarray::MAX_VALUE);
    }

    #[test]
    fn gen_shadows_round_trip() {
        for (age, uses, workingset, probation) in [
            (0, 0, false, false),
            (1, 4, true, false),
            (GEN_AGE_MASK, 7, true, true),
            (99, 2, false, true),
        ] {
            let g = GenShadow {
                age,
                uses,
                workingset,
                probation,
            };
            assert_eq!(GenShadow::unpack(g.pack()), g);
        }
        let wrapped = GenShadow {
            age: GEN_AGE_MASK + 3,
            uses: 9,
            workingset: false,
            probation: true,
        };
        let back = GenShadow::unpack(wrapped.pack());
        assert_eq!((back.age, back.uses, back.probation), (2, 7, true));
        let max = GenShadow {
            age: u64::MAX,
            uses: 7,
            workingset: true,
            probation: true,
        };
        assert!(max.pack() <= crate::xarray::MAX_VALUE);
    }
}
