//! The "before" of this module (rule 7 of docs/RULES.md): reclaim as quire did it before it had LRU
//! lists — a clock over the memmap, swept by the thread whose allocation failed.
//!
//! The hand walks the descriptors of the pool in frame order, a folio at a time. A folio that
//! belongs to no owner (`mapping` 0), is locked or under write-back is passed over. One that was
//! used since the hand last passed (`REFERENCED`) has the bit cleared and gets a second chance.
//! Otherwise it is locked (`try_lock`: reclaim never waits for a folio lock, so it cannot
//! deadlock with a lock holder that is itself allocating); a dirty one is written back by the
//! sweeping thread (it is evicted on a later pass once clean; the hand is released during that
//! I/O), and a clean one is evicted through its owner, leaving a shadow. Anonymous folios are
//! passed over: the clock predates swap, so a cache under this policy never swaps.

use super::{Owners, Vmscan};
use crate::mem::folio::{ANON, HEAD, LOCKED, ORDER_MASK, ORDER_SHIFT, WRITEBACK};
use crate::mem::pool::FramePool;
use crate::stats::Event;

impl Vmscan {
    /// Sweeps the clock until `want` frames are freed or every frame was looked at twice;
    /// returns the frames freed.
    pub(crate) fn clock_reclaim(
        &self,
        pool: &FramePool,
        owners: &dyn Owners,
        want: usize,
    ) -> usize {
        let n = pool.nr_frames();
        let mut hand = self.clock.lock();
        let mut freed = 0;
        let mut scanned = 0;
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
            if flags & HEAD == 0 || flags & (LOCKED | WRITEBACK | ANON) != 0 || folio.mapping() == 0
            {
                continue;
            }
            if folio.clear_referenced() {
                continue;
            }
            let Some(f) = pool.try_get(folio) else {
                continue;
            };
            let Ok(mut g) = f.try_lock_with(self.wait_policy) else {
                continue;
            };
            if g.mapping() == 0 {
                continue;
            }
            self.counters.add(Event::PgScan, g.nr_frames() as u64);
            if g.is_dirty() {
                // Written back now, evicted on a later pass once clean. The hand is released
                // for the I/O so that other allocating threads can sweep meanwhile.
                drop(hand);
                owners.write_back(g);
                hand = self.clock.lock();
                continue;
            }
            let nr = g.nr_frames();
            if owners.evict(&mut g, &mut |folio| self.workingset_eviction(folio)) {
                freed += nr;
                self.counters.add(Event::PgSteal, nr as u64);
            }
        }
        freed
    }
}
