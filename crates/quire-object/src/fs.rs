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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, INodeNo, OpenFlags, RenameFlags,
    ReplyDirectory, Request,
};
use futures::StreamExt as _;
use object_store::path::{Path, PathPart};
use object_store::{ObjectMeta, ObjectStoreExt as _};
use parking_lot::Mutex;
use quire_fuse::serve::{Open, ReadBuf, Res, Serve, SetAttr, Statfs, Xattr};
pub use quire_fuse::stats::STATS_XATTR;

use crate::backing::{errno_of, BackingInner};
use crate::counters::Request as Req;
use crate::{filemap_errno, ObjectCache, ObjectError, ObjectHandle};

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

/// A directory's entries: name, type, node number.
type Listing = Vec<(String, FileType, u64)>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    File,
    Dir,
}

impl Kind {
    fn file_type(self) -> FileType {
        match self {
            Kind::File => FileType::RegularFile,
            Kind::Dir => FileType::Directory,
        }
    }
}

/// A node the kernel holds: a path relative to the backing's prefix.
#[derive(Debug)]
struct Node {
    path: String,
    kind: Kind,
    lookups: u64,
    /// The path no longer names this node (unlinked, renamed over, removed).
    gone: bool,
    mtime: SystemTime,
}

#[derive(Debug, Default)]
struct Nodes {
    by_ino: HashMap<u64, Node>,
    by_path: HashMap<String, u64>,
}

/// A stable node number for `path` of `kind` (never 0 or 1).
fn ino_hash(path: &str, kind: Kind) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    kind.hash(&mut h);
    (h.finish() >> 1).max(2)
}

impl Nodes {
    /// One kernel lookup of `path` as `kind`.
    fn remember(&mut self, path: &str, kind: Kind, mtime: SystemTime) -> u64 {
        if path.is_empty() {
            return 1;
        }
        if let Some(&ino) = self.by_path.get(path) {
            if let Some(n) = self.by_ino.get_mut(&ino) {
                if n.kind == kind {
                    n.lookups += 1;
                    n.mtime = mtime;
                    return ino;
                }
                // The name is now of another kind: a new node (the kernel would refuse an
                // inode that changed its type).
                n.gone = true;
            }
            self.by_path.remove(path);
        }
        let mut ino = ino_hash(path, kind);
        while self.by_ino.contains_key(&ino) || ino < 2 {
            ino = ino.wrapping_add(1);
        }
        self.by_ino.insert(
            ino,
            Node {
                path: path.to_string(),
                kind,
                lookups: 1,
                gone: false,
                mtime,
            },
        );
        self.by_path.insert(path.to_string(), ino);
        ino
    }

    /// `path` names nothing any more.
    fn unname(&mut self, path: &str) {
        if let Some(ino) = self.by_path.remove(path) {
            if let Some(n) = self.by_ino.get_mut(&ino) {
                n.gone = true;
            }
        }
    }
}

/// An open file: one [`ObjectHandle`], shared by every kernel handle of its path.
struct Shared {
    handle: ObjectHandle,
    path: String,
    /// Kernel handles on it.
    users: AtomicUsize,
    /// Unlinked or renamed away: nothing more is uploaded.
    detached: AtomicBool,
    /// When it was last written, if it was.
    written: Mutex<Option<SystemTime>>,
}

#[derive(Default)]
struct Handles {
    files: HashMap<u64, Arc<Shared>>,
    /// The attached open file of each path.
    by_path: HashMap<String, Arc<Shared>>,
}

impl Handles {
    fn detach(&mut self, path: &str) {
        if let Some(s) = self.by_path.remove(path) {
            s.detached.store(true, Ordering::Release);
        }
    }

    /// Whether an attached open file lies under directory `path`.
    fn any_under(&self, path: &str) -> bool {
        self.by_path.keys().any(|p| is_under(p, path))
    }
}

/// Whether `p` lies (at any depth) under directory `dir` ("" is the root).
fn is_under(p: &str, dir: &str) -> bool {
    if dir.is_empty() {
        return !p.is_empty();
    }
    p.len() > dir.len() + 1 && p.starts_with(dir) && p.as_bytes()[dir.len()] == b'/'
}

/// `p`'s name if it lies directly in directory `dir`.
fn child_of<'a>(p: &'a str, dir: &str) -> Option<&'a str> {
    let rest = if dir.is_empty() {
        p
    } else {
        p.strip_prefix(dir)?.strip_prefix('/')?
    };
    (!rest.is_empty() && !rest.contains('/')).then_some(rest)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
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

/// What a name is, as far as the store and this mount know.
#[derive(Clone, Copy, Debug)]
struct Found {
    kind: Kind,
    size: u64,
    mtime: SystemTime,
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

    /// HEAD of `path`: `None` if there is no such object.
    fn head(&self, path: &str) -> Res<Option<ObjectMeta>> {
        let key = self.key(path)?;
        let inner = self.inner();
        let r = self.cache.backing().block_on(async move {
            let req = inner.counters.start(Req::Head);
            let r = inner.store.head(&key).await;
            if r.is_ok() || matches!(r, Err(object_store::Error::NotFound { .. })) {
                req.ok();
            }
            r
        });
        match r {
            Ok(m) => Ok(Some(m)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_err(&e)),
        }
    }

    /// Whether the store has any object under directory `path` (one listing page).
    fn remote_children(&self, path: &str) -> Res<bool> {
        let key = self.key(path)?;
        let inner = self.inner();
        let r = self.cache.backing().block_on(async move {
            let req = inner.counters.start(Req::List);
            let prefix = (!key.is_root()).then_some(&key);
            let mut s = inner.store.list(prefix);
            // A marker object (`dir/`) lists as the directory's own key: not a child.
            let mut found = false;
            while let Some(m) = s.next().await {
                let m = m?;
                if m.location != key {
                    found = true;
                    break;
                }
            }
            req.ok();
            Ok::<_, object_store::Error>(found)
        });
        r.map_err(|e| store_err(&e))
    }

    /// What `path` is: this mount's open files and directories first, then the store (a HEAD
    /// and a LIST at once; a directory wins over an object of the same name).
    fn probe(&self, path: &str) -> Res<Option<Found>> {
        if let Some(s) = self.shared_of(path) {
            let mtime = s.written.lock().unwrap_or_else(SystemTime::now);
            return Ok(Some(Found {
                kind: Kind::File,
                size: s.handle.len(),
                mtime,
            }));
        }
        if self.local_dirs.lock().contains(path) {
            return Ok(Some(Found {
                kind: Kind::Dir,
                size: 0,
                mtime: self.started,
            }));
        }
        let key = self.key(path)?;
        let inner = self.inner();
        let (head, list) = self.cache.backing().block_on(async move {
            let head = async {
                let req = inner.counters.start(Req::Head);
                let r = inner.store.head(&key).await;
                if r.is_ok() || matches!(r, Err(object_store::Error::NotFound { .. })) {
                    req.ok();
                }
                r
            };
            let list = async {
                let req = inner.counters.start(Req::List);
                let mut s = inner.store.list(Some(&key));
                let mut found = false;
                while let Some(m) = s.next().await {
                    let m = m?;
                    if m.location != key {
                        found = true;
                        break;
                    }
                }
                req.ok();
                Ok::<_, object_store::Error>(found)
            };
            futures::join!(head, list)
        });
        let is_dir = list.map_err(|e| store_err(&e))?;
        if is_dir || self.handles.lock().any_under(path) {
            return Ok(Some(Found {
                kind: Kind::Dir,
                size: 0,
                mtime: self.started,
            }));
        }
        match head {
            Ok(m) => Ok(Some(Found {
                kind: Kind::File,
                size: m.size,
                mtime: m.last_modified.into(),
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_err(&e)),
        }
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

    /// DELETE of `path`'s object; whether there was one to delete (as far as the store says).
    fn delete(&self, path: &str) -> Res<bool> {
        let key = self.key(path)?;
        let inner = self.inner();
        let r = self.cache.backing().block_on(async move {
            let req = inner.counters.start(Req::Delete);
            let r = inner.store.delete(&key).await;
            if r.is_ok() {
                req.ok();
            }
            r
        });
        match r {
            Ok(()) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_err(&e)),
        }
    }

    /// Whether directory `path` has entries: objects under it, or this mount's directories or
    /// open files.
    fn dir_has_entries(&self, path: &str) -> Res<bool> {
        if self.local_dirs.lock().iter().any(|d| is_under(d, path)) {
            return Ok(true);
        }
        if self.handles.lock().any_under(path) {
            return Ok(true);
        }
        self.remote_children(path)
    }

    /// The entries of directory `path`: name, type, node number.
    fn listing(&self, path: &str, ino: u64) -> Res<Listing> {
        let key = self.key(path)?;
        let inner = self.inner();
        let k = key.clone();
        let listed = self
            .cache
            .backing()
            .block_on(async move {
                let req = inner.counters.start(Req::List);
                let prefix = (!k.is_root()).then_some(&k);
                let r = inner.store.list_with_delimiter(prefix).await;
                if r.is_ok() {
                    req.ok();
                }
                r
            })
            .map_err(|e| store_err(&e))?;
        let mut names: BTreeMap<String, Kind> = BTreeMap::new();
        for m in &listed.objects {
            if m.location == key {
                continue;
            }
            if let Some(n) = m.location.filename() {
                if !n.is_empty() {
                    names.entry(n.to_string()).or_insert(Kind::File);
                }
            }
        }
        // A directory wins over an object of the same name.
        for p in &listed.common_prefixes {
            if let Some(n) = p.filename() {
                if !n.is_empty() {
                    names.insert(n.to_string(), Kind::Dir);
                }
            }
        }
        for d in self.local_dirs.lock().iter() {
            if let Some(n) = child_of(d, path) {
                names.insert(n.to_string(), Kind::Dir);
            }
        }
        for p in self.handles.lock().by_path.keys() {
            if let Some(n) = child_of(p, path) {
                names.entry(n.to_string()).or_insert(Kind::File);
            } else if is_under(p, path) {
                // A file being written deeper down: its first directory shows.
                let rest = if path.is_empty() {
                    p.as_str()
                } else {
                    &p[path.len() + 1..]
                };
                if let Some((first, _)) = rest.split_once('/') {
                    names.insert(first.to_string(), Kind::Dir);
                }
            }
        }
        let parent_ino = {
            let nodes = self.nodes.lock();
            match path.rsplit_once('/') {
                Some((parent, _)) => nodes.by_path.get(parent).copied().unwrap_or(1),
                None => 1,
            }
        };
        let mut out = vec![
            (".".to_string(), FileType::Directory, ino),
            ("..".to_string(), FileType::Directory, parent_ino),
        ];
        let nodes = self.nodes.lock();
        for (name, kind) in names {
            let p = join(path, &name);
            let ino = match nodes.by_path.get(&p) {
                Some(&i) if nodes.by_ino.get(&i).is_some_and(|n| n.kind == kind) => i,
                _ => ino_hash(&p, kind),
            };
            out.push((name, kind.file_type(), ino));
        }
        Ok(out)
    }

    /// Copies `from`'s object to `to` (create-only with `noreplace`), then deletes `from`.
    fn copy_delete(&self, from: &str, to: &str, noreplace: bool) -> Res<()> {
        let (fk, tk) = (self.key(from)?, self.key(to)?);
        let inner = self.inner();
        self.cache
            .backing()
            .block_on(async move {
                let req = inner.counters.start(Req::Copy);
                if noreplace {
                    inner.store.copy_if_not_exists(&fk, &tk).await?;
                } else {
                    inner.store.copy(&fk, &tk).await?;
                }
                req.ok();
                let req = inner.counters.start(Req::Delete);
                match inner.store.delete(&fk).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => req.ok(),
                    Err(e) => return Err(e),
                }
                Ok(())
            })
            .map_err(|e| store_err(&e))
    }
}

impl Serve for ObjectFs {
    type AfterWrite = ();

    fn ttl(&self) -> Duration {
        self.config.ttl
    }

    fn lookup(&self, parent: INodeNo, name: &OsStr) -> Res<FileAttr> {
        let path = match self.child_path(parent, name) {
            // A name that cannot be a key names nothing.
            Err(e) if e == Errno::EINVAL => return Err(Errno::ENOENT),
            r => r?,
        };
        match self.probe(&path)? {
            Some(f) => Ok(self.remember(&path, f)),
            None => Err(Errno::ENOENT),
        }
    }

    fn forget(&self, ino: INodeNo, nlookup: u64) {
        if ino.0 == 1 {
            return;
        }
        let mut nodes = self.nodes.lock();
        let Some(n) = nodes.by_ino.get_mut(&ino.0) else {
            return;
        };
        n.lookups = n.lookups.saturating_sub(nlookup);
        if n.lookups == 0 {
            let path = n.path.clone();
            nodes.by_ino.remove(&ino.0);
            if nodes.by_path.get(&path) == Some(&ino.0) {
                nodes.by_path.remove(&path);
            }
        }
    }

    fn getattr(&self, ino: INodeNo, fh: Option<FileHandle>) -> Res<FileAttr> {
        let (path, kind, gone, mtime) = self.node(ino)?;
        if kind == Kind::Dir {
            return Ok(self.attr(ino.0, Kind::Dir, 0, mtime));
        }
        if let Some(s) = fh.and_then(|fh| self.file(fh).ok()) {
            return Ok(self.shared_attr(ino.0, &s, mtime));
        }
        if gone {
            return Err(Errno::ENOENT);
        }
        if let Some(s) = self.shared_of(&path) {
            return Ok(self.shared_attr(ino.0, &s, mtime));
        }
        match self.head(&path)? {
            Some(m) => {
                let mtime: SystemTime = m.last_modified.into();
                if let Some(n) = self.nodes.lock().by_ino.get_mut(&ino.0) {
                    n.mtime = mtime;
                }
                Ok(self.attr(ino.0, Kind::File, m.size, mtime))
            }
            None => Err(Errno::ENOENT),
        }
    }

    fn setattr(&self, ino: INodeNo, set: &SetAttr) -> Res<FileAttr> {
        let (path, kind, gone, _) = self.node(ino)?;
        if let Some(size) = set.size {
            if kind == Kind::Dir {
                return Err(Errno::EISDIR);
            }
            let open = set.fh.and_then(|fh| self.file(fh).ok()).or_else(|| {
                if gone {
                    None
                } else {
                    self.shared_of(&path)
                }
            });
            match open {
                Some(s) => {
                    s.handle.set_len(size).map_err(|e| fm(&e))?;
                    *s.written.lock() = Some(SystemTime::now());
                }
                None => {
                    if gone {
                        return Err(Errno::ENOENT);
                    }
                    // No open handle: open, cut and upload now.
                    let h = self.cache.open(&path).map_err(|e| err(&e))?;
                    h.set_len(size).map_err(|e| fm(&e))?;
                    h.fsync().map_err(|e| fm(&e))?;
                }
            }
        }
        // Mode, owner and times are accepted and ignored (see the module docs).
        self.getattr(ino, set.fh)
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _rdev: u32,
    ) -> Res<FileAttr> {
        if mode & libc::S_IFMT != libc::S_IFREG && mode & libc::S_IFMT != 0 {
            return Err(Errno::EPERM);
        }
        let path = self.child_path(parent, name)?;
        if self.probe(&path)?.is_some() {
            return Err(Errno::EEXIST);
        }
        let h = self.cache.create(&path, true).map_err(|e| err(&e))?;
        h.fsync().map_err(|e| fm(&e))?;
        Ok(self.remember(
            &path,
            Found {
                kind: Kind::File,
                size: 0,
                mtime: SystemTime::now(),
            },
        ))
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, _mode: u32) -> Res<FileAttr> {
        let path = self.child_path(parent, name)?;
        if self.probe(&path)?.is_some() {
            return Err(Errno::EEXIST);
        }
        self.local_dirs.lock().insert(path.clone());
        Ok(self.remember(
            &path,
            Found {
                kind: Kind::Dir,
                size: 0,
                mtime: self.started,
            },
        ))
    }

    fn unlink(&self, parent: INodeNo, name: &OsStr) -> Res<()> {
        let path = self.child_path(parent, name)?;
        if self.local_dirs.lock().contains(&path) {
            return Err(Errno::EISDIR);
        }
        let was_open = {
            let mut h = self.handles.lock();
            let open = h.by_path.contains_key(&path);
            h.detach(&path);
            open
        };
        let existed = self.delete(&path)?;
        if !existed && !was_open {
            return Err(Errno::ENOENT);
        }
        let _ = self.cache.forget(&path);
        self.nodes.lock().unname(&path);
        Ok(())
    }

    fn rmdir(&self, parent: INodeNo, name: &OsStr) -> Res<()> {
        let path = self.child_path(parent, name)?;
        if self.shared_of(&path).is_some() {
            return Err(Errno::ENOTDIR);
        }
        if self.dir_has_entries(&path)? {
            return Err(Errno::ENOTEMPTY);
        }
        let local = self.local_dirs.lock().remove(&path);
        if !local && self.head(&path)?.is_some() {
            return Err(Errno::ENOTDIR);
        }
        self.nodes.lock().unname(&path);
        Ok(())
    }

    fn rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Res<()> {
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return Err(Errno::EINVAL);
        }
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let from = self.child_path(parent, name)?;
        let to = self.child_path(newparent, newname)?;
        let src = self.probe(&from)?.ok_or(Errno::ENOENT)?;
        if src.kind == Kind::Dir {
            return Err(Errno::EXDEV);
        }
        if from == to {
            return Ok(());
        }
        if let Some(dst) = self.probe(&to)? {
            if dst.kind == Kind::Dir {
                return Err(Errno::EISDIR);
            }
            if noreplace {
                return Err(Errno::EEXIST);
            }
        }
        // The source's pending changes go up first; an error changes nothing.
        if let Some(s) = self.shared_of(&from) {
            self.sync(&s)?;
        }
        self.copy_delete(&from, &to, noreplace)?;
        {
            let mut h = self.handles.lock();
            h.detach(&from);
            h.detach(&to);
        }
        let _ = self.cache.forget(&from);
        let _ = self.cache.forget(&to);
        let mut nodes = self.nodes.lock();
        nodes.unname(&to);
        if let Some(ino) = nodes.by_path.remove(&from) {
            if let Some(n) = nodes.by_ino.get_mut(&ino) {
                n.path = to.clone();
            }
            nodes.by_path.insert(to, ino);
        }
        Ok(())
    }

    fn open(&self, ino: INodeNo, flags: OpenFlags) -> Res<Open> {
        let (path, kind, gone, _) = self.node(ino)?;
        if kind == Kind::Dir {
            return Err(Errno::EISDIR);
        }
        if gone {
            return Err(Errno::ENOENT);
        }
        let trunc = flags.0 & libc::O_TRUNC != 0;
        let (fh, s, _) = self.attach(&path, || self.cache.open(&path))?;
        if trunc {
            if let Err(e) = s.handle.set_len(0) {
                let _ = self.release(ino, FileHandle(fh));
                return Err(fm(&e));
            }
            *s.written.lock() = Some(SystemTime::now());
        }
        Ok(Self::open_answer(fh))
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Res<(FileAttr, Open)> {
        if mode & libc::S_IFMT != libc::S_IFREG && mode & libc::S_IFMT != 0 {
            return Err(Errno::EPERM);
        }
        let path = self.child_path(parent, name)?;
        let excl = flags & libc::O_EXCL != 0;
        let trunc = flags & libc::O_TRUNC != 0;
        if self.local_dirs.lock().contains(&path) {
            return Err(if excl { Errno::EEXIST } else { Errno::EISDIR });
        }
        if excl && self.shared_of(&path).is_some() {
            return Err(Errno::EEXIST);
        }
        let (fh, s, fresh) = self.attach(&path, || self.cache.create(&path, trunc))?;
        let existed = s.handle.version().is_some();
        if excl && fresh && existed {
            let _ = self.release(INodeNo(0), FileHandle(fh));
            return Err(Errno::EEXIST);
        }
        if trunc && !fresh {
            if let Err(e) = s.handle.set_len(0) {
                let _ = self.release(INodeNo(0), FileHandle(fh));
                return Err(fm(&e));
            }
        }
        let now = SystemTime::now();
        if trunc || !existed {
            *s.written.lock() = Some(now);
        }
        let a = self.remember(
            &path,
            Found {
                kind: Kind::File,
                size: s.handle.len(),
                mtime: now,
            },
        );
        Ok((a, Self::open_answer(fh)))
    }

    fn read<'a>(
        &'a self,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        buf: ReadBuf<'a>,
    ) -> Res<&'a [u8]> {
        let s = self.file(fh)?;
        let buf = buf.take();
        let mut done = 0;
        while done < buf.len() {
            match s.handle.read_at(offset + done as u64, &mut buf[done..]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) => return Err(fm(&e)),
            }
        }
        Ok(&buf[..done])
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
    ) -> Res<(u32, ())> {
        let s = self.file(fh)?;
        s.handle.write_all_at(offset, data).map_err(|e| fm(&e))?;
        *s.written.lock() = Some(SystemTime::now());
        Ok((data.len() as u32, ()))
    }

    fn flush(&self, _ino: INodeNo, fh: FileHandle) -> Res<()> {
        let s = self.file(fh)?;
        self.sync(&s)
    }

    fn release(&self, _ino: INodeNo, fh: FileHandle) -> Res<()> {
        let s = {
            let mut h = self.handles.lock();
            let Some(s) = h.files.remove(&fh.0) else {
                return Ok(());
            };
            if s.users.fetch_sub(1, Ordering::AcqRel) > 1 {
                return Ok(());
            }
            if h.by_path.get(&s.path).is_some_and(|o| Arc::ptr_eq(o, &s)) {
                h.by_path.remove(&s.path);
            }
            s
        };
        // The last kernel handle: upload what is left (no caller sees an error here).
        if let Err(e) = self.sync(&s) {
            eprintln!(
                "quire: uploading {} at close failed (the data stays staged in the cache): {e:?}",
                s.path
            );
        }
        let detached = s.detached.load(Ordering::Acquire);
        let path = s.path.clone();
        drop(s);
        if detached {
            let _ = self.cache.forget(&path);
        }
        Ok(())
    }

    fn fsync(&self, _ino: INodeNo, fh: FileHandle, _datasync: bool) -> Res<()> {
        let s = self.file(fh)?;
        self.sync(&s)
    }

    fn opendir(&self, ino: INodeNo, _flags: OpenFlags) -> Res<Open> {
        let (path, kind, _, _) = self.node(ino)?;
        if kind != Kind::Dir {
            return Err(Errno::ENOTDIR);
        }
        let list = self.listing(&path, ino.0)?;
        let fh = self.new_fh();
        self.dirs.lock().insert(fh, Arc::new(list));
        Ok(Open {
            fh: FileHandle(fh),
            flags: FopenFlags::empty(),
        })
    }

    fn readdir(
        &self,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        out: &mut ReplyDirectory,
    ) -> Res<()> {
        let d = self.dirs.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)?;
        for (i, (name, kind, ino)) in d.iter().enumerate().skip(offset as usize) {
            if out.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        Ok(())
    }

    fn releasedir(&self, _ino: INodeNo, fh: FileHandle) -> Res<()> {
        self.dirs.lock().remove(&fh.0);
        Ok(())
    }

    fn fsyncdir(&self, _ino: INodeNo, _fh: FileHandle, _datasync: bool) -> Res<()> {
        Ok(())
    }

    fn statfs(&self, _ino: INodeNo) -> Res<Statfs> {
        // 1 PiB in 4 KiB blocks, all free: the store has no fixed size.
        let blocks = 1u64 << 38;
        Ok(Statfs {
            blocks,
            bfree: blocks,
            bavail: blocks,
            files: 1 << 32,
            ffree: 1 << 32,
            bsize: 4096,
            namelen: 255,
            frsize: 4096,
        })
    }

    fn getxattr(&self, ino: INodeNo, name: &OsStr, _size: u32) -> Res<Xattr> {
        if ino.0 == 1 && name == STATS_XATTR {
            let mut text = self.cache.backing().stats().to_string();
            if let Some(t) = self.cache.tier() {
                text.push_str(&t.stats().to_string());
            }
            text.push_str(&self.cache.page_cache().stats().to_string());
            return Ok(Xattr::Value(text.into_bytes()));
        }
        Ok(Xattr::NoValue(Errno::ENODATA))
    }

    fn listxattr(&self, _ino: INodeNo, _size: u32) -> Res<Xattr> {
        Ok(Xattr::Value(Vec::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn paths_under_and_children() {
        assert!(is_under("a/b", "a"));
        assert!(is_under("a/b/c", "a"));
        assert!(!is_under("ab/c", "a"));
        assert!(!is_under("a", "a"));
        assert!(is_under("a", ""));
        assert_eq!(child_of("a/b", "a"), Some("b"));
        assert_eq!(child_of("a/b/c", "a"), None);
        assert_eq!(child_of("x", ""), Some("x"));
        assert_eq!(child_of("x/y", ""), None);
        assert_eq!(join("", "x"), "x");
        assert_eq!(join("a", "x"), "a/x");
    }

    #[test]
    fn a_name_that_changes_kind_gets_a_new_node() {
        let mut n = Nodes::default();
        let f = n.remember("a", Kind::File, UNIX_EPOCH);
        assert_eq!(n.remember("a", Kind::File, UNIX_EPOCH), f);
        let d = n.remember("a", Kind::Dir, UNIX_EPOCH);
        assert_ne!(f, d);
        assert!(n.by_ino[&f].gone);
        assert!(d >= 2 && f >= 2);
    }
}
