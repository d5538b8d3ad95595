//! The insert of technique 4 ([`XArray::add`]) and its pre-patch "before"
//! (`XArray::add_multi_walk`, feature `bench-internals`): the conflict check done on the path of
//! the walk that also
//! stores, and the split of a larger shadow with its nodes allocated outside the lock.

use super::*;

/// What the conflict part of an insert found in the range.
enum Conflict {
    /// Nothing.
    None,
    /// Only values of the range's order or smaller; the first (lowest index), which only the
    /// "before" insert reads.
    #[cfg_attr(not(feature = "bench-internals"), allow(dead_code))]
    Shadows(usize),
    /// A pointer entry.
    Pointer,
    /// A value entry of larger order covering the whole range.
    Larger {
        node: *const Node,
        canon: usize,
        word: usize,
        order: u32,
    },
}

impl<'a, P: XaPointer> XaLock<'a, P> {
    /// Looks for every entry overlapping the aligned range of `order` at `start` from a path
    /// walked towards it (stopped at the range's level) — no new walk.
    fn find_conflicts(&self, path: &Path, start: u64, order: u32) -> Conflict {
        let s = level_of(order);
        let n = 1usize << (order - s);
        let last = start + span(order);
        if path.len == 0 {
            let h = self.head();
            return if start == 0 && h != 0 {
                if is_pointer(h) {
                    Conflict::Pointer
                } else {
                    Conflict::Shadows(h)
                }
            } else {
                Conflict::None
            };
        }
        // SAFETY: nodes on the path are linked while the lock is held.
        let root = unsafe { nd(path.nodes[0]) };
        if !covers(root.shift(), start) {
            return Conflict::None;
        }
        let mut first = 0usize;
        if root.shift() < s || !covers(root.shift(), last) {
            // The range holds the whole tree.
            return self.subtree_conflicts(mk_node(path.nodes[0]), &mut first);
        }
        let node_p = path.last();
        // SAFETY: nodes on the path are linked while the lock is held.
        let node = unsafe { nd(node_p) };
        let off = offset(node.shift(), start);
        let larger = |c: usize| -> Conflict {
            let w = node.slot(c);
            if is_pointer(w) {
                Conflict::Pointer
            } else {
                Conflict::Larger {
                    node: node_p,
                    canon: c,
                    word: w,
                    order: order_of(node.shift(), node.extent(c)),
                }
            }
        };
        let w0 = node.slot(off);
        if node.shift() > s {
            // The walk stopped above the range's level: the slot is empty or holds a larger
            // entry.
            return match w0 {
                0 => Conflict::None,
                w if is_sibling(w) => larger(sibling_offset(w)),
                _ => larger(off),
            };
        }
        if is_sibling(w0) {
            return larger(sibling_offset(w0));
        }
        if is_entry(w0) && node.extent(off) > n {
            return larger(off);
        }
        for j in off..off + n {
            let w = node.slot(j);
            if is_pointer(w) {
                return Conflict::Pointer;
            }
            if is_value(w) {
                if first == 0 {
                    first = w;
                }
            } else if is_node(w) {
                if let Conflict::Pointer = self.subtree_conflicts(w, &mut first) {
                    return Conflict::Pointer;
                }
            }
        }
        if first == 0 {
            Conflict::None
        } else {
            Conflict::Shadows(first)
        }
    }

    /// Every entry below node word `w`: a pointer, or the values (first one kept in `first`).
    fn subtree_conflicts(&self, w: usize, first: &mut usize) -> Conflict {
        // SAFETY: a linked node, under the lock.
        let node = unsafe { nd(node_ptr(w)) };
        for j in 0..CHUNK {
            let x = node.slot(j);
            if is_pointer(x) {
                return Conflict::Pointer;
            }
            if is_value(x) {
                if *first == 0 {
                    *first = x;
                }
            } else if is_node(x) {
                if let Conflict::Pointer = self.subtree_conflicts(x, first) {
                    return Conflict::Pointer;
                }
            }
        }
        if *first == 0 {
            Conflict::None
        } else {
            Conflict::Shadows(*first)
        }
    }

    /// One attempt at the single-walk insert under the lock.
    fn add_locked(
        &mut self,
        start: u64,
        order: u32,
        new: usize,
        reserve: &mut Option<SplitReserve>,
    ) -> AddStep {
        let s = level_of(order);
        let mut path = self.walk(start, s);
        loop {
            match self.find_conflicts(&path, start, order) {
                Conflict::Pointer => return AddStep::Fail(XaError::Exists { index: start }),
                Conflict::Larger {
                    node,
                    canon,
                    word,
                    order: big,
                } => {
                    let nodes = split_nodes(big, order);
                    if nodes > MAX_SPLIT_NODES {
                        return AddStep::Fail(XaError::SplitTooLarge {
                            have: big,
                            want: order,
                            nodes,
                        });
                    }
                    let big_start = start & !span(big);
                    let ready = match reserve {
                        Some(r) => {
                            r.word == word
                                && r.start == big_start
                                && r.order == big
                                && r.nodes.len() >= nodes
                        }
                        None => false,
                    };
                    if nodes > 0 && !ready {
                        *reserve = None;
                        return AddStep::NeedSplit(
                            SplitReserve {
                                word,
                                start: big_start,
                                order: big,
                                nodes: NodeReserve::new(0),
                            },
                            nodes,
                        );
                    }
                    let mut nodes_in = reserve
                        .take()
                        .map_or_else(|| NodeReserve::new(0), |r| r.nodes);
                    let generation = self.generation;
                    self.split_entry(node, canon, word, big, order, &mut nodes_in, &|w| w);
                    // The split replaced the larger shadow by pieces of `order`; continue the
                    // same walk down to them (unless the tree shrank under the path).
                    if generation == self.generation {
                        self.descend(&mut path, start, s);
                    } else {
                        path = self.walk(start, s);
                    }
                }
                Conflict::Shadows(_) | Conflict::None => {
                    return AddStep::Done(self.store_from(&mut path, start, order, new));
                }
            }
        }
    }
}

/// A shadow waiting to be split, with the nodes allocated for it outside the lock.
pub(super) struct SplitReserve {
    word: usize,
    start: u64,
    order: u32,
    nodes: NodeReserve,
}

enum AddStep {
    /// Stored; the first word replaced (0 or a value).
    Done(usize),
    /// Nothing changed.
    Fail(XaError),
    /// A larger shadow must be split and needs this many nodes: allocate them unlocked.
    NeedSplit(SplitReserve, usize),
}

fn check_add<P>(index: u64, order: u32, entry: &Entry<P>) -> Result<(), XaError> {
    if order > MAX_ORDER {
        return Err(XaError::BadOrder { order });
    }
    if index & span(order) != 0 {
        return Err(XaError::Unaligned { index, order });
    }
    if let Entry::Value(v) = entry {
        if *v > MAX_VALUE {
            return Err(XaError::BadValue { value: *v });
        }
    }
    Ok(())
}

fn shadow_of(w: usize) -> Option<u64> {
    debug_assert!(w == 0 || is_value(w));
    if w == 0 {
        None
    } else {
        Some(word_value(w))
    }
}

/// Checks an `add` request and encodes its entry; the caller owns the word from now on.
fn prepare<P: XaPointer>(index: u64, order: u32, entry: Entry<P>) -> Result<usize, Rejected<P>> {
    if let Err(error) = check_add(index, order, &entry) {
        return Err(Rejected {
            error,
            entry: Some(entry),
        });
    }
    encode(Some(entry))
}

/// The rejection of an insert whose encoded entry was never stored: the entry goes back to the
/// caller with the error.
///
/// # Safety
///
/// `w` came from [`prepare`] and was not stored: the caller still owns it, and gives it up here.
unsafe fn not_stored<P: XaPointer>(error: XaError, w: usize) -> Rejected<P> {
    Rejected {
        error,
        // SAFETY: forwarded: an owned word from `encode`.
        entry: unsafe { decode_owned(w) },
    }
}

/// [`XArray::add`].
#[doc(alias("__filemap_add_folio", "xas_find_conflict"))]
pub(in crate::xarray) fn add<P: XaPointer>(
    xa: &XArray<P>,
    index: u64,
    order: u32,
    entry: Entry<P>,
) -> Result<Option<u64>, Rejected<P>> {
    let new = prepare(index, order, entry)?;
    let mut reserve: Option<SplitReserve> = None;
    loop {
        let mut lock = xa.lock();
        match lock.add_locked(index, order, new, &mut reserve) {
            AddStep::Done(w) => return Ok(shadow_of(w)),
            AddStep::Fail(error) => {
                drop(lock);
                // SAFETY: `new` was not stored; it is still ours.
                return Err(unsafe { not_stored(error, new) });
            }
            AddStep::NeedSplit(mut r, nodes) => {
                // Allocate outside the lock, then start over; `add_locked` checks that the
                // shadow is still the same before using the nodes.
                drop(lock);
                r.nodes = NodeReserve::new(nodes);
                reserve = Some(r);
            }
        }
    }
}

/// `XArray::add_multi_walk`: the pre-patch insert, kept as the benchmark's "before".
#[cfg(feature = "bench-internals")]
pub(in crate::xarray) fn add_multi_walk<P: XaPointer>(
    xa: &XArray<P>,
    index: u64,
    order: u32,
    entry: Entry<P>,
) -> Result<Option<u64>, Rejected<P>> {
    let new = prepare(index, order, entry)?;
    // SAFETY: `fail` is called only on paths where `new` was not stored; it is still ours.
    let fail = |error: XaError| unsafe { not_stored(error, new) };
    let s = level_of(order);
    let mut reserve = NodeReserve::new(0);
    loop {
        // Walk 1, without the lock: the order of what is at the index now.
        let before = {
            let guard = rcu::pin();
            let found = xa.get_order(index, &guard);
            if found > order {
                // The pre-patch code loads the entry again to size the allocation.
                let _ = xa.load(index, &guard);
            }
            found
        };
        if before > order {
            // Too large a split is reported by the conflict walk below (if the entry is a
            // shadow at all).
            let nodes = split_nodes(before, order);
            if nodes <= MAX_SPLIT_NODES && reserve.len() < nodes {
                reserve = NodeReserve::new(nodes);
            }
        }
        let mut lock = xa.lock();
        // Walk 2: the conflict walk.
        let mut path = lock.walk(index, s);
        let conflict = lock.find_conflicts(&path, index, order);
        let old = match conflict {
            Conflict::Pointer => {
                drop(lock);
                return Err(fail(XaError::Exists { index }));
            }
            Conflict::None => 0,
            Conflict::Shadows(w) => w,
            Conflict::Larger { word, .. } => word,
        };
        if old != 0 {
            // Walk 3: the order again, now under the lock.
            let again = lock.get_order(index);
            if again > order {
                if let Conflict::Larger {
                    node,
                    canon,
                    word,
                    order: big,
                } = conflict
                {
                    let nodes = split_nodes(big, order);
                    if nodes > MAX_SPLIT_NODES {
                        drop(lock);
                        return Err(fail(XaError::SplitTooLarge {
                            have: big,
                            want: order,
                            nodes,
                        }));
                    }
                    if reserve.len() < nodes {
                        // It grew since walk 1: allocate outside the lock and start over.
                        continue;
                    }
                    lock.split_entry(node, canon, word, big, order, &mut reserve, &|w| w);
                    // The store walks again from the head after a split.
                    path = lock.walk(index, s);
                }
            }
        }
        let w = lock.store_from(&mut path, index, order, new);
        return Ok(shadow_of(w));
    }
}
