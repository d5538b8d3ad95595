//! Reclaim that knows the working set, after the kernel's `mm/vmscan.c`, `mm/swap.c` and
//! `mm/workingset.c`: LRU lists, folio batches, background reclaim, refault detection from
//! shadow entries and the shadow-node shrinker. One `Vmscan` per page cache.
//!
//! Three policies, chosen by name ([`ReclaimPolicy`]): the multi-generational LRU (`lru-gen`,
//! the default, with its loop protection), the classic active and inactive lists described
//! below (`lru`), and the clock they replaced (`clock`). Each is one module behind one trait
//! (`policy::Policy`), registered in one table (`policy::POLICIES`); the machinery stays
//! shared. The list policies share the lists' lock, the batches, the shadows and background
//! reclaim; they differ in which lists a folio goes on, what an access does and what a round
//! of reclaim takes.
//!
//! # Where it sits
//!
//! Between `mem` (the pool it frees frames into) and the owners of folios (the page cache's
//! files today; anonymous memory later). It never names an owner: it reaches them through the
//! `Owners` trait — evict this locked folio leaving this shadow, write this one back, wake
//! the flusher, delete this shadow node — as the kernel's reclaim reaches a file system through
//! its `address_space_operations`. Owners call in to add folios to the lists, mark accesses,
//! allocate (which may reclaim) and report refaults.
//!
//! # A folio's life on the lists
//!
//! | event | what happens | kernel |
//! |---|---|---|
//! | inserted by its owner | queued in an add batch; linked at the head of the inactive list, or of the active one if its refault was judged part of the working set | `folio_add_lru` |
//! | first access | `REFERENCED` set | `folio_mark_accessed` |
//! | second access, inactive | queued in an activate batch: moved to the active list | `folio_activate` |
//! | active list too long, or refaults are activating | moved from the active tail to the inactive head with `WORKINGSET` set | `shrink_active_list` |
//! | at the inactive tail, clean, unused | evicted: its slot keeps a shadow, its frames go back | `shrink_folio_list`, `__remove_mapping` |
//! | at the inactive tail, dirty or under write-back | gets `RECLAIM`, parks on the active list; the flusher is woken; when its write-back ends it is rotated to the inactive tail | `folio_set_reclaim`, `folio_rotate_reclaimable` |
//! | at the inactive tail, locked or in use | put back at the head | `keep` |
//! | removed by its owner | `mapping` set to 0, then unlinked under the LRU lock | `filemap_remove_folio` |
//!
//! Reclaim *isolates* a few folios at a time from a list's tail under the LRU lock (each with a
//! reference, `LRU` cleared), works on them without the lock (only `try_lock` on folio locks, so
//! it never waits on a lock holder that may itself be allocating), and puts back what it keeps.
//!
//! # Who reclaims
//!
//! Three watermarks derived from the budget ([`Watermarks`]). An allocation that finds the free
//! frames below *low* wakes the background reclaim thread (kswapd), which reclaims until they
//! are above *high*; only an allocation that finds them below *min* (or finds nothing at all)
//! reclaims in its own thread (direct reclaim, counted as `direct_reclaims`) — and while kswapd
//! is at work it first waits a few milliseconds for kswapd's next rounds (the kernel's
//! `throttle_direct_reclaim`). In steady state readers never reclaim inline. After a round
//! that balanced, kswapd looks a little longer before it sleeps (the `kswapd` module), so that a
//! stream of misses does not pay a wake-up per round.
//!
//! # The "before"s
//!
//! [`ReclaimPolicy::Lru`], the classic lists, is the reclaim quire had before the
//! multi-generational LRU. [`ReclaimPolicy::Clock`] is the reclaim quire had before this
//! module: no lists, no batches
//! and no background thread; an allocation that fails sweeps a clock over the memmap in the
//! allocating thread (second chance for `REFERENCED`), writing dirty folios back itself.
//! Workingset detection can be switched off on its own (`workingset: false`): refaults are
//! counted but never activate. The shadow shrinker has its own switch.

mod clock;
mod kswapd;
mod lru;
// The generations' constants and helpers are the tests' (its counters are re-exported below).
#[cfg(feature = "bench-internals")]
pub mod lru_gen;
#[cfg(not(feature = "bench-internals"))]
// Its items are written `pub` for the tests.
#[allow(unreachable_pub)]
pub(crate) mod lru_gen;
mod policy;
mod reclaim;
mod swap;
mod two_list;
pub(crate) mod workingset;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use std::time::Duration;

pub use lru::{Lru, NR_LRU_LISTS};
pub(crate) use lru::{LruGuard, Lruvec};
pub use lru_gen::LruGenStats;
pub use policy::{ReclaimPolicy, UnknownReclaimPolicy};
pub(crate) use workingset::{GenShadow, Refault};

use crate::mem::folio::{Folio, FolioGuard, FreeTicket, FRAME_SHIFT};
use crate::stats::Counters;
use crate::sync::bitwait::WaitPolicy;
use crate::xarray::{ListedNode, NodeList};

/// The free-frame thresholds reclaim works to, in frames (the kernel's zone watermarks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    /// Below this, allocations reclaim themselves.
    pub min: usize,
    /// Below this, order-0 allocations wake background reclaim.
    pub low: usize,
    /// Background reclaim woken for order-0 allocations stops above this.
    pub high: usize,
    /// The widest gap between the watermarks, for allocations of large folios.
    pub max_gap: usize,
}

impl Watermarks {
    /// The watermarks of a budget of `frames` frames. `min` is `sqrt(KiB)` KiB — a quarter of
    /// the kernel's `min_free_kbytes` (`sqrt(16 * KiB)`): the kernel's reserve is mostly for
    /// allocations that may not reclaim, and quire has none; here `min` only marks where
    /// allocations start reclaiming themselves — at least 16 frames and at most a quarter of the
    /// budget. `low` and `high` lie one gap above `min` and above each other; the gap is
    /// a quarter of `min` or 0.1% of the budget, as in the kernel (`watermark_scale_factor`),
    /// for order-0 allocations, and widens for larger ones to the folio's size (capped at 1/32
    /// of the budget), since one allocation takes that much at once and background reclaim
    /// needs the room to keep ahead of it. A 64 MiB budget: `min` 64 frames, `low` 80 and
    /// `high` 96 for order 0 (0.6% of the budget free), up to 576 and 1088 for 2 MiB folios.
    pub fn for_frames(frames: usize) -> Watermarks {
        let kib = (frames as u64) << (FRAME_SHIFT - 10);
        let min_kib = isqrt(kib);
        let min = ((min_kib >> (FRAME_SHIFT - 10)) as usize)
            .max(16)
            .min(frames / 4);
        let gap = (min / 4).max(frames / 1000).max(1);
        Watermarks {
            min,
            low: min + gap,
            high: min + 2 * gap,
            max_gap: (frames / 32).max(gap),
        }
    }

    /// The watermarks of a budget of `frames` frames that no background thread reclaims for,
    /// and the frames a reclaim round of an allocating thread wants at least. With nobody to
    /// run ahead, allocations take what is free down to `min`, a 256th of the budget (at least
    /// one frame), then reclaim for themselves in rounds of a 64th of it (4 to
    /// `SWAP_CLUSTER_MAX` frames): so the frames held free stay under 2% of the budget, where
    /// background reclaim's headroom — `min` plus a round of 32 — is about 48 frames, a fifth
    /// of a 256-frame budget. `low` and `high` equal `min` (there is nothing to wake).
    pub fn direct(frames: usize) -> (Watermarks, usize) {
        let min = (frames / 256).max(1).min(frames / 4);
        let batch = (frames / 64).clamp(4, reclaim::SWAP_CLUSTER_MAX);
        let wmark = Watermarks {
            min,
            low: min,
            high: min,
            max_gap: (frames / 32).max(1),
        };
        (wmark, batch)
    }

    fn gap(&self, order: u32) -> usize {
        let base = self.low - self.min;
        base.max((1usize << order).min(self.max_gap))
    }

    /// The low watermark for an allocation of `order`.
    pub fn low_for(&self, order: u32) -> usize {
        self.min + self.gap(order)
    }

    /// The high watermark for an allocation of `order`.
    pub fn high_for(&self, order: u32) -> usize {
        self.min + 2 * self.gap(order)
    }
}

/// The integer square root.
pub(crate) fn isqrt(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let mut x = (n as f64).sqrt() as u64;
    while x * x > n {
        x -= 1;
    }
    while (x + 1) * (x + 1) <= n {
        x += 1;
    }
    x
}

/// A reference to an owner, of whatever type the [`Owners`] has.
type AnyOwner = Arc<dyn std::any::Any + Send + Sync>;

/// The owner a round of reclaim found for the last folio it evicted, kept for the folios after
/// it: most of a round's folios belong to the same file, and finding the owner by its id is a
/// lock and a table lookup. What the owner is, is the [`Owners`]' own business. Owners it held
/// before are kept too, and all of them go when the round drops the memo, with no folio locked
/// (the last reference to a file runs its `Drop`, which locks the file's folios).
#[derive(Default)]
pub(crate) struct OwnerMemo {
    last: Option<(usize, AnyOwner)>,
    /// Owners kept before `last`: a round of reclaim takes at most a few dozen folios.
    earlier: Vec<AnyOwner>,
}

impl OwnerMemo {
    /// The owner with this `id`: the one kept if it is that one, else `find`'s (kept in its
    /// place when found).
    pub(crate) fn get<T: Send + Sync + 'static>(
        &mut self,
        id: usize,
        find: impl FnOnce() -> Option<Arc<T>>,
    ) -> Option<&T> {
        if self.last.as_ref().is_none_or(|(kept, _)| *kept != id) {
            if let Some((_, before)) = self.last.take() {
                self.earlier.push(before);
            }
            let found: AnyOwner = find()?;
            self.last = Some((id, found));
        }
        self.last.as_ref().and_then(|(_, o)| o.downcast_ref::<T>())
    }
}

/// How reclaim reaches the owners of the folios on its lists (the kernel's address-space
/// operations, as reclaim uses them). Folio owners are found by the folio's `mapping` id.
pub(crate) trait Owners: Sync {
    /// Removes the locked folio `g` from its owner if it still belongs there, is clean, not
    /// under write-back and referenced only by its owner and `g`: freezes it, asks `shadow`
    /// for the value its slot keeps, and replaces it. If it did, the folio is left frozen with
    /// only `g`'s reference, and the ticket returned has `g` free it
    /// ([`FolioGuard::free_frozen`]). `memo` keeps the owner found for the next folio of the
    /// round.
    fn evict<'p>(
        &self,
        g: &mut FolioGuard<'p>,
        shadow: &mut dyn FnMut(&Folio) -> u64,
        memo: &mut OwnerMemo,
    ) -> Option<FreeTicket<'p>>;
    /// Writes the locked, dirty folio back now (the clock policy only; LRU reclaim leaves
    /// write-back to the flusher).
    fn write_back(&self, g: FolioGuard<'_>);
    /// Asks the flusher to write back dirty data: reclaim found dirty folios at the tail.
    fn wake_flusher(&self);
    /// Deletes a shadow node found on the shadow-node list; whether it did.
    fn delete_shadow_node(&self, n: &ListedNode) -> bool;
    /// Reclaims the locked anonymous folio `g` (isolated by reclaim): puts it in the swap
    /// cache, unmaps it through the reverse map, writes it to swap if dirty and frees it — or
    /// says why not. With `check_references`, a folio some space used since reclaim last looked
    /// is activated instead (the kernel's `folio_check_references`). Owners without
    /// anonymous memory keep every folio.
    fn shrink_anon(&self, g: &mut FolioGuard<'_>, check_references: bool) -> AnonFate {
        let _ = (g, check_references);
        AnonFate::Keep
    }
    /// Whether anonymous folios can be reclaimed now (a swap device with free slots).
    fn can_swap(&self) -> bool {
        false
    }
    /// Unmaps the locked file folio `g`, which some space maps, from every space (the
    /// kernel's `try_to_unmap` for a file folio, through its file's `i_mmap`): with
    /// `check_references`, a folio used through a mapping since reclaim last looked is activated
    /// instead. The last unmap transfers the frames' dirty bit to the folio.
    fn unmap_file(&self, g: &mut FolioGuard<'_>, check_references: bool) -> MappedFate {
        let _ = (g, check_references);
        MappedFate::Keep
    }
}

/// What reclaim's unmap of a mapped file folio came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MappedFate {
    /// No space maps it any more (its dirty bit transferred): evict or write it back.
    Unmapped,
    /// Used through a mapping since reclaim last looked: to the active list.
    Activate,
    /// A page-table lock was busy: keep it for now.
    Keep,
    /// A space maps it locked: to the unevictable list (the owner has set its flag under the
    /// LRU lock, from its mlock count).
    Unevictable,
}

/// The anonymous memory of a cache, as reclaim reaches it (through the cache's [`Owners`]).
pub(crate) trait AnonOwner: Send + Sync {
    /// See [`Owners::shrink_anon`].
    fn shrink_anon(&self, g: &mut FolioGuard<'_>, check_references: bool) -> AnonFate;
    /// See [`Owners::can_swap`].
    fn can_swap(&self) -> bool;
    /// Whether `f` (anonymous, on a list) belongs to a live space family or the swap cache
    /// (for the list checks of tests).
    #[cfg(feature = "bench-internals")]
    fn owns(&self, f: &Folio) -> bool;
}

/// What became of an anonymous folio that reclaim handed to its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AnonFate {
    /// Written to swap if it had to be, out of the swap cache: freed when reclaim lets go.
    Freed,
    /// Still in use (mapped, referenced, locked by somebody, swap full, an I/O error): back to
    /// the head of its list.
    Keep,
    /// Used since reclaim last looked: to the active list.
    Activate,
    /// A space maps it locked (mlock): to the unevictable list (the owner has set its flag
    /// under the LRU lock, from its mlock count).
    Unevictable,
}

/// How a [`Vmscan`] is set up.
#[derive(Clone, Debug)]
pub(crate) struct VmConfig {
    pub policy: ReclaimPolicy,
    pub workingset: bool,
    pub loop_protection: bool,
    pub shadow_shrinker: bool,
    pub frames: usize,
    /// Frames of the largest folio the cache allocates (`1 << max_folio_order`).
    pub largest_folio: usize,
    pub wait_policy: WaitPolicy,
    pub alloc_timeout: Duration,
    /// Whether a background thread reclaims ahead of the allocations (`CacheConfig::
    /// background_reclaim`), for the policies that have one.
    pub background_reclaim: bool,
}

/// One cache's reclaim state; see the [module documentation](self).
pub(crate) struct Vmscan {
    /// The policy's [`policy::Policy::access_rule`]: what a repeat access does.
    access_rule: policy::AccessRule,
    workingset: bool,
    shadow_shrinker: bool,
    max_shadow_nodes: usize,
    wmark: Watermarks,
    /// A background thread reclaims ahead of the allocations (the policy has one, and the
    /// configuration asks for it); without it allocations reclaim for themselves.
    background: bool,
    /// Frames a reclaim round in an allocating thread wants at least (see
    /// [`Watermarks::direct`]).
    direct_batch: usize,
    wait_policy: WaitPolicy,
    alloc_timeout: Duration,
    /// The lists, and the policy that says where folios go on them.
    lruvec: Lruvec,
    batches: swap::Batches,
    /// Advanced on every eviction and activation (see [`workingset`]).
    nonresident_age: AtomicU64,
    /// The index nodes holding only shadows, of every file of the cache.
    shadow_nodes: Arc<NodeList>,
    kswapd: kswapd::Kswapd,
    /// This cache's reclaim counters (also counted globally).
    pub(crate) counters: Counters,
}

impl Vmscan {
    pub(crate) fn new(c: VmConfig) -> Vmscan {
        let policy = c.policy.build(&c);
        let background = c.background_reclaim && policy.background_reclaim();
        let (wmark, direct_batch) = if background {
            (Watermarks::for_frames(c.frames), reclaim::SWAP_CLUSTER_MAX)
        } else {
            Watermarks::direct(c.frames)
        };
        Vmscan {
            access_rule: policy.access_rule(),
            workingset: c.workingset,
            shadow_shrinker: c.shadow_shrinker,
            max_shadow_nodes: (c.frames / 16).max(1),
            wmark,
            background,
            direct_batch,
            wait_policy: c.wait_policy,
            alloc_timeout: c.alloc_timeout,
            lruvec: Lruvec::new(lru_gen::GenState::new(c.frames), policy),
            batches: swap::Batches::new(),
            nonresident_age: AtomicU64::new(0),
            shadow_nodes: Arc::new(NodeList::new()),
            kswapd: kswapd::Kswapd::new(),
            counters: Counters::default(),
        }
    }

    /// The cache's reclaim policy.
    #[inline]
    pub(crate) fn policy(&self) -> &dyn policy::Policy {
        self.lruvec.policy()
    }

    /// The watermarks.
    pub(crate) fn watermarks(&self) -> Watermarks {
        self.wmark
    }

    /// The list every file's index puts its shadow nodes on.
    pub(crate) fn shadow_nodes(&self) -> &Arc<NodeList> {
        &self.shadow_nodes
    }

    /// Frames on each list at the last change (lock-free); a policy with lists of its own
    /// shows them as the classic ones (the generations as `/proc/meminfo` shows them).
    pub(crate) fn list_sizes(&self) -> [usize; NR_LRU_LISTS] {
        let mut out = Lru::ALL.map(|l| self.lruvec.size(l));
        self.policy().list_sizes(self, &mut out);
        out
    }

    /// The multi-generational LRU's state for `stats()`; `None` under the other policies.
    pub(crate) fn lru_gen_stats(&self, pool: &crate::mem::pool::FramePool) -> Option<LruGenStats> {
        self.policy().lru_gen_stats(self, pool)
    }

    /// Starts the background reclaim thread (for the policies that have one); `target` does
    /// the work.
    pub(crate) fn start_kswapd(
        &self,
        target: std::sync::Weak<dyn kswapd::Balance>,
    ) -> std::io::Result<()> {
        if self.background {
            self.kswapd.spawn(target)?;
        }
        Ok(())
    }

    /// Checks the lists' links and counts, and that every listed folio passes `in_index`
    /// (under the LRU lock; for tests).
    #[cfg(any(feature = "bench-internals", loom))]
    pub(crate) fn check_lists(
        &self,
        pool: &crate::mem::pool::FramePool,
        in_index: &dyn Fn(&Folio) -> bool,
    ) -> Result<(), String> {
        let g = self.lruvec.lock(pool);
        g.check()?;
        for l in 0..lru::NR_LISTS {
            for f in g.walk(l) {
                if !in_index(f) {
                    return Err(format!("{f:?} is on list {l} but in no index"));
                }
            }
        }
        Ok(())
    }

    /// Tells the background reclaim thread to stop (it does at once, or when its current round
    /// of reclaim ends).
    pub(crate) fn stop(&self) {
        self.kswapd.stop();
    }
}

pub(crate) use kswapd::Balance;

/// The LRU protocol's pieces, public under `--cfg loom` for the models in
/// `tests/loom_lru.rs`: batches, unlinking by an owner, isolation and putback by reclaim.
#[cfg(loom)]
pub mod model {
    use std::ptr::NonNull;

    use super::{lru_gen, Lru, ReclaimPolicy, VmConfig, Vmscan};
    use crate::mem::folio::{Folio, FolioRef};
    use crate::mem::pool::FramePool;

    /// One cache's reclaim state, with no background thread.
    pub struct Model(Vmscan);

    impl Model {
        /// LRU policy, workingset on.
        pub fn new(frames: usize) -> Model {
            Model(Vmscan::new(VmConfig {
                policy: ReclaimPolicy::Lru,
                workingset: true,
                loop_protection: false,
                shadow_shrinker: false,
                frames,
                largest_folio: 1,
                wait_policy: crate::sync::bitwait::WaitPolicy::Exact,
                alloc_timeout: std::time::Duration::from_secs(1),
                background_reclaim: true,
            }))
        }

        /// `folio_add_lru`.
        pub fn lru_add(&self, pool: &FramePool, folio: &Folio) {
            self.0.lru_add(pool, folio);
        }

        /// An add entry left over from an earlier life of the descriptor.
        pub fn queue_stale_add(&self, pool: &FramePool, folio: &Folio) {
            self.0.queue_stale_add(pool, folio);
        }

        /// What an owner does when it removes a folio: `mapping` to 0, then unlink.
        pub fn remove(&self, pool: &FramePool, folio: &Folio) {
            folio.set_mapping(0);
            self.0.lru_del(pool, folio);
        }

        /// `lru_add_drain_all`.
        pub fn drain_all(&self, pool: &FramePool) {
            self.0.drain_all(pool);
        }

        /// Isolates the tail folio of `lru` as reclaim does (a reference, off the list).
        #[doc(alias = "isolate_lru_folios")]
        pub fn isolate<'p>(&self, pool: &'p FramePool, lru: Lru) -> Option<FolioRef<'p>> {
            let mut g = self.0.lruvec.lock(pool);
            let f = g.tail(lru)?;
            if !f.try_get() {
                return None;
            }
            g.del(f);
            // SAFETY: `try_get` gave us a counted reference on this descriptor of `pool`.
            Some(unsafe { pool.ref_from_raw(NonNull::from(f)) })
        }

        /// Reclaim's putback.
        #[doc(alias = "move_folios_to_lru")]
        pub fn putback(&self, pool: &FramePool, folio: FolioRef<'_>) {
            self.0.putback(pool, vec![folio]);
        }

        /// Checks the lists; every listed folio must have an owner.
        pub fn check(&self, pool: &FramePool) -> Result<(), String> {
            self.0.check_lists(pool, &|f| f.mapping() != 0)
        }

        /// The multi-generational LRU, workingset on; with `loop_protection` first reads go to
        /// probation once the pool is nearly full (as tiny pools always are).
        pub fn new_multigen(frames: usize, loop_protection: bool) -> Model {
            Model(Vmscan::new(VmConfig {
                policy: ReclaimPolicy::MultiGen,
                workingset: true,
                loop_protection,
                shadow_shrinker: false,
                frames,
                largest_folio: 1,
                wait_policy: crate::sync::bitwait::WaitPolicy::Exact,
                alloc_timeout: std::time::Duration::from_secs(1),
                background_reclaim: true,
            }))
        }

        /// `folio_mark_accessed` (the folio's flags read now, as a reader does).
        pub fn mark_accessed(&self, pool: &FramePool, folio: &Folio) {
            self.0.mark_accessed(pool, folio, folio.flags());
        }

        /// What the eviction scan does to a protected folio at the oldest file tail: its count
        /// starts over and it moves a generation up, under the LRU lock (aging a new youngest
        /// generation first when only two are live). Returns whether there was one.
        pub fn protect_oldest(&self, pool: &FramePool) -> bool {
            let mg = self.multigen();
            let mut g = self.0.lruvec.lock(pool);
            let Some(list) = mg.ready_oldest(&mut g, lru_gen::FILE_TYPE) else {
                return false;
            };
            let Some(f) = g.tail_of(list) else {
                return false;
            };
            f.set_refs(0);
            f.clear_workingset();
            f.clear_referenced();
            let next = ((g.lists.gen.min_seq[lru_gen::FILE_TYPE] + 1) % lru_gen::MAX_NR_GENS as u64)
                as usize;
            g.move_to_gen(f, next, false);
            true
        }

        /// The admission test of a candidate refault being added (see [`lru_gen`]): whether it
        /// would go to probation. Clears the oldest tail's `REFERENCED` when it does.
        pub fn admission_test(&self, pool: &FramePool, candidate: &Folio) -> bool {
            let mut g = self.0.lruvec.lock(pool);
            lru_gen::MultiGen::lru_gen_admit(&mut g, candidate)
        }

        /// The cache's multi-generational LRU (a model built with [`Model::new_multigen`]).
        fn multigen(&self) -> &lru_gen::MultiGen {
            self.0
                .policy()
                .as_any()
                .downcast_ref()
                .expect("a model of the multi-generational LRU")
        }

        /// The generation bits of `folio` (generation + 1; 0 for none).
        pub fn gen_bits(folio: &Folio) -> u64 {
            folio.gen_bits()
        }
    }
}
pub(crate) use reclaim::{unevictable, NoMemory};

#[cfg(all(test, not(loom)))]
mod tests {
    use super::OwnerMemo;
    use std::cell::Cell;
    use std::sync::Arc;

    #[test]
    fn the_memo_finds_an_owner_once_per_run_of_its_id() {
        let finds = Cell::new(0);
        let find = |id: usize| {
            finds.set(finds.get() + 1);
            (id != 0).then(|| Arc::new(id * 10))
        };
        let mut memo = OwnerMemo::default();
        for id in [1, 1, 1, 2, 2, 1] {
            assert_eq!(memo.get(id, || find(id)), Some(&(id * 10)));
        }
        // One find per run of the same id: 1, 2, then 1 again.
        assert_eq!(finds.get(), 3);
        // An owner that is not found is not kept, and is looked for again.
        assert_eq!(memo.get(0, || find(0)), None);
        assert_eq!(memo.get(0, || find(0)), None);
        assert_eq!(finds.get(), 5);
        // Kept as another type: not handed out as this one.
        assert_eq!(memo.get(3, || find(3)), Some(&30));
        assert_eq!(memo.get::<u32>(3, || None), None);
    }

    #[test]
    fn owners_the_memo_held_live_until_it_goes() {
        let a = Arc::new(1usize);
        let b = Arc::new(2usize);
        let mut memo = OwnerMemo::default();
        memo.get(1, || Some(a.clone()));
        memo.get(2, || Some(b.clone()));
        // `a` is no longer the one kept, but is still held: not dropped in the middle of a round.
        assert_eq!(Arc::strong_count(&a), 2);
        drop(memo);
        assert_eq!(Arc::strong_count(&a), 1);
        assert_eq!(Arc::strong_count(&b), 1);
    }
}
