//! The lock-free read side: walks from the head under an epoch guard, the iterators and the
//! read cursor.
//!
//! Rules every reader here keeps:
//! - slots and the head are loaded with acquire ordering; a node is initialised before the
//!   release store that publishes it, so its `shift` and slots are seen complete;
//! - a retry entry, or a sibling whose canonical slot is not an entry, means the walk raced with
//!   a change of shape: start again from the head;
//! - an entry reached from a sibling is reported only if, after the canonical slot was read, the
//!   sibling's slot still names it and the canonical slot still holds it (else start again): a
//!   writer may have replaced the run by a smaller entry meanwhile; an order read from the
//!   sibling count is likewise checked against the canonical slot afterwards;
//! - nothing a reader dereferences is freed before its guard is dropped (nodes go through
//!   `defer_destroy`, pointers through [`super::Retired`]).

use std::ptr;

use super::*;

impl<P: XaPointer> XArray<P> {
    /// Walks from the head to the entry covering `index` (one counted walk per start).
    #[inline]
    pub(super) fn locate(&self, index: u64, guard: &Guard) -> Spot {
        self.locate_with(index, guard, true)
    }

    /// [`XArray::locate`], and the order of the entry found, read then (the order read later
    /// from the node may be that of an entry stored there since).
    pub(super) fn locate_with_order(&self, index: u64, guard: &Guard) -> (Spot, u32) {
        loop {
            let spot = self.locate(index, guard);
            if let Some(order) = spot.order_now() {
                return (spot, order);
            }
        }
    }

    /// [`XArray::locate`]; `recheck` false (loom's deliberately broken variant only) skips the
    /// re-check after following a sibling (see [`Node::step_with`]).
    #[inline]
    pub(super) fn locate_with(&self, index: u64, _guard: &Guard, recheck: bool) -> Spot {
        'restart: loop {
            stats::count(Event::XaWalks);
            let w = self.head.load(Ordering::Acquire);
            if !is_node(w) {
                return if index == 0 {
                    Spot {
                        word: w,
                        ..Spot::EMPTY
                    }
                } else {
                    Spot::EMPTY
                };
            }
            // SAFETY: a node loaded under the guard is not freed before the guard is dropped.
            let mut node = unsafe { &*node_ptr(w) };
            if !covers(node.shift(), index) {
                return Spot::EMPTY;
            }
            loop {
                match node.step_with(offset(node.shift(), index), recheck) {
                    // SAFETY: as above.
                    Step::Down(child) => node = unsafe { &*child },
                    Step::Entry { canon, word } => return Spot { node, canon, word },
                    Step::Restart => continue 'restart,
                }
            }
        }
    }
}

/// One level of an iterator's path: a node and the first index it covers.
#[derive(Clone, Copy)]
struct Level {
    node: *const Node,
    base: u64,
}

const NO_LEVEL: Level = Level {
    node: ptr::null(),
    base: 0,
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum IterState {
    /// Walk from the head towards `idx`.
    Seek,
    /// Scan the deepest node of the path from slot `next`.
    Scan,
    Done,
}

/// A lock-free iterator over the entries of a range (see [`XArray::range`]). Each entry is
/// yielded once, at its first index; an entry covering the start is included. The entries come
/// in increasing index order and never overlap. Entries stored or erased while it runs may or
/// may not be seen; entries present throughout are seen exactly once. An entry's order is read
/// from its sibling slots and checked against its canonical slot afterwards, so a reported
/// (entry, order) pair was in the tree at one moment.
pub struct Iter<'g, P: XaPointer> {
    xa: &'g XArray<P>,
    _guard: &'g Guard,
    path: [Level; MAX_DEPTH],
    depth: usize,
    /// Next slot to scan in `path[depth - 1]`.
    next: usize,
    /// Next index to look at (while seeking).
    idx: u64,
    max: u64,
    mark: Option<Mark>,
    state: IterState,
    /// Where a new iteration would resume this one; `None` once it is exhausted.
    resume: Option<u64>,
    /// The index after the last entry returned: nothing before it is returned again.
    floor: Option<u64>,
    /// Loom-only: skip the cover check in `found` (a deliberately broken variant).
    #[cfg(loom)]
    pub(super) broken_no_cover_check: bool,
}

impl<'g, P: XaPointer> Iter<'g, P> {
    pub(super) fn new(
        xa: &'g XArray<P>,
        guard: &'g Guard,
        start: u64,
        max: u64,
        mark: Option<Mark>,
    ) -> Self {
        Iter {
            xa,
            _guard: guard,
            path: [NO_LEVEL; MAX_DEPTH],
            depth: 0,
            next: 0,
            idx: start,
            max,
            mark,
            state: if start > max {
                IterState::Done
            } else {
                IterState::Seek
            },
            resume: if start > max { None } else { Some(start) },
            floor: None,
            #[cfg(loom)]
            broken_no_cover_check: false,
        }
    }

    /// The index from which a new iterator continues this one after a pause (after the guard
    /// was dropped): the index after the last entry returned, or the start if none was.
    /// `None` once the range is exhausted.
    pub fn resume_index(&self) -> Option<u64> {
        self.resume
    }

    fn finish(&mut self) -> Option<Found<'g, P::Target>> {
        self.state = IterState::Done;
        self.resume = None;
        None
    }

    #[inline]
    fn wanted(&self, bits: u8) -> bool {
        match self.mark {
            None => true,
            Some(m) => bits & m.bit() != 0,
        }
    }

    /// Reports the entry in `slot` (canonical) of the deepest node.
    fn found(&mut self, level: Level, canon: usize, w: usize) -> Option<Found<'g, P::Target>> {
        // SAFETY: the node is on this iterator's path, reached under the guard.
        let node = unsafe { &*level.node };
        let index = level.base + ((canon as u64) << node.shift());
        let ext = node.extent(canon);
        let order = order_of(node.shift(), ext);
        if node.slot(canon) != w {
            // A writer is replacing the entry (canonical slot first, then its siblings): the
            // siblings counted may be the new entry's. Look again.
            self.idx = self.idx.max(index);
            self.state = IterState::Seek;
            return None;
        }
        #[cfg(loom)]
        let check_cover = !self.broken_no_cover_check;
        #[cfg(not(loom))]
        let check_cover = true;
        if check_cover && index + span(order) < self.idx {
            // Reached from a sibling while seeking, and a split that keeps the word (pieces of
            // the same entry, one level) has shortened the run since the step: the order read
            // is a piece's that ends before the index sought. The piece covering it is in
            // another slot now; look again. (A scan reaches canonical slots past `idx` only.)
            self.state = IterState::Seek;
            return None;
        }
        // Continue after all of it, even if it is being split into pieces right now.
        self.next = canon + ext;
        if self.floor.is_some_and(|f| index < f) {
            // It starts before the end of the last entry returned: a concurrent store put it
            // over indices this iteration has already passed. Keep the results disjoint.
            return None;
        }
        self.resume = index
            .checked_add(span(order))
            .and_then(|l| l.checked_add(1));
        if self.resume.is_none_or(|r| r > self.max) {
            // Nothing after this entry can be in range: stop without another look.
            self.state = IterState::Done;
            self.resume = None;
        }
        self.floor = self.resume;
        Some(Found {
            index,
            order,
            // SAFETY: loaded under the guard that `'g` borrows.
            entry: unsafe { decode_ref(w) }.expect("an entry word"),
        })
    }

    /// Walks from the head towards `self.idx`; returns the entry covering it if wanted, else
    /// positions the scan after it.
    fn seek(&mut self) -> Option<Found<'g, P::Target>> {
        'restart: loop {
            stats::count(Event::XaWalks);
            let h = self.xa.head.load(Ordering::Acquire);
            if h == 0 {
                return self.finish();
            }
            if !is_node(h) {
                if self.idx == 0 && self.wanted(self.xa.head_marks.load(Ordering::Acquire) as u8) {
                    self.state = IterState::Done;
                    self.resume = if self.max >= 1 { Some(1) } else { None };
                    return Some(Found {
                        index: 0,
                        order: 0,
                        // SAFETY: loaded under the guard.
                        entry: unsafe { decode_ref(h) }.expect("an entry word"),
                    });
                }
                return self.finish();
            }
            // SAFETY: nodes reached under the guard stay allocated until it is dropped.
            let root = unsafe { &*node_ptr(h) };
            if !covers(root.shift(), self.idx) {
                return self.finish();
            }
            self.depth = 1;
            self.path[0] = Level {
                node: root,
                base: 0,
            };
            loop {
                let level = self.path[self.depth - 1];
                // SAFETY: as above.
                let node = unsafe { &*level.node };
                let off = offset(node.shift(), self.idx);
                let (canon, w) = match node.step(off) {
                    Step::Down(child) => {
                        self.path[self.depth] = Level {
                            node: child,
                            base: level.base + ((off as u64) << node.shift()),
                        };
                        self.depth += 1;
                        continue;
                    }
                    Step::Entry { canon, word } => (canon, word),
                    Step::Restart => continue 'restart,
                };
                self.next = off + 1;
                self.state = IterState::Scan;
                if w != 0 && self.wanted(node.marks_at(canon)) {
                    return self.found(level, canon, w);
                }
                return None;
            }
        }
    }

    /// Scans forward from `self.next` in the deepest node, going down into children and back
    /// up into parents.
    fn scan(&mut self) -> Option<Found<'g, P::Target>> {
        loop {
            let level = self.path[self.depth - 1];
            // SAFETY: nodes on the path were reached under the guard.
            let node = unsafe { &*level.node };
            let shift = node.shift();
            let limit = slots_in(shift);
            let mut off = self.next;
            if let Some(m) = self.mark {
                if off < limit {
                    let bits = node.marks[m as usize].load(Ordering::Acquire) & (u64::MAX << off);
                    off = if bits == 0 {
                        limit
                    } else {
                        bits.trailing_zeros() as usize
                    };
                }
            }
            if off >= limit {
                // This node is done: continue in its parent after it.
                if self.depth == 1 {
                    return self.finish();
                }
                self.depth -= 1;
                let parent = self.path[self.depth - 1];
                // SAFETY: as above.
                let pshift = unsafe { (*parent.node).shift() };
                self.next = offset(pshift, level.base) + 1;
                continue;
            }
            let slot_base = level.base + ((off as u64) << shift);
            if slot_base > self.max {
                return self.finish();
            }
            let w = node.slot(off);
            self.next = off + 1;
            if w == 0 || is_sibling(w) {
                continue;
            }
            if w == RETRY {
                // The node left the tree: look again from the head at this slot.
                self.idx = slot_base;
                self.state = IterState::Seek;
                return None;
            }
            if is_node(w) {
                self.path[self.depth] = Level {
                    node: node_ptr(w),
                    base: slot_base,
                };
                self.depth += 1;
                self.next = 0;
                continue;
            }
            if self.mark.is_some() && !self.wanted(node.marks_at(off)) {
                continue;
            }
            return self.found(level, off, w);
        }
    }
}

impl<'g, P: XaPointer> Iterator for Iter<'g, P> {
    type Item = Found<'g, P::Target>;

    fn next(&mut self) -> Option<Found<'g, P::Target>> {
        loop {
            let r = match self.state {
                IterState::Done => return None,
                IterState::Seek => self.seek(),
                IterState::Scan => self.scan(),
            };
            if r.is_some() {
                return r;
            }
        }
    }
}

/// A read cursor (the read side of `xa_state`): [`Cursor::load`] walks once;
/// [`Cursor::reload`] re-reads the same slot without a walk, for the re-check after taking a
/// reference on what was loaded.
pub struct Cursor<'g, P: XaPointer> {
    xa: &'g XArray<P>,
    guard: &'g Guard,
    index: u64,
    spot: Option<Spot>,
}

impl<'g, P: XaPointer> Cursor<'g, P> {
    pub(super) fn new(xa: &'g XArray<P>, index: u64, guard: &'g Guard) -> Self {
        Cursor {
            xa,
            guard,
            index,
            spot: None,
        }
    }

    /// The cursor's index.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Moves the cursor to `index` (the next load walks again).
    #[doc(alias = "xas_set")]
    pub fn set_index(&mut self, index: u64) {
        self.index = index;
        self.spot = None;
    }

    /// Walks to the cursor's index and returns its entry.
    #[doc(alias = "xas_load")]
    pub fn load(&mut self) -> Option<Entry<&'g P::Target>> {
        let spot = self.xa.locate(self.index, self.guard);
        self.spot = Some(spot);
        // SAFETY: loaded under the guard that `'g` borrows.
        unsafe { decode_ref(spot.word) }
    }

    /// Re-reads the slot the last [`Cursor::load`] reached (walking again only if the tree
    /// changed shape there). Compare its result with what was loaded to know whether a reference
    /// taken in between is to the current entry.
    #[doc(alias = "xas_reload")]
    pub fn reload(&mut self) -> Option<Entry<&'g P::Target>> {
        let Some(spot) = self.spot else {
            return self.load();
        };
        let w = if spot.node.is_null() {
            let h = self.xa.head.load(Ordering::Acquire);
            if is_node(h) {
                return self.load();
            }
            if self.index == 0 {
                h
            } else {
                0
            }
        } else {
            // SAFETY: the node was reached under the guard that `'g` still borrows.
            let node = unsafe { &*spot.node };
            match node.step(offset(node.shift(), self.index)) {
                Step::Entry { word, .. } => word,
                // The tree changed shape there: walk again.
                Step::Down(_) | Step::Restart => return self.load(),
            }
        };
        // SAFETY: loaded under the guard.
        unsafe { decode_ref(w) }
    }

    /// The order of the entry the last load found (0 if none). If a writer has replaced that
    /// entry since, the order read from the node could be the new entry's: then it is the order
    /// of the piece of it the index holds now if that has the same word (a split), else 0 (the
    /// entry covered the index when it was loaded).
    #[doc(alias = "xas_get_order")]
    pub fn order(&self) -> u32 {
        let Some(spot) = self.spot else {
            return 0;
        };
        if let Some(order) = spot.order_now() {
            return order;
        }
        let (now, order) = self.xa.locate_with_order(self.index, self.guard);
        if now.word == spot.word {
            order
        } else {
            0
        }
    }
}
