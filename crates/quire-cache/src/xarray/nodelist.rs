//! The list of nodes that hold only value entries, oldest first — for the page cache, the
//! nodes that hold nothing but shadow entries (the kernel's `shadow_nodes` list_lru, kept up
//! to date by `workingset_update_node`).
//!
//! An array made with [`XArray::with_node_list`] puts a node on its list when the node's last
//! pointer entry or child goes and only values remain (`count == nr_values > 0`), and takes it
//! off when a pointer entry or a child arrives, when it empties, and before it is freed. The
//! list is shared by any number of arrays (every file of one page cache); each array tags its
//! nodes with a token of the owner's choosing (the page cache uses the file's id), so that a
//! shrinker walking the list can find the array again without the list holding pointers to
//! arrays, which could move or go away.
//!
//! # Locking
//!
//! The list has its own mutex. An array changes a node's place on the list with its own lock
//! held and then takes the list's (array → list); the shrinker takes the list's lock only to
//! pick the oldest node and rotate it to the tail, copies what identifies it
//! ([`ListedNode`]), drops the lock, and then asks the owner's array to delete that node
//! ([`XArray::delete_listed`]) under the array's lock, which re-checks that the node is still
//! there and still holds only values. So no thread ever waits for an array's lock while it
//! holds the list's, and a node is dereferenced only under a lock that keeps it alive: the
//! list's (a node is unlinked, under that lock, before it is freed) or its array's.

use crate::sync::loom::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Node, XArray, XaPointer};

/// The list of value-only nodes of one or more arrays (the kernel's `shadow_nodes`), oldest
/// first. An array made with [`XArray::with_node_list`] lists a node when only values remain
/// in it and unlists it when a pointer or child arrives, when it empties and before it is
/// freed; each array tags its nodes with a token of its owner's choosing, and a shrinker deletes
/// a listed node through its array ([`XArray::delete_listed`]), which re-checks it under the
/// array's lock. The list's own lock is taken after an array's, never before.
#[derive(Debug, Default)]
pub struct NodeList {
    inner: Mutex<Ends>,
    len: AtomicUsize,
    /// Nodes in the trees of the arrays made with this list, listed or not (changed under the
    /// array's lock, so one relaxed add or subtract per node allocated or freed).
    nodes: AtomicUsize,
}

/// First and last node addresses (0 for none).
#[derive(Debug, Default)]
struct Ends {
    head: usize,
    tail: usize,
}

/// A node picked from a [`NodeList`]: enough to find it again in its array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListedNode {
    /// The token of the array that holds the node (see [`XArray::with_node_list`]).
    pub token: usize,
    /// The first index the node covers.
    pub base: u64,
    /// The node's shift.
    pub shift: u32,
    /// The node's address, compared (never dereferenced) when the array looks for it again.
    pub(super) addr: usize,
}

/// Borrows a node known to be alive (see the module documentation, "Locking").
///
/// # Safety
///
/// `addr` is the address of a live node: one on the list while the list's lock is held, or one
/// of an array whose lock the caller holds.
unsafe fn node<'x>(addr: usize) -> &'x Node {
    // SAFETY: forwarded.
    unsafe { &*(addr as *const Node) }
}

impl NodeList {
    /// An empty list.
    pub fn new() -> NodeList {
        NodeList::default()
    }

    /// Nodes on the list.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Nodes in the trees of every array made with this list, listed or not (for a page
    /// cache, the index nodes of all its files), at the arrays' last changes: the sum of their
    /// [`XArray::node_count`]s without visiting them. An array's nodes leave the count when
    /// they are retired, or when the array is dropped.
    pub fn array_nodes(&self) -> usize {
        self.nodes.load(Ordering::Relaxed)
    }

    /// Counts `n` nodes more in the arrays of this list.
    pub(super) fn add_nodes(&self, n: usize) {
        self.nodes.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `n` nodes fewer in the arrays of this list.
    pub(super) fn sub_nodes(&self, n: usize) {
        self.nodes.fetch_sub(n, Ordering::Relaxed);
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn ends(&self) -> MutexGuard<'_, Ends> {
        self.inner.lock()
    }

    /// Puts the node on the tail of the list or takes it off, as `listed` says.
    ///
    /// # Safety
    ///
    /// The caller holds the lock of the array that owns the live node `p`, and that array was
    /// made with this list.
    pub(super) unsafe fn set_listed(&self, p: *const Node, listed: bool, token: usize) {
        let mut ends = self.ends();
        // SAFETY: the caller holds the node's array lock: the node is alive.
        let n = unsafe { &*p };
        if n.listed.load(Ordering::Relaxed) == listed {
            return;
        }
        let addr = p as usize;
        if listed {
            n.list_token.store(token, Ordering::Relaxed);
            n.list_prev.store(ends.tail, Ordering::Relaxed);
            n.list_next.store(0, Ordering::Relaxed);
            if ends.tail != 0 {
                // SAFETY: nodes on the list are alive while its lock is held.
                unsafe { node(ends.tail) }
                    .list_next
                    .store(addr, Ordering::Relaxed);
            } else {
                ends.head = addr;
            }
            ends.tail = addr;
            self.len.fetch_add(1, Ordering::Relaxed);
        } else {
            Self::unlink(&mut ends, n, addr);
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        n.listed.store(listed, Ordering::Relaxed);
    }

    fn unlink(ends: &mut Ends, n: &Node, addr: usize) {
        let prev = n.list_prev.load(Ordering::Relaxed);
        let next = n.list_next.load(Ordering::Relaxed);
        if prev != 0 {
            // SAFETY: a listed neighbour is alive while the list's lock is held.
            unsafe { node(prev) }
                .list_next
                .store(next, Ordering::Relaxed);
        } else {
            debug_assert_eq!(ends.head, addr);
            ends.head = next;
        }
        if next != 0 {
            // SAFETY: as above.
            unsafe { node(next) }
                .list_prev
                .store(prev, Ordering::Relaxed);
        } else {
            debug_assert_eq!(ends.tail, addr);
            ends.tail = prev;
        }
        n.list_prev.store(0, Ordering::Relaxed);
        n.list_next.store(0, Ordering::Relaxed);
    }

    /// The oldest node on the list, which is moved to the tail (so that a node its array cannot
    /// delete right now does not stop the next call); `None` if the list is empty.
    pub fn rotate_oldest(&self) -> Option<ListedNode> {
        let mut ends = self.ends();
        let addr = ends.head;
        if addr == 0 {
            return None;
        }
        // SAFETY: on the list, under its lock.
        let n = unsafe { node(addr) };
        let found = ListedNode {
            token: n.list_token.load(Ordering::Relaxed),
            base: n.base,
            shift: n.shift(),
            addr,
        };
        if ends.tail != addr {
            Self::unlink(&mut ends, n, addr);
            n.list_prev.store(ends.tail, Ordering::Relaxed);
            // SAFETY: on the list, under its lock.
            unsafe { node(ends.tail) }
                .list_next
                .store(addr, Ordering::Relaxed);
            ends.tail = addr;
            if ends.head == 0 {
                ends.head = addr;
            }
        }
        Some(found)
    }

    /// Every listed node's token, oldest first (for tests and diagnostics).
    pub fn tokens(&self) -> Vec<usize> {
        let ends = self.ends();
        let mut out = Vec::new();
        let mut at = ends.head;
        while at != 0 {
            // SAFETY: on the list, under its lock.
            let n = unsafe { node(at) };
            out.push(n.list_token.load(Ordering::Relaxed));
            at = n.list_next.load(Ordering::Relaxed);
        }
        out
    }

    /// Whether the node at `p` is on the list (for the array's invariant check).
    #[cfg(feature = "bench-internals")]
    pub(super) fn contains(&self, p: *const Node) -> bool {
        let ends = self.ends();
        let mut at = ends.head;
        while at != 0 {
            if std::ptr::eq(at as *const Node, p) {
                return true;
            }
            // SAFETY: on the list, under its lock.
            at = unsafe { node(at) }.list_next.load(Ordering::Relaxed);
        }
        false
    }
}

impl<P: XaPointer> XArray<P> {
    /// Deletes the node `n` named (found on this array's [`NodeList`]) if it is still in the
    /// tree and still holds only values; returns whether it did. The values go, the node is
    /// freed after a grace period, and emptied ancestors go too — the kernel's
    /// `xa_delete_node` as the workingset shrinker uses it.
    #[cfg_attr(not(feature = "bench-internals"), doc(hidden))] // its list type is internal
    #[doc(alias = "xa_delete_node")]
    pub fn delete_listed(&self, n: &ListedNode) -> bool {
        self.lock().delete_listed(n)
    }
}
