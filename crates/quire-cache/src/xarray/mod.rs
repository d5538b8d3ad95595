//! The XArray: a multi-order radix tree with value (shadow) entries, three marks, lock-free reads
//! and single-walk insertion (technique 4 of docs/RULES.md). After `lib/xarray.c`.
//!
//! An [`XArray`] maps every `u64` index to nothing, a *pointer entry* (an owned pointer `P`, for
//! the page cache a folio reference) or a *value entry* (an integer of up to 63 bits; the page
//! cache keeps the shadow entries of evicted folios this way). One entry may span an aligned
//! power-of-two range of indices (order 0 to 63): a large folio of order k covers 2^k indices.
//! Each entry carries three marks ([`Mark`]) that belong to the whole entry.
//!
//! # Reading
//!
//! Readers never lock. Inside an epoch guard ([`crate::sync::rcu::pin`]) they walk from the head
//! with acquire loads: [`XArray::load`], [`XArray::find`], the iterators ([`XArray::range`],
//! [`XArray::range_marked`], [`XArray::conflicts`]) and the read cursor ([`Cursor`]). A pointer
//! entry comes back as `&'g P::Target`, valid while the guard lives: a removed pointer is dropped
//! only after a grace period (see [`Retired`]). To keep an object beyond the guard, take your own
//! reference while the guard is held (for an `Arc`, `Arc::increment_strong_count`; for a folio,
//! `try_get` on its count) and then re-load the index ([`Cursor::reload`] or [`XArray::load`]): if
//! the same pointer is still there, the reference is to the current entry; if not, drop it and
//! look again. Writers replace every stale copy of an entry in an unlinked node by a retry entry
//! before they release the entry, so the re-check cannot be fooled by a node that has left the
//! tree.
//!
//! # Writing
//!
//! Writers serialise on the array's lock: the one-shot methods on [`XArray`] ([`XArray::store`],
//! [`XArray::store_order`], [`XArray::erase`], …) take it themselves; [`XArray::lock`] returns an
//! [`XaLock`] to do several changes under one hold, and [`XaLock::state`] gives an [`XaState`]
//! cursor that walks once and then loads, stores and marks at the position it reached. Nodes that
//! leave the tree are freed through the epoch ([`crate::sync::rcu::Guard::defer_destroy`]).
//!
//! # Entry encoding
//!
//! Every slot (and the head) is one `AtomicUsize` word, so a reader never sees a torn entry:
//!
//! | word (low bits)                 | meaning                                                        |
//! |---------------------------------|----------------------------------------------------------------|
//! | `0`                             | empty                                                          |
//! | `…vvv1`                         | value entry: the value is `word >> 1` (0 ..= 2^63 − 1)         |
//! | `…p00` (not 0)                  | pointer entry: `P::into_raw`, aligned to at least 4 bytes      |
//! | `…n010`                         | internal: a child node, at address `word & !7`                 |
//! | `…o110`, `o < 64`               | internal: sibling; the entry is in slot `o` of the same node   |
//! | `0x1fff << 3 \| 0b110`          | internal: retry — this node has left the tree, walk again      |
//!
//! # Node layout
//!
//! A node has 64 slots (4 under `--cfg loom`, to keep models small) and a `shift`: slot `i` of a
//! node whose range starts at `base` covers indices `base + (i << shift) ..` for `1 << shift`
//! indices. Leaves have shift 0; the root's shift is the smallest multiple of 6 that covers the
//! largest index stored. An entry of order `k` lives in the node of shift `k - k % 6`, in
//! `2^(k % 6)` consecutive aligned slots: the first (canonical) slot holds the entry, the others
//! hold sibling words pointing at it. Marks are three 64-bit words per node, one bit per slot;
//! an entry's marks are the bits of its canonical slot, and a slot that holds a child node has a
//! mark bit set when some entry below it has that mark. The head holds nothing, the entry of
//! index 0 (order 0 only), or the root node; `head_marks` holds the head entry's marks, or for a
//! tree the marks present anywhere in it. A node also counts its non-empty slots (siblings and
//! children included) for the writer; when that count falls to zero the node is unlinked and
//! freed, and a root with only slot 0 in use is replaced by that slot's content (the tree
//! shrinks back).
//!
//! # The single-walk insert (technique 4)
//!
//! [`XArray::add`] inserts an entry of order `k` at an aligned index for the page cache. Under the
//! lock it walks once from the head to the node where the entry belongs, and on the way finds
//! every conflict: a pointer entry means [`XaError::Exists`] (nothing changed); value entries
//! (shadows) of the same or smaller order are replaced and the first is returned; a shadow of
//! larger order is split first — if the split needs nodes, the lock is dropped, the nodes are
//! allocated, the lock is taken again and, if the shadow changed in between, it starts over. The
//! store continues from the position the walk reached. `XArray::add_multi_walk` (feature
//! `bench-internals`) is the
//! pre-patch "before" (rule 7 of docs/RULES.md): one walk to read the order at the index, a conflict
//! walk, and another walk to read the order again when something was found.
//!
//! Every walk from the head counts [`Event::XaWalks`]; node allocations and frees count
//! [`Event::XaNodeAllocs`] and [`Event::XaNodeFrees`].

mod entry;
mod node;
mod nodelist;
mod read;
mod write;

use entry::*;
use node::{Node, Spot, Step};

pub use entry::{Entry, XaPointer};
pub use read::{Cursor, Iter};
pub use write::{XaLock, XaState};
// Node management: the shadow-node list the workingset shrinker walks, and the nodes a split
// reserves. The page cache's own; public only for the tests and the benchmark.
#[cfg(feature = "bench-internals")]
pub use entry::split_nodes;
#[cfg(feature = "bench-internals")]
pub use nodelist::{ListedNode, NodeList};
#[cfg(not(feature = "bench-internals"))]
pub(crate) use nodelist::{ListedNode, NodeList};
#[cfg(feature = "bench-internals")]
pub use write::NodeReserve;
#[cfg(not(feature = "bench-internals"))]
pub(crate) use write::NodeReserve;

use std::fmt;
use std::marker::PhantomData;
use std::ops::{ControlFlow, Deref};
use std::ptr::NonNull;
use std::sync::atomic::AtomicUsize as PlainUsize;
use std::sync::Arc;

use crate::stats::{self, Event};
use crate::sync::loom::{AtomicU32, AtomicUsize, Mutex, Ordering};
use crate::sync::rcu::{self, Guard};

#[cfg(not(target_pointer_width = "64"))]
compile_error!("the XArray packs 63-bit values into pointer-sized words: it needs a 64-bit target");

/// Index bits consumed by one level of the tree.
pub(crate) const CHUNK_SHIFT: u32 = if cfg!(loom) { 2 } else { 6 };
/// Slots per node.
const CHUNK: usize = 1 << CHUNK_SHIFT;
const MASK: u64 = CHUNK as u64 - 1;
/// The most levels a tree can have.
const MAX_DEPTH: usize = 64_usize.div_ceil(CHUNK_SHIFT as usize);

/// The largest order an entry may have: it then covers half of the index space.
pub const MAX_ORDER: u32 = 63;
/// The largest integer a value entry can hold.
pub const MAX_VALUE: u64 = u64::MAX >> 1;
/// The most nodes one split may need ([`XaError::SplitTooLarge`] beyond it).
#[cfg(feature = "bench-internals")]
pub const MAX_SPLIT_NODES: usize = 1 << 16;
/// The most nodes one split may need ([`XaError::SplitTooLarge`] beyond it).
#[cfg(not(feature = "bench-internals"))]
pub(crate) const MAX_SPLIT_NODES: usize = 1 << 16;
/// How many marks every entry has.
pub const NR_MARKS: usize = 3;

/// One of an entry's three marks (the page cache uses them for dirty, write-back and to-write).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mark {
    /// Mark 0.
    M0 = 0,
    /// Mark 1.
    M1 = 1,
    /// Mark 2.
    M2 = 2,
}

impl Mark {
    /// All three marks.
    pub const ALL: [Mark; NR_MARKS] = [Mark::M0, Mark::M1, Mark::M2];

    #[inline]
    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// What a search or an iteration found: an entry and the index of its first slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found<'g, T> {
    /// The first index the entry covers.
    pub index: u64,
    /// The entry's order: it covers `index ..= index + 2^order - 1`.
    pub order: u32,
    /// The entry.
    pub entry: Entry<&'g T>,
}

impl<T> Found<'_, T> {
    /// The last index the entry covers.
    pub fn last(&self) -> u64 {
        self.index + span(self.order)
    }
}

/// Errors of XArray operations. Nothing is changed when one is returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum XaError {
    /// `add` found a pointer entry in the range.
    #[error("an entry is already present in the range of index {index:#x}")]
    Exists {
        /// The index asked for.
        index: u64,
    },
    /// An order above [`MAX_ORDER`].
    #[error("order {order} is out of range (at most 63)")]
    BadOrder {
        /// The order asked for.
        order: u32,
    },
    /// `add` needs an index aligned to the entry's order.
    #[error("index {index:#x} is not aligned to order {order}")]
    Unaligned {
        /// The index asked for.
        index: u64,
        /// The order asked for.
        order: u32,
    },
    /// A value entry above [`MAX_VALUE`].
    #[error("value {value:#x} does not fit in 63 bits")]
    BadValue {
        /// The value given.
        value: u64,
    },
    /// A range whose first index is after its last.
    #[error("empty range: first index {first:#x} is after last index {last:#x}")]
    EmptyRange {
        /// First index.
        first: u64,
        /// Last index.
        last: u64,
    },
    /// No entry where one was needed (split).
    #[error("no entry at index {index:#x}")]
    NotPresent {
        /// The index asked for.
        index: u64,
    },
    /// A split to an order not below the entry's own.
    #[error("cannot split an entry of order {have} into order {want}")]
    BadSplit {
        /// The entry's order.
        have: u32,
        /// The order asked for.
        want: u32,
    },
    /// A split that would need more than `MAX_SPLIT_NODES` nodes.
    #[error(
        "splitting an order-{have} entry into order {want} needs {nodes} nodes, above the limit"
    )]
    SplitTooLarge {
        /// The entry's order.
        have: u32,
        /// The order asked for.
        want: u32,
        /// Nodes it would need.
        nodes: usize,
    },
    /// A `NodeReserve` with too few nodes for the split asked for.
    #[error("the split needs {needed} nodes but the reserve holds {have}")]
    ReserveTooSmall {
        /// Nodes needed.
        needed: usize,
        /// Nodes in the reserve.
        have: usize,
    },
    /// `cmpxchg` found another entry than the one expected.
    #[error("the entry at index {index:#x} is not the one expected")]
    Mismatch {
        /// The index asked for.
        index: u64,
    },
}

/// An error that hands back the entry the operation was given, so nothing is lost.
#[derive(thiserror::Error)]
#[error("{error}")]
pub struct Rejected<P> {
    /// What went wrong.
    pub error: XaError,
    /// The entry that was not stored.
    pub entry: Option<Entry<P>>,
}

impl<P> fmt::Debug for Rejected<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rejected")
            .field("error", &self.error)
            .field(
                "entry",
                &self.entry.as_ref().map(|e| e.as_ref().map(|_| "..")),
            )
            .finish()
    }
}

/// A pointer removed from the array. It derefs to the object; dropping it drops the pointer after
/// a grace period (immediately if `P::NEEDS_GRACE_PERIOD` is false), so that readers that loaded
/// it before it was removed can finish with it.
pub struct Retired<P: XaPointer> {
    raw: NonNull<P::Target>,
    _owns: PhantomData<P>,
}

// SAFETY: a `Retired<P>` owns a `P`, which is `Send`; it gives shared access to `P::Target`
// only.
unsafe impl<P: XaPointer> Send for Retired<P> {}
// SAFETY: shared access to a `Retired` gives `&P::Target` only.
unsafe impl<P: XaPointer> Sync for Retired<P> where P::Target: Sync {}

struct SendPtr<P>(P);
// SAFETY: only used to move a `P: Send` into a deferred closure.
unsafe impl<P: Send> Send for SendPtr<P> {}

impl<P: XaPointer> Retired<P> {
    /// # Safety
    ///
    /// `w` is a pointer word taken out of the array, owned by the caller from now on.
    unsafe fn from_word(w: usize) -> Retired<P> {
        debug_assert!(is_pointer(w));
        Retired {
            // SAFETY: pointer words are never 0.
            raw: unsafe { NonNull::new_unchecked(w as *mut P::Target) },
            _owns: PhantomData,
        }
    }

    /// The raw pointer.
    pub fn as_ptr(&self) -> *const P::Target {
        self.raw.as_ptr()
    }

    /// Takes the pointer back without waiting for a grace period.
    ///
    /// # Safety
    ///
    /// No reader may still use a reference it loaded from the array before this pointer was
    /// removed, once the returned value is dropped — either because a grace period has passed
    /// since the removal, or because dropping `P` frees nothing a reader could touch.
    pub unsafe fn into_inner(self) -> P {
        let raw = self.raw;
        std::mem::forget(self);
        // SAFETY: the word came from `into_raw` and is owned by this `Retired`, which is gone.
        unsafe { P::from_raw(raw) }
    }
}

impl<P: XaPointer> Deref for Retired<P> {
    type Target = P::Target;
    fn deref(&self) -> &P::Target {
        // SAFETY: this `Retired` owns the pointer, so the object is alive.
        unsafe { self.raw.as_ref() }
    }
}

impl<P: XaPointer> Drop for Retired<P> {
    fn drop(&mut self) {
        // SAFETY: the pointer is owned by this `Retired` and dropped once, here.
        let p = SendPtr(unsafe { P::from_raw(self.raw) });
        if P::NEEDS_GRACE_PERIOD {
            rcu::pin().defer(move || {
                let p = p;
                drop(p.0);
            });
        } else {
            drop(p);
        }
    }
}

impl<P: XaPointer> fmt::Debug for Retired<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Retired({:p})", self.raw)
    }
}

/// Which insert [`XArray::add_with`] runs (rule 7 of docs/RULES.md): `Multi`, with the
/// feature `bench-internals`, is the "before" for `quire bench`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddWalks {
    /// One walk in the common case (technique 4).
    #[default]
    Single,
    /// The pre-patch insert: read the order, walk for conflicts, read the order again.
    #[cfg(feature = "bench-internals")]
    Multi,
}

// ---- the array -------------------------------------------------------------------------------

/// A sparse array of `P` pointers and 63-bit values indexed by `u64`; see the
/// [module documentation](self).
pub struct XArray<P: XaPointer> {
    /// Empty, the entry of index 0, or the root node.
    head: AtomicUsize,
    /// The head entry's marks, or the marks present anywhere in the tree.
    head_marks: AtomicU32,
    /// Serialises writers.
    lock: Mutex<()>,
    /// Nodes linked into this tree (for tests: the tree shrinks back).
    nodes: PlainUsize,
    /// Where value-only nodes are listed, and this array's token there.
    list: Option<(Arc<NodeList>, usize)>,
    _owns: PhantomData<P>,
}

// SAFETY: the array owns its pointers, which are `Send`; moving the array moves them.
unsafe impl<P: XaPointer> Send for XArray<P> {}
// SAFETY: through `&XArray` readers on any thread get `&P::Target` (hence `Target: Sync`) and
// writers on any thread take pointers out or drop them (`P: Send`, required by `XaPointer`);
// everything else is atomics and the lock.
unsafe impl<P: XaPointer> Sync for XArray<P> where P::Target: Sync {}

impl<P: XaPointer> Default for XArray<P> {
    fn default() -> Self {
        XArray::new()
    }
}

impl<P: XaPointer> fmt::Debug for XArray<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XArray")
            .field("empty", &self.is_empty())
            .field("nodes", &self.node_count())
            .finish()
    }
}

impl<P: XaPointer> XArray<P> {
    /// An empty array.
    pub fn new() -> XArray<P> {
        XArray {
            head: AtomicUsize::new(0),
            head_marks: AtomicU32::new(0),
            lock: Mutex::new(()),
            nodes: PlainUsize::new(0),
            list: None,
            _owns: PhantomData,
        }
    }

    /// An empty array that keeps its nodes holding only value entries on `list`, tagged with
    /// `token` (see [`NodeList`]): the page cache's shadow nodes, for the workingset shrinker.
    #[cfg_attr(not(feature = "bench-internals"), doc(hidden))] // its list type is internal
    pub fn with_node_list(list: Arc<NodeList>, token: usize) -> XArray<P> {
        let mut xa = XArray::new();
        xa.list = Some((list, token));
        xa
    }

    /// The bytes of heap one node takes (its allocation).
    pub const NODE_BYTES: usize = std::mem::size_of::<Node>();

    /// Whether the array holds no entry.
    #[doc(alias = "xa_empty")]
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) == 0
    }

    /// Nodes now linked into this array's tree (0 when empty or when only index 0 is used).
    pub fn node_count(&self) -> usize {
        self.nodes.load(Ordering::Relaxed)
    }

    /// Whether any entry has `mark`.
    #[doc(alias = "xa_marked")]
    pub fn marked(&self, mark: Mark) -> bool {
        self.head_marks.load(Ordering::Acquire) as u8 & mark.bit() != 0
    }

    /// Takes the array's lock, to make several changes under one hold.
    #[doc(alias = "xa_lock")]
    pub fn lock(&self) -> XaLock<'_, P> {
        XaLock::new(self)
    }

    // ---- lock-free reads ----

    /// The entry at `index`, if any. Lock-free; the pointer is valid while `guard` lives.
    #[inline]
    #[doc(alias = "xa_load")]
    pub fn load<'g>(&'g self, index: u64, guard: &'g Guard) -> Option<Entry<&'g P::Target>> {
        let spot = self.locate(index, guard);
        // SAFETY: the word was loaded under `guard`; a pointer in it is dropped only after a
        // grace period that `guard` holds back (or never frees, for `NEEDS_GRACE_PERIOD` false),
        // and the array itself outlives `'g`.
        unsafe { decode_ref(spot.word) }
    }

    /// The order of the entry covering `index`, or 0 if there is none.
    #[doc(alias = "xa_get_order")]
    pub fn get_order(&self, index: u64, guard: &Guard) -> u32 {
        self.locate_with_order(index, guard).1
    }

    /// Whether the entry covering `index` has `mark` (false if there is none).
    #[doc(alias = "xa_get_mark")]
    pub fn get_mark(&self, index: u64, mark: Mark, guard: &Guard) -> bool {
        self.locate(index, guard).marks(self) & mark.bit() != 0
    }

    /// The first entry covering an index in `start ..= max` (an entry covering `start` counts,
    /// and is reported at its first index).
    #[doc(alias = "xa_find")]
    pub fn find<'g>(
        &'g self,
        start: u64,
        max: u64,
        guard: &'g Guard,
    ) -> Option<Found<'g, P::Target>> {
        self.range(start, max, guard).next()
    }

    /// The first entry with `mark` covering an index in `start ..= max`.
    pub fn find_marked<'g>(
        &'g self,
        start: u64,
        max: u64,
        mark: Mark,
        guard: &'g Guard,
    ) -> Option<Found<'g, P::Target>> {
        self.range_marked(start, max, mark, guard).next()
    }

    /// The first entry after the one covering `index` (or after `index` if it is empty) that
    /// starts at most at `max`.
    #[doc(alias = "xa_find_after")]
    pub fn find_after<'g>(
        &'g self,
        index: u64,
        max: u64,
        guard: &'g Guard,
    ) -> Option<Found<'g, P::Target>> {
        let start = index.checked_add(1)?;
        self.range(start, max, guard).find(|f| f.index > index)
    }

    /// As [`XArray::find_after`], among entries with `mark`.
    pub fn find_after_marked<'g>(
        &'g self,
        index: u64,
        max: u64,
        mark: Mark,
        guard: &'g Guard,
    ) -> Option<Found<'g, P::Target>> {
        let start = index.checked_add(1)?;
        self.range_marked(start, max, mark, guard)
            .find(|f| f.index > index)
    }

    /// Every entry covering an index in `start ..= max`, in index order, each once.
    pub fn range<'g>(&'g self, start: u64, max: u64, guard: &'g Guard) -> Iter<'g, P> {
        Iter::new(self, guard, start, max, None)
    }

    /// Loom-only: [`XArray::load`] without the re-check after following a sibling to its
    /// canonical slot (see `Node::step`), for the model that must catch it.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn broken_load_without_sibling_recheck<'g>(
        &'g self,
        index: u64,
        guard: &'g Guard,
    ) -> Option<Entry<&'g P::Target>> {
        let spot = self.locate_with(index, guard, false);
        // SAFETY: as in `load`.
        unsafe { decode_ref(spot.word) }
    }

    /// Loom-only: [`XArray::range`] without the check that an entry reached from a sibling
    /// still covers the index sought (a real bug once), for the model that must catch it.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn broken_range_without_cover_check<'g>(
        &'g self,
        start: u64,
        max: u64,
        guard: &'g Guard,
    ) -> Iter<'g, P> {
        let mut it = Iter::new(self, guard, start, max, None);
        it.broken_no_cover_check = true;
        it
    }

    /// Every entry with `mark` covering an index in `start ..= max`, each once.
    pub fn range_marked<'g>(
        &'g self,
        start: u64,
        max: u64,
        mark: Mark,
        guard: &'g Guard,
    ) -> Iter<'g, P> {
        Iter::new(self, guard, start, max, Some(mark))
    }

    /// Every entry, in index order.
    #[doc(alias = "xa_for_each")]
    pub fn iter<'g>(&'g self, guard: &'g Guard) -> Iter<'g, P> {
        self.range(0, u64::MAX, guard)
    }

    /// The conflict walk: every entry overlapping the aligned range of `order` around `index`
    /// (an entry larger than the range is yielded once).
    pub fn conflicts<'g>(&'g self, index: u64, order: u32, guard: &'g Guard) -> Iter<'g, P> {
        let order = order.min(MAX_ORDER);
        let start = index & !span(order);
        self.range(start, start + span(order), guard)
    }

    /// Calls `f` on every entry covering `start ..= max` (with `mark`, if given), in order,
    /// pinning its own guard and pausing every 64 entries (dropping the guard and resuming after
    /// the last entry seen), so that a long walk does not hold back reclamation. `f` may stop
    /// the walk by returning `ControlFlow::Break`.
    #[doc(alias = "xa_for_each")]
    pub fn for_each<F>(&self, start: u64, max: u64, mark: Option<Mark>, mut f: F)
    where
        F: FnMut(Found<'_, P::Target>) -> ControlFlow<()>,
    {
        let mut next = Some(start);
        while let Some(from) = next {
            if from > max {
                return;
            }
            let guard = rcu::pin();
            let mut it = Iter::new(self, &guard, from, max, mark);
            for _ in 0..64 {
                match it.next() {
                    Some(found) => {
                        if f(found).is_break() {
                            return;
                        }
                    }
                    None => return,
                }
            }
            next = it.resume_index();
        }
    }

    /// A read cursor at `index`: load once, then re-check the slot after taking a reference.
    #[doc(alias = "XA_STATE")]
    pub fn cursor<'g>(&'g self, index: u64, guard: &'g Guard) -> Cursor<'g, P> {
        Cursor::new(self, index, guard)
    }

    // ---- writes (each takes the lock) ----

    /// Stores `entry` at `index`. If an entry covers `index`, the whole entry is replaced and
    /// the new one keeps its order, first index and marks; `None` dissolves it entirely. Into an
    /// empty index an order-0 entry is stored. Returns the entry replaced.
    #[doc(alias = "xa_store")]
    pub fn store(
        &self,
        index: u64,
        entry: Option<Entry<P>>,
    ) -> Result<Option<Entry<Retired<P>>>, Rejected<P>> {
        self.lock().store(index, entry)
    }

    /// Stores `entry` with `order` over the aligned range around `index` (`index` is rounded
    /// down). Every entry overlapping the range is removed — one larger than the range
    /// entirely — and the new entry carries the union of their marks; `None` just removes them.
    /// Returns the first entry removed (lowest index); the others are retired.
    #[doc(alias = "xa_store_order")]
    pub fn store_order(
        &self,
        index: u64,
        order: u32,
        entry: Option<Entry<P>>,
    ) -> Result<Option<Entry<Retired<P>>>, Rejected<P>> {
        self.lock().store_order(index, order, entry)
    }

    /// Stores `entry` over `first ..= last` as the fewest largest aligned pieces (each a copy
    /// of the entry, with `store_order` semantics). An empty range or a bad value is an error.
    #[doc(alias = "xa_store_range")]
    pub fn store_range(
        &self,
        first: u64,
        last: u64,
        entry: Option<Entry<P>>,
    ) -> Result<(), Rejected<P>>
    where
        P: Clone,
    {
        self.lock().store_range(first, last, entry)
    }

    /// Removes the entry covering `index` (all of it) and returns it.
    #[doc(alias = "xa_erase")]
    pub fn erase(&self, index: u64) -> Option<Entry<Retired<P>>> {
        self.lock().erase(index)
    }

    /// If the entry covering `index` is `expected` (by pointer identity or value; `None` for
    /// empty), replaces that whole entry by `new` as [`XArray::store`] does and returns the old
    /// one; otherwise returns [`XaError::Mismatch`] with `new` handed back.
    #[doc(alias = "xa_cmpxchg")]
    pub fn cmpxchg(
        &self,
        index: u64,
        expected: Option<Entry<*const P::Target>>,
        new: Option<Entry<P>>,
    ) -> Result<Option<Entry<Retired<P>>>, Rejected<P>> {
        self.lock().cmpxchg(index, expected, new)
    }

    /// Sets `mark` on the entry covering `index`; false if there is none.
    #[doc(alias = "xa_set_mark")]
    pub fn set_mark(&self, index: u64, mark: Mark) -> bool {
        self.lock().set_mark(index, mark)
    }

    /// Clears `mark` on the entry covering `index`; false if there is none.
    #[doc(alias = "xa_clear_mark")]
    pub fn clear_mark(&self, index: u64, mark: Mark) -> bool {
        self.lock().clear_mark(index, mark)
    }

    /// Splits the entry covering `index` into pieces of `order`, each holding the entry (a
    /// clone of the pointer) with the entry's marks. The nodes it needs are allocated outside
    /// the lock; if the entry changed meanwhile, it starts over. Splitting to the entry's own
    /// order does nothing.
    #[doc(alias = "xas_split")]
    pub fn split(&self, index: u64, order: u32) -> Result<(), XaError>
    where
        P: Clone,
    {
        loop {
            let needed = self.lock().split_needs(index, order)?;
            let mut reserve = NodeReserve::new(needed);
            match self.lock().split_with(index, order, &mut reserve) {
                Err(XaError::ReserveTooSmall { .. }) => continue,
                other => return other,
            }
        }
    }

    /// Inserts `entry` with `order` at `index` (aligned to the order) for the page cache, in one
    /// walk when no split is needed: a pointer entry in the range is [`XaError::Exists`];
    /// value entries (shadows) are replaced and the first is returned; a larger shadow is split
    /// first (allocating outside the lock). The new entry carries the marks of what it replaced.
    pub fn add(&self, index: u64, order: u32, entry: Entry<P>) -> Result<Option<u64>, Rejected<P>> {
        write::add(self, index, order, entry)
    }

    /// The pre-patch insert ("before", rule 7 of docs/RULES.md): the same result as [`XArray::add`]
    /// with a walk to read the order at `index`, a conflict walk, and one more walk to read the
    /// order again when a conflict was found.
    #[cfg(feature = "bench-internals")]
    pub fn add_multi_walk(
        &self,
        index: u64,
        order: u32,
        entry: Entry<P>,
    ) -> Result<Option<u64>, Rejected<P>> {
        write::add_multi_walk(self, index, order, entry)
    }

    /// [`XArray::add`], or the "before" insert `add_multi_walk` (feature `bench-internals`), as
    /// `policy` says.
    pub fn add_with(
        &self,
        policy: AddWalks,
        index: u64,
        order: u32,
        entry: Entry<P>,
    ) -> Result<Option<u64>, Rejected<P>> {
        match policy {
            AddWalks::Single => self.add(index, order, entry),
            #[cfg(feature = "bench-internals")]
            AddWalks::Multi => self.add_multi_walk(index, order, entry),
        }
    }

    /// Checks the tree's invariants under the lock (for tests): counts, sibling runs, mark
    /// propagation, node shifts, no retry entry in the live tree, and the node count. Stops
    /// every writer while it walks the whole tree.
    #[cfg(feature = "bench-internals")]
    pub fn check(&self) -> Result<(), String> {
        self.lock().check()
    }
}

impl<P: XaPointer> Drop for XArray<P> {
    fn drop(&mut self) {
        // No reader can be inside: loads borrow the array for their guard's lifetime.
        let h = self.head.load(Ordering::Acquire);
        let list = self.list.as_ref().map(|(l, _)| &**l);
        if let Some(list) = list {
            list.sub_nodes(self.node_count());
        }
        // SAFETY: the tree is exclusively ours; every node and pointer in it is freed once.
        unsafe { free_tree_now::<P>(h, list) };
    }
}

/// Frees a tree (or a head entry) immediately, taking its nodes off `list` first.
///
/// # Safety
///
/// Nobody else can reach anything in it but through `list` (the array's own node list).
unsafe fn free_tree_now<P: XaPointer>(w: usize, list: Option<&NodeList>) {
    if is_node(w) {
        let node = node_ptr(w);
        for off in 0..CHUNK {
            // SAFETY: the node is alive until freed below.
            let x = unsafe { (*node).slot(off) };
            // SAFETY: forwarded.
            unsafe { free_tree_now::<P>(x, list) };
        }
        if let Some(list) = list {
            // SAFETY: the array is being dropped by its owner, which stands for its lock; the
            // node is alive.
            unsafe { list.set_listed(node, false, 0) };
        }
        stats::count(Event::XaNodeFrees);
        // SAFETY: every node came from `Box::into_raw` and is freed once.
        drop(unsafe { Box::from_raw(node.cast_mut()) });
    } else if is_entry(w) {
        // SAFETY: the array owned the entry.
        drop(unsafe { decode_owned::<P>(w) });
    }
}
