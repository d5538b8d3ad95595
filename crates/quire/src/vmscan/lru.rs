//! The LRU lists of one cache (the kernel's `lruvec`): five intrusive doubly linked lists of
//! folios through the descriptors' `lru_prev` / `lru_next` links, behind one lock.
//!
//! | list | holds |
//! |---|---|
//! | [`Lru::InactiveAnon`], [`Lru::ActiveAnon`] | anonymous folios (none until anonymous memory exists) |
//! | [`Lru::InactiveFile`] | file folios used once, or deactivated; reclaim takes from its tail |
//! | [`Lru::ActiveFile`] | file folios used twice, or judged part of the working set at refault |
//! | [`Lru::Unevictable`] | folios that may not be reclaimed (mlocked) |
//!
//! Which list a folio is on follows from its flags ([`Lru::of`]: `UNEVICTABLE`, `ANON`,
//! `ACTIVE`), as in the kernel; those flags change only while the folio is off every list
//! (isolated, or in a batch waiting to be added) or under the lock, so unlinking always finds
//! the list the folio was linked on. `LRU` is set exactly while the folio is linked, and only
//! the lock holder changes it. New folios go to the head of a list; reclaim takes from the tail.
//! Lists count frames, like the kernel's `NR_LRU_BASE + lru` counters; the counts are also
//! published in atomics for lock-free readers (the refault test, watermarks, statistics).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sync::loom::{Mutex, MutexGuard};

use crate::mem::folio::{Folio, ACTIVE, ANON, LRU, UNEVICTABLE};
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
    ends: [Ends; NR_LRU_LISTS],
    frames: [usize; NR_LRU_LISTS],
}

/// The lists and their lock; see the [module documentation](self).
#[derive(Debug)]
pub(crate) struct Lruvec {
    lists: Mutex<Lists>,
    /// `Lists::frames`, published after every change.
    sizes: [AtomicUsize; NR_LRU_LISTS],
}

/// The lists, locked. Dropping it publishes the sizes.
pub(crate) struct LruGuard<'a> {
    lists: MutexGuard<'a, Lists>,
    vec: &'a Lruvec,
    pool: &'a FramePool,
}

impl Lruvec {
    pub(crate) fn new() -> Lruvec {
        Lruvec {
            lists: Mutex::new(Lists {
                ends: [Ends {
                    head: NIL,
                    tail: NIL,
                }; NR_LRU_LISTS],
                frames: [0; NR_LRU_LISTS],
            }),
            sizes: Default::default(),
        }
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

    /// Links `folio` (off every list, `LRU` clear) onto the list its flags name — at the head,
    /// or at the tail with `tail` — and sets `LRU`. The kernel's `lruvec_add_folio(_tail)`.
    #[doc(alias = "lruvec_add_folio")]
    pub(crate) fn add(&mut self, folio: &Folio, tail: bool) {
        debug_assert!(!folio.is_lru(), "adding a folio that is on a list");
        let lru = Lru::of(folio.flags());
        let pfn = self.pfn(folio);
        let l = lru as usize;
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

    /// Unlinks `folio` (which is on the list its flags name) and clears `LRU`. The kernel's
    /// `lruvec_del_folio`.
    #[doc(alias = "lruvec_del_folio")]
    pub(crate) fn del(&mut self, folio: &Folio) {
        debug_assert!(folio.is_lru(), "deleting a folio that is on no list");
        let l = Lru::of(folio.flags()) as usize;
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
    }

    /// Moves `folio` (on its list) to the head of the same list.
    pub(crate) fn move_to_head(&mut self, folio: &Folio) {
        self.del(folio);
        self.add(folio, false);
    }

    /// The folio at the tail of `lru`, if any.
    pub(crate) fn tail(&self, lru: Lru) -> Option<&'a Folio> {
        let t = self.lists.ends[lru as usize].tail;
        (t != NIL).then(|| self.folio(t))
    }

    /// Every folio on `lru`, head to tail (for tests and the invariant check).
    pub(crate) fn walk(&self, lru: Lru) -> Vec<&'a Folio> {
        let mut out = Vec::new();
        let mut at = self.lists.ends[lru as usize].head;
        while at != NIL {
            let f = self.folio(at);
            out.push(f);
            at = f.lru_next.load(Ordering::Relaxed);
        }
        out
    }

    /// Checks the lists: links agree both ways, every folio is a head with `LRU` set and on the
    /// list its flags name, and the frame counts add up. Returns the frames on each list.
    pub(crate) fn check(&self) -> Result<[usize; NR_LRU_LISTS], String> {
        let mut out = [0; NR_LRU_LISTS];
        for lru in Lru::ALL {
            let mut prev = NIL;
            let mut at = self.lists.ends[lru as usize].head;
            let mut frames = 0;
            while at != NIL {
                let f = self.folio(at);
                let flags = f.flags();
                if !f.is_head() || flags & LRU == 0 {
                    return Err(format!("{}: frame {at} is not a listed folio", lru.name()));
                }
                if Lru::of(flags) != lru {
                    return Err(format!(
                        "{}: frame {at} belongs on {}",
                        lru.name(),
                        Lru::of(flags).name()
                    ));
                }
                if f.lru_prev.load(Ordering::Relaxed) != prev {
                    return Err(format!("{}: frame {at} has a bad back link", lru.name()));
                }
                frames += f.nr_frames();
                prev = at;
                at = f.lru_next.load(Ordering::Relaxed);
            }
            if self.lists.ends[lru as usize].tail != prev {
                return Err(format!("{}: bad tail", lru.name()));
            }
            if frames != self.lists.frames[lru as usize] {
                return Err(format!(
                    "{}: {frames} frames linked, {} counted",
                    lru.name(),
                    self.lists.frames[lru as usize]
                ));
            }
            out[lru as usize] = frames;
        }
        Ok(out)
    }
}
