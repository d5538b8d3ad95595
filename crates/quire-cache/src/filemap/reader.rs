//! [`FileReader`]: a handle's hits without a pin per lookup.
//!
//! Every lookup of [`CachedFile`] enters a read-side critical section of its own
//! ([`crate::sync::rcu::pin`]): a thread-local lookup and a full fence, about a quarter of a
//! cached hit's time (`docs/journal/`). A `FileReader` keeps one guard across
//! its reads and leaves it every [`REPIN_EVERY`] hits, so that grace periods (the frees of
//! index nodes that other threads unlinked) still come; a read that is not a plain hit (a miss,
//! a readahead marker, a folio not yet up to date, a read across folios or past the end of the
//! file) leaves the critical section for as long as the handle's own path takes, since that
//! may do I/O or sleep. Results, access marking and readahead are those of the handle's own
//! methods, with two differences: the reader counts its hits (`PageCacheHits`) once per
//! [`REPIN_EVERY`] and when it is dropped, and it remembers where its own previous read ended
//! (the handle remembers that per thread) to tell a read that continues in a folio from one
//! that uses it again.
//!
//! A reader also keeps translations — where it found up to [`TRANSLATIONS`]-many folios,
//! one slot per 2^`MAX_ORDER` file pages — so that a hit on a folio it has seen skips the
//! index walk; the folio's byte sequence shows whether it is still the file's folio at that
//! place (`Translation` in `filemap/mapping/hit.rs`; the loom models in `tests/loom_seq.rs`). A
//! copying hit (`read_at`) takes no reference at all; a zero-copy one (`read_folio`) takes the
//! one it returns; a borrowing one (`with_folio`) names the folio in the thread's borrow slot
//! for the duration of its closure, as the handle's does (`mem/borrow.rs`).
//!
//! A reader is for one thread at a time (`&mut self`), as a guard is; threads that share a
//! handle make one reader each.

use super::mapping::Translation;
use super::{CachedFile, Result};
use crate::mem::buddy::MAX_ORDER;
use crate::mem::folio::{FolioRef, FRAME_SHIFT};
use crate::stats::{self, Event};
use crate::sync::rcu;

/// Hits served under one guard before it is left and entered again.
// Re-exported for the tests only (feature `bench-internals`).
#[cfg_attr(not(feature = "bench-internals"), allow(unreachable_pub))]
pub const REPIN_EVERY: u32 = 64;

/// Translations a reader keeps (12 KiB): one slot per 2^`MAX_ORDER` file pages (the largest
/// folio), chosen by the page's index, so they cover 512 MiB of a file cached in the largest
/// folios. With 64 slots a reader of a 256 MiB file found its folio in them half the time and
/// its hits took 75 ns, with 256 slots 54 ns (`docs/journal/`).
pub(crate) const TRANSLATIONS: usize = 256;

/// A reader of one [`CachedFile`] that keeps its read-side critical section across hits; see
/// the notes below. Made by [`CachedFile::reader`].
///
/// It keeps one guard across its reads and leaves it every `REPIN_EVERY` hits, so that grace
/// periods still come; a read that is not a plain hit (a miss, a readahead marker, a folio not
/// yet up to date, a read across folios or past the end, a folio some space maps) leaves the
/// critical section for as long as the handle's own path takes. Results, access marking and
/// readahead are those of the handle's own methods; hits reach the counters every
/// `REPIN_EVERY` and at drop. One thread at a time (`&mut self`): threads that share a
/// handle make one reader each.
///
/// A reader also remembers where it found folios (a small software TLB of `TRANSLATIONS`
/// slots): a hit on a folio it has seen skips the index walk, the folio's byte sequence showing
/// that it is still the file's folio at that place.
pub struct FileReader<'a> {
    file: &'a CachedFile,
    guard: rcu::Guard,
    hits: u32,
    tlb: Box<[Option<Translation<'a>>; TRANSLATIONS]>,
    /// Where this reader's previous read ended: a read that starts in the folio it ended in
    /// does not mark that folio again (the handle keeps this per thread; a reader is one
    /// thread's, and keeps its own).
    prev_end: Option<u64>,
}

/// The translation slot of file page `index`.
#[inline]
fn slot(index: u64) -> usize {
    (index >> MAX_ORDER) as usize % TRANSLATIONS
}

impl<'a> FileReader<'a> {
    pub(super) fn new(file: &'a CachedFile) -> FileReader<'a> {
        FileReader {
            file,
            guard: rcu::pin(),
            hits: 0,
            tlb: Box::new([None; TRANSLATIONS]),
            prev_end: None,
        }
    }

    /// Counts a hit, leaving and entering the critical section every [`REPIN_EVERY`], when
    /// the hits since the last time reach the cache's counters (`PageCacheHits`).
    #[inline]
    fn tick(&mut self) {
        self.hits += 1;
        if self.hits >= REPIN_EVERY {
            self.flush_hits();
            self.guard.repin();
        }
    }

    /// Adds the hits not yet counted to the counters.
    fn flush_hits(&mut self) {
        stats::add(Event::PageCacheHits, u64::from(self.hits));
        self.hits = 0;
    }

    /// [`CachedFile::read_at`].
    #[inline]
    pub fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let (m, ra) = (&*self.file.mapping, &self.file.ra);
        let slot = slot(offset >> FRAME_SHIFT);
        let prev_end = &mut self.prev_end;
        if let Some(t) = &self.tlb[slot] {
            if let Some(n) = m.read_at_translated(ra, t, offset, buf, |end| prev_end.replace(end)) {
                self.tick();
                return Ok(n);
            }
        }
        if let Some((n, t)) =
            m.read_at_hit(ra, offset, buf, &self.guard, |end| prev_end.replace(end))
        {
            self.tlb[slot] = Some(t);
            self.tick();
            return Ok(n);
        }
        let file = self.file;
        // Straight to the full path: the reader has just tried both hits (its translation and
        // a walk), which the handle's `read_at` would try again.
        let n = self
            .guard
            .repin_after(|| file.mapping.read_at(&file.ra, offset, buf))?;
        if n > 0 {
            self.prev_end = Some(offset + n as u64);
        }
        Ok(n)
    }

    /// [`CachedFile::read_exact_at`].
    pub fn read_exact_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.read_at(offset, buf)?;
        if n < buf.len() {
            return Err(super::short_read(offset + n as u64));
        }
        Ok(())
    }

    /// [`CachedFile::read_folio`]: the reference returned is the file's, not the reader's (it
    /// may outlive the reader).
    #[inline]
    pub fn read_folio(&mut self, index: u64) -> Result<FolioRef<'a>> {
        let (m, ra) = (&*self.file.mapping, &self.file.ra);
        let slot = slot(index);
        if let Some(t) = &self.tlb[slot] {
            if let Some(f) = m.read_folio_translated(ra, t, index) {
                self.tick();
                return Ok(f);
            }
        }
        if let Some((f, t)) = m.read_folio_hit(ra, index, &self.guard) {
            self.tlb[slot] = Some(t);
            self.tick();
            return Ok(f);
        }
        let file = self.file;
        // As in `read_at`: the full path, not the handle's hits again.
        self.guard
            .repin_after(|| file.mapping.read_folio(&file.ra, index))
    }

    /// [`CachedFile::with_folio`]: `f` run on the bytes of the up-to-date folio holding page
    /// `index` and on the folio's first page.
    ///
    /// A hit through one of the reader's translations borrows the folio as the handle's does
    /// (no reference; the thread's borrow slot) but skips the thread's translation lookup, and
    /// its hit is counted with the reader's others. Other calls (the first on a folio, a borrow
    /// inside `f`, a folio that changed since the reader last saw it) go through
    /// [`FileReader::read_folio`] and hold its reference while `f` runs.
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::from_vec(vec![3u8; 3 * 4096]))?;
    /// let mut reader = file.reader();
    /// let mut sum = 0u64;
    /// for index in 0..3 {
    ///     sum += reader.with_folio(index, |bytes, first| {
    ///         let at = (index - first) as usize * 4096;
    ///         bytes[at..at + 4096].iter().map(|&b| u64::from(b)).sum::<u64>()
    ///     })?;
    /// }
    /// assert_eq!(sum, 3 * 3 * 4096);
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias = "filemap_read")]
    #[inline]
    pub fn with_folio<R>(&mut self, index: u64, f: impl FnOnce(&[u8], u64) -> R) -> Result<R> {
        let (m, ra) = (&*self.file.mapping, &self.file.ra);
        let f = match &self.tlb[slot(index)] {
            Some(t) => match m.with_folio_through(ra, t, index, f) {
                Ok(r) => {
                    self.tick();
                    return Ok(r);
                }
                Err(f) => f,
            },
            None => f,
        };
        self.with_folio_referenced(index, f)
    }

    /// [`FileReader::with_folio`] through a reference: [`FileReader::read_folio`]'s (a hit found
    /// by a walk leaves the reader a translation for the next call).
    #[inline(never)]
    fn with_folio_referenced<R>(
        &mut self,
        index: u64,
        f: impl FnOnce(&[u8], u64) -> R,
    ) -> Result<R> {
        Ok(super::lend(&self.read_folio(index)?, f))
    }

    /// The file read.
    pub fn file(&self) -> &'a CachedFile {
        self.file
    }
}

impl Drop for FileReader<'_> {
    fn drop(&mut self) {
        self.flush_hits();
    }
}

impl std::fmt::Debug for FileReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileReader")
            .field("file", self.file)
            .field("hits", &self.hits)
            .finish()
    }
}
