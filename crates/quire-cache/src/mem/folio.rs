//! Folios: the descriptor of a block of 2^order frames (`struct folio`), the owned reference
//! [`FolioRef`], the locked guard [`FolioGuard`] and the frozen state [`FrozenFolio`].
//!
//! Every 4 KiB frame of a [`FramePool`] has one [`Folio`] descriptor in the pool's descriptor
//! array (the memmap). When frames are allocated as a folio of order k, the descriptor of its
//! first frame (the *head*) describes the whole folio; the other 2^k − 1 descriptors (tails) stay
//! unused with a reference count of zero, so that a speculative [`Folio::try_get`] on them fails.
//! Descriptors live as long as the pool (rule 1 of docs/RULES.md): a lock-free reader may hold a `&Folio`
//! whose folio was freed and reused; it takes a reference with `try_get` and then re-checks
//! whatever slot led it there.
//!
//! # The flag word
//!
//! One `AtomicU64` per folio (rule 2 of docs/RULES.md). Bits 0 and 1 belong to [`crate::sync::bitwait`].
//!
//! | bit(s) | name | meaning | set / cleared |
//! |---|---|---|---|
//! | 0 | [`LOCKED`] | the folio lock (I/O in progress, index changes) | [`FolioRef::lock`] / guard drop (bitwait) |
//! | 1 | [`WAITERS`] | a thread may sleep on this word | bitwait, under its wait-table lock |
//! | 2 | [`UPTODATE`] | the bytes hold valid data; shared `&[u8]` may be lent | [`FolioGuard::mark_uptodate`] / [`FrozenFolio::clear_uptodate`], and at free |
//! | 3 | [`DIRTY`] | the bytes differ from the store | page cache (`set_dirty` / `clear_dirty`) |
//! | 4 | [`WRITEBACK`] | a write to the store is in flight | [`Folio::start_writeback`] / [`Folio::end_writeback`] (wakes) |
//! | 5 | [`ERROR`] | the last I/O on the folio failed | page cache |
//! | 6 | [`REFERENCED`] | accessed since reclaim last looked | page cache / reclaim |
//! | 7 | [`ACTIVE`] | on the active list | reclaim |
//! | 8 | [`WORKINGSET`] | refaulted while part of the working set | reclaim |
//! | 9 | [`LRU`] | on an LRU list (see [`crate::vmscan`]) | the LRU lock holder |
//! | 10 | [`ANON`] | anonymous memory, not file data | anon |
//! | 11 | [`SWAPCACHE`] | in the swap cache | anon |
//! | 12 | [`READAHEAD`] | reaching it triggers the next asynchronous readahead | readahead |
//! | 13 | [`HEAD`] | this descriptor heads an allocated folio | allocation / free |
//! | 14 | [`RECLAIM`] | reclaim wants it: rotate it to the inactive tail when its write-back ends | reclaim / write-back end |
//! | 15 | [`UNEVICTABLE`] | on the unevictable list: reclaim never takes it | its owner (mlock), under the LRU lock |
//! | 16–19 | order ([`ORDER_SHIFT`]) | log2 of the folio's frame count, 0..=9 | allocation only |
//! | 20 | [`LRU_PENDING`] | queued in a batch to be added to an LRU list | its owner / the batch drain, under the LRU lock |
//! | 21–23 | generation ([`GEN_SHIFT`]) | the multi-generational LRU's generation plus one, 0 when the folio is on no generation list | the LRU lock holder |
//! | 24–25 | refs ([`REFS_SHIFT`]) | accesses through file descriptors beyond the first (saturating at 3): the folio's tier | [`Folio::inc_refs`] (lock-free) / reclaim |
//! | 26 | [`PROBATION`] | a recent refault the loop protection will test when it is added; on a probation list: its one extra turn was given | reclaim (refault) / the LRU lock holder |
//! | 27 | [`REFAULTED`] | read in over a shadow that still tells something (a refault within reach, or one with a reuse on record): the multi-generational LRU's loop protection does not add it as a first read | reclaim (refault) / the LRU lock holder |
//! | 28 | [`WB_FAILED`] | dirty, and its write-back failed `filemap::WRITEBACK_MAX_TRIES` times in a row: parked (no background write-back, on the unevictable list) until re-armed | write-back end / a write into it, a write-back that succeeds |
//! | 29–31 | — | reserved for `mem` | |
//! | 32–63 | — | free for upper layers: `mm` keeps the mapcount (32–47, `MAPCOUNT_BITS`: page-table entries mapping the folio) and the mlock count (48–63) of mapped folios, anonymous or file | their owners, with RMW ops |
//!
//! State changes other than allocation and free are single read-modify-write operations on the
//! word (`fetch_or` / `fetch_and`), so bits owned by different parties never overwrite each other.
//! Allocation keeps [`LOCKED`] and [`WAITERS`] and replaces everything else with `HEAD | order`;
//! free keeps `LOCKED` and `WAITERS` and clears the rest.
//!
//! # The reference count
//!
//! | count | meaning |
//! |---|---|
//! | 0 | free (in the buddy allocator), a tail, or *frozen* by a holder of the folio lock |
//! | n > 0 | allocated, with n references: [`FolioRef`]s, [`FolioGuard`]s and raw references |
//!
//! - [`Folio::try_get`] increments unless the count is zero (a compare-and-swap loop, acquire on
//!   success): the speculative reference of a lock-free lookup. It fails on free, tail and frozen
//!   descriptors alike, and a reader that succeeds must re-check the slot it came from, since the
//!   folio may have been freed and reallocated in between.
//! - Cloning a `FolioRef` increments unconditionally (the count is known to be positive).
//! - Dropping a `FolioRef` decrements (release); the thread that takes the count from 1 to 0
//!   (followed by an acquire fence) owns the folio and returns its frames to the buddy allocator.
//! - Freezing (with the folio locked) swaps an expected count for 0, so no new reference can be
//!   taken, and unfreezing stores a count back. A page cache removes a folio from its index while
//!   it is frozen, so a concurrent lookup either fails `try_get` or no longer finds the folio.
//! - A freeze that ends with only its guard's reference left may free the folio without
//!   unfreezing ([`FrozenFolio::end_for_free`], [`FolioGuard::free_frozen`]): reclaim's eviction.
//!   The count stays 0 from the freeze to the frames' next allocation.
//!
//! A *raw* reference is a counted reference with no `FolioRef` value: what
//! [`FolioRef::into_raw`] leaves (e.g. the page cache's own reference from its index), or a
//! successful raw [`Folio::try_get`]. [`FramePool::ref_from_raw`] turns one back into a `FolioRef`.
//!
//! # Access to the bytes (why it is sound)
//!
//! The frames of a folio may be read through a shared `&[u8]` by many threads and written through
//! a `&mut [u8]` by one; the rules below make those never overlap.
//!
//! 1. Shared access: [`FolioRef::bytes`] lends `&[u8]` only while [`UPTODATE`] is set (tested with
//!    acquire ordering), for as long as the `FolioRef` is borrowed.
//! 2. Exclusive access needs the folio lock, held through a [`FolioGuard`] (which owns one
//!    reference and borrows nothing else), and one of:
//!    - [`UPTODATE`] clear: [`FolioGuard::bytes_mut`]. Nobody else can hold a `&[u8]`: rule 1
//!      refused it, and `UPTODATE` is only ever cleared while the count is frozen (no other
//!      reference exists) or at free. The guard sets `UPTODATE` with
//!      [`FolioGuard::mark_uptodate`], which takes `&mut self`, so the `&mut [u8]` has ended by
//!      then, and publishes the bytes with release ordering.
//!    - the count frozen: [`FolioGuard::freeze`] succeeds only when the count equals the guard's
//!      own reference plus the raw references its caller vouches for, so no other `FolioRef` or
//!      guard exists, and none can be made until the freeze ends. [`FrozenFolio::bytes_mut`]
//!      then writes an up-to-date folio in place. If other references exist the freeze fails
//!      and the writer must wait for them or write a copy (copy-on-write).
//!
//! So an up-to-date folio's bytes never change under a reader that holds a reference — nor
//! under a borrower that names the folio in its borrow slot (`mem/borrow.rs`): a freeze that
//! finds one fails as if it were another reference, a free that finds one is deferred
//! until the borrow has ended (`FramePool`'s deferred list), and the free of a folio from its
//! freeze needs no look of its own (the freeze's found none, and every borrow begun after it
//! fails its check). A file
//! folio that spaces of [`crate::mm`] map writable is written through raw pointers, outside
//! these rules; the page cache keeps them by write-protecting the spaces' ptes before it lends
//! a zero-copy reader the bytes, and a write fault that sees a reader's reference gives the
//! spaces a copy (see `mm/file.rs`). Only a reference taken behind the page cache's back
//! ([`FramePool::try_get`] on a frame found by number) can see such writes.
//!
//! # The byte sequence (reference-free reads)
//!
//! A hit that only copies bytes out need not take a reference: [`Folio::read_seq_begin`],
//! a raw copy, [`Folio::read_seq_retry`] — a seqcount read, kept only if the sequence did not
//! move. The sequence (`seq`, an `AtomicU32` beside the count) changes whenever the bytes of a
//! folio that a reader may have found can change without a reference of the reader's stopping
//! it:
//!
//! | event | sequence | ordering |
//! |---|---|---|
//! | freeze ([`Folio::try_freeze`]): an in-place write, an eviction | +1 (odd until the unfreeze) | bump, then a release fence before any write |
//! | unfreeze ([`Folio::unfreeze`]) | +1 (even) | release: after the writes made while frozen |
//! | free ([`FramePool`]'s free path: `seq_retire` before it looks for borrowers, then `reset_freed`, at once or when a deferred free is carried out) | +2, and +2 again | release; every allocation issues a release fence before its owner writes the frames |
//! | free from a freeze ([`FolioGuard::free_frozen`]: `reset_frozen_freed`, no unfreeze) | +3 (even again) | as the free |
//! | a space gets a writable pte (`seq_bump`, from `mm`) | +2 | release (after the mapcount went up), then a release fence before the space writes |
//!
//! A reader takes the sequence (acquire, odd = give up), then checks the flag word (up to date,
//! no mapcount — a mapped folio may be written at any time and is left to the referenced path)
//! and the slot it came from, copies, and re-reads the sequence after an acquire fence: if its
//! copy overlapped any write above, the re-read sees a different value. A reader that reads a
//! bumped sequence at the start also sees what came before the bump (the mapcount, the new
//! owner's flags), so it declines. The sequence is on the head; freeing a folio bumps its head,
//! which covers every frame it had. `tests/loom_seq.rs` checks the rows of the freeze, the
//! unfreeze, the free and the pte against a broken variant; the free from a freeze is checked
//! by `tests/loom_borrow.rs` (its borrower) and by `tests/filemap_reader.rs` (copies that must
//! never be torn or another file's while reclaim evicts and reuses the frames).
//!
//! # Finding the allocator
//!
//! A `FolioRef<'p>` holds the descriptor and the [`FramePool`] it belongs to, both borrowed for
//! `'p`; the pool owns the descriptor array and the buddy allocator, so the last put frees into
//! the right allocator, and the borrow checker keeps the pool alive while references exist.
//! Raw references carry no lifetime: whoever keeps them (the page cache) must drop them before
//! the pool.

use std::fmt;
use std::ptr::NonNull;

use crate::mem::pool::{FramePool, FreeBatch};
use crate::sync::bitwait::{self, Cancel, WaitError, WaitPolicy};
use crate::sync::loom::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};

mod flags;
mod guard;
mod reference;
mod wait;

pub(crate) use flags::MAPCOUNT_BITS;
pub use flags::{
    ACTIVE, ANON, DIRTY, ERROR, FRAME_SHIFT, FRAME_SIZE, GEN_MASK, GEN_SHIFT, HEAD, LOCKED, LRU,
    LRU_PENDING, MAX_REFS, ORDER_MASK, ORDER_SHIFT, OWNER_BITS, PROBATION, READAHEAD, RECLAIM,
    REFAULTED, REFERENCED, REFS_MASK, REFS_SHIFT, SWAPCACHE, UNEVICTABLE, UPTODATE, WAITERS,
    WB_FAILED, WORKINGSET, WRITEBACK,
};
pub use guard::{FolioGuard, FreeTicket, FrozenFolio};
pub use reference::FolioRef;

/// One descriptor of the memmap; the head descriptor of a folio describes the folio. See the
/// [module documentation](self) for the flag word and the counting rules.
#[repr(C, align(64))]
pub struct Folio {
    flags: AtomicU64,
    refcount: AtomicU32,
    /// The byte sequence (a seqcount): odd while the folio is frozen — the only time the bytes
    /// of an up-to-date folio change in place — and moved on, to an even value, when the folio
    /// is freed and when a space may start writing it through a mapping. A reader that holds no reference
    /// copies the bytes between two reads of it and keeps the copy only if both are the same
    /// even value ([`Folio::read_seq_begin`], [`Folio::read_seq_retry`]).
    seq: AtomicU32,
    /// The owner's id (the page cache's file), 0 for none.
    mapping: AtomicUsize,
    /// The folio's index in its owner (in frames, as the page cache counts).
    index: AtomicU64,
    /// A word for the owner's use (the kernel's `folio->private`): the swap cache's slot of an
    /// anonymous folio in it, the page cache's count of failed write-backs in a row of a file
    /// folio (written only when one fails or, after one failed, succeeds).
    private: AtomicUsize,
    /// The links of the LRU list the folio is on (frame numbers of head descriptors; see
    /// [`crate::vmscan`]), the kernel's `folio->lru`. Read and written only by the holder of the
    /// LRU lock, so plain (std, relaxed) atomics: they are not part of any lock-free protocol.
    pub(crate) lru_prev: std::sync::atomic::AtomicU32,
    /// See `lru_prev`.
    pub(crate) lru_next: std::sync::atomic::AtomicU32,
}

macro_rules! flag_ops {
    ($($(#[$doc:meta])* $flag:ident: $is:ident, $set:ident, $clear:ident;)*) => {
        $(
            $(#[$doc])*
            #[inline]
            pub fn $is(&self) -> bool {
                self.flags.load(Ordering::Acquire) & $flag != 0
            }

            #[doc = concat!("Sets [`", stringify!($flag), "`]; returns whether it was already set.")]
            #[inline]
            pub fn $set(&self) -> bool {
                self.flags.fetch_or($flag, Ordering::AcqRel) & $flag != 0
            }

            #[doc = concat!("Clears [`", stringify!($flag), "`]; returns whether it was set.")]
            #[inline]
            pub fn $clear(&self) -> bool {
                self.flags.fetch_and(!$flag, Ordering::AcqRel) & $flag != 0
            }
        )*
    };
}

impl Folio {
    /// A free descriptor: no flags, count 0.
    pub(crate) fn new() -> Folio {
        Folio {
            flags: AtomicU64::new(0),
            refcount: AtomicU32::new(0),
            seq: AtomicU32::new(0),
            mapping: AtomicUsize::new(0),
            index: AtomicU64::new(0),
            private: AtomicUsize::new(0),
            lru_prev: std::sync::atomic::AtomicU32::new(u32::MAX),
            lru_next: std::sync::atomic::AtomicU32::new(u32::MAX),
        }
    }

    /// The whole flag word (acquire). For diagnostics and for the owner bits ([`OWNER_BITS`]).
    #[inline]
    pub fn flags(&self) -> u64 {
        self.flags.load(Ordering::Acquire)
    }

    /// Sets bits of [`OWNER_BITS`]; returns the previous word. Other bits in `bits` are ignored.
    #[inline]
    pub fn set_owner_bits(&self, bits: u64) -> u64 {
        self.flags.fetch_or(bits & OWNER_BITS, Ordering::AcqRel)
    }

    /// Clears bits of [`OWNER_BITS`]; returns the previous word. Other bits in `bits` are
    /// ignored.
    #[inline]
    pub fn clear_owner_bits(&self, bits: u64) -> u64 {
        self.flags.fetch_and(!(bits & OWNER_BITS), Ordering::AcqRel)
    }

    /// Adds `delta` to a counter kept in [`OWNER_BITS`] (e.g. the mapcount of anonymous
    /// memory, a field of bits 32 and up); returns the previous word. One read-modify-write, so
    /// the caller also learns, atomically, every other flag as it was. The caller keeps its field
    /// from overflowing into the next one; `delta` must lie in [`OWNER_BITS`].
    #[inline]
    pub fn add_owner_bits(&self, delta: u64) -> u64 {
        debug_assert_eq!(delta & !OWNER_BITS, 0);
        self.flags.fetch_add(delta, Ordering::AcqRel)
    }

    /// Sets [`SWAPCACHE`]; returns the whole word as it was before, so that the setter learns
    /// in the same read-modify-write what the owner bits (the mapcount) were.
    #[inline]
    pub(crate) fn set_swapcache_word(&self) -> u64 {
        self.flags.fetch_or(SWAPCACHE, Ordering::AcqRel)
    }

    /// Replaces the [`OWNER_BITS`] of the word with those of `f(word)`, in one compare-and-swap
    /// loop (the other bits are kept as they are at the moment of the swap); returns the
    /// previous word. `f` may run more than once.
    #[inline]
    pub fn update_owner_bits(&self, mut f: impl FnMut(u64) -> u64) -> u64 {
        match self
            .flags
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                Some((old & !OWNER_BITS) | (f(old) & OWNER_BITS))
            }) {
            Ok(old) | Err(old) => old,
        }
    }

    /// Subtracts `delta` from a counter kept in [`OWNER_BITS`]; returns the previous word. The
    /// caller keeps its field from going below zero (which would borrow from the next field,
    /// never from the bits below 32, as the field's lowest bit is at least bit 32).
    #[inline]
    pub fn sub_owner_bits(&self, delta: u64) -> u64 {
        debug_assert_eq!(delta & !OWNER_BITS, 0);
        self.flags.fetch_sub(delta, Ordering::AcqRel)
    }

    /// Whether some space maps the folio (its mapcount, in [`MAPCOUNT_BITS`], is not zero).
    #[inline]
    #[doc(alias = "folio_mapped")]
    pub(crate) fn is_mapped(&self) -> bool {
        self.flags.load(Ordering::Acquire) & MAPCOUNT_BITS != 0
    }

    /// A zero-copy reader that has just taken its reference (an acquire read-modify-write of
    /// the count) asks whether a space maps the folio (and may write it): if so, the page cache
    /// write-protects the spaces' ptes before the reader borrows the bytes. A write fault raises
    /// the mapcount and then reads the count with a read-modify-write of its own
    /// ([`Folio::ref_count_rmw`]); the two read-modify-writes of the count are ordered, and
    /// whichever comes second sees the other side (the writer the reader's reference, or the
    /// reader — synchronised by the writer's release — the raised mapcount). No fence on the
    /// reader's side: this is a plain acquire load on the line the reference just wrote.
    #[inline]
    pub(crate) fn reader_sees_mapping(&self) -> bool {
        self.is_mapped()
    }

    /// The reference count, read with a read-modify-write (acquire and release) rather than a
    /// load: the writer's side of [`Folio::reader_sees_mapping`].
    #[inline]
    pub(crate) fn ref_count_rmw(&self) -> u32 {
        self.refcount.fetch_add(0, Ordering::AcqRel)
    }

    /// The folio's order: it spans 2^order frames. Meaningful while a reference is held.
    #[inline]
    #[doc(alias = "folio_order")]
    pub fn order(&self) -> u32 {
        ((self.flags.load(Ordering::Acquire) & ORDER_MASK) >> ORDER_SHIFT) as u32
    }

    /// Frames in the folio (2^order).
    #[inline]
    #[doc(alias = "folio_nr_pages")]
    pub fn nr_frames(&self) -> usize {
        1 << self.order()
    }

    /// Bytes in the folio (4 KiB << order).
    #[inline]
    #[doc(alias = "folio_size")]
    pub fn size(&self) -> usize {
        FRAME_SIZE << self.order()
    }

    /// Whether this descriptor heads an allocated folio.
    #[inline]
    pub fn is_head(&self) -> bool {
        self.flags.load(Ordering::Acquire) & HEAD != 0
    }

    /// Whether the bytes hold valid data.
    #[inline]
    #[doc(alias = "folio_test_uptodate")]
    pub fn is_uptodate(&self) -> bool {
        self.flags.load(Ordering::Acquire) & UPTODATE != 0
    }

    /// Whether the folio lock is held.
    #[inline]
    #[doc(alias = "folio_test_locked")]
    pub fn is_locked(&self) -> bool {
        self.flags.load(Ordering::Acquire) & LOCKED != 0
    }

    /// Whether write-back is in flight.
    #[inline]
    #[doc(alias = "folio_test_writeback")]
    pub fn is_writeback(&self) -> bool {
        self.flags.load(Ordering::Acquire) & WRITEBACK != 0
    }

    flag_ops! {
        /// Whether the bytes differ from the store.
        DIRTY: is_dirty, set_dirty, clear_dirty;
        /// Whether the last I/O failed.
        ERROR: is_error, set_error, clear_error;
        /// Whether the folio was accessed since reclaim last looked.
        REFERENCED: is_referenced, set_referenced, clear_referenced;
        /// Whether the folio is on the active list.
        ACTIVE: is_active, set_active, clear_active;
        /// Whether the folio refaulted while in the working set.
        WORKINGSET: is_workingset, set_workingset, clear_workingset;
        /// Whether the folio is on an LRU list.
        LRU: is_lru, set_lru, clear_lru;
        /// Whether the folio holds anonymous memory.
        ANON: is_anon, set_anon, clear_anon;
        /// Whether the folio is in the swap cache.
        SWAPCACHE: is_swapcache, set_swapcache, clear_swapcache;
        /// Whether reaching the folio triggers asynchronous readahead.
        READAHEAD: is_readahead, set_readahead, clear_readahead;
        /// Whether reclaim wants the folio rotated to the inactive tail after write-back.
        RECLAIM: is_reclaim, set_reclaim, clear_reclaim;
        /// Whether the folio is unevictable.
        UNEVICTABLE: is_unevictable, set_unevictable, clear_unevictable;
        /// Whether the folio waits in a batch to be added to an LRU list.
        LRU_PENDING: is_lru_pending, set_lru_pending, clear_lru_pending;
        /// Whether the folio is a loop-protection candidate, or had its extra probation turn.
        PROBATION: is_probation, set_probation, clear_probation;
        /// Whether the folio was read in over a shadow entry.
        REFAULTED: is_refaulted, set_refaulted, clear_refaulted;
        /// Whether the folio's write-back failed too often in a row: parked until re-armed.
        WB_FAILED: is_wb_failed, set_wb_failed, clear_wb_failed;
    }

    /// The refs bits: accesses through file descriptors beyond the first, 0..=[`MAX_REFS`].
    #[inline]
    pub fn refs(&self) -> u64 {
        (self.flags.load(Ordering::Relaxed) & REFS_MASK) >> REFS_SHIFT
    }

    /// Counts one more access in the refs bits (saturating); sets [`WORKINGSET`] instead once
    /// they are full. One read-modify-write, no lock (the kernel's `folio_inc_refs`).
    #[doc(alias = "folio_inc_refs")]
    #[inline]
    pub fn inc_refs(&self) {
        let _ = self
            .flags
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                let refs = (f & REFS_MASK) >> REFS_SHIFT;
                if refs < MAX_REFS {
                    Some((f & !REFS_MASK) | ((refs + 1) << REFS_SHIFT))
                } else if f & WORKINGSET == 0 {
                    Some(f | WORKINGSET)
                } else {
                    None
                }
            });
    }

    /// Clears every flag of `mask` in one read-modify-write; returns the flags as they were.
    #[inline]
    pub(crate) fn clear_flags(&self, mask: u64) -> u64 {
        self.flags.fetch_and(!mask, Ordering::AcqRel)
    }

    /// [`Folio::set_gen_bits`] with the refs bits zeroed and the flags of `clear` cleared, in
    /// one read-modify-write (the LRU lock holder only, as for `set_gen_bits`).
    #[inline]
    pub(crate) fn set_gen_bits_forgetting(&self, bits: u64, clear: u64) {
        let bits = (bits << GEN_SHIFT) & GEN_MASK;
        let _ = self
            .flags
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                Some((f & !(GEN_MASK | REFS_MASK | clear)) | bits)
            });
    }

    /// Replaces the refs bits with `refs` (at most [`MAX_REFS`]).
    #[inline]
    pub(crate) fn set_refs(&self, refs: u64) {
        let refs = refs.min(MAX_REFS) << REFS_SHIFT;
        let _ = self
            .flags
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                Some((f & !REFS_MASK) | refs)
            });
    }

    /// The generation bits (generation plus one; 0 for none). Changed only by the LRU lock
    /// holder.
    #[inline]
    pub(crate) fn gen_bits(&self) -> u64 {
        (self.flags.load(Ordering::Relaxed) & GEN_MASK) >> GEN_SHIFT
    }

    /// Replaces the generation bits (under the LRU lock).
    #[inline]
    pub(crate) fn set_gen_bits(&self, bits: u64) {
        let bits = (bits << GEN_SHIFT) & GEN_MASK;
        let _ = self
            .flags
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                Some((f & !GEN_MASK) | bits)
            });
    }

    // ---- reference count ----

    /// A racy snapshot of the reference count.
    #[inline]
    #[doc(alias = "folio_ref_count")]
    pub fn ref_count(&self) -> u32 {
        self.refcount.load(Ordering::Relaxed)
    }

    /// Takes a raw reference unless the count is zero (free, tail or frozen); acquire on success.
    /// The speculative reference of a lock-free lookup: re-check the slot afterwards. Prefer
    /// [`FramePool::try_get`], which returns a [`FolioRef`]; a raw reference taken here is leaked
    /// unless it is turned into one with [`FramePool::ref_from_raw`].
    #[inline]
    #[doc(alias = "folio_try_get")]
    pub fn try_get(&self) -> bool {
        let mut c = self.refcount.load(Ordering::Relaxed);
        loop {
            if c == 0 {
                return false;
            }
            assert!(c < u32::MAX, "folio reference count overflow");
            match self.refcount.compare_exchange_weak(
                c,
                c + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => c = now,
            }
        }
    }

    /// Unconditional increment, for a holder of a reference.
    #[inline]
    fn get(&self) {
        let old = self.refcount.fetch_add(1, Ordering::Relaxed);
        assert!(
            old != 0 && old < u32::MAX / 2,
            "folio reference count overflow"
        );
    }

    /// Drops one reference; true when it was the last one (the caller now owns the folio).
    #[inline]
    fn put(&self) -> bool {
        let old = self.refcount.fetch_sub(1, Ordering::Release);
        if old == 1 {
            fence(Ordering::Acquire);
            return true;
        }
        assert!(
            old != 0,
            "folio reference count underflow (put on a free or frozen folio)"
        );
        false
    }

    /// Sets the count from `expected` to 0 if it is `expected` and no borrower names the folio
    /// in its borrow slot (`mem/borrow.rs`; the freeze is then undone): nobody can take a new
    /// reference or begin a borrow until [`Folio::unfreeze`]. Acquire on success. Makes the byte sequence odd until the
    /// unfreeze, so that reference-free readers throw away a copy the freezer's writes may tear.
    ///
    /// # Safety
    ///
    /// The caller must own all `expected` references for the duration of the freeze — none of
    /// their holders may drop, clone or use them (nor read the folio's bytes) until the caller
    /// unfreezes — and must unfreeze. Prefer [`FolioGuard::freeze`].
    #[inline]
    #[doc(alias = "folio_ref_freeze")]
    pub unsafe fn try_freeze(&self, expected: u32) -> bool {
        let frozen = self.freeze_count(expected);
        if frozen {
            // The fence orders the bump before every write the freezer makes to the bytes (a
            // seqcount's write side).
            fence(Ordering::Release);
        }
        frozen
    }

    /// The count from `expected` to 0 (acquire) and, if it was, the byte sequence made odd: the
    /// part of [`Folio::try_freeze`] before its fence.
    #[inline]
    fn freeze_count(&self, expected: u32) -> bool {
        let frozen = expected != 0
            && self
                .refcount
                .compare_exchange(expected, 0, Ordering::Acquire, Ordering::Relaxed)
                .is_ok();
        if !frozen {
            return false;
        }
        // Odd from here to the unfreeze.
        self.seq.fetch_add(1, Ordering::Relaxed);
        // A borrower without a reference (`mem/borrow.rs`) counts as one: after the fence in
        // `borrowed`, either its check sees the odd sequence or the scan sees its slot.
        #[cfg(loom)]
        let scan = !super::borrow::broken::is(super::borrow::broken::FREEZE_SCAN);
        #[cfg(not(loom))]
        let scan = true;
        if scan && super::borrow::borrowed(self) {
            // Even again (two ahead of where it was), and the count back.
            self.seq.fetch_add(1, Ordering::Release);
            self.refcount.store(expected, Ordering::Release);
            return false;
        }
        true
    }

    /// Ends a freeze: stores `count` (release).
    ///
    /// # Safety
    ///
    /// The caller froze the folio with [`Folio::try_freeze`] and `count` is the number of
    /// references that exist now (at least 1: dropping the last one frees the folio).
    #[inline]
    #[doc(alias = "folio_ref_unfreeze")]
    pub unsafe fn unfreeze(&self, count: u32) {
        debug_assert_eq!(self.refcount.load(Ordering::Relaxed), 0);
        debug_assert!(count > 0);
        // Even again: the bytes are settled (release: after every write made while frozen).
        self.seq.fetch_add(1, Ordering::Release);
        self.refcount.store(count, Ordering::Release);
    }

    /// Starts a reference-free read of the bytes (see "The byte sequence" above): the
    /// sequence and the flag word, if the sequence is even (no change in progress) and the
    /// folio is up to date and mapped by no space; `None` otherwise. The caller copies what it
    /// needs with raw reads, checks the slot it came from, and keeps the copy only if
    /// [`Folio::read_seq_retry`] says no. The flags are returned for the caller's own tests
    /// (the order, a readahead marker); they describe the folio the sequence belongs to only
    /// once the retry passed.
    #[doc(alias = "read_seqcount_begin")]
    #[inline]
    pub fn read_seq_begin(&self) -> Option<(u32, u64)> {
        let s = self.seq.load(Ordering::Acquire);
        if s & 1 != 0 {
            return None;
        }
        let flags = self.flags.load(Ordering::Acquire);
        (flags & (UPTODATE | MAPCOUNT_BITS) == UPTODATE).then_some((s, flags))
    }

    /// Ends a reference-free read begun with [`Folio::read_seq_begin`] at `start`: whether the
    /// bytes may have changed (frozen, freed or handed to a writing space) meanwhile, so the
    /// copy must be thrown away. The acquire fence orders the copy's loads before the re-read
    /// (a seqcount's read side).
    #[doc(alias = "read_seqcount_retry")]
    #[inline]
    pub fn read_seq_retry(&self, start: u32) -> bool {
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) != start
    }

    /// Advances the sequence by two (it stays even): the bytes may change without a freeze
    /// from now on — a space is about to get a writable mapping of the folio. Release: a reader
    /// that reads the new value also sees the mapcount raised before it (and declines); the
    /// fence after orders the bump before the space's writes (a seqcount's write side).
    #[inline]
    pub(crate) fn seq_bump(&self) {
        self.seq.fetch_add(2, Ordering::Release);
        fence(Ordering::Release);
    }

    /// Advances the sequence by two as the folio's count reaches zero, before its free looks
    /// for borrowers (`mem/borrow.rs`): a borrower that checks the folio after this backs off.
    #[inline]
    pub(crate) fn seq_retire(&self) {
        self.seq.fetch_add(2, Ordering::Release);
    }

    // ---- owner ----

    /// The owner's id (the page cache's file), 0 for none.
    #[inline]
    pub fn mapping(&self) -> usize {
        self.mapping.load(Ordering::Acquire)
    }

    /// Sets the owner's id; the page cache does it with the folio locked, before publishing it.
    #[inline]
    pub fn set_mapping(&self, mapping: usize) {
        self.mapping.store(mapping, Ordering::Release);
    }

    /// The folio's index in its owner.
    #[inline]
    #[doc(alias = "folio_index")]
    pub fn index(&self) -> u64 {
        self.index.load(Ordering::Acquire)
    }

    /// Sets the folio's index in its owner.
    #[inline]
    pub fn set_index(&self, index: u64) {
        self.index.store(index, Ordering::Release);
    }

    /// The owner's private word.
    #[inline]
    pub fn private(&self) -> usize {
        self.private.load(Ordering::Acquire)
    }

    /// Sets the owner's private word.
    #[inline]
    pub fn set_private(&self, value: usize) {
        self.private.store(value, Ordering::Release);
    }

    // ---- allocation and free (the pool) ----

    /// Prepares a descriptor the buddy allocator just handed out as the head of a folio of
    /// `order` with one reference. The count is stored last, with release ordering, so that a
    /// speculative `try_get` that succeeds sees the new state.
    pub(crate) fn init_allocated(&self, order: u32) {
        debug_assert_eq!(self.refcount.load(Ordering::Relaxed), 0);
        self.mapping.store(0, Ordering::Relaxed);
        self.index.store(0, Ordering::Relaxed);
        self.private.store(0, Ordering::Relaxed);
        let _ = self
            .flags
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                Some((f & (LOCKED | WAITERS)) | HEAD | (u64::from(order) << ORDER_SHIFT))
            });
        self.refcount.store(1, Ordering::Release);
    }

    /// Resets a folio whose count just reached zero; returns its order. Only [`LOCKED`] and
    /// [`WAITERS`] survive (bitwait's, which a stray guardless locker may hold).
    pub(crate) fn reset_freed(&self) -> u32 {
        self.reset_freed_moving_seq(2)
    }

    /// [`Folio::reset_freed`] for a folio freed from its freeze ([`FolioGuard::free_frozen`]):
    /// the sequence, odd since the freeze, moves by three, to an even value as an unfreeze
    /// and a free would leave it (a freeze of the frames' next folio makes it odd again).
    pub(crate) fn reset_frozen_freed(&self) -> u32 {
        debug_assert!(self.seq.load(Ordering::Relaxed) & 1 != 0, "not frozen");
        self.reset_freed_moving_seq(3)
    }

    fn reset_freed_moving_seq(&self, step: u32) -> u32 {
        let old = self.flags.fetch_and(LOCKED | WAITERS, Ordering::Relaxed);
        debug_assert!(old & HEAD != 0, "freeing a descriptor that heads no folio");
        debug_assert!(
            old & (LOCKED | DIRTY | WRITEBACK | LRU) == 0,
            "freeing a folio that is locked, dirty, under write-back or on an LRU list: {old:#x}"
        );
        self.mapping.store(0, Ordering::Relaxed);
        self.index.store(0, Ordering::Relaxed);
        self.private.store(0, Ordering::Relaxed);
        // Whoever gets these frames next writes them (after the release fence every allocation
        // issues): a reader that began before must retry.
        self.seq.fetch_add(step, Ordering::Release);
        ((old & ORDER_MASK) >> ORDER_SHIFT) as u32
    }
}

/// The byte sequence's write side as the library runs it, and broken variants of it, for the
/// loom models (`tests/loom_seq.rs`) to catch. Never used by the library.
#[cfg(loom)]
#[doc(hidden)]
impl Folio {
    /// See `seq_bump`.
    pub fn model_seq_bump(&self) {
        self.seq_bump()
    }
    /// Broken: [`Folio::inc_refs`] as a load and a store instead of one read-modify-write —
    /// a generation move by reclaim in between is undone.
    pub fn broken_inc_refs(&self) {
        let f = self.flags.load(Ordering::Relaxed);
        let refs = (f & REFS_MASK) >> REFS_SHIFT;
        if refs < MAX_REFS {
            self.flags.store(
                (f & !REFS_MASK) | ((refs + 1) << REFS_SHIFT),
                Ordering::Relaxed,
            );
        }
    }
    /// Broken: replaces the whole flag word with `w` (a stale read-modify-write).
    pub fn broken_store_flags(&self, w: u64) {
        self.flags.store(w, Ordering::Relaxed);
    }
    /// Broken: a relaxed bump — a reader that reads the new value may miss the mapcount.
    pub fn broken_seq_bump_relaxed(&self) {
        self.seq.fetch_add(2, Ordering::Relaxed);
        fence(Ordering::Release);
    }
    /// Broken: [`Folio::try_freeze`] with no fence between the bump and the writes.
    ///
    /// # Safety
    ///
    /// As [`Folio::try_freeze`].
    pub unsafe fn broken_try_freeze_unfenced(&self, expected: u32) -> bool {
        self.freeze_count(expected)
    }
    /// Broken: [`Folio::read_seq_retry`] without its fence.
    pub fn broken_read_seq_retry_unfenced(&self, start: u32) -> bool {
        self.seq.load(Ordering::Relaxed) != start
    }
}

impl fmt::Debug for Folio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Folio")
            .field("flags", &format_args!("{:#x}", self.flags()))
            .field("order", &self.order())
            .field("refcount", &self.ref_count())
            .field("mapping", &self.mapping())
            .field("index", &self.index())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
