//! [`FileReader`]: a handle's hits without a pin per lookup.
//!
//! Every lookup of [`CachedFile`] enters a read-side critical section of its own
//! ([`crate::sync::rcu::pin`]): a thread-local lookup and a full fence, about a quarter of a
//! cached hit's time (`docs/BENCHMARKS.md`, issue 12). A `FileReader` keeps one guard across
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
//! one slot per 2^[`MAX_ORDER`] file pages — so that a hit on a folio it has seen skips the
//! index walk; the folio's byte sequence shows whether it is still the file's folio at that
//! place (`Translation` in `filemap/mapping/hit.rs`; the loom models in `tests/loom_seq.rs`). A
//! copying hit (`read_at`) takes no reference at all; a zero-copy one (`read_folio`) takes the
//! one it returns.
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
pub const REPIN_EVERY: u32 = 64;

/// Translations a reader keeps (12 KiB): one slot per 2^[`MAX_ORDER`] file pages (the largest
/// folio), chosen by the page's index, so they cover 512 MiB of a file cached in the largest
/// folios. With 64 slots a reader of a 256 MiB file found its folio in them half the time and
/// its hits took 75 ns, with 256 slots 54 ns (`docs/BENCHMARKS.md`).
pub const TRANSLATIONS: usize = 256;

/// A reader of one [`CachedFile`] that keeps its read-side critical section across hits; see
/// the notes below. Made by [`CachedFile::reader`].
///
/// It keeps one guard across its reads and leaves it every [`REPIN_EVERY`] hits, so that grace
/// periods still come; a read that is not a plain hit (a miss, a readahead marker, a folio not
/// yet up to date, a read across folios or past the end, a folio some space maps) leaves the
/// critical section for as long as the handle's own path takes. Results, access marking and
/// readahead are those of the handle's own methods; hits reach the counters every
/// [`REPIN_EVERY`] and at drop. One thread at a time (`&mut self`): threads that share a
/// handle make one reader each.
///
/// A reader also remembers where it found folios (a small software TLB of [`TRANSLATIONS`]
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
