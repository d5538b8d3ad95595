//! What a reclaim policy decides, and the table of policies a cache can be built with.
//!
//! Reclaim's machinery is shared by every policy: the LRU lock and lists ([`super::lru`]), the
//! folio batches ([`super::swap`]), shadows, refault distances and the shadow shrinker
//! ([`super::workingset`]), kswapd and the watermarks ([`super::reclaim`]). A policy is the
//! part that differs — where a folio goes when it is added or put back, what an access does,
//! what a round of reclaim isolates, what shadow an eviction leaves and how a refault is
//! judged — behind one trait, [`Policy`], with one implementation per file:
//!
//! | name | file | policy |
//! |---|---|---|
//! | `lru-gen` | [`super::lru_gen`] | the multi-generational LRU with its loop protection (the default) |
//! | `lru` | [`super::two_list`] | the classic active and inactive lists |
//! | `clock` | [`super::clock`] | a clock over the memmap, run by the allocating thread |
//!
//! A cache picks one by name ([`ReclaimPolicy::by_name`], `CacheConfig::with_reclaim`); a new
//! policy is a file implementing [`Policy`] and one line in [`POLICIES`]. Where a method has a
//! default, it is the classic lists' behaviour that another policy shares (`activate`'s does
//! nothing: only the classic lists queue activations).

use std::fmt;
use std::str::FromStr;

use super::lru::{list_of, LruGuard};
use super::workingset::Refault;
use super::{Owners, VmConfig, Vmscan, NR_LRU_LISTS};
use crate::mem::folio::{Folio, FolioRef};
use crate::mem::pool::FramePool;

/// What a repeat access does ([`Policy::access_rule`]), applied inline on the read-hit path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AccessRule {
    /// Nothing: `REFERENCED` is all the policy reads (the clock's hand).
    Nothing,
    /// The use is counted in the refs bits, then `WORKINGSET`; nothing is written once both
    /// are full (the generations' tiers).
    CountUses,
    /// An inactive, evictable folio is queued for activation; an active one writes nothing
    /// (the classic lists).
    Activate,
}

/// One reclaim policy of a cache; see the [module documentation](self). Every method gets the
/// shared machinery as `vm`; a policy keeps only its own state (the clock's hand, the
/// generations' feedback).
pub(crate) trait Policy: fmt::Debug + Send + Sync {
    /// A folio its owner has just made visible (the kernel's `folio_add_lru`): queued to be
    /// added to the lists. The clock keeps no lists and does nothing.
    fn lru_add(&self, vm: &Vmscan, pool: &FramePool, folio: &Folio) {
        vm.queue_add(pool, folio);
    }

    /// A folio its owner removed (`mapping` already 0): unlinked if it is on a list.
    fn lru_del(&self, vm: &Vmscan, pool: &FramePool, folio: &Folio) {
        vm.unlink(pool, folio);
    }

    /// Links `folio` (off every list) under the LRU lock, at the head or the tail: onto the
    /// list its flags name. Every link outside reclaim's own list moves goes through here (a
    /// putback after reclaim, a batch's activation or rotation, an mlock change), so a policy
    /// that gives folios a place of its own (a generation) gives it here.
    fn link(&self, g: &mut LruGuard<'_>, folio: &Folio, tail: bool) {
        g.link(folio, list_of(folio.flags()), tail);
    }

    /// Links a folio its owner has just added (the drain of an add batch): where it goes,
    /// including what its refault's shadow said (flags set by [`Policy::refault`]).
    fn add_new(&self, g: &mut LruGuard<'_>, folio: &Folio) {
        self.link(g, folio, false);
    }

    /// What an access to a folio whose `REFERENCED` is already set does (a first access only
    /// sets it, for every policy): the second-access path of `folio_mark_accessed`. Read once
    /// when the cache is made and applied inline on the read-hit path, so that a hit costs a
    /// compare and at most one flag update, with no indirect call. A policy whose accesses
    /// must do something none of the rules does adds a rule: the read-hit path is the one
    /// place where a policy's choice is not a method.
    fn access_rule(&self) -> AccessRule;

    /// Applies a queued activation under the LRU lock (only policies whose accesses queue them).
    fn activate(&self, vm: &Vmscan, g: &mut LruGuard<'_>, folio: &Folio) {
        let _ = (vm, g, folio);
    }

    /// After write-back that reclaim waited for (`RECLAIM` just cleared), of a folio that is
    /// clean, unlocked, evictable and listed: queued to be rotated. The clock keeps no lists.
    fn rotate_reclaimable(&self, vm: &Vmscan, pool: &FramePool, folio: &Folio) {
        vm.queue_rotate(pool, folio);
    }

    /// Links a folio reclaim isolated but could not free because someone else held it (locked,
    /// or referenced beyond its owner's index), under the LRU lock. By default as any putback:
    /// at the head of its list.
    fn link_rejected(&self, g: &mut LruGuard<'_>, folio: &Folio) {
        g.add(folio, false);
    }

    /// Applies a queued rotation under the LRU lock: to where reclaim takes from next (for the
    /// classic lists, the inactive tail).
    fn rotate(&self, g: &mut LruGuard<'_>, folio: &Folio) {
        g.del(folio);
        folio.clear_active();
        g.add(folio, true);
    }

    /// One round of reclaim wanting `nr_to_reclaim` frames: which folios it isolates, and
    /// where the kept ones go back. Returns the frames freed. (The shadow shrinker runs after
    /// it, for every policy.)
    fn shrink(&self, vm: &Vmscan, pool: &FramePool, owners: &dyn Owners, nr: usize) -> usize;

    /// A dirty folio or one under write-back that reclaim keeps (`RECLAIM` just set): where
    /// it waits for its write-back. The classic lists park it on the active list.
    fn park_for_writeback(&self, folio: &Folio) {
        folio.set_active();
    }

    /// Whether folios are on the lists at all: `MADV_PAGEOUT` takes anonymous folios off them.
    fn keeps_lists(&self) -> bool {
        true
    }

    /// The shadow to leave for `folio`, evicted now; advances the non-resident age. The
    /// kernel's `workingset_eviction`.
    fn eviction(&self, vm: &Vmscan, folio: &Folio) -> u64 {
        vm.classic_eviction(folio)
    }

    /// `folio`, on no list yet, is read in over `shadow`: counts the refault and marks (in its
    /// flags) where it is to be added. The kernel's `workingset_refault`.
    fn refault(&self, vm: &Vmscan, folio: &Folio, shadow: u64) -> Refault;

    /// Allocation's fast path: a folio of `order` (or smaller) without reclaiming in this
    /// thread, or `None`. The list policies take free frames above the min watermark and wake
    /// kswapd below the low one.
    fn alloc_fast<'p>(&self, vm: &Vmscan, pool: &'p FramePool, order: u32) -> Option<FolioRef<'p>> {
        vm.alloc_watermark(pool, order)
    }

    /// Whether background reclaim (kswapd) runs for this policy.
    fn background_reclaim(&self) -> bool {
        true
    }

    /// Adds to `out` what the policy's own lists hold, shown as the classic lists.
    fn list_sizes(&self, vm: &Vmscan, out: &mut [usize; NR_LRU_LISTS]) {
        let _ = (vm, out);
    }

    /// The multi-generational LRU's state for `stats()`; `None` for the other policies.
    fn lru_gen_stats(&self, vm: &Vmscan, pool: &FramePool) -> Option<super::LruGenStats> {
        let _ = (vm, pool);
        None
    }

    /// Checks what the policy keeps on the lists, given the frames counted on each (under the
    /// LRU lock; for tests). The classic lists never use the generation lists.
    #[cfg(any(feature = "bench-internals", loom))]
    fn check(
        &self,
        g: &LruGuard<'_>,
        frames: &[usize; super::lru::NR_LISTS],
    ) -> Result<(), String> {
        let _ = g;
        if frames[NR_LRU_LISTS..].iter().any(|&n| n > 0) {
            return Err("generation lists used without the multi-generational LRU".into());
        }
        Ok(())
    }

    /// The policy as `Any`, for the loom models that reach into one.
    #[cfg(loom)]
    fn as_any(&self) -> &dyn std::any::Any;
}

/// One line of [`POLICIES`]: a policy's name and how a cache builds it.
pub(crate) struct Registration {
    /// The name a user chooses it by.
    pub(crate) name: &'static str,
    /// Builds the policy's state for one cache.
    pub(crate) new: fn(&VmConfig) -> Box<dyn Policy>,
}

/// Every policy a cache can be built with; the first is the default. A new policy is one file
/// and one line here.
pub(crate) const POLICIES: &[Registration] = &[
    Registration {
        name: "lru-gen",
        new: super::lru_gen::MultiGen::boxed,
    },
    Registration {
        name: "lru",
        new: super::two_list::TwoList::boxed,
    },
    Registration {
        name: "clock",
        new: super::clock::Clock::boxed,
    },
];

/// Which reclaim a cache runs: a handle on one of the registered policies, chosen by name
/// ([`ReclaimPolicy::by_name`], [`FromStr`]) or through the constants for the three built in.
/// Its [`Display`](fmt::Display) is its name.
///
/// ```
/// use quire::vmscan::ReclaimPolicy;
///
/// let clock: ReclaimPolicy = "clock".parse().unwrap();
/// assert_eq!(clock, ReclaimPolicy::Clock);
/// assert_eq!(ReclaimPolicy::default().name(), "lru-gen");
/// assert!(ReclaimPolicy::names().any(|n| n == "lru"));
/// assert!(ReclaimPolicy::by_name("arc").is_err());
/// ```
#[derive(Clone, Copy)]
pub struct ReclaimPolicy(&'static Registration);

// Written as enum variants are, so that `ReclaimPolicy::MultiGen` reads as the other switches
// of the cache do (`WaitPolicy::Exact`, `RefPolicy::Lockref`).
#[allow(non_upper_case_globals)]
impl ReclaimPolicy {
    /// `"lru-gen"`: the multi-generational LRU (`lru_gen`): generations, tiers with refault
    /// feedback, and (with `CacheConfig::loop_protection`) adaptive insertion; batches and
    /// background reclaim as [`ReclaimPolicy::Lru`]. The default.
    pub const MultiGen: ReclaimPolicy = ReclaimPolicy(&POLICIES[0]);
    /// `"lru"`: active and inactive lists, batches, background reclaim.
    pub const Lru: ReclaimPolicy = ReclaimPolicy(&POLICIES[1]);
    /// `"clock"`: the pre-LRU reclaim, a clock over the memmap run by the allocating thread.
    pub const Clock: ReclaimPolicy = ReclaimPolicy(&POLICIES[2]);

    /// The registered policy called `name`.
    pub fn by_name(name: &str) -> Result<ReclaimPolicy, UnknownReclaimPolicy> {
        POLICIES
            .iter()
            .find(|r| r.name == name)
            .map(ReclaimPolicy)
            .ok_or_else(|| UnknownReclaimPolicy {
                name: name.to_string(),
            })
    }

    /// The names of every registered policy, the default first.
    pub fn names() -> impl Iterator<Item = &'static str> {
        POLICIES.iter().map(|r| r.name)
    }

    /// This policy's name.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// Builds this policy's state for one cache.
    pub(crate) fn build(self, c: &VmConfig) -> Box<dyn Policy> {
        (self.0.new)(c)
    }
}

impl Default for ReclaimPolicy {
    fn default() -> ReclaimPolicy {
        ReclaimPolicy(&POLICIES[0])
    }
}

impl PartialEq for ReclaimPolicy {
    fn eq(&self, other: &ReclaimPolicy) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for ReclaimPolicy {}

impl fmt::Debug for ReclaimPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ReclaimPolicy").field(&self.0.name).finish()
    }
}

impl fmt::Display for ReclaimPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

impl FromStr for ReclaimPolicy {
    type Err = UnknownReclaimPolicy;

    fn from_str(name: &str) -> Result<ReclaimPolicy, UnknownReclaimPolicy> {
        ReclaimPolicy::by_name(name)
    }
}

/// A reclaim policy was asked for by a name no policy is registered under.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown reclaim policy {name:?} (known: {known})", known = known_names())]
pub struct UnknownReclaimPolicy {
    /// The name asked for.
    pub name: String,
}

fn known_names() -> String {
    ReclaimPolicy::names().collect::<Vec<_>>().join(", ")
}
