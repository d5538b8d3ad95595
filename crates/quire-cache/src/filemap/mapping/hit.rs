//! The hit paths of a read: a cached folio found and used without the full path —
//! for copies without taking a reference (the folio's byte sequence vouches for the copy), and
//! through [`Translation`]s, without an index walk: those a [`crate::filemap::FileReader`]
//! keeps, and each thread's own for the handles' hits ([`Mapping::thread_translation`]).
//! See "Reference-free hits" and "Translations" in `docs/ARCHITECTURE.md`.

use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{continues_in, Mapping};
use crate::filemap::readahead::Readahead;
use crate::filemap::PAGE_SIZE;
use crate::mem::borrow::Borrow;
use crate::mem::buddy::MAX_ORDER;
use crate::mem::folio::{Folio, FolioRef, FRAME_SHIFT, ORDER_MASK, ORDER_SHIFT, READAHEAD};
use crate::sync::rcu;
use crate::xarray::Entry;

impl Mapping {
    /// [`Mapping::read_folio`] when it is a plain hit, under the caller's guard, with the
    /// translation a reader may keep; `None` if the full path must answer. The hit paths
    /// (this one and the three below) leave counting the hit (`PageCacheHits`) to their
    /// callers, which a reader does once per [`crate::filemap::REPIN_EVERY`].
    #[inline]
    pub(crate) fn read_folio_hit(
        &self,
        ra: &Readahead,
        index: u64,
        guard: &rcu::Guard,
    ) -> Option<(FolioRef<'_>, Translation<'_>)> {
        if index >= self.size().div_ceil(PAGE_SIZE) {
            return None;
        }
        // The reference is taken before the sequence and flags are read (an acquire
        // read-modify-write): the flags' mapcount test is then the zero-copy reader's side of
        // `Folio::reader_sees_mapping` — a mapped folio goes to the full path, which
        // write-protects the spaces' ptes.
        let (r, t) = self.find_translated(index, guard, |f| self.pool().try_get(f))?;
        self.mark_accessed(t.folio);
        ra.note_read(index, index);
        Some((r, t))
    }

    /// [`Mapping::read_folio`] through a translation a reader kept: the folio, if `index` lies
    /// in it and it is still what the translation says (its byte sequence has not moved, so it
    /// is still in the index at the same place); `None` if the caller must look it up.
    #[inline]
    pub(crate) fn read_folio_translated(
        &self,
        ra: &Readahead,
        t: &Translation<'_>,
        index: u64,
    ) -> Option<FolioRef<'_>> {
        if index.wrapping_sub(t.start) >= t.frames || index >= self.size().div_ceil(PAGE_SIZE) {
            return None;
        }
        let r = self.pool().try_get(t.folio)?;
        // As in `read_folio_hit`, after the reference.
        if !t.current() {
            return None;
        }
        self.mark_accessed(t.folio);
        ra.note_read(index, index);
        Some(r)
    }

    /// [`Mapping::read_at`] when the whole of `buf` lies in one cached folio inside the file,
    /// under the caller's guard, with the translation a reader may keep; `None` (nothing read,
    /// nothing noted) if the full path must answer.
    ///
    /// Takes no reference (the get and put on a shared folio's count are most of a hit's cost
    /// when threads read the same large folios): the folio is found under the guard, its byte
    /// sequence read, the slot re-read (so the sequence is that of this file's folio at this
    /// place), the bytes copied, and the copy kept only if the sequence did not move — no
    /// freeze (an in-place write, an eviction), no free, no removal and no writable mapping came
    /// meanwhile. Descriptors and frames outlive the cache, so the copy reads mapped memory
    /// whatever happened to the folio; a folio some space maps is left to the full path.
    #[inline]
    pub(crate) fn read_at_hit(
        &self,
        ra: &Readahead,
        offset: u64,
        buf: &mut [u8],
        guard: &rcu::Guard,
        swap_end: impl FnOnce(u64) -> Option<u64>,
    ) -> Option<(usize, Translation<'_>)> {
        let end = offset.checked_add(buf.len() as u64)?;
        if buf.is_empty() || end > self.size() {
            return None;
        }
        let ((), t) = self.find_translated(offset >> FRAME_SHIFT, guard, |_| Some(()))?;
        let n = self.copy_validated(ra, &t, offset, end, buf, swap_end)?;
        Some((n, t))
    }

    /// [`Mapping::read_at`] through a translation a reader kept, when the whole of `buf` lies
    /// in its folio inside the file and the folio is still what the translation says; `None`
    /// (nothing read, nothing noted) if the caller must look it up. No index walk, no guard:
    /// the byte sequence alone vouches for the folio (see [`Translation`]).
    #[inline]
    pub(crate) fn read_at_translated(
        &self,
        ra: &Readahead,
        t: &Translation<'_>,
        offset: u64,
        buf: &mut [u8],
        swap_end: impl FnOnce(u64) -> Option<u64>,
    ) -> Option<usize> {
        let end = offset.checked_add(buf.len() as u64)?;
        if buf.is_empty() || end > self.size() {
            return None;
        }
        if !t.current() {
            return None;
        }
        self.copy_validated(ra, t, offset, end, buf, swap_end)
    }

    /// The folio at `index` under `guard`, as a translation: found by the walk, `first(folio)`
    /// (a reference, or nothing), its sequence and flags read (even, up to date, no mapcount,
    /// no readahead marker), then the slot re-read to still hold it — so the translation's
    /// sequence is one the folio had while in this file's index at that place.
    #[inline]
    fn find_translated<R>(
        &self,
        index: u64,
        guard: &rcu::Guard,
        first: impl FnOnce(&Folio) -> Option<R>,
    ) -> Option<(R, Translation<'_>)> {
        let mut cursor = self.pages.cursor(index, guard);
        let f = match cursor.load() {
            Some(Entry::Pointer(f)) => f,
            _ => return None,
        };
        let r = first(f)?;
        let (seq, flags) = f.read_seq_begin()?;
        if flags & READAHEAD != 0 {
            return None;
        }
        match cursor.reload() {
            Some(Entry::Pointer(again)) if ptr::eq(again, f) => {}
            _ => return None,
        }
        Some((r, self.translation(f, seq, flags)?))
    }

    /// The translation of `f`, found at its place in the index while its sequence was `seq`
    /// and its flags `flags`; `None` if those flags do not describe a folio of this pool.
    #[inline]
    fn translation(&self, f: &Folio, seq: u32, flags: u64) -> Option<Translation<'_>> {
        let pool = self.pool();
        let frames = 1u64 << ((flags & ORDER_MASK) >> ORDER_SHIFT);
        let pfn = pool.pfn_of_desc(f);
        if pfn + frames as usize > pool.nr_frames() {
            return None;
        }
        Some(Translation {
            // The same descriptor, borrowed from the pool (descriptors live as long as it)
            // rather than from the caller's guard.
            folio: pool.folio(pfn)?,
            seq,
            start: f.index(),
            frames,
            bytes: pool.frame_ptr(pfn),
        })
    }

    /// The end of a reference-free hit: copies `offset .. end` out of `t`'s folio (if it lies
    /// there) and keeps the copy only if the sequence is still the translation's; then
    /// marks the access (unless the caller's previous read, whose end `swap_end` swaps for
    /// this one's, ended in this folio) and notes the read.
    #[inline]
    fn copy_validated(
        &self,
        ra: &Readahead,
        t: &Translation<'_>,
        offset: u64,
        end: u64,
        buf: &mut [u8],
        swap_end: impl FnOnce(u64) -> Option<u64>,
    ) -> Option<usize> {
        let start = t.start << FRAME_SHIFT;
        if offset < start || end > start + (t.frames << FRAME_SHIFT) {
            return None;
        }
        // SAFETY: the folio's frames (`t.bytes`, `t.frames` of them) lie inside the pool
        // (checked when the translation was made), whose mapping lives as long as the cache,
        // and the range read lies inside them (checked above); `buf` is the caller's and no pool
        // frame. The bytes may be changing (a freeze, a reuse): the copy is a raw one, never a
        // reference, and is thrown away below unless the sequence shows no change could have
        // overlapped it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                t.bytes.add((offset - start) as usize),
                buf.as_mut_ptr(),
                buf.len(),
            );
        }
        if t.folio.read_seq_retry(t.seq) {
            return None;
        }
        if !continues_in(swap_end(end), t.folio) {
            // Unreferenced: at worst a flag on a folio just evicted (what the LRU batches
            // already allow).
            self.cache
                .vm
                .mark_accessed(self.pool(), t.folio, t.folio.flags());
        }
        ra.note_read(offset >> FRAME_SHIFT, (end - 1) >> FRAME_SHIFT);
        Some(buf.len())
    }
}

impl Mapping {
    /// [`crate::filemap::CachedFile::with_folio`] when it is a hit through the calling thread's
    /// translation ([`Mapping::with_folio_through`]); `f` given back if the caller must take the
    /// referenced path.
    #[inline]
    pub(crate) fn with_folio_translated<R, F: FnOnce(&[u8], u64) -> R>(
        &self,
        ra: &Readahead,
        index: u64,
        f: F,
    ) -> Result<R, F> {
        match self.thread_translation(index) {
            Some(t) => self.with_folio_through(ra, &t, index, f),
            None => Err(f),
        }
    }

    /// A `with_folio` hit through translation `t` (the thread's, or a reader's): `f` run on the
    /// folio's bytes and first page, borrowed without a reference (`mem/borrow.rs`); `f` given
    /// back if the caller must take the referenced path (`index` not in `t`'s folio or past the
    /// end of the file, `t` out of date, the thread's borrow slot taken). The caller counts the
    /// hit.
    ///
    /// The borrow names the folio in the thread's slot, fences, and only then checks the
    /// translation (the sequence unchanged and even, up to date, no mapcount, no readahead
    /// marker): from there until the borrow ends no freeze succeeds, no space gets a writable
    /// pte and no free reuses the frames, so the bytes `f` sees are stable.
    #[inline]
    pub(crate) fn with_folio_through<R, F: FnOnce(&[u8], u64) -> R>(
        &self,
        ra: &Readahead,
        t: &Translation<'_>,
        index: u64,
        f: F,
    ) -> Result<R, F> {
        // `index` lies in the folio, so `index << FRAME_SHIFT` does not overflow: the page
        // starts before the end of the file if it is inside it.
        if index.wrapping_sub(t.start) >= t.frames || index << FRAME_SHIFT >= self.size() {
            return Err(f);
        }
        let Some(borrow) = Borrow::begin(t.folio) else {
            return Err(f);
        };
        let Some(flags) = t.current_flags() else {
            return Err(f);
        };
        // SAFETY: the folio's frames (`t.bytes`, `t.frames` of them) lie inside the pool
        // (checked when the translation was made), whose mapping lives as long as the cache,
        // which this mapping keeps alive. The folio is up to date and is the translation's (its
        // sequence unchanged, read after the borrower's fence), so the frames hold its bytes;
        // until `borrow` ends, a freeze fails, a write fault copies and a free is deferred
        // (`mem/borrow.rs`), so nothing writes them: no `&mut` to them exists.
        let bytes =
            unsafe { std::slice::from_raw_parts(t.bytes, (t.frames << FRAME_SHIFT) as usize) };
        let r = f(bytes, t.start);
        // While still borrowed: the flag lands on this folio, not on a frame freed meanwhile.
        // The flags are those the check read (test before set, as the LRU batches allow).
        self.cache.vm.mark_accessed(self.pool(), t.folio, flags);
        borrow.end();
        ra.note_read(index, index);
        Ok(r)
    }
}

/// What a [`crate::filemap::FileReader`] remembers of a folio it found in the index (a software TLB
/// entry): the descriptor, its frames, the file pages it holds, and its byte sequence then.
///
/// The sequence vouches for the rest: it moves when the folio is frozen (an in-place write,
/// an eviction), freed, removed from or replaced in the index (`remove_folio`), or given a
/// writable pte — so while it reads the same even value, the folio is still this file's, at
/// the same place, with the bytes of that file's pages, and a reader may copy them without an
/// index walk. A translation is made only from a sequence read before the slot was checked to
/// hold the folio (the kernel's TLB is kept right by shootdowns; this one by the sequence).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Translation<'m> {
    folio: &'m Folio,
    seq: u32,
    /// The folio's first file page.
    start: u64,
    /// Its frames.
    frames: u64,
    /// The address of its first frame's bytes in the pool.
    bytes: *const u8,
}

impl Translation<'_> {
    /// Whether the folio is still what the translation says: its sequence the same even value
    /// (no removal, free, freeze or writable mapping since), up to date, mapped by no space,
    /// and without a readahead marker (which the full path must see).
    #[inline]
    fn current(&self) -> bool {
        self.current_flags().is_some()
    }

    /// [`Translation::current`], with the flags it read if so.
    #[inline]
    fn current_flags(&self) -> Option<u64> {
        match self.folio.read_seq_begin() {
            Some((s, flags)) if s == self.seq && flags & READAHEAD == 0 => Some(flags),
            _ => None,
        }
    }
}

/// A translation as a thread keeps it for the handles' hits: the parts of a [`Translation`],
/// without its borrow, and the mapping it belongs to.
#[derive(Clone, Copy)]
struct ThreadSlot {
    /// [`Mapping::uid`] of the mapping whose translation this is; 0 for an empty slot.
    uid: u64,
    folio: *const Folio,
    seq: u32,
    start: u64,
    frames: u64,
    bytes: *const u8,
}

const EMPTY_SLOT: ThreadSlot = ThreadSlot {
    uid: 0,
    folio: ptr::null(),
    seq: 0,
    start: 0,
    frames: 0,
    bytes: ptr::null(),
};

/// Translations each thread keeps for the handles' hits (12 KiB a thread), one slot per
/// 2^[`MAX_ORDER`] pages of a file, the slot chosen by the page and the file together.
pub(crate) const THREAD_TRANSLATIONS: usize = 256;

thread_local! {
    /// The thread's translations ([`Mapping::thread_translation`]): const-initialised and
    /// without a destructor, so that reaching them is an offset from the thread pointer.
    static THREAD_TLB: [Cell<ThreadSlot>; THREAD_TRANSLATIONS] =
        const { [const { Cell::new(EMPTY_SLOT) }; THREAD_TRANSLATIONS] };
}

/// The calling thread's translations, for the caller to use at once, on this thread.
///
/// Only the table's address comes out of `with`: a closure that small is inlined, and the
/// thread-local is then reached by an offset from the thread pointer rather than by a call
/// through the key (which cost a 64-byte hit at 256 MiB about a quarter of its time,
/// `docs/journal/`).
#[inline]
fn thread_tlb<'a>() -> &'a [Cell<ThreadSlot>; THREAD_TRANSLATIONS] {
    THREAD_TLB.with(|tlb| {
        // SAFETY: a const-initialised thread-local without a destructor lives as long as its
        // thread. The table is `!Sync` (cells), so the reference cannot leave the thread, and
        // both callers use it within the call.
        unsafe { &*(tlb as *const [Cell<ThreadSlot>; THREAD_TRANSLATIONS]) }
    })
}

/// The source of [`Mapping::uid`]s.
static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// A new [`Mapping::uid`].
pub(super) fn next_uid() -> u64 {
    NEXT_UID.fetch_add(1, Ordering::Relaxed)
}

/// [`Mapping::tlb_spread`] of the mapping `uid`: files opened one after another get
/// neighbouring uids, so they are spread over the slots.
pub(super) fn tlb_spread(uid: u64) -> u64 {
    uid.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40
}

/// The thread slot of page `index` of the mapping whose [`Mapping::tlb_spread`] is `spread`.
#[inline]
fn thread_slot(spread: u64, index: u64) -> usize {
    ((index >> MAX_ORDER) ^ spread) as usize % THREAD_TRANSLATIONS
}

impl Mapping {
    /// The calling thread's translation for page `index` of this file, if it keeps one there
    /// (for the handles' hits: [`crate::filemap::CachedFile::read_at`] and `read_folio`). It
    /// may be of another folio of the file or out of date: the translated paths check both.
    #[inline]
    pub(crate) fn thread_translation(&self, index: u64) -> Option<Translation<'_>> {
        let s = thread_tlb()[thread_slot(self.tlb_spread, index)].get();
        if s.uid != self.uid {
            return None;
        }
        // SAFETY: the slot was filled by `remember_translation` from a translation of this
        // very mapping (uids are never reused, so a dropped mapping's slots never match
        // another's), which named a descriptor of this mapping's pool. The pool lives as long
        // as the cache, which this mapping (borrowed by the caller) keeps alive, and
        // descriptors live as long as the pool; what the descriptor describes now is the
        // sequence's to say.
        let folio = unsafe { &*s.folio };
        Some(Translation {
            folio,
            seq: s.seq,
            start: s.start,
            frames: s.frames,
            bytes: s.bytes,
        })
    }

    /// Keeps `t`, a translation of this file, as the calling thread's for its pages.
    #[inline]
    pub(crate) fn remember_translation(&self, t: &Translation<'_>) {
        let s = ThreadSlot {
            uid: self.uid,
            folio: t.folio,
            seq: t.seq,
            start: t.start,
            frames: t.frames,
            bytes: t.bytes,
        };
        thread_tlb()[thread_slot(self.tlb_spread, t.start)].set(s);
    }
}
