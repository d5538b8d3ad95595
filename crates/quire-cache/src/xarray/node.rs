//! One node of the tree (see "Node layout" in the module documentation): slots, marks, counts
//! and the links of the shadow-node list.

use std::sync::atomic::{AtomicBool as PlainBool, AtomicU8 as PlainU8, AtomicUsize as PlainUsize};

use super::entry::mk_sibling;
use std::ptr;

use super::entry::{is_internal, is_node, is_sibling, node_ptr, order_of, sibling_offset, RETRY};
use super::{XArray, XaPointer, CHUNK, NR_MARKS};
use crate::sync::loom::{AtomicU64, AtomicUsize, Ordering};

/// One node of the tree; see the module documentation for its layout.
#[repr(align(64))]
pub(crate) struct Node {
    /// The shift of this node's slots; fixed before the node is published.
    pub(super) shift: u8,
    /// Non-empty slots (entries, siblings and children). Read and written only under the lock.
    pub(super) count: PlainU8,
    /// Slots holding a value entry or a sibling of one (under the lock): the node holds only
    /// values when `count == nr_values > 0`.
    pub(super) nr_values: PlainU8,
    /// Whether the node is on its array's [`NodeList`] (changed under the array's lock and the
    /// list's lock; read under either).
    pub(super) listed: PlainBool,
    /// The first index the node covers; fixed for the node's life (a node's range never
    /// changes: growing and shrinking the tree adds and removes levels above and below it).
    pub(super) base: u64,
    pub(super) slots: [AtomicUsize; CHUNK],
    /// One bit per slot for each mark.
    pub(super) marks: [AtomicU64; NR_MARKS],
    /// Links of the [`NodeList`] (node addresses, 0 for none), under the list's lock.
    pub(super) list_prev: PlainUsize,
    pub(super) list_next: PlainUsize,
    /// The array's token on its [`NodeList`] (set while listed).
    pub(super) list_token: PlainUsize,
}

// The shadow-memory bound the page cache states assumes nodes of nine cache lines.
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Node>() == 576);

impl Node {
    pub(super) fn new(shift: u32, base: u64) -> Node {
        Node {
            shift: shift as u8,
            count: PlainU8::new(0),
            nr_values: PlainU8::new(0),
            listed: PlainBool::new(false),
            base,
            slots: std::array::from_fn(|_| AtomicUsize::new(0)),
            marks: std::array::from_fn(|_| AtomicU64::new(0)),
            list_prev: PlainUsize::new(0),
            list_next: PlainUsize::new(0),
            list_token: PlainUsize::new(0),
        }
    }

    #[inline]
    pub(super) fn shift(&self) -> u32 {
        self.shift as u32
    }

    #[inline]
    pub(super) fn slot(&self, off: usize) -> usize {
        self.slots[off].load(Ordering::Acquire)
    }

    #[inline]
    pub(super) fn set(&self, off: usize, w: usize) {
        self.slots[off].store(w, Ordering::Release);
    }

    #[inline]
    pub(super) fn count(&self) -> u32 {
        u32::from(self.count.load(Ordering::Relaxed))
    }

    #[inline]
    pub(super) fn set_count(&self, n: u32) {
        debug_assert!(n as usize <= CHUNK);
        self.count.store(n as u8, Ordering::Relaxed);
    }

    #[inline]
    pub(super) fn values(&self) -> u32 {
        u32::from(self.nr_values.load(Ordering::Relaxed))
    }

    #[inline]
    pub(super) fn set_values(&self, n: u32) {
        debug_assert!(n as usize <= CHUNK);
        self.nr_values.store(n as u8, Ordering::Relaxed);
    }

    /// Whether every used slot holds a value entry or a sibling of one (and some slot is used).
    #[inline]
    pub(super) fn values_only(&self) -> bool {
        let c = self.count();
        c > 0 && c == self.values()
    }

    /// The marks of slot `off` as a 3-bit set.
    #[inline]
    pub(super) fn marks_at(&self, off: usize) -> u8 {
        let mut bits = 0;
        for (m, word) in self.marks.iter().enumerate() {
            if word.load(Ordering::Acquire) >> off & 1 == 1 {
                bits |= 1 << m;
            }
        }
        bits
    }

    /// The marks present on any slot, as a 3-bit set.
    #[inline]
    pub(super) fn any_marks(&self) -> u8 {
        let mut bits = 0;
        for (m, word) in self.marks.iter().enumerate() {
            if word.load(Ordering::Acquire) != 0 {
                bits |= 1 << m;
            }
        }
        bits
    }

    /// Sets the marks of the slots in `range_mask` to `bits` at slot `first` and none elsewhere
    /// (writers only; words that do not change are not written).
    pub(super) fn set_marks_range(&self, range_mask: u64, first: usize, bits: u8) {
        for (m, word) in self.marks.iter().enumerate() {
            let old = word.load(Ordering::Relaxed);
            let mut new = old & !range_mask;
            if bits >> m & 1 == 1 {
                new |= 1 << first;
            }
            if new != old {
                word.store(new, Ordering::Release);
            }
        }
    }

    /// Sets the marks of one slot to `bits` (writers only).
    pub(super) fn set_marks_at(&self, off: usize, bits: u8) {
        self.set_marks_range(1 << off, off, bits);
    }

    /// Number of slots the entry whose canonical slot is `c` spans (itself and its siblings).
    pub(super) fn extent(&self, c: usize) -> usize {
        let sib = mk_sibling(c);
        let mut n = 1;
        while c + n < CHUNK && self.slot(c + n) == sib {
            n += 1;
        }
        n
    }
}

/// One step of a lock-free walk: what a reader finds in one slot of a node.
pub(super) enum Step {
    /// A child node to go down into.
    Down(*const Node),
    /// An entry word (or 0) in canonical slot `canon` (a sibling was followed to it).
    Entry { canon: usize, word: usize },
    /// The walk raced with a change of shape (a retry entry, or a sibling whose canonical slot
    /// no longer holds an entry): start again from the head.
    Restart,
}

impl Node {
    /// Reads slot `off` as a lock-free walk does: a sibling is followed to its canonical slot, a
    /// child node is a step down, and a race with a change of shape says so.
    #[inline]
    pub(super) fn step(&self, off: usize) -> Step {
        self.step_with(off, true)
    }

    /// [`Node::step`]; `recheck` false (loom's deliberately broken variant only) skips the
    /// re-check after following a sibling.
    #[inline]
    pub(super) fn step_with(&self, off: usize, recheck: bool) -> Step {
        let w = self.slot(off);
        if is_sibling(w) {
            let canon = sibling_offset(w);
            let e = self.slot(canon);
            if is_internal(e) {
                return Step::Restart;
            }
            // The run may have been rewritten between the two loads: an entry over it dissolved
            // (canonical slot first) and a smaller one stored in the canonical slot, or the run
            // split in place into pieces. Then `e` need not cover `off`. Bracket a second look
            // at `off` between two looks at the canonical slot: `off` still names it and it
            // still holds `e`, so `e` covered `off` when `off` was read again (a store that puts
            // `e` in the canonical slot without covering `off` rewrites `off` first).
            if recheck && (self.slot(off) != w || self.slot(canon) != e) {
                return Step::Restart;
            }
            Step::Entry { canon, word: e }
        } else if is_node(w) {
            Step::Down(node_ptr(w))
        } else if w == RETRY {
            Step::Restart
        } else {
            Step::Entry {
                canon: off,
                word: w,
            }
        }
    }
}

/// Where a walk ended — the lock-free walk of a reader ([`XArray::locate`]) or a writer's walk
/// under the lock (`XaLock::entry_at`): the node holding the entry (null for the head) and the
/// entry's word. The kernel keeps the same in its `xa_state` (`xa_node`, `xa_offset`).
#[derive(Clone, Copy)]
pub(super) struct Spot {
    /// The node whose slot holds the entry; null when the entry is the head's (or none).
    pub(super) node: *const Node,
    /// The entry's canonical slot in `node`.
    pub(super) canon: usize,
    /// 0 or an entry word.
    pub(super) word: usize,
}

impl Spot {
    pub(super) const EMPTY: Spot = Spot {
        node: ptr::null(),
        canon: 0,
        word: 0,
    };

    /// The entry's order (0 if none).
    pub(super) fn order(&self) -> u32 {
        if self.word == 0 || self.node.is_null() {
            return 0;
        }
        // SAFETY: the node was reached under the guard the caller still holds, or under the
        // array's lock, which the caller still holds; either keeps it from being freed.
        let node = unsafe { &*self.node };
        order_of(node.shift(), node.extent(self.canon))
    }

    /// The entry's order as a lock-free reader reads it: the siblings counted, then the
    /// canonical slot looked at again. `None` if it no longer holds the entry (a writer replaced
    /// it meanwhile, and the siblings counted may be the new entry's): walk again.
    pub(super) fn order_now(&self) -> Option<u32> {
        let order = self.order();
        if self.word != 0 && !self.node.is_null() {
            // SAFETY: as in `order`.
            if unsafe { (*self.node).slot(self.canon) } != self.word {
                return None;
            }
        }
        Some(order)
    }

    /// The entry's marks as a 3-bit set (0 if none).
    pub(super) fn marks<P: XaPointer>(&self, xa: &XArray<P>) -> u8 {
        if self.word == 0 {
            0
        } else if self.node.is_null() {
            xa.head_marks.load(Ordering::Acquire) as u8
        } else {
            // SAFETY: as in `order`.
            unsafe { (*self.node).marks_at(self.canon) }
        }
    }
}
