//! [`CachedFile`]: one open handle on a cached file, and its reads and writes.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::mapping::Mapping;
use super::{
    check_range, short_read, ErrSeqSince, FileCursor, FileReader, FilemapError, OwnedFolio,
    Readahead, Result, PAGE_SIZE,
};
use crate::mem::folio::{FolioRef, FRAME_SHIFT};
use crate::store::StoreError;

/// One open handle on a cached file: the mapping, plus this handle's readahead state and its
/// position in the file's write-back error sequence. Made by
/// [`PageCache::open`](super::PageCache::open).
///
/// Reads and writes are positional, like `pread` and `pwrite` (there is no file position;
/// many threads may use one handle at once). Besides its own methods, which return the typed
/// [`FilemapError`], a `CachedFile` implements `std::os::unix::fs::FileExt` (see that impl for
/// how the two sets of names coexist), and [`CachedFile::cursor`] gives a [`FileCursor`] with
/// `Read`, `Write` and `Seek`.
///
/// ```
/// use std::io::{Read, Write};
/// use quire::{CacheConfig, MemStore, PageCache};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cache = PageCache::new(CacheConfig::new(8 << 20))?;
/// let file = cache.open(MemStore::new())?;
/// file.write_all_at(0, b"positional")?;
/// let mut text = String::new();
/// file.cursor().read_to_string(&mut text)?;
/// assert_eq!(text, "positional");
/// write!(file.cursor(), "cursor")?; // a cursor starts at 0
/// assert_eq!(file.len(), 10);
/// file.close()?; // fsync, reporting its error (dropping a handle cannot)
/// # Ok(())
/// # }
/// ```
pub struct CachedFile {
    pub(super) mapping: Arc<Mapping>,
    pub(super) ra: Readahead,
    pub(super) since: Mutex<ErrSeqSince>,
}

impl CachedFile {
    pub(super) fn new(mapping: Arc<Mapping>) -> CachedFile {
        let max =
            ((mapping.cache.config.readahead_max as u64) >> FRAME_SHIFT).min(mapping.ra_cap());
        mapping.handles.fetch_add(1, Ordering::Relaxed);
        let since = mapping.errseq.sample();
        CachedFile {
            mapping,
            ra: Readahead::new(max),
            since: Mutex::new(since),
        }
    }

    /// Another handle on the same file, with its own readahead state, that will see write-back
    /// errors recorded from now on (and any that nobody has seen yet).
    pub fn reopen(&self) -> CachedFile {
        CachedFile::new(self.mapping.clone())
    }

    /// The file's length in bytes (including data written but not yet written back).
    pub fn len(&self) -> u64 {
        self.mapping.size()
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads up to `buf.len()` bytes at `offset` into `buf`; returns how many (fewer at the end
    /// of the file, 0 at or past it).
    ///
    /// A read that lies in one cached folio is served without taking a reference on it (a
    /// copy validated by the folio's byte sequence; see [`crate::mem::folio`]); anything else
    /// takes the full path. [`CachedFile::reader`] saves the read-side critical section each
    /// call enters too.
    #[doc(alias = "filemap_read")]
    #[inline]
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        // The thread's translation first, inline in the caller: a hit on a folio this thread
        // found before costs no walk, no pin and no call.
        let m = &*self.mapping;
        if let Some(t) = m.thread_translation(offset >> FRAME_SHIFT) {
            if let Some(n) =
                m.read_at_translated(&self.ra, &t, offset, buf, |end| self.ra.swap_read_end(end))
            {
                crate::stats::count(crate::stats::Event::PageCacheHits);
                return Ok(n);
            }
        }
        self.read_at_untranslated(offset, buf)
    }

    /// [`CachedFile::read_at`] when the thread's translation did not serve: a hit found by a
    /// walk under a pin (its translation kept for the next time), or the full path.
    #[inline(never)]
    fn read_at_untranslated(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let m = &*self.mapping;
        let hit = {
            let guard = crate::sync::rcu::pin();
            m.read_at_hit(&self.ra, offset, buf, &guard, |end| {
                self.ra.swap_read_end(end)
            })
        };
        match hit {
            Some((n, t)) => {
                m.remember_translation(&t);
                crate::stats::count(crate::stats::Event::PageCacheHits);
                Ok(n)
            }
            None => m.read_at(&self.ra, offset, buf),
        }
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with
    /// [`io::ErrorKind::UnexpectedEof`](std::io::ErrorKind::UnexpectedEof) (as a store error) if
    /// the file is shorter.
    pub fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.read_at(offset, buf)?;
        if n < buf.len() {
            return Err(short_read(offset + n as u64));
        }
        Ok(())
    }

    /// A reader of this handle that keeps its read-side critical section across hits (see
    /// [`FileReader`]): for a thread that reads much, one per thread.
    pub fn reader(&self) -> FileReader<'_> {
        FileReader::new(self)
    }

    /// The up-to-date folio holding page `index`, read from the store if needed, without
    /// copying: its bytes are `bytes()` of the returned reference; page `index` starts at byte
    /// `(index - folio.index()) * 4096` of them. Bytes past the end of the file read as zeros.
    /// Fails past the end of the file with an `UnexpectedEof` store error.
    #[doc(alias = "read_cache_folio")]
    pub fn read_folio(&self, index: u64) -> Result<FolioRef<'_>> {
        let m = &*self.mapping;
        if let Some(t) = m.thread_translation(index) {
            if let Some(f) = m.read_folio_translated(&self.ra, &t, index) {
                crate::stats::count(crate::stats::Event::PageCacheHits);
                return Ok(f);
            }
        }
        let hit = {
            let guard = crate::sync::rcu::pin();
            m.read_folio_hit(&self.ra, index, &guard)
        };
        match hit {
            Some((f, t)) => {
                m.remember_translation(&t);
                crate::stats::count(crate::stats::Event::PageCacheHits);
                Ok(f)
            }
            None => m.read_folio(&self.ra, index),
        }
    }

    /// Runs `f` on the bytes of the up-to-date folio holding page `index` and on the folio's
    /// first page (page `index` starts at byte `(index - first) * 4096` of them), reading it
    /// from the store if needed: [`CachedFile::read_folio`] for a borrow that ends with `f`.
    /// Bytes past the end of the file read as zeros. Fails past the end of the file with an
    /// `UnexpectedEof` store error.
    ///
    /// A hit through the calling thread's translation of the folio (any earlier hit on it
    /// leaves one) takes no reference: the thread names the folio in a slot of its own, which
    /// writers, eviction and the free look at (`mem/borrow.rs`), so the hit writes no line
    /// another thread reads. Other calls (the first after a miss, a borrow inside `f`) take a
    /// reference for the duration of `f`. Either way the bytes stay stable while `f` runs: a
    /// write to the folio meanwhile (from another thread, or from `f` itself) goes to a copy,
    /// and eviction passes it by. Nothing waits for a borrow to end, so `f` may block, but like
    /// a reference a borrow keeps the folio's frames from being reused: keep it short.
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::from_vec(b"hello".repeat(2000)))?;
    /// let word = file.with_folio(1, |bytes, first| {
    ///     let at = (1 - first) as usize * 4096;
    ///     bytes[at..at + 5].to_vec()
    /// })?;
    /// assert_eq!(word, b"elloh", "byte 4096 is the second of a \"hello\"");
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias = "filemap_read")]
    #[inline]
    pub fn with_folio<R>(&self, index: u64, f: impl FnOnce(&[u8], u64) -> R) -> Result<R> {
        match self.mapping.with_folio_translated(&self.ra, index, f) {
            Ok(r) => {
                crate::stats::count(crate::stats::Event::PageCacheHits);
                Ok(r)
            }
            Err(f) => self.with_folio_referenced(index, f),
        }
    }

    /// [`CachedFile::with_folio`] through a reference: the walked hit, or the full path.
    #[inline(never)]
    fn with_folio_referenced<R>(&self, index: u64, f: impl FnOnce(&[u8], u64) -> R) -> Result<R> {
        Ok(lend(&self.read_folio(index)?, f))
    }

    /// [`CachedFile::read_folio`] as an [`OwnedFolio`]: a reference that borrows neither this
    /// handle nor the cache (`'static`), for a zero-copy buffer that must outlive them or move
    /// across threads — with the `bytes` feature, `OwnedFolio::into_bytes`. Its bytes are
    /// stable while it lives, like [`CachedFile::read_folio`]'s; it keeps the cache's memory
    /// alive until dropped.
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::from_vec(vec![7u8; 4096]))?;
    /// let before = file.read_folio_owned(0)?;
    /// file.write_all_at(0, b"new")?;
    /// assert_eq!(&before[..3], &[7, 7, 7], "a snapshot: writes go to a copy");
    /// assert_eq!(&file.read_folio_owned(0)?[..3], b"new");
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_folio_owned(&self, index: u64) -> Result<OwnedFolio> {
        let f = self.mapping.read_folio(&self.ra, index)?;
        Ok(OwnedFolio::new(f, self.mapping.cache.clone()))
    }

    /// [`CachedFile::read_folio`] for a fault of a space, which does not borrow the bytes: a
    /// folio spaces map writable stays so.
    #[doc(alias = "filemap_fault")]
    pub(crate) fn fault_folio(&self, index: u64) -> Result<FolioRef<'_>> {
        self.mapping.read_folio_unprotected(&self.ra, index)
    }

    /// The file this handle opens (for `mm`'s file mappings).
    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        &self.mapping
    }

    /// How many mappings of spaces the file has (`mm`'s `Space::map_file`; each piece a
    /// partial munmap leaves counts once).
    pub fn mappings(&self) -> usize {
        self.mapping.i_mmap.len()
    }

    /// Writes `data` at `offset`, extending the file if it ends past the end, and returns how
    /// many bytes it wrote, like `pwrite`: all of them, or — when an error stops the write
    /// after a prefix of whole pieces was written — that prefix's length (the error comes
    /// from the next call, as it would from `pwrite`). It fails only when nothing was written.
    /// [`CachedFile::write_all_at`] completes the write or fails.
    ///
    /// Pages the write covers only in part are read first if not cached (a failed read stops
    /// the write there). The data is dirty in the cache until written back; the writer may
    /// wait if dirty memory is above the limit
    /// ([`CacheConfig::dirty_limit`](super::CacheConfig::dirty_limit)), and is refused
    /// with [`FilemapError::DirtyLimit`] if it stays there while this file's write-back fails.
    #[doc(alias = "generic_perform_write")]
    #[doc(alias = "pwrite")]
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<usize> {
        self.mapping.write_at(offset, data)
    }

    /// Writes all of `data` at `offset` or fails: [`CachedFile::write_at`] until everything is
    /// written. On an error, a prefix of `data` may have been written.
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::new())?;
    /// file.write_all_at(8192, b"past the end")?;
    /// assert_eq!(file.len(), 8192 + 12);
    /// let mut buf = [0xffu8; 4];
    /// file.read_exact_at(8188, &mut buf)?;
    /// assert_eq!(&buf, &[0, 0, 0, 0], "a gap reads as zeros");
    /// # Ok(())
    /// # }
    /// ```
    pub fn write_all_at(&self, mut offset: u64, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let n = self.write_at(offset, data)?;
            if n == 0 {
                // `write_at` fails rather than write nothing; never loop on it.
                return Err(FilemapError::Store(StoreError::WriteZero { offset }));
            }
            offset += n as u64;
            data = &data[n..];
        }
        Ok(())
    }

    // ---- asynchronous counterparts ------------------------------------------------------

    /// [`CachedFile::read_at`] that awaits misses instead of blocking the thread: a miss
    /// submits its readahead window (the wanted folio included) to the I/O engine as one batch
    /// and the task waits in the folio's wait queue, woken when the read ends (the kernel's
    /// io_uring buffered read with `IOCB_WAITQ`). Hits complete without awaiting. Any executor
    /// runs it (std futures only).
    ///
    /// Cancel-safe: dropping the future leaves nothing locked and no waiter; reads it started
    /// finish into frame memory (never into `buf`) and stay cached. Allocation may still
    /// reclaim on the polling thread, as in [`CachedFile::read_at`].
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::from_vec(vec![7; 64 << 10]))?;
    /// let mut buf = [0u8; 100];
    /// // Any executor; this one is a few lines of std (see the crate's examples for tokio).
    /// let n = quire::filemap::block_on(file.read_at_async(10_000, &mut buf))?;
    /// assert_eq!((n, buf[0]), (100, 7));
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias("filemap_read", "IOCB_WAITQ"))]
    pub async fn read_at_async(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.mapping.read_at_async(&self.ra, offset, buf).await
    }

    /// Whether every byte of `offset .. offset + len` (cut at the end of the file) is cached
    /// and up to date right now, so that a read of it would not wait for the store: for a
    /// server that reads hits inline and hands misses to [`CachedFile::read_at_async`] on its
    /// runtime. A snapshot: reclaim may take a folio a moment later.
    #[doc(alias = "filemap_range_uptodate")]
    pub fn is_cached(&self, offset: u64, len: usize) -> bool {
        self.mapping.is_cached(offset, len)
    }

    /// [`CachedFile::read_exact_at`] that awaits misses ([`CachedFile::read_at_async`]).
    pub async fn read_exact_at_async(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.read_at_async(offset, buf).await?;
        if n < buf.len() {
            return Err(short_read(offset + n as u64));
        }
        Ok(())
    }

    /// [`CachedFile::read_folio`] that awaits a miss ([`CachedFile::read_at_async`]).
    #[doc(alias = "read_cache_folio")]
    pub async fn read_folio_async(&self, index: u64) -> Result<FolioRef<'_>> {
        self.mapping.read_folio_async(&self.ra, index).await
    }

    /// [`CachedFile::write_at`] that awaits, instead of blocking on, the reads a write needs:
    /// the pages it covers only in part that are not cached are read first
    /// ([`CachedFile::read_folio_async`]), then the write is made in the cache. Dirty
    /// throttling ([`CacheConfig::dirty_limit`](super::CacheConfig::dirty_limit)) may still block
    /// the thread for a moment.
    pub async fn write_at_async(&self, offset: u64, data: &[u8]) -> Result<usize> {
        if data.is_empty() {
            return self.write_at(offset, data);
        }
        check_range(offset, data.len())?;
        let end = offset + data.len() as u64;
        let size = self.len();
        for pos in [offset, end - 1] {
            let index = pos >> FRAME_SHIFT;
            let page_start = index << FRAME_SHIFT;
            let whole = offset <= page_start && end >= page_start + PAGE_SIZE;
            if !whole && page_start < size {
                self.read_folio_async(index).await?;
            }
        }
        self.write_at(offset, data)
    }

    /// [`CachedFile::write_all_at`] that awaits reads ([`CachedFile::write_at_async`]).
    pub async fn write_all_at_async(&self, mut offset: u64, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let n = self.write_at_async(offset, data).await?;
            if n == 0 {
                return Err(FilemapError::Store(StoreError::WriteZero { offset }));
            }
            offset += n as u64;
            data = &data[n..];
        }
        Ok(())
    }

    /// Starts reading every page of the byte ranges `ranges` that is not cached, as one batch
    /// of requests to the I/O engine, and returns without waiting: a synchronous caller's way
    /// to put many misses in flight at once (`readahead(2)`, `POSIX_FADV_WILLNEED`), after
    /// which its reads of those pages hit or wait for reads already under way. Pages already
    /// cached are skipped; ranges past the end of the file are cut to it; it stops early when
    /// memory is short. Returns the pages submitted.
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::from_vec(vec![1; 1 << 20]))?;
    /// let pages = file.prefetch(&[0..8192, 100_000..104_096])?;
    /// assert!(pages >= 3);
    /// let mut buf = [0u8; 8192];
    /// file.read_exact_at(0, &mut buf)?; // waits for the read under way, if any
    /// # Ok(())
    /// # }
    /// ```
    #[doc(alias("readahead", "force_page_cache_ra", "POSIX_FADV_WILLNEED"))]
    pub fn prefetch(&self, ranges: &[std::ops::Range<u64>]) -> Result<u64> {
        self.mapping.prefetch(ranges)
    }

    /// A [`FileCursor`] at the start of the file: `std::io::{Read, Write, Seek}` on this
    /// handle.
    pub fn cursor(&self) -> FileCursor<&CachedFile> {
        FileCursor::new(self)
    }

    /// Sets the file's length: cutting drops every folio wholly past the end (dirty data there
    /// is dead) and zeroes the tail of the last one; growing reads as zeros.
    #[doc(alias = "truncate_setsize")]
    pub fn set_len(&self, len: u64) -> Result<()> {
        self.mapping.set_len(len)
    }

    /// Writes back every dirty folio of the file, waits for all write-back, syncs the store,
    /// and reports a write-back error recorded since this handle last reported one.
    #[doc(alias("vfs_fsync_range", "file_write_and_wait_range"))]
    pub fn fsync(&self) -> Result<()> {
        self.sync_range(0, u64::MAX)
    }

    /// Writes back every dirty folio of the file and waits for all write-back, then reports a
    /// write-back error recorded since this handle last reported one — [`CachedFile::fsync`]
    /// without syncing the store: the data has reached the store, not stable storage (what
    /// NFS does when a file is closed, so that `close` can report the error).
    #[doc(alias = "filemap_flush")]
    pub fn flush(&self) -> Result<()> {
        let written = self.mapping.write_back_range(0, u64::MAX, true);
        let mut since = self.since.lock().unwrap();
        if let Some(errno) = self.mapping.errseq.check_and_advance(&mut since) {
            return Err(FilemapError::Writeback {
                errno: i32::from(errno),
            });
        }
        written
    }

    /// [`CachedFile::fsync`] for the bytes `offset .. offset + len` only (the store is still
    /// synced whole).
    #[doc(alias = "sync_file_range")]
    pub fn sync_range(&self, offset: u64, len: u64) -> Result<()> {
        let first = offset >> FRAME_SHIFT;
        let last = offset.saturating_add(len.max(1) - 1) >> FRAME_SHIFT;
        self.write_and_sync(first, last, false)
    }

    /// [`CachedFile::fsync`], with the store's other metadata (times, owner, mode) made durable
    /// in the same store call ([`Store::sync_all`](crate::store::Store::sync_all)): `fsync(2)`
    /// where [`CachedFile::fsync`] is `fdatasync(2)`, as `std::fs::File::sync_all` is to
    /// `sync_data`. One call, so the device flushes once, not twice as `fsync` after `fdatasync`
    /// would.
    #[doc(alias = "vfs_fsync")]
    pub fn sync_all(&self) -> Result<()> {
        self.write_and_sync(0, u64::MAX, true)
    }

    /// Writes back the pages `first..=last`, waits, syncs the store (`all`: with its other
    /// metadata), and reports this handle's unseen write-back error.
    fn write_and_sync(&self, first: u64, last: u64, all: bool) -> Result<()> {
        let written = self.mapping.write_back_range(first, last, true);
        let store = &self.mapping.store;
        let synced = if all { store.sync_all() } else { store.sync() };
        let synced = synced.map_err(|e| {
            // A failed sync may have lost written data: every handle must hear of it.
            self.mapping.record_error(&e);
            FilemapError::from(e)
        });
        let mut since = self.since.lock().unwrap();
        if let Some(errno) = self.mapping.errseq.check_and_advance(&mut since) {
            return Err(FilemapError::Writeback {
                errno: i32::from(errno),
            });
        }
        written.and(synced)
    }

    /// Writes back the file's dirty data and then drops every folio of it that nobody is using;
    /// returns the frames freed. Dirty folios that could not be written stay cached.
    #[doc(alias = "invalidate_mapping_pages")]
    pub fn invalidate(&self) -> Result<usize> {
        let _ = self.mapping.write_back_range(0, u64::MAX, true);
        Ok(self.mapping.invalidate())
    }

    /// Frames of this file in the cache.
    pub fn cached_frames(&self) -> usize {
        self.mapping.nr_frames.load(Ordering::Relaxed)
    }

    /// Bytes read from the store into this file's cache since it was opened (by every handle
    /// of it): its misses, readahead included, in bytes, whichever I/O engine read them — a
    /// file's hit ratio is `1 - store_bytes_read / bytes asked for`. The kernel's per-task
    /// `read_bytes` (`/proc/<pid>/io`), kept per file.
    #[doc(alias = "read_bytes")]
    pub fn store_bytes_read(&self) -> u64 {
        self.mapping.read_bytes.load(Ordering::Relaxed)
    }

    /// Closes the handle after an `fsync`, reporting its error: dropping a handle also writes
    /// back dirty data (once the file's last handle goes), but cannot report a failure.
    pub fn close(self) -> Result<()> {
        self.fsync()
    }
}

impl Drop for CachedFile {
    /// The file's last handle closes it now (write-back, then every folio freed), rather than
    /// whichever thread happens to drop the mapping's last `Arc`.
    fn drop(&mut self) {
        if self.mapping.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.mapping.close();
        }
    }
}

impl std::fmt::Debug for CachedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedFile")
            .field("id", &self.mapping.id)
            .field("len", &self.len())
            .field("cached_frames", &self.cached_frames())
            .finish()
    }
}

/// `f` run on the bytes and first page of `folio`, a reference `read_folio` returned (so up to
/// date): the referenced path of the handle's and the reader's `with_folio`.
pub(super) fn lend<R>(folio: &FolioRef<'_>, f: impl FnOnce(&[u8], u64) -> R) -> R {
    let bytes = folio
        .bytes()
        .expect("read_folio returns an up-to-date folio");
    f(bytes, folio.index())
}
