//! Write-back: writing dirty folios to the store, waiting for it (`fsync`), the background
//! flusher's pass, and throttling writers when dirty memory passes the limit (the kernel's
//! `balance_dirty_pages`).
//!
//! A folio under write-back is clean (its DIRTY flag and mark were cleared when the write-back
//! started) and has WRITEBACK set; the folio lock is not held during the I/O. Nobody removes a
//! folio from its index while WRITEBACK is set — truncation waits for it, reclaim and
//! invalidation skip it, and writers wait for it before changing the bytes — so the bytes are
//! stable and the folio is still in the index when the write ends. If the write fails, the folio
//! is made dirty again before WRITEBACK is cleared (rule 6 of docs/RULES.md) and the error is recorded
//! in the file's error sequence.
//!
//! A folio whose write-back fails [`WRITEBACK_MAX_TRIES`](super::WRITEBACK_MAX_TRIES) times in a
//! row is parked instead of being made dirty for the flusher again:
//!
//! | state | flags | index mark | lists | who writes it |
//! |---|---|---|---|---|
//! | dirty | DIRTY, `private` = failures so far | `DIRTY_MARK` | evictable | the flusher, reclaim's requests, `fsync` |
//! | under write-back | WRITEBACK (and `WB_FAILED` if parked) | `WRITEBACK_MARK` | as before | (in flight) |
//! | parked | DIRTY, `WB_FAILED`, ERROR, `private` = the max | `FAILED_MARK` | unevictable | only an explicit write-back (`wait`) |
//!
//! A write into a parked folio re-arms it (dirty again, its count at 0); an explicit write-back
//! that fails leaves it parked (and reports the error again); one that succeeds clears the lot.

use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::mapping::Mapping;
use super::{
    Cache, FilemapError, Result, DIRTY_MARK, FAILED_MARK, WRITEBACK_MARK, WRITEBACK_MAX_TRIES,
};
use crate::bio::{Bio, BioEnd, BioOp};
use crate::mem::folio::{Folio, FolioGuard, FolioRef, DIRTY, ERROR, FRAME_SHIFT, WB_FAILED};
use crate::stats::{count, Event};
use crate::store::Store;
use crate::trace::slow_path;
use crate::xarray::Entry;

impl Mapping {
    /// Writes the dirty folios of pages `first ..= last` to the store. With `wait`, also waits
    /// for folios it cannot lock at once and for every write-back in the range to finish (a
    /// data-integrity write-back), and also writes the folios parked after too many failures
    /// (`FAILED_MARK`); without, it skips busy and parked folios (the flusher). Returns the
    /// first error; every error is also recorded for `fsync`.
    #[doc(alias = "filemap_fdatawrite_range")]
    pub(crate) fn write_back_range(&self, first: u64, last: u64, wait: bool) -> Result<()> {
        let policy = self.policy();
        let mut targets = Vec::new();
        let mut collect = |mark| {
            self.pages.for_each(first, last, Some(mark), |e| {
                if !e.entry.is_value() {
                    targets.push(e.index);
                }
                std::ops::ControlFlow::Continue(())
            })
        };
        collect(DIRTY_MARK);
        if wait && self.pages.marked(FAILED_MARK) {
            collect(FAILED_MARK);
            // In file order, for the merging below (a folio may carry both marks a moment).
            targets.sort_unstable();
            targets.dedup();
        }
        if let Some(&last) = targets.last() {
            self.grow_store_for(last);
        }
        // Folios written through the I/O engine: submitted in batches of up to `WB_BATCH`
        // (the kernel's plug around `write_cache_pages`); their ends report to `inflight`.
        let inflight: Arc<WbInFlight> = Arc::default();
        // Requests keep the mapping alive; none can be made while it is being dropped.
        let me = self.this();
        let mut batch = Vec::new();
        let mut merging: Option<WbMerge> = None;
        let mut first_err = None;
        // Whether any request went to the engine (see the end).
        let submitted = std::cell::Cell::new(false);
        // Before this call sleeps (for a folio's lock or write-back), what it has batched goes
        // to the engine, as the kernel flushes a task's plug when it schedules: each request
        // holds a share of `store_len`, and the folio it waits for may be held by a writer
        // waiting for a write-back that waits for `store_len` (`write_out` cutting the store).
        let unplug = |merging: &mut Option<WbMerge>, batch: &mut Vec<Bio>| {
            if let Some(m) = merging.take() {
                batch.push(self.merged_bio(m, &me, &inflight));
            }
            if !batch.is_empty() {
                submitted.set(true);
                self.cache.bio.submit(std::mem::take(batch));
            }
        };
        for index in targets {
            let Some(f) = self.find_get(index) else {
                continue;
            };
            let g = match f.try_lock_with(policy) {
                Ok(g) => g,
                Err(_) if !wait => continue,
                Err(f) => {
                    unplug(&mut merging, &mut batch);
                    f.lock_with(policy)
                }
            };
            // One load for both tests: parked folios are written only when asked for (`wait`).
            let flags = g.flags();
            if !self.still_mapped(&g, index)
                || flags & DIRTY == 0
                || (!wait && flags & WB_FAILED != 0)
            {
                continue;
            }
            if g.is_writeback() {
                if !wait {
                    continue;
                }
                unplug(&mut merging, &mut batch);
                g.wait_writeback_with(policy);
            }
            match self.write_folio_piece(g, me.as_ref()) {
                Ok(Some(piece)) => {
                    // Adjacent folios go out as one request (the kernel's bio of several
                    // segments), up to `bio::MAX_MERGED_BYTES` and `WB_MERGE_PIECES`.
                    if let Some(m) = &mut merging {
                        if m.takes(&piece) {
                            m.add(piece);
                            continue;
                        }
                    }
                    if let Some(m) = merging.replace(WbMerge::new(piece)) {
                        batch.push(self.merged_bio(m, &me, &inflight));
                        if batch.len() >= WB_BATCH {
                            submitted.set(true);
                            self.cache.bio.submit(std::mem::take(&mut batch));
                        }
                    }
                }
                Ok(None) => {}
                Err(g) => {
                    // Written here (the page holding the end of the file): what was batched
                    // goes first, as this write may wait for every write-back of the file.
                    unplug(&mut merging, &mut batch);
                    if let Err(e) = self.write_folio(g) {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        if let Some(m) = merging.take() {
            batch.push(self.merged_bio(m, &me, &inflight));
        }
        if wait && !submitted.get() && batch.len() == 1 {
            // The whole write-back is one request (adjacent dirty pages: a log's append) that
            // this call would sleep on: it runs here, sparing the engine's thread and the two
            // wake-ups (the `fsync` after each commit of a database's log).
            self.cache.bio.run_here(batch.pop().expect("one request"));
        } else {
            self.cache.bio.submit(batch);
        }
        // This call's requests end before it returns, with or without `wait`: the flusher's
        // passes then pace writers at the dirty limit by write-back actually done. Folios a
        // failed merged request did not reach are tried again one by one.
        inflight.wait();
        loop {
            let retry = std::mem::take(&mut *inflight.retry.lock().unwrap());
            if retry.is_empty() {
                break;
            }
            let bios = retry
                .into_iter()
                .map(|p| self.merged_bio(WbMerge::new(p), &me, &inflight))
                .collect();
            self.cache.bio.submit(bios);
            inflight.wait();
        }
        if wait {
            let mut busy = Vec::new();
            self.pages
                .for_each(first, last, Some(super::WRITEBACK_MARK), |e| {
                    busy.push(e.index);
                    std::ops::ControlFlow::Continue(())
                });
            for index in busy {
                if let Some(f) = self.find_get(index) {
                    f.wait_writeback_with(policy);
                }
            }
        }
        {
            // Under the timestamp's lock, so a writer that marks a folio dirty now (mark first,
            // then the timestamp) cannot have its timestamp cleared.
            let mut at = self.dirtied_at.lock().unwrap();
            if !self.pages.marked(DIRTY_MARK) {
                *at = None;
            }
        }
        if first_err.is_none() {
            first_err = inflight.first_err.lock().unwrap().take();
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Before a write-back whose last dirty page is `last`: extends the store to cover the
    /// file up to that page (never past the file's length), if it is shorter. Writes that
    /// extend a file are serialised by file systems (ext4 waits for each extending `O_DIRECT`
    /// write before the next may start, under the inode lock); within the length, the batch's
    /// writes are in flight together. The pages in between read as zeros from the store as
    /// they do from the cache (they lie past `store_size`). Best effort: on an error the
    /// writes extend the store themselves.
    ///
    /// The file's length is read under `store_len`, held exclusively: `set_len` publishes a
    /// new length before it takes `store_len` to cut the store, so a length read here is
    /// either the new one or one a cut that follows will undo. Read before taking it (as this
    /// once did), a cut made meanwhile — length, folios and store, while this thread waited
    /// for `store_len` or was preempted — was undone here: the store grew back to the old
    /// length, and a new cache read the file at that length. A closed file's store is left
    /// alone (a flusher pass that found the file before its last handle went may get here
    /// after `close`, when another cache may own the store).
    fn grow_store_for(&self, last: u64) {
        let wanted = (last + 1) << FRAME_SHIFT;
        if wanted.min(self.size()) <= self.store_size.load(Ordering::Acquire) {
            return;
        }
        let _excl = self.store_len.exclusive();
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        let end = wanted.min(self.size());
        if self.store.len().is_ok_and(|now| now < end) {
            let _ = self.store.set_len(end);
        }
    }

    /// Writes one locked folio to the store if it is dirty, here. The lock is dropped for the
    /// I/O.
    pub(crate) fn write_folio(&self, g: FolioGuard<'_>) -> Result<()> {
        let Some(f) = self.begin_writeback(g) else {
            return Ok(());
        };
        let result = self.write_out(&f);
        self.end_writeback(&f, result)
    }

    /// Starts the write-back of the locked folio `g` through the I/O engine: the piece to
    /// write (`Ok(Some)`), nothing to write (`Ok(None)`: not dirty), or `Err(g)` when the
    /// folio must be written with [`Mapping::write_folio`] instead: it holds the end of the file
    /// (an aligned store then gets a whole page and is cut back, under `store_len` held
    /// exclusively) or lies past it.
    fn write_folio_piece<'p>(
        &self,
        g: FolioGuard<'p>,
        me: Option<&Arc<Mapping>>,
    ) -> std::result::Result<Option<WbPiece>, FolioGuard<'p>> {
        let start = g.index() << FRAME_SHIFT;
        let len = g.size();
        if start + len as u64 > self.size() || me.is_none() {
            return Err(g);
        }
        let Some(f) = self.begin_writeback(g) else {
            return Ok(None);
        };
        // The frames of a folio under write-back: writers wait for it and nobody removes it
        // until it ends, so the bytes stay put while the engine reads them.
        let buf = f.pool().frame_ptr(f.pool().pfn_of_desc(&f));
        Ok(Some(WbPiece {
            start,
            buf,
            len,
            folio: f.into_raw(),
        }))
    }

    /// The request that writes the folios of `m`, counted in `inflight`.
    fn merged_bio(&self, m: WbMerge, me: &Option<Arc<Mapping>>, inflight: &Arc<WbInFlight>) -> Bio {
        // Shared until the request ends, as a write here holds it (see `store_len`).
        self.store_len.share();
        *inflight.pending.lock().unwrap() += 1;
        let mut pieces = m.pieces.into_iter();
        let first = pieces.next().expect("a merge has a piece");
        let (more, rest): (Vec<_>, Vec<_>) = pieces.map(|p| ((p.buf, p.len), p.folio)).unzip();
        let mut folios = vec![first.folio];
        folios.extend(rest);
        Bio {
            op: BioOp::Write,
            offset: first.start,
            buf: first.buf,
            len: first.len,
            more,
            end: Box::new(WriteEnd {
                mapping: me
                    .clone()
                    .expect("pieces are made only with the mapping alive"),
                folios,
                inflight: inflight.clone(),
            }),
        }
    }

    /// The start of a folio's write-back: takes the writes the spaces recorded, moves it from
    /// dirty to write-back (flags, marks, counts) and unlocks it. `None` if it was not dirty.
    fn begin_writeback<'p>(&self, g: FolioGuard<'p>) -> Option<FolioRef<'p>> {
        let index = g.index();
        let frames = g.nr_frames();
        if g.is_mapped() && g.is_dirty() {
            // Write-protect the spaces' ptes and take the writes the frames recorded, before
            // DIRTY goes: the bytes written out are then the last ones, and stay put until the
            // write-back ends (a write fault waits for it), after which a write re-dirties.
            self.mkclean_folio(&g);
        }
        if !g.clear_dirty() {
            return None;
        }
        // Counted under write-back before it leaves the dirty count, so the dirty limit never
        // sees these frames in neither.
        self.cache.writeback.fetch_add(frames, Ordering::Relaxed);
        self.cache.dirty.fetch_sub(frames, Ordering::Relaxed);
        g.start_writeback();
        {
            // WRITEBACK before DIRTY goes (the kernel's `__folio_start_writeback` order): an
            // `fsync` walks the DIRTY marks without the lock and then the WRITEBACK marks, and
            // one that finds DIRTY already gone must find WRITEBACK, or it returns before this
            // write-back reaches the store (the marks are release stores, read with acquire).
            let mut xa = self.pages.lock();
            xa.set_mark(index, WRITEBACK_MARK);
            xa.clear_mark(index, DIRTY_MARK);
            if g.is_wb_failed() {
                // A parked folio retried by an explicit write-back.
                xa.clear_mark(index, FAILED_MARK);
            }
        }
        Some(g.unlock())
    }

    /// The end of a folio's write-back, which wrote its bytes with `result`: on an error the
    /// folio is dirty again (parked, after [`WRITEBACK_MAX_TRIES`] failures in a row) and the
    /// error recorded for every handle; then WRITEBACK is cleared and its waiters woken.
    #[doc(alias = "folio_end_writeback")]
    fn end_writeback(&self, f: &FolioRef<'_>, result: crate::store::Result<()>) -> Result<()> {
        let index = f.index();
        let frames = f.nr_frames();
        match &result {
            Ok(()) => {
                count(Event::Writeback);
                self.wb_failing.store(0, Ordering::Relaxed);
                // ERROR is set by every failure: only a folio whose write-back failed before
                // pays for more than this load.
                if f.flags() & ERROR != 0 {
                    self.writeback_recovered(f);
                }
            }
            Err(e) => {
                self.record_error(e);
                self.wb_failing
                    .store(i32::from(super::errno_of(e)), Ordering::Relaxed);
                f.set_error();
                // Keep the data: dirty again, before write-back ends (nobody removes a folio
                // under write-back, and writers wait for it, so no lock is needed).
                if !f.set_dirty() {
                    self.cache.dirty.fetch_add(frames, Ordering::Relaxed);
                }
                if self.writeback_failed(f) {
                    self.set_mark_if_mapped(f, index, FAILED_MARK, true);
                } else {
                    self.set_mark_if_mapped(f, index, DIRTY_MARK, true);
                    self.dirtied_at
                        .lock()
                        .unwrap()
                        .get_or_insert_with(Instant::now);
                }
            }
        }
        self.set_mark_if_mapped(f, index, WRITEBACK_MARK, false);
        self.cache.writeback.fetch_sub(frames, Ordering::Relaxed);
        // Reclaim was waiting for this write-back: the folio goes to the inactive tail, to be
        // reclaimed next (unless the write failed and it is dirty again).
        if f.clear_reclaim() {
            self.cache.vm.rotate_reclaimable(self.pool(), f);
        }
        f.end_writeback_with(self.policy());
        result.map_err(Into::into)
    }

    /// Counts a failed write-back of `f` (under write-back, dirty again): its failures in a row
    /// go up by one in its `private` word (up to [`WRITEBACK_MAX_TRIES`]); at the bound it is
    /// parked — `WB_FAILED`, on the unevictable list — if it was not already. Returns whether
    /// it is parked (the caller marks it `FAILED_MARK` rather than `DIRTY_MARK`).
    fn writeback_failed(&self, f: &Folio) -> bool {
        let vm = &self.cache.vm;
        vm.counters.count(Event::WritebackErrors);
        let max = WRITEBACK_MAX_TRIES as usize;
        let tries = f.private().saturating_add(1).min(max);
        f.set_private(tries);
        if tries < max {
            return false;
        }
        if !f.set_wb_failed() {
            vm.counters.count(Event::WritebackRetriesExhausted);
            slow_path!(
                warn,
                "write-back retries exhausted: the folio stays dirty, parked until rewritten or synced",
                file = self.id,
                index = f.index(),
                tries = tries
            );
            vm.sync_parked(self.pool(), f);
        }
        true
    }

    /// A write-back of `f` succeeded after one failed (ERROR set): its count of failures starts
    /// over and, if it was parked, it goes back on the evictable lists.
    fn writeback_recovered(&self, f: &Folio) {
        f.clear_error();
        f.set_private(0);
        if f.clear_wb_failed() {
            self.cache.vm.sync_parked(self.pool(), f);
        }
    }

    /// A write into the locked or write-protected folio `f`, dirty, at `index`: if it was
    /// parked, it is re-armed — its count at 0, `DIRTY_MARK` again instead of `FAILED_MARK`,
    /// back on the evictable lists — so the new data gets background write-back's tries.
    /// `f` may be a copy that replaced a parked folio in the index (and took over its marks):
    /// then only the marks change.
    pub(crate) fn rearm_writeback(&self, f: &Folio, index: u64) {
        let was_parked = f.clear_wb_failed();
        if was_parked {
            f.set_private(0);
        }
        {
            let mut xa = self.pages.lock();
            let here = f.mapping() == self.id
                && matches!(xa.load(index), Some(Entry::Pointer(p)) if ptr::eq(p, f));
            if !here || !xa.get_mark(index, FAILED_MARK) {
                if was_parked {
                    drop(xa);
                    self.cache.vm.sync_parked(self.pool(), f);
                }
                return;
            }
            xa.clear_mark(index, FAILED_MARK);
            xa.set_mark(index, DIRTY_MARK);
        }
        self.dirtied_at
            .lock()
            .unwrap()
            .get_or_insert_with(Instant::now);
        if was_parked {
            self.cache.vm.sync_parked(self.pool(), f);
        }
    }

    /// Sets or clears `mark` at `index` if the slot still holds `folio`, under the index lock.
    fn set_mark_if_mapped(&self, folio: &Folio, index: u64, mark: crate::xarray::Mark, on: bool) {
        if folio.mapping() != self.id {
            return;
        }
        let mut xa = self.pages.lock();
        if matches!(xa.load(index), Some(Entry::Pointer(p)) if ptr::eq(p, folio)) {
            if on {
                xa.set_mark(index, mark);
            } else {
                xa.clear_mark(index, mark);
            }
        }
    }

    /// The I/O of a write-back: the folio's bytes up to the end of the file. A store that needs
    /// aligned requests gets whole pages, and is then cut back to the file's length.
    fn write_out(&self, f: &FolioRef<'_>) -> crate::store::Result<()> {
        let start = f.index() << FRAME_SHIFT;
        let size = self.size();
        if start >= size {
            return Ok(());
        }
        let bytes = f.bytes().expect("a dirty folio is up to date");
        let len = (size - start).min(bytes.len() as u64) as usize;
        let align = self.store.alignment().max(1);
        let out = len.div_ceil(align).saturating_mul(align).min(bytes.len());
        {
            let _shared = self.store_len.shared();
            self.store.write_all_at(start, &bytes[..out])?;
            // The store now holds the file's data up to here (a page past the end is cut back
            // to no less below). Raised under `store_len`, so that a cut (which holds it
            // exclusively) lowers it after, never before.
            self.store_size
                .fetch_max(start + len as u64, std::sync::atomic::Ordering::AcqRel);
        }
        if out > len {
            // The page past the end went out whole; cut the store back to the file's length,
            // read with no other write-back in flight (one that extended the file and the
            // store after a read of the length here would otherwise be cut off).
            let _excl = self.store_len.exclusive();
            self.store.set_len(self.size().max(start + len as u64))?;
        }
        Ok(())
    }

    /// Whether data of this file has been dirty for longer than the cache's expiry.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        self.dirtied_at
            .lock()
            .unwrap()
            .is_some_and(|t| now.duration_since(t) >= self.cache.config.dirty_expire)
    }
}

/// Folios a write-back submits to the I/O engine at a time.
const WB_BATCH: usize = 64;

/// The most folios one merged write-back request takes.
const WB_MERGE_PIECES: usize = 64;

/// A folio under write-back, to be written: its place in the file, its frames, its reference.
struct WbPiece {
    start: u64,
    buf: *mut u8,
    len: usize,
    folio: NonNull<Folio>,
}

// SAFETY: the frames and the reference travel with the value (frame memory of a folio under
// write-back, which nobody writes; `Folio` is `Sync`).
unsafe impl Send for WbPiece {}

/// Adjacent folios being gathered into one write request.
struct WbMerge {
    pieces: Vec<WbPiece>,
    end: u64,
    bytes: usize,
}

impl WbMerge {
    fn new(p: WbPiece) -> WbMerge {
        WbMerge {
            end: p.start + p.len as u64,
            bytes: p.len,
            pieces: vec![p],
        }
    }

    /// Whether `p` follows this request's bytes in the file and fits in it.
    fn takes(&self, p: &WbPiece) -> bool {
        p.start == self.end
            && self.bytes + p.len <= crate::bio::MAX_MERGED_BYTES
            && self.pieces.len() < WB_MERGE_PIECES
    }

    fn add(&mut self, p: WbPiece) {
        self.end += p.len as u64;
        self.bytes += p.len;
        self.pieces.push(p);
    }
}

/// The end of a write of folios submitted to the I/O engine: owns the folios' references (they
/// are under write-back, unlocked), a share of `store_len`, and the mapping while the write is
/// in flight.
struct WriteEnd {
    mapping: Arc<Mapping>,
    /// The folios, in file order (taken when the write ends).
    folios: Vec<NonNull<Folio>>,
    /// The write-back call that submitted it.
    inflight: Arc<WbInFlight>,
}

// SAFETY: the references travel with the value; `Folio` is `Sync`.
unsafe impl Send for WriteEnd {}

impl WriteEnd {
    /// Ends the write-back of the folios after a request that moved `done` bytes and ended
    /// with `res`, then tells the write-back call. The folios the request wrote whole
    /// succeeded; on an error, the folio it stopped in failed (dirty again, the error
    /// recorded), and the folios after it go back to the write-back call still under
    /// write-back, to be tried one by one (`WbInFlight::retry`) — so one bad page never keeps
    /// its neighbours from the store, as without merging.
    fn finish(&mut self, done: usize, res: crate::store::Result<()>) {
        let m = self.mapping.clone();
        let folios = std::mem::take(&mut self.folios);
        if folios.is_empty() {
            return;
        }
        // SAFETY: each reference was given up with `into_raw` on a folio of this mapping's pool
        // when the request was made, and is taken back once (`folios` is now empty).
        let refs: Vec<FolioRef<'_>> = folios
            .into_iter()
            .map(|raw| unsafe { m.pool().ref_from_raw(raw) })
            .collect();
        // How many folios the request wrote whole.
        let mut whole = 0;
        let mut at = 0;
        for f in &refs {
            at += f.size();
            if at > done {
                break;
            }
            whole += 1;
        }
        if res.is_ok() {
            whole = refs.len();
        }
        if whole > 0 {
            // The store holds those folios' bytes now: raised before their write-back ends, so
            // a cut that waited for it reads the raised length.
            let last = &refs[whole - 1];
            let end = (last.index() << FRAME_SHIFT) + last.size() as u64;
            m.store_size.fetch_max(end, Ordering::AcqRel);
        }
        m.store.io_fd_written();
        m.store_len.unshare();
        let mut r = Ok(());
        for (i, f) in refs.into_iter().enumerate() {
            let outcome = if i < whole {
                Ok(())
            } else if i == whole {
                res.clone()
            } else {
                // Tried again alone by the write-back call, still under write-back.
                let buf = f.pool().frame_ptr(f.pool().pfn_of_desc(&f));
                self.inflight.retry.lock().unwrap().push(WbPiece {
                    start: f.index() << FRAME_SHIFT,
                    buf,
                    len: f.size(),
                    folio: f.into_raw(),
                });
                continue;
            };
            let one = m.end_writeback(&f, outcome);
            if r.is_ok() {
                r = one;
            }
            // The reference goes before the waiter hears: a write-back that returns leaves no
            // reference of its own behind.
            drop(f);
        }
        self.inflight.end(r);
    }
}

impl BioEnd for WriteEnd {
    fn store(&self) -> &dyn Store {
        &*self.mapping.store
    }

    fn end_io(mut self: Box<Self>, done: usize, res: crate::store::Result<()>) {
        self.finish(done, res);
    }
}

impl Drop for WriteEnd {
    /// A write dropped unrun (a store that panicked, an engine that stopped): the data stays,
    /// dirty again, and the error is recorded.
    fn drop(&mut self) {
        let offset = self.folios.first().map_or(0, |f| {
            // SAFETY: a descriptor of the mapping's pool, alive as long as the pool.
            unsafe { f.as_ref() }.index() << FRAME_SHIFT
        });
        self.finish(
            0,
            Err(crate::store::StoreError::Io {
                op: crate::store::Op::Write,
                offset,
                kind: std::io::ErrorKind::Other,
                errno: Some(libc::EIO),
            }),
        );
    }
}

/// The requests one write-back call has in flight, and the first error among them.
#[derive(Default)]
struct WbInFlight {
    pending: Mutex<usize>,
    /// Folios of failed merged requests to try again one by one (see `WriteEnd::finish`).
    retry: Mutex<Vec<WbPiece>>,
    ended: Condvar,
    first_err: Mutex<Option<FilemapError>>,
}

impl WbInFlight {
    /// One request ended with `res`.
    fn end(&self, res: Result<()>) {
        if let Err(e) = res {
            self.first_err.lock().unwrap().get_or_insert(e);
        }
        let mut n = self.pending.lock().unwrap();
        *n -= 1;
        if *n == 0 {
            self.ended.notify_all();
        }
    }

    /// Waits until every request ended.
    fn wait(&self) {
        let mut n = self.pending.lock().unwrap();
        while *n > 0 {
            n = self.ended.wait(n).unwrap();
        }
    }
}

/// Orders the store's length changes against write-back ([`Mapping::store_len`]): a lock with
/// shared and exclusive holders that is not tied to a thread, since a write submitted to the
/// I/O engine holds its share from submission until its completion runs, on another thread.
///
/// | state | meaning |
/// |---|---|
/// | `shared` | writes to the store in flight (each holds one share) |
/// | `exclusive` | a length change is being made from the file's length |
///
/// Shares are taken while no exclusive holder is in; an exclusive holder waits for the
/// shares to go. There is no writer preference: a thread may hold shares (of requests it has
/// queued and not submitted yet) and take another, so a waiting exclusive holder must not block
/// new shares, or that thread and it would wait for each other.
#[derive(Default)]
pub(crate) struct StoreLenLock {
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

/// A share of a [`StoreLenLock`] held by the thread that took it.
pub(crate) struct SharedLen<'a>(&'a StoreLenLock);

impl Drop for SharedLen<'_> {
    fn drop(&mut self) {
        self.0.unshare();
    }
}

/// The exclusive hold of a [`StoreLenLock`].
pub(crate) struct ExclusiveLen<'a>(&'a StoreLenLock);

impl Drop for ExclusiveLen<'_> {
    fn drop(&mut self) {
        self.0.state.lock().unwrap().1 = false;
        self.0.changed.notify_all();
    }
}

impl StoreLenLock {
    /// Takes a share, to be given back with [`StoreLenLock::unshare`] (by any thread).
    pub(crate) fn share(&self) {
        let mut st = self.state.lock().unwrap();
        while st.1 {
            st = self.changed.wait(st).unwrap();
        }
        st.0 += 1;
    }

    /// Gives back a share.
    pub(crate) fn unshare(&self) {
        let mut st = self.state.lock().unwrap();
        st.0 -= 1;
        if st.0 == 0 {
            drop(st);
            self.changed.notify_all();
        }
    }

    /// A share for the calling thread's scope.
    pub(crate) fn shared(&self) -> SharedLen<'_> {
        self.share();
        SharedLen(self)
    }

    /// Waits until nobody holds a share or the lock, and takes it exclusively.
    pub(crate) fn exclusive(&self) -> ExclusiveLen<'_> {
        let mut st = self.state.lock().unwrap();
        while st.1 || st.0 > 0 {
            st = self.changed.wait(st).unwrap();
        }
        st.1 = true;
        ExclusiveLen(self)
    }
}

impl Mapping {
    /// Called by writers before they dirty a folio (the kernel's `balance_dirty_pages`): wakes
    /// the flusher above the background threshold; at the dirty limit, waits for it to make
    /// progress (up to two passes of write-back). If dirty memory is still at the limit after
    /// that and the last write-back of this file failed, the writer gets
    /// [`FilemapError::DirtyLimit`] instead of dirtying more: data that cannot be written never
    /// fills the cache, and clean reads of every file keep their memory. Writers of files that
    /// write back fine go on after the wait, so a failing file's stuck data does not stop them.
    #[doc(alias = "balance_dirty_pages")]
    pub(crate) fn balance_dirty(&self) -> Result<()> {
        let cache = &self.cache;
        // Both thresholds count frames under write-back too (the kernel's NR_FILE_DIRTY +
        // NR_WRITEBACK): a write-back in flight may fail and leave its folio dirty again — and
        // with the I/O engine a whole file's dirty data can be in flight at once, leaving the
        // dirty count alone near zero.
        let held = || cache.dirty.load(Ordering::Relaxed) + cache.writeback.load(Ordering::Relaxed);
        if held() <= cache.dirty_background_frames() {
            return Ok(());
        }
        cache.workers.kick_flusher();
        let limit = cache.dirty_limit_frames();
        if held() < limit {
            return Ok(());
        }
        slow_path!(
            debug,
            "dirty throttling: waiting for write-back",
            file = self.id,
            held_frames = held(),
            limit_frames = limit
        );
        cache.workers.throttle(|| held() < limit);
        let errno = self.wb_failing.load(Ordering::Relaxed);
        if errno != 0 && held() >= limit {
            slow_path!(
                warn,
                "write refused at the dirty limit: the file's write-back fails",
                file = self.id,
                errno = errno
            );
            return Err(FilemapError::DirtyLimit { errno });
        }
        Ok(())
    }
}

/// One pass of the flusher: writes back every file if dirty memory is above the background
/// threshold or reclaim asked (`all`), and otherwise the files whose dirty data has expired.
/// Returns whether dirty memory is still above the threshold and the pass made progress (so
/// another pass should follow).
#[doc(alias = "wb_writeback")]
pub(crate) fn flush_pass(cache: &Cache, all: bool) -> bool {
    let before = cache.dirty.load(Ordering::Relaxed);
    let over = all || before > cache.dirty_background_frames();
    let now = Instant::now();
    for m in cache.mappings() {
        if over || m.expired(now) {
            let _ = m.write_back_range(0, u64::MAX, false);
        }
    }
    let after = cache.dirty.load(Ordering::Relaxed);
    after > cache.dirty_background_frames() && after < before
}
