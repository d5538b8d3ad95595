//! [`ObjectFs`]: a bucket (or a prefix of one) as a FUSE file system, served through
//! [`quire_fuse::Serve`] over an [`ObjectCache`] — what `quire mount s3://BUCKET/PREFIX MNT`
//! serves.
//!
//! # What the mount does
//!
//! - **Names.** Every object under the backing's prefix is a regular file; every `/`-separated
//!   prefix of a key is a directory. When a key is both an object and a prefix (`a` and `a/b`),
//!   the directory wins (as Mountpoint for S3 does) and the object `a` is not reachable.
//! - **Lookups** ask the store each time the kernel asks (a HEAD of the key and a one-page LIST
//!   of `name/`, at once). The kernel keeps names and attributes for [`ObjectFsConfig::ttl`]
//!   (1 s by default): a change made behind the mount is seen within a second.
//! - **Listings** are one `list_with_delimiter` per OPENDIR. READDIRPLUS answers each entry's
//!   attributes from it (an object's size and `Last-Modified`; for a file this mount has open,
//!   its handle's), so `ls -l` of a directory asks the store once, not a HEAD and a LIST per
//!   name; the kernel keeps them for the same 1 s.
//! - **Attributes**: files `0644`, directories `0755`, owned by the mounting user; a file's size
//!   is its open handle's where this mount has it open, else the object's (HEAD); its mtime is
//!   the object's `Last-Modified` (now, while written). One link each.
//! - **Reads** go through the page cache ([`ObjectHandle::read_at`]): misses are ranged GETs
//!   pinned to the version the file was opened at (close-to-open consistency, see
//!   [`crate::cache`]); files are opened with `FOPEN_DIRECT_IO`, so the kernel keeps no second
//!   copy of the data.
//! - **A shared writable `mmap`** of a file is refused (`ENODEV`, as for every direct I/O
//!   FUSE file): programs that write through mappings want a local directory mount.
//! - **Writes** land in the cache (and its staging file) and are **uploaded whole at every
//!   `close` (FLUSH) and `fsync`**, an upload error being that call's error. An upload that
//!   fails at RELEASE (which no caller sees) is logged to stderr; the data stays staged in the
//!   cache. Opens of a file that this mount already has open share that open handle (no new
//!   HEAD), so two descriptors of one file see each other's writes.
//! - **`open(O_CREAT)`** makes a new object, uploaded at the first close even if empty;
//!   `O_EXCL` on an existing key is `EEXIST` (and, with conditional writes, a key taken by
//!   someone else before the upload is `EEXIST` at close). `O_TRUNC` truncates.
//! - **Truncation** (`truncate`, `ftruncate`, `O_TRUNC`) sets the length through the handle;
//!   without an open handle the object is opened, cut and uploaded at once.
//! - **`chmod`, `chown` and `utimes`/`touch` on an existing file are accepted and ignored**:
//!   objects have no owner, mode or settable mtime here. They succeed (unlike Mountpoint, which
//!   refuses most of them) so that `cp -r`, `tar -x` and `rsync` run unchanged; the attributes
//!   stay as listed above.
//! - **`unlink`** DELETEs the object. Descriptors still open on it keep reading and writing the
//!   cached data, but nothing of it is ever uploaded again.
//! - **`mkdir`** makes a directory **only in this mount**: object storage has no directories,
//!   so an empty directory is not persisted and is gone at unmount; it becomes real when a file
//!   in it is uploaded.
//! - **`rmdir`**: `ENOTEMPTY` while the prefix has any object (or this mount has a directory
//!   or an open file under it); else the local directory is forgotten. Directory marker objects
//!   (`dir/`, made by other tools) cannot be named through `object_store` and are not deleted,
//!   so such a directory shows again at the next lookup.
//! - **`rename` of a file** is a server-side COPY then a DELETE: **not atomic** (a crash between
//!   the two leaves both names; a reader may see both for a moment). Pending changes of the
//!   source are uploaded first (an error there fails the rename and changes nothing).
//!   Descriptors open on the source (or on a replaced target) are detached: they keep their
//!   cached data, but their later writes are never uploaded. `RENAME_NOREPLACE` uses a
//!   create-only copy (`EEXIST`).
//! - **`rename` of a directory is `EXDEV`**: `mv` then falls back to copying each file and
//!   removing the old ones. `RENAME_EXCHANGE` is `EINVAL`.
//! - **`link`, `symlink`, and `mknod` of anything but a regular file are `EPERM`**; xattrs are
//!   not supported, but for `quire stat`'s counters on the root ([`STATS_XATTR`]).
//! - **`statfs`** reports a 1 PiB file system, nearly all of it free (as s3fs does): the store
//!   has no fixed size.
//!
//! Errors are errnos: a missing object `ENOENT`, a key taken `EEXIST`, a non-empty directory
//! `ENOTEMPTY`, a directory rename `EXDEV`, an object changed under a reader or writer
//! `ESTALE`, a refused credential `EACCES`, anything else after the retries `EIO`. A node the
//! mount no longer knows is `ESTALE`; nothing a caller sends panics the daemon.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{Errno, FileAttr, FileHandle, FopenFlags, INodeNo};
use object_store::path::{Path, PathPart};
use parking_lot::Mutex;
use quire_fuse::serve::{Open, Res};
pub use quire_fuse::stats::STATS_XATTR;

use crate::backing::{errno_of, BackingInner};
use crate::{filemap_errno, ObjectCache, ObjectError, ObjectHandle};

// The mount's own state (nodes, open files), what it asks the store, and the FUSE operations.
mod nodes;
mod remote;
mod serve;

use nodes::{join, Handles, Kind, Node, Nodes, Shared};
use remote::Found;

/// How an [`ObjectFs`] answers.
#[derive(Clone, Debug)]
pub struct ObjectFsConfig {
    /// How long the kernel may keep names and attributes (1 s by default: a change behind the
    /// mount shows within a second; a longer one saves HEADs and LISTs).
    pub ttl: Duration,
    /// The owner every file and directory is shown with (the mounting user's by default).
    pub uid: u32,
    /// Their group.
    pub gid: u32,
}

impl Default for ObjectFsConfig {
    /// A 1 s ttl; the ids of the calling process.
    fn default() -> ObjectFsConfig {
        use std::os::unix::fs::MetadataExt as _;
        let (uid, gid) = std::fs::metadata("/proc/self")
            .map(|m| (m.uid(), m.gid()))
            .unwrap_or((0, 0));
        ObjectFsConfig {
            ttl: Duration::from_secs(1),
            uid,
            gid,
        }
    }
}

/// An open directory's entries, as listed at OPENDIR: `.`, `..`, then every name with what the
/// listing said of it (READDIRPLUS answers each entry's attributes from it).
type Listing = Vec<ListEntry>;

/// One entry of a [`Listing`].
#[derive(Debug)]
struct ListEntry {
    name: String,
    /// Its node number as READDIR reports it.
    ino: u64,
    found: Found,
}

fn err(e: &ObjectError) -> Errno {
    Errno::from_i32(e.errno())
}

fn fm(e: &quire::FilemapError) -> Errno {
    Errno::from_i32(filemap_errno(e))
}

fn store_err(e: &object_store::Error) -> Errno {
    Errno::from_i32(errno_of(e))
}

/// Every open file of an [`ObjectFs`], to upload them all before the daemon stops (see
/// [`ObjectFs::syncer`]).
#[derive(Clone)]
pub struct SyncAll {
    handles: Arc<Mutex<Handles>>,
}

impl std::fmt::Debug for SyncAll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncAll").finish_non_exhaustive()
    }
}

impl SyncAll {
    /// Uploads the pending changes of every attached open file; the first error, after trying
    /// them all.
    pub fn sync_all(&self) -> Result<(), quire::FilemapError> {
        let open: Vec<Arc<Shared>> = self.handles.lock().by_path.values().cloned().collect();
        let mut first = Ok(());
        for s in open {
            if let Err(e) = s.handle.fsync() {
                eprintln!("quire: uploading {}: {e}", s.path);
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

/// A bucket as a file system (see the [module docs](self) for what it does and does not do).
pub struct ObjectFs {
    cache: ObjectCache,
    config: ObjectFsConfig,
    nodes: Mutex<Nodes>,
    handles: Arc<Mutex<Handles>>,
    dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    /// Directories made by `mkdir` in this mount (relative paths).
    local_dirs: Mutex<HashSet<String>>,
    next_fh: AtomicU64,
    started: SystemTime,
}

impl std::fmt::Debug for ObjectFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectFs")
            .field("cache", &self.cache)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ObjectFs {
    /// A file system over `cache`'s backing.
    pub fn new(cache: ObjectCache, config: ObjectFsConfig) -> ObjectFs {
        let started = SystemTime::now();
        let mut nodes = Nodes::default();
        nodes.by_ino.insert(
            1,
            Node {
                path: String::new(),
                kind: Kind::Dir,
                lookups: 1,
                gone: false,
                mtime: started,
            },
        );
        ObjectFs {
            cache,
            config,
            nodes: Mutex::new(nodes),
            handles: Arc::default(),
            dirs: Mutex::default(),
            local_dirs: Mutex::default(),
            next_fh: AtomicU64::new(1),
            started,
        }
    }

    /// The cache it serves.
    pub fn cache(&self) -> &ObjectCache {
        &self.cache
    }

    /// A handle that uploads every open file's pending changes (for a daemon told to stop).
    pub fn syncer(&self) -> SyncAll {
        SyncAll {
            handles: self.handles.clone(),
        }
    }

    fn inner(&self) -> Arc<BackingInner> {
        self.cache.backing().inner.clone()
    }

    /// The key of a relative path ("" is the backing's prefix).
    fn key(&self, path: &str) -> Res<Path> {
        if path.is_empty() {
            return Ok(self.cache.backing().inner.prefix.clone());
        }
        self.cache.backing().key(path).map_err(|e| err(&e))
    }

    /// A node's path and kind (`ESTALE` for one the mount does not know).
    fn node(&self, ino: INodeNo) -> Res<(String, Kind, bool, SystemTime)> {
        let nodes = self.nodes.lock();
        let n = nodes.by_ino.get(&ino.0).ok_or(Errno::ESTALE)?;
        Ok((n.path.clone(), n.kind, n.gone, n.mtime))
    }

    /// The path of `name` in directory `parent`: `ENOTDIR` if it is not one, `EINVAL` for a
    /// name that cannot be a key, `ENAMETOOLONG` past 255 bytes.
    fn child_path(&self, parent: INodeNo, name: &OsStr) -> Res<String> {
        let (dir, kind, _, _) = self.node(parent)?;
        if kind != Kind::Dir {
            return Err(Errno::ENOTDIR);
        }
        if name.len() > 255 {
            return Err(Errno::ENAMETOOLONG);
        }
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        PathPart::parse(name).map_err(|_| Errno::EINVAL)?;
        Ok(join(&dir, name))
    }

    fn shared_of(&self, path: &str) -> Option<Arc<Shared>> {
        self.handles.lock().by_path.get(path).cloned()
    }

    fn file(&self, fh: FileHandle) -> Res<Arc<Shared>> {
        self.handles
            .lock()
            .files
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    fn attr(&self, ino: u64, kind: Kind, size: u64, mtime: SystemTime) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: mtime,
            mtime,
            ctime: mtime,
            crtime: mtime,
            kind: kind.file_type(),
            perm: match kind {
                Kind::File => 0o644,
                Kind::Dir => 0o755,
            },
            nlink: match kind {
                Kind::File => 1,
                Kind::Dir => 2,
            },
            uid: self.config.uid,
            gid: self.config.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    fn shared_attr(&self, ino: u64, s: &Shared, fallback: SystemTime) -> FileAttr {
        let mtime = s.written.lock().unwrap_or(fallback);
        self.attr(ino, Kind::File, s.handle.len(), mtime)
    }

    fn remember(&self, path: &str, f: Found) -> FileAttr {
        let ino = self.nodes.lock().remember(path, f.kind, f.mtime);
        self.attr(ino, f.kind, f.size, f.mtime)
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds a kernel handle on the open file of `path`, opening it with `open` unless this
    /// mount has it open already.
    fn attach(
        &self,
        path: &str,
        open: impl FnOnce() -> Result<ObjectHandle, ObjectError>,
    ) -> Res<(u64, Arc<Shared>, bool)> {
        {
            // Under the lock: a release can't let it go between the look and the count.
            let mut h = self.handles.lock();
            if let Some(s) = h.by_path.get(path).cloned() {
                let fh = self.new_fh();
                s.users.fetch_add(1, Ordering::AcqRel);
                h.files.insert(fh, s.clone());
                return Ok((fh, s, false));
            }
        }
        let handle = open().map_err(|e| err(&e))?;
        let fh = self.new_fh();
        let mut h = self.handles.lock();
        // Another thread may have opened it meanwhile: share theirs.
        let (s, fresh) = match h.by_path.get(path) {
            Some(s) => (s.clone(), false),
            None => {
                let s = Arc::new(Shared {
                    handle,
                    path: path.to_string(),
                    users: AtomicUsize::new(0),
                    detached: AtomicBool::new(false),
                    written: Mutex::new(None),
                });
                h.by_path.insert(path.to_string(), s.clone());
                (s, true)
            }
        };
        s.users.fetch_add(1, Ordering::AcqRel);
        h.files.insert(fh, s.clone());
        Ok((fh, s, fresh))
    }

    fn open_answer(fh: u64) -> Open {
        Open {
            fh: FileHandle(fh),
            flags: FopenFlags::FOPEN_DIRECT_IO,
        }
    }

    fn sync(&self, s: &Shared) -> Res<()> {
        if s.detached.load(Ordering::Acquire) {
            return Ok(());
        }
        s.handle.fsync().map_err(|e| fm(&e))
    }
}
