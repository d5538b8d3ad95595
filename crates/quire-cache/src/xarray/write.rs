//! The write side: everything that changes the tree, under the array's lock.
//!
//! Rules every writer here keeps (readers rely on them, see `read.rs`):
//! - a node is filled before the release store that links it; its `shift` never changes after;
//! - a multi-slot entry is written canonical slot first, then its siblings; a sibling whose
//!   canonical slot holds a node sends readers back to the head;
//! - a node is freed only through the epoch, after it was unlinked; before the entries a
//!   removed subtree held are released, each of their slots is overwritten with the retry
//!   entry, so a reader's re-check through a stale node fails;
//! - a removed pointer is released as a [`Retired`], which waits for a grace period.

use std::mem::ManuallyDrop;
use std::ptr;

use crate::sync::loom::MutexGuard;

use super::*;

mod add;
#[cfg(feature = "bench-internals")]
mod check;
mod split;
mod state;

pub(super) use add::add;
#[cfg(feature = "bench-internals")]
pub(super) use add::add_multi_walk;
pub use state::XaState;

/// Borrows a node the writer knows to be alive.
///
/// # Safety
///
/// `p` is a node linked into the tree (or being built, or retired during this lock hold): under
/// the lock nobody else frees it, and retired nodes are freed only after a grace period that
/// the writer's guard holds back.
#[inline]
unsafe fn nd<'x>(p: *const Node) -> &'x Node {
    // SAFETY: forwarded.
    unsafe { &*p }
}

/// The nodes from the root down towards an index.
#[derive(Clone, Copy)]
pub(super) struct Path {
    nodes: [*const Node; MAX_DEPTH],
    len: usize,
}

impl Path {
    fn new() -> Path {
        Path {
            nodes: [ptr::null(); MAX_DEPTH],
            len: 0,
        }
    }

    #[inline]
    fn push(&mut self, n: *const Node) {
        self.nodes[self.len] = n;
        self.len += 1;
    }

    #[inline]
    fn pop(&mut self) -> *const Node {
        self.len -= 1;
        self.nodes[self.len]
    }

    #[inline]
    fn last(&self) -> *const Node {
        self.nodes[self.len - 1]
    }

    #[inline]
    fn clear(&mut self) {
        self.len = 0;
    }
}

/// Unused nodes are freed when it is dropped.
pub struct NodeReserve {
    // Boxed: each node is handed over to the tree as its own allocation.
    #[allow(clippy::vec_box)]
    nodes: Vec<Box<Node>>,
}

impl NodeReserve {
    /// Allocates `n` nodes (see [`split_nodes`] and [`XaLock::split_needs`]).
    pub fn new(n: usize) -> NodeReserve {
        stats::add(Event::XaNodeAllocs, n as u64);
        NodeReserve {
            nodes: (0..n).map(|_| Box::new(Node::new(0, 0))).collect(),
        }
    }

    /// Nodes left.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no node is left.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn take(&mut self, shift: u32, base: u64) -> Box<Node> {
        let mut node = self.nodes.pop().expect("reserve sized by split_nodes");
        node.shift = shift as u8;
        node.base = base;
        node
    }
}

impl Drop for NodeReserve {
    fn drop(&mut self) {
        stats::add(Event::XaNodeFrees, self.nodes.len() as u64);
    }
}

impl fmt::Debug for NodeReserve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeReserve")
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

/// The array's lock, held; every change goes through it. See [`XArray::lock`].
pub struct XaLock<'a, P: XaPointer> {
    xa: &'a XArray<P>,
    _held: MutexGuard<'a, ()>,
    /// Pinned on first need, to hand unlinked nodes to the epoch.
    guard: Option<Guard>,
    /// Bumped whenever a node leaves the tree: cursors' paths are stale after that.
    generation: u64,
}

impl<'a, P: XaPointer> XaLock<'a, P> {
    pub(super) fn new(xa: &'a XArray<P>) -> XaLock<'a, P> {
        let held = xa.lock.lock();
        XaLock {
            xa,
            _held: held,
            guard: None,
            generation: 0,
        }
    }

    // ---- small helpers ----

    #[inline]
    fn head(&self) -> usize {
        // Only lock holders write the head.
        self.xa.head.load(Ordering::Relaxed)
    }

    #[inline]
    fn set_head(&self, w: usize) {
        self.xa.head.store(w, Ordering::Release);
    }

    #[inline]
    fn head_marks(&self) -> u8 {
        self.xa.head_marks.load(Ordering::Relaxed) as u8
    }

    #[inline]
    fn set_head_marks(&self, bits: u8) {
        if self.head_marks() != bits {
            self.xa.head_marks.store(bits as u32, Ordering::Release);
        }
    }

    fn alloc_node(&self, shift: u32, base: u64) -> *const Node {
        stats::count(Event::XaNodeAllocs);
        self.xa.nodes.fetch_add(1, Ordering::Relaxed);
        if let Some((list, _)) = &self.xa.list {
            list.add_nodes(1);
        }
        Box::into_raw(Box::new(Node::new(shift, base)))
    }

    fn adopt(&self, node: Box<Node>) -> *const Node {
        self.xa.nodes.fetch_add(1, Ordering::Relaxed);
        if let Some((list, _)) = &self.xa.list {
            list.add_nodes(1);
        }
        Box::into_raw(node)
    }

    /// Puts a node on the array's [`NodeList`] or takes it off, as its contents say (the
    /// kernel's `workingset_update_node`). Only takes the list's lock when that changes.
    fn update_node(&self, p: *const Node) {
        let Some((list, token)) = &self.xa.list else {
            return;
        };
        // SAFETY: a node of this tree, under the lock.
        let node = unsafe { nd(p) };
        let want = node.values_only();
        if want != node.listed.load(Ordering::Relaxed) {
            // SAFETY: we hold the array's lock; the node is alive and ours.
            unsafe { list.set_listed(p, want, *token) };
        }
    }

    /// [`XaLock::update_node`] for every node on `path`.
    fn update_path(&self, path: &Path) {
        if self.xa.list.is_some() {
            for &p in &path.nodes[..path.len] {
                self.update_node(p);
            }
        }
    }

    /// Hands an unlinked node to the epoch.
    fn retire_node(&mut self, p: *const Node) {
        // A dead node holds nothing as far as the writer's counts go, so that no later update
        // of a path it was on can list it again.
        // SAFETY: unlinked but alive (freed by the epoch, after this lock hold).
        let node = unsafe { nd(p) };
        node.set_count(0);
        node.set_values(0);
        if let Some((list, _)) = &self.xa.list {
            // SAFETY: we hold the array's lock; the node is alive until the epoch frees it.
            unsafe { list.set_listed(p, false, 0) };
            list.sub_nodes(1);
        }
        stats::count(Event::XaNodeFrees);
        self.xa.nodes.fetch_sub(1, Ordering::Relaxed);
        self.generation += 1;
        let guard = self.guard.get_or_insert_with(rcu::pin);
        // SAFETY: the node came from `Box::into_raw`, is unlinked (readers that pin from now on
        // cannot reach it), and is retired exactly once.
        unsafe { guard.defer_destroy(p.cast_mut()) };
    }

    /// Releases a removed entry word (a pointer after a grace period).
    fn retire_word(&self, w: usize) {
        if is_pointer(w) {
            // SAFETY: the word was removed from the array and is owned here.
            drop(unsafe { Retired::<P>::from_word(w) });
        }
    }

    /// Keeps the first removed word for the caller and releases the others.
    fn take_old(&self, first: &mut usize, w: usize) {
        if *first == 0 {
            *first = w;
        } else {
            self.retire_word(w);
        }
    }

    // ---- walking ----

    /// Walks from the head towards `index`, stopping at a node of `stop_shift` or at a slot
    /// that holds no node. Counts one walk.
    pub(super) fn walk(&self, index: u64, stop_shift: u32) -> Path {
        stats::count(Event::XaWalks);
        let mut path = Path::new();
        let h = self.head();
        if is_node(h) {
            path.push(node_ptr(h));
            self.descend(&mut path, index, stop_shift);
        }
        path
    }

    /// Continues a walk from the end of `path` (not counted: no new walk from the head).
    fn descend(&self, path: &mut Path, index: u64, stop_shift: u32) {
        if path.len == 0 {
            return;
        }
        // SAFETY: nodes on a path are linked in the tree while the lock is held.
        if !covers(unsafe { nd(path.nodes[0]) }.shift(), index) {
            return;
        }
        loop {
            // SAFETY: as above.
            let node = unsafe { nd(path.last()) };
            if node.shift() <= stop_shift {
                return;
            }
            let w = node.slot(offset(node.shift(), index));
            if !is_node(w) {
                return;
            }
            path.push(node_ptr(w));
        }
    }

    /// The entry covering `index`, for a path walked to the bottom.
    fn entry_at(&self, path: &Path, index: u64) -> Spot {
        if path.len == 0 {
            let h = self.head();
            return if index == 0 && is_entry(h) {
                Spot {
                    word: h,
                    ..Spot::EMPTY
                }
            } else {
                Spot::EMPTY
            };
        }
        // SAFETY: nodes on a path are linked while the lock is held.
        if !covers(unsafe { nd(path.nodes[0]) }.shift(), index) {
            return Spot::EMPTY;
        }
        let p = path.last();
        // SAFETY: as above.
        let node = unsafe { nd(p) };
        let off = offset(node.shift(), index);
        let mut w = node.slot(off);
        let mut canon = off;
        if is_sibling(w) {
            canon = sibling_offset(w);
            w = node.slot(canon);
        }
        if !is_entry(w) {
            return Spot::EMPTY;
        }
        Spot {
            node: p,
            canon,
            word: w,
        }
    }

    // ---- the core store ----

    /// Removes the entry whose canonical slot is `c` (all its slots); returns its word and
    /// marks.
    fn dissolve(&self, node: &Node, c: usize) -> (usize, u8) {
        let w = node.slot(c);
        let ext = node.extent(c);
        let bits = node.marks_at(c);
        // Canonical slot first: a reader that counted the siblings re-checks it.
        for j in c..c + ext {
            node.set(j, 0);
        }
        node.set_marks_at(c, 0);
        node.set_count(node.count() - ext as u32);
        if is_value(w) {
            node.set_values(node.values() - ext as u32);
        }
        (w, bits)
    }

    /// Unlinked subtree: overwrite its entries with retry entries, release them (the first
    /// into `first`), and hand its nodes to the epoch.
    fn free_subtree(&mut self, w: usize, first: &mut usize) {
        let p = node_ptr(w);
        // SAFETY: the subtree was linked until just now; it is retired below, not before.
        let node = unsafe { nd(p) };
        for j in 0..CHUNK {
            let x = node.slot(j);
            if is_node(x) {
                self.free_subtree(x, first);
            } else if is_entry(x) {
                node.set(j, RETRY);
                self.take_old(first, x);
            } else if is_sibling(x) {
                node.set(j, RETRY);
            }
        }
        self.retire_node(p);
    }

    /// Grows the tree until its root has at least shift `s` and covers `last`; returns the root.
    fn expand(&mut self, s: u32, last: u64) -> *const Node {
        let mut h = self.head();
        if h == 0 {
            let node = self.alloc_node(s.max(shift_for(last)), 0);
            self.set_head(mk_node(node));
            return node;
        }
        if !is_node(h) {
            // The entry of index 0 moves into a leaf.
            let node = self.alloc_node(0, 0);
            // SAFETY: just allocated, not yet published.
            let n = unsafe { nd(node) };
            n.slots[0].store(h, Ordering::Relaxed);
            n.set_count(1);
            n.set_values(u32::from(is_value(h)));
            n.set_marks_at(0, self.head_marks());
            h = mk_node(node);
            self.set_head(h);
            self.update_node(node);
        }
        loop {
            // SAFETY: the root is linked.
            let root = unsafe { nd(node_ptr(h)) };
            if root.shift() >= s && covers(root.shift(), last) {
                return node_ptr(h);
            }
            let node = self.alloc_node(root.shift() + CHUNK_SHIFT, 0);
            // SAFETY: just allocated, not yet published.
            let n = unsafe { nd(node) };
            n.slots[0].store(h, Ordering::Relaxed);
            n.set_count(1);
            n.set_marks_at(0, root.any_marks());
            h = mk_node(node);
            self.set_head(h);
        }
    }

    /// Recomputes the mark bits of the slots on `path` from its deepest node up, stopping where
    /// nothing changes, and the head's marks.
    fn propagate(&self, path: &Path, index: u64) {
        for d in (1..path.len).rev() {
            // SAFETY: nodes on a path are linked while the lock is held.
            let (child, parent) = unsafe { (nd(path.nodes[d]), nd(path.nodes[d - 1])) };
            let off = offset(parent.shift(), index);
            let want = child.any_marks();
            if parent.marks_at(off) == want {
                return;
            }
            parent.set_marks_at(off, want);
        }
        if path.len > 0 {
            // SAFETY: as above.
            self.set_head_marks(unsafe { nd(path.nodes[0]) }.any_marks());
        }
    }

    /// Unlinks the empty nodes at the end of `path`, then shrinks the tree.
    fn delete_empty(&mut self, path: &mut Path, index: u64) {
        while path.len > 0 {
            let p = path.last();
            // SAFETY: linked until unlinked below.
            if unsafe { nd(p) }.count() != 0 {
                break;
            }
            path.pop();
            if path.len == 0 {
                self.set_head_marks(0);
                self.set_head(0);
            } else {
                // SAFETY: as above.
                let parent = unsafe { nd(path.last()) };
                let off = offset(parent.shift(), index);
                parent.set(off, 0);
                parent.set_count(parent.count() - 1);
                parent.set_marks_at(off, 0);
            }
            self.retire_node(p);
        }
        self.propagate(path, index);
        self.shrink();
    }

    /// While the root uses only slot 0, replaces it by that slot's content (a node, or at
    /// shift 0 an entry, which moves to the head).
    fn shrink(&mut self) {
        loop {
            let h = self.head();
            if !is_node(h) {
                return;
            }
            // SAFETY: the root is linked.
            let root = unsafe { nd(node_ptr(h)) };
            if root.count() != 1 {
                return;
            }
            let w = root.slot(0);
            if is_node(w) {
                self.set_head(w);
                self.retire_node(node_ptr(h));
                continue;
            }
            if is_entry(w) && root.shift() == 0 {
                self.set_head_marks(root.marks_at(0));
                self.set_head(w);
                // A reader re-checking slot 0 of the old root must not find the entry there.
                root.set(0, RETRY);
                self.retire_node(node_ptr(h));
            }
            return;
        }
    }

    /// Stores `new` (0 to remove) with `order` over the aligned range at `start`, continuing
    /// from `path` (a walk towards `start`, maybe stopped early). Every entry overlapping the
    /// range is removed (a larger one entirely); the new entry carries their marks. Returns the
    /// first word removed (lowest index), owned by the caller; the others are released.
    pub(super) fn store_from(
        &mut self,
        path: &mut Path,
        start: u64,
        order: u32,
        new: usize,
    ) -> usize {
        let s = level_of(order);
        let n = 1usize << (order - s);
        let last = start + span(order);
        let mut first = 0usize;
        let mut union = 0u8;
        let mut removed = false;
        let h = self.head();
        if !is_node(h) {
            if start == 0 && (order == 0 || new == 0) {
                if new == 0 {
                    if h != 0 {
                        self.set_head_marks(0);
                        self.set_head(0);
                    }
                } else {
                    // Storing over the head entry keeps its marks; into empty, none.
                    if h == 0 {
                        self.set_head_marks(0);
                    }
                    self.set_head(new);
                }
                path.clear();
                return h;
            }
            if new == 0 {
                return 0;
            }
            path.clear();
            let root = self.expand(s, last);
            path.push(root);
        } else {
            debug_assert!(path.len > 0 && path.nodes[0] == node_ptr(h));
            // SAFETY: the root is linked.
            let root = unsafe { nd(node_ptr(h)) };
            if root.shift() < s || !covers(root.shift(), last) {
                if new == 0 {
                    if start == 0 {
                        // The range holds the whole tree.
                        self.set_head_marks(0);
                        self.set_head(0);
                        self.free_subtree(h, &mut first);
                    }
                    path.clear();
                    return first;
                }
                path.clear();
                let root = self.expand(s, last);
                path.push(root);
            }
        }
        // The walk may have gone below the level of the entry.
        // SAFETY: nodes on the path are linked while the lock is held.
        while unsafe { nd(path.last()) }.shift() < s {
            path.pop();
        }
        // Down to level `s`, removing larger entries and creating nodes on the way.
        let at_level = loop {
            // SAFETY: nodes on the path are linked while the lock is held.
            let node = unsafe { nd(path.last()) };
            if node.shift() == s {
                break true;
            }
            let off = offset(node.shift(), start);
            let w = node.slot(off);
            if is_node(w) {
                path.push(node_ptr(w));
                continue;
            }
            if w != 0 {
                let c = if is_sibling(w) {
                    sibling_offset(w)
                } else {
                    off
                };
                let (old, bits) = self.dissolve(node, c);
                union |= bits;
                self.take_old(&mut first, old);
                removed = true;
            }
            if new == 0 {
                break false;
            }
            let child = self.alloc_node(
                node.shift() - CHUNK_SHIFT,
                node.base + ((off as u64) << node.shift()),
            );
            node.set(off, mk_node(child));
            node.set_count(node.count() + 1);
            path.push(child);
        };
        if at_level {
            // SAFETY: nodes on the path are linked while the lock is held.
            let node = unsafe { nd(path.last()) };
            let o = offset(s, start);
            let w0 = node.slot(o);
            if is_sibling(w0) || (is_entry(w0) && node.extent(o) > n) {
                // A larger entry on this level covers the range.
                let c = if is_sibling(w0) {
                    sibling_offset(w0)
                } else {
                    o
                };
                let (old, bits) = self.dissolve(node, c);
                union |= bits;
                self.take_old(&mut first, old);
                removed = true;
            }
            let mut old = [0usize; CHUNK];
            let mut used = 0u32;
            for (j, slot) in old.iter_mut().enumerate().take(n) {
                let w = node.slot(o + j);
                *slot = w;
                if w != 0 {
                    used += 1;
                    if !is_sibling(w) {
                        union |= node.marks_at(o + j);
                    }
                }
            }
            // Values (and their siblings) among the slots replaced. Every entry in the run lies
            // wholly inside it (a larger one was dissolved above), so a sibling's canonical
            // slot is in the run too.
            let old_values = (0..n)
                .filter(|&j| {
                    let w = old[j];
                    is_value(w) || (is_sibling(w) && is_value(old[sibling_offset(w) - o]))
                })
                .count() as u32;
            if new != 0 {
                node.set(o, new);
                let sib = mk_sibling(o);
                for j in 1..n {
                    node.set(o + j, sib);
                }
            } else {
                for (j, &w) in old.iter().enumerate().take(n) {
                    if w != 0 {
                        node.set(o + j, 0);
                    }
                }
            }
            let range_mask = ((1u64 << n) - 1) << o;
            node.set_marks_range(range_mask, o, if new != 0 { union } else { 0 });
            let added = if new != 0 { n as u32 } else { 0 };
            node.set_count(node.count() - used + added);
            let new_values = if is_value(new) { n as u32 } else { 0 };
            node.set_values(node.values() - old_values + new_values);
            if used > added {
                removed = true;
            }
            for &w in &old[..n] {
                if is_node(w) {
                    self.free_subtree(w, &mut first);
                } else if is_entry(w) {
                    self.take_old(&mut first, w);
                }
            }
        }
        if removed {
            self.delete_empty(path, start);
        } else {
            self.propagate(path, start);
        }
        self.update_path(path);
        first
    }

    /// Plain store at `index` on a walked path: replaces the entry covering it keeping its
    /// order (or removes all of it), or stores an order-0 entry into an empty index.
    fn store_keep(&mut self, path: &mut Path, index: u64, new: usize) -> usize {
        let loc = self.entry_at(path, index);
        if loc.word == 0 {
            if new == 0 {
                return 0;
            }
            return self.store_from(path, index, 0, new);
        }
        let order = loc.order();
        self.store_from(path, index & !span(order), order, new)
    }

    /// Changes one mark of the entry covering `index`; false if there is none.
    fn change_mark(&self, path: &Path, index: u64, mark: Mark, set: bool) -> bool {
        let loc = self.entry_at(path, index);
        if loc.word == 0 {
            return false;
        }
        if loc.node.is_null() {
            let bits = self.head_marks();
            self.set_head_marks(if set {
                bits | mark.bit()
            } else {
                bits & !mark.bit()
            });
            return true;
        }
        // SAFETY: found under the lock, linked.
        let node = unsafe { nd(loc.node) };
        let bits = node.marks_at(loc.canon);
        let want = if set {
            bits | mark.bit()
        } else {
            bits & !mark.bit()
        };
        if want != bits {
            node.set_marks_at(loc.canon, want);
            self.propagate(path, index);
        }
        true
    }

    fn get_mark_at(&self, path: &Path, index: u64, mark: Mark) -> bool {
        self.entry_at(path, index).marks(self.xa) & mark.bit() != 0
    }

    // ---- public operations ----

    /// The entry at `index` (under the lock; valid while this borrow lasts).
    pub fn load(&self, index: u64) -> Option<Entry<&P::Target>> {
        let path = self.walk(index, 0);
        // SAFETY: under the lock nothing is removed while `self` is borrowed shared.
        unsafe { decode_ref(self.entry_at(&path, index).word) }
    }

    /// The order of the entry covering `index` (0 if none).
    #[doc(alias = "xas_get_order")]
    pub fn get_order(&self, index: u64) -> u32 {
        let path = self.walk(index, 0);
        self.entry_at(&path, index).order()
    }

    /// See [`XArray::store`].
    #[doc(alias = "__xa_store")]
    pub fn store(
        &mut self,
        index: u64,
        entry: Option<Entry<P>>,
    ) -> Result<Option<Entry<Retired<P>>>, Rejected<P>> {
        let new = encode(entry)?;
        let mut path = self.walk(index, 0);
        let old = self.store_keep(&mut path, index, new);
        // SAFETY: removed from the array; ours.
        Ok(unsafe { decode_retired(old) })
    }

    /// See [`XArray::store_order`].
    pub fn store_order(
        &mut self,
        index: u64,
        order: u32,
        entry: Option<Entry<P>>,
    ) -> Result<Option<Entry<Retired<P>>>, Rejected<P>> {
        let new = encode_order(order, entry)?;
        let start = index & !span(order);
        let mut path = self.walk(start, level_of(order));
        let old = self.store_from(&mut path, start, order, new);
        // SAFETY: removed from the array; ours.
        Ok(unsafe { decode_retired(old) })
    }

    /// See [`XArray::store_range`].
    pub fn store_range(
        &mut self,
        first: u64,
        last: u64,
        entry: Option<Entry<P>>,
    ) -> Result<(), Rejected<P>>
    where
        P: Clone,
    {
        if first > last {
            return Err(Rejected {
                error: XaError::EmptyRange { first, last },
                entry,
            });
        }
        if let Err(error) = check_value(&entry) {
            return Err(Rejected { error, entry });
        }
        let mut entry = entry;
        let mut idx = first;
        loop {
            let room = last - idx;
            let size_order = if room == u64::MAX {
                64
            } else {
                63 - (room + 1).leading_zeros()
            };
            let align_order = if idx == 0 { 64 } else { idx.trailing_zeros() };
            let k = size_order.min(align_order).min(MAX_ORDER);
            let end = idx + span(k);
            let piece = if end >= last {
                entry.take()
            } else {
                entry.clone()
            };
            let new = match encode(piece) {
                Ok(w) => w,
                Err(_) => unreachable!("the value was checked"),
            };
            let mut path = self.walk(idx, level_of(k));
            let old = self.store_from(&mut path, idx, k, new);
            self.retire_word(old);
            if end >= last {
                return Ok(());
            }
            idx = end + 1;
        }
    }

    /// See [`XArray::erase`].
    #[doc(alias = "__xa_erase")]
    pub fn erase(&mut self, index: u64) -> Option<Entry<Retired<P>>> {
        let mut path = self.walk(index, 0);
        let old = self.store_keep(&mut path, index, 0);
        // SAFETY: removed from the array; ours.
        unsafe { decode_retired(old) }
    }

    /// See [`XArray::cmpxchg`].
    #[doc(alias = "__xa_cmpxchg")]
    pub fn cmpxchg(
        &mut self,
        index: u64,
        expected: Option<Entry<*const P::Target>>,
        new: Option<Entry<P>>,
    ) -> Result<Option<Entry<Retired<P>>>, Rejected<P>> {
        if let Err(error) = check_value(&new) {
            return Err(Rejected { error, entry: new });
        }
        let mut path = self.walk(index, 0);
        if self.entry_at(&path, index).word != expected_word(expected) {
            return Err(Rejected {
                error: XaError::Mismatch { index },
                entry: new,
            });
        }
        let new = encode(new)?;
        let old = self.store_keep(&mut path, index, new);
        // SAFETY: removed from the array; ours.
        Ok(unsafe { decode_retired(old) })
    }

    /// See [`XArray::set_mark`].
    #[doc(alias = "__xa_set_mark")]
    pub fn set_mark(&mut self, index: u64, mark: Mark) -> bool {
        let path = self.walk(index, 0);
        self.change_mark(&path, index, mark, true)
    }

    /// See [`XArray::clear_mark`].
    #[doc(alias = "__xa_clear_mark")]
    pub fn clear_mark(&mut self, index: u64, mark: Mark) -> bool {
        let path = self.walk(index, 0);
        self.change_mark(&path, index, mark, false)
    }

    /// Whether the entry covering `index` has `mark`.
    pub fn get_mark(&self, index: u64, mark: Mark) -> bool {
        let path = self.walk(index, 0);
        self.get_mark_at(&path, index, mark)
    }

    /// See [`XArray::delete_listed`].
    #[cfg_attr(not(feature = "bench-internals"), doc(hidden))] // its list type is internal
    pub fn delete_listed(&mut self, n: &ListedNode) -> bool {
        let h = self.head();
        if !is_node(h) {
            return false;
        }
        let mut path = self.walk(n.base, n.shift);
        if path.len == 0 || path.last() as usize != n.addr {
            return false;
        }
        let p = path.last();
        // SAFETY: on the path, under the lock.
        let node = unsafe { nd(p) };
        if node.shift() != n.shift || node.base != n.base || !node.values_only() {
            return false;
        }
        path.pop();
        let mut first = 0;
        if path.len == 0 {
            // The root: the whole tree holds only values.
            self.set_head_marks(0);
            self.set_head(0);
            self.free_subtree(h, &mut first);
        } else {
            // SAFETY: on the path, under the lock.
            let parent = unsafe { nd(path.last()) };
            let off = offset(parent.shift(), n.base);
            debug_assert_eq!(parent.slot(off), mk_node(p));
            parent.set(off, 0);
            parent.set_count(parent.count() - 1);
            parent.set_marks_at(off, 0);
            self.free_subtree(mk_node(p), &mut first);
            self.delete_empty(&mut path, n.base);
            self.update_path(&path);
        }
        self.retire_word(first);
        true
    }
}
