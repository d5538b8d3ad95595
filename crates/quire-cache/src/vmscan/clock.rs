//! The "before" of this module (rule 7 of docs/RULES.md): reclaim as quire did it before it had LRU
//! lists — a clock over the memmap, swept by the thread whose allocation failed.
//!
//! The hand walks the descriptors of the pool in frame order, a folio at a time. A folio that
//! belongs to no owner (`mapping` 0), is locked, under write-back, or dirty with a write-back
//! that failed too often (`WB_FAILED`: its owner retries it only when asked) is passed over. One that was
//! used since the hand last passed (`REFERENCED`) has the bit cleared and gets a second chance.
//! Otherwise it is locked (`try_lock`: reclaim never waits for a folio lock, so it cannot
//! deadlock with a lock holder that is itself allocating); a dirty one is written back by the
//! sweeping thread (it is evicted on a later pass once clean; the hand is released during that
//! I/O), and a clean one is evicted through its owner, leaving a shadow. Anonymous folios are
//! passed over: the clock predates swap, so a cache under this policy never swaps.
//!
//! It keeps no lists, queues no batches and runs no background thread: adding, removing,
//! accessing (beyond `REFERENCED`) and the end of write-back do nothing, and allocation takes
//! what is free without watermarks, sweeping the clock when nothing is. Its shadows are the
//! classic lists', but a refault never activates (there is nothing to activate onto).

use super::policy::{AccessRule, Policy};
use super::workingset::Refault;
use super::{LruGuard, OwnerMemo, Owners, VmConfig, Vmscan};
use crate::mem::folio::{
    Folio, FolioRef, ANON, HEAD, LOCKED, ORDER_MASK, ORDER_SHIFT, WB_FAILED, WRITEBACK,
};
use crate::mem::pool::FramePool;
use crate::stats::Event;
use crate::sync::loom::Mutex;

/// The clock as a reclaim policy (`"clock"`): its hand, a frame number.
#[derive(Debug)]
pub(crate) struct Clock {
    hand: Mutex<usize>,
}

impl Clock {
    /// The policy's state for a cache (the hand at frame 0).
    pub(crate) fn boxed(_c: &VmConfig) -> Box<dyn Policy> {
        Box::new(Clock {
            hand: Mutex::new(0),
        })
    }

    /// Sweeps the clock until `want` frames are freed or every frame was looked at twice;
    /// returns the frames freed.
    fn clock_reclaim(
        &self,
        vm: &Vmscan,
        pool: &FramePool,
        owners: &dyn Owners,
        want: usize,
    ) -> usize {
        let n = pool.nr_frames();
        let mut hand = self.hand.lock();
        let mut freed = 0;
        let mut scanned = 0;
        // The evicted folios, freed together (by the time this returns).
        let mut batch = pool.free_batch();
        while freed < want && scanned < 2 * n {
            let pfn = *hand % n;
            let Some(folio) = pool.folio(pfn) else {
                *hand = 0;
                continue;
            };
            let flags = folio.flags();
            let step = if flags & HEAD != 0 {
                1usize << ((flags & ORDER_MASK) >> ORDER_SHIFT)
            } else {
                1
            };
            *hand = (pfn + step) % n;
            scanned += step;
            if flags & HEAD == 0
                || flags & (LOCKED | WRITEBACK | ANON | WB_FAILED) != 0
                || folio.mapping() == 0
            {
                continue;
            }
            if folio.clear_referenced() {
                continue;
            }
            let Some(f) = pool.try_get(folio) else {
                continue;
            };
            let Ok(mut g) = f.try_lock_with(vm.wait_policy) else {
                continue;
            };
            if g.mapping() == 0 {
                continue;
            }
            vm.counters.add(Event::PgScan, g.nr_frames() as u64);
            if g.is_dirty() {
                // Written back now, evicted on a later pass once clean. The hand is released
                // for the I/O so that other allocating threads can sweep meanwhile, and what
                // this sweep freed goes to them first.
                batch.flush();
                drop(hand);
                owners.write_back(g);
                hand = self.hand.lock();
                continue;
            }
            let nr = g.nr_frames();
            if let Some(ticket) = owners.evict(
                &mut g,
                &mut |folio| vm.workingset_eviction(folio),
                &mut OwnerMemo::default(),
            ) {
                g.free_frozen(ticket, &mut batch);
                freed += nr;
                vm.counters.add(Event::PgSteal, nr as u64);
            }
        }
        freed
    }
}

impl Policy for Clock {
    fn lru_add(&self, _vm: &Vmscan, _pool: &FramePool, _folio: &Folio) {}

    fn lru_del(&self, _vm: &Vmscan, _pool: &FramePool, _folio: &Folio) {}

    /// The hand's second chance needs only `REFERENCED`.
    fn access_rule(&self) -> AccessRule {
        AccessRule::Nothing
    }

    fn rotate_reclaimable(&self, _vm: &Vmscan, _pool: &FramePool, _folio: &Folio) {}

    /// Never queued: the clock keeps no lists.
    fn rotate(&self, _g: &mut LruGuard<'_>, _folio: &Folio) {}

    fn shrink(&self, vm: &Vmscan, pool: &FramePool, owners: &dyn Owners, nr: usize) -> usize {
        self.clock_reclaim(vm, pool, owners, nr)
    }

    fn keeps_lists(&self) -> bool {
        false
    }

    fn refault(&self, vm: &Vmscan, folio: &Folio, shadow: u64) -> Refault {
        vm.classic_refault(folio, shadow, false)
    }

    /// Whatever is free, without watermarks: the allocating thread sweeps when nothing is.
    fn alloc_fast<'p>(
        &self,
        _vm: &Vmscan,
        pool: &'p FramePool,
        order: u32,
    ) -> Option<FolioRef<'p>> {
        pool.alloc(order)
    }

    fn background_reclaim(&self) -> bool {
        false
    }

    #[cfg(loom)]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
