//! Writing a file: locking or allocating the folio a write goes to, copying on write where
//! readers hold the old bytes, and marking the result dirty.

use super::*;

impl Mapping {
    /// The locked folio to write `pos .. end` into, starting at page `index`: the cached one,
    /// or a new one as large as the write covers (up to the configured order).
    fn lock_for_write(&self, index: u64, pos: u64, end: u64) -> Result<FolioGuard<'_>> {
        let mut order = 0;
        if pos == index << FRAME_SHIFT {
            while order < self.cache.config.max_folio_order
                && index.is_multiple_of(1u64 << (order + 1))
                && (index + (1u64 << (order + 1))) << FRAME_SHIFT <= end
            {
                order += 1;
            }
        }
        loop {
            if let Some(g) = self.lock_folio(index) {
                return Ok(g);
            }
            if let Some(g) = self.insert_new(index, order, true)? {
                return Ok(g);
            }
            // Something overlapping is cached: fall back to one page.
            order = 0;
        }
    }

    /// Applies `f` to the bytes of the locked, up-to-date folio `g` (still mapped at its index):
    /// in place if nobody else holds a reference, otherwise on a copy that replaces it in the
    /// index, so readers keep the bytes they were reading. Returns the guard of the folio that
    /// now holds the data.
    ///
    /// Returns `None`, with `f` not applied and `g` unlocked, when readers hold the folio and no
    /// block of its order can be had for the copy (a large folio in a small or fragmented cache;
    /// the reader may even be the caller's own thread, so waiting for it could hang for ever):
    /// a dirty folio is then written back, a clean one is taken out of the index (its readers
    /// keep it), and the caller starts over — finding the folio clean, or not at all and then
    /// working on smaller folios read from the store.
    pub(crate) fn modify<'a>(
        &'a self,
        mut g: FolioGuard<'a>,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<Option<FolioGuard<'a>>> {
        let mut f = Some(f);
        // A space mapping the folio would keep the old bytes if it were replaced, and could be
        // writing them if changed in place: unmap it everywhere first (the writes the frames
        // recorded become DIRTY); the spaces fault again and find what the index holds.
        self.unmap_folio(&g);
        if self.modify_in_place(&mut g, &mut f) {
            return Ok(Some(g));
        }
        let index = g.index();
        let copy = self.cache.alloc(g.order(), true)?.expect("must allocate");
        if copy.order() != g.order() {
            drop(copy);
            if self.modify_in_place(&mut g, &mut f) {
                // The readers left meanwhile.
                return Ok(Some(g));
            }
            if g.is_dirty() {
                self.write_folio(g)?;
            } else {
                self.delete_from_index(&g);
            }
            return Ok(None);
        }
        let f = f.take().expect("not applied yet");
        copy.set_mapping(self.id);
        copy.set_index(index);
        let for_index = copy.clone().into_raw();
        let mut ng = copy.lock_with(self.policy());
        {
            let dst = ng.bytes_mut().expect("fresh folio");
            dst.copy_from_slice(g.bytes());
            f(dst);
        }
        ng.mark_uptodate();
        // The copy takes over the old folio's place on the lists (as migration does), before it
        // is visible.
        let lru_state = g.flags() & (ACTIVE | REFERENCED | WORKINGSET);
        if lru_state & ACTIVE != 0 {
            ng.set_active();
        }
        if lru_state & REFERENCED != 0 {
            ng.set_referenced();
        }
        if lru_state & WORKINGSET != 0 {
            ng.set_workingset();
        }
        // The copy replaces the folio in one step: a reader finds one or the other.
        let replaced =
            self.remove_folio(&g, Some(Entry::Pointer(FolioPtr(for_index))), IndexRef::Put);
        assert!(replaced, "a locked, mapped folio left its index");
        // `remove_folio` took the old folio's frames off the counts; the copy has as many.
        let frames = ng.nr_frames();
        self.nr_frames.fetch_add(frames, Ordering::Relaxed);
        self.cache.cached.fetch_add(frames, Ordering::Relaxed);
        // The copy takes over the old folio's dirty state (the index's marks moved with it).
        if g.clear_dirty() {
            ng.set_dirty();
        }
        if g.is_wb_failed() {
            // The old folio was parked: the copy holds a write, so it is re-armed (its slot
            // carries `FAILED_MARK`, moved with it).
            self.rearm_writeback(&ng, index);
        }
        self.cache.vm.lru_add(self.pool(), &ng);
        Ok(Some(ng))
    }

    /// Applies `f` in place if the count can be frozen (nobody but the index and `g` holds the
    /// folio); returns whether it did.
    fn modify_in_place(
        &self,
        g: &mut FolioGuard<'_>,
        f: &mut Option<impl FnOnce(&mut [u8])>,
    ) -> bool {
        // SAFETY: the folio is mapped (checked by the caller under its lock, and only a lock
        // holder removes it), so the index owns one raw reference; nobody uses that reference
        // during the freeze (lookups only use references they took themselves).
        match unsafe { g.freeze(1) } {
            Some(mut frozen) => {
                (f.take().expect("applied once"))(frozen.bytes_mut());
                true
            }
            None => false,
        }
    }

    /// Marks the locked folio dirty, in its flags, the index and the cache's count; a folio
    /// parked after failed write-backs is re-armed (only a dirty one can be parked).
    pub(crate) fn mark_dirty(&self, g: &FolioGuard<'_>) {
        if !g.set_dirty() {
            self.cache.dirty.fetch_add(g.nr_frames(), Ordering::Relaxed);
            self.pages.set_mark(g.index(), DIRTY_MARK);
            self.dirtied_at
                .lock()
                .unwrap()
                .get_or_insert_with(Instant::now);
        } else if g.is_wb_failed() {
            self.rearm_writeback(g, g.index());
        }
    }

    pub(crate) fn write_at(&self, offset: u64, data: &[u8]) -> Result<usize> {
        let end = check_range(offset, data.len())?;
        if data.is_empty() {
            return Ok(0);
        }
        let mut pos = offset;
        let result = {
            let _inv = self.invalidate_shared();
            if end > self.size() {
                self.zero_eof_tail()?;
            }
            self.write_pages(offset, data, &mut pos, end)
        };
        match result {
            Ok(()) => Ok(data.len()),
            Err(_) if pos > offset => Ok((pos - offset) as usize),
            Err(e) => Err(e),
        }
    }

    fn write_pages(&self, offset: u64, data: &[u8], pos: &mut u64, end: u64) -> Result<()> {
        while *pos < end {
            // Throttled before each folio it dirties, holding the invalidate lock as the kernel
            // holds `i_rwsem` (the flusher does not need it).
            self.balance_dirty()?;
            let index = *pos >> FRAME_SHIFT;
            let mut g = self.lock_for_write(index, *pos, end)?;
            // Stable pages: the bytes under write-back must not change.
            g.wait_writeback_with(self.policy());
            let start = g.index() << FRAME_SHIFT;
            let off = (*pos - start) as usize;
            let n = (g.size() - off).min((end - *pos) as usize);
            let src = &data[(*pos - offset) as usize..][..n];
            let whole = off == 0 && n == g.size();
            if !g.is_uptodate() && !whole {
                // A partial write: the rest of the folio comes from the store (or is zero).
                self.read_into(&mut g)?;
            }
            if g.is_uptodate() {
                match self.modify(g, |b| b[off..off + n].copy_from_slice(src))? {
                    Some(ng) => g = ng,
                    // Written back or taken out of the index: this page starts over.
                    None => continue,
                }
            } else {
                g.bytes_mut().expect("not up to date")[off..off + n].copy_from_slice(src);
                g.mark_uptodate();
            }
            self.mark_accessed(&g);
            self.mark_dirty(&g);
            *pos += n as u64;
            self.size.fetch_max(*pos, Ordering::AcqRel);
        }
        Ok(())
    }
}
