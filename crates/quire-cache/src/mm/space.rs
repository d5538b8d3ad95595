//! An address space (`mm_struct` with one mapping of anonymous memory): a page table, faults,
//! fork with copy-on-write, mlock, mprotect, munmap and exit. See the
//! [parent module](super) for the folio's counters, the lock order and the access rules.
//!
//! # Faults (`handle_mm_fault`)
//!
//! | pte | read | write |
//! |---|---|---|
//! | none | zeros, nothing allocated (the zero page) | a new zeroed folio, mapped writable (`do_anonymous_page`) |
//! | swap entry | the folio from the swap cache, or read into it; mapped read-only (`do_swap_page`) | the same, mapped writable if the space is now its only user (its slot given up when swap is over half full) |
//! | present, read-only | — | sole mapper: made writable in place (`cow_reuses`); else copied (`cow_copies`) — `do_wp_page` |
//! | present, writable | — | — |
//!
//! Allocation and swap I/O happen without the page-table lock; the fault then takes the lock
//! again and starts over from the entry, which may have changed meanwhile.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::file::{SharedPage, Vma};
use super::pte::{self, MLOCK, NOWRITE, PRESENT, SWAP, WRITE, YOUNG};
use super::rmap::AnonVma;
use super::{mapcount, AnonInner, MmError, MAX_MAPCOUNT};
use crate::filemap::{CachedFile, PAGE_SIZE};
use crate::mem::dirtybit::DirtyBitKind;
use crate::mem::folio::{Folio, FolioRef, FRAME_SIZE};
use crate::stats::Event;

/// What a page's entry holds, as [`Space::page_state`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageState {
    /// Never touched, or unmapped: reads as zeros.
    None,
    /// In memory.
    Present {
        /// Writable without a fault (the space is the folio's only mapper).
        writable: bool,
    },
    /// In swap.
    Swapped,
}

/// The largest space, in pages (2^36 pages: 256 TiB).
pub const MAX_SPACE_PAGES: u64 = 1 << 36;

static ZERO_PAGE: [u8; FRAME_SIZE] = [0; FRAME_SIZE];

/// An address space of anonymous memory; see the [module documentation](crate::mm). Dropping it is
/// the process's exit: every page is unmapped (`exit_mmap`).
pub struct Space {
    inner: Arc<SpaceInner>,
}

/// A space's state, shared with the reverse map's walkers.
pub(crate) struct SpaceInner {
    pub(crate) mm: Arc<AnonInner>,
    pub(crate) family: Arc<AnonVma>,
    /// The page table, behind the page-table lock (`ptl`).
    pub(crate) pt: Mutex<Box<[u64]>>,
    /// The file mappings, by first page (`mmap_lock`): read by faults for their whole length,
    /// written by `map_file`, `munmap` and exit. Pages outside them are anonymous.
    vmas: RwLock<Vec<Vma>>,
    pages: u64,
}

impl SpaceInner {
    /// The page table, locked.
    pub(crate) fn lock_pt(&self) -> MutexGuard<'_, Box<[u64]>> {
        self.pt.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn vmas(&self) -> RwLockReadGuard<'_, Vec<Vma>> {
        self.vmas.read().unwrap_or_else(|e| e.into_inner())
    }

    fn vmas_mut(&self) -> RwLockWriteGuard<'_, Vec<Vma>> {
        self.vmas.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// The file mapping of `vmas` that covers `page`.
fn vma_of(vmas: &[Vma], page: u64) -> Option<&Vma> {
    vmas.iter().find(|v| v.range().contains(&page))
}

/// What a fault wants.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
    /// Present the page, allocating it if it is none, without breaking copy-on-write (mlock).
    Populate,
}

/// What `do_wp_page` needs before it can finish.
enum Wp<'p> {
    Done,
    NeedFolio,
    WaitLocked(FolioRef<'p>),
}

impl Space {
    pub(crate) fn new(mm: &Arc<AnonInner>, pages: u64) -> Result<Space, MmError> {
        if pages == 0 || pages > MAX_SPACE_PAGES {
            return Err(MmError::OutOfRange {
                page: pages,
                pages: MAX_SPACE_PAGES,
            });
        }
        let id = mm.next_family.fetch_add(1, Ordering::Relaxed);
        let family = Arc::new(AnonVma {
            id,
            spaces: Mutex::new(Vec::new()),
        });
        mm.families
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Arc::downgrade(&family));
        Ok(Space::join(
            mm,
            family,
            vec![0; pages as usize].into_boxed_slice(),
        ))
    }

    fn join(mm: &Arc<AnonInner>, family: Arc<AnonVma>, table: Box<[u64]>) -> Space {
        let inner = Arc::new(SpaceInner {
            mm: mm.clone(),
            pages: table.len() as u64,
            family: family.clone(),
            pt: Mutex::new(table),
            vmas: RwLock::new(Vec::new()),
        });
        family
            .spaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&inner));
        mm.spaces.fetch_add(1, Ordering::Relaxed);
        Space { inner }
    }

    /// Pages in the space.
    pub fn pages(&self) -> u64 {
        self.inner.pages
    }

    fn pt(&self) -> MutexGuard<'_, Box<[u64]>> {
        self.inner.lock_pt()
    }

    fn check(&self, range: &Range<u64>) -> Result<(), MmError> {
        if range.start > range.end || range.end > self.inner.pages {
            return Err(MmError::OutOfRange {
                page: range
                    .end
                    .max(range.start)
                    .saturating_sub(1)
                    .max(range.start),
                pages: self.inner.pages,
            });
        }
        Ok(())
    }

    /// Runs `f` on page `page`'s bytes, read-only, faulting the page in first (a page never
    /// touched reads as zeros and stays unallocated). `f` runs under the page-table lock: it
    /// must not call back into this space.
    ///
    /// A page of a file mapping is shared memory: it is refused with [`MmError::SharedPage`]
    /// (use [`Space::with_shared_page`]).
    pub fn with_page<R>(&self, page: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R, MmError> {
        self.fault(page, Access::Read, false, |_, ptr| {
            // SAFETY: a frame of a present pte (or the zero page), readable for FRAME_SIZE bytes;
            // nobody writes it while we hold the page-table lock: a writable pte elsewhere
            // cannot exist while ours maps it (module documentation of `mm`).
            f(unsafe { std::slice::from_raw_parts(ptr, FRAME_SIZE) })
        })
    }

    /// Runs `f` on page `page`'s bytes, writable, faulting it in for writing first (allocating,
    /// swapping in, or copying on write). The writes are recorded by the frame's dirty bit, not
    /// by software (except under the software dirty bit, which this marks). `f` runs under the
    /// page-table lock: it must not call back into this space. A page of a file mapping is
    /// refused with [`MmError::SharedPage`] (use [`Space::with_shared_page`]).
    pub fn with_page_mut<R>(
        &self,
        page: u64,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, MmError> {
        self.fault(page, Access::Write, false, |_, ptr| {
            // SAFETY: a frame of a present, writable pte: the space is the folio's only mapper
            // and we hold its page-table lock, so no other borrow of these bytes exists.
            f(unsafe { std::slice::from_raw_parts_mut(ptr, FRAME_SIZE) })
        })
    }

    /// Runs `f` on page `page` as shared memory ([`SharedPage`]), faulting it in first —
    /// for writing if `write` (allocating, swapping in, copying on write, or dirtying a file
    /// page). Works on anonymous and file pages alike; the only access to a page of a file
    /// mapping, which other spaces may be writing at the same time. `f` runs under the
    /// page-table lock: it must not call back into this space or the page cache.
    pub fn with_shared_page<R>(
        &self,
        page: u64,
        write: bool,
        f: impl FnOnce(&SharedPage<'_>) -> R,
    ) -> Result<R, MmError> {
        let access = if write { Access::Write } else { Access::Read };
        self.fault(page, access, true, |_, ptr| {
            // SAFETY: a frame of a present pte (writable if `write`), or the zero page for a
            // read, which stays mapped while the page-table lock is held, for the closure only.
            f(&unsafe { SharedPage::new(ptr, write) })
        })
    }

    /// Copies `buf.len()` bytes at byte address `addr` into `buf` (anonymous or file pages).
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MmError> {
        self.bytes_op(addr, buf.len(), |page, off, done, n| {
            self.with_shared_page(page, false, |p| p.read(off, &mut buf[done..done + n]))?
        })
    }

    /// Copies `data` to byte address `addr` (anonymous or file pages).
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), MmError> {
        self.bytes_op(addr, data.len(), |page, off, done, n| {
            self.with_shared_page(page, true, |p| p.write(off, &data[done..done + n]))?
        })
    }

    fn bytes_op(
        &self,
        addr: u64,
        len: usize,
        mut op: impl FnMut(u64, usize, usize, usize) -> Result<(), MmError>,
    ) -> Result<(), MmError> {
        let size = self.inner.pages * FRAME_SIZE as u64;
        let end = addr.checked_add(len as u64).filter(|&e| e <= size);
        if end.is_none() {
            return Err(MmError::OutOfRange {
                page: addr.saturating_add(len as u64).saturating_sub(1) / FRAME_SIZE as u64,
                pages: self.inner.pages,
            });
        }
        let mut done = 0;
        while done < len {
            let at = addr + done as u64;
            let off = (at % FRAME_SIZE as u64) as usize;
            let n = (FRAME_SIZE - off).min(len - done);
            op(at / FRAME_SIZE as u64, off, done, n)?;
            done += n;
        }
        Ok(())
    }

    /// What page `page`'s entry holds.
    pub fn page_state(&self, page: u64) -> Result<PageState, MmError> {
        self.check(&(page..page + 1))?;
        let e = self.pt()[page as usize];
        Ok(if e & PRESENT != 0 {
            PageState::Present {
                writable: e & WRITE != 0,
            }
        } else if e & SWAP != 0 {
            PageState::Swapped
        } else {
            PageState::None
        })
    }

    /// The fault loop (see the module documentation); runs `f` under the page-table lock with
    /// the page present as `access` needs, and the frame's address.
    fn fault<R>(
        &self,
        page: u64,
        access: Access,
        shared_ok: bool,
        f: impl FnOnce(&mut [u64], *mut u8) -> R,
    ) -> Result<R, MmError> {
        self.check(&(page..page + 1))?;
        let mm = &*self.inner.mm;
        let pool = mm.cache.pool();
        let i = page as usize;
        let write = access == Access::Write;
        let mut spare: Option<FolioRef<'_>> = None;
        // The mappings (`mmap_lock`, read), held from the first pass that is more than a hit on
        // an anonymous pte to the end of the fault. A hit needs no lock but the page table's:
        // `map_file` and `munmap` zap a range's ptes under it before the range changes hands.
        let mut vmas = None;
        loop {
            let mut pt = self.pt();
            let e = pt[i];
            if write && e & NOWRITE != 0 {
                return Err(MmError::ReadOnly { page });
            }
            let anon_hit = e & PRESENT != 0
                && (!write || e & WRITE != 0)
                && pool
                    .folio(pte::target(e) as usize)
                    .is_some_and(Folio::is_anon);
            if vmas.is_none() && !anon_hit {
                drop(pt);
                let held = self.inner.vmas();
                if let Some(vma) = vma_of(&held, page) {
                    if !shared_ok {
                        return Err(MmError::SharedPage { page });
                    }
                    return self.file_fault(vma, page, access, f);
                }
                vmas = Some(held);
                continue;
            }
            if e & PRESENT != 0 {
                if !write || e & WRITE != 0 {
                    pt[i] |= YOUNG;
                    let pfn = pte::target(e) as usize;
                    if write && mm.dirty.kind() == DirtyBitKind::Software {
                        mm.dirty.mark_written(pfn, 1);
                    }
                    return Ok(f(&mut pt, pool.frame_ptr(pfn)));
                }
                match self.wp_page(&mut pt, i, &mut spare) {
                    Wp::Done => {}
                    Wp::NeedFolio => {
                        drop(pt);
                        spare = Some(mm.alloc_folio()?);
                    }
                    Wp::WaitLocked(r) => {
                        drop(pt);
                        r.wait_locked();
                    }
                }
                continue;
            }
            if e & SWAP != 0 {
                drop(pt);
                self.swap_page(i, e, write)?;
                continue;
            }
            if access == Access::Read {
                return Ok(f(&mut pt, ZERO_PAGE.as_ptr().cast_mut()));
            }
            let Some(new) = spare.take() else {
                drop(pt);
                spare = Some(mm.alloc_folio()?);
                continue;
            };
            let new = self.new_anon(new, i, |bytes| bytes.fill(0));
            self.map_new(&mut pt, i, new);
        }
    }

    /// A fault on page `page` of the file mapping `vma` (see [`super::file`]); runs `f` under
    /// the page-table lock with the page present as `access` needs.
    fn file_fault<R>(
        &self,
        vma: &Vma,
        page: u64,
        access: Access,
        f: impl FnOnce(&mut [u64], *mut u8) -> R,
    ) -> Result<R, MmError> {
        let mm = &*self.inner.mm;
        let pool = mm.cache.pool();
        let mapping = vma.file.mapping();
        let i = page as usize;
        let index = vma.file_index(page);
        let write = access == Access::Write;
        let past_eof = || MmError::PastEof {
            page,
            file_pages: mapping.size().div_ceil(PAGE_SIZE),
        };
        loop {
            {
                let mut pt = self.pt();
                let e = pt[i];
                if write && (e & NOWRITE != 0 || !vma.rmap.writable) {
                    return Err(MmError::ReadOnly { page });
                }
                if e & PRESENT != 0 && (!write || e & WRITE != 0) {
                    pt[i] |= YOUNG;
                    let head = pool
                        .folio(pte::target(e) as usize)
                        .expect("a pte maps a pool frame");
                    let pfn = pte::target(e) as usize + (index - head.index()) as usize;
                    if write && mm.dirty.kind() == DirtyBitKind::Software {
                        mm.dirty.mark_written(pfn, 1);
                    }
                    return Ok(f(&mut pt, pool.frame_ptr(pfn)));
                }
            }
            // Throttled before it dirties a folio, holding no lock (`balance_dirty_pages`).
            if write {
                mapping.balance_dirty().map_err(MmError::File)?;
            }
            let r = match vma.file.fault_folio(index) {
                Ok(r) => r,
                Err(_) if index >= mapping.size().div_ceil(PAGE_SIZE) => return Err(past_eof()),
                Err(e) => return Err(MmError::File(e)),
            };
            let g = r.lock_with(mapping.policy());
            if !mapping.still_mapped(&g, g.index()) {
                // Truncated, replaced or evicted meanwhile: look again.
                continue;
            }
            if index >= mapping.size().div_ceil(PAGE_SIZE) {
                return Err(past_eof());
            }
            let head = g.pfn();
            // Whether this fault makes a new pte (its mapcount unit is taken before the pte).
            let mut counted = false;
            if write {
                // Stable pages: the bytes under write-back must not change (`page_mkwrite`).
                g.wait_writeback_with(mapping.policy());
                // Stable bytes for zero-copy readers: a pte becomes writable only while nobody
                // else holds the folio. The mapcount goes up first and the count is read with a
                // read-modify-write; a zero-copy lookup takes its reference with one and reads
                // the mapcount (`Mapping::stable_for_reader`), so one of the two sees the other.
                let present_here = {
                    let pt = self.pt();
                    pt[i] & PRESENT != 0 && pte::target(pt[i]) == head as u64
                };
                if !present_here {
                    if mapcount(g.flags()) >= MAX_MAPCOUNT {
                        return Err(MmError::TooManyMappings { page });
                    }
                    mm.add_file_rmap(&g);
                    counted = true;
                }
                if super::rmap::writer_sees_readers(&g, counted) {
                    if counted {
                        // No pte was made: take the unit back (no write can have gone through).
                        g.sub_owner_bits(super::MAPCOUNT_ONE);
                    }
                    // A reader holds the folio: the spaces get a copy in its place, the reader
                    // keeps these bytes (`modify` unmaps every space first).
                    match mapping.modify(g, |_| {}) {
                        Ok(_) => continue,
                        Err(e) => return Err(MmError::File(e)),
                    }
                }
                mapping.mark_dirty(&g);
                // Reference-free readers of the page cache must retry a copy that overlaps
                // this space's writes.
                g.seq_bump();
                let size = mapping.size();
                if (index + 1) * PAGE_SIZE > size {
                    // A write past the end in the page holding it: zeroed before the file grows.
                    mapping
                        .eof_tail_written
                        .store(true, std::sync::atomic::Ordering::Release);
                }
            }
            let mut pt = self.pt();
            let mut e = pt[i];
            if e & PRESENT != 0 {
                if pte::target(e) == head as u64 {
                    // Mapped by a racing fault of this space: only the write permission is
                    // ours to add (the folio is dirty and locked, so write-back cannot clean it
                    // behind us).
                    if counted {
                        g.sub_owner_bits(super::MAPCOUNT_ONE);
                    }
                    if write {
                        pt[i] |= WRITE;
                    }
                    continue;
                }
                // A pte left on a folio the index no longer holds would be a bug of the
                // reverse map; rather than loop on it, unmap it (its writes transfer) and map
                // what the index holds.
                debug_assert!(false, "page {page} mapped a folio its file no longer holds");
                let old = pool
                    .folio(pte::target(e) as usize)
                    .expect("a pte maps a pool frame");
                pt[i] = pte::none(e);
                mm.pte_gone(old, e, false);
                e = pt[i];
            }
            if write && !counted {
                // Our pte went since the reader check counted it: check again.
                continue;
            }
            if !counted {
                if mapcount(g.flags()) >= MAX_MAPCOUNT {
                    return Err(MmError::TooManyMappings { page });
                }
                mm.add_file_rmap(&g);
            }
            pt[i] = pte::present(e, head, write);
            if e & MLOCK != 0 {
                mm.mlock_folio(&g);
            }
            // The pte takes a reference of its own.
            let _ = pool
                .try_get(g.folio())
                .expect("the guard holds a reference")
                .into_raw();
        }
    }

    /// Maps pages `file_pages` of `file` at pages `at ..` of this space (`mmap` with
    /// `MAP_SHARED | MAP_FIXED`): reads and writes of those pages are the file's bytes, in its
    /// page cache, and writes reach the file when it is written back (`fsync`, the flusher,
    /// reclaim) or unmapped. `writable` allows writes (`PROT_WRITE`). What the range held
    /// before (anonymous pages) is unmapped. The mapping keeps the file open until it is
    /// unmapped or the space exits.
    ///
    /// Fails with [`MmError::PastEof`] if `file_pages` reaches past the end of the file,
    /// [`MmError::OutOfRange`] if the pages do not fit in the space, and [`MmError::Overlap`]
    /// if they overlap another file mapping (unmap it first).
    #[doc(alias = "mmap")]
    pub fn map_file(
        &self,
        file: &CachedFile,
        file_pages: Range<u64>,
        at: u64,
        writable: bool,
    ) -> Result<(), MmError> {
        if !Arc::ptr_eq(&file.mapping().cache, &self.inner.mm.cache) {
            return Err(MmError::OtherCache);
        }
        if file_pages.start >= file_pages.end {
            return Err(MmError::EmptyRange {
                start: file_pages.start,
                end: file_pages.end,
            });
        }
        let pages = file_pages.end - file_pages.start;
        let end = at.checked_add(pages).ok_or(MmError::OutOfRange {
            page: u64::MAX,
            pages: self.inner.pages,
        })?;
        self.check(&(at..end))?;
        let file_end = file.len().div_ceil(PAGE_SIZE);
        if file_pages.end > file_end {
            return Err(MmError::PastEof {
                page: file_pages.end - 1,
                file_pages: file_end,
            });
        }
        let mut vmas = self.inner.vmas_mut();
        if let Some(v) = vmas
            .iter()
            .find(|v| v.range().start < end && at < v.range().end)
        {
            return Err(MmError::Overlap {
                page: v.range().start.max(at),
            });
        }
        {
            let mut pt = self.pt();
            zap_table(&self.inner.mm, &mut pt[at as usize..end as usize]);
        }
        let vma = Vma::new(
            &self.inner,
            Arc::new(file.reopen()),
            at,
            pages,
            file_pages.start,
            writable,
        );
        vmas.push(vma);
        vmas.sort_by_key(|v| v.rmap.start);
        Ok(())
    }

    /// Makes `r` (just allocated) an anonymous folio of this family at page `i`, its bytes
    /// filled by `fill`; dirty (it has no swap copy). Returns it locked-free, counted.
    fn new_anon<'p>(
        &self,
        r: FolioRef<'p>,
        i: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> FolioRef<'p> {
        let mm = &*self.inner.mm;
        let mut g = r.lock();
        fill(g.bytes_mut().expect("a new folio is not up to date"));
        g.mark_uptodate();
        g.set_anon();
        g.set_dirty();
        g.set_index(i as u64);
        g.set_mapping(self.inner.family.id);
        if mm.dirty.kind() == DirtyBitKind::Software {
            // The fill wrote it; the hardware bit saw that by itself.
            mm.dirty.mark_written(g.pfn(), 1);
        }
        mm.frames.fetch_add(1, Ordering::Relaxed);
        mm.counters().count(Event::AnonFaults);
        g.unlock()
    }

    /// Maps the new folio `new` writable at page `i` (the table locked): the pte takes its
    /// reference; it goes on the LRU lists.
    fn map_new(&self, pt: &mut [u64], i: usize, new: FolioRef<'_>) {
        let mm = &*self.inner.mm;
        let pool = mm.cache.pool();
        mm.add_rmap(&new);
        let e = pt[i];
        pt[i] = pte::present(e, new.pfn(), true);
        if e & MLOCK != 0 {
            mm.mlock_folio(&new);
        }
        mm.cache.vm().lru_add(pool, &new);
        let _ = new.into_raw();
    }

    /// A write to the read-only present page `i` (`do_wp_page`).
    fn wp_page<'p>(&'p self, pt: &mut [u64], i: usize, spare: &mut Option<FolioRef<'p>>) -> Wp<'p> {
        let mm = &*self.inner.mm;
        let pool = mm.cache.pool();
        let e = pt[i];
        let old: &Folio = pool
            .folio(pte::target(e) as usize)
            .expect("a pte maps a pool frame");
        let flags = old.flags();
        if flags & crate::mem::folio::SWAPCACHE == 0 {
            if mapcount(flags) == 1 {
                pt[i] |= WRITE;
                mm.counters().count(Event::CowReuses);
                return Wp::Done;
            }
        } else {
            let r = pool.try_get(old).expect("a mapped folio has references");
            match r.try_lock() {
                Ok(g) => {
                    let slot = g.private() as u64;
                    let swap = mm.swap.as_ref().expect("in the swap cache");
                    if g.is_swapcache() && mapcount(g.flags()) == 1 && swap.count(slot) == 0 {
                        if swap.is_half_full() {
                            mm.free_swap(&g);
                        }
                        pt[i] |= WRITE;
                        mm.counters().count(Event::CowReuses);
                        return Wp::Done;
                    }
                }
                Err(r) => return Wp::WaitLocked(r),
            }
        }
        let Some(new) = spare.take() else {
            return Wp::NeedFolio;
        };
        // SAFETY: `old` is mapped read-only by this space (and read-only everywhere: a writable
        // pte would make its space the only mapper), so nobody writes it while we hold our
        // page-table lock, and its frame stays allocated while our pte holds a reference.
        let src = unsafe {
            std::slice::from_raw_parts(pool.frame_ptr(pte::target(e) as usize), FRAME_SIZE)
        };
        let new = self.new_anon(new, i, |b| b.copy_from_slice(src));
        mm.counters().count(Event::CowCopies);
        pt[i] = pte::none(e);
        self.map_new(pt, i, new);
        mm.pte_gone(old, e, false);
        Wp::Done
    }

    /// A fault on the swap entry `e` of page `i` (`do_swap_page`); returns with the page mapped,
    /// or with the entry changed by somebody else (the caller looks again).
    fn swap_page(&self, i: usize, e: u64, write: bool) -> Result<(), MmError> {
        let mm = &*self.inner.mm;
        let slot = pte::target(e);
        let Some(r) = mm.swapin(slot, self.inner.family.id, i as u64, i as u64)? else {
            return Ok(());
        };
        let g = r.lock();
        let mut pt = self.pt();
        if pt[i] != e || !g.is_swapcache() || g.private() as u64 != slot {
            return Ok(());
        }
        if mapcount(g.flags()) >= MAX_MAPCOUNT {
            return Err(MmError::TooManyMappings { page: i as u64 });
        }
        let swap = mm
            .swap
            .as_ref()
            .expect("a swap entry implies a swap device");
        mm.add_rmap(&g);
        swap.put(slot);
        let exclusive = mapcount(g.flags()) == 1 && swap.count(slot) == 0;
        let writable = write && exclusive;
        if writable && swap.is_half_full() {
            mm.free_swap(&g);
        }
        pt[i] = pte::present(e, g.pfn(), writable);
        if e & MLOCK != 0 {
            mm.mlock_folio(&g);
        }
        drop(pt);
        // The pte owns the reference the lookup took.
        let _ = g.unlock().into_raw();
        Ok(())
    }

    /// A child space sharing every page copy-on-write (`fork`, `dup_mmap`): present pages are
    /// mapped read-only in both, swap entries are duplicated. File mappings are shared: the
    /// child maps the same file pages, and faults them in when it touches them. Locks are not
    /// inherited.
    #[doc(alias = "dup_mmap")]
    pub fn fork(&self) -> Result<Space, MmError> {
        let mm = &self.inner.mm;
        let pool = mm.cache.pool();
        let vmas = self.inner.vmas();
        let mut pt = self.pt();
        let mut child = vec![0u64; pt.len()].into_boxed_slice();
        for i in 0..pt.len() {
            let e = pt[i];
            let keep = e & NOWRITE;
            if vma_of(&vmas, i as u64).is_some() {
                // A shared file page: the child faults it in from the page cache.
                child[i] = keep;
            } else if e & PRESENT != 0 {
                let f = pool
                    .folio(pte::target(e) as usize)
                    .expect("a pte maps a pool frame");
                if mapcount(f.flags()) >= MAX_MAPCOUNT {
                    zap_table(mm, &mut child);
                    return Err(MmError::TooManyMappings { page: i as u64 });
                }
                let r = pool.try_get(f).expect("a mapped folio has references");
                mm.add_rmap(f);
                let _ = r.into_raw();
                pt[i] = e & !WRITE;
                child[i] = pte::present(keep, pte::target(e) as usize, false) & !YOUNG;
            } else if e & SWAP != 0 {
                let slot = pte::target(e);
                if !mm.swap.as_ref().is_some_and(|s| s.dup(slot)) {
                    zap_table(mm, &mut child);
                    return Err(MmError::TooManyMappings { page: i as u64 });
                }
                child[i] = pte::swap(keep, slot);
            } else {
                child[i] = keep;
            }
        }
        // Joined while the parent's table is locked, so a reverse-map walk that finds a folio
        // mapped by the child also finds the child.
        let child = Space::join(mm, self.inner.family.clone(), child);
        drop(pt);
        {
            let mut child_vmas = child.inner.vmas_mut();
            for v in vmas.iter() {
                child_vmas.push(Vma::new(
                    &child.inner,
                    v.file.clone(),
                    v.rmap.start,
                    v.rmap.pages,
                    v.rmap.file_page,
                    v.rmap.writable,
                ));
            }
        }
        Ok(child)
    }

    /// Locks `range` in memory (`mlock`): every page is brought in (allocated if never touched,
    /// swapped in if out) and its folio moves to the unevictable list; reclaim never unmaps it
    /// from this space.
    #[doc(alias = "mlock_fixup")]
    pub fn mlock(&self, range: Range<u64>) -> Result<(), MmError> {
        self.check(&range)?;
        let mm = &*self.inner.mm;
        let pool = mm.cache.pool();
        for page in range {
            self.fault(page, Access::Populate, true, |pt, _| {
                let i = page as usize;
                let e = pt[i];
                if e & MLOCK == 0 {
                    pt[i] = e | MLOCK;
                    let f = pool.folio(pte::target(e) as usize).expect("populated");
                    mm.mlock_folio(f);
                }
            })?;
        }
        Ok(())
    }

    /// Unlocks `range` (`munlock`): folios no space maps locked any more go back to the
    /// evictable lists.
    #[doc(alias = "munlock_fixup")]
    pub fn munlock(&self, range: Range<u64>) -> Result<(), MmError> {
        self.check(&range)?;
        let mm = &*self.inner.mm;
        let pool = mm.cache.pool();
        let mut pt = self.pt();
        for i in range {
            let e = pt[i as usize];
            if e & MLOCK != 0 {
                pt[i as usize] = e & !MLOCK;
                if e & PRESENT != 0 {
                    mm.munlock_folio(pool.folio(pte::target(e) as usize).expect("present"));
                }
            }
        }
        Ok(())
    }

    /// Makes `range` read-only, or writable again (`mprotect`). Writes to a read-only page fail
    /// with [`MmError::ReadOnly`].
    #[doc(alias = "mprotect_fixup")]
    pub fn mprotect(&self, range: Range<u64>, writable: bool) -> Result<(), MmError> {
        self.check(&range)?;
        let mut pt = self.pt();
        for i in range {
            let e = &mut pt[i as usize];
            if writable {
                *e &= !NOWRITE;
            } else {
                *e = (*e | NOWRITE) & !WRITE;
            }
        }
        Ok(())
    }

    /// Unmaps `range` (`munmap`, `zap_pte_range`): its pages read as zeros again, unlocked and
    /// writable.
    ///
    /// File mappings inside the range go; those it covers in part keep the rest (the writes
    /// their unmapped pages recorded become dirty in the file).
    #[doc(alias = "do_vmi_munmap")]
    pub fn munmap(&self, range: Range<u64>) -> Result<(), MmError> {
        self.check(&range)?;
        let mut vmas = self.inner.vmas_mut();
        // The pieces left are in the files' reverse maps before the ptes go, and the old
        // mappings leave them after: a walker always finds every pte that maps its folio.
        let mut gone = Vec::new();
        let mut kept = Vec::new();
        for v in vmas.drain(..) {
            let r = v.range();
            if r.end <= range.start || range.end <= r.start {
                kept.push(v);
                continue;
            }
            for piece in [
                r.start..range.start.max(r.start),
                range.end.min(r.end)..r.end,
            ] {
                if piece.start < piece.end {
                    kept.push(Vma::new(
                        &self.inner,
                        v.file.clone(),
                        piece.start,
                        piece.end - piece.start,
                        v.file_index(piece.start),
                        v.rmap.writable,
                    ));
                }
            }
            gone.push(v);
        }
        {
            let mut pt = self.pt();
            let r = range.start as usize..range.end as usize;
            zap_table(&self.inner.mm, &mut pt[r]);
        }
        for v in &gone {
            v.unlink();
        }
        kept.sort_by_key(|v| v.rmap.start);
        *vmas = kept;
        // The file handles of the mappings that went may be their files' last: closing a file
        // writes it back, which must not hold up this space's faults.
        drop(vmas);
        drop(gone);
        Ok(())
    }

    /// Reclaims the pages of `range` now (`MADV_PAGEOUT`): each present folio goes through
    /// reclaim as if it had reached the inactive tail, references ignored — into swap, unless a
    /// space maps it locked or somebody holds it. Returns the folios freed.
    #[doc(alias = "madvise_pageout")]
    pub fn pageout(&self, range: Range<u64>) -> Result<usize, MmError> {
        self.check(&range)?;
        let mm = &*self.inner.mm;
        let pool = mm.cache.pool();
        // Folios faulted in lately may still wait in an LRU batch (`lru_add_drain`).
        mm.cache.vm().drain_all(pool);
        let mut freed = 0;
        for i in range {
            let r = {
                let pt = self.pt();
                let e = pt[i as usize];
                if e & PRESENT == 0 {
                    continue;
                }
                let f = pool.folio(pte::target(e) as usize).expect("present");
                pool.try_get(f).expect("a mapped folio has references")
            };
            if mm.cache.vm().reclaim_anon_folio(pool, &*mm.cache, r) {
                freed += 1;
            }
        }
        Ok(freed)
    }
}

/// Unmaps every entry of `table` (the caller holds its lock, or owns it): the dirty-bit
/// transfer on unmap for each present page's folio, and a swap count put for each swap entry.
fn zap_table(mm: &AnonInner, table: &mut [u64]) {
    let pool = mm.cache.pool();
    for e in table.iter_mut() {
        let old = *e;
        *e = 0;
        if old & PRESENT != 0 {
            let f = pool
                .folio(pte::target(old) as usize)
                .expect("a pte maps a pool frame");
            mm.pte_gone(f, old, false);
        } else if old & SWAP != 0 {
            mm.swap_entry_gone(pte::target(old));
        }
    }
}

impl Drop for Space {
    /// The process exits (`exit_mmap`): every page is unmapped, and the space leaves its family.
    fn drop(&mut self) {
        let mm = &self.inner.mm;
        let vmas = std::mem::take(&mut *self.inner.vmas_mut());
        {
            let mut pt = self.inner.pt.lock().unwrap_or_else(|e| e.into_inner());
            zap_table(mm, &mut pt);
        }
        // After the zap: every pte that mapped a file folio has gone, with the writes its frame
        // recorded; the files may now close.
        for v in &vmas {
            v.unlink();
        }
        drop(vmas);
        let me = Arc::as_ptr(&self.inner);
        let mut spaces = self
            .inner
            .family
            .spaces
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        spaces.retain(|w| !std::ptr::eq(w.as_ptr(), me));
        if spaces.is_empty() {
            mm.families
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&self.inner.family.id);
        }
        drop(spaces);
        mm.spaces.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Space {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Space")
            .field("pages", &self.inner.pages)
            .field("family", &self.inner.family.id)
            .finish()
    }
}
