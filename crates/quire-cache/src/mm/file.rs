//! File mappings (`mmap(MAP_SHARED)` of a cached file): a range of a space's pages that shows a
//! range of a file's pages, its faults, and its place in the file's reverse map (`i_mmap`, see
//! [`crate::filemap::immap`]).
//!
//! # A mapped file folio
//!
//! A pte of a file mapping holds the *head* frame of the folio that caches the page (a folio
//! may span several pages; the page's own frame is the head plus the page's offset in it), one
//! reference on the folio and one unit of its mapcount — the same owner bits as anonymous
//! folios (see the [parent module](super)). The folio stays the page cache's: in the file's
//! index, on the file LRU lists, `mapping` the file's id.
//!
//! # Faults (`filemap_fault`, `do_shared_fault`, `wp_page_shared`)
//!
//! Without the page-table lock: the folio is looked up or read through the mapping's own handle
//! (its readahead state), and locked. Under the folio lock: still in the index and inside the
//! file (else the page is past the end of a truncated file: [`MmError::PastEof`]); for a write,
//! the dirty throttle has run (before the lock), write-back of the folio has ended (stable
//! pages) and the folio is marked dirty (`page_mkwrite` and `folio_mark_dirty`). Then, under the
//! page-table lock, the pte is made (read-only for a read, so that the first write faults and
//! dirties the folio) or made writable. The first mapping of a folio clears its frames' dirty
//! bit: what the page cache itself wrote there (a read from the store, a `write_at`) is already
//! in `DIRTY` or in the store, so from then on the bit records only the spaces' writes.
//!
//! Every pte of a file folio is made with the folio locked, so a holder of the lock that unmaps
//! it (truncation, a `write_at` replacing it, write-back's `folio_mkclean`, reclaim) knows no
//! new mapping appears behind its back.
//!
//! # Writes and write-back
//!
//! A write through a writable pte is recorded only by the frame's dirty bit. The folio is
//! already `DIRTY` (the write fault marked it), so write-back finds it; before it writes, it
//! write-protects every pte and tests the bit (`folio_mkclean`), so the next write faults and
//! dirties the folio again. When the last pte goes (munmap, exit, truncation, reclaim) the bit
//! is tested and, if set, the folio made dirty (file folios are always tested: their content
//! lives on after the unmap).
//!
//! # The bytes are shared memory
//!
//! Several spaces may map one folio writable at once, each writing under its own page-table
//! lock, so a file page's bytes are never lent as `&[u8]` or `&mut [u8]`:
//! [`Space::with_page`](super::Space::with_page) refuses file pages ([`MmError::SharedPage`]),
//! and [`Space::with_shared_page`](super::Space::with_shared_page) lends a [`SharedPage`], which
//! copies in and out with raw pointer copies and offers atomic 8-byte loads and stores, as
//! `vm-memory` treats guest memory. `CachedFile::read_at` copies a folio's bytes with a raw copy
//! too (what is there at the moment).
//!
//! # Zero-copy readers keep stable bytes
//!
//! The kernel cannot promise a reader of a page that a process maps writable stable bytes;
//! quire keeps its promise (`FolioRef::bytes` does not change while borrowed) with two steps
//! that see each other. `CachedFile::read_folio` takes its reference (an acquire
//! read-modify-write of the count) and reads the mapcount: if spaces map the folio it
//! write-protects their ptes under the folio lock (`folio_mkclean`), so no write through a
//! mapping is in flight or can start without a fault. A write fault raises the mapcount and then
//! reads the count with a read-modify-write of its own: references beyond the index's, the ptes'
//! and its own mean a reader (or a moment's holder such as reclaim), and then the spaces get a
//! copy in the folio's place (`Mapping::modify`, as a `write_at` would) and the reader keeps the
//! old folio. The two read-modify-writes of the count are ordered; whichever is second sees the
//! other side (`tests/loom_mm.rs`, which fails if the fault reads the count with a plain load).
//! A lookup that holds no lock (`FileReader::read_folio`) hands a mapped folio to the full path.

use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use super::pte::{self, MLOCK, PRESENT, WRITE, YOUNG};
use super::space::SpaceInner;
use super::{AnonInner, MmError};
use crate::filemap::immap::{FileVma, RmapOp, RmapResult};
use crate::filemap::CachedFile;
use crate::mem::folio::{Folio, FRAME_SIZE};

/// One file mapping of a space, as its file's reverse map sees it (`vm_area_struct` on
/// `i_mmap`). Immutable: a partial munmap replaces it with the pieces left.
pub(crate) struct FileVmaInner {
    pub(crate) space: Weak<SpaceInner>,
    /// First space page.
    pub(crate) start: u64,
    /// Pages mapped.
    pub(crate) pages: u64,
    /// The file page shown at `start`.
    pub(crate) file_page: u64,
    /// Writes allowed (`PROT_WRITE` on a shared mapping).
    pub(crate) writable: bool,
}

/// A file mapping as its space keeps it: the reverse-map record and the handle on the file it
/// reads through (the mapping keeps the file open, as a `vm_area_struct` holds its `file`).
#[derive(Clone)]
pub(crate) struct Vma {
    pub(crate) rmap: Arc<FileVmaInner>,
    pub(crate) file: Arc<CachedFile>,
}

impl Vma {
    pub(crate) fn new(
        space: &Arc<SpaceInner>,
        file: Arc<CachedFile>,
        start: u64,
        pages: u64,
        file_page: u64,
        writable: bool,
    ) -> Vma {
        let rmap = Arc::new(FileVmaInner {
            space: Arc::downgrade(space),
            start,
            pages,
            file_page,
            writable,
        });
        file.mapping().i_mmap_add(rmap.clone());
        Vma { rmap, file }
    }

    /// Takes the mapping out of its file's reverse map.
    pub(crate) fn unlink(&self) {
        let dynamic: Arc<dyn FileVma> = self.rmap.clone();
        self.file.mapping().i_mmap_remove(&dynamic);
    }

    /// The space pages it covers.
    pub(crate) fn range(&self) -> Range<u64> {
        self.rmap.start..self.rmap.start + self.rmap.pages
    }

    /// The file page shown at space page `page` (inside the mapping).
    pub(crate) fn file_index(&self, page: u64) -> u64 {
        self.rmap.file_page + (page - self.rmap.start)
    }
}

impl FileVma for FileVmaInner {
    fn file_pages(&self) -> Range<u64> {
        self.file_page..self.file_page + self.pages
    }

    fn rmap_one(&self, f: &Folio, op: RmapOp) -> RmapResult {
        let Some(space) = self.space.upgrade() else {
            return RmapResult::Done(0);
        };
        let mm = &*space.mm;
        let head = mm.pfn(f) as u64;
        let first = f.index().max(self.file_page);
        let end = (f.index() + f.nr_frames() as u64).min(self.file_page + self.pages);
        if first >= end {
            return RmapResult::Done(0);
        }
        let mut pt = match op {
            RmapOp::Unmap { reclaim: false } | RmapOp::Mkclean => space.lock_pt(),
            RmapOp::Unmap { reclaim: true } => match space.pt.try_lock() {
                Ok(pt) => pt,
                Err(_) => return RmapResult::Busy,
            },
            RmapOp::Referenced => match space.pt.try_lock() {
                Ok(pt) => pt,
                Err(_) => return RmapResult::Done(0),
            },
        };
        let mut n = 0;
        for index in first..end {
            let i = (self.start + (index - self.file_page)) as usize;
            let Some(e) = pt.get(i).copied() else { break };
            if e & PRESENT == 0 || pte::target(e) != head {
                continue;
            }
            match op {
                RmapOp::Referenced => {
                    if e & YOUNG != 0 {
                        pt[i] = e & !YOUNG;
                        n += 1;
                    }
                }
                RmapOp::Mkclean => {
                    if e & WRITE != 0 {
                        pt[i] = e & !WRITE;
                        n += 1;
                    }
                }
                RmapOp::Unmap { reclaim } => {
                    if reclaim && e & MLOCK != 0 {
                        mm.sync_unevictable(f);
                        return RmapResult::Mlocked;
                    }
                    pt[i] = pte::none(e);
                    // The caller's lock holds a reference: the pte's is never the last.
                    mm.pte_gone(f, e, reclaim);
                    n += 1;
                }
            }
        }
        RmapResult::Done(n)
    }

    fn test_and_clear_dirty(&self, f: &Folio) -> Option<bool> {
        self.space.upgrade().map(|space| space.mm.test_dirty(f))
    }
}

impl AnonInner {
    /// A new pte will map the locked file folio `f`: one more mapping; the first one clears the
    /// frames' dirty bit (see the module documentation), unless a last unmap is still testing
    /// it.
    pub(crate) fn add_file_rmap(&self, f: &Folio) {
        if super::rmap::first_map_rmw(f) {
            self.dirty.clear(self.pfn(f), f.nr_frames());
        }
    }
}

/// A page's bytes as shared memory, lent by [`Space::with_shared_page`](super::Space::with_shared_page)
/// for the length of a closure. Other spaces (and the page cache) may read and write the same
/// bytes at the same time, so nothing here makes a Rust reference to them: copies in and out
/// go through raw pointers, and 8-byte words can be loaded and stored atomically.
pub struct SharedPage<'a> {
    ptr: *mut u8,
    writable: bool,
    _page: PhantomData<&'a ()>,
}

impl<'a> SharedPage<'a> {
    /// Bytes in a page.
    pub const LEN: usize = FRAME_SIZE;

    /// # Safety
    ///
    /// `ptr` is a page of the pool, or the zero page when not `writable`, kept mapped for `'a`.
    pub(crate) unsafe fn new(ptr: *mut u8, writable: bool) -> SharedPage<'a> {
        SharedPage {
            ptr,
            writable,
            _page: PhantomData,
        }
    }

    fn check(&self, offset: usize, len: usize, write: bool) -> Result<(), MmError> {
        if write && !self.writable {
            return Err(MmError::NotWritable);
        }
        if offset.checked_add(len).is_none_or(|end| end > FRAME_SIZE) {
            return Err(MmError::BadOffset { offset, len });
        }
        Ok(())
    }

    /// Whether writes are allowed (the page was faulted in for writing).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), MmError> {
        self.check(offset, buf.len(), false)?;
        // SAFETY: inside the page (checked); `buf` is ours and cannot overlap a pool frame or
        // the zero page borrowed here; no reference to the page's bytes is made.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies `data` to `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), MmError> {
        self.check(offset, data.len(), true)?;
        // SAFETY: inside a writable page of the pool (checked), to which the space holds a
        // writable pte for `'a`; `data` cannot overlap it (nothing lends `&[u8]` of a mapped
        // file page, and an anonymous writable page is only this space's).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len()) };
        Ok(())
    }

    fn word(&self, offset: usize, write: bool) -> Result<&AtomicU64, MmError> {
        self.check(offset, 8, write)?;
        if !offset.is_multiple_of(8) {
            return Err(MmError::BadOffset { offset, len: 8 });
        }
        // SAFETY: 8 aligned bytes inside the page (checked; pages are 4096-aligned), valid for
        // `'a`; every access to shared page memory that races with this one is either another
        // atomic access or a raw copy the caller chose to race.
        Ok(unsafe { AtomicU64::from_ptr(self.ptr.add(offset).cast()) })
    }

    /// Loads the 8-byte word at `offset` (a multiple of 8), atomically (acquire).
    pub fn load_u64(&self, offset: usize) -> Result<u64, MmError> {
        Ok(self.word(offset, false)?.load(Ordering::Acquire))
    }

    /// Stores `value` to the 8-byte word at `offset` (a multiple of 8), atomically (release).
    pub fn store_u64(&self, offset: usize, value: u64) -> Result<(), MmError> {
        self.word(offset, true)?.store(value, Ordering::Release);
        Ok(())
    }

    /// Adds `delta` to the 8-byte word at `offset` (a multiple of 8), atomically; returns the
    /// previous value.
    pub fn fetch_add_u64(&self, offset: usize, delta: u64) -> Result<u64, MmError> {
        Ok(self.word(offset, true)?.fetch_add(delta, Ordering::AcqRel))
    }

    /// The page's address, for the caller's own raw or volatile accesses (valid for the
    /// closure only; writes only if [`SharedPage::is_writable`]).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl std::fmt::Debug for SharedPage<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPage")
            .field("ptr", &self.ptr)
            .field("writable", &self.writable)
            .finish()
    }
}
