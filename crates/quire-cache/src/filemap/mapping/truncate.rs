//! Truncation and invalidation (the kernel's `mm/truncate.c`): a file's length changing
//! (`set_len`, with the zeroing of a page that held the old end), and dropping clean folios
//! from the cache (`invalidate`).

use super::*;

/// What one attempt to drop a folio from the page cache did.
enum Invalidated {
    /// Removed; it held this many frames.
    Freed(usize),
    /// Not removable: gone, dirty, under write-back or no longer this mapping's.
    Kept,
    /// Held by a reference other than the index's and the caller's.
    Busy,
}

impl Mapping {
    pub(crate) fn set_len(&self, len: u64) -> Result<()> {
        if len > crate::filemap::MAX_FILE_SIZE {
            return Err(FilemapError::Overflow {
                offset: len,
                len: 0,
            });
        }
        let _inv = self.invalidate_lock.write().unwrap();
        let old = self.size();
        if len >= old {
            if len > old {
                self.zero_eof_tail()?;
            }
            let _len = self.store_len.exclusive();
            // A cut of the store that failed earlier is made now, so that bytes past the old end
            // never come back as file data.
            if self.store.len()? > old {
                self.store.set_len(old)?;
            }
            self.store.set_len(len)?;
            self.store_size.store(len, Ordering::Release);
            self.size.store(len, Ordering::Release);
            return Ok(());
        }
        // First zero what lies past the new end in the folio that will hold it (cached bytes
        // past the end of the file are always zero). If this fails — no memory for a copy —
        // nothing has changed yet.
        while let Some(g) = self.lock_folio(len >> FRAME_SHIFT) {
            let start = g.index() << FRAME_SHIFT;
            if start >= len || !g.is_uptodate() {
                break;
            }
            g.wait_writeback_with(self.policy());
            let from = (len - start) as usize;
            // If `modify` gave up (written back, or out of the index), look again.
            if self.modify(g, |b| b[from..].fill(0))?.is_some() {
                break;
            }
        }
        self.size.store(len, Ordering::Release);
        // A write-back reads the length under the folio's lock (`write_folio_piece`, then
        // `write_out`). One that locked the folio holding the new end after the zeroing above
        // and before the new length was published took the old one, and may be writing the
        // folio whole, past the new end: wait for it, before the store is cut below (the
        // kernel's `truncate_inode_partial_folio` waits for write-back too). One that locks it
        // after this reads the new length. Folios wholly past the end are waited for below.
        if let Some(g) = self.lock_folio(len >> FRAME_SHIFT) {
            g.wait_writeback_with(self.policy());
        }
        let first_dead = len.div_ceil(PAGE_SIZE);
        let mut found = Vec::new();
        self.pages.for_each(first_dead, u64::MAX, None, |e| {
            found.push((e.index, e.entry.value()));
            std::ops::ControlFlow::Continue(())
        });
        for (index, value) in found {
            if let Some(v) = value {
                if index >= first_dead {
                    let _ = self.pages.cmpxchg(index, Some(Entry::Value(v)), None);
                }
                continue;
            }
            if let Some(g) = self.lock_folio(index) {
                g.wait_writeback_with(self.policy());
                if g.index() >= first_dead {
                    self.delete_from_index(&g);
                }
            }
        }
        let _len = self.store_len.exclusive();
        self.store.set_len(len)?;
        // Every write-back that raised it has ended (folios past the end were waited for and
        // the raise happens under `store_len`, held exclusively here).
        self.store_size.fetch_min(len, Ordering::AcqRel);
        Ok(())
    }

    /// Zeroes what lies past the end of the file in the folio holding it, if a space may have
    /// written there (see `eof_tail_written`); called before the file grows. The end is read
    /// under the folio lock, so a writer that extended the file meanwhile keeps its bytes.
    pub(super) fn zero_eof_tail(&self) -> Result<()> {
        if !self.eof_tail_written.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        loop {
            let Some(g) = self.lock_folio(self.size() >> FRAME_SHIFT) else {
                return Ok(());
            };
            let size = self.size();
            let start = g.index() << FRAME_SHIFT;
            if size <= start || !g.is_uptodate() {
                return Ok(());
            }
            if size >= start + g.size() as u64 {
                // The end moved past this folio meanwhile: look again.
                continue;
            }
            g.wait_writeback_with(self.policy());
            let from = (size - start) as usize;
            // `modify` unmaps the spaces first, then changes the folio or a copy of it.
            if self.modify(g, |b| b[from..].fill(0))?.is_some() {
                return Ok(());
            }
        }
    }

    /// Drops every clean, unused folio; returns the frames freed.
    pub(crate) fn invalidate(&self) -> usize {
        let mut found = Vec::new();
        self.pages.for_each(0, u64::MAX, None, |e| {
            found.push((e.index, e.entry.value()));
            std::ops::ControlFlow::Continue(())
        });
        let mut freed = 0;
        for (index, value) in found {
            if let Some(v) = value {
                // Only the shadow seen: a folio may have been inserted over it since.
                let _ = self.pages.cmpxchg(index, Some(Entry::Value(v)), None);
                continue;
            }
            // Reclaim (kswapd or a direct reclaimer) and the flusher hold a folio for moments
            // at a time: an extra reference or the lock seen here is usually theirs, so the
            // drop is retried a bounded number of times before the folio is left to its user.
            for attempt in 0..INVALIDATE_TRIES {
                match self.try_invalidate(index) {
                    Invalidated::Freed(frames) => freed += frames,
                    Invalidated::Kept => {}
                    Invalidated::Busy if attempt + 1 < INVALIDATE_TRIES => {
                        if attempt < 16 {
                            std::thread::yield_now();
                        } else {
                            std::thread::sleep(std::time::Duration::from_micros(100));
                        }
                        continue;
                    }
                    Invalidated::Busy => {}
                }
                break;
            }
        }
        freed
    }

    /// One attempt of [`Mapping::invalidate`] at `index`.
    fn try_invalidate(&self, index: u64) -> Invalidated {
        let Some(f) = self.find_get(index) else {
            return Invalidated::Kept;
        };
        // Waits for the lock: whoever holds it (a reclaimer, a reader filling the folio)
        // lets go without waiting on anything this thread holds.
        let mut g = f.lock_with(self.policy());
        if !self.still_mapped(&g, index) || g.is_dirty() || g.is_writeback() || g.is_mapped() {
            // A folio a space maps stays (`invalidate_mapping_pages` skips mapped folios).
            return Invalidated::Kept;
        }
        let frames = g.nr_frames();
        // SAFETY: mapped, so the index owns one raw reference, unused during the freeze.
        let Some(mut frozen) = (unsafe { g.freeze(1) }) else {
            return Invalidated::Busy;
        };
        let folio = frozen.folio();
        if folio.flags() & (DIRTY | WRITEBACK) != 0 {
            // Made dirty again by a failed write-back that ended meanwhile: keep it.
            return Invalidated::Kept;
        }
        if self.remove_folio(folio, None, IndexRef::Frozen(&mut frozen)) {
            Invalidated::Freed(frames)
        } else {
            Invalidated::Kept
        }
    }
}
