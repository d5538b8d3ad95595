//! [`FileReader`]: a handle's hits without a pin per lookup.
//!
//! Every lookup of [`CachedFile`] enters a read-side critical section of its own
//! ([`crate::sync::rcu::pin`]): a thread-local lookup and a full fence, about a quarter of a
//! cached hit's time (`docs/BENCHMARKS.md`, issue 12). A `FileReader` keeps one guard across
//! its reads and leaves it every [`REPIN_EVERY`] hits, so that grace periods (the frees of
//! index nodes that other threads unlinked) still come; a read that is not a plain hit (a miss,
//! a readahead marker, a folio not yet up to date, a read across folios or past the end of the
//! file) leaves the critical section for as long as the handle's own path takes, since that
//! may do I/O or sleep. Results, counters, access marking and readahead are those of the
//! handle's own methods.
//!
//! A reader is for one thread at a time (`&mut self`), as a guard is; threads that share a
//! handle make one reader each.

use super::{CachedFile, Result};
use crate::mem::folio::FolioRef;
use crate::sync::rcu;

/// Hits served under one guard before it is left and entered again.
pub const REPIN_EVERY: u32 = 64;

/// A reader of one [`CachedFile`] that keeps its read-side critical section across hits; see
/// the notes below. Made by [`CachedFile::reader`].
///
/// It keeps one guard across its reads and leaves it every [`REPIN_EVERY`] hits, so that grace
/// periods still come; a read that is not a plain hit (a miss, a readahead marker, a folio not
/// yet up to date, a read across folios or past the end, a folio some space maps) leaves the
/// critical section for as long as the handle's own path takes. Results, counters, access
/// marking and readahead are those of the handle's own methods. One thread at a time
/// (`&mut self`): threads that share a handle make one reader each.
pub struct FileReader<'a> {
    file: &'a CachedFile,
    guard: rcu::Guard,
    hits: u32,
}

impl<'a> FileReader<'a> {
    pub(super) fn new(file: &'a CachedFile) -> FileReader<'a> {
        FileReader {
            file,
            guard: rcu::pin(),
            hits: 0,
        }
    }

    /// Counts a hit, leaving and entering the critical section every [`REPIN_EVERY`].
    #[inline]
    fn tick(&mut self) {
        self.hits += 1;
        if self.hits >= REPIN_EVERY {
            self.hits = 0;
            self.guard.repin();
        }
    }

    /// [`CachedFile::read_at`].
    #[inline]
    pub fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let (m, ra) = (&self.file.mapping, &self.file.ra);
        if let Some(n) = m.read_at_hit(ra, offset, buf, &self.guard) {
            self.tick();
            return Ok(n);
        }
        let file = self.file;
        self.guard.repin_after(|| file.read_at(offset, buf))
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
        let (m, ra) = (&self.file.mapping, &self.file.ra);
        if let Some(f) = m.read_folio_hit(ra, index, &self.guard) {
            self.tick();
            return Ok(f);
        }
        let file = self.file;
        self.guard.repin_after(|| file.read_folio(index))
    }

    /// The file read.
    pub fn file(&self) -> &'a CachedFile {
        self.file
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
