//! What every list policy's round of reclaim shares — isolating folios from a list's tail,
//! deciding the fate of isolated folios (the kernel's `shrink_folio_list`), putting back what
//! it keeps — and direct and background reclaim and allocation's slow path, which run a round
//! of the cache's policy ([`super::policy::Policy::shrink`]) and then the shadow shrinker. The
//! classic lists' round is in [`super::two_list`], the generations' in [`super::lru_gen`], the
//! clock's in [`super::clock`].
//!
//! # A folio at the inactive tail
//!
//! | state | outcome |
//! |---|---|
//! | locked (`try_lock` fails) | back to the head |
//! | removed by its owner meanwhile (`mapping` 0) | dropped |
//! | unevictable | to the unevictable list |
//! | dirty, its write-back failed too often (`WB_FAILED`) | to the unevictable list, the flusher not woken (it would not write it); its owner takes it back when something re-arms it |
//! | under write-back, or dirty | `RECLAIM` set, parked where the policy says (the classic lists: the active list), the flusher woken; rotated to where reclaim takes from next when its write-back ends |
//! | clean | evicted through its owner, leaving a shadow; if somebody holds a reference, back to the head |
//!
//! `REFERENCED` does not save a folio at the inactive tail (for unmapped file folios the
//! kernel reclaims it anyway): a folio is kept in memory by being used *twice* while inactive
//! (activation), not once.

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use super::{AnonFate, Lru, MappedFate, OwnerMemo, Owners, Vmscan};
use crate::mem::folio::{Folio, FolioRef, WB_FAILED};
use crate::mem::pool::FramePool;
use crate::stats::Event;
use crate::trace::slow_path;

/// Frames a round looks at, at most, per step (the kernel's `SWAP_CLUSTER_MAX`).
pub(crate) const SWAP_CLUSTER_MAX: usize = 32;
/// Shadow nodes the shrinker deletes at most after one round.
const SHADOW_BATCH: usize = 256;
/// How long an allocation below the min watermark waits for background reclaim, at most,
/// before it reclaims itself.
const THROTTLE: Duration = Duration::from_millis(4);
/// How many times an allocation below the min watermark looks for the end of background
/// reclaim's round before it sleeps until then (tens of microseconds in all, about one round;
/// see [`Kswapd::spin_for_round`](super::kswapd::Kswapd::spin_for_round)).
const SPIN_LOOKS: u32 = 128;

/// Whether a folio with these flags belongs on the unevictable list: a space has it mlocked
/// (`mm`'s mlock count), or its owner parked it because its write-back keeps failing
/// (`WB_FAILED`). Read under the LRU lock by whoever changes either ([`Vmscan::sync_unevictable`]).
pub(crate) fn unevictable(flags: u64) -> bool {
    flags & WB_FAILED != 0 || crate::mm::mlock_count(flags) > 0
}

/// Allocation gave up: every frame stayed pinned or locked for the whole allocation timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NoMemory;

/// One round's bookkeeping (the kernel's `scan_control`).
#[derive(Debug, Default)]
pub(crate) struct ScanControl {
    pub nr_to_reclaim: usize,
    pub nr_reclaimed: usize,
    pub nr_scanned: usize,
    pub priority: u32,
    pub may_deactivate: bool,
    /// Dirty folios met at the inactive tail this round.
    pub nr_dirty: usize,
    /// Folios under write-back met at the inactive tail this round.
    pub nr_writeback: usize,
    /// Per type, frames of readahead not yet used that the multi-generational LRU sent back to
    /// probation's head this round for their one more turn (a whole round of them, and the
    /// generations go first for the rest of the round).
    pub probation_rotated: [usize; 2],
}

impl Vmscan {
    /// Takes folios from the tail of `lru` until `nr` frames are taken (at least one folio if
    /// the list is not empty), each with a reference and off the list; returns them. Folios
    /// whose count is frozen (being changed in place) are moved to the head instead.
    pub(crate) fn isolate<'p>(
        &self,
        pool: &'p FramePool,
        lru: Lru,
        nr: usize,
    ) -> Vec<FolioRef<'p>> {
        let mut out = Vec::with_capacity(nr.min(SWAP_CLUSTER_MAX));
        let mut g = self.lruvec.lock(pool);
        let mut taken = 0;
        let mut skipped = 0;
        while taken < nr && skipped < nr.max(SWAP_CLUSTER_MAX) {
            let Some(f) = g.tail(lru) else { break };
            if !f.try_get() {
                skipped += 1;
                g.move_to_head(f);
                continue;
            }
            g.del(f);
            taken += f.nr_frames();
            // SAFETY: `try_get` just gave us a counted reference on this descriptor of `pool`.
            out.push(unsafe { pool.ref_from_raw(NonNull::from(f)) });
        }
        out
    }

    /// Links the folios back (each onto the list its flags name, at the head) unless their
    /// owner removed them meanwhile, then puts the references.
    pub(crate) fn putback(&self, pool: &FramePool, folios: Vec<FolioRef<'_>>) {
        if folios.is_empty() {
            return;
        }
        {
            let mut g = self.lruvec.lock(pool);
            for f in &folios {
                if f.mapping() != 0 && !f.is_lru() {
                    g.add(f, false);
                }
            }
        }
        drop(folios);
    }

    /// Decides the fate of isolated inactive folios (see the module documentation); returns
    /// the frames freed.
    pub(crate) fn shrink_folio_list(
        &self,
        pool: &FramePool,
        owners: &dyn Owners,
        folios: Vec<FolioRef<'_>>,
        sc: &mut ScanControl,
    ) -> usize {
        let mut reclaimed = 0;
        let mut keep = Vec::with_capacity(folios.len());
        // Kept only because someone else holds them (locked, or referenced beyond the index):
        // the policy puts these back where reclaim does not come straight back to them.
        let mut rejected = Vec::new();
        let mut memo = OwnerMemo::default();
        // The evicted folios, freed together.
        let mut freed = pool.free_batch();
        for f in folios {
            let nr = f.nr_frames();
            let mut g = match f.try_lock_with(self.wait_policy) {
                Ok(g) => g,
                Err(f) => {
                    rejected.push(f);
                    continue;
                }
            };
            if g.mapping() == 0 {
                // Its owner removed it while we held it: it is no longer ours to put back.
                continue;
            }
            if g.is_unevictable() {
                keep.push(g.unlock());
                continue;
            }
            if g.is_anon() {
                match owners.shrink_anon(&mut g, true) {
                    AnonFate::Freed => {
                        reclaimed += nr;
                        drop(g);
                    }
                    fate => {
                        self.anon_keep(&g, fate);
                        keep.push(g.unlock());
                    }
                }
                continue;
            }
            if g.is_mapped() {
                // Some space maps it: unmap it everywhere first (the last unmap moves the
                // writes its frames recorded to DIRTY), unless it was used through a mapping.
                let fate = match owners.unmap_file(&mut g, true) {
                    MappedFate::Unmapped => None,
                    MappedFate::Activate => Some(AnonFate::Activate),
                    MappedFate::Keep => Some(AnonFate::Keep),
                    MappedFate::Unevictable => Some(AnonFate::Unevictable),
                };
                if let Some(fate) = fate {
                    self.anon_keep(&g, fate);
                    keep.push(g.unlock());
                    continue;
                }
            }
            let writeback = g.is_writeback();
            // A reference does not keep an unmapped file folio from being reclaimed.
            g.clear_referenced();
            if !writeback && g.is_wb_failed() {
                // Dirty and parked by its owner (its write-back failed too often: the flusher
                // does not write it): out of reclaim's way until the owner re-arms it. Only a
                // folio that left the unevictable list meanwhile (an munlock) gets here.
                self.sync_parked(pool, &g);
                keep.push(g.unlock());
                continue;
            }
            if writeback || g.is_dirty() {
                // The flusher writes it; when that ends it is rotated to the inactive tail.
                // Meanwhile it waits on the active list (a younger generation), out of
                // reclaim's way.
                g.set_reclaim();
                self.policy().park_for_writeback(&g);
                self.counters.add(Event::PgActivate, nr as u64);
                if writeback {
                    sc.nr_writeback += nr;
                } else {
                    sc.nr_dirty += nr;
                }
                keep.push(g.unlock());
                continue;
            }
            match owners.evict(
                &mut g,
                &mut |folio| self.workingset_eviction(folio),
                &mut memo,
            ) {
                Some(ticket) => {
                    reclaimed += nr;
                    g.free_frozen(ticket, &mut freed);
                }
                None => rejected.push(g.unlock()),
            }
        }
        drop(freed);
        // The owners the round kept go now, with no folio locked: a file whose last handle went
        // meanwhile is dropped here (its `Drop` locks its folios).
        drop(memo);
        self.putback(pool, keep);
        if !rejected.is_empty() {
            let mut g = self.lruvec.lock(pool);
            for f in &rejected {
                if f.mapping() != 0 && !f.is_lru() {
                    self.policy().link_rejected(&mut g, f);
                }
            }
        }
        drop(rejected);
        if reclaimed > 0 {
            self.counters.add(Event::PgSteal, reclaimed as u64);
        }
        reclaimed
    }

    /// Sets the flags that send a mapped folio reclaim keeps to the right list.
    fn anon_keep(&self, f: &Folio, fate: AnonFate) {
        match fate {
            AnonFate::Activate => {
                f.set_active();
                self.counters.add(Event::PgActivate, f.nr_frames() as u64);
            }
            // The owner has set the flag under the LRU lock, from the mlock count as it was
            // then (`Owners::shrink_anon`, `Owners::unmap_file`): a racing munlock's own update
            // comes after and wins.
            AnonFate::Unevictable => {}
            AnonFate::Keep | AnonFate::Freed => {}
        }
    }

    /// Reclaims one folio now, whatever list it is on (the kernel's `reclaim_pages`, behind
    /// `MADV_PAGEOUT`): takes it off its list, locks it (waiting) and hands it to its owner
    /// without looking at references. Only anonymous folios; returns whether it was freed.
    #[doc(alias = "reclaim_pages")]
    pub(crate) fn reclaim_anon_folio(
        &self,
        pool: &FramePool,
        owners: &dyn Owners,
        folio: FolioRef<'_>,
    ) -> bool {
        if !self.policy().keeps_lists() || !folio.is_anon() {
            return false;
        }
        {
            let mut g = self.lruvec.lock(pool);
            if !folio.is_lru() {
                // Waiting in a batch, or isolated by reclaim already: not ours to take.
                return false;
            }
            g.del(&folio);
        }
        let mut g = folio.lock_with(self.wait_policy);
        if g.mapping() == 0 {
            return false;
        }
        self.counters.add(Event::PgScan, g.nr_frames() as u64);
        let fate = owners.shrink_anon(&mut g, false);
        if fate == AnonFate::Freed {
            self.counters.add(Event::PgSteal, g.nr_frames() as u64);
            drop(g);
            return true;
        }
        self.anon_keep(&g, fate);
        self.putback(pool, vec![g.unlock()]);
        false
    }

    /// Makes `folio`'s list follow whether a space maps it locked: `locked` says whether its
    /// mlock count is above zero *now* (read by the caller under this function's lock, through
    /// `locked`), so that concurrent lockers and unlockers end with the right list whatever
    /// order they take the lock in. The kernel's `mlock_folio` / `munlock_folio`.
    #[doc(alias = "mlock_folio")]
    #[doc(alias = "munlock_folio")]
    pub(crate) fn sync_unevictable(
        &self,
        pool: &FramePool,
        folio: &Folio,
        locked: &dyn Fn() -> bool,
    ) {
        let mut g = self.lruvec.lock(pool);
        let want = locked();
        if folio.is_unevictable() == want {
            return;
        }
        let linked = folio.is_lru();
        if linked {
            g.del(folio);
        }
        if want {
            folio.set_unevictable();
            folio.clear_active();
        } else {
            folio.clear_unevictable();
        }
        if linked {
            g.add(folio, false);
        }
    }

    /// Puts a file folio on the unevictable list or takes it off as [`unevictable`] says now:
    /// its owner parks a dirty folio whose write-back keeps failing (sets `WB_FAILED`) there —
    /// reclaim cannot free it (rule 6: dirty data is never dropped) and the flusher will not
    /// write it, so scanning it again would only cost reclaim its time and wake the flusher
    /// for nothing — and calls this again when something re-arms it (`WB_FAILED` cleared).
    pub(crate) fn sync_parked(&self, pool: &FramePool, folio: &Folio) {
        self.sync_unevictable(pool, folio, &|| unevictable(folio.flags()));
    }

    /// One round of reclaim wanting `nr_to_reclaim` frames (see the module documentation);
    /// returns the frames freed. The kernel's `do_try_to_free_pages` / one pass of
    /// `balance_pgdat`.
    #[doc(alias = "do_try_to_free_pages")]
    pub(crate) fn try_to_free_pages(
        &self,
        pool: &FramePool,
        owners: &dyn Owners,
        nr_to_reclaim: usize,
    ) -> usize {
        // Timed by the monotonic clock, read without a system call: a round does not sleep of
        // its own accord, so this is its CPU time plus any preemption or wait for a lock held
        // by another thread (see `Event::ReclaimNs`). The thread's CPU clock is a system call,
        // and two of them a round were a tenth of a small cache's direct reclaim.
        let start = Instant::now();
        let freed = self.do_try_to_free_pages(pool, owners, nr_to_reclaim);
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.counters.add(Event::ReclaimNs, ns);
        freed
    }

    fn do_try_to_free_pages(
        &self,
        pool: &FramePool,
        owners: &dyn Owners,
        nr_to_reclaim: usize,
    ) -> usize {
        let freed = self.policy().shrink(self, pool, owners, nr_to_reclaim);
        self.shrink_shadow_nodes(owners, SHADOW_BATCH);
        freed
    }

    /// Whether background reclaim has done its job for an allocation of `order`: free frames
    /// above the high watermark, and a free block of that order (or, where the lists hold no
    /// folios that large, twice its size freed beyond the watermark).
    pub(crate) fn balanced(&self, pool: &FramePool, order: u32) -> bool {
        let free = pool.free_frames_hint();
        let high = self.wmark.high_for(order);
        free >= high
            && (order == 0 || pool.has_free_block(order) || free >= high + (1usize << order))
    }

    /// Background reclaim's work after a wake-up: rounds of reclaim until [`Vmscan::balanced`],
    /// or until a round frees nothing (everything is pinned, locked or waiting for write-back),
    /// or `stop()` says the cache is going away. Returns whether it got balanced. The kernel's
    /// `balance_pgdat`.
    #[doc(alias = "balance_pgdat")]
    pub(crate) fn balance(
        &self,
        pool: &FramePool,
        owners: &dyn Owners,
        order: u32,
        stop: &dyn Fn() -> bool,
    ) -> bool {
        loop {
            if self.balanced(pool, order) {
                return true;
            }
            if stop() {
                return false;
            }
            let free = pool.free_frames_hint();
            let want = (self.wmark.high_for(order) + (1usize << order))
                .saturating_sub(free)
                .max(SWAP_CLUSTER_MAX);
            let got = self.try_to_free_pages(pool, owners, want);
            self.kswapd.note_round();
            if got == 0 {
                return self.balanced(pool, order);
            }
        }
    }

    /// Allocates a folio of `order`, or a smaller one when no block that large can be had
    /// (readahead and writes cut their work to what they get). Above the min watermark it just
    /// takes what is free (waking background reclaim below the low one); below it, or when
    /// nothing is free, it reclaims in this thread. With `must` false it gives up (`None`)
    /// after one round of reclaim; with `must` true it keeps trying until the allocation
    /// timeout, when every frame stayed pinned, and then reports [`NoMemory`].
    pub(crate) fn alloc<'p>(
        &self,
        pool: &'p FramePool,
        owners: &dyn Owners,
        order: u32,
        must: bool,
    ) -> Result<Option<FolioRef<'p>>, NoMemory> {
        let fast = self.policy().alloc_fast(self, pool, order);
        if let Some(f) = fast {
            self.counters.count(Event::FolioAllocs);
            return Ok(Some(f));
        }
        let start = Instant::now();
        // Background reclaim is at work: give it a few rounds before reclaiming here, as the
        // kernel throttles direct reclaimers while kswapd makes progress
        // (`throttle_direct_reclaim`). A reader that misses all the time is back here within
        // every round: it first watches for the round's end a short while, which saves the
        // sleep and the wake-up (two thread switches) that would otherwise cost every round.
        while self.kswapd.is_awake() && start.elapsed() < THROTTLE {
            if !self.kswapd.spin_for_round(SPIN_LOOKS) {
                self.kswapd.wait_round(THROTTLE / 4);
            }
            if let Some(f) = self.alloc_watermark(pool, order) {
                self.counters.count(Event::FolioAllocs);
                return Ok(Some(f));
            }
        }
        let mut idle_rounds = 0u32;
        slow_path!(
            debug,
            "direct reclaim",
            order = order,
            free_frames = pool.free_frames()
        );
        loop {
            self.counters.count(Event::DirectReclaims);
            let want = (2usize << order).max(self.direct_batch);
            let freed = self.try_to_free_pages(pool, owners, want);
            for o in (0..=order).rev() {
                if let Some(f) = pool.alloc(o) {
                    self.counters.count(Event::FolioAllocs);
                    return Ok(Some(f));
                }
            }
            if !must {
                return Ok(None);
            }
            if start.elapsed() > self.alloc_timeout {
                slow_path!(
                    warn,
                    "allocation failed: no reclaimable memory",
                    order = order,
                    waited_ms = start.elapsed().as_millis()
                );
                return Err(NoMemory);
            }
            if freed == 0 {
                // Everything is pinned, locked or waiting for write-back right now: let the
                // holders and the flusher run.
                idle_rounds += 1;
                if idle_rounds < 16 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }

    /// Whether the free frames are below the low watermark of order-0 allocations (which
    /// then wake background reclaim).
    pub(crate) fn below_low(&self, pool: &FramePool) -> bool {
        pool.free_frames_hint() < self.wmark.low_for(0)
    }

    /// The allocation fast path of the list policies: anything free above the min watermark,
    /// largest order first. Wakes background reclaim below the low watermark, and when no block
    /// of the order asked for was free (so that it frees one: the tail of a stream's list is
    /// made of large folios).
    #[inline]
    pub(crate) fn alloc_watermark<'p>(
        &self,
        pool: &'p FramePool,
        order: u32,
    ) -> Option<FolioRef<'p>> {
        let free = pool.free_frames_hint();
        if self.background && free < self.wmark.low_for(order) {
            self.kswapd.wake(order, &self.counters);
        }
        if free <= self.wmark.min {
            return None;
        }
        if let Some(f) = pool.alloc(order) {
            return Some(f);
        }
        if order > 0 && self.background {
            self.kswapd.wake(order, &self.counters);
        }
        (0..order).rev().find_map(|o| pool.alloc(o))
    }
}
