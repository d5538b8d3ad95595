//! The multi-generational LRU, after the kernel's `lru_gen` (mm/vmscan.c, mm/workingset.c,
//! Documentation/mm/multigen_lru.rst): generations instead of two lists, tiers by how often a
//! folio was used through file descriptors, and a feedback loop on refaults that decides which
//! tiers reclaim protects — and, quire's own addition, *loop protection*: admission by
//! non-resident history, which keeps a resident share of a loop larger than the cache.
//!
//! # Generations
//!
//! Each type (anonymous, file) has generations numbered by a sequence: `min_seq[type]` is the
//! oldest, `max_seq` (shared) the youngest; between 2 ([`MIN_NR_GENS`]) and 4 ([`MAX_NR_GENS`])
//! are live at once. Generation `seq` lives on the list `seq % MAX_NR_GENS` of its type, and a
//! folio's flag word names its list (bits 21–23: generation + 1, or [`PROBATION_GEN`] + 1 and
//! [`FRESH_GEN`] + 1 for the two parts of its type's probation list), so that unlinking finds
//! the list. Sequence numbers and
//! generation bits change only under the LRU lock.
//!
//! | event | what happens | kernel |
//! |---|---|---|
//! | a new folio is added | to `min_seq + 1` (to `min_seq` while only two generations live); an anonymous folio, or one dirty and waiting for write-back, to `max_seq - 1`; one whose refault found its tier protected to `max_seq` | `lru_gen_add_folio` |
//! | a use through a file descriptor | the first sets `REFERENCED`, each later one counts in the refs bits (up to 3, then `WORKINGSET`): one flag update, no lock, no list move, nothing written once all are set | `folio_inc_refs` |
//! | a use through a mapping | seen by reclaim when it unmaps the folio: moved to `max_seq` | `lru_gen_look_around` |
//! | aging | when only two generations are live, or the youngest holds more than a quarter of the type: `max_seq + 1`, a new empty youngest generation (a type already at four first folds its oldest into the next) | `inc_max_seq` |
//! | eviction | from the tail of `min_seq`; when its list is empty and more than two generations live, `min_seq + 1` | `evict_folios`, `inc_min_seq` |
//! | dirty or under write-back at the oldest tail | `RECLAIM` set, moved to `min_seq + 1`, the flusher woken; when its write-back ends, rotated to the oldest tail | `sort_folio`, `folio_rotate_reclaimable` |
//!
//! # Tiers and the refault feedback
//!
//! A folio's *tier* is `ceil(log2(n + 1))` of its uses beyond the first, `n` = refs + (1 if
//! `WORKINGSET`): tier 0 used once, tier 1 twice, tier 2 three or four times, tier 3 five times.
//! Per type and tier, reclaim counts the folios it *evicted*, the ones it *protected* (by tier
//! or saturated use bits; not the loop protection's claims, below), and the
//! *refaults* — a folio read again over a shadow whose refault distance is within the type's
//! resident frames, charged to the tier the shadow recorded. The feedback loop (the kernel's PID
//! controller: a proportional term over a decaying history — at each `min_seq` increment the
//! averages become the mean of the old average and the period's counts) compares each tier's
//! refault rate with tier 0's: the tiers from the first one that refaults more than twice as
//! often as tier 0 (the kernel's gains, 1:2) upwards are *protected*. A folio at the oldest tail
//! that is in a protected tier, or has all its use bits set (the kernel's 6.14 rule), moves to
//! `min_seq + 1` instead of being evicted, its count started over with `WORKINGSET` set (one use
//! on record: it was in the working set): it must go on being used to stay.
//!
//! # Shadows
//!
//! An evicted folio leaves `(age, n, workingset)` in its slot (`workingset`): the
//! non-resident age, as the classic LRU's, its uses beyond the first and its `WORKINGSET` bit.
//! A refault within the type's resident frames restores the uses, so the folio comes back in the
//! tier it left, and if that tier is protected now it goes to the youngest generation.
//!
//! # Loop protection (admission by non-resident history)
//!
//! A loop over more pages than the cache holds is LRU's worst case: every folio is evicted just
//! before its next use, and generations, tiers and refault distances do not change that (every
//! folio is used once per pass; every refault is "recent"). The optimum keeps a fixed share of
//! the loop resident. LIRS and CLOCK-Pro get there by letting a page in only when its history
//! says it deserves a place more than a resident; quire asks, at the LRU lock when a folio is
//! added, with what the shadows and the flags know:
//!
//! | the folio | its claim | where it goes |
//! |---|---|---|
//! | a first read while the cache is still filling (reclaim has not run since a quarter of the frames were last free) | none needed: there is room | generations (normal), as LIRS fills its resident set |
//! | a first read once the cache is full | none: no use seen | its type's *probation* list; the hand (below) takes one step |
//! | a refault beyond the type's resident frames that had been used again before its eviction (`n` ≥ 1) | a reuse, though longer than the cache (a working set coming back) | generations (normal) |
//! | a refault beyond the type's resident frames with no reuse recorded (`n` = 0) | none: its shadow tells nothing a first read would not | as a first read: probation once the cache is full |
//! | a refault within reach that had been used again before its eviction (`n` ≥ 1, `WORKINGSET` included), or whose tier is protected | a reuse shorter than the cache | generations (normal, or youngest) |
//! | a refault within reach with no reuse recorded (`n` = 0) | a *candidate*: it competes with the resident reclaim would take next, the tail of the oldest non-empty generation | generations if that resident is idle; else probation — the resident, used since reclaim last looked, keeps its place, its `REFERENCED` cleared and moved a generation up (a clock hand that takes one step per folio sent to probation, candidate or first read, so residents that stop being used lose their claim) |
//!
//! Reclaim takes a type's probation list first while it holds more than its *target*, the
//! frames that let a folio on probation stay long enough for a reuse to be seen — and also below
//! it once a batch's worth of the oldest generation in a row turned out protected. The target
//! adapts to refaults, as CLOCK-Pro's cold allocation and ARC's `p` do (shadows say whether a
//! folio was evicted from probation): a folio evicted from probation that comes back within
//! twice the target would have been kept by a probation a few times as long, so the target
//! grows; one evicted from the generations that comes back within reach would have been kept
//! had the generations had more room, so it shrinks (by an eighth of itself either way, at
//! least the folio's size, between its floor and 1/2 of the budget: a large cache evicts too
//! little over a trace for steps of one frame to get anywhere). The target starts at its
//! floor, room for two of the cache's largest folios (a stream's folio being read and the one
//! read ahead), at most 1/16 of the budget and at least
//! 1/256 of it: whatever probation holds beyond it, the generations cannot hold, and a loop's
//! generations keep the size they had when the cache first filled.
//!
//! Probation has a *fresh* part, a list of its own: the folios that joined probation last, 1%
//! of the budget (`GenState::fresh_target`). Uses of a folio while it is fresh are
//! *correlated references* (LRU-K's term): a burst right after the read — a record fetched and
//! then updated, a page read in several small pieces — is one use of the page, not a reuse.
//! When the folio moves on to the rest of probation its use count starts over (its
//! `REFERENCED` stays: it was read). Reclaim takes from the rest; the fresh part moves on as
//! folios join probation, or one at a time when the rest is empty. On a probation folio's
//! turn: one used again since it left the fresh part joins the generations (`min_seq + 1`); one
//! not used at all yet (readahead its reader has not reached)
//! gets one more turn, back at probation's head (`PROBATION` marks it as having had it) — in
//! the generations, used once, it would take a resident's place — and once a round of
//! probation's older part found only such folios (read ahead in windows larger than
//! probation), that round of reclaim takes from the generations (should they give nothing, probation goes first
//! again); the rest, and such a folio still unused on its next turn (a reader slower than that,
//! or gone), are evicted, marked in their shadows as evicted from probation — except one still
//! being read (locked), which reclaim cannot evict and puts back into the generations, past the
//! admission test: a path the loop's share measurably depends on (leaving such folios on
//! probation took the order-0 loop from 0.791 to 0.744; docs/journal/). With the generations
//! empty, reclaim takes from probation whatever its size.
//!
//! *The claim*: reclaim also keeps a subset of what the hand keeps — a folio at the oldest tail
//! that has a reuse on record (`n` ≥ 1) and was used since the hand or reclaim last looked
//! (`REFERENCED`) moves up a generation as a protected tier's folio does (its count started
//! over, `WORKINGSET` set, `REFERENCED` cleared), so it must be used again to stay; a folio used
//! only once, however recently, is not kept. (The `n` ≥ 1 test does not keep a loop's
//! residents out: the hand passes a resident less than once per pass, so a second read gives it
//! a reuse, and the `WORKINGSET` a claim sets keeps one on record.) The feedback does not count
//! claims as protected: it measures the tiers' own protection. No claim is made where the
//! generations are taken from only because probation holds readahead waiting for its reader:
//! there the oldest goes, in use or not, since looking for an idle one would sweep every
//! resident's mark away in one round (with order-0 folios a loop's share then collapsed in
//! about one run in three, 0.38–0.54 instead of 0.744). Without the claim, eviction from the
//! oldest generation is first in, first out for folios used two to four times (the feedback
//! rarely protects tiers 1–2 on a Zipf workload: their refault rate stays under twice tier
//! 0's), and the hand's second chance reaches only the resident it passes on each miss.
//!
//! On a loop the residents are all used once per pass, so every refault is turned away and the
//! resident share stays (after the first pass a loop has no first reads: the hand takes one step
//! per miss and sweeps the residents once per 1/(L/C − 1) passes, so this holds for loops up to
//! twice the cache); a stream's first reads pass through probation, moving the hand one resident
//! per folio, which a resident in use survives (it is used again before the hand is back); an
//! old working set that comes back is let in at once where its folios had been used more than
//! once, else once the hand has found the residents idle. A new working set never seen before
//! has its first pass on probation, but that pass moves the hand over the old set's residents,
//! so its second pass finds them idle and is let in (the hand's steps on first reads are what
//! make this one pass rather than two: with only candidates moving it, the second pass's
//! refaults would be turned away, one per resident still marked from the old set's last pass).
//! Switched off (`CacheConfig::loop_protection`), every folio is added normally. What each part
//! contributes is measured by the `evict` suite's `multigen` (off) and `multigen-loop` (on)
//! variants (docs/journal/).

use std::sync::atomic::{AtomicU64, Ordering};

use super::lru::{gen_list, list_of, LruGuard, NR_GEN_LISTS};
#[cfg(any(feature = "bench-internals", loom))]
use super::lru::{list_name, NR_LISTS};
use super::policy::{AccessRule, Policy};
use super::reclaim::{ScanControl, SWAP_CLUSTER_MAX};
use super::{Lru, Owners, VmConfig, Vmscan, NR_LRU_LISTS};
use crate::mem::folio::{
    Folio, FolioRef, ACTIVE, ANON, DIRTY, LOCKED, MAX_REFS, PROBATION, RECLAIM, REFAULTED,
    REFERENCED, REFS_MASK, REFS_SHIFT, SWAPCACHE, WB_FAILED, WORKINGSET, WRITEBACK,
};
use crate::mem::pool::FramePool;
use crate::stats::Event;

/// Generations live per type at most (the kernel's `MAX_NR_GENS`).
pub const MAX_NR_GENS: usize = 4;
/// Generations live per type at least (the kernel's `MIN_NR_GENS`).
pub const MIN_NR_GENS: u64 = 2;
/// Tiers (the kernel's `MAX_NR_TIERS`).
pub const MAX_NR_TIERS: usize = 4;
/// Below this many refaults a tier's rate is not trusted (the kernel's `MIN_LRU_BATCH`).
const MIN_LRU_BATCH: u64 = 64;
/// The generation bits' value of a folio on its type's probation list.
pub const PROBATION_GEN: usize = MAX_NR_GENS;
/// The generation bits' value of a folio on the fresh part of its type's probation list (see
/// `GenState::fresh_target`).
pub const FRESH_GEN: usize = MAX_NR_GENS + 1;
/// The anonymous type.
pub const ANON_TYPE: usize = 0;
/// The file type.
pub const FILE_TYPE: usize = 1;

/// The type of a folio with these flags.
#[inline]
pub(crate) fn type_of(flags: u64) -> usize {
    if flags & ANON != 0 {
        ANON_TYPE
    } else {
        FILE_TYPE
    }
}

/// The uses beyond the first that `flags` record: refs, plus one for `WORKINGSET` (0..=4).
#[inline]
pub(crate) fn uses_of(flags: u64) -> u64 {
    ((flags & REFS_MASK) >> REFS_SHIFT) + u64::from(flags & WORKINGSET != 0)
}

/// The tier of `n` uses beyond the first: `ceil(log2(n + 1))` (the kernel's
/// `lru_tier_from_refs`).
#[inline]
pub fn tier_of_uses(n: u64) -> usize {
    // ceil(log2(n + 1)) is the bit length of n.
    ((64 - n.leading_zeros()) as usize).min(MAX_NR_TIERS - 1)
}

/// The sequence numbers, under the LRU lock (in [`super::lru::Lists`]).
#[derive(Debug)]
pub(crate) struct GenState {
    /// The youngest generation.
    pub max_seq: u64,
    /// The oldest generation of each type.
    pub min_seq: [u64; 2],
    /// Candidates (recent refaults) the loop protection turned away to probation.
    pub rejected: u64,
    /// Candidates it let in.
    pub admitted: u64,
    /// The cache's frames.
    pub frames: usize,
    /// Reclaim has run since a quarter of the frames were last free: the cache is full, and
    /// first reads go to probation.
    pub full: bool,
}

impl GenState {
    pub(crate) fn new(frames: usize) -> GenState {
        GenState {
            frames,
            full: false,
            max_seq: MIN_NR_GENS - 1,
            min_seq: [0; 2],
            rejected: 0,
            admitted: 0,
        }
    }

    /// How many generations of `type_` are live.
    pub(crate) fn nr_gens(&self, type_: usize) -> u64 {
        self.max_seq - self.min_seq[type_] + 1
    }

    /// The frames the fresh part of a type's probation list holds: the folios that joined
    /// probation last, 1% of the budget. Uses of a folio while it is fresh are *correlated
    /// references* (LRU-K's term: a burst of accesses right after a read — a record fetched and
    /// then updated, a page read in several small pieces), one use of the page, not a reuse:
    /// when the folio moves on to the rest of probation its use count starts over, and only a
    /// use after that takes it into the generations. Why 1%: on the real traces of the tuning
    /// set (`quire bench evict --trace`, no readahead; the report is in docs/BENCHMARKS.md) an
    /// application object cache's trace (cache2k's `orm-night`) misses 11.5% less than exact
    /// LRU at a cache of 10% of its pages with it and 2.2% more without a fresh part; half and
    /// twice this size measured within 0.4 points of it in the mean at every size, four times
    /// it lower at 1% and 40%.
    pub(crate) fn fresh_target(&self) -> usize {
        self.frames / 100
    }

    /// The generation (list number within the type) a folio that has none goes to; clears
    /// `ACTIVE`, which only says where it goes. The kernel's `lru_gen_add_folio`.
    ///
    /// The kernel puts a folio with nothing to say for it (not active, clean, not anonymous)
    /// in the second oldest generation, so that it gets a generation's time before reclaim
    /// reaches it. With the loop protection, such a folio reaching the generations is one read
    /// while the cache was still filling, an admitted refault or one reclaim put back — none
    /// of them used since it came in — and it goes to the *oldest* generation: it stays only if
    /// it is used again before reclaim reaches it (its tier or its claim then keeps it), and
    /// the residents that were used keep a generation's lead over it. On the real traces of
    /// the tuning set (`quire bench evict --trace`, no readahead) this took the mean miss-ratio
    /// reduction against exact LRU from +5.1% to +6.2% at caches of 10% of the trace's pages
    /// and from +7.6% to +8.8% at 40%, with no cell left more than 5% worse than exact LRU
    /// (one at each size before), the 1% caches unchanged and the `evict` suite's zipf, loop,
    /// switch and scan cases within their run-to-run spread.
    #[doc(alias = "lru_gen_add_folio")]
    pub(crate) fn gen_for_add(&self, folio: &Folio, loop_protection: bool) -> usize {
        let flags = folio.flags();
        let type_ = type_of(flags);
        let min = self.min_seq[type_];
        let seq = if flags & ACTIVE != 0 {
            folio.clear_active();
            self.max_seq
        } else if (type_ == ANON_TYPE && flags & SWAPCACHE == 0)
            || (flags & RECLAIM != 0 && flags & (DIRTY | WRITEBACK) != 0)
        {
            self.max_seq - 1
        } else if loop_protection || min + MIN_NR_GENS > self.max_seq {
            min
        } else {
            min + 1
        };
        (seq % MAX_NR_GENS as u64) as usize
    }
}

/// How far, in multiples of the probation target, a refault of a folio evicted from probation
/// counts as evidence that probation is too short (see [`Feedback::adapt_probation`]).
const PROBATION_REACH: u64 = 2;

/// The probation target moves by this fraction of itself at each refault that adapts it.
const PROBATION_STEP_DIV: u64 = 8;

/// The refault feedback and the loop protection's counters, lock-free (refaults are counted
/// outside the LRU lock). Per type and tier.
#[derive(Debug, Default)]
pub(crate) struct Feedback {
    refaulted: [[AtomicU64; MAX_NR_TIERS]; 2],
    evicted: [[AtomicU64; MAX_NR_TIERS]; 2],
    protected: [[AtomicU64; MAX_NR_TIERS]; 2],
    avg_refaulted: [[AtomicU64; MAX_NR_TIERS]; 2],
    avg_total: [[AtomicU64; MAX_NR_TIERS]; 2],
    /// How many frames the file probation list keeps before reclaim takes from it first
    /// (adapted by refaults: see [`Feedback::adapt_probation`]).
    probation_target: AtomicU64,
    /// The target's bounds: its floor (see [`Feedback::new`]) and 1/2 of the budget's frames.
    probation_bounds: (u64, u64),
    /// `max_seq` and `min_seq` as last set (for lock-free readers).
    max_seq: AtomicU64,
    min_seq: [AtomicU64; 2],
}

/// One tier's position for the controller (the kernel's `ctrl_pos`).
#[derive(Clone, Copy, Debug)]
struct Pos {
    refaulted: u64,
    total: u64,
    gain: u64,
}

/// Whether `pv` refaults no more than the set point `sp` (scaled by their gains): such a tier
/// is not worth protecting. The kernel's `positive_ctrl_err`.
fn positive_ctrl_err(sp: Pos, pv: Pos) -> bool {
    pv.refaulted < MIN_LRU_BATCH
        || pv.refaulted * (sp.total + MIN_LRU_BATCH) * sp.gain
            <= (sp.refaulted + 1) * pv.total * pv.gain
}

/// The multi-generational LRU's state as `stats()` shows it (the kernel's debugfs `lru_gen`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LruGenStats {
    /// The youngest generation.
    pub max_seq: u64,
    /// The oldest generation of each type (anonymous, file).
    pub min_seq: [u64; 2],
    /// Every live generation, oldest first: `(seq, anonymous frames, file frames)`.
    pub gens: Vec<(u64, usize, usize)>,
    /// Frames on each type's probation list (loop protection).
    pub probation: [usize; 2],
    /// Per type and tier: refaults counted (average plus this period).
    pub refaulted: [[u64; MAX_NR_TIERS]; 2],
    /// Per type and tier: folios evicted (average plus this period, with the protected).
    pub total: [[u64; MAX_NR_TIERS]; 2],
    /// Per type: the tiers above this one are protected.
    pub tier_idx: [usize; 2],
    /// The frames the file probation list keeps before reclaim takes from it first.
    pub probation_target: usize,
    /// Recent refaults the loop protection turned away to probation.
    pub rejected: u64,
    /// Recent refaults the loop protection let in (the oldest resident was idle).
    pub admitted: u64,
}

impl Feedback {
    /// The feedback of a cache of `frames` frames whose largest folio has `largest_folio`
    /// frames. The probation target starts at its floor: room for two of the largest folios
    /// (a stream's folio being read and the one read ahead of it), but no more than 1/16 of
    /// the budget (where the largest folios are that big, a budget of a few of them) and no
    /// less than 1/256; it grows from there only on evidence, a folio evicted from probation
    /// coming back within twice its length ([`Feedback::adapt_probation`]). What probation holds
    /// beyond the floor is taken from the generations: with a start of 1/16, a loop's
    /// generations kept the size they had when the cache first filled and its share stopped
    /// at 0.744 with order-0 folios (0.791 from the floor); without the 1/16 cap, a 16 MiB
    /// cache of 2 MiB folios gave probation a quarter of itself and its loop fell from 0.30 to
    /// 0.08, its zipf by 0.011 (the measurements are in docs/journal/).
    pub(crate) fn new(frames: usize, largest_folio: usize) -> Feedback {
        let frames = frames as u64;
        let hi = (frames / 2).max(1);
        let floor = (2 * largest_folio as u64)
            .min(frames / 16)
            .max(frames / 256)
            .clamp(1, hi);
        Feedback {
            probation_target: AtomicU64::new(floor),
            probation_bounds: (floor, hi),
            ..Feedback::default()
        }
    }

    /// The probation target now (frames).
    pub(crate) fn probation_target(&self) -> usize {
        self.probation_target.load(Ordering::Relaxed) as usize
    }

    /// Adapts the probation target to a refault of `nr` frames at `distance` (the cold
    /// allocation of CLOCK-Pro, the `p` of ARC): a folio evicted from probation that comes back
    /// within twice the target (and within the type's resident frames, or the target itself)
    /// would have been kept by a probation a few times as long — the target grows; a folio
    /// evicted from the generations that comes back within the type's resident frames would
    /// have been kept had the generations had more room — it shrinks.
    ///
    /// Each step is an eighth of the target (at least the folio's frames), both ways, so that
    /// the target finds its level in a number of refaults that does not grow with the budget:
    /// a large cache evicts little (a cache of 40% of a trace's pages may evict only a few times
    /// its own size over the whole trace), and one frame per refault, within the target's
    /// length only, left its recency-friendly traces with a probation of a few dozen frames and
    /// 5–11% more misses than exact LRU. Steps of the same size both ways keep it from running
    /// away: growing by an eighth and shrinking by one frame put the tuning set's 10% caches
    /// 6% below exact LRU's miss ratio. What each rule measured is in docs/bench/suites.md
    /// (evict).
    fn adapt_probation(&self, from_probation: bool, distance: u64, resident: u64, nr: u64) {
        let t = &self.probation_target;
        let (lo, hi) = self.probation_bounds;
        let _ = t.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            let step = nr.max(v / PROBATION_STEP_DIV);
            if from_probation && distance <= (PROBATION_REACH * v).min(resident.max(v)) {
                Some((v + step).min(hi))
            } else if !from_probation && distance <= resident {
                Some(v.saturating_sub(step).max(lo))
            } else {
                None
            }
        });
    }

    fn pos(&self, type_: usize, tier: usize, gain: u64) -> Pos {
        let r = Ordering::Relaxed;
        let mut total = self.avg_total[type_][tier].load(r) + self.evicted[type_][tier].load(r);
        total += self.protected[type_][tier].load(r);
        Pos {
            refaulted: self.avg_refaulted[type_][tier].load(r)
                + self.refaulted[type_][tier].load(r),
            total,
            gain,
        }
    }

    /// The highest tier not protected: tiers above it are (the kernel's `get_tier_idx`).
    pub(crate) fn tier_idx(&self, type_: usize) -> usize {
        // A margin for fluctuations: a tier is protected once it refaults more than twice as
        // often as tier 0 (the kernel's gains, 1:2).
        let sp = self.pos(type_, 0, 1);
        for tier in 1..MAX_NR_TIERS {
            let pv = self.pos(type_, tier, 2);
            if !positive_ctrl_err(sp, pv) {
                return tier - 1;
            }
        }
        MAX_NR_TIERS - 1
    }

    /// A new period after `min_seq` of `type_` advanced: the averages take in the period's
    /// counts, which start again from 0 (the kernel's `reset_ctrl_pos` with carryover).
    fn reset(&self, type_: usize) {
        let r = Ordering::Relaxed;
        for tier in 0..MAX_NR_TIERS {
            let refaulted = self.refaulted[type_][tier].swap(0, r);
            let total =
                self.evicted[type_][tier].swap(0, r) + self.protected[type_][tier].swap(0, r);
            let avg = &self.avg_refaulted[type_][tier];
            avg.store((avg.load(r) + refaulted) / 2, r);
            let avg = &self.avg_total[type_][tier];
            avg.store((avg.load(r) + total) / 2, r);
        }
    }

    fn publish(&self, g: &GenState) {
        self.max_seq.store(g.max_seq, Ordering::Relaxed);
        for t in 0..2 {
            self.min_seq[t].store(g.min_seq[t], Ordering::Relaxed);
        }
    }

    /// `max_seq` as last set.
    pub(crate) fn max_seq(&self) -> u64 {
        self.max_seq.load(Ordering::Relaxed)
    }
}

/// The multi-generational LRU as a reclaim policy (`"lru-gen"`): its refault feedback and
/// whether the loop protection is on. Its sequence numbers live with the lists, under the LRU
/// lock ([`GenState`]).
#[derive(Debug)]
pub(crate) struct MultiGen {
    /// The refault feedback and the loop protection's probation target.
    feedback: Feedback,
    /// Loop protection's adaptive insertion.
    loop_protection: bool,
}

impl MultiGen {
    /// The policy's state for a cache set up as `c`.
    pub(crate) fn boxed(c: &VmConfig) -> Box<dyn Policy> {
        Box::new(MultiGen {
            feedback: Feedback::new(c.frames, c.largest_folio),
            loop_protection: c.loop_protection,
        })
    }

    /// The loop protection's admission test for a candidate (a recent refault, `PROBATION` set
    /// by [`MultiGen::lru_gen_refault`]) being added under the LRU lock: whether it goes to
    /// probation. One step of the hand ([`MultiGen::lru_gen_hand`]): the resident reclaim would
    /// take next, used since the hand last passed it, keeps its place and the candidate waits
    /// on probation; idle, the candidate is added normally.
    pub(crate) fn lru_gen_admit(g: &mut LruGuard<'_>, folio: &Folio) -> bool {
        let in_use = Self::lru_gen_hand(g, type_of(folio.flags()));
        if in_use {
            g.lists.gen.rejected += 1;
        } else {
            g.lists.gen.admitted += 1;
        }
        in_use
    }

    /// One step of the admission hand over the residents of `type_`, taken for every folio
    /// sent to probation or tested for it: looks at the resident reclaim would take next, the
    /// tail of the oldest generation holding any. Used since the hand last passed it
    /// (`REFERENCED`), it keeps its place — its mark cleared, moved a generation up (or to the
    /// head of the youngest) — and the step returns `true`; idle, or with no resident, `false`.
    pub(crate) fn lru_gen_hand(g: &mut LruGuard<'_>, type_: usize) -> bool {
        let (min, max) = (g.lists.gen.min_seq[type_], g.lists.gen.max_seq);
        let oldest = (min..=max).find_map(|seq| {
            g.tail_of(gen_list(type_, (seq % MAX_NR_GENS as u64) as usize))
                .map(|v| (seq, v))
        });
        let Some((seq, v)) = oldest.filter(|(_, v)| v.clear_referenced()) else {
            return false;
        };
        let to = (seq.min(max - 1) + 1) % MAX_NR_GENS as u64;
        g.move_to_gen(v, to as usize, false);
        true
    }

    /// Moves the oldest fresh folio of `type_` on to the head of the rest of its probation
    /// list, its uses while fresh forgotten (correlated references: see
    /// `GenState::fresh_target`). Its `REFERENCED` stays: it says the folio was read at all,
    /// which tells a read folio from readahead not yet reached.
    fn age_fresh(g: &mut LruGuard<'_>, type_: usize) {
        let Some(f) = g.tail_of(gen_list(type_, FRESH_GEN)) else {
            return;
        };
        // (Fresh folios joined probation with no use on record: a first read, or a refault
        // whose shadow had none; `WORKINGSET` and the refs bits are theirs from since then.)
        g.unlink(f);
        f.set_gen_bits_forgetting(PROBATION_GEN as u64 + 1, WORKINGSET);
        g.link(f, gen_list(type_, PROBATION_GEN), false);
    }

    /// The shadow to leave for `folio`, evicted now: the age, its uses beyond the first and
    /// `WORKINGSET`; counts the eviction for its tier. The kernel's `lru_gen_eviction`.
    fn lru_gen_eviction(&self, vm: &Vmscan, folio: &Folio) -> u64 {
        let flags = folio.flags();
        let nr = folio.nr_frames() as u64;
        let n = uses_of(flags);
        self.feedback.evicted[type_of(flags)][tier_of_uses(n)].fetch_add(nr, Ordering::Relaxed);
        let age = vm.nonresident_age.fetch_add(nr, Ordering::Relaxed);
        vm.counters.add(Event::Evictions, nr);
        super::GenShadow {
            age,
            uses: n,
            workingset: flags & WORKINGSET != 0,
            probation: flags & PROBATION != 0,
        }
        .pack()
    }

    /// `folio`, not yet on any list, is read in over `shadow`: counts the refault for the tier
    /// it was evicted from if its refault distance is within the type's resident frames,
    /// restores its uses, sends it to the youngest generation if that tier is protected now.
    /// With the loop protection it also adapts the probation target, and marks how the folio
    /// is to be added: `REFAULTED` unless its refault is beyond reach with no reuse on record
    /// (then it is added as a first read), `PROBATION` as well for a candidate of the admission
    /// test (within reach, no reuse on record). The kernel's `lru_gen_refault`.
    fn lru_gen_refault(&self, vm: &Vmscan, folio: &Folio, shadow: u64) -> super::Refault {
        let nr = folio.nr_frames() as u64;
        let sh = super::GenShadow::unpack(shadow);
        let (n, workingset) = (sh.uses, sh.workingset);
        let distance = vm.nonresident_age().wrapping_sub(sh.age) & super::workingset::GEN_AGE_MASK;
        vm.counters.add(Event::WorkingsetRefault, nr);
        let type_ = type_of(folio.flags());
        let tier = tier_of_uses(n);
        let mut r = super::Refault {
            distance,
            activated: false,
            restored: false,
        };
        let resident = vm.type_frames(type_) as u64;
        if self.loop_protection {
            // Beyond reach with no reuse on record, the shadow tells nothing a first read
            // would not: the folio is added as one (to probation once the cache is full).
            if distance <= resident || n > 0 {
                folio.set_refaulted();
            }
            self.feedback
                .adapt_probation(sh.probation, distance, resident, nr);
        }
        if distance > resident {
            return r;
        }
        self.feedback.refaulted[type_][tier].fetch_add(nr, Ordering::Relaxed);
        // `n` counts `WORKINGSET` as one use (`uses_of`), and the bit is set again below: the
        // refs bits get the rest, so the folio comes back with the uses it had. (It used to
        // come back one use up, `WORKINGSET` counted twice; counting it once changed reclaim's
        // timing enough to expose a truncation race in write-back, since fixed: a write-back
        // extended the store to a file length read before a cut.)
        folio.set_refs(n.saturating_sub(u64::from(workingset)).min(MAX_REFS));
        if workingset || n > MAX_REFS {
            folio.set_workingset();
        }
        if tier == 0 || tier <= self.feedback.tier_idx(type_) {
            if self.loop_protection && n == 0 {
                // A candidate for the admission test when it is added.
                folio.set_probation();
            }
        } else {
            folio.set_active();
            vm.workingset_activation(nr as usize);
            vm.counters.add(Event::WorkingsetActivate, nr);
            r.activated = true;
            if workingset {
                vm.counters.add(Event::WorkingsetRestore, nr);
                r.restored = true;
            }
        }
        r
    }

    /// A new youngest generation: first makes room if a type already has [`MAX_NR_GENS`]
    /// (its oldest generation's folios join the next one, at its tail, keeping their order).
    /// The kernel's `inc_max_seq`.
    fn inc_max_seq(&self, g: &mut LruGuard<'_>) {
        for type_ in 0..2 {
            if g.lists.gen.nr_gens(type_) == MAX_NR_GENS as u64 {
                let min = g.lists.gen.min_seq[type_];
                let from = gen_list(type_, (min % MAX_NR_GENS as u64) as usize);
                let to = ((min + 1) % MAX_NR_GENS as u64) as usize;
                while let Some(f) = g.tail_of(from) {
                    // Oldest first to the next generation's tail: the order is kept.
                    g.unlink(f);
                    f.set_gen_bits(to as u64 + 1);
                    g.link(f, gen_list(type_, to), false);
                }
                self.inc_min_seq(g, type_);
            }
        }
        g.lists.gen.max_seq += 1;
        self.feedback.publish(&g.lists.gen);
    }

    /// `min_seq` of `type_` advances past its (empty) oldest generation; a new feedback period.
    fn inc_min_seq(&self, g: &mut LruGuard<'_>, type_: usize) {
        let min = g.lists.gen.min_seq[type_];
        debug_assert_eq!(
            g.frames_of(gen_list(type_, (min % MAX_NR_GENS as u64) as usize)),
            0
        );
        g.lists.gen.min_seq[type_] = min + 1;
        self.feedback.reset(type_);
        self.feedback.publish(&g.lists.gen);
    }

    /// Gets the generations of `type_` ready for eviction: `min_seq` past empty oldest
    /// generations, and a new youngest generation when only two are live or the youngest holds
    /// more than a quarter of the type. Returns the list to evict from, `None` when the type
    /// holds nothing.
    pub(crate) fn ready_oldest(&self, g: &mut LruGuard<'_>, type_: usize) -> Option<usize> {
        let total: usize = (0..MAX_NR_GENS)
            .map(|i| g.frames_of(gen_list(type_, i)))
            .sum();
        if total == 0 {
            return None;
        }
        loop {
            let gs = &g.lists.gen;
            let min = gs.min_seq[type_];
            let oldest = gen_list(type_, (min % MAX_NR_GENS as u64) as usize);
            if g.frames_of(oldest) > 0 {
                let young =
                    g.frames_of(gen_list(type_, (gs.max_seq % MAX_NR_GENS as u64) as usize));
                if gs.nr_gens(type_) == MIN_NR_GENS
                    || (young * 4 > total && gs.nr_gens(type_) < MAX_NR_GENS as u64)
                {
                    // (The other type makes room if it has the most generations: see
                    // inc_max_seq.)
                    self.inc_max_seq(g);
                }
                return Some(oldest);
            }
            if g.lists.gen.nr_gens(type_) > MIN_NR_GENS {
                self.inc_min_seq(g, type_);
            } else {
                self.inc_max_seq(g);
            }
        }
    }

    /// Takes folios to evict from `type_`: first from its probation list, then from the tail
    /// of its oldest generation, protecting tiers the feedback says refault more than tier 0
    /// (and, with the loop protection, folios with a reuse on record used since last looked),
    /// moving dirty folios and folios under write-back on (with `RECLAIM`), until `nr` frames
    /// are taken or `budget` frames were looked at. The kernel's `scan_folios` / `sort_folio`.
    #[doc(alias = "scan_folios")]
    #[doc(alias = "sort_folio")]
    fn lru_gen_isolate<'p>(
        &self,
        vm: &Vmscan,
        pool: &'p FramePool,
        type_: usize,
        nr: usize,
        budget: &mut usize,
        sc: &mut ScanControl,
    ) -> Vec<FolioRef<'p>> {
        let tier_idx = self.feedback.tier_idx(type_);
        // Sized once: a round takes at most `nr` frames, and rounds are small.
        let mut out = Vec::with_capacity(nr.min(SWAP_CLUSTER_MAX));
        let mut g = vm.lruvec.lock(pool);
        g.lists.gen.full = true;
        let mut taken = 0;
        let probation = gen_list(type_, PROBATION_GEN);
        let mut protected_run = 0;
        while taken < nr && *budget > 0 {
            // Probation goes first while it holds more than its floor, the frames a folio
            // needs to stay for its reuse to be seen (see the module documentation).
            // Below the floor the generations go first, unless a batch's worth of their oldest
            // folios in a row were protected: then what probation holds is what is cold.
            let older = g.frames_of(probation);
            let on_probation = older + g.frames_of(gen_list(type_, FRESH_GEN));
            // A whole round of probation was readahead not yet used: the generations go
            // first for the rest of this round of reclaim (and make no claims, below). (A
            // round is probation's older part: its fresh part moves on only as folios join
            // probation, or where the older part is empty.)
            let behind_read_ahead =
                sc.probation_rotated[type_] > 0 && older <= sc.probation_rotated[type_];
            let mut from_probation = !behind_read_ahead
                && on_probation > 0
                && (protected_run >= SWAP_CLUSTER_MAX
                    || on_probation > self.feedback.probation_target());
            let list = if from_probation {
                probation
            } else {
                match self.ready_oldest(&mut g, type_) {
                    Some(l) => l,
                    // The generations are empty: probation is all there is, unused or not.
                    None if on_probation > 0 => {
                        from_probation = true;
                        probation
                    }
                    None => break,
                }
            };
            if from_probation && older == 0 {
                // Probation's older part is empty: its fresh part moves on.
                Self::age_fresh(&mut g, type_);
            }
            let Some(f) = g.tail_of(list) else { break };
            let n = f.nr_frames();
            *budget = budget.saturating_sub(n);
            let flags = f.flags();
            let next = {
                let gs = &g.lists.gen;
                ((gs.min_seq[type_] + 1) % MAX_NR_GENS as u64) as usize
            };
            if from_probation {
                if flags & REFERENCED == 0 {
                    // Not used yet: readahead ahead of its reader. It gets one more turn, back
                    // at probation's head (`PROBATION` says it had it) — in the generations,
                    // used once, it would take a resident's place. Once a whole round of
                    // probation was such folios (windows larger than probation), this round of
                    // reclaim takes from the generations; should they give nothing, probation
                    // goes first again (see `lru_gen_shrink`). Still unused on its next turn (a
                    // reader slower than that, or gone), the folio is evicted.
                    if flags & PROBATION == 0 {
                        f.set_probation();
                        sc.probation_rotated[type_] += n;
                        g.move_to_head(f);
                        continue;
                    }
                    // Its extra turn is spent: evicted below.
                } else if uses_of(flags) > 0 {
                    // Used again while on probation: it joins the generations.
                    g.move_to_gen(f, next, false);
                    vm.counters.add(Event::PgActivate, n as u64);
                    continue;
                }
            } else {
                let uses = uses_of(flags);
                let tier = tier_of_uses(uses);
                // The claim (loop protection): a folio with a reuse on record that was used
                // since the hand or reclaim last looked is kept — except when the generations
                // are taken from only because probation holds readahead waiting for its
                // reader: there the oldest goes, in use or not, as looking for one idle would
                // sweep every resident's mark away in one round (a loop's residents are all in
                // use, and its share would be lost).
                let claim = self.loop_protection
                    && !behind_read_ahead
                    && uses > 0
                    && flags & REFERENCED != 0;
                let by_tier = tier > tier_idx || uses == MAX_REFS + 1;
                if by_tier || claim {
                    if by_tier {
                        // (The feedback measures the tiers' own protection: claims are not
                        // counted, or they would lower tiers 1-3's refault rates.)
                        self.feedback.protected[type_][tier].fetch_add(n as u64, Ordering::Relaxed);
                    }
                    // Protected: a generation younger, its count started over but marked as
                    // having been in the working set (its one use beyond the first, should it be
                    // evicted before it is used again: a refault then has a reuse on record).
                    f.set_refs(0);
                    f.set_workingset();
                    f.clear_referenced();
                    g.move_to_gen(f, next, false);
                    protected_run += n;
                    continue;
                }
            }
            if type_ == FILE_TYPE && flags & (WB_FAILED | WRITEBACK) == WB_FAILED {
                // Dirty, parked by its owner (see `Vmscan::sync_parked`), and back on a
                // generation only through an munlock: to the unevictable list.
                g.del(f);
                f.set_unevictable();
                f.clear_active();
                g.add(f, false);
                continue;
            }
            if type_ == FILE_TYPE && flags & (DIRTY | WRITEBACK) != 0 {
                // The flusher writes it; its write-back end rotates it to the oldest tail.
                f.set_reclaim();
                g.move_to_gen(f, next, false);
                vm.counters.add(Event::PgActivate, n as u64);
                if flags & WRITEBACK != 0 {
                    sc.nr_writeback += n;
                } else {
                    sc.nr_dirty += n;
                }
                continue;
            }
            if flags & LOCKED != 0 || !f.try_get() {
                // Locked (its read still in flight, or its index changing) or frozen (changed
                // in place right now): left for the next round, a generation up, as the dirty
                // ones are. Put back at the oldest head, it would be all a small cache's oldest
                // generation can hold while the reads are in flight: reclaim would find only
                // it, and `min_seq` never advance to the idle folios behind — and where the
                // reads complete on the allocating thread itself (its own io_uring), they never
                // would.
                g.move_to_gen(f, next, false);
                continue;
            }
            g.del(f);
            if from_probation {
                // Said in its shadow, should it be evicted.
                f.set_probation();
            }
            taken += n;
            protected_run = 0;
            // SAFETY: `try_get` just gave us a counted reference on this descriptor of `pool`.
            out.push(unsafe { pool.ref_from_raw(std::ptr::NonNull::from(f)) });
        }
        out
    }

    /// Moves the folio (on a generation list, a rotation after write-back that reclaim
    /// waited for) to the tail of its type's oldest generation, to be evicted next.
    fn lru_gen_rotate(&self, g: &mut LruGuard<'_>, f: &Folio) {
        let type_ = type_of(f.flags());
        let min = g.lists.gen.min_seq[type_];
        g.move_to_gen(f, (min % MAX_NR_GENS as u64) as usize, true);
    }

    /// One round of reclaim under the multi-generational LRU wanting `nr_to_reclaim` frames:
    /// evicts from the type whose oldest generation is older (file on a tie; anonymous only
    /// when the owners can swap), at most `SWAP_CLUSTER_MAX` frames at a time, until it has what it
    /// wants or has looked at twice the frames on the lists. The kernel's
    /// `lru_gen_shrink_lruvec` / `try_to_shrink_lruvec`.
    #[doc(alias = "lru_gen_shrink_lruvec")]
    fn lru_gen_shrink(
        &self,
        vm: &Vmscan,
        pool: &FramePool,
        owners: &dyn Owners,
        nr_to_reclaim: usize,
    ) -> usize {
        vm.drain_all(pool);
        let swap = owners.can_swap();
        let mut sc = ScanControl {
            nr_to_reclaim,
            ..ScanControl::default()
        };
        let mut budget = 2
            * (vm.type_frames(FILE_TYPE) + if swap { vm.type_frames(ANON_TYPE) } else { 0 })
            + SWAP_CLUSTER_MAX;
        let mut empty = [false; 2];
        while sc.nr_reclaimed < nr_to_reclaim && budget > 0 {
            let mut type_ = FILE_TYPE;
            if swap && !empty[ANON_TYPE] {
                let min = self.feedback.min_seq[ANON_TYPE].load(Ordering::Relaxed);
                let fmin = self.feedback.min_seq[FILE_TYPE].load(Ordering::Relaxed);
                if empty[FILE_TYPE] || min < fmin {
                    type_ = ANON_TYPE;
                }
            }
            if empty[type_] {
                break;
            }
            let dirty_before = sc.nr_dirty;
            let before = budget;
            let want = (nr_to_reclaim - sc.nr_reclaimed).min(SWAP_CLUSTER_MAX);
            let folios = self.lru_gen_isolate(vm, pool, type_, want, &mut budget, &mut sc);
            if folios.is_empty() && sc.probation_rotated[type_] > 0 {
                // The generations gave nothing after a round of probation's unused readahead:
                // probation goes first again, and what already had its extra turn is evicted.
                sc.probation_rotated[type_] = 0;
                continue;
            }
            if folios.is_empty() && budget == before {
                empty[type_] = true;
                continue;
            }
            let scanned: usize = folios.iter().map(|f| f.nr_frames()).sum();
            vm.counters.add(Event::PgScan, scanned as u64);
            sc.nr_scanned += scanned;
            sc.nr_reclaimed += vm.shrink_folio_list(pool, owners, folios, &mut sc);
            if sc.nr_dirty > dirty_before {
                owners.wake_flusher();
            }
        }
        sc.nr_reclaimed
    }

    /// The multi-generational LRU's state for `stats()`.
    fn stats(&self, vm: &Vmscan, pool: &FramePool) -> LruGenStats {
        let g = vm.lruvec.lock(pool);
        let gs = &g.lists.gen;
        let oldest = gs.min_seq[0].min(gs.min_seq[1]);
        let gens = (oldest..=gs.max_seq)
            .map(|seq| {
                let i = (seq % MAX_NR_GENS as u64) as usize;
                let frames = |t: usize| {
                    if seq >= gs.min_seq[t] {
                        g.frames_of(gen_list(t, i))
                    } else {
                        0
                    }
                };
                (seq, frames(ANON_TYPE), frames(FILE_TYPE))
            })
            .collect();
        let mut s = LruGenStats {
            max_seq: gs.max_seq,
            min_seq: gs.min_seq,
            gens,
            probation: [ANON_TYPE, FILE_TYPE].map(|t| {
                g.frames_of(gen_list(t, PROBATION_GEN)) + g.frames_of(gen_list(t, FRESH_GEN))
            }),
            probation_target: self.feedback.probation_target(),
            rejected: gs.rejected,
            admitted: gs.admitted,
            ..LruGenStats::default()
        };
        drop(g);
        for t in 0..2 {
            for tier in 0..MAX_NR_TIERS {
                let p = self.feedback.pos(t, tier, 1);
                s.refaulted[t][tier] = p.refaulted;
                s.total[t][tier] = p.total;
            }
            s.tier_idx[t] = self.feedback.tier_idx(t);
        }
        s
    }

    /// Whether the cache is still filling: reclaim has not run since a quarter of the frames
    /// were last free. Until then first reads are added to the generations (there is room);
    /// afterwards they go to probation.
    fn filling(g: &mut LruGuard<'_>) -> bool {
        let free = g.pool().free_frames_hint();
        let gen = &mut g.lists.gen;
        if gen.full && free > gen.frames / 4 {
            gen.full = false;
        }
        !gen.full
    }
}

impl Vmscan {
    /// Frames of `type_` on generation and probation lists (lock-free, as last published).
    pub(crate) fn type_frames(&self, type_: usize) -> usize {
        (0..=FRESH_GEN)
            .map(|g| self.lruvec.list_size(gen_list(type_, g)))
            .sum()
    }
}

impl Policy for MultiGen {
    /// A use through a file descriptor is counted in the refs bits, then `WORKINGSET`; nothing
    /// is written once both are full.
    fn access_rule(&self) -> AccessRule {
        AccessRule::CountUses
    }

    /// Not back into the oldest generation (the kernel's `evict_folios` keeps rejected folios
    /// out of it too): a folio held while its read is in flight, or by a reader, would be put
    /// back where reclaim takes from next, and in a small cache those can be all the oldest
    /// generation holds — reclaim would find only them and `min_seq` never advance to the idle
    /// folios behind.
    fn link_rejected(&self, g: &mut LruGuard<'_>, folio: &Folio) {
        if !folio.is_unevictable() {
            folio.clear_probation();
            let type_ = type_of(folio.flags());
            let next = (g.lists.gen.min_seq[type_] + 1) % MAX_NR_GENS as u64;
            folio.set_gen_bits(next + 1);
        }
        self.link(g, folio, false);
    }

    /// A folio without a generation first gets one ([`GenState::gen_for_add`]).
    fn link(&self, g: &mut LruGuard<'_>, folio: &Folio, tail: bool) {
        if !folio.is_unevictable() && folio.gen_bits() == 0 {
            // (A folio put back after reclaim took it from probation: the mark is spent.)
            folio.clear_probation();
            let gen = g.lists.gen.gen_for_add(folio, self.loop_protection);
            folio.set_gen_bits(gen as u64 + 1);
        }
        g.link(folio, list_of(folio.flags()), tail);
    }

    /// With the loop protection a candidate refault takes the admission test, and a file folio
    /// read for the first time — or over a shadow beyond reach with no reuse on record
    /// (neither `REFAULTED` nor `PROBATION` set) — goes to probation once the cache is full
    /// (reclaim has run since a quarter of the frames were last free), the admission hand
    /// moving one resident on as it does.
    fn add_new(&self, g: &mut LruGuard<'_>, folio: &Folio) {
        if self.loop_protection && !folio.is_unevictable() {
            let was = folio.clear_flags(REFAULTED | PROBATION);
            let refaulted = was & REFAULTED != 0;
            let probation = if was & PROBATION != 0 {
                MultiGen::lru_gen_admit(g, folio)
            } else if !refaulted && folio.flags() & (ACTIVE | ANON) == 0 && !MultiGen::filling(g) {
                // A first read: to probation, and the admission hand moves on as for a
                // candidate, so that the residents' marks age with every folio sent there.
                MultiGen::lru_gen_hand(g, type_of(folio.flags()));
                true
            } else {
                false
            };
            if probation {
                let t = usize::from(folio.flags() & ANON == 0);
                folio.set_gen_bits(FRESH_GEN as u64 + 1);
                g.link(folio, gen_list(t, FRESH_GEN), false);
                let target = g.lists.gen.fresh_target();
                while g.frames_of(gen_list(t, FRESH_GEN)) > target {
                    MultiGen::age_fresh(g, t);
                }
                return;
            }
        }
        self.link(g, folio, false);
    }

    fn rotate(&self, g: &mut LruGuard<'_>, folio: &Folio) {
        self.lru_gen_rotate(g, folio);
    }

    fn shrink(&self, vm: &Vmscan, pool: &FramePool, owners: &dyn Owners, nr: usize) -> usize {
        self.lru_gen_shrink(vm, pool, owners, nr)
    }

    /// It stays in the younger generation reclaim moved it to.
    fn park_for_writeback(&self, _folio: &Folio) {}

    fn eviction(&self, vm: &Vmscan, folio: &Folio) -> u64 {
        self.lru_gen_eviction(vm, folio)
    }

    fn refault(&self, vm: &Vmscan, folio: &Folio, shadow: u64) -> super::Refault {
        self.lru_gen_refault(vm, folio, shadow)
    }

    /// The generations are shown as the kernel shows them in `/proc/meminfo`: the two youngest
    /// as active, the older ones and probation as inactive.
    fn list_sizes(&self, vm: &Vmscan, out: &mut [usize; NR_LRU_LISTS]) {
        let max = self.feedback.max_seq();
        for type_ in [ANON_TYPE, FILE_TYPE] {
            let (inactive, active) = if type_ == ANON_TYPE {
                (Lru::InactiveAnon, Lru::ActiveAnon)
            } else {
                (Lru::InactiveFile, Lru::ActiveFile)
            };
            for g in 0..=FRESH_GEN {
                let n = vm.lruvec.list_size(gen_list(type_, g));
                let young = g < MAX_NR_GENS
                    && (g as u64 == max % MAX_NR_GENS as u64
                        || g as u64 == (max + 3) % MAX_NR_GENS as u64);
                out[if young { active } else { inactive } as usize] += n;
            }
        }
    }

    fn lru_gen_stats(&self, vm: &Vmscan, pool: &FramePool) -> Option<LruGenStats> {
        Some(self.stats(vm, pool))
    }

    /// Every generation list that holds folios is a generation between its type's `min_seq`
    /// and `max_seq`, and the classic lists (but the unevictable one) are unused.
    #[cfg(any(feature = "bench-internals", loom))]
    fn check(&self, g: &LruGuard<'_>, out: &[usize; NR_LISTS]) -> Result<(), String> {
        let gen = &g.lists.gen;
        for type_ in 0..2 {
            let (min, max) = (gen.min_seq[type_], gen.max_seq);
            if max < min + 1 || max - min + 1 > MAX_NR_GENS as u64 {
                return Err(format!(
                    "type {type_}: min_seq {min} max_seq {max}: not 2..={MAX_NR_GENS} generations"
                ));
            }
            for g in 0..MAX_NR_GENS {
                let live = (min..=max).any(|seq| seq as usize % MAX_NR_GENS == g);
                if !live && out[gen_list(type_, g)] > 0 {
                    return Err(format!(
                        "{}: holds folios but is outside min_seq {min}..=max_seq {max}",
                        list_name(gen_list(type_, g))
                    ));
                }
            }
            for l in Lru::ALL {
                if l != Lru::Unevictable && out[l as usize] > 0 {
                    return Err(format!(
                        "{}: classic list used under the multi-generational LRU",
                        l.name()
                    ));
                }
            }
        }
        Ok(())
    }

    #[cfg(loom)]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

const _: () = assert!(NR_GEN_LISTS == 2 * (MAX_NR_GENS + 2));
const _: () = assert!(
    FRESH_GEN + 1 < 1 << 3,
    "the generation bits hold the fresh list's number"
);

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn tiers_follow_the_kernel() {
        // order_base_2(n + 1): 0 → 0, 1 → 1, 2..=3 → 2, 4.. → 3.
        let want = [0, 1, 2, 2, 3, 3, 3, 3, 3];
        for (n, &t) in want.iter().enumerate() {
            assert_eq!(tier_of_uses(n as u64), t, "uses {n}");
        }
    }

    /// The probation target starts at its floor: two of the largest folios, at most 1/16 of
    /// the budget and at least 1/256 of it (and 1 frame).
    #[test]
    fn the_probation_target_starts_at_its_floor() {
        for (frames, largest, floor) in [
            (16384, 512, 1024),
            (16384, 1, 64),
            (4096, 512, 256),
            (262_144, 512, 1024),
            (1 << 20, 512, 4096),
            (256, 1, 2),
            (512, 512, 32),
            (1, 1, 1),
        ] {
            let f = Feedback::new(frames, largest);
            assert_eq!(
                f.probation_target(),
                floor,
                "{frames} frames, folios of {largest}"
            );
            assert_eq!(f.probation_bounds.0, floor as u64);
            // Probation evictees coming back within it grow it; generation evictees within
            // reach shrink it back, never below the floor.
            f.adapt_probation(true, 0, frames as u64, 1);
            f.adapt_probation(false, 0, frames as u64, 8);
            assert_eq!(
                f.probation_target(),
                floor,
                "{frames} frames, folios of {largest}"
            );
        }
    }

    /// The target moves by an eighth of itself (at least the folio's frames) per refault that
    /// counts: probation evictees within twice the target (and the resident frames) grow
    /// it, generation evictees within the resident frames shrink it; other refaults leave it.
    #[test]
    fn the_probation_target_moves_by_an_eighth_of_itself() {
        let frames = 16384u64;
        let f = Feedback::new(frames as usize, 1);
        let (lo, hi) = f.probation_bounds;
        assert_eq!((lo, hi), (64, 8192));
        let t = || f.probation_target() as u64;
        // Beyond twice the target, or beyond both the target and the resident frames: no
        // evidence.
        f.adapt_probation(true, 2 * lo + 1, frames, 1);
        f.adapt_probation(true, lo + 1, lo, 1);
        f.adapt_probation(false, frames + 1, frames, 1);
        assert_eq!(t(), lo);
        // Within twice the target: up by an eighth, then by the folio's size where that is more.
        f.adapt_probation(true, 2 * lo, frames, 1);
        assert_eq!(t(), lo + lo / 8);
        f.adapt_probation(true, 0, frames, 100);
        assert_eq!(t(), lo + lo / 8 + 100);
        // Geometric growth: from the floor to the cap in a few dozen refaults, not thousands.
        let mut n = 0;
        while t() < hi {
            f.adapt_probation(true, t(), frames, 1);
            n += 1;
            assert!(n < 64, "target {} after {n} refaults", t());
        }
        assert_eq!(t(), hi, "capped at half the budget");
        // And back down the same way, to the floor and no further.
        let mut n = 0;
        while t() > lo {
            let v = t();
            f.adapt_probation(false, frames, frames, 1);
            assert_eq!(t(), (v - v / 8).max(lo));
            n += 1;
        }
        assert!(n < 64, "{n} refaults to come down");
        f.adapt_probation(false, 0, frames, 1);
        assert_eq!(t(), lo);
    }

    /// Where a folio with nothing to say for it (clean, not active, not anonymous) is added
    /// once there are more than two generations: the oldest with the loop protection, the
    /// second oldest without (the kernel's rule); an active one goes to the youngest either way.
    #[test]
    fn an_unused_folio_is_added_to_the_oldest_generation_under_loop_protection() {
        use crate::mem::{FramePool, FRAME_SIZE};
        let pool = FramePool::with_caches(4 * FRAME_SIZE, 1, 0).unwrap();
        let f = pool.alloc(0).unwrap();
        f.set_mapping(7);
        let mut g = GenState::new(4);
        g.min_seq = [1, 1];
        g.max_seq = 4;
        let gen = |seq: u64| (seq % MAX_NR_GENS as u64) as usize;
        assert_eq!(g.gen_for_add(&f, true), gen(1), "loop protection: oldest");
        assert_eq!(g.gen_for_add(&f, false), gen(2), "without: second oldest");
        f.set_active();
        assert_eq!(g.gen_for_add(&f, true), gen(4), "active: youngest");
        assert_eq!(f.flags() & ACTIVE, 0, "ACTIVE only said where it goes");
        // With only two generations the second oldest is the youngest: both rules give the
        // oldest.
        g.max_seq = 2;
        assert_eq!(g.gen_for_add(&f, false), gen(1));
    }

    #[test]
    fn a_tier_refaulting_more_than_tier_0_is_protected() {
        let f = Feedback::default();
        let r = Ordering::Relaxed;
        // Tier 0: 1000 evicted, 100 refaulted; tier 2: 200 evicted, 150 refaulted.
        f.evicted[FILE_TYPE][0].store(1000, r);
        f.refaulted[FILE_TYPE][0].store(100, r);
        f.evicted[FILE_TYPE][2].store(200, r);
        f.refaulted[FILE_TYPE][2].store(150, r);
        assert_eq!(f.tier_idx(FILE_TYPE), 1, "tier 2 and up protected");
        // Tier 2 refaulting like tier 0: nothing protected.
        f.refaulted[FILE_TYPE][2].store(20, r);
        assert_eq!(f.tier_idx(FILE_TYPE), MAX_NR_TIERS - 1);
        // The history decays: after a reset the averages hold half.
        f.reset(FILE_TYPE);
        assert_eq!(f.avg_total[FILE_TYPE][0].load(r), 500);
        assert_eq!(f.evicted[FILE_TYPE][0].load(r), 0);
    }

    /// How a refault is added, from its shadow: within the type's resident frames with no
    /// reuse on record it is a candidate for the admission test (`PROBATION`); with one, it
    /// joins the generations; beyond them, with a reuse on record it joins the generations, and
    /// with none it is added as a first read (neither mark: to probation once the cache is
    /// full). Without the loop protection nothing is marked.
    #[test]
    fn a_refault_is_added_by_what_its_shadow_tells() {
        use crate::mem::{FramePool, FRAME_SIZE};
        use crate::vmscan::workingset::GenShadow;
        use crate::vmscan::{ReclaimPolicy, VmConfig};
        let pool = FramePool::with_caches(16 * FRAME_SIZE, 1, 0).unwrap();
        let vm = |loop_protection| {
            Vmscan::new(VmConfig {
                policy: ReclaimPolicy::MultiGen,
                workingset: true,
                loop_protection,
                shadow_shrinker: false,
                frames: 16,
                largest_folio: 1,
                wait_policy: crate::sync::bitwait::WaitPolicy::Exact,
                alloc_timeout: std::time::Duration::from_secs(1),
                background_reclaim: true,
            })
        };
        // (distance, uses beyond the first, workingset) → (REFAULTED, PROBATION). (A shadow's
        // uses count `WORKINGSET` as one.)
        let cases = [
            ((2, 0, false), (true, true)),
            ((2, 1, false), (true, false)),
            ((2, 1, true), (true, false)),
            ((6, 0, false), (false, false)),
            ((6, 1, false), (true, false)),
            ((6, 1, true), (true, false)),
        ];
        for lp in [true, false] {
            let vm = vm(lp);
            // Four residents: refaults within 4 frames of their eviction are within reach.
            let residents: Vec<_> = (0..4).map(|_| pool.alloc(0).unwrap()).collect();
            for f in &residents {
                f.set_mapping(7);
                vm.lru_add(&pool, f);
            }
            vm.drain_all(&pool);
            assert_eq!(vm.type_frames(FILE_TYPE), 4);
            vm.workingset_activation(100);
            for ((distance, uses, workingset), want) in cases {
                let shadow = GenShadow {
                    age: vm.nonresident_age() - distance,
                    uses,
                    workingset,
                    probation: false,
                }
                .pack();
                let f = pool.alloc(0).unwrap();
                vm.workingset_refault(&f, shadow);
                let got = (f.is_refaulted(), f.is_probation());
                let want = if lp { want } else { (false, false) };
                let case = format!(
                    "loop protection {lp}: distance {distance}, uses {uses}, workingset {workingset}"
                );
                assert_eq!(got, want, "{case}");
                // Within reach its uses come back, as many as it had (`WORKINGSET` counted
                // once: in the shadow's uses, and set again).
                let restored = if distance <= 4 { uses } else { 0 };
                assert_eq!(uses_of(f.flags()), restored, "{case}");
                assert_eq!(f.is_workingset(), workingset && distance <= 4, "{case}");
            }
            for f in &residents {
                f.set_mapping(0);
                vm.lru_del(&pool, f);
            }
        }
    }
}
