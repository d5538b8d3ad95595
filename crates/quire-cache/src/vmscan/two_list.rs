//! The classic active and inactive lists as a reclaim policy (`"lru"`), the reclaim quire had
//! before the multi-generational LRU: a folio used twice while inactive is activated, a round
//! of reclaim takes from the inactive tail and deactivates the active list in proportion, a
//! refault within the active list's size is activated at once (see [`super::workingset`]).
//! The lists themselves, the batches and `shrink_folio_list` are shared ([`super::lru`],
//! [`super::swap`], [`super::reclaim`]).
//!
//! # One round of reclaim
//!
//! A round wants `nr_to_reclaim` frames. It first drains every folio batch (so that new
//! folios are on the lists and no batch holds a reference that would keep a folio from being
//! evicted), then scans at falling *priorities*, 12 down to 0: at priority `p` it looks at
//! `size >> p` frames of the inactive file list — and as many of the active file list's, if the
//! active list may be deactivated — 32 frames at a time, until the round has what it wants.
//! The active list is deactivated in proportion when the inactive list is *low* (the kernel's
//! `inactive_is_low`: `inactive * ratio < active`, with `ratio = sqrt(10 * GiB)` of the two
//! lists, 1 below 1 GiB). When refaults have activated folios since the last round (a new working
//! set is forming and the old one must make room), the round first moves as many frames off the
//! active tail as refaults activated.
//!
//! That last rule is quire's, not the kernel's: the kernel, on seeing refault activations,
//! scans the whole active list in proportion to the inactive one for the round
//! (`may_deactivate`), so its active list ages as fast as the inactive one while any refault
//! activates — a hot set then keeps being pushed out by a stream's rare refaults, and pushed out
//! pages refault and activate again. Displacing only what was activated keeps the transition to
//! a new working set (each refault activation still pushes one old active page towards the
//! inactive list) without that feedback. In a model of both (a hot set read at random while a
//! stream runs, a Zipf trace, two working sets taking turns) it kept 98% of the hot set where the
//! kernel's rule kept 84%, and did as well on the transitions; the `evict` benchmark measures it
//! (docs/journal/).
//!
//! After the round the shadow shrinker runs.
//!
//! # A folio at the inactive tail
//!
//! As `shrink_folio_list` decides it ([`super::reclaim`]); one dirty or under write-back is
//! parked on the active list (`ACTIVE` set) until its write-back ends.

use std::sync::atomic::{AtomicU64, Ordering};

use super::policy::{AccessRule, Policy};
use super::reclaim::{ScanControl, SWAP_CLUSTER_MAX};
use super::workingset::Refault;
use super::{isqrt, Lru, LruGuard, Owners, VmConfig, Vmscan};
use crate::mem::folio::{Folio, FRAME_SHIFT};
use crate::mem::pool::FramePool;
use crate::stats::Event;

/// The first (least eager) priority of a round.
const DEF_PRIORITY: u32 = 12;

/// The classic lists as a reclaim policy.
#[derive(Debug)]
pub(crate) struct TwoList {
    /// The workingset activations counted when reclaim last finished, to tell whether refaults
    /// have been activating since (the kernel's `lruvec->refaults`).
    refaults_snapshot: AtomicU64,
}

impl TwoList {
    /// The policy's state for a cache.
    pub(crate) fn boxed(_c: &VmConfig) -> Box<dyn Policy> {
        Box::new(TwoList {
            refaults_snapshot: AtomicU64::new(0),
        })
    }
}

impl Policy for TwoList {
    /// The second access of an inactive folio activates it; an active or unevictable one
    /// writes nothing.
    fn access_rule(&self) -> AccessRule {
        AccessRule::Activate
    }

    /// From the inactive list to the active one.
    fn activate(&self, vm: &Vmscan, g: &mut LruGuard<'_>, f: &Folio) {
        g.del(f);
        f.set_active();
        g.add(f, false);
        vm.counters.add(Event::PgActivate, f.nr_frames() as u64);
    }

    /// One round of reclaim wanting `nr_to_reclaim` frames (see the module documentation).
    fn shrink(
        &self,
        vm: &Vmscan,
        pool: &FramePool,
        owners: &dyn Owners,
        nr_to_reclaim: usize,
    ) -> usize {
        vm.drain_all(pool);
        let activations = vm.counters.get(Event::WorkingsetActivate);
        let refault_activated = activations
            .saturating_sub(self.refaults_snapshot.swap(activations, Ordering::Relaxed))
            as usize;
        let mut sc = ScanControl {
            nr_to_reclaim,
            may_deactivate: vm.inactive_is_low(),
            ..ScanControl::default()
        };
        if refault_activated > 0 && !sc.may_deactivate {
            // A new working set is forming: make room for what refaults activated, taken off the
            // active tail (see the module documentation for how this differs from the kernel).
            vm.shrink_active_list(pool, Lru::ActiveFile, refault_activated);
        }
        for priority in (0..=DEF_PRIORITY).rev() {
            sc.priority = priority;
            vm.shrink_lruvec(pool, owners, &mut sc);
            if sc.nr_reclaimed >= sc.nr_to_reclaim {
                break;
            }
        }
        sc.nr_reclaimed
    }

    fn refault(&self, vm: &Vmscan, folio: &Folio, shadow: u64) -> Refault {
        vm.classic_refault(folio, shadow, true)
    }

    #[cfg(loom)]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Vmscan {
    /// Whether the inactive file list is too short next to the active one.
    pub(crate) fn inactive_is_low(&self) -> bool {
        self.inactive_is_low_of(Lru::InactiveFile)
    }

    /// Whether the inactive list `inactive` (file or anon) is too short next to its active one.
    fn inactive_is_low_of(&self, inactive: Lru) -> bool {
        let active = match inactive {
            Lru::InactiveAnon => Lru::ActiveAnon,
            _ => Lru::ActiveFile,
        };
        let inactive = self.lruvec.size(inactive) as u64;
        let active = self.lruvec.size(active) as u64;
        let gib = (inactive + active) >> (30 - FRAME_SHIFT);
        let ratio = if gib > 0 { isqrt(10 * gib) } else { 1 };
        inactive * ratio < active
    }

    /// Reclaims from the tail of an inactive list (file or anon), looking at `nr` frames.
    fn shrink_inactive_list(
        &self,
        pool: &FramePool,
        owners: &dyn Owners,
        lru: Lru,
        nr: usize,
        sc: &mut ScanControl,
    ) {
        let folios = self.isolate(pool, lru, nr);
        let scanned: usize = folios.iter().map(|f| f.nr_frames()).sum();
        if scanned == 0 {
            return;
        }
        self.counters.add(Event::PgScan, scanned as u64);
        sc.nr_scanned += scanned;
        let dirty_before = sc.nr_dirty;
        sc.nr_reclaimed += self.shrink_folio_list(pool, owners, folios, sc);
        if sc.nr_dirty > dirty_before {
            owners.wake_flusher();
        }
    }

    /// Moves `nr` frames' worth of folios from the tail of an active list (file or anon) to the
    /// head of the inactive one, marking them `WORKINGSET` (they had been in use).
    fn shrink_active_list(&self, pool: &FramePool, lru: Lru, nr: usize) {
        let folios = self.isolate(pool, lru, nr);
        let mut moved = 0;
        for f in &folios {
            if !f.is_unevictable() {
                f.clear_active();
                f.set_workingset();
                moved += f.nr_frames();
            }
        }
        self.putback(pool, folios);
        if moved > 0 {
            self.counters.add(Event::PgDeactivate, moved as u64);
        }
    }

    /// One priority level of a round: scans the file lists in proportion to their sizes, and
    /// the anonymous lists likewise when the owners can swap (the kernel's `swappiness` at
    /// 100: both kinds cost the same to bring back, one read each).
    fn shrink_lruvec(&self, pool: &FramePool, owners: &dyn Owners, sc: &mut ScanControl) {
        let p = sc.priority;
        let swap = owners.can_swap();
        let anon_deactivate = swap && self.inactive_is_low_of(Lru::InactiveAnon);
        let mut scan = [
            (Lru::InactiveFile, self.lruvec.size(Lru::InactiveFile) >> p),
            (
                Lru::ActiveFile,
                if sc.may_deactivate {
                    self.lruvec.size(Lru::ActiveFile) >> p
                } else {
                    0
                },
            ),
            (
                Lru::InactiveAnon,
                if swap {
                    self.lruvec.size(Lru::InactiveAnon) >> p
                } else {
                    0
                },
            ),
            (
                Lru::ActiveAnon,
                if anon_deactivate {
                    self.lruvec.size(Lru::ActiveAnon) >> p
                } else {
                    0
                },
            ),
        ];
        while scan.iter().any(|(_, left)| *left > 0) {
            for (lru, left) in scan.iter_mut() {
                if *left == 0 {
                    continue;
                }
                let n = (*left).min(SWAP_CLUSTER_MAX);
                *left -= n;
                match lru {
                    Lru::InactiveFile | Lru::InactiveAnon => {
                        self.shrink_inactive_list(pool, owners, *lru, n, sc)
                    }
                    _ => self.shrink_active_list(pool, *lru, n),
                }
            }
            if sc.nr_reclaimed >= sc.nr_to_reclaim {
                break;
            }
        }
        // Keep the lists balanced even when the round did not need to deactivate.
        if !sc.may_deactivate && self.inactive_is_low() {
            self.shrink_active_list(pool, Lru::ActiveFile, SWAP_CLUSTER_MAX);
        }
        if swap && !anon_deactivate && self.inactive_is_low_of(Lru::InactiveAnon) {
            self.shrink_active_list(pool, Lru::ActiveAnon, SWAP_CLUSTER_MAX);
        }
    }
}
