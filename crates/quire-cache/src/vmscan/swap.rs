//! Folio batches and access marking, after the kernel's `mm/swap.c`.
//!
//! A read hit must never take the LRU lock, so LRU changes that follow from use — adding a new
//! folio, activating one used twice, rotating one whose write-back reclaim was waiting for —
//! are queued in small batches ([`BATCH`] folios, the kernel's `folio_batch`) and applied under
//! the lock a batch at a time. The kernel keeps the batches per CPU; quire keeps them per
//! *shard*, a thread using the shard its number picks (as the buddy allocator's order-0 caches
//! do), each behind its own mutex, so that any thread can drain every batch (before reclaim
//! scans, and when the cache goes away) — the kernel's `lru_add_drain_all`.
//!
//! # Batches hold no references
//!
//! The kernel's batches hold a reference on each folio. quire's hold only the descriptor's
//! address: the page cache changes an up-to-date folio in place only when it can *freeze* the
//! count at exactly the references it knows of (see [`crate::mem::folio`]), and a reference
//! parked in a batch would make every freshly inserted folio look busy — its next write would
//! copy it, and invalidation would skip it — until the batch happened to drain. Descriptors
//! outlive every folio (they are never freed), so an entry is always safe to look at; what makes
//! a stale one (its folio freed, maybe reused since) harmless is this rule:
//!
//! - a folio queued for adding carries [`LRU_PENDING`]; a drain links a folio only if it
//!   carries `LRU_PENDING` and has an owner (`mapping` non-zero), clears `LRU_PENDING`, and does
//!   both under the LRU lock;
//! - **whoever sets a folio's `mapping` to 0 then takes the LRU lock and unlinks it**
//!   ([`Vmscan::lru_del`]).
//!
//! So a removed folio is never left on a list: either the drain links it first and the remover
//! unlinks it, or the remover comes first and the drain skips it. A stale add entry can link
//! only a folio that is pending right now in its new life (early, which its own entry then
//! finds done); never one that reclaim has isolated, nor one being inserted whose flags its
//! owner is still setting, since neither is pending. An activation or rotation through a stale
//! entry only moves some listed folio between lists, a wrong hint, never a broken list. A folio
//! waiting in an add batch is on no list, so reclaim cannot see it until the batch is drained,
//! which every round of reclaim does first.
//!
//! # Access marking (`folio_mark_accessed`)
//!
//! A first access sets `REFERENCED` under every policy; what a later one does is the policy's
//! ([`super::policy::Policy::accessed`]). Under the classic lists:
//!
//! | flags before | what an access does |
//! |---|---|
//! | `REFERENCED` clear | sets it (one read-modify-write; the only write a first hit makes) |
//! | `REFERENCED`, `ACTIVE` or `UNEVICTABLE` | nothing: hot hits on active folios write nothing |
//! | `REFERENCED`, inactive, on a list | queues the folio for activation, clears `REFERENCED` |
//! | `REFERENCED`, inactive, waiting to be added | sets `ACTIVE` under the LRU lock (it is then added to the active list), clears `REFERENCED` |
//!
//! Each activation also advances the workingset's non-resident age (see
//! [`super::workingset`]).

use std::ptr::NonNull;

use crossbeam_utils::CachePadded;

use super::policy::AccessRule;
use super::{LruGuard, Vmscan};
use crate::mem::buddy::{nr_shards, thread_number};
use crate::mem::folio::{
    Folio, ACTIVE, HEAD, LRU, LRU_PENDING, REFERENCED, REFS_MASK, UNEVICTABLE, WORKINGSET,
};
use crate::mem::pool::FramePool;
use crate::stats::Event;
use crate::sync::loom::{Mutex, MutexGuard};

/// Folios per batch, as the kernel's `PAGEVEC_SIZE`.
pub(crate) const BATCH: usize = 15;

/// A folio's descriptor, queued in a batch (no reference: see the module documentation).
#[derive(Clone, Copy)]
struct Held(NonNull<Folio>);

// SAFETY: a `Held` is the address of a descriptor, which is `Sync` and lives as long as the
// pool.
unsafe impl Send for Held {}

impl Held {
    fn folio(&self) -> &Folio {
        // SAFETY: descriptors live as long as the pool, which outlives the batches (the cache
        // drains them before its pool goes).
        unsafe { self.0.as_ref() }
    }
}

/// What a batch does to its folios when drained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// Link onto the list the flags name (the kernel's `lru_add`).
    Add,
    /// Move from the inactive list to the active one (`lru_activate`).
    Activate,
    /// Move to the inactive tail (`lru_move_tail`, after write-back that reclaim waited for).
    Rotate,
}

/// One batch, in place: up to [`BATCH`] descriptors, so that queueing never allocates.
#[derive(Default)]
struct Batch {
    folios: [Option<Held>; BATCH],
    len: usize,
}

impl Batch {
    /// Adds `held`; whether the batch is full now.
    fn push(&mut self, held: Held) -> bool {
        self.folios[self.len] = Some(held);
        self.len += 1;
        self.len == BATCH
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn iter(&self) -> impl Iterator<Item = &Folio> {
        self.folios[..self.len].iter().flatten().map(Held::folio)
    }
}

#[derive(Default)]
struct Shard {
    add: Batch,
    activate: Batch,
    rotate: Batch,
}

impl Shard {
    fn list(&mut self, op: Op) -> &mut Batch {
        match op {
            Op::Add => &mut self.add,
            Op::Activate => &mut self.activate,
            Op::Rotate => &mut self.rotate,
        }
    }
}

/// Every shard's batches.
pub(crate) struct Batches {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
}

impl Batches {
    /// As many shards as the allocator's caches ([`nr_shards`](crate::mem::buddy::nr_shards)).
    pub(crate) fn new() -> Batches {
        Batches {
            shards: (0..nr_shards())
                .map(|_| CachePadded::new(Mutex::new(Shard::default())))
                .collect(),
        }
    }

    fn mine(&self) -> MutexGuard<'_, Shard> {
        self.shards[thread_number() % self.shards.len()].lock()
    }
}

impl Vmscan {
    /// Hands `folio` (just made visible by its owner) to the policy to be added to the lists
    /// ([`Policy::lru_add`](super::policy::Policy::lru_add)): the kernel's `folio_add_lru`.
    #[doc(alias = "folio_add_lru")]
    pub(crate) fn lru_add(&self, pool: &FramePool, folio: &Folio) {
        self.policy().lru_add(self, pool, folio);
    }

    /// Queues `folio` to be added to the lists, marked pending.
    pub(crate) fn queue_add(&self, pool: &FramePool, folio: &Folio) {
        folio.set_lru_pending();
        self.queue(pool, Op::Add, folio);
    }

    /// Takes `folio` off its list if it is on one. Whoever sets a folio's `mapping` to 0 calls
    /// this afterwards (see the module documentation).
    pub(crate) fn lru_del(&self, pool: &FramePool, folio: &Folio) {
        self.policy().lru_del(self, pool, folio);
    }

    /// Unlinks `folio` under the LRU lock if it is on a list.
    pub(crate) fn unlink(&self, pool: &FramePool, folio: &Folio) {
        let mut g = self.lruvec.lock(pool);
        if folio.is_lru() {
            g.del(folio);
        }
    }

    /// Marks an access to `folio`, which the caller holds a reference to and whose flags it
    /// read as `flags`; see the module documentation. Inline and write-free on the hot path (a
    /// hit of an active folio used before): the first access sets `REFERENCED`, a later one
    /// does what the policy's [`AccessRule`] says, inline.
    #[doc(alias = "folio_mark_accessed")]
    #[inline]
    pub(crate) fn mark_accessed(&self, pool: &FramePool, folio: &Folio, flags: u64) {
        if flags & REFERENCED == 0 {
            folio.set_referenced();
            return;
        }
        match self.access_rule {
            AccessRule::Nothing => {}
            AccessRule::CountUses => {
                if flags & (REFS_MASK | WORKINGSET) != REFS_MASK | WORKINGSET {
                    folio.inc_refs();
                }
            }
            AccessRule::Activate => {
                if flags & (ACTIVE | UNEVICTABLE) == 0 {
                    self.activate_on_access(pool, folio);
                }
            }
        }
    }

    /// The second access of an inactive folio (the classic lists): queued for activation.
    #[cold]
    pub(crate) fn activate_on_access(&self, pool: &FramePool, folio: &Folio) {
        if folio.is_lru() {
            self.queue(pool, Op::Activate, folio);
        } else if folio.is_lru_pending() {
            // Waiting in an add batch: it goes straight to the active list when the batch is
            // drained. Under the LRU lock, so that no drain links it while its flags change.
            let _lists = self.lruvec.lock(pool);
            if folio.flags() & (LRU | LRU_PENDING) == LRU_PENDING {
                folio.set_active();
            }
        }
        folio.clear_referenced();
        self.workingset_activation(folio.nr_frames());
    }

    /// After the write-back of `folio` that reclaim was waiting for (`RECLAIM` was set and has
    /// just been cleared): moves it to the inactive tail, to be reclaimed next, unless it is
    /// locked, dirty again, unevictable or off the lists. The kernel's
    /// `folio_rotate_reclaimable`.
    #[doc(alias = "folio_rotate_reclaimable")]
    pub(crate) fn rotate_reclaimable(&self, pool: &FramePool, folio: &Folio) {
        if folio.is_locked() || folio.is_dirty() || folio.is_unevictable() || !folio.is_lru() {
            return;
        }
        self.policy().rotate_reclaimable(self, pool, folio);
    }

    /// Queues `folio` to be rotated.
    pub(crate) fn queue_rotate(&self, pool: &FramePool, folio: &Folio) {
        self.queue(pool, Op::Rotate, folio);
    }

    /// Queues an add entry for `folio` without marking it pending: what an entry left over
    /// from an earlier life of the descriptor looks like (for the loom models).
    #[cfg(loom)]
    pub(crate) fn queue_stale_add(&self, pool: &FramePool, folio: &Folio) {
        self.queue(pool, Op::Add, folio);
    }

    /// Queues `folio` for `op`; applies the batch when it is full.
    fn queue(&self, pool: &FramePool, op: Op, folio: &Folio) {
        let held = Held(NonNull::from(folio));
        let full = {
            let mut shard = self.batches.mine();
            let list = shard.list(op);
            if list.push(held) {
                std::mem::take(list)
            } else {
                return;
            }
        };
        self.apply(pool, op, full);
    }

    /// Applies a batch under the LRU lock.
    fn apply(&self, pool: &FramePool, op: Op, batch: Batch) {
        if batch.is_empty() {
            return;
        }
        let mut g = self.lruvec.lock(pool);
        for f in batch.iter() {
            self.apply_one(&mut g, op, f);
        }
        drop(g);
        self.counters.count(Event::LruBatchDrains);
    }

    fn apply_one(&self, g: &mut LruGuard<'_>, op: Op, f: &Folio) {
        let flags = f.flags();
        let nr = f.nr_frames() as u64;
        match op {
            Op::Add => {
                if flags & LRU_PENDING == 0 {
                    // A stale entry: this folio was linked already, or freed, or is in a later
                    // life that has not been queued.
                    return;
                }
                f.clear_lru_pending();
                // Removed by its owner since it was queued: it stays off the lists.
                if flags & (HEAD | LRU) == HEAD && f.mapping() != 0 {
                    g.add_new(f);
                }
            }
            Op::Activate => {
                if f.is_lru() && f.flags() & (ACTIVE | UNEVICTABLE) == 0 {
                    self.policy().activate(self, g, f);
                }
            }
            Op::Rotate => {
                if f.is_lru() && !f.is_unevictable() {
                    self.policy().rotate(g, f);
                    self.counters.add(Event::PgRotated, nr);
                }
            }
        }
    }

    /// Drains every shard's batches (the kernel's `lru_add_drain_all`): additions first, so
    /// that activations and rotations find their folios on the lists.
    #[doc(alias = "lru_add_drain_all")]
    pub(crate) fn drain_all(&self, pool: &FramePool) {
        for op in [Op::Add, Op::Activate, Op::Rotate] {
            for shard in self.batches.shards.iter() {
                let batch = {
                    let mut s = shard.lock();
                    std::mem::take(s.list(op))
                };
                self.apply(pool, op, batch);
            }
        }
    }
}
