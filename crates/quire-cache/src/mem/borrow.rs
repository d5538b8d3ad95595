//! Borrow slots: the hazard pointers behind a borrow of a folio's bytes that takes no reference
//! (`CachedFile::with_folio`).
//!
//! A reference keeps a folio's bytes stable because every party that could change them (an
//! in-place write or an eviction under a freeze, a space given a writable pte, the free that
//! lets the frames be reused) first looks at the count. Taking and putting that reference are
//! two read-modify-writes of a line every reader of the folio shares. A borrow instead names
//! the folio in a slot of the borrowing thread's own (one cache line each, written only by its
//! thread on the hit path), and those parties look at the slots too:
//!
//! | side | steps |
//! |---|---|
//! | borrower ([`Borrow::begin`], then the caller's check) | names the folio in its slot; `fence(SeqCst)`; reads the byte sequence and the flags: the borrow stands only if they are what the caller's translation says (even, unchanged, up to date, no mapcount) |
//! | freezer ([`crate::mem::Folio::try_freeze`]) | freezes the count and makes the sequence odd; `fence(SeqCst)`; scans the slots ([`borrowed`]): a slot naming the folio fails the freeze, as another reference would |
//! | writable pte (`mm::rmap::writer_sees_readers`) | raises the mapcount; `fence(SeqCst)`; a slot naming the folio gives the spaces a copy, as a reference would |
//! | free ([`crate::mem::FramePool`]'s free path) | advances the sequence; `fence(SeqCst)`; if a slot names the folio ([`borrowed`]), puts it on the pool's deferred list instead of freeing it |
//! | free of an evicted folio ([`crate::mem::FolioGuard::free_frozen`]) | frees a folio its freeze left at a count of zero, with no fence or scan of its own: the freeze's scan found no slot, so every borrow begun after it fails its check (the sequence moved at the freeze and only moves on), and no reference could be taken since |
//! | borrower's end ([`Borrow::end`], or dropping the borrow) | stores 0 to its slot (release): a plain store |
//! | deferred free (`FramePool::free_deferred`: at the next free, an allocation that finds no block, a drain or a count of free frames) | frees each deferred folio no slot names any more ([`named`]) |
//!
//! The two fences make it Dekker's protocol: of a borrower and a party that changed the folio's
//! sequence or flags, either the borrower's read after its fence sees the change (and it backs
//! off), or the party's scan after its fence sees the slot. No party waits for a borrower: a
//! freeze fails, a write fault copies, a free is deferred, so a borrower's closure may itself
//! write the folio it borrows (its write goes to a copy) without deadlock.
//!
//! The end is a plain store, not a read-modify-write, so a hit issues one locked instruction,
//! the fence (an earlier version handed the free to the borrower through its slot: a
//! compare-and-swap by the freer and a swap at the end; see `docs/journal/` for what the
//! change gained). A deferred folio is freed by whoever next looks: the retired sequence makes
//! every borrow that began after the free's scan fail its check, so once no slot names the
//! folio, none can come to name it with a standing borrow.
//!
//! The kernel has no exact counterpart (a page-cache reader takes `folio_try_get`); the slots
//! are hazard pointers (Michael, 2004; proposed for Linux as `hazptr`), scanned by the
//! changers rather than by a reclaimer.
//!
//! # The slot word
//!
//! | bits | meaning |
//! |---|---|
//! | 63..0 | the borrowed folio's descriptor address; 0 for none |
//!
//! Slots are allocated on a thread's first borrow, linked into one list that only grows (a
//! scan walks it without a lock) and never freed; a thread that exits gives its slot back for
//! the next thread to take. A borrow while the thread's slot is in use (a closure that borrows
//! again) or once the thread's locals are being torn down gets no slot: the caller takes a
//! reference instead.
//!
//! `tests/loom_borrow.rs` models each row against a broken variant.

use std::cell::Cell;
use std::ptr;

use super::folio::Folio;
use crate::sync::loom::{fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// One thread's slot, alone on its cache line (the scans read it; only its thread writes it).
#[repr(align(128))]
struct Slot {
    /// See "The slot word".
    word: AtomicUsize,
    /// Whether a live thread owns the slot.
    taken: AtomicBool,
    /// The next slot of the list (set before the slot is published, then never changed).
    next: *const Slot,
}

/// The list of every slot ever made.
struct Slots {
    head: AtomicPtr<Slot>,
}

// SAFETY: `Slot`s are reached only through shared references; their mutable state is atomic and
// `next` is written before the slot is published (release) and never after.
unsafe impl Sync for Slot {}

#[cfg(not(loom))]
static SLOTS: Slots = Slots {
    head: AtomicPtr::new(ptr::null_mut()),
};

#[cfg(loom)]
loom::lazy_static! {
    // One list per model execution.
    static ref SLOTS: Slots = Slots { head: AtomicPtr::new(ptr::null_mut()) };
}

#[cfg(not(loom))]
std::thread_local! {
    /// The calling thread's slot, null before its first borrow: const-initialised and without
    /// a destructor, so that reaching it is an offset from the thread pointer.
    static MINE: Cell<*const Slot> = const { Cell::new(ptr::null()) };
    /// Gives the thread's slot back when the thread exits.
    static OWNER: Owner = const { Owner };
}

#[cfg(loom)]
loom::thread_local! {
    static MINE: Cell<*const Slot> = Cell::new(ptr::null());
    static OWNER: Owner = Owner;
}

/// The thread-local whose destructor gives the slot back.
struct Owner;

impl Drop for Owner {
    fn drop(&mut self) {
        // `try_with`: `MINE` has no destructor, so it is still there; be defensive anyway.
        let _ = MINE.try_with(|m| {
            let s = m.replace(ptr::null());
            if !s.is_null() {
                // SAFETY: slots are never freed.
                let s = unsafe { &*s };
                debug_assert_eq!(s.word.load(Ordering::Relaxed), 0);
                s.taken.store(false, Ordering::Release);
            }
        });
    }
}

/// The calling thread's slot, taking one on its first borrow; `None` once the thread's locals
/// are being destroyed.
#[inline]
fn mine() -> Option<&'static Slot> {
    let s = MINE.try_with(Cell::get).ok()?;
    if s.is_null() {
        return take_slot();
    }
    // SAFETY: slots are never freed, and this one is the thread's until `Owner` gives it back.
    Some(unsafe { &*s })
}

/// Takes a free slot (or makes one) for the calling thread.
#[cold]
fn take_slot() -> Option<&'static Slot> {
    // The owner's destructor must be registered before the slot is taken, or a thread whose
    // locals are going away would keep it forever.
    OWNER.try_with(|_| ()).ok()?;
    let mut p = SLOTS.head.load(Ordering::Acquire);
    let slot = loop {
        if p.is_null() {
            let s: &'static Slot = Box::leak(Box::new(Slot {
                word: AtomicUsize::new(0),
                taken: AtomicBool::new(true),
                next: ptr::null(),
            }));
            push(s);
            break s;
        }
        // SAFETY: slots are never freed.
        let s = unsafe { &*p };
        if !s.taken.load(Ordering::Relaxed)
            && s.taken
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            break s;
        }
        p = s.next.cast_mut();
    };
    MINE.try_with(|m| m.set(slot)).ok()?;
    Some(slot)
}

/// Publishes a new slot at the head of the list.
fn push(s: &'static Slot) {
    let p = ptr::from_ref(s).cast_mut();
    let mut head = SLOTS.head.load(Ordering::Relaxed);
    loop {
        // SAFETY: not yet published: this thread is the only one that can see it.
        unsafe { (*p).next = head };
        match SLOTS
            .head
            .compare_exchange_weak(head, p, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => return,
            Err(h) => head = h,
        }
    }
}

/// Every slot, for a scan (the caller has issued its `fence(SeqCst)`).
fn slots() -> impl Iterator<Item = &'static Slot> {
    let mut p = SLOTS.head.load(Ordering::Acquire).cast_const();
    std::iter::from_fn(move || {
        // SAFETY: slots are never freed; `next` was set before the slot was published.
        let s = unsafe { p.as_ref()? };
        p = s.next;
        Some(s)
    })
}

fn addr(folio: &Folio) -> usize {
    ptr::from_ref(folio) as usize
}

/// A borrow of one folio by the calling thread: its slot names the folio until
/// [`Borrow::end`] or the borrow is dropped (also by a panicking closure's unwinding).
pub struct Borrow {
    slot: &'static Slot,
}

impl Borrow {
    /// Names `folio` in the calling thread's slot and issues the borrower's fence. The caller
    /// must then check the folio (its sequence and flags, read after this) before it reads a
    /// byte, and end the borrow whatever it found. `None` when the thread has
    /// no free slot (a borrow is in progress on it, or its locals are being destroyed).
    #[inline]
    pub fn begin(folio: &Folio) -> Option<Borrow> {
        let slot = mine()?;
        if slot.word.load(Ordering::Relaxed) != 0 {
            return None;
        }
        slot.word.store(addr(folio), Ordering::Relaxed);
        // The borrower's fence: the check the caller makes next reads the folio after the
        // slot is visible to every party that fences before scanning.
        #[cfg(loom)]
        if broken::is(broken::BORROWER_FENCE) {
            return Some(Borrow { slot });
        }
        fence(Ordering::SeqCst);
        Some(Borrow { slot })
    }

    /// Ends the borrow (as dropping it does), after the borrower's last read of the bytes.
    #[inline]
    pub fn end(self) {}
}

impl Drop for Borrow {
    #[inline]
    fn drop(&mut self) {
        // Release: the borrower's reads come before the free of a deferred folio, which finds
        // the slot empty by an acquire load.
        self.slot.word.store(0, Ordering::Release);
    }
}

/// Whether some thread's slot names `folio`: the scan a party that changed the folio's
/// sequence or flags makes after its own `fence(SeqCst)`, which this issues first.
#[inline]
pub fn borrowed(folio: &Folio) -> bool {
    fence(Ordering::SeqCst);
    named(folio)
}

/// Whether some thread's slot names `folio`, without a fence: the deferred free's rescan
/// (`FramePool::free_deferred`), which needs none (see the table above).
#[inline]
pub fn named(folio: &Folio) -> bool {
    let a = addr(folio);
    slots().any(|s| s.word.load(Ordering::Acquire) == a)
}

/// Deliberately broken variants of each side, for the loom models (`tests/loom_borrow.rs`) to
/// catch; never used by the library outside `--cfg loom`.
#[cfg(loom)]
#[doc(hidden)]
pub mod broken {
    use crate::sync::loom::{AtomicUsize, Ordering};

    /// The borrower skips its fence.
    pub const BORROWER_FENCE: usize = 1;
    /// A freeze does not scan the slots.
    pub const FREEZE_SCAN: usize = 2;
    /// A free does not look for borrowers.
    pub const FREE_SCAN: usize = 4;
    /// A write fault does not scan the slots.
    pub const WRITER_SCAN: usize = 8;
    /// Deferred folios are never freed (so that a model shows that deferral happens).
    pub const DEFERRED_NEVER_FREED: usize = 16;

    loom::lazy_static! {
        static ref WHICH: AtomicUsize = AtomicUsize::new(0);
    }

    /// Breaks the sides in `which` (a set of the constants above) for this model execution.
    pub fn set(which: usize) {
        WHICH.store(which, Ordering::Relaxed);
    }

    /// Whether `which` is broken in this execution.
    pub(crate) fn is(which: usize) -> bool {
        WHICH.load(Ordering::Relaxed) & which != 0
    }
}
