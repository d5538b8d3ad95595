//! Open files: one quire mapping per backing file, shared by every FUSE handle on it, and kept
//! (clean) for a while after the last handle closes, so that the next open finds its data
//! cached — if the backing file has not changed meanwhile.
//!
//! # Consistency with changes made behind the mount
//!
//! Every write the cache makes to a backing file (write-back, a cut, `fallocate`) is followed
//! by an `fstat` of it, and the file's *stamp* — size, mtime, ctime — is kept. When a file is
//! opened through the mount, the stamp is compared with the backing file's (close-to-open, as
//! NFS and FUSE's `auto_inval_data` do): if another program changed the file, a mapping nobody
//! has open is dropped and made anew (fresh length, no cached data), and a mapping that is open
//! has its clean data dropped, so the next reads come from the file. A read that then finds the
//! backing file shorter than the mapping thinks gets a short read, never made-up zeros (the
//! page cache's `store_size` check). While a file is open through the mount, the mount is the
//! authority on it: changes made behind it meanwhile are seen only at the next open, and its
//! length stays the mount's until every handle has closed.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use quire::dcache::Identity;
use quire::filemap::{CachedFile, FilemapError, PageCache};
use quire::store::{self, FileStore, Store, StoreError};
use rustix::fs::{AtFlags, StatxFlags};

/// What a file looked like: its length, its modification and change times, and whether its
/// mode holds a set-user-id or set-group-id bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    size: u64,
    mtime: (i64, u32),
    ctime: (i64, u32),
    /// `S_ISUID` or `S_ISGID` set (a change of either also changes ctime).
    privs: bool,
}

impl Stamp {
    /// The stamp in a `statx`.
    pub fn of(st: &rustix::fs::Statx) -> Stamp {
        Stamp {
            size: st.stx_size,
            mtime: (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
            ctime: (st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
            privs: u32::from(st.stx_mode) & (libc::S_ISUID | libc::S_ISGID) != 0,
        }
    }

    fn of_fd(fd: BorrowedFd<'_>) -> rustix::io::Result<Stamp> {
        let st = rustix::fs::statx(
            fd,
            "",
            AtFlags::EMPTY_PATH,
            StatxFlags::SIZE | StatxFlags::MTIME | StatxFlags::CTIME | StatxFlags::MODE,
        )?;
        Ok(Stamp::of(&st))
    }
}

/// A backing file: a [`FileStore`] that records the file's stamp after each change it makes.
pub struct Backing {
    store: FileStore,
    stamp: Mutex<Stamp>,
    /// The stamp's `privs`, read by every write without the lock.
    privs: AtomicBool,
}

impl Backing {
    fn new(store: FileStore) -> rustix::io::Result<Backing> {
        let stamp = Stamp::of_fd(store.fd())?;
        Ok(Backing {
            store,
            privs: AtomicBool::new(stamp.privs),
            stamp: Mutex::new(stamp),
        })
    }

    /// The backing file's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.store.fd()
    }

    /// Whether the file is open with `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.store.is_direct()
    }

    /// Records the file's stamp now (after a change made through the mount).
    pub fn restamp(&self) {
        if let Ok(s) = Stamp::of_fd(self.store.fd()) {
            self.privs.store(s.privs, Ordering::Relaxed);
            *self.stamp.lock() = s;
        }
    }

    /// Whether the file's mode held a set-user-id or set-group-id bit when last looked at
    /// (a write by an unprivileged caller must then clear them).
    pub fn has_privs(&self) -> bool {
        self.privs.load(Ordering::Relaxed)
    }

    /// Whether the file changed since the last change made through the mount.
    fn changed_behind(&self) -> bool {
        match Stamp::of_fd(self.store.fd()) {
            Ok(now) => now != *self.stamp.lock(),
            Err(_) => true,
        }
    }
}

impl Store for Backing {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> store::Result<usize> {
        self.store.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> store::Result<usize> {
        let r = self.store.write_at(offset, buf);
        self.restamp();
        r
    }

    fn sync(&self) -> store::Result<()> {
        self.store.sync()
    }

    fn sync_all(&self) -> store::Result<()> {
        self.store.sync_all()
    }

    fn len(&self) -> store::Result<u64> {
        self.store.len()
    }

    fn set_len(&self, len: u64) -> store::Result<()> {
        let r = self.store.set_len(len);
        self.restamp();
        r
    }

    fn alignment(&self) -> usize {
        self.store.alignment()
    }

    /// The backing file: reads and write-back go to io_uring; a write made there restamps
    /// the file as `write_at` does ([`Store::io_fd_written`]).
    fn io_fd(&self) -> Option<BorrowedFd<'_>> {
        self.store.io_fd()
    }

    fn io_fd_written(&self) {
        self.restamp();
    }
}

/// One backing file served through the cache.
pub struct FileData {
    /// The backing file's identity.
    pub ident: Identity,
    /// The backing file.
    pub backing: Arc<Backing>,
    /// The mapping's own handle: keeps it alive while the file is open or kept.
    pub main: CachedFile,
    /// Whether the backing file is open for writing.
    pub writable: bool,
    handles: AtomicUsize,
    /// When data was last written through the mount (reported as the modification time until
    /// write-back gives the backing file a later one).
    last_write: Mutex<Option<SystemTime>>,
}

impl FileData {
    /// FUSE handles open on the file.
    pub fn handles(&self) -> usize {
        self.handles.load(Ordering::Acquire)
    }

    /// Notes a write through the mount now.
    pub fn touch(&self) {
        *self.last_write.lock() = Some(SystemTime::now());
    }

    /// Forgets the write time (the times were set explicitly).
    pub fn untouch(&self) {
        *self.last_write.lock() = None;
    }

    /// The time of the last write through the mount, if any.
    pub fn last_write(&self) -> Option<SystemTime> {
        *self.last_write.lock()
    }
}

impl std::fmt::Debug for FileData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileData")
            .field("ident", &self.ident)
            .field("len", &self.main.len())
            .field("handles", &self.handles())
            .finish()
    }
}

/// A backing file opened for [`Files::open`].
pub struct Opened {
    /// The descriptor, read-write if possible.
    pub fd: OwnedFd,
    /// Whether it is open for writing.
    pub writable: bool,
    /// Its path, for messages.
    pub path: PathBuf,
}

/// Every file served through the cache, by identity.
pub struct Files {
    /// `None` for a file system whose data does not go through quire ([`Files::none`]).
    cache: Option<PageCache>,
    map: Mutex<HashMap<Identity, Arc<FileData>>>,
    /// Files with no handle open, oldest first, kept for their cached data.
    closed: Mutex<VecDeque<Identity>>,
    max_closed: usize,
    /// Mappings dropped because the backing file changed behind the mount.
    pub revalidated: AtomicU64,
}

impl Files {
    /// A table over `cache`, keeping at most `max_closed` files with no open handle.
    pub fn new(cache: PageCache, max_closed: usize) -> Files {
        Files {
            cache: Some(cache),
            map: Mutex::new(HashMap::new()),
            closed: Mutex::new(VecDeque::new()),
            max_closed,
            revalidated: AtomicU64::new(0),
        }
    }

    /// A table without a page cache, for a file system whose data path is elsewhere (the
    /// passthrough, [`crate::fs::Passthrough`]): it holds no file, and [`Files::open`] answers
    /// `ENOSYS`.
    pub fn none() -> Files {
        Files {
            cache: None,
            map: Mutex::new(HashMap::new()),
            closed: Mutex::new(VecDeque::new()),
            max_closed: 0,
            revalidated: AtomicU64::new(0),
        }
    }

    /// The page cache (`None` for [`Files::none`]).
    pub fn cache(&self) -> Option<&PageCache> {
        self.cache.as_ref()
    }

    /// The file with this identity, if it is open or kept.
    pub fn get(&self, ident: &Identity) -> Option<Arc<FileData>> {
        self.map.lock().get(ident).cloned()
    }

    /// Files open or kept.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Whether no file is open or kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Opens the file `ident` for one more FUSE handle: the mapping already there (revalidated
    /// against the backing file, see the module documentation), or a new one over the file
    /// `open` opens. Call [`Files::release`] when the handle goes.
    pub fn open(
        &self,
        ident: Identity,
        open: impl FnOnce() -> Result<Opened, fuser::Errno>,
    ) -> Result<Arc<FileData>, fuser::Errno> {
        if let Some(f) = self.get_revalidated(&ident) {
            return Ok(f);
        }
        let opened = open()?;
        self.adopt(ident, opened)
    }

    /// [`Files::open`] with a descriptor already open (a file just created).
    pub fn adopt(&self, ident: Identity, opened: Opened) -> Result<Arc<FileData>, fuser::Errno> {
        let cache = self.cache.as_ref().ok_or(fuser::Errno::ENOSYS)?;
        let store =
            FileStore::from_fd(opened.fd, opened.path).map_err(|e| crate::errno::of_store(&e))?;
        let backing = Arc::new(Backing::new(store).map_err(crate::errno::of_sys)?);
        let main = cache
            .open(backing.clone())
            .map_err(|e| crate::errno::of_filemap(&e))?;
        let fresh = Arc::new(FileData {
            ident,
            backing,
            main,
            writable: opened.writable,
            handles: AtomicUsize::new(0),
            last_write: Mutex::new(None),
        });
        let mut map = self.map.lock();
        let file = match map.get(&ident) {
            // Opened meanwhile by another thread: use that one (ours closes untouched), unless
            // it cannot write and ours can.
            Some(other) if other.writable || !fresh.writable => other.clone(),
            _ => {
                map.insert(ident, fresh.clone());
                fresh
            }
        };
        file.handles.fetch_add(1, Ordering::AcqRel);
        drop(map);
        self.closed.lock().retain(|i| *i != ident);
        Ok(file)
    }

    /// The kept or open mapping of `ident`, with one more handle, after revalidation; `None`
    /// if there is none (or it was dropped because the file changed behind the mount).
    fn get_revalidated(&self, ident: &Identity) -> Option<Arc<FileData>> {
        let mut map = self.map.lock();
        let f = map.get(ident)?.clone();
        if f.backing.changed_behind() {
            self.revalidated.fetch_add(1, Ordering::Relaxed);
            if f.handles() == 0 {
                // Nobody uses it: start over from the file as it is now. (Its data was written
                // back when its last handle closed; if some is still dirty, the write-back on
                // drop keeps trying.)
                map.remove(ident);
                drop(map);
                self.closed.lock().retain(|i| i != ident);
                drop(f);
                return None;
            }
            // Open elsewhere: drop what is cached and clean; the next reads go to the file.
            let _ = f.main.invalidate();
            f.backing.restamp();
        }
        f.handles.fetch_add(1, Ordering::AcqRel);
        drop(map);
        self.closed.lock().retain(|i| i != ident);
        Some(f)
    }

    /// One handle of `file` went away. The last one keeps the file (clean) among the closed
    /// ones, dropping the oldest closed file past the limit; a file whose data cannot be written
    /// back is kept until it can (it is never dropped dirty).
    pub fn release(&self, file: &Arc<FileData>) {
        if file.handles.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let mut closed = self.closed.lock();
        closed.push_back(file.ident);
        let mut evict = Vec::new();
        while closed.len() > self.max_closed {
            let Some(id) = closed.pop_front() else {
                break;
            };
            evict.push(id);
        }
        drop(closed);
        for id in evict {
            self.evict(&id);
        }
    }

    /// Drops a closed file from the table if its data is all written back.
    fn evict(&self, ident: &Identity) {
        let Some(f) = self.get(ident) else {
            return;
        };
        if f.handles() > 0 {
            return;
        }
        if f.main.flush().is_err() {
            // Keep it: dropping it would drop the data it could not write.
            self.closed.lock().push_back(*ident);
            return;
        }
        let mut map = self.map.lock();
        if map
            .get(ident)
            .is_some_and(|g| Arc::ptr_eq(g, &f) && g.handles() == 0)
        {
            map.remove(ident);
        }
    }

    /// Forgets a kept file that nobody has open (its backing file was removed): its cached
    /// data is of no use any more.
    pub fn forget_closed(&self, ident: &Identity) {
        let mut map = self.map.lock();
        if map.get(ident).is_some_and(|f| f.handles() == 0) {
            let f = map.remove(ident);
            drop(map);
            self.closed.lock().retain(|i| i != ident);
            drop(f);
        }
    }

    /// Writes back every file and syncs every backing file's data and length (`fdatasync`,
    /// [`CachedFile::fsync`](quire::filemap::CachedFile::fsync)); returns the first error.
    pub fn sync_all(&self) -> Result<(), FilemapError> {
        let files: Vec<Arc<FileData>> = self.map.lock().values().cloned().collect();
        let mut first = None;
        for f in files {
            if let Err(e) = f.main.fsync() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Writes back every file and drops the table (the mount is going away).
    pub fn close_all(&self) -> Result<(), FilemapError> {
        let r = self.sync_all();
        let files: Vec<Arc<FileData>> = self.map.lock().drain().map(|(_, f)| f).collect();
        self.closed.lock().clear();
        drop(files);
        r
    }
}

/// A `StoreError` for an unexpected end of file is a short read at the FUSE boundary.
pub fn is_eof(e: &FilemapError) -> bool {
    matches!(
        e,
        FilemapError::Store(StoreError::Io {
            kind: std::io::ErrorKind::UnexpectedEof,
            ..
        })
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use quire::filemap::CacheConfig;
    use rustix::fs::{openat, Mode, OFlags, CWD};
    use std::path::Path;

    fn opened(path: &Path) -> Opened {
        let fd = openat(CWD, path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).unwrap();
        Opened {
            fd,
            writable: true,
            path: path.to_path_buf(),
        }
    }

    fn ident(path: &Path) -> Identity {
        let st = rustix::fs::statx(CWD, path, AtFlags::empty(), StatxFlags::BASIC_STATS).unwrap();
        Identity::from_statx(&st)
    }

    fn temp(tag: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("quire-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn a_kept_file_is_reused_until_it_changes_behind_the_mount() {
        let p = temp("kept");
        std::fs::write(&p, b"0123456789").unwrap();
        let files = Files::new(PageCache::new(CacheConfig::new(1 << 20)).unwrap(), 8);
        let id = ident(&p);
        let a = files.open(id, || Ok(opened(&p))).unwrap();
        let mut b = [0u8; 4];
        a.main.read_exact_at(0, &mut b).unwrap();
        a.main.write_at(10, b"ab").unwrap();
        a.main.flush().unwrap();
        files.release(&a);
        // Kept, with its data: the next open does not open the file again.
        let again = files
            .open(id, || panic!("the kept mapping is reused"))
            .unwrap();
        assert!(
            Arc::ptr_eq(&a, &again),
            "our own write-back is not a change behind us"
        );
        assert_eq!(again.main.len(), 12);
        files.release(&again);
        // Changed behind the mount: dropped and made anew from the file as it is.
        std::fs::write(&p, b"xyz").unwrap();
        let fresh = files.open(id, || Ok(opened(&p))).unwrap();
        assert!(!Arc::ptr_eq(&a, &fresh));
        assert_eq!(fresh.main.len(), 3);
        assert_eq!(files.revalidated.load(Ordering::Relaxed), 1);
        files.release(&fresh);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn an_open_file_changed_behind_the_mount_drops_its_cached_data() {
        let p = temp("open");
        std::fs::write(&p, vec![7u8; 64 << 10]).unwrap();
        let files = Files::new(PageCache::new(CacheConfig::new(1 << 20)).unwrap(), 8);
        let id = ident(&p);
        let a = files.open(id, || Ok(opened(&p))).unwrap();
        let mut buf = vec![0u8; 64 << 10];
        a.main.read_exact_at(0, &mut buf).unwrap();
        assert!(a.main.cached_frames() > 0);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(0)
            .unwrap();
        let b = files.open(id, || panic!("still open: reused")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        // The data was dropped; the stale length finds the file shorter: no invented zeros.
        assert_eq!(
            a.main.read_at(0, &mut buf).map_err(|e| is_eof(&e)),
            Err(true)
        );
        files.release(&a);
        files.release(&b);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn only_the_last_closed_files_are_kept() {
        let files = Files::new(PageCache::new(CacheConfig::new(1 << 20)).unwrap(), 2);
        let paths: Vec<_> = (0..4).map(|i| temp(&format!("lru{i}"))).collect();
        for p in &paths {
            std::fs::write(p, b"x").unwrap();
            let f = files.open(ident(p), || Ok(opened(p))).unwrap();
            f.main.write_at(1, b"y").unwrap();
            files.release(&f);
        }
        assert_eq!(files.len(), 2, "the two oldest were dropped");
        for p in &paths[..2] {
            assert!(files.get(&ident(p)).is_none());
            // Written back before they went.
            assert_eq!(std::fs::read(p).unwrap(), b"xy");
        }
        assert!(files.get(&ident(&paths[3])).is_some());
        files.close_all().unwrap();
        assert!(files.is_empty());
        for p in &paths {
            assert_eq!(std::fs::read(p).unwrap(), b"xy");
            std::fs::remove_file(p).unwrap();
        }
    }
}
