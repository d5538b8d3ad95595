//! [`QuireFs`]: the FUSE file system over a directory, with quire as its only data cache.
//!
//! - **Data.** Every open replies `FOPEN_DIRECT_IO`, so the kernel keeps no copy of file data:
//!   reads and writes reach the daemon, which serves them from one quire mapping per backing
//!   file ([`crate::files`]), over a [`FileStore`](quire::store::FileStore) opened with
//!   `O_DIRECT` where the file system allows it. Writes are write-back: `fsync`/`fdatasync`
//!   write back and sync, and report a write-back error once per handle (errseq); `close`
//!   (FLUSH) writes back and reports errors as NFS does; unmount writes back everything.
//! - **Shared mappings** (`FUSE_DIRECT_IO_ALLOW_MMAP`): the kernel keeps the pages of shared
//!   mappings in its own page cache for the mapping's life and writes dirty ones back to the
//!   daemon as ordinary writes (at `msync`, `fsync`, `close` and by its own write-back); before
//!   each direct `read`/`write` of a range it writes back the mapped dirty pages of that range,
//!   and after a direct write it drops the mapped pages of the range, so the next access faults
//!   the new bytes in from the daemon. Hence: a `read` sees what was stored through a mapping
//!   (of the same file through this mount) before it; a mapping sees a `write` made after it
//!   once it touches the page again; `msync(MS_SYNC)` or `fsync` makes mapped stores durable in
//!   the backing file. Two mappings of one file share the kernel's pages.
//! - **Metadata** goes through quire's dentry cache ([`crate::nodes`]); every backing operation
//!   is relative to a directory descriptor the dentry cache holds (`openat`, `fstatat`,
//!   `renameat2`, `mkdirat`...), with `O_NOFOLLOW`/`AT_SYMLINK_NOFOLLOW` wherever the kernel
//!   would not follow a symbolic link, so nothing outside the source directory is ever touched.
//! - **Errors** are the `errno` Linux gives ([`crate::errno`]).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use quire::dcache::{DcacheConfig, DentryRef, FileKind, Identity, RenameMode};
use quire::filemap::{CacheConfig, CachedFile, PageCache};
use rustix::fs::{AtFlags, FallocateFlags, Mode, OFlags, StatxFlags, Timespec, Timestamps, CWD};

use crate::errno;
use crate::files::{is_eof, FileData, Files, Opened};
use crate::nodes::{Node, Nodes, ROOT_ID};
use crate::stats::{FsCounters, Op, STATS_XATTR};

/// How a [`QuireFs`] is set up.
#[derive(Clone, Debug)]
pub struct FsConfig {
    /// quire's memory budget in bytes (the page cache's frame pool).
    pub capacity: usize,
    /// How long the kernel may keep names and attributes without asking again.
    pub ttl: Duration,
    /// Files kept cached after their last handle closed.
    pub max_closed_files: usize,
    /// The largest readahead window of a sequential reader, in bytes. Default 8 MiB: FUSE reads
    /// come in 1 MiB requests, and a window of several keeps the disk busy while the reader
    /// copies (measured: 2 MiB gives 560 MiB/s of cold sequential reads on the development
    /// machine, 8 MiB 690, 16 MiB no more).
    pub readahead: usize,
    /// Check the backing file system's free space at write time (see `Space`), so that a
    /// full disk is reported by `write` rather than only by `fsync`/`close`.
    pub check_space: bool,
    /// The largest file length the mount accepts (the backing file system's limit, see
    /// [`crate::probe_max_file_size`], and quire's); `EFBIG` past it.
    pub max_file_size: u64,
}

impl FsConfig {
    /// Defaults for a budget of `capacity` bytes.
    pub fn new(capacity: usize) -> FsConfig {
        FsConfig {
            capacity,
            ttl: Duration::from_secs(1),
            max_closed_files: 1024,
            readahead: 8 << 20,
            check_space: true,
            max_file_size: quire::filemap::MAX_FILE_SIZE,
        }
    }
}

/// Errors setting up the file system.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The source directory could not be opened.
    #[error("opening the source directory: {0}")]
    Source(#[from] quire::dcache::DcacheError),
    /// The page cache could not be made.
    #[error("making the page cache: {0}")]
    Cache(#[from] quire::filemap::FilemapError),
}

/// One open file handle.
struct Handle {
    file: Arc<FileData>,
    /// This handle's own view of the mapping (its readahead state and errseq position).
    cf: CachedFile,
    writable: bool,
    /// Bytes written through this handle since the daemon last looked at the cache's dirty
    /// memory (see `write`).
    written: AtomicU64,
}

/// How often (in bytes written through one handle) a writer looks at the cache's dirty memory.
const WRITE_BEHIND_EVERY: u64 = 16 << 20;

/// One open directory.
struct DirHandle {
    fd: OwnedFd,
    dev: u64,
    /// The directory's entries, read at the first `readdir` from offset 0.
    entries: Mutex<Option<Arc<Vec<DirEnt>>>>,
}

struct DirEnt {
    name: OsString,
    ino: u64,
    kind: FileType,
}

const HANDLE_SHARDS: usize = 32;

/// One shard of the handle table: file handle → handle.
type HandleShard = Mutex<HashMap<u64, Arc<Handle>>>;

/// The state of a mounted instance, shared by the FUSE threads (and the signal thread, which
/// writes everything back before unmounting).
pub struct FsState {
    nodes: Nodes,
    files: Files,
    handles: Box<[HandleShard]>,
    dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
    next_fh: AtomicU64,
    cfg: FsConfig,
    counters: FsCounters,
    space: Space,
    mmap_allowed: AtomicBool,
    /// The daemon runs as root: new files get the caller's owner.
    as_root: bool,
    euid: u32,
    egid: u32,
}

/// Free space in the backing file system, as far as writes through the mount go: an estimate
/// that every write lowers by its length, checked against the file system (`statvfs`, less the
/// cache's dirty data not yet written back) when it falls below [`Space::LOW`] — so a write
/// that would not fit is refused with `ENOSPC` at `write`, as Linux reports a full disk with
/// delayed allocation, for the price of an atomic subtraction per write while space is
/// plentiful. An estimate, not a reservation: blocks taken by metadata, or by other programs
/// writing the same file system meanwhile, can still make write-back fail, and that is reported
/// by `fsync`/`close` (errseq), as on file systems that do not reserve.
struct Space {
    estimate: std::sync::atomic::AtomicI64,
    check: Mutex<()>,
}

impl Space {
    /// Below this many bytes of estimated room every write checks the file system.
    const LOW: i64 = 256 << 20;

    fn new() -> Space {
        Space {
            // Unknown yet: the first write checks.
            estimate: std::sync::atomic::AtomicI64::new(0),
            check: Mutex::new(()),
        }
    }

    /// Takes `len` bytes of room for a write, or `ENOSPC`.
    fn take(&self, len: u64, s: &FsState) -> R<()> {
        let len = len.min(i64::MAX as u64) as i64;
        let left = self.estimate.fetch_sub(len, Ordering::AcqRel) - len;
        if left >= Self::LOW {
            return Ok(());
        }
        let _one = self.check.lock();
        let root = s.nodes.dcache().root();
        let free = s
            .nodes
            .dcache()
            .with_dir(&root, |fd| rustix::fs::fstatvfs(fd))
            .ok()
            .and_then(|r| r.ok())
            .map(|v| (v.f_bavail.saturating_mul(v.f_frsize)).min(i64::MAX as u64) as i64);
        let Some(free) = free else {
            // Unknown: let write-back report it.
            self.estimate.store(i64::MAX / 2, Ordering::Release);
            return Ok(());
        };
        let dirty = (s.files.cache().stats().dirty_frames as i64) << 12;
        let room = free - dirty;
        if room < len {
            self.estimate.store(room, Ordering::Release);
            return Err(Errno::ENOSPC);
        }
        self.estimate.store(room - len, Ordering::Release);
        Ok(())
    }
}

/// The file system: a thin handle on [`FsState`], as fuser wants it.
pub struct QuireFs {
    state: Arc<FsState>,
}

impl QuireFs {
    /// A file system serving `src` through a page cache of `cfg.capacity` bytes.
    pub fn new(src: &Path, cfg: FsConfig) -> Result<QuireFs, SetupError> {
        let nodes = Nodes::new(
            src,
            DcacheConfig {
                // Every FUSE lookup stats the name anyway (`lookup_stat`): no revalidation by
                // age is needed.
                revalidate_after: None,
                hold_dir_fds: true,
                ..DcacheConfig::default()
            },
        )?;
        let mut cc = CacheConfig::new(cfg.capacity);
        // Data dirty for long is written back within a second or two, as the kernel does for
        // its own page cache (a little later than `dirty_writeback_centisecs`).
        cc.dirty_expire = Duration::from_secs(2);
        cc.readahead_max = cfg.readahead;
        let cache = PageCache::new(cc)?;
        let files = Files::new(cache, cfg.max_closed_files);
        let euid = rustix::process::geteuid().as_raw();
        let egid = rustix::process::getegid().as_raw();
        Ok(QuireFs {
            state: Arc::new(FsState {
                nodes,
                files,
                handles: (0..HANDLE_SHARDS)
                    .map(|_| Mutex::new(HashMap::new()))
                    .collect(),
                dirs: Mutex::new(HashMap::new()),
                next_fh: AtomicU64::new(1),
                cfg,
                counters: FsCounters::default(),
                space: Space::new(),
                mmap_allowed: AtomicBool::new(false),
                as_root: euid == 0,
                euid,
                egid,
            }),
        })
    }

    /// The shared state (for writing everything back from another thread, and for tests).
    pub fn state(&self) -> Arc<FsState> {
        self.state.clone()
    }
}

/// `Ok` or the `errno` to answer with.
type R<T> = Result<T, Errno>;

fn to_time(sec: i64, nsec: u32) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec)
    } else {
        UNIX_EPOCH - Duration::new(sec.unsigned_abs(), 0) + Duration::new(0, nsec)
    }
}

fn kind_of_mode(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn kind_of_dtype(t: rustix::fs::FileType) -> FileType {
    use rustix::fs::FileType as T;
    match t {
        T::Directory => FileType::Directory,
        T::Symlink => FileType::Symlink,
        T::Fifo => FileType::NamedPipe,
        T::Socket => FileType::Socket,
        T::CharacterDevice => FileType::CharDevice,
        T::BlockDevice => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// The attributes the kernel gets for node `id` whose backing file `st` describes.
pub(crate) fn attr_of(id: u64, st: &rustix::fs::Statx) -> FileAttr {
    let mode = u32::from(st.stx_mode);
    FileAttr {
        ino: INodeNo(id),
        size: st.stx_size,
        blocks: st.stx_blocks,
        atime: to_time(st.stx_atime.tv_sec, st.stx_atime.tv_nsec),
        mtime: to_time(st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
        ctime: to_time(st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
        crtime: to_time(st.stx_btime.tv_sec, st.stx_btime.tv_nsec),
        kind: kind_of_mode(mode),
        perm: (mode & 0o7777) as u16,
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        rdev: libc::makedev(st.stx_rdev_major, st.stx_rdev_minor) as u32,
        blksize: st.stx_blksize,
        flags: 0,
    }
}

/// `statx` of the file `fd` refers to (also an `O_PATH` descriptor).
pub(crate) fn statx_fd(fd: BorrowedFd<'_>) -> rustix::io::Result<rustix::fs::Statx> {
    rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::BASIC_STATS)
}

/// `/proc/self/fd/N`: the file an `O_PATH` descriptor refers to, for calls that have no
/// `*at` form taking a descriptor (chmod without following, xattrs).
fn proc_path(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn same_file(st: &rustix::fs::Statx, ident: &Identity) -> bool {
    let i = Identity::from_statx(st);
    i.dev == ident.dev && i.ino == ident.ino
}

thread_local! {
    /// Each FUSE thread's read buffer (up to the largest read the kernel sends).
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl FsState {
    /// The dentry cache and inode table.
    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// The open and kept files.
    pub fn files(&self) -> &Files {
        &self.files
    }

    /// Writes back every file's data and syncs the backing files (SIGINT/SIGTERM, unmount).
    pub fn sync_all(&self) -> Result<(), quire::filemap::FilemapError> {
        self.files.sync_all()
    }

    /// The counters, as `quire stat` prints them.
    pub fn render_stats(&self) -> String {
        let mut out = String::new();
        let cs = self.files.cache().stats();
        use std::fmt::Write as _;
        let _ = writeln!(out, "capacity_bytes {}", self.cfg.capacity);
        let _ = writeln!(out, "frames {}", cs.frames);
        let _ = writeln!(out, "free_frames {}", cs.free_frames);
        let _ = writeln!(out, "cached_frames {}", cs.cached_frames);
        let _ = writeln!(out, "dirty_frames {}", cs.dirty_frames);
        let _ = writeln!(out, "mappings {}", cs.files);
        let _ = writeln!(out, "files_open_or_kept {}", self.files.len());
        let _ = writeln!(
            out,
            "files_revalidated {}",
            self.files.revalidated.load(Ordering::Relaxed)
        );
        let handles: usize = self.handles.iter().map(|s| s.lock().len()).sum();
        let _ = writeln!(out, "handles {handles}");
        let _ = writeln!(out, "nodes {}", self.nodes.len());
        let _ = writeln!(out, "dentries {}", self.nodes.dcache().nr_dentry());
        let _ = writeln!(out, "dentries_unused {}", self.nodes.dcache().nr_unused());
        let _ = writeln!(
            out,
            "mmap_allowed {}",
            u8::from(self.mmap_allowed.load(Ordering::Relaxed))
        );
        if let Some(rss) = crate::stats::rss_bytes() {
            let _ = writeln!(out, "rss_bytes {rss}");
        }
        self.counters.render(&mut out);
        let snap = quire::stats::Snapshot::take();
        for e in quire::stats::Event::ALL {
            let _ = writeln!(out, "quire_{} {}", e.name(), snap.get(*e));
        }
        out
    }

    // ---- lookups ---------------------------------------------------------------------------

    fn node(&self, id: INodeNo) -> R<Arc<Node>> {
        self.nodes.get(id.0).ok_or(Errno::ESTALE)
    }

    fn dentry(&self, node: &Node) -> R<DentryRef<'_>> {
        self.nodes.dentry(node).ok_or(Errno::ESTALE)
    }

    /// Opens the name of `d` in its directory with `flags` (never following a symbolic link):
    /// the dentry cache's errors as an `errno`, the system call's left to the caller.
    fn open_name(&self, d: &DentryRef<'_>, flags: OFlags) -> R<rustix::io::Result<OwnedFd>> {
        self.nodes
            .dcache()
            .with_name(d, |dir, name| {
                rustix::fs::openat(
                    dir,
                    name,
                    flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            })
            .map_err(|e| errno::of_dcache(&e))
    }

    /// `fd`'s attributes, checked to be `node`'s file (`ESTALE` if the name now names another).
    fn check_same(node: &Node, fd: &OwnedFd) -> R<rustix::fs::Statx> {
        let st = statx_fd(fd.as_fd()).map_err(errno::of_sys)?;
        if !same_file(&st, &node.ident) {
            return Err(Errno::ESTALE);
        }
        Ok(st)
    }

    fn handle(&self, fh: FileHandle) -> R<Arc<Handle>> {
        self.handles[fh.0 as usize % HANDLE_SHARDS]
            .lock()
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    /// The backing file's `statx`, with the length and modification time of cached writes.
    fn stat_node(&self, node: &Node) -> R<rustix::fs::Statx> {
        let file = self.files.get(&node.ident);
        let mut st = match &file {
            Some(f) => statx_fd(f.backing.fd()).map_err(errno::of_sys)?,
            None => self.stat_by_name(node)?,
        };
        if let Some(f) = file {
            st.stx_size = f.main.len();
            if let Some(t) = f.last_write() {
                let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                let (s, ns) = (d.as_secs() as i64, d.subsec_nanos());
                if (s, ns) > (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec) {
                    st.stx_mtime.tv_sec = s;
                    st.stx_mtime.tv_nsec = ns;
                    st.stx_ctime = st.stx_mtime;
                }
            }
        }
        Ok(st)
    }

    fn stat_by_name(&self, node: &Node) -> R<rustix::fs::Statx> {
        let d = self.dentry(node)?;
        let st = if node.ident.kind == FileKind::Dir {
            self.nodes.dcache().with_dir(&d, statx_fd)
        } else {
            self.nodes.dcache().with_name(&d, |dir, name| {
                rustix::fs::statx(
                    dir,
                    name,
                    AtFlags::SYMLINK_NOFOLLOW,
                    StatxFlags::BASIC_STATS,
                )
            })
        }
        .map_err(|e| errno::of_dcache(&e))?
        .map_err(errno::of_sys)?;
        if !same_file(&st, &node.ident) {
            // The name now names another file (changed behind the mount).
            return Err(Errno::ESTALE);
        }
        Ok(st)
    }

    /// An `O_PATH` descriptor of the node's file, checked to be that file.
    fn opath(&self, node: &Node) -> R<OwnedFd> {
        let d = self.dentry(node)?;
        let fd = if node.ident.kind == FileKind::Dir || node.id == ROOT_ID {
            self.nodes
                .dcache()
                .with_dir(&d, |fd| {
                    rustix::fs::openat(
                        fd,
                        ".",
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                })
                .map_err(|e| errno::of_dcache(&e))?
        } else {
            self.open_name(&d, OFlags::PATH)?
        }
        .map_err(errno::of_sys)?;
        Self::check_same(node, &fd)?;
        Ok(fd)
    }

    fn entry(&self, node: &Node, st: &rustix::fs::Statx) -> FileAttr {
        let mut st = *st;
        if let Some(f) = self.files.get(&node.ident) {
            st.stx_size = f.main.len();
        }
        attr_of(node.id, &st)
    }

    // ---- opening ---------------------------------------------------------------------------

    /// Opens the backing file of `node` (read-write and `O_DIRECT` where possible).
    fn open_backing(&self, node: &Node) -> R<Opened> {
        let d = self.dentry(node)?;
        let path = self.nodes.dcache().path_of(&d);
        let try_open = |flags: OFlags| self.open_name(&d, flags);
        let mut writable = true;
        let mut result = try_open(OFlags::RDWR | OFlags::DIRECT)?;
        if matches!(result, Err(rustix::io::Errno::INVAL)) {
            result = try_open(OFlags::RDWR)?;
        }
        if matches!(
            result,
            Err(rustix::io::Errno::ACCESS | rustix::io::Errno::ROFS | rustix::io::Errno::PERM)
        ) {
            writable = false;
            result = try_open(OFlags::RDONLY | OFlags::DIRECT)?;
            if matches!(result, Err(rustix::io::Errno::INVAL)) {
                result = try_open(OFlags::RDONLY)?;
            }
        }
        let fd = result.map_err(errno::of_sys)?;
        let st = Self::check_same(node, &fd)?;
        if u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFREG {
            return Err(Errno::EINVAL);
        }
        Ok(Opened { fd, writable, path })
    }

    fn add_handle(&self, file: Arc<FileData>, writable: bool) -> u64 {
        let cf = file.main.reopen();
        let fh = self.new_fh();
        self.handles[fh as usize % HANDLE_SHARDS].lock().insert(
            fh,
            Arc::new(Handle {
                file,
                cf,
                writable,
                written: AtomicU64::new(0),
            }),
        );
        fh
    }

    fn open_flags(&self) -> FopenFlags {
        FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
    }

    fn check_size(&self, end: u64) -> R<()> {
        if end > self.cfg.max_file_size {
            Err(Errno::EFBIG)
        } else {
            Ok(())
        }
    }

    /// Gives new files and directories the caller's owner when the daemon runs as root (and
    /// the group of a set-group-id parent directory, as Linux does).
    fn chown_new(
        &self,
        req: &Request,
        parent: &Node,
        fd: BorrowedFd<'_>,
        st: &mut rustix::fs::Statx,
    ) {
        if !self.as_root || (req.uid() == self.euid && req.gid() == self.egid) {
            return;
        }
        let parent_setgid = self
            .stat_node(parent)
            .map(|p| u32::from(p.stx_mode) & libc::S_ISGID != 0)
            .unwrap_or(false);
        let gid = if parent_setgid { st.stx_gid } else { req.gid() };
        let ok = rustix::fs::chownat(
            fd,
            "",
            Some(rustix::fs::Uid::from_raw(req.uid())),
            Some(rustix::fs::Gid::from_raw(gid)),
            AtFlags::EMPTY_PATH,
        )
        .is_ok();
        if ok {
            st.stx_uid = req.uid();
            st.stx_gid = gid;
        }
    }

    // ---- directories -----------------------------------------------------------------------

    fn read_dir(&self, dir: &DirHandle) -> R<Arc<Vec<DirEnt>>> {
        rustix::fs::seek(&dir.fd, rustix::fs::SeekFrom::Start(0)).map_err(errno::of_sys)?;
        let mut out = Vec::new();
        let mut buf = Vec::with_capacity(32 * 1024);
        let mut it = rustix::fs::RawDir::new(&dir.fd, buf.spare_capacity_mut());
        while let Some(e) = it.next() {
            let e = e.map_err(errno::of_sys)?;
            out.push(DirEnt {
                name: OsStr::from_bytes(e.file_name().to_bytes()).to_os_string(),
                ino: e.ino(),
                kind: kind_of_dtype(e.file_type()),
            });
        }
        Ok(Arc::new(out))
    }

    fn dir_entries(&self, fh: FileHandle, offset: u64) -> R<(Arc<DirHandle>, Arc<Vec<DirEnt>>)> {
        let dir = self.dirs.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)?;
        let mut cached = dir.entries.lock();
        let entries = match (&*cached, offset) {
            (Some(e), o) if o > 0 => e.clone(),
            _ => {
                let e = self.read_dir(&dir)?;
                *cached = Some(e.clone());
                e
            }
        };
        drop(cached);
        Ok((dir, entries))
    }

    /// The node id the kernel should see as `d_ino` for a directory entry.
    fn dirent_ino(&self, dir_node: u64, dev: u64, e: &DirEnt) -> u64 {
        match e.name.as_bytes() {
            b"." => dir_node,
            b".." if dir_node == ROOT_ID => ROOT_ID,
            _ => self.nodes.id_for(dev, e.ino),
        }
    }

    // ---- writes to the tree ------------------------------------------------------------------

    fn parent_dentry(&self, parent: INodeNo) -> R<(Arc<Node>, DentryRef<'_>)> {
        let node = self.node(parent)?;
        let d = self.dentry(&node)?;
        Ok((node, d))
    }

    /// Creates `name` in `parent` with `op` and answers with its entry (one kernel lookup).
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        op: impl FnOnce(BorrowedFd<'_>, &OsStr) -> rustix::io::Result<()>,
    ) -> R<FileAttr> {
        let (pnode, pd) = self.parent_dentry(parent)?;
        let (d, mut st, ()) = self
            .nodes
            .dcache()
            .make_at(&pd, name, op)
            .map_err(|e| errno::of_dcache(&e))?;
        if self.as_root && (req.uid() != self.euid || req.gid() != self.egid) {
            // Through an O_PATH descriptor of what was made (never following a link).
            let fd = self.nodes.dcache().with_name(&d, |dir, name| {
                rustix::fs::openat(
                    dir,
                    name,
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            });
            if let Ok(Ok(fd)) = fd {
                self.chown_new(req, &pnode, fd.as_fd(), &mut st);
            }
        }
        let node = self.nodes.remember(d);
        Ok(attr_of(node.id, &st))
    }

    // ---- attributes ------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn set_attr(
        &self,
        node: &Node,
        fh: Option<FileHandle>,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
    ) -> R<rustix::fs::Statx> {
        let file = match fh {
            Some(fh) => Some(self.handle(fh)?.file.clone()),
            None => self.files.get(&node.ident),
        };
        if let Some(size) = size {
            self.check_size(size)?;
            match &file {
                Some(f) => {
                    f.main.set_len(size).map_err(|e| errno::of_filemap(&e))?;
                    f.touch();
                }
                None => {
                    let d = self.dentry(node)?;
                    let fd = self.open_name(&d, OFlags::WRONLY)?.map_err(errno::of_sys)?;
                    Self::check_same(node, &fd)?;
                    rustix::fs::ftruncate(&fd, size).map_err(errno::of_sys)?;
                }
            }
        }
        // Owner, mode and times: on the open backing file if there is one (it works after the
        // last name is gone), else on an O_PATH descriptor of the node's file.
        let opath;
        let fd: BorrowedFd<'_> = match &file {
            Some(f) => f.backing.fd(),
            None => {
                if mode.is_none()
                    && uid.is_none()
                    && gid.is_none()
                    && atime.is_none()
                    && mtime.is_none()
                {
                    return self.stat_node(node);
                }
                opath = self.opath(node)?;
                opath.as_fd()
            }
        };
        if uid.is_some() || gid.is_some() {
            rustix::fs::chownat(
                fd,
                "",
                uid.map(rustix::fs::Uid::from_raw),
                gid.map(rustix::fs::Gid::from_raw),
                AtFlags::EMPTY_PATH,
            )
            .map_err(errno::of_sys)?;
        }
        if let Some(mode) = mode {
            if node.ident.kind == FileKind::Symlink {
                return Err(Errno::EOPNOTSUPP);
            }
            // Not a symbolic link (checked when the descriptor was opened): the /proc link
            // reaches that very file.
            rustix::fs::chmodat(
                CWD,
                proc_path(fd),
                Mode::from_raw_mode(mode & 0o7777),
                AtFlags::empty(),
            )
            .map_err(errno::of_sys)?;
        }
        if atime.is_some() || mtime.is_some() {
            if let Some(f) = &file {
                // Data still cached would get a new modification time when written back:
                // write it back first, so the times set now stay.
                f.main.flush().map_err(|e| errno::of_filemap(&e))?;
                f.untouch();
            }
            let ts = |t: Option<TimeOrNow>| match t {
                None => Timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                },
                Some(TimeOrNow::Now) => Timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                },
                Some(TimeOrNow::SpecificTime(t)) => {
                    let (sec, nsec) = match t.duration_since(UNIX_EPOCH) {
                        Ok(d) => (d.as_secs() as i64, i64::from(d.subsec_nanos())),
                        Err(e) => {
                            let d = e.duration();
                            let mut sec = -(d.as_secs() as i64);
                            let mut nsec = -i64::from(d.subsec_nanos());
                            if nsec < 0 {
                                sec -= 1;
                                nsec += 1_000_000_000;
                            }
                            (sec, nsec)
                        }
                    };
                    Timespec {
                        tv_sec: sec,
                        tv_nsec: nsec,
                    }
                }
            };
            let times = Timestamps {
                last_access: ts(atime),
                last_modification: ts(mtime),
            };
            if node.ident.kind == FileKind::Symlink {
                let d = self.dentry(node)?;
                self.nodes
                    .dcache()
                    .with_name(&d, |dir, name| {
                        rustix::fs::utimensat(dir, name, &times, AtFlags::SYMLINK_NOFOLLOW)
                    })
                    .map_err(|e| errno::of_dcache(&e))?
                    .map_err(errno::of_sys)?;
            } else {
                rustix::fs::utimensat(CWD, proc_path(fd), &times, AtFlags::empty())
                    .map_err(errno::of_sys)?;
            }
        }
        if let Some(f) = &file {
            f.backing.restamp();
        }
        self.stat_node(node)
    }

    // ---- extended attributes -----------------------------------------------------------------

    /// Notes a change of `ident`'s metadata made through the mount (link count, ctime), so
    /// that the next open does not take it for a change behind the mount.
    fn restamp(&self, ident: &Identity) {
        if let Some(f) = self.files.get(ident) {
            f.backing.restamp();
        }
    }

    /// Runs an xattr call on the node's file through `/proc/self/fd/N` of an `O_PATH`
    /// descriptor (symbolic links hold no user attributes: `EPERM`/`ENODATA` as Linux says).
    fn xattr_path(&self, node: &Node) -> R<(OwnedFd, PathBuf)> {
        if node.ident.kind == FileKind::Symlink {
            return Err(Errno::EPERM);
        }
        let fd = self.opath(node)?;
        let p = proc_path(fd.as_fd());
        Ok((fd, p))
    }
}

fn reply_xattr(reply: ReplyXattr, size: u32, value: &[u8]) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

macro_rules! tri {
    ($self:ident, $reply:ident, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(err) => {
                $self.state.counters.error();
                $reply.error(err);
                return;
            }
        }
    };
}

impl Filesystem for QuireFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let want = [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_ASYNC_DIO,
            InitFlags::FUSE_CACHE_SYMLINKS,
        ];
        for f in want {
            let _ = config.add_capabilities(f);
        }
        if config
            .add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
            .is_ok()
        {
            self.state.mmap_allowed.store(true, Ordering::Relaxed);
        }
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn destroy(&mut self) {
        // The kernel is gone (unmounted): write everything back, give every lookup back.
        if let Err(e) = self.state.files.close_all() {
            eprintln!("quire-fuse: writing back at unmount failed: {e}");
        }
        let dirs: Vec<_> = self.state.dirs.lock().drain().collect();
        drop(dirs);
        for s in self.state.handles.iter() {
            s.lock().clear();
        }
        self.state.nodes.forget_all();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let s = &self.state;
        s.counters.op(Op::Lookup);
        let pnode = tri!(self, reply, s.node(parent));
        let (node, st) = tri!(
            self,
            reply,
            s.nodes
                .lookup(&pnode, name)
                .map_err(|e| errno::of_dcache(&e))
        );
        let attr = s.entry(&node, &st);
        reply.entry(&s.cfg.ttl, &attr, Generation(0));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.state.counters.op(Op::Forget);
        self.state.nodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let s = &self.state;
        s.counters.op(Op::Getattr);
        let node = tri!(self, reply, s.node(ino));
        // With a handle (fstat), the open file answers even after its last name went.
        let st = match fh.and_then(|fh| s.handle(fh).ok()) {
            Some(h) => {
                let mut st = tri!(
                    self,
                    reply,
                    statx_fd(h.file.backing.fd()).map_err(errno::of_sys)
                );
                st.stx_size = h.file.main.len();
                st
            }
            None => tri!(self, reply, s.stat_node(&node)),
        };
        reply.attr(&s.cfg.ttl, &attr_of(node.id, &st));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let s = &self.state;
        s.counters.op(Op::Setattr);
        let node = tri!(self, reply, s.node(ino));
        let st = tri!(
            self,
            reply,
            s.set_attr(&node, fh, mode, uid, gid, size, atime, mtime)
        );
        reply.attr(&s.cfg.ttl, &attr_of(node.id, &st));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let s = &self.state;
        s.counters.op(Op::Readlink);
        let node = tri!(self, reply, s.node(ino));
        let d = tri!(self, reply, s.dentry(&node));
        let target = tri!(
            self,
            reply,
            s.nodes
                .dcache()
                .with_name(&d, |dir, name| rustix::fs::readlinkat(
                    dir,
                    name,
                    Vec::new()
                ))
                .map_err(|e| errno::of_dcache(&e))
                .and_then(|r| r.map_err(errno::of_sys))
        );
        reply.data(target.as_bytes());
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let s = &self.state;
        s.counters.op(Op::Mknod);
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => rustix::fs::FileType::RegularFile,
            libc::S_IFIFO => rustix::fs::FileType::Fifo,
            libc::S_IFSOCK => rustix::fs::FileType::Socket,
            // Device nodes would be usable outside the mount: refused.
            _ => {
                s.counters.error();
                reply.error(Errno::EPERM);
                return;
            }
        };
        let attr = tri!(
            self,
            reply,
            s.make(req, parent, name, |dir, name| {
                rustix::fs::mknodat(dir, name, kind, Mode::from_raw_mode(mode & 0o7777), 0)
            })
        );
        reply.entry(&s.cfg.ttl, &attr, Generation(0));
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let s = &self.state;
        s.counters.op(Op::Mkdir);
        let attr = tri!(
            self,
            reply,
            s.make(req, parent, name, |dir, name| {
                rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode & 0o7777))
            })
        );
        reply.entry(&s.cfg.ttl, &attr, Generation(0));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let s = &self.state;
        s.counters.op(Op::Unlink);
        let (_, pd) = tri!(self, reply, s.parent_dentry(parent));
        // What is cached of a file nobody has open is of no use once its name is gone (if it
        // has other links, the next open makes a new mapping).
        let gone = s
            .nodes
            .dcache()
            .lookup_stat(&pd, name)
            .ok()
            .map(|(d, _)| d.identity());
        tri!(
            self,
            reply,
            s.nodes
                .dcache()
                .unlink_at(&pd, name)
                .map_err(|e| errno::of_dcache(&e))
        );
        if let Some(Some(ident)) = gone {
            s.files.forget_closed(&ident);
            s.restamp(&ident);
        }
        reply.ok();
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let s = &self.state;
        s.counters.op(Op::Rmdir);
        let (_, pd) = tri!(self, reply, s.parent_dentry(parent));
        tri!(
            self,
            reply,
            s.nodes
                .dcache()
                .rmdir_at(&pd, name)
                .map_err(|e| errno::of_dcache(&e))
        );
        reply.ok();
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let s = &self.state;
        s.counters.op(Op::Symlink);
        let attr = tri!(
            self,
            reply,
            s.make(req, parent, link_name, |dir, name| {
                rustix::fs::symlinkat(target, dir, name)
            })
        );
        reply.entry(&s.cfg.ttl, &attr, Generation(0));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let s = &self.state;
        s.counters.op(Op::Rename);
        let mode = if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            RenameMode::Exchange
        } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            RenameMode::NoReplace
        } else if flags.is_empty() {
            RenameMode::Replace
        } else {
            s.counters.error();
            reply.error(Errno::EINVAL);
            return;
        };
        let (_, od) = tri!(self, reply, s.parent_dentry(parent));
        let (_, nd) = tri!(self, reply, s.parent_dentry(newparent));
        // A rename changes the files' ctime: note it as a change made through the mount.
        let moved: Vec<Identity> = [(&od, name), (&nd, newname)]
            .into_iter()
            .filter_map(|(d, n)| s.nodes.dcache().lookup_stat(d, n).ok())
            .filter_map(|(d, _)| d.identity())
            .collect();
        tri!(
            self,
            reply,
            s.nodes
                .dcache()
                .rename_at2(&od, name, &nd, newname, mode)
                .map_err(|e| errno::of_dcache(&e))
        );
        for ident in &moved {
            s.restamp(ident);
        }
        reply.ok();
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let s = &self.state;
        s.counters.op(Op::Link);
        let node = tri!(self, reply, s.node(ino));
        if node.ident.kind == FileKind::Dir {
            s.counters.error();
            reply.error(Errno::EPERM);
            return;
        }
        let src = tri!(self, reply, s.opath(&node));
        let attr = tri!(
            self,
            reply,
            s.make(req, newparent, newname, |dir, name| {
                // Links the very file the kernel named (not whatever its name holds now).
                match rustix::fs::linkat(&src, "", dir, name, AtFlags::EMPTY_PATH) {
                    Err(rustix::io::Errno::NOENT | rustix::io::Errno::PERM) => rustix::fs::linkat(
                        CWD,
                        proc_path(src.as_fd()),
                        dir,
                        name,
                        AtFlags::SYMLINK_FOLLOW,
                    ),
                    r => r,
                }
            })
        );
        s.restamp(&node.ident);
        reply.entry(&s.cfg.ttl, &attr, Generation(0));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let s = &self.state;
        s.counters.op(Op::Open);
        let node = tri!(self, reply, s.node(ino));
        if node.ident.kind == FileKind::Dir {
            s.counters.error();
            reply.error(Errno::EISDIR);
            return;
        }
        let writable = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let file = tri!(
            self,
            reply,
            s.files.open(node.ident, || s.open_backing(&node))
        );
        if writable && !file.writable {
            s.files.release(&file);
            s.counters.error();
            reply.error(Errno::EACCES);
            return;
        }
        let fh = s.add_handle(file, writable);
        reply.opened(FileHandle(fh), s.open_flags());
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let s = &self.state;
        s.counters.op(Op::Create);
        let (pnode, pd) = tri!(self, reply, s.parent_dentry(parent));
        let excl = if flags & libc::O_EXCL != 0 {
            OFlags::EXCL
        } else {
            OFlags::empty()
        };
        let base = OFlags::CREATE | excl | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let perm = Mode::from_raw_mode(mode & 0o7777);
        // Made here (O_EXCL), or — without O_EXCL asked — the file that already has the name;
        // only a file made here gets the caller's owner.
        let open = |dir: BorrowedFd<'_>, name: &OsStr, flags: OFlags| match rustix::fs::openat(
            dir,
            name,
            flags | OFlags::DIRECT,
            perm,
        ) {
            Err(rustix::io::Errno::INVAL) => rustix::fs::openat(dir, name, flags, perm),
            r => r,
        };
        let (d, mut st, (fd, made)) = tri!(
            self,
            reply,
            s.nodes
                .dcache()
                .make_at(&pd, name, |dir, name| {
                    match open(dir, name, base | OFlags::EXCL) {
                        Err(rustix::io::Errno::EXIST) if excl.is_empty() => {
                            open(dir, name, base & !OFlags::CREATE).map(|fd| (fd, false))
                        }
                        r => r.map(|fd| (fd, true)),
                    }
                })
                .map_err(|e| errno::of_dcache(&e))
        );
        if u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFREG {
            s.counters.error();
            reply.error(Errno::EISDIR);
            return;
        }
        if made {
            s.chown_new(req, &pnode, fd.as_fd(), &mut st);
        }
        let path = s.nodes.dcache().path_of(&d);
        let node = s.nodes.remember(d);
        let ident = node.ident;
        let file = tri!(
            self,
            reply,
            s.files.adopt(
                ident,
                Opened {
                    fd,
                    writable: true,
                    path,
                },
            )
        );
        if flags & libc::O_TRUNC != 0 && !file.main.is_empty() {
            if let Err(e) = file.main.set_len(0) {
                s.files.release(&file);
                s.counters.error();
                reply.error(errno::of_filemap(&e));
                return;
            }
        }
        let attr = s.entry(&node, &st);
        let fh = s.add_handle(file, true);
        reply.created(
            &s.cfg.ttl,
            &attr,
            Generation(0),
            FileHandle(fh),
            s.open_flags(),
        );
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let s = &self.state;
        s.counters.op(Op::Read);
        let h = tri!(self, reply, s.handle(fh));
        READ_BUF.with(|b| {
            let mut buf = b.borrow_mut();
            if buf.len() < size as usize {
                buf.resize(size as usize, 0);
            }
            match h.cf.read_at(offset, &mut buf[..size as usize]) {
                Ok(n) => {
                    s.counters.read(n);
                    reply.data(&buf[..n]);
                }
                // The backing file was cut behind the mount, or the offset is past any file:
                // end of file.
                Err(e)
                    if is_eof(&e) || matches!(e, quire::filemap::FilemapError::Overflow { .. }) =>
                {
                    reply.data(&[]);
                }
                Err(e) => {
                    s.counters.error();
                    reply.error(errno::of_filemap(&e));
                }
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let s = &self.state;
        s.counters.op(Op::Write);
        let h = tri!(self, reply, s.handle(fh));
        let end = tri!(
            self,
            reply,
            offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)
        );
        tri!(self, reply, s.check_size(end));
        if s.cfg.check_space {
            tri!(self, reply, s.space.take(data.len() as u64, s));
        }
        match h.cf.write_at(offset, data) {
            Ok(n) => {
                h.file.touch();
                s.counters.written(n);
                reply.written(n as u32);
                // Write-behind: a file written fast while dirty memory is above the flusher's
                // threshold is written back by the thread that served the write, after the
                // reply — so several writers' data goes out on several threads at once rather
                // than through the one flusher, while the writer goes on. (Through the mapping's
                // own handle: an error is recorded for every handle's fsync, and none is taken
                // from this one.)
                let w = h.written.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
                if w >= WRITE_BEHIND_EVERY {
                    h.written.store(0, Ordering::Relaxed);
                    let cache = s.files.cache();
                    let dirty = (cache.stats().dirty_frames as u64) << 12;
                    if dirty > cache.config().dirty_background as u64 {
                        let _ = h.file.main.flush();
                    }
                }
            }
            Err(e) => {
                s.counters.error();
                reply.error(errno::of_filemap(&e));
            }
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let s = &self.state;
        s.counters.op(Op::Flush);
        let h = tri!(self, reply, s.handle(fh));
        if h.writable {
            // As NFS does at close: write back, and report what failed (once per handle).
            tri!(self, reply, h.cf.flush().map_err(|e| errno::of_filemap(&e)));
        }
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let s = &self.state;
        s.counters.op(Op::Release);
        let h = s.handles[fh.0 as usize % HANDLE_SHARDS]
            .lock()
            .remove(&fh.0);
        if let Some(h) = h {
            let file = h.file.clone();
            drop(h);
            s.files.release(&file);
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let s = &self.state;
        s.counters.op(Op::Fsync);
        let h = tri!(self, reply, s.handle(fh));
        tri!(self, reply, h.cf.fsync().map_err(|e| errno::of_filemap(&e)));
        if !datasync {
            // fdatasync (the store's sync) leaves other metadata (times, owner) unsynced.
            tri!(
                self,
                reply,
                rustix::fs::fsync(h.file.backing.fd()).map_err(errno::of_sys)
            );
        }
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let s = &self.state;
        let node = tri!(self, reply, s.node(ino));
        let d = tri!(self, reply, s.dentry(&node));
        let fd = tri!(
            self,
            reply,
            s.nodes
                .dcache()
                .with_dir(&d, |fd| {
                    rustix::fs::openat(
                        fd,
                        ".",
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                })
                .map_err(|e| errno::of_dcache(&e))
                .and_then(|r| r.map_err(errno::of_sys))
        );
        let fh = s.new_fh();
        s.dirs.lock().insert(
            fh,
            Arc::new(DirHandle {
                fd,
                dev: node.ident.dev,
                entries: Mutex::new(None),
            }),
        );
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let s = &self.state;
        s.counters.op(Op::Readdir);
        let (dir, entries) = tri!(self, reply, s.dir_entries(fh, offset));
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            let ino = s.dirent_ino(ino.0, dir.dev, e);
            if reply.add(INodeNo(ino), i as u64 + 1, e.kind, &e.name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let s = &self.state;
        s.counters.op(Op::Readdirplus);
        let (dir, entries) = tri!(self, reply, s.dir_entries(fh, offset));
        let dnode = tri!(self, reply, s.node(ino));
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            let next = i as u64 + 1;
            if e.name == "." || e.name == ".." {
                // Not looked up by the kernel: no count taken.
                let st = match s.stat_node(&dnode) {
                    Ok(st) => st,
                    Err(_) => continue,
                };
                let mut attr = attr_of(s.dirent_ino(ino.0, dir.dev, e), &st);
                attr.kind = FileType::Directory;
                if reply.add(attr.ino, next, &e.name, &s.cfg.ttl, &attr, Generation(0)) {
                    break;
                }
                continue;
            }
            // Each entry counts as a lookup in the kernel.
            let Ok((node, st)) = s.nodes.lookup(&dnode, &e.name) else {
                continue;
            };
            let attr = s.entry(&node, &st);
            if reply.add(attr.ino, next, &e.name, &s.cfg.ttl, &attr, Generation(0)) {
                // Did not fit: the kernel never saw it.
                s.nodes.forget(node.id, 1);
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.state.dirs.lock().remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let s = &self.state;
        let dir = tri!(
            self,
            reply,
            s.dirs.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)
        );
        let r = if datasync {
            rustix::fs::fdatasync(&dir.fd)
        } else {
            rustix::fs::fsync(&dir.fd)
        };
        tri!(self, reply, r.map_err(errno::of_sys));
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = &self.state;
        s.counters.op(Op::Statfs);
        let root = s.nodes.dcache().root();
        let st = tri!(
            self,
            reply,
            s.nodes
                .dcache()
                .with_dir(&root, |fd| rustix::fs::fstatvfs(fd))
                .map_err(|e| errno::of_dcache(&e))
                .and_then(|r| r.map_err(errno::of_sys))
        );
        reply.statfs(
            st.f_blocks,
            st.f_bfree,
            st.f_bavail,
            st.f_files,
            st.f_ffree,
            st.f_bsize as u32,
            st.f_namemax as u32,
            st.f_frsize as u32,
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let s = &self.state;
        s.counters.op(Op::Xattr);
        if ino.0 == ROOT_ID && name == STATS_XATTR {
            s.counters.error();
            reply.error(Errno::EPERM);
            return;
        }
        let node = tri!(self, reply, s.node(ino));
        let (_fd, p) = tri!(self, reply, s.xattr_path(&node));
        let flags = rustix::fs::XattrFlags::from_bits_retain(flags as u32);
        tri!(
            self,
            reply,
            rustix::fs::setxattr(&p, name, value, flags).map_err(errno::of_sys)
        );
        if let Some(f) = s.files.get(&node.ident) {
            f.backing.restamp();
        }
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let s = &self.state;
        s.counters.op(Op::Xattr);
        if ino.0 == ROOT_ID && name == STATS_XATTR {
            let text = s.render_stats();
            reply_xattr(reply, size, text.as_bytes());
            return;
        }
        let node = tri!(self, reply, s.node(ino));
        let (_fd, p) = match s.xattr_path(&node) {
            Ok(x) => x,
            Err(e) if e == Errno::EPERM => {
                reply.error(Errno::ENODATA);
                return;
            }
            Err(e) => {
                s.counters.error();
                reply.error(e);
                return;
            }
        };
        let mut buf = vec![0u8; (size as usize).clamp(1, 1 << 16)];
        loop {
            match rustix::fs::getxattr(&p, name, &mut buf[..]) {
                Ok(n) => {
                    reply_xattr(reply, size, &buf[..n]);
                    return;
                }
                Err(rustix::io::Errno::RANGE) if buf.len() < (1 << 16) => buf.resize(1 << 16, 0),
                Err(e) => {
                    reply.error(errno::of_sys(e));
                    return;
                }
            }
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let s = &self.state;
        s.counters.op(Op::Xattr);
        let node = tri!(self, reply, s.node(ino));
        let (_fd, p) = match s.xattr_path(&node) {
            Ok(x) => x,
            Err(e) if e == Errno::EPERM => {
                reply_xattr(reply, size, &[]);
                return;
            }
            Err(e) => {
                s.counters.error();
                reply.error(e);
                return;
            }
        };
        let mut buf = vec![0u8; 1 << 16];
        match rustix::fs::listxattr(&p, &mut buf[..]) {
            Ok(n) => reply_xattr(reply, size, &buf[..n]),
            Err(e) => reply.error(errno::of_sys(e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let s = &self.state;
        s.counters.op(Op::Xattr);
        let node = tri!(self, reply, s.node(ino));
        let (_fd, p) = tri!(self, reply, s.xattr_path(&node));
        tri!(
            self,
            reply,
            rustix::fs::removexattr(&p, name).map_err(errno::of_sys)
        );
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let s = &self.state;
        s.counters.op(Op::Fallocate);
        let h = tri!(self, reply, s.handle(fh));
        let end = tri!(self, reply, offset.checked_add(length).ok_or(Errno::EFBIG));
        tri!(self, reply, s.check_size(end));
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let f = &h.file;
        match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => {
                tri!(
                    self,
                    reply,
                    rustix::fs::fallocate(
                        f.backing.fd(),
                        FallocateFlags::KEEP_SIZE,
                        offset,
                        length
                    )
                    .map_err(errno::of_sys)
                );
                if !keep && end > f.main.len() {
                    tri!(
                        self,
                        reply,
                        f.main.set_len(end).map_err(|e| errno::of_filemap(&e))
                    );
                }
            }
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE => {
                let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
                if punch && !keep {
                    s.counters.error();
                    reply.error(Errno::EINVAL);
                    return;
                }
                let len = f.main.len();
                // Through the cache first (zeros where the range lies inside the file), written
                // back, then the blocks freed in the backing file: cached and stored bytes agree.
                // A range larger than ZERO_THROUGH_CACHE is not zeroed through the cache: its
                // data is written back, the blocks freed, and the file's cached clean data
                // dropped (folios a reader holds at that moment keep their old bytes for it).
                const ZERO_THROUGH_CACHE: u64 = 64 << 20;
                let zero_end = end.min(len);
                let coarse = zero_end.saturating_sub(offset) > ZERO_THROUGH_CACHE;
                let mut at = if coarse { zero_end } else { offset };
                let zeros = vec![0u8; 1 << 20];
                while at < zero_end {
                    let n = ((zero_end - at) as usize).min(zeros.len());
                    tri!(
                        self,
                        reply,
                        f.main
                            .write_all_at(at, &zeros[..n])
                            .map_err(|e| errno::of_filemap(&e))
                    );
                    at += n as u64;
                }
                tri!(
                    self,
                    reply,
                    f.main.flush().map_err(|e| errno::of_filemap(&e))
                );
                let flags = if punch {
                    FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE
                } else {
                    FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE
                };
                tri!(
                    self,
                    reply,
                    rustix::fs::fallocate(f.backing.fd(), flags, offset, length)
                        .map_err(errno::of_sys)
                );
                if coarse {
                    let _ = f.main.invalidate();
                }
                if !punch && !keep && end > len {
                    tri!(
                        self,
                        reply,
                        f.main.set_len(end).map_err(|e| errno::of_filemap(&e))
                    );
                }
            }
            _ => {
                s.counters.error();
                reply.error(Errno::EOPNOTSUPP);
                return;
            }
        }
        f.touch();
        f.backing.restamp();
        reply.ok();
    }
}

impl std::fmt::Debug for QuireFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuireFs")
            .field("nodes", &self.state.nodes.len())
            .field("files", &self.state.files.len())
            .finish()
    }
}
