//! Reading a file: filling folios from the store (synchronously or through the I/O engine),
//! readahead, and the reads of `read_at` and `read_folio` that miss the fast paths of `hit.rs`.

use super::*;

/// What a read of a folio asks of the store: `want` bytes at `start`, of which the first
/// `valid` are file data and the first `expected` must be on the store.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadPlan {
    start: u64,
    want: usize,
    valid: usize,
    expected: usize,
}

/// The end of a folio read submitted to the I/O engine ([`crate::bio`]): owns the folio's lock
/// and reference, and the mapping (so the store and the pool) while the read is in flight.
pub(crate) struct ReadEnd {
    mapping: Arc<Mapping>,
    folio: Option<RawLocked>,
    plan: ReadPlan,
    /// Where the error goes, for a caller awaiting this folio.
    report: Option<aio::ReadReport>,
}

impl ReadEnd {
    /// Takes the folio back as a guard.
    fn guard(&mut self) -> Option<FolioGuard<'_>> {
        let RawLocked(ptr) = self.folio.take()?;
        // SAFETY: the lock and reference were given up with `into_raw` under the mapping's
        // policy when this end was made, and are taken back once (`folio` is now `None`).
        Some(unsafe {
            self.mapping
                .pool()
                .guard_from_raw(ptr, self.mapping.policy())
        })
    }
}

impl BioEnd for ReadEnd {
    fn store(&self) -> &dyn Store {
        &*self.mapping.store
    }

    fn end_io(mut self: Box<Self>, done: usize, res: StoreResult<()>) {
        let plan = self.plan;
        let mapping = self.mapping.clone();
        let report = self.report.take();
        if let Some(mut g) = self.guard() {
            match mapping.read_done(&mut g, plan, res.map(|()| done)) {
                // A folio a caller awaits was counted as its miss.
                Ok(()) if report.is_none() => count(Event::Readahead),
                Ok(()) => {}
                Err(e) => {
                    if let Some(r) = &report {
                        r.lock().unwrap().get_or_insert(e);
                    }
                }
            }
        }
    }
}

impl Drop for ReadEnd {
    /// A read dropped unrun (a store that panicked, an engine that stopped): the folio stays
    /// not up to date and unlocked, and the next reader reads it.
    fn drop(&mut self) {
        drop(self.guard());
    }
}

impl Mapping {
    /// Fills the locked folio from the store (bytes past the end of the file, and holes the
    /// cache extended the file over, read as zeros) and marks it up to date. On an error the
    /// folio stays not up to date, with ERROR set. A store that ends before the data it is known
    /// to hold (cut behind the cache's back) is an `UnexpectedEof` error, never zeros.
    pub(crate) fn read_into(&self, g: &mut FolioGuard<'_>) -> Result<()> {
        if g.is_uptodate() {
            return Ok(());
        }
        let plan = self.read_plan(g);
        let got = if plan.want > 0 {
            let buf = g.bytes_mut().expect("not up to date");
            self.store.read_full_at(plan.start, &mut buf[..plan.want])
        } else {
            Ok(0)
        };
        self.read_done(g, plan, got)
    }

    /// What reading the locked, not up-to-date folio `g` asks of the store.
    fn read_plan(&self, g: &FolioGuard<'_>) -> ReadPlan {
        let start = g.index() << FRAME_SHIFT;
        let size = self.size();
        // Loaded before the read. Below the file's length it only grows while this folio is
        // locked and not up to date (write-back raises it; `set_len` lowers it only past a new
        // end, after waiting for this folio's lock), so a read that ends below it did find the
        // store shorter than the cache left it.
        let on_store = self.store_size.load(Ordering::Acquire);
        let len = g.nr_frames() << FRAME_SHIFT;
        let valid = size.saturating_sub(start).min(len as u64) as usize;
        // Read whole pages: an O_DIRECT store needs aligned lengths.
        let want = ((valid as u64).div_ceil(PAGE_SIZE) as usize * PAGE_SIZE as usize).min(len);
        let expected = on_store.saturating_sub(start).min(valid as u64) as usize;
        ReadPlan {
            start,
            want,
            valid,
            expected,
        }
    }

    /// Finishes the read of `g` as `plan` said, the store having returned `got` (bytes read
    /// into the folio's first `plan.want`, or an error): zeroes what lies past the data and
    /// marks the folio up to date, or sets ERROR.
    fn read_done(
        &self,
        g: &mut FolioGuard<'_>,
        plan: ReadPlan,
        got: StoreResult<usize>,
    ) -> Result<()> {
        if let Ok(n) = got {
            self.read_bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        let buf = g.bytes_mut().expect("not up to date");
        match got {
            Ok(n) if n < plan.expected => {
                g.set_error();
                return Err(FilemapError::Store(StoreError::Io {
                    op: Op::Read,
                    offset: plan.start + n as u64,
                    kind: std::io::ErrorKind::UnexpectedEof,
                    errno: None,
                }));
            }
            Ok(n) => {
                let data = n.min(plan.valid);
                if data < buf.len() {
                    buf[data..].fill(0);
                }
            }
            Err(e) => {
                g.set_error();
                return Err(e.into());
            }
        }
        g.clear_error();
        g.mark_uptodate();
        Ok(())
    }

    /// A request to read the locked, not-up-to-date folio `g` through the I/O engine, which
    /// then owns its lock and reference. `Err(g)`: nothing to read from the store (the folio
    /// lies past the data; [`Mapping::read_into`] zeroes it).
    /// The read's end reports an error to `report`, if given (a caller awaiting this folio).
    pub(super) fn read_bio_reporting<'p>(
        &self,
        g: FolioGuard<'p>,
        report: Option<aio::ReadReport>,
    ) -> std::result::Result<Bio, FolioGuard<'p>> {
        let plan = self.read_plan(&g);
        let Some(me) = self.this.upgrade() else {
            return Err(g);
        };
        if plan.want == 0 {
            return Err(g);
        }
        // The frames of a locked, not-up-to-date folio: nobody else reads or writes them until
        // the request's end marks the folio up to date and unlocks it.
        debug_assert!(!g.is_uptodate());
        let buf = g.pool().frame_ptr(g.pfn());
        let (ptr, _) = g.into_raw();
        Ok(Bio {
            op: BioOp::Read,
            offset: plan.start,
            buf,
            len: plan.want,
            more: Vec::new(),
            end: Box::new(ReadEnd {
                mapping: me,
                folio: Some(RawLocked(ptr)),
                plan,
                report,
            }),
        })
    }

    /// Marks an access to a folio the caller holds (see `vmscan/swap.rs`).
    #[inline]
    pub(super) fn mark_accessed(&self, folio: &Folio) {
        self.cache
            .vm
            .mark_accessed(self.pool(), folio, folio.flags());
    }

    /// The up-to-date folio at `index`, reading (with readahead) on a miss; `None` if `index`
    /// is past the end of the file (which may have been cut while we looked). The caller marks
    /// the access.
    pub(super) fn get_uptodate(
        &self,
        ra: &Readahead,
        index: u64,
        req: u64,
    ) -> Result<Option<FolioRef<'_>>> {
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
                // Being read by somebody (wait for the lock), or an earlier read failed.
                let mut g = f.lock_with(self.policy());
                if !self.still_mapped(&g, index) {
                    continue;
                }
                self.read_into(&mut g)?;
                return Ok(Some(g.unlock()));
            }
            if index >= self.size().div_ceil(PAGE_SIZE) {
                return Ok(None);
            }
            count(Event::PageCacheMisses);
            let mut window = ra.on_miss(index, req);
            // A large random request is read in fair shares too: the rest misses again.
            window.size = window.size.min(self.ra_cap());
            self.readahead(window, Some(index))?;
        }
    }

    /// This mapping, counted (for requests in flight, which keep it alive).
    pub(crate) fn this(&self) -> Option<Arc<Mapping>> {
        self.this.upgrade()
    }

    /// The most pages one readahead window (or one random request's read) may take: an
    /// eighth of the budget, so that a window never evicts what the stream is about to read,
    /// nor most of what other files cache (a 1 MiB read on a 1 MiB budget is read 32 pages at
    /// a time). At least one page.
    pub(crate) fn ra_cap(&self) -> u64 {
        (self.pool().nr_frames() as u64 / 8).max(1)
    }

    /// Submits a batch of this file's reads: to the store itself where it completes reads
    /// ([`Store::completes_reads`]), else to the engine.
    #[doc(alias = "submit_bio")]
    pub(crate) fn submit_reads(&self, bios: Vec<Bio>) {
        if self.completes_reads {
            self.cache.bio.submit_to_store(&*self.store, bios);
        } else if bios.len() > 1 && self.cache.bio.merges_reads(&*self.store) {
            self.cache.bio.submit(crate::bio::merge_reads(bios));
        } else {
            self.cache.bio.submit(bios);
        }
    }

    /// The invalidate lock, shared. A thread whose own ring ([`crate::bio::ThreadRing`]) has
    /// reads in flight runs them to their end before it blocks here: the truncation holding
    /// the lock exclusively may be waiting for one of their folios, and only this thread can
    /// end them.
    pub(crate) fn invalidate_shared(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        match self.invalidate_lock.try_read() {
            Ok(g) => g,
            Err(std::sync::TryLockError::WouldBlock) => {
                crate::bio::local::drain_current_thread();
                self.invalidate_lock.read().unwrap()
            }
            Err(std::sync::TryLockError::Poisoned(e)) => panic!("invalidate lock poisoned: {e}"),
        }
    }

    /// Submits the read of a folio the calling thread awaits (an asynchronous read's own
    /// folio): to the store where it completes reads, else to the engine, which may put it on
    /// the thread's own ring ([`crate::bio::ThreadRing`]).
    pub(crate) fn submit_awaited_read(&self, bio: Bio) {
        if self.completes_reads {
            self.cache.bio.submit_to_store(&*self.store, vec![bio]);
        } else {
            self.cache.bio.submit_awaited(bio);
        }
    }

    /// The marker folio `f` was reached: read the stream's next window asynchronously.
    pub(super) fn async_readahead(&self, ra: &Readahead, f: &Folio) {
        let first = f.index();
        let last = first + f.nr_frames() as u64 - 1;
        let window = ra.on_marker(first, last);
        if let Some(w) = window {
            // Best effort: a failure here is met again, and reported, by a synchronous read.
            let _ = self.readahead(w, None);
        }
    }

    /// Reads `w`: inserts a locked folio for every piece not cached (large folios where the
    /// alignment allows), reads the piece holding `sync` now, and hands the rest to the
    /// readahead threads. Stops at the first piece already cached or when memory is short.
    pub(super) fn readahead(&self, w: RaWindow, sync: Option<u64>) -> Result<()> {
        let mut sync_guard = None;
        let mut batch = Vec::new();
        self.insert_window(w, sync, |g, holds_sync| {
            if holds_sync {
                sync_guard = Some(g);
            } else {
                self.push_read(g, None, &mut batch);
            }
        })?;
        // The window but the folio the caller waits for, as one batch (the kernel's plug);
        // the caller's folio is read here meanwhile, so its errors come back typed.
        self.submit_reads(batch);
        match sync_guard {
            Some(mut g) => self.read_into(&mut g),
            None => Ok(()),
        }
    }

    /// Inserts a locked folio for every piece of `w` not cached (large folios where the
    /// alignment allows), giving each to `each` with whether it holds page `sync`. Stops at the
    /// first piece already cached or when memory is short (the piece holding `sync` is
    /// allocated even then, one page at a time if a smaller folio is in the way).
    pub(super) fn insert_window<'a>(
        &'a self,
        w: RaWindow,
        sync: Option<u64>,
        mut each: impl FnMut(FolioGuard<'a>, bool),
    ) -> Result<()> {
        let _inv = self.invalidate_shared();
        let end_page = self.size().div_ceil(PAGE_SIZE);
        let end = (w.start + w.size).min(end_page);
        if let Some(s) = sync {
            if s >= end_page {
                return Ok(());
            }
        }
        let max_order = self.cache.config.max_folio_order;
        let mut pieces = Pieces::new(w.start, end.saturating_sub(w.start), max_order);
        while let Some((idx, order)) = pieces.pop() {
            let holds_sync = sync.is_some_and(|s| s >= idx && s < idx + (1u64 << order));
            let g = match self.insert_new(idx, order, holds_sync)? {
                Some(g) => g,
                None if holds_sync && order > 0 => {
                    // A smaller folio is in the way: read the piece one page at a time.
                    pieces.push_front_range(idx, 1u64 << order, 0);
                    continue;
                }
                // Already cached (the stream has caught up with data read before), or memory
                // is short: readahead stops here, as the kernel's does.
                None => break,
            };
            let covered = g.index()..g.index() + g.nr_frames() as u64;
            if g.nr_frames() < (1usize << order) {
                // The allocator gave a smaller folio: queue the rest of the piece, cut into the
                // largest aligned pieces again.
                pieces.push_front_range(covered.end, idx + (1u64 << order) - covered.end, order);
            }
            if w.marker.is_some_and(|m| covered.contains(&m)) {
                g.set_readahead();
            }
            let holds = sync.is_some_and(|s| covered.contains(&s));
            each(g, holds);
        }
        Ok(())
    }

    pub(crate) fn read_at(&self, ra: &Readahead, offset: u64, buf: &mut [u8]) -> Result<usize> {
        check_range(offset, buf.len())?;
        let size = self.size();
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let end = size.min(offset + buf.len() as u64);
        let last = (end - 1) >> FRAME_SHIFT;
        // A read that starts in the folio this thread's previous read through this handle ended
        // in does not mark it again (the kernel's `filemap_read`): reading a large folio in
        // small pieces is one use.
        let prev_end = ra.swap_read_end(end);
        let mut pos = offset;
        while pos < end {
            let index = pos >> FRAME_SHIFT;
            let f = match self.get_uptodate(ra, index, last - index + 1) {
                Ok(Some(f)) => f,
                // The file was cut under us: a short read up to where it was.
                Ok(None) => break,
                // The store was cut behind our back: a short read of what was there, if any.
                Err(e) if pos > offset && e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e),
            };
            if pos != offset || !continues_in(prev_end, &f) {
                self.mark_accessed(&f);
            }
            let start = f.index() << FRAME_SHIFT;
            let off = (pos - start) as usize;
            let n = (f.size() - off).min((end - pos) as usize);
            let at = (pos - offset) as usize;
            copy_out(&f, off, &mut buf[at..at + n]);
            pos += n as u64;
        }
        ra.note_read(offset >> FRAME_SHIFT, last);
        Ok((pos.min(end) - offset) as usize)
    }

    /// A zero-copy reader holds `f` and is about to borrow its bytes: if spaces map it,
    /// write-protect their ptes (`folio_mkclean`), so that no write through a mapping is in
    /// flight or can start without a write fault — and a write fault that sees this reference
    /// gives the spaces a copy instead (see `mm/file.rs`, and `Folio::reader_sees_mapping` for
    /// why the two sides see each other).
    pub(super) fn stable_for_reader(&self, f: &FolioRef<'_>) {
        if !f.reader_sees_mapping() {
            return;
        }
        let g = f.clone().lock_with(self.policy());
        if g.is_mapped() {
            self.mkclean_folio(&g);
        }
    }

    /// [`Mapping::read_folio_unprotected`] for a zero-copy reader: the bytes stay put while
    /// the reference is held (see [`Mapping::stable_for_reader`]).
    #[doc(alias = "filemap_read_folio")]
    pub(crate) fn read_folio(&self, ra: &Readahead, index: u64) -> Result<FolioRef<'_>> {
        let f = self.read_folio_unprotected(ra, index)?;
        self.stable_for_reader(&f);
        Ok(f)
    }

    /// The up-to-date folio holding page `index`, read if needed, marked accessed; spaces that
    /// map it writable may still write it (a fault's own lookup).
    pub(crate) fn read_folio_unprotected(
        &self,
        ra: &Readahead,
        index: u64,
    ) -> Result<FolioRef<'_>> {
        let past_end = || {
            FilemapError::Store(StoreError::Io {
                op: Op::Read,
                offset: index.saturating_mul(PAGE_SIZE),
                kind: std::io::ErrorKind::UnexpectedEof,
                errno: None,
            })
        };
        if index >= self.size().div_ceil(PAGE_SIZE) {
            return Err(past_end());
        }
        let f = self.get_uptodate(ra, index, 1)?.ok_or_else(past_end)?;
        self.mark_accessed(&f);
        ra.note_read(index, index);
        Ok(f)
    }
}
