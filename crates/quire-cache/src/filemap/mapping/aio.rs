//! Reads that await instead of blocking, and prefetching in one batch: the page cache's side
//! of the kernel's io_uring buffered reads (`IOCB_WAITQ`: a waiter parked in the folio's wait
//! queue instead of a sleeping thread) and of `readahead(2)` / `POSIX_FADV_WILLNEED`.
//!
//! A miss inserts the window's folios locked and submits **all** of them, the one the caller
//! wants included, to the I/O engine as one batch; the caller then awaits the wanted folio's
//! unlock ([`FolioRef::wait_unlocked_async`]). The read's end runs on the engine's thread:
//! it marks the folio up to date and unlocks it, which wakes the task. A request the caller
//! made itself reports its error through a slot the caller holds, so the error comes back
//! typed; a folio somebody else failed to read is read again by the caller, as the blocking
//! path does.
//!
//! Cancellation: the future holds references only. Dropped while it waits, it leaves its
//! requests to finish (their target is frame memory they own, never the caller's buffer) and
//! the folios they fill stay cached; nothing is locked on its behalf and no waiter remains.
//! Allocation may still reclaim on the polling thread, as in the blocking path (the kernel's
//! `IOCB_NOWAIT` would give up instead).

use std::ops::Range;
use std::sync::{Arc, Mutex};

use super::{copy_out, Mapping};
use crate::bio::Bio;
use crate::filemap::readahead::{Pieces, RaWindow, Readahead};
use crate::filemap::{check_range, FilemapError, Result, PAGE_SIZE};
use crate::mem::folio::{FolioGuard, FolioRef, FRAME_SHIFT, LOCKED, READAHEAD, UPTODATE};
use crate::stats::{count, Event};

/// Where a read the caller submitted reports its error.
pub(crate) type ReadReport = Arc<Mutex<Option<FilemapError>>>;

impl Mapping {
    /// [`Mapping::get_uptodate`] that awaits reads instead of blocking.
    pub(crate) async fn get_uptodate_async(
        &self,
        ra: &Readahead,
        index: u64,
        req: u64,
    ) -> Result<Option<FolioRef<'_>>> {
        let report: ReadReport = Arc::default();
        let mut submitted = false;
        loop {
            if let Some(f) = self.find_get(index) {
                let flags = f.flags();
                if flags & READAHEAD != 0 && f.clear_readahead() {
                    self.async_readahead(ra, &f);
                }
                if flags & UPTODATE != 0 {
                    count(Event::PageCacheHits);
                    return Ok(Some(f));
                }
                if flags & LOCKED != 0 {
                    // Being read (by us or by somebody): wait for the read's end.
                    f.wait_unlocked_async(self.policy()).await;
                    if f.is_uptodate() {
                        return Ok(Some(f));
                    }
                } else if submitted {
                    // Our own read ended without data: its error is in the slot (or the folio
                    // was cut and is gone: the next lookup tells).
                } else {
                    // Not up to date and unlocked: an earlier read failed. Read it again.
                    let g = f.lock_async(self.policy()).await;
                    if !self.still_mapped(&g, index) {
                        continue;
                    }
                    if g.is_uptodate() {
                        return Ok(Some(g.unlock()));
                    }
                    submitted = true;
                    self.submit_own_read(g, &report)?;
                    continue;
                }
                if let Some(e) = report.lock().unwrap().take() {
                    return Err(e);
                }
                if submitted && !self.is_cached_uptodate(index) {
                    // Our read failed and somebody took the error first: read once more.
                    submitted = false;
                }
                continue;
            }
            if index >= self.size().div_ceil(PAGE_SIZE) {
                return Ok(None);
            }
            count(Event::PageCacheMisses);
            let mut window = ra.on_miss(index, req);
            window.size = window.size.min(self.ra_cap());
            submitted = true;
            self.readahead_submit(window, index, &report)?;
        }
    }

    /// [`Mapping::read_at`] that awaits misses: each missing folio is submitted with its window
    /// as one batch and awaited.
    pub(crate) async fn read_at_async(
        &self,
        ra: &Readahead,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize> {
        check_range(offset, buf.len())?;
        let size = self.size();
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let end = size.min(offset + buf.len() as u64);
        let last = (end - 1) >> FRAME_SHIFT;
        let mut pos = offset;
        while pos < end {
            let index = pos >> FRAME_SHIFT;
            let f = match self.get_uptodate_async(ra, index, last - index + 1).await {
                Ok(Some(f)) => f,
                // The file was cut under us: a short read up to where it was.
                Ok(None) => break,
                // The store was cut behind our back: a short read of what was there, if any.
                Err(e) if pos > offset && e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e),
            };
            self.mark_accessed(&f);
            let at = (pos - offset) as usize;
            pos += copy_folio(&f, pos, end, &mut buf[at..]) as u64;
        }
        ra.note_read(offset >> FRAME_SHIFT, last);
        Ok((pos.min(end) - offset) as usize)
    }

    /// [`Mapping::read_folio`] that awaits a miss.
    pub(crate) async fn read_folio_async(
        &self,
        ra: &Readahead,
        index: u64,
    ) -> Result<FolioRef<'_>> {
        let f = match self.get_uptodate_async(ra, index, 1).await? {
            Some(f) => f,
            None => {
                return Err(FilemapError::Store(crate::store::StoreError::Io {
                    op: crate::store::Op::Read,
                    offset: index.saturating_mul(PAGE_SIZE),
                    kind: std::io::ErrorKind::UnexpectedEof,
                    errno: None,
                }))
            }
        };
        self.mark_accessed(&f);
        ra.note_read(index, index);
        self.stable_for_reader(&f);
        Ok(f)
    }

    /// Whether every byte of `offset .. offset + len` (cut at the end of the file) lies in
    /// folios cached and up to date right now: a read of it would not wait.
    pub(crate) fn is_cached(&self, offset: u64, len: usize) -> bool {
        let end = self.size().min(offset.saturating_add(len as u64));
        let mut pos = offset;
        while pos < end {
            match self.find_get(pos >> FRAME_SHIFT) {
                Some(f) if f.is_uptodate() => {
                    pos = (f.index() + f.nr_frames() as u64) << FRAME_SHIFT;
                }
                _ => return false,
            }
        }
        true
    }

    /// Whether page `index` is cached and up to date right now.
    fn is_cached_uptodate(&self, index: u64) -> bool {
        self.find_get(index).is_some_and(|f| f.is_uptodate())
    }

    /// Submits the read of the locked folio `g` for a caller that awaits it, reporting to
    /// `report` (or reads it here if nothing is to be read from the store).
    fn submit_own_read(&self, g: FolioGuard<'_>, report: &ReadReport) -> Result<()> {
        match self.read_bio_reporting(g, Some(report.clone())) {
            Ok(bio) => {
                self.submit_awaited_read(bio);
                Ok(())
            }
            Err(mut g) => self.read_into(&mut g),
        }
    }

    /// [`Mapping::readahead`] for an awaiting caller: the folio holding `wanted` is submitted
    /// with the rest of the window (reporting to `report`), not read here.
    fn readahead_submit(&self, w: RaWindow, wanted: u64, report: &ReadReport) -> Result<()> {
        let mut batch = Vec::new();
        let mut wanted_guard = None;
        self.insert_window(w, Some(wanted), |g, holds_wanted| {
            if holds_wanted {
                wanted_guard = Some(g);
            } else {
                self.push_read(g, None, &mut batch);
            }
        })?;
        // The rest of the window goes to the engine as one batch; the wanted folio is the
        // awaited read (it may go to this thread's own ring).
        self.submit_reads(batch);
        match wanted_guard {
            Some(g) => self.submit_own_read(g, report),
            None => Ok(()),
        }
    }

    /// Adds the read of `g` to `batch`, or reads it here if nothing is to be read from the
    /// store (it lies past the data: zeros).
    pub(super) fn push_read(
        &self,
        g: FolioGuard<'_>,
        report: Option<ReadReport>,
        batch: &mut Vec<Bio>,
    ) {
        match self.read_bio_reporting(g, report) {
            Ok(bio) => batch.push(bio),
            Err(mut g) => {
                if self.read_into(&mut g).is_ok() {
                    count(Event::Readahead);
                }
            }
        }
    }

    /// Starts reading every page of `ranges` (byte ranges) that is not cached, as one batch of
    /// requests, and returns the pages submitted without waiting for them. Pieces already
    /// cached are skipped; each range is read in windows of at most [`Mapping::ra_cap`] pages;
    /// it stops early (returning what it submitted) when memory is short.
    #[doc(alias("readahead", "force_page_cache_ra"))]
    pub(crate) fn prefetch(&self, ranges: &[Range<u64>]) -> Result<u64> {
        let end_page = self.size().div_ceil(PAGE_SIZE);
        let mut batch = Vec::new();
        let mut pages = 0;
        for r in ranges {
            check_range(r.start, (r.end.saturating_sub(r.start)) as usize)?;
            let first = r.start >> FRAME_SHIFT;
            let last = r.end.div_ceil(PAGE_SIZE).min(end_page);
            let mut at = first;
            while at < last {
                let size = (last - at).min(self.ra_cap());
                let w = RaWindow {
                    start: at,
                    size,
                    marker: None,
                };
                let mut short = false;
                self.insert_pieces(w, &mut short, |g| {
                    pages += g.nr_frames() as u64;
                    self.push_read(g, None, &mut batch);
                })?;
                if short {
                    self.submit_reads(batch);
                    return Ok(pages);
                }
                at += size;
            }
        }
        self.submit_reads(batch);
        Ok(pages)
    }

    /// Inserts a locked folio for every piece of `w` not cached, skipping cached pieces (a
    /// cached large folio skips its pages); sets `short` and stops when memory is short.
    fn insert_pieces<'a>(
        &'a self,
        w: RaWindow,
        short: &mut bool,
        mut each: impl FnMut(FolioGuard<'a>),
    ) -> Result<()> {
        let _inv = self.invalidate_shared();
        let end = (w.start + w.size).min(self.size().div_ceil(PAGE_SIZE));
        let max_order = self.cache.config.max_folio_order;
        let mut pieces = Pieces::new(w.start, end.saturating_sub(w.start), max_order);
        while let Some((idx, order)) = pieces.pop() {
            if let Some(f) = self.find_get(idx) {
                // Cached: skip what it covers of this piece, and cut the rest again.
                let next = f.index() + f.nr_frames() as u64;
                let piece_end = idx + (1u64 << order);
                if next < piece_end {
                    pieces.push_front_range(next, piece_end - next, order);
                }
                continue;
            }
            match self.insert_new(idx, order, false)? {
                Some(g) => {
                    let covered_end = g.index() + g.nr_frames() as u64;
                    let piece_end = idx + (1u64 << order);
                    if covered_end < piece_end {
                        pieces.push_front_range(covered_end, piece_end - covered_end, order);
                    }
                    each(g);
                }
                None if self.find_get(idx).is_some() => {
                    // Inserted by somebody meanwhile: look at this piece again.
                    pieces.push_front((idx, order));
                }
                None => {
                    *short = true;
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// Copies the folio's bytes from `pos` (a file offset inside it) into `buf`, at most up to
/// `end`; returns how many.
pub(super) fn copy_folio(f: &FolioRef<'_>, pos: u64, end: u64, buf: &mut [u8]) -> usize {
    let start = f.index() << FRAME_SHIFT;
    let off = (pos - start) as usize;
    let n = (f.size() - off).min((end - pos) as usize).min(buf.len());
    copy_out(f, off, &mut buf[..n]);
    n
}
