//! The page cache in front of a bucket: one cached file per object, with close-to-open
//! consistency.
//!
//! # What it promises (the rules of NFS's close-to-open)
//!
//! - **An open sees the object as it is then.** [`ObjectCache::open`] asks for the object's
//!   version (a HEAD). If the cache holds folios of an older version, they are dropped before
//!   the open returns; if the version is the one cached, its folios are used (a re-read costs
//!   no request but the HEAD).
//! - **A reader never gets bytes of two versions.** Every GET of a file is pinned to the version
//!   it was opened at (`If-Match`). If the object is replaced while a handle reads it, a read
//!   that needs the store fails with `ESTALE` (bytes already cached, of the old version, are
//!   still served); and once a later open has moved the cache to the new version, every read
//!   through an older handle fails with `ESTALE`.
//! - **Writes are uploaded at `fsync` and close**, whole (see [`crate::file`]); until then they
//!   are in the cache and its staging file, visible to every handle of this cache. A conditional
//!   upload refused because the object changed since it was opened is `ESTALE` (or `EEXIST` for
//!   a new object whose key was taken meanwhile); the data stays, dirty, and `fsync` reports
//!   the error.
//! - An open while this cache holds changes not yet uploaded keeps them (the local version
//!   wins over a newer remote one until its upload is refused).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use object_store::path::Path;
use object_store::ObjectStoreExt as _;
use parking_lot::Mutex;
use quire::filemap::{CachedFile, FilemapError, PageCache};

use crate::backing::{errno_error, Backing};
use crate::file::{FileInner, ObjectFile, Version};
use crate::tier::DiskTier;
use crate::ObjectError;

/// A cached object: its file in the page cache, its store, and the generation handles check.
struct Entry {
    file: CachedFile,
    object: Arc<FileInner>,
    /// Bumped whenever an open moves the file to a newer version.
    generation: Arc<AtomicU64>,
}

/// A page cache in front of one [`Backing`].
pub struct ObjectCache {
    cache: PageCache,
    backing: Backing,
    staging_dir: Option<PathBuf>,
    tier: Option<DiskTier>,
    files: Mutex<HashMap<Path, Arc<Entry>>>,
}

impl std::fmt::Debug for ObjectCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCache")
            .field("backing", &self.backing)
            .field("files", &self.files.lock().len())
            .finish()
    }
}

impl ObjectCache {
    /// A cache of `cache`'s budget in front of `backing`; written data waits for its upload
    /// in files under `staging_dir` (the system's temporary directory when `None`).
    pub fn new(cache: PageCache, backing: Backing, staging_dir: Option<PathBuf>) -> ObjectCache {
        ObjectCache {
            cache,
            backing,
            staging_dir,
            tier: None,
            files: Mutex::new(HashMap::new()),
        }
    }

    /// Puts `tier` under the memory cache: clean folios evicted from memory go there, and
    /// misses look there before the network (for files opened from now on).
    pub fn with_tier(mut self, tier: DiskTier) -> ObjectCache {
        tier.bound_queue_for(self.page_cache().config().capacity as u64);
        self.tier = Some(tier);
        self
    }

    /// The disk tier, if there is one.
    pub fn tier(&self) -> Option<&DiskTier> {
        self.tier.as_ref()
    }

    /// The page cache.
    pub fn page_cache(&self) -> &PageCache {
        &self.cache
    }

    /// The backing.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }

    /// Opens object `name` (relative to the backing's prefix), which must exist: `ENOENT` as
    /// [`ObjectError::Store`] otherwise.
    pub fn open(&self, name: &str) -> Result<ObjectHandle, ObjectError> {
        let key = self.backing.key(name)?;
        let version = self.head(&key)?;
        self.open_at(key, Some(version), false)
    }

    /// Opens object `name`, making it if it does not exist, empty if `truncate` (uploaded at
    /// the handle's first `fsync` or close, even if nothing is written).
    pub fn create(&self, name: &str, truncate: bool) -> Result<ObjectHandle, ObjectError> {
        let key = self.backing.key(name)?;
        let version = match self.head(&key) {
            Ok(v) => Some(v),
            Err(ObjectError::Store { errno, .. }) if errno == libc::ENOENT => None,
            Err(e) => return Err(e),
        };
        let new = version.is_none();
        let h = self.open_at(key, version, truncate || new)?;
        Ok(h)
    }

    /// Opens `key` at `version`, which the caller already knows (no HEAD): the cached file is
    /// moved to it if it held another version, as [`open`](Self::open) does.
    pub(crate) fn open_version(
        &self,
        key: Path,
        version: Version,
    ) -> Result<ObjectHandle, ObjectError> {
        self.open_at(key, Some(version), false)
    }

    /// Drops the files of objects that no handle has open, with nothing to upload and no
    /// folio cached (an index entry costs memory of its own, whatever it caches); returns
    /// how many are left.
    pub(crate) fn sweep_idle(&self) -> usize {
        let mut files = self.files.lock();
        files.retain(|_, e| {
            Arc::strong_count(e) > 1 || e.object.pending() || e.file.cached_frames() > 0
        });
        files.len()
    }

    /// Whether the cache holds a file of `key`.
    pub(crate) fn has_key(&self, key: &Path) -> bool {
        self.files.lock().contains_key(key)
    }

    /// Drops the cache's file of `key` from the index if it has nothing to upload (handles keep
    /// theirs): the next open starts afresh.
    pub(crate) fn drop_key(&self, key: &Path) {
        let mut files = self.files.lock();
        if files.get(key).is_some_and(|e| !e.object.pending()) {
            files.remove(key);
        }
    }

    /// The object's current version, by HEAD.
    fn head(&self, key: &Path) -> Result<Version, ObjectError> {
        let inner = self.backing.inner.clone();
        let k = key.clone();
        let r = self.backing.block_on(async move {
            let req = inner.counters.start(crate::Request::Head);
            let m = inner.store.head(&k).await;
            if matches!(m, Ok(_) | Err(object_store::Error::NotFound { .. })) {
                // "No such object" is an answer, not a failure.
                req.ok();
            }
            m
        });
        match r {
            Ok(m) => Ok(Version::of(&m)),
            Err(e) => Err(ObjectError::store(key, &e)),
        }
    }

    fn open_at(
        &self,
        key: Path,
        version: Option<Version>,
        truncate: bool,
    ) -> Result<ObjectHandle, ObjectError> {
        let mut files = self.files.lock();
        let entry = match files.get(&key) {
            Some(e) => {
                let e = e.clone();
                if let Some(v) = &version {
                    let cached = e.object.remote();
                    let changed = cached.as_ref().is_none_or(|c| {
                        c.e_tag != v.e_tag || c.version != v.version || c.size != v.size
                    });
                    if changed {
                        // Dirty folios count as changes: write them back (to the staging
                        // file, a local write) so that `pending` sees them.
                        e.file.flush().map_err(ObjectError::Cache)?;
                    }
                    if changed && !e.object.pending() {
                        // A newer version: drop the old one's folios, move the file to it.
                        e.generation.fetch_add(1, Ordering::AcqRel);
                        e.object.repin(v.clone());
                        e.file.set_len(v.size).map_err(ObjectError::Cache)?;
                        e.file.invalidate().map_err(ObjectError::Cache)?;
                        self.backing.inner.counters.stale();
                    }
                }
                e
            }
            None => {
                let store = ObjectFile::new(
                    self.backing.inner.clone(),
                    key.clone(),
                    version,
                    self.staging_dir.clone(),
                    self.tier.as_ref().map(|t| t.inner.clone()),
                );
                let object = store.inner.clone();
                let file = self.cache.open(store).map_err(ObjectError::Cache)?;
                let e = Arc::new(Entry {
                    file,
                    object,
                    generation: Arc::new(AtomicU64::new(0)),
                });
                files.insert(key.clone(), e.clone());
                e
            }
        };
        drop(files);
        if truncate {
            entry.file.set_len(0).map_err(ObjectError::Cache)?;
            entry.object.truncate_new();
        }
        Ok(ObjectHandle {
            generation: entry.generation.load(Ordering::Acquire),
            file: entry.file.reopen(),
            entry,
        })
    }

    /// Takes the cache's file of `name` out of the index when the object was replaced (a
    /// rename over it) and it has nothing to upload, even while handles still have it open:
    /// those keep the file they opened, the next open reads the new object. Returns whether it
    /// did.
    pub fn replaced(&self, name: &str) -> Result<bool, ObjectError> {
        let key = self.backing.key(name)?;
        let mut files = self.files.lock();
        match files.get(&key) {
            Some(e) if !e.object.pending() => {
                files.remove(&key);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Drops the cache's file of `name` if no handle has it open and it has nothing to
    /// upload; returns whether it did. Its folios go with it.
    pub fn forget(&self, name: &str) -> Result<bool, ObjectError> {
        let key = self.backing.key(name)?;
        let mut files = self.files.lock();
        let Some(e) = files.get(&key) else {
            return Ok(false);
        };
        if Arc::strong_count(e) > 1 || e.object.pending() {
            return Ok(false);
        }
        files.remove(&key);
        Ok(true)
    }
}

/// An open object: reads and writes through the page cache, pinned to the version it was
/// opened at (see the [module docs](self)).
pub struct ObjectHandle {
    entry: Arc<Entry>,
    file: CachedFile,
    generation: u64,
}

impl std::fmt::Debug for ObjectHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectHandle")
            .field("key", &self.entry.object.key.as_ref())
            .field("generation", &self.generation)
            .finish()
    }
}

impl ObjectHandle {
    /// `ESTALE` once a later open moved the file to a newer version.
    fn check(&self) -> Result<(), FilemapError> {
        if self.entry.generation.load(Ordering::Acquire) != self.generation {
            self.entry.object.backing.counters.stale();
            return Err(FilemapError::Store(errno_error(
                quire::store::Op::Read,
                0,
                libc::ESTALE,
            )));
        }
        Ok(())
    }

    /// The version the handle was opened at (its ETag, version id and size then).
    pub fn version(&self) -> Option<Version> {
        self.entry.object.remote()
    }

    /// The file's length.
    pub fn len(&self) -> u64 {
        self.file.len()
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads at `offset` (0 at the end); `ESTALE` if the object changed under this handle.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, FilemapError> {
        self.check()?;
        let n = self.file.read_at(offset, buf)?;
        // A newer version may have been moved in while the bytes were copied: they are not
        // given out as this handle's.
        self.check()?;
        Ok(n)
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    pub fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), FilemapError> {
        self.check()?;
        self.file.read_exact_at(offset, buf)?;
        self.check()
    }

    /// Awaits a read at `offset`: the misses of its window go out as ranged GETs on the
    /// backing's runtime, and the task waits in the folios' wait queues.
    pub async fn read_at_async(&self, offset: u64, buf: &mut [u8]) -> Result<usize, FilemapError> {
        self.check()?;
        let n = self.file.read_at_async(offset, buf).await?;
        self.check()?;
        Ok(n)
    }

    /// Writes at `offset`, into the cache (uploaded at [`fsync`](Self::fsync)).
    pub fn write_all_at(&self, offset: u64, data: &[u8]) -> Result<(), FilemapError> {
        self.check()?;
        self.file.write_all_at(offset, data)
    }

    /// Sets the file's length.
    pub fn set_len(&self, len: u64) -> Result<(), FilemapError> {
        self.check()?;
        self.file.set_len(len)
    }

    /// Uploads the object if it changed: writes its dirty folios back to the staging file and
    /// uploads the whole object. An upload that fails leaves everything as it was and is
    /// reported here (once to each handle, as write-back errors are).
    pub fn fsync(&self) -> Result<(), FilemapError> {
        self.file.fsync()
    }

    /// [`fsync`](Self::fsync), then closes the handle.
    pub fn close(self) -> Result<(), FilemapError> {
        self.fsync()
    }

    /// The object's store (crate-internal: the write-through fill).
    pub(crate) fn object(&self) -> &Arc<FileInner> {
        &self.entry.object
    }

    /// The cached file under the handle (no version checks).
    pub fn cached_file(&self) -> &CachedFile {
        &self.file
    }
}
