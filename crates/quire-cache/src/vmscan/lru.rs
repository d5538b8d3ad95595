//! The LRU lists of one cache (the kernel's `lruvec`): intrusive doubly linked lists of folios
//! through the descriptors' `lru_prev` / `lru_next` links, behind one lock — the five classic
//! lists, and the generation lists of the multi-generational LRU ([`super::lru_gen`]).
//!
//! | list | holds |
//! |---|---|
//! | [`Lru::InactiveAnon`], [`Lru::ActiveAnon`] | anonymous folios (none until anonymous memory exists) |
//! | [`Lru::InactiveFile`] | file folios used once, or deactivated; reclaim takes from its tail |
//! | [`Lru::ActiveFile`] | file folios used twice, or judged part of the working set at refault |
//! | [`Lru::Unevictable`] | folios that may not be reclaimed (mlocked) |
//!
//! | generation lists (`NR_GEN_LISTS`, per type: one per generation, probation and its fresh part) | folios of the multi-generational LRU: anonymous or file, generation `seq % MAX_NR_GENS`, or on probation |
//!
//! Which list a folio is on follows from its flags ([`Lru::of`]: `UNEVICTABLE`, `ANON`,
//! `ACTIVE`; and, before those two, the generation bits when they are set), as in the kernel;
//! those flags change only while the folio is off every list
//! (isolated, or in a batch waiting to be added) or under the lock, so unlinking always finds
//! the list the folio was linked on. `LRU` is set exactly while the folio is linked, and only
//! the lock holder changes it. New folios go to the head of a list; reclaim takes from the tail.
//! Lists count frames, like the kernel's `NR_LRU_BASE + lru` counters; the counts are also
//! published in atomics for lock-free readers (the refault test, watermarks, statistics).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sync::loom::{Mutex, MutexGuard};

use super::lru_gen::{GenState, MAX_NR_GENS};
#[cfg(any(feature = "bench-internals", loom))]
use super::lru_gen::{FRESH_GEN, PROBATION_GEN};
use super::policy::Policy;
use crate::mem::folio::{Folio, ACTIVE, ANON, GEN_MASK, GEN_SHIFT, PROBATION, UNEVICTABLE};
use crate::mem::pool::FramePool;

/// No folio (an empty link).
const NIL: u32 = u32::MAX;

/// One of a cache's LRU lists (the kernel's `enum lru_list`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lru {
    /// Anonymous folios on probation.
    InactiveAnon = 0,
    /// Anonymous folios in use.
    ActiveAnon = 1,
    /// File folios on probation: used once, or deactivated.
    InactiveFile = 2,
    /// File folios in use: used twice, or refaulted within the working set.
    ActiveFile = 3,
    /// Folios reclaim may not take.
    Unevictable = 4,
}

/// How many LRU lists a cache has.
pub const NR_LRU_LISTS: usize = 5;

/// How many generation lists: one per type (anonymous, file) and generation, and each type's
/// probation list in two parts, the older (generation bits `PROBATION_GEN + 1`) and the fresh
/// one (`FRESH_GEN + 1`).
pub(crate) const NR_GEN_LISTS: usize = 2 * GEN_LISTS_PER_TYPE;

/// Generation lists per type: the generations, probation and its fresh part.
const GEN_LISTS_PER_TYPE: usize = MAX_NR_GENS + 2;

/// Every list of an [`Lruvec`]: the classic ones, then the generation lists.
pub(crate) const NR_LISTS: usize = NR_LRU_LISTS + NR_GEN_LISTS;

/// The index of the generation list of `type_` (0 anonymous, 1 file) and generation `gen`.
#[inline]
pub(crate) fn gen_list(type_: usize, gen: usize) -> usize {
    NR_LRU_LISTS + type_ * GEN_LISTS_PER_TYPE + gen
}

/// The list a folio with these flags is linked on: its generation list when it has a
/// generation, else the classic list [`Lru::of`] names.
#[inline]
pub(crate) fn list_of(flags: u64) -> usize {
    let g = (flags & GEN_MASK) >> GEN_SHIFT;
    if g != 0 && flags & UNEVICTABLE == 0 {
        gen_list(usize::from(flags & ANON == 0), g as usize - 1)
    } else {
        Lru::of(flags) as usize
    }
}

/// A list's name: the classic names, and `gen<g>_anon` / `gen<g>_file`.
#[cfg(any(feature = "bench-internals", loom))]
pub(crate) fn list_name(l: usize) -> String {
    if l < NR_LRU_LISTS {
        Lru::ALL[l].name().to_string()
    } else {
        let g = l - NR_LRU_LISTS;
        let t = if g / GEN_LISTS_PER_TYPE == 0 {
            "anon"
        } else {
            "file"
        };
        match g % GEN_LISTS_PER_TYPE {
            PROBATION_GEN => format!("probation_{t}"),
            FRESH_GEN => format!("fresh_{t}"),
            g => format!("gen{g}_{t}"),
        }
    }
}

impl Lru {
    /// Every list, in index order.
    pub const ALL: [Lru; NR_LRU_LISTS] = [
        Lru::InactiveAnon,
        Lru::ActiveAnon,
        Lru::InactiveFile,
        Lru::ActiveFile,
        Lru::Unevictable,
    ];

    /// The list a folio with these flags belongs on (the kernel's `folio_lru_list`).
    #[inline]
    pub fn of(flags: u64) -> Lru {
        if flags & UNEVICTABLE != 0 {
            return Lru::Unevictable;
        }
        match (flags & ANON != 0, flags & ACTIVE != 0) {
            (true, false) => Lru::InactiveAnon,
            (true, true) => Lru::ActiveAnon,
            (false, false) => Lru::InactiveFile,
            (false, true) => Lru::ActiveFile,
        }
    }

    /// The list's name, as /proc/meminfo spells it.
    pub fn name(self) -> &'static str {
        match self {
            Lru::InactiveAnon => "inactive_anon",
            Lru::ActiveAnon => "active_anon",
            Lru::InactiveFile => "inactive_file",
            Lru::ActiveFile => "active_file",
            Lru::Unevictable => "unevictable",
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Ends {
    head: u32,
    tail: u32,
}

/// The lists themselves, only reached through [`Lruvec::lock`].
#[derive(Debug)]
pub(crate) struct Lists {
    ends: [Ends; NR_LISTS],
    frames: [usize; NR_LISTS],
    /// The generations' sequence numbers (used by the multi-generational LRU only).
    pub(crate) gen: GenState,
}

/// The lists and their lock; see the [module documentation](self).
#[derive(Debug)]
pub(crate) struct Lruvec {
    lists: Mutex<Lists>,
    /// `Lists::frames`, published after every change.
    sizes: [AtomicUsize; NR_LISTS],
    /// The reclaim policy, which says where a folio is linked.
    policy: Box<dyn Policy>,
}

/// The lists, locked. Dropping it publishes the sizes.
pub(crate) struct LruGuard<'a> {
    pub(crate) lists: MutexGuard<'a, Lists>,
    vec: &'a Lruvec,
    pool: &'a FramePool,
}

impl Lruvec {
    /// Lists for a cache run by `policy`; `gen` is the generations' state (which only the
    /// multi-generational LRU uses).
    pub(crate) fn new(gen: GenState, policy: Box<dyn Policy>) -> Lruvec {
        Lruvec {
            lists: Mutex::new(Lists {
                ends: [Ends {
                    head: NIL,
                    tail: NIL,
                }; NR_LISTS],
                frames: [0; NR_LISTS],
                gen,
            }),
            sizes: Default::default(),
            policy,
        }
    }

    /// The reclaim policy.
    #[inline]
    pub(crate) fn policy(&self) -> &dyn Policy {
        &*self.policy
    }

    /// Takes the LRU lock (the kernel's `lruvec->lru_lock`).
    pub(crate) fn lock<'a>(&'a self, pool: &'a FramePool) -> LruGuard<'a> {
        LruGuard {
            lists: self.lists.lock(),
            vec: self,
            pool,
        }
    }

    /// Frames on `lru` at the last change (lock-free).
    #[inline]
    pub(crate) fn size(&self, lru: Lru) -> usize {
        self.sizes[lru as usize].load(Ordering::Relaxed)
    }

    /// Frames on list `l` (any list, by index) at the last change (lock-free).
    #[inline]
    pub(crate) fn list_size(&self, l: usize) -> usize {
        self.sizes[l].load(Ordering::Relaxed)
    }
}

impl Drop for LruGuard<'_> {
    fn drop(&mut self) {
        for (i, n) in self.lists.frames.iter().enumerate() {
            if self.vec.sizes[i].load(Ordering::Relaxed) != *n {
                self.vec.sizes[i].store(*n, Ordering::Relaxed);
            }
        }
    }
}

impl<'a> LruGuard<'a> {
    fn folio(&self, pfn: u32) -> &'a Folio {
        self.pool
            .folio(pfn as usize)
            .expect("LRU link outside the pool")
    }

    fn pfn(&self, folio: &Folio) -> u32 {
        self.pool.pfn_of_desc(folio) as u32
    }

    /// The pool the lists' folios are in.
    pub(crate) fn pool(&self) -> &'a FramePool {
        self.pool
    }

    /// Links `folio` (off every list, `LRU` clear) where the policy puts it ([`Policy::link`]:
    /// the list its flags name, or for the multi-generational LRU a generation) — at the head,
    /// or at the tail with `tail` — and sets `LRU`. The kernel's `lruvec_add_folio(_tail)`.
    #[doc(alias = "lruvec_add_folio")]
    pub(crate) fn add(&mut self, folio: &Folio, tail: bool) {
        debug_assert!(!folio.is_lru(), "adding a folio that is on a list");
        let policy = self.vec.policy();
        policy.link(self, folio, tail);
    }

    /// Links a folio its owner has just added (the batch drain of `folio_add_lru`) where the
    /// policy puts a new one ([`Policy::add_new`]).
    pub(crate) fn add_new(&mut self, folio: &Folio) {
        debug_assert!(!folio.is_lru(), "adding a folio that is on a list");
        let policy = self.vec.policy();
        policy.add_new(self, folio);
    }

    /// Links `folio` onto list `l` (at the head, or the tail) and sets `LRU`.
    pub(crate) fn link(&mut self, folio: &Folio, l: usize, tail: bool) {
        let pfn = self.pfn(folio);
        let ends = self.lists.ends[l];
        if tail {
            folio.lru_prev.store(ends.tail, Ordering::Relaxed);
            folio.lru_next.store(NIL, Ordering::Relaxed);
            if ends.tail != NIL {
                self.folio(ends.tail).lru_next.store(pfn, Ordering::Relaxed);
            } else {
                self.lists.ends[l].head = pfn;
            }
            self.lists.ends[l].tail = pfn;
        } else {
            folio.lru_prev.store(NIL, Ordering::Relaxed);
            folio.lru_next.store(ends.head, Ordering::Relaxed);
            if ends.head != NIL {
                self.folio(ends.head).lru_prev.store(pfn, Ordering::Relaxed);
            } else {
                self.lists.ends[l].tail = pfn;
            }
            self.lists.ends[l].head = pfn;
        }
        self.lists.frames[l] += folio.nr_frames();
        folio.set_lru();
    }

    /// Unlinks `folio` (which is on the list its flags name) and clears `LRU` and its
    /// generation. The kernel's `lruvec_del_folio`.
    #[doc(alias = "lruvec_del_folio")]
    pub(crate) fn del(&mut self, folio: &Folio) {
        self.unlink(folio);
        if folio.gen_bits() != 0 {
            folio.set_gen_bits(0);
        }
    }

    /// Unlinks `folio` (which is on the list its flags name) and clears `LRU`; returns the list
    /// it was on. Its generation bits stay.
    pub(crate) fn unlink(&mut self, folio: &Folio) -> usize {
        debug_assert!(folio.is_lru(), "deleting a folio that is on no list");
        let l = list_of(folio.flags());
        let pfn = self.pfn(folio);
        let prev = folio.lru_prev.load(Ordering::Relaxed);
        let next = folio.lru_next.load(Ordering::Relaxed);
        if prev != NIL {
            self.folio(prev).lru_next.store(next, Ordering::Relaxed);
        } else {
            debug_assert_eq!(self.lists.ends[l].head, pfn, "list head");
            self.lists.ends[l].head = next;
        }
        if next != NIL {
            self.folio(next).lru_prev.store(prev, Ordering::Relaxed);
        } else {
            debug_assert_eq!(self.lists.ends[l].tail, pfn, "list tail");
            self.lists.ends[l].tail = prev;
        }
        folio.lru_prev.store(NIL, Ordering::Relaxed);
        folio.lru_next.store(NIL, Ordering::Relaxed);
        self.lists.frames[l] -= folio.nr_frames();
        folio.clear_lru();
        l
    }

    /// Moves `folio` (on its list) to the head of the same list.
    pub(crate) fn move_to_head(&mut self, folio: &Folio) {
        let l = self.unlink(folio);
        self.link(folio, l, false);
    }

    /// Moves `folio` (on a generation or probation list) to generation `gen` of its type, at
    /// the head (or the tail). A folio leaving probation this way spends its `PROBATION` mark,
    /// as [`LruGuard::add`] does for one put back.
    pub(crate) fn move_to_gen(&mut self, folio: &Folio, gen: usize, tail: bool) {
        debug_assert!(
            gen < MAX_NR_GENS,
            "move_to_gen to a list that is no generation"
        );
        if folio.flags() & PROBATION != 0 {
            folio.clear_probation();
        }
        self.unlink(folio);
        folio.set_gen_bits(gen as u64 + 1);
        let l = list_of(folio.flags());
        self.link(folio, l, tail);
    }

    /// The folio at the tail of list `l` (any list, by index), if any.
    pub(crate) fn tail_of(&self, l: usize) -> Option<&'a Folio> {
        let t = self.lists.ends[l].tail;
        (t != NIL).then(|| self.folio(t))
    }

    /// Frames on list `l` now.
    pub(crate) fn frames_of(&self, l: usize) -> usize {
        self.lists.frames[l]
    }

    /// The folio at the tail of `lru`, if any.
    pub(crate) fn tail(&self, lru: Lru) -> Option<&'a Folio> {
        let t = self.lists.ends[lru as usize].tail;
        (t != NIL).then(|| self.folio(t))
    }

    /// Every folio on list `l` (by index), head to tail (for tests and the invariant check).
    #[cfg(any(feature = "bench-internals", loom))]
    pub(crate) fn walk(&self, l: usize) -> Vec<&'a Folio> {
        let mut out = Vec::new();
        let mut at = self.lists.ends[l].head;
        while at != NIL {
            let f = self.folio(at);
            out.push(f);
            at = f.lru_next.load(Ordering::Relaxed);
        }
        out
    }

    /// Checks the lists: links agree both ways, every folio is a head with `LRU` set and on the
    /// list its flags name, the frame counts add up, and the policy's own rules hold
    /// ([`Policy::check`]). Returns the frames on each list.
    #[cfg(any(feature = "bench-internals", loom))]
    pub(crate) fn check(&self) -> Result<[usize; NR_LISTS], String> {
        let mut out = [0; NR_LISTS];
        for (l, counted) in out.iter_mut().enumerate() {
            let name = list_name(l);
            let mut prev = NIL;
            let mut at = self.lists.ends[l].head;
            let mut frames = 0;
            while at != NIL {
                let f = self.folio(at);
                let flags = f.flags();
                if !f.is_head() || flags & crate::mem::folio::LRU == 0 {
                    return Err(format!("{name}: frame {at} is not a listed folio"));
                }
                if list_of(flags) != l {
                    return Err(format!(
                        "{name}: frame {at} belongs on {}",
                        list_name(list_of(flags))
                    ));
                }
                if f.lru_prev.load(Ordering::Relaxed) != prev {
                    return Err(format!("{name}: frame {at} has a bad back link"));
                }
                frames += f.nr_frames();
                prev = at;
                at = f.lru_next.load(Ordering::Relaxed);
            }
            if self.lists.ends[l].tail != prev {
                return Err(format!("{name}: bad tail"));
            }
            if frames != self.lists.frames[l] {
                return Err(format!(
                    "{name}: {frames} frames linked, {} counted",
                    self.lists.frames[l]
                ));
            }
            *counted = frames;
        }
        self.vec.policy().check(self, &out)?;
        Ok(out)
    }
}
