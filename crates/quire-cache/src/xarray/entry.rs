//! Entry words: how a slot's `usize` encodes nothing, a value, a pointer, a sibling, a node or
//! the retry marker; the index arithmetic of the levels; and the user-facing [`Entry`] and
//! [`XaPointer`] that are encoded into those words (see "Entry encoding" in the module
//! documentation).

use std::ptr::NonNull;
use std::sync::Arc;

use super::{Node, Rejected, Retired, XaError, CHUNK, CHUNK_SHIFT, MASK, MAX_ORDER, MAX_VALUE};

pub(super) const RETRY: usize = (0x1fff << 3) | 0b110;

#[inline]
pub(super) fn is_value(w: usize) -> bool {
    w & 1 == 1
}
#[inline]
pub(super) fn is_pointer(w: usize) -> bool {
    w != 0 && w & 3 == 0
}
/// A user entry: a pointer or a value.
#[inline]
pub(super) fn is_entry(w: usize) -> bool {
    is_value(w) || is_pointer(w)
}
#[inline]
pub(super) fn is_internal(w: usize) -> bool {
    w & 3 == 2
}
#[inline]
pub(super) fn is_node(w: usize) -> bool {
    w & 7 == 0b010
}
#[inline]
pub(super) fn is_sibling(w: usize) -> bool {
    w & 7 == 0b110 && w != RETRY
}
#[inline]
pub(super) fn mk_sibling(offset: usize) -> usize {
    (offset << 3) | 0b110
}
#[inline]
pub(super) fn sibling_offset(w: usize) -> usize {
    w >> 3
}
#[inline]
pub(super) fn mk_node(node: *const Node) -> usize {
    node as usize | 0b010
}
#[inline]
pub(super) fn node_ptr(w: usize) -> *const Node {
    (w & !7) as *const Node
}
#[inline]
pub(super) fn mk_value(v: u64) -> usize {
    ((v << 1) | 1) as usize
}
#[inline]
pub(super) fn word_value(w: usize) -> u64 {
    (w >> 1) as u64
}

/// The shift of the node level where an entry of `order` lives.
#[inline]
pub(super) fn level_of(order: u32) -> u32 {
    order - order % CHUNK_SHIFT
}

/// Whether a node of `shift` starting at 0 (a root) covers `index`.
#[inline]
pub(super) fn covers(shift: u32, index: u64) -> bool {
    shift + CHUNK_SHIFT >= 64 || index >> (shift + CHUNK_SHIFT) == 0
}

/// The slot of a node of `shift` that `index` falls in.
#[inline]
pub(super) fn offset(shift: u32, index: u64) -> usize {
    ((index >> shift) & MASK) as usize
}

/// How many slots of a node of `shift` lie inside the index space (all but the top level: all).
#[inline]
pub(super) fn slots_in(shift: u32) -> usize {
    if shift + CHUNK_SHIFT > 64 {
        1 << (64 - shift)
    } else {
        CHUNK
    }
}

/// The smallest root shift that covers `last`.
pub(super) fn shift_for(last: u64) -> u32 {
    let mut s = 0;
    while !covers(s, last) {
        s += CHUNK_SHIFT;
    }
    s
}

/// `2^order - 1`.
#[inline]
pub(super) fn span(order: u32) -> u64 {
    if order >= 64 {
        u64::MAX
    } else {
        (1u64 << order) - 1
    }
}

/// The order of an entry found in a node of `shift` spanning `nslots` slots.
#[inline]
pub(super) fn order_of(shift: u32, nslots: usize) -> u32 {
    shift + (usize::BITS - 1 - nslots.leading_zeros())
}

/// How many nodes splitting one entry of order `old` into pieces of order `new` (< `old`) needs:
/// the pieces that fall on a lower level than the entry need every node of the subtrees that
/// replace its slots. Saturates at `usize::MAX`.
// Re-exported for the tests only (feature `bench-internals`).
#[cfg_attr(not(feature = "bench-internals"), allow(unreachable_pub))]
pub fn split_nodes(old: u32, new: u32) -> usize {
    if new >= old || old > MAX_ORDER {
        return 0;
    }
    let (hi, lo) = (level_of(old), level_of(new));
    let slots = 1usize << (old - hi);
    let mut total: usize = 0;
    let mut per_level: usize = slots;
    let mut shift = hi;
    while shift > lo {
        total = total.saturating_add(per_level);
        per_level = per_level.saturating_mul(CHUNK);
        shift -= CHUNK_SHIFT;
    }
    total
}

// ---- the user's entries ----------------------------------------------------------------------

/// An owned pointer that the array can hold: it converts to and from a non-null raw pointer
/// aligned to at least 4 bytes (the two low bits tag the word).
///
/// # Safety
///
/// `into_raw` must return a pointer aligned to at least 4 bytes that stays valid for shared
/// access (`&Target`, from any thread) until `from_raw` is called on it and the value it returns
/// is dropped; `from_raw` must accept exactly the pointers `into_raw` returned, once each.
pub unsafe trait XaPointer: Sized + Send + 'static {
    /// What the pointer points to; readers get `&Target`.
    type Target;

    /// Whether dropping the pointer may free memory that a lock-free reader could still be
    /// reading. When true (the default), a removed pointer is dropped only after a grace period;
    /// a type whose drop never frees the pointee (a reference to an object that lives as long as
    /// the program, a folio reference whose descriptor is never freed) may say false.
    const NEEDS_GRACE_PERIOD: bool = true;

    /// Gives up ownership, returning the raw pointer.
    fn into_raw(this: Self) -> NonNull<Self::Target>;

    /// Takes ownership back.
    ///
    /// # Safety
    ///
    /// `ptr` must come from [`XaPointer::into_raw`] and not have been taken back before.
    unsafe fn from_raw(ptr: NonNull<Self::Target>) -> Self;
}

/// Refuses, when the impl is instantiated, a pointee whose alignment leaves no room for the two
/// tag bits of an entry word.
const fn assert_tag_bits<T>() {
    assert!(
        std::mem::align_of::<T>() >= 4,
        "XArray pointers must be 4-byte aligned"
    );
}

// SAFETY: `Box::into_raw` is non-null, aligned to `T` (asserted at least 4) and valid until
// `Box::from_raw`; `T: Send` makes the box `Send`.
unsafe impl<T: Send + 'static> XaPointer for Box<T> {
    type Target = T;

    fn into_raw(this: Self) -> NonNull<T> {
        const { assert_tag_bits::<T>() };
        // SAFETY: `Box::into_raw` never returns null.
        unsafe { NonNull::new_unchecked(Box::into_raw(this)) }
    }

    unsafe fn from_raw(ptr: NonNull<T>) -> Self {
        // SAFETY: the caller passes a pointer from `into_raw`, once.
        unsafe { Box::from_raw(ptr.as_ptr()) }
    }
}

// SAFETY: `Arc::into_raw` is non-null, aligned to `T` (asserted at least 4) and keeps the object
// alive until `Arc::from_raw`; `T: Send + Sync` makes the `Arc` `Send`.
unsafe impl<T: Send + Sync + 'static> XaPointer for Arc<T> {
    type Target = T;

    fn into_raw(this: Self) -> NonNull<T> {
        const { assert_tag_bits::<T>() };
        // SAFETY: `Arc::into_raw` never returns null.
        unsafe { NonNull::new_unchecked(Arc::into_raw(this).cast_mut()) }
    }

    unsafe fn from_raw(ptr: NonNull<T>) -> Self {
        // SAFETY: the caller passes a pointer from `into_raw`, once.
        unsafe { Arc::from_raw(ptr.as_ptr()) }
    }
}

// SAFETY: a `'static` reference is valid forever; `T: Sync` makes `&T` `Send`. Dropping it frees
// nothing, so it needs no grace period.
unsafe impl<T: Sync + 'static> XaPointer for &'static T {
    type Target = T;
    const NEEDS_GRACE_PERIOD: bool = false;

    fn into_raw(this: Self) -> NonNull<T> {
        const { assert_tag_bits::<T>() };
        NonNull::from(this)
    }

    unsafe fn from_raw(ptr: NonNull<T>) -> Self {
        // SAFETY: the pointer came from a `&'static T`.
        unsafe { &*ptr.as_ptr() }
    }
}

/// An entry: a pointer (owned `P`, borrowed `&T`, or [`Retired<P>`]) or a value of up to 63 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Entry<P> {
    /// A pointer entry.
    Pointer(P),
    /// A value entry (at most [`MAX_VALUE`]); the page cache's shadow entries.
    Value(u64),
}

impl<P> Entry<P> {
    /// Whether this is a value entry.
    pub fn is_value(&self) -> bool {
        matches!(self, Entry::Value(_))
    }

    /// The value, if this is a value entry.
    pub fn value(&self) -> Option<u64> {
        match self {
            Entry::Value(v) => Some(*v),
            Entry::Pointer(_) => None,
        }
    }

    /// The pointer, if this is a pointer entry.
    pub fn pointer(self) -> Option<P> {
        match self {
            Entry::Pointer(p) => Some(p),
            Entry::Value(_) => None,
        }
    }

    /// Maps the pointer.
    pub fn map<Q>(self, f: impl FnOnce(P) -> Q) -> Entry<Q> {
        match self {
            Entry::Pointer(p) => Entry::Pointer(f(p)),
            Entry::Value(v) => Entry::Value(v),
        }
    }

    /// Borrows the pointer.
    pub fn as_ref(&self) -> Entry<&P> {
        match self {
            Entry::Pointer(p) => Entry::Pointer(p),
            Entry::Value(v) => Entry::Value(*v),
        }
    }
}

impl<T> Entry<&T> {
    /// The entry with its pointer as a raw pointer (what [`XArray::cmpxchg`](super::XArray::cmpxchg) compares with).
    pub fn as_raw(&self) -> Entry<*const T> {
        match self {
            Entry::Pointer(p) => Entry::Pointer(*p as *const T),
            Entry::Value(v) => Entry::Value(*v),
        }
    }
}

/// Turns an entry into its word; the caller owns the word from now on.
pub(super) fn encode<P: XaPointer>(entry: Option<Entry<P>>) -> Result<usize, Rejected<P>> {
    match entry {
        None => Ok(0),
        Some(Entry::Value(v)) if v > MAX_VALUE => Err(Rejected {
            error: XaError::BadValue { value: v },
            entry: Some(Entry::Value(v)),
        }),
        Some(Entry::Value(v)) => Ok(mk_value(v)),
        Some(Entry::Pointer(p)) => {
            let w = P::into_raw(p).as_ptr() as usize;
            debug_assert!(is_pointer(w), "XaPointer gave a misaligned pointer");
            Ok(w)
        }
    }
}

/// [`encode`] for an entry of `order`: an order past [`MAX_ORDER`] is refused first, the entry
/// given back with the error.
pub(super) fn encode_order<P: XaPointer>(
    order: u32,
    entry: Option<Entry<P>>,
) -> Result<usize, Rejected<P>> {
    if order > MAX_ORDER {
        return Err(Rejected {
            error: XaError::BadOrder { order },
            entry,
        });
    }
    encode(entry)
}

/// Checks an entry before anything takes ownership of it.
pub(super) fn check_value<P>(entry: &Option<Entry<P>>) -> Result<(), XaError> {
    match entry {
        Some(Entry::Value(v)) if *v > MAX_VALUE => Err(XaError::BadValue { value: *v }),
        _ => Ok(()),
    }
}

/// Gives a word back as the owned entry it was made from.
///
/// # Safety
///
/// `w` is 0 or an entry word owned by the caller.
pub(super) unsafe fn decode_owned<P: XaPointer>(w: usize) -> Option<Entry<P>> {
    if w == 0 {
        None
    } else if is_value(w) {
        Some(Entry::Value(word_value(w)))
    } else {
        // SAFETY: forwarded: an owned pointer word from `into_raw`.
        Some(Entry::Pointer(unsafe {
            P::from_raw(NonNull::new_unchecked(w as *mut P::Target))
        }))
    }
}

/// A removed word as what the caller gets back.
///
/// # Safety
///
/// `w` is 0 or an entry word taken out of the array and owned by the caller.
pub(super) unsafe fn decode_retired<P: XaPointer>(w: usize) -> Option<Entry<Retired<P>>> {
    if w == 0 {
        None
    } else if is_value(w) {
        Some(Entry::Value(word_value(w)))
    } else {
        // SAFETY: forwarded.
        Some(Entry::Pointer(unsafe { Retired::from_word(w) }))
    }
}

/// A word as a borrowed entry.
///
/// # Safety
///
/// `w` is 0 or an entry word whose pointer stays valid for `'g`.
#[inline]
pub(super) unsafe fn decode_ref<'g, T>(w: usize) -> Option<Entry<&'g T>> {
    if w == 0 {
        None
    } else if is_value(w) {
        Some(Entry::Value(word_value(w)))
    } else {
        // SAFETY: forwarded.
        Some(Entry::Pointer(unsafe { &*(w as *const T) }))
    }
}

/// The word an expected entry would be stored as (for `cmpxchg`).
pub(super) fn expected_word<T>(e: Option<Entry<*const T>>) -> usize {
    match e {
        None => 0,
        Some(Entry::Value(v)) if v > MAX_VALUE => usize::MAX, // can never match
        Some(Entry::Value(v)) => mk_value(v),
        Some(Entry::Pointer(p)) => p as usize,
    }
}
