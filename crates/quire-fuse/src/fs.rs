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
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, OpenAccMode, OpenFlags, RenameFlags, TimeOrNow,
};
use parking_lot::Mutex;
use quire::dcache::{DcacheConfig, DentryRef, FileKind, Identity, RenameMode};
use quire::filemap::{CacheConfig, CachedFile, PageCache};
use rustix::fs::{AtFlags, FallocateFlags, Mode, OFlags, StatxFlags, Timespec, Timestamps, CWD};
use rustix::thread::CapabilitySet;

mod attr;
mod dir;
mod file;
mod passthrough;
mod state;
mod xattr;

use attr::*;
pub use attr::{attr_of, statx_fd};
pub use file::WriteBehind;
pub use passthrough::Passthrough;

use crate::creds::{Caller, DaemonCreds};
use crate::errno;
use crate::files::{is_eof, FileData, Files, Opened};
use crate::nodes::{Node, Nodes, ROOT_ID};
use crate::serve::{
    AfterReply, DirOut, DirPlusOut, Fuse, Open, ReadBuf, Req, Res as R, Serve, SetAttr, Statfs,
    Xattr,
};
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
    /// The daemon's credentials: where it runs as root, what a request creates is made with
    /// the caller's (see [`crate::creds`]).
    creds: DaemonCreds,
}

/// Free space in the backing file system, as far as writes through the mount go: an estimate
/// that every write lowers by its length, checked against the file system (`statvfs`, less the
/// cache's dirty data and the data under write-back) when it falls below [`Space::LOW`] — so a write
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
        // Data under write-back counts too: its blocks may not be taken yet (requests in
        // flight in the I/O engine).
        let dirty = s.files.cache().map_or(0, |c| {
            let st = c.stats();
            ((st.dirty_frames + st.writeback_frames) as i64) << 12
        });
        let room = free - dirty;
        if room < len {
            self.estimate.store(room, Ordering::Release);
            return Err(Errno::ENOSPC);
        }
        self.estimate.store(room - len, Ordering::Release);
        Ok(())
    }
}

/// The file system: a thin handle on [`FsState`], served through [`Fuse`].
pub struct QuireFs {
    state: Arc<FsState>,
}

impl QuireFs {
    /// A file system serving `src` through a page cache of `cfg.capacity` bytes, ready to
    /// mount.
    pub fn new(src: &Path, cfg: FsConfig) -> Result<Fuse<QuireFs>, SetupError> {
        let mut cc = CacheConfig::new(cfg.capacity);
        // Data dirty for long is written back within a second or two, as the kernel does for
        // its own page cache (a little later than `dirty_writeback_centisecs`).
        cc.dirty_expire = Duration::from_secs(2);
        cc.readahead_max = cfg.readahead;
        let cache = PageCache::new(cc)?;
        Ok(Fuse::new(QuireFs::build(src, cfg, Some(cache))?))
    }

    /// The file system over `src` with `cache` as its data cache; without one, the tree alone
    /// (names, attributes, directories, xattrs), whose data operations answer `ENOSYS`, for
    /// [`Passthrough`] to serve data its own way.
    fn build(src: &Path, cfg: FsConfig, cache: Option<PageCache>) -> Result<QuireFs, SetupError> {
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
        let files = match cache {
            Some(cache) => Files::new(cache, cfg.max_closed_files),
            None => Files::none(),
        };
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
                creds: DaemonCreds::current(),
            }),
        })
    }

    /// The shared state (for writing everything back from another thread, and for tests).
    pub fn state(&self) -> Arc<FsState> {
        self.state.clone()
    }
}

impl Serve for QuireFs {
    type AfterWrite = WriteBehind;

    fn ttl(&self) -> Duration {
        self.state.cfg.ttl
    }

    #[inline]
    fn failed(&self, _errno: Errno) {
        self.state.counters.error();
    }

    fn init(&mut self, config: &mut KernelConfig) -> io::Result<()> {
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

    fn lookup(&self, parent: INodeNo, name: &OsStr) -> R<FileAttr> {
        let s = &self.state;
        s.counters.op(Op::Lookup);
        let pnode = s.node(parent)?;
        let (node, st) = s
            .nodes
            .lookup(&pnode, name)
            .map_err(|e| errno::of_dcache(&e))?;
        Ok(s.entry(&node, &st))
    }

    fn forget(&self, ino: INodeNo, nlookup: u64) {
        self.state.counters.op(Op::Forget);
        self.state.nodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, ino: INodeNo, fh: Option<FileHandle>) -> R<FileAttr> {
        let s = &self.state;
        s.counters.op(Op::Getattr);
        let node = s.node(ino)?;
        // With a handle (fstat), the open file answers even after its last name went.
        let st = match fh.and_then(|fh| s.handle(fh).ok()) {
            Some(h) => {
                let mut st = statx_fd(h.file.backing.fd()).map_err(errno::of_sys)?;
                st.stx_size = h.file.main.len();
                st
            }
            None => s.stat_node(&node)?,
        };
        Ok(attr_of(node.id, &st))
    }

    fn setattr(&self, ino: INodeNo, set: &SetAttr) -> R<FileAttr> {
        let s = &self.state;
        s.counters.op(Op::Setattr);
        let node = s.node(ino)?;
        let st = s.set_attr(&node, set)?;
        Ok(attr_of(node.id, &st))
    }

    fn readlink(&self, ino: INodeNo) -> R<Vec<u8>> {
        let s = &self.state;
        s.counters.op(Op::Readlink);
        let node = s.node(ino)?;
        let d = s.dentry(&node)?;
        let target = s
            .nodes
            .dcache()
            .with_name(&d, |dir, name| {
                rustix::fs::readlinkat(dir, name, Vec::new())
            })
            .map_err(|e| errno::of_dcache(&e))?
            .map_err(errno::of_sys)?;
        Ok(target.into_bytes())
    }

    fn mknod(&self, req: &Req, parent: INodeNo, name: &OsStr, mode: u32, rdev: u32) -> R<FileAttr> {
        let s = &self.state;
        s.counters.op(Op::Mknod);
        let (kind, keep) = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => (rustix::fs::FileType::RegularFile, CapabilitySet::empty()),
            libc::S_IFIFO => (rustix::fs::FileType::Fifo, CapabilitySet::empty()),
            libc::S_IFSOCK => (rustix::fs::FileType::Socket, CapabilitySet::empty()),
            // Device nodes are made where the caller may (CAP_MKNOD, kept for the call); the
            // mount is `nodev` unless asked otherwise, so they cannot be opened as devices
            // through it.
            libc::S_IFCHR => (rustix::fs::FileType::CharacterDevice, CapabilitySet::MKNOD),
            libc::S_IFBLK => (rustix::fs::FileType::BlockDevice, CapabilitySet::MKNOD),
            _ => return Err(Errno::EINVAL),
        };
        s.make(req, parent, name, Some(keep), |dir, name| {
            let perm = Mode::from_raw_mode(mode & 0o7777);
            rustix::fs::mknodat(dir, name, kind, perm, u64::from(rdev))
        })
    }

    fn mkdir(&self, req: &Req, parent: INodeNo, name: &OsStr, mode: u32) -> R<FileAttr> {
        let s = &self.state;
        s.counters.op(Op::Mkdir);
        let perm = Mode::from_raw_mode(mode & 0o7777);
        let keep = Some(CapabilitySet::empty());
        s.make(req, parent, name, keep, |dir, name| {
            rustix::fs::mkdirat(dir, name, perm)
        })
    }

    fn unlink(&self, parent: INodeNo, name: &OsStr) -> R<()> {
        let s = &self.state;
        s.counters.op(Op::Unlink);
        let (_, pd) = s.parent_dentry(parent)?;
        // What is cached of a file nobody has open is of no use once its name is gone (if it
        // has other links, the next open makes a new mapping).
        let gone = s
            .nodes
            .dcache()
            .lookup_stat(&pd, name)
            .ok()
            .map(|(d, _)| d.identity());
        s.nodes
            .dcache()
            .unlink_at(&pd, name)
            .map_err(|e| errno::of_dcache(&e))?;
        if let Some(Some(ident)) = gone {
            s.files.forget_closed(&ident);
            s.restamp(&ident);
        }
        Ok(())
    }

    fn rmdir(&self, parent: INodeNo, name: &OsStr) -> R<()> {
        let s = &self.state;
        s.counters.op(Op::Rmdir);
        let (_, pd) = s.parent_dentry(parent)?;
        s.nodes
            .dcache()
            .rmdir_at(&pd, name)
            .map_err(|e| errno::of_dcache(&e))
    }

    fn symlink(&self, req: &Req, parent: INodeNo, name: &OsStr, target: &Path) -> R<FileAttr> {
        let s = &self.state;
        s.counters.op(Op::Symlink);
        let keep = Some(CapabilitySet::empty());
        s.make(req, parent, name, keep, |dir, name| {
            rustix::fs::symlinkat(target, dir, name)
        })
    }

    fn rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> R<()> {
        let s = &self.state;
        s.counters.op(Op::Rename);
        let mode = if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            RenameMode::Exchange
        } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            RenameMode::NoReplace
        } else if flags.is_empty() {
            RenameMode::Replace
        } else {
            return Err(Errno::EINVAL);
        };
        let (_, od) = s.parent_dentry(parent)?;
        let (_, nd) = s.parent_dentry(newparent)?;
        // A rename changes the files' ctime: note it as a change made through the mount.
        let moved: Vec<Identity> = [(&od, name), (&nd, newname)]
            .into_iter()
            .filter_map(|(d, n)| s.nodes.dcache().lookup_stat(d, n).ok())
            .filter_map(|(d, _)| d.identity())
            .collect();
        s.nodes
            .dcache()
            .rename_at2(&od, name, &nd, newname, mode)
            .map_err(|e| errno::of_dcache(&e))?;
        for ident in &moved {
            s.restamp(ident);
        }
        Ok(())
    }

    fn link(&self, req: &Req, ino: INodeNo, newparent: INodeNo, newname: &OsStr) -> R<FileAttr> {
        let s = &self.state;
        s.counters.op(Op::Link);
        let node = s.node(ino)?;
        if node.ident.kind == FileKind::Dir {
            return Err(Errno::EPERM);
        }
        let src = s.opath(&node)?;
        // A link makes no file: nothing to own, made as the daemon.
        let attr = s.make(req, newparent, newname, None, |dir, name| {
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
        })?;
        s.restamp(&node.ident);
        Ok(attr)
    }

    fn open(&self, ino: INodeNo, flags: OpenFlags) -> R<Open> {
        let s = &self.state;
        s.counters.op(Op::Open);
        let node = s.node(ino)?;
        if node.ident.kind == FileKind::Dir {
            return Err(Errno::EISDIR);
        }
        let writable = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let file = s.files.open(node.ident, || s.open_backing(&node))?;
        if writable && !file.writable {
            s.files.release(&file);
            return Err(Errno::EACCES);
        }
        Ok(s.add_handle(file, writable))
    }

    fn create(
        &self,
        req: &Req,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> R<(FileAttr, Open)> {
        let s = &self.state;
        s.counters.op(Op::Create);
        // Opened by the daemon for its one read-write backing descriptor.
        let open = |dir: BorrowedFd<'_>, name: &OsStr| {
            let base = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            match rustix::fs::openat(dir, name, base | OFlags::DIRECT, Mode::empty()) {
                Err(rustix::io::Errno::INVAL) => rustix::fs::openat(dir, name, base, Mode::empty()),
                r => r,
            }
        };
        let (node, st, fd) = s.create_file(req, parent, name, mode, flags, open)?;
        let path = match s.dentry(&node) {
            Ok(d) => s.nodes.dcache().path_of(&d),
            Err(_) => PathBuf::from(name),
        };
        let ident = node.ident;
        let opened = Opened {
            fd,
            writable: true,
            path,
        };
        let file = s.files.adopt(ident, opened)?;
        if flags & libc::O_TRUNC != 0 && !file.main.is_empty() {
            if let Err(e) = file.main.set_len(0) {
                s.files.release(&file);
                return Err(errno::of_filemap(&e));
            }
        }
        let attr = s.entry(&node, &st);
        Ok((attr, s.add_handle(file, true)))
    }

    fn read<'a>(
        &'a self,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        buf: ReadBuf<'a>,
    ) -> R<&'a [u8]> {
        self.state.read(fh, offset, buf)
    }

    fn read_deferred(
        &self,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
    ) -> Option<crate::serve::Deferred> {
        self.state.clone().read_deferred(fh, offset, size)
    }

    fn write(
        &self,
        req: &Req,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
    ) -> R<(u32, WriteBehind)> {
        self.state.write(req, fh, offset, data)
    }

    fn flush(&self, _ino: INodeNo, fh: FileHandle) -> R<()> {
        let s = &self.state;
        s.counters.op(Op::Flush);
        let h = s.handle(fh)?;
        if h.writable {
            // As NFS does at close: write back, and report what failed (once per handle).
            h.cf.flush().map_err(|e| errno::of_filemap(&e))?;
        }
        Ok(())
    }

    fn release(&self, _ino: INodeNo, fh: FileHandle) -> R<()> {
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
        Ok(())
    }

    fn fsync(&self, _ino: INodeNo, fh: FileHandle, datasync: bool) -> R<()> {
        let s = &self.state;
        s.counters.op(Op::Fsync);
        let h = s.handle(fh)?;
        // fdatasync, or fsync with the other metadata (times, owner) in the same backing call:
        // fsync after fdatasync would flush the device twice.
        let synced = if datasync {
            h.cf.fsync()
        } else {
            h.cf.sync_all()
        };
        synced.map_err(|e| errno::of_filemap(&e))
    }

    fn opendir(&self, ino: INodeNo, _flags: OpenFlags) -> R<Open> {
        self.state.opendir(ino)
    }

    fn readdir(&self, ino: INodeNo, fh: FileHandle, offset: u64, out: &mut dyn DirOut) -> R<()> {
        self.state.readdir(ino, fh, offset, out)
    }

    fn readdirplus(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        out: &mut dyn DirPlusOut,
    ) -> R<()> {
        self.state.readdirplus(ino, fh, offset, out)
    }

    fn releasedir(&self, _ino: INodeNo, fh: FileHandle) -> R<()> {
        self.state.dirs.lock().remove(&fh.0);
        Ok(())
    }

    fn fsyncdir(&self, _ino: INodeNo, fh: FileHandle, datasync: bool) -> R<()> {
        self.state.fsyncdir(fh, datasync)
    }

    fn statfs(&self, _ino: INodeNo) -> R<Statfs> {
        let s = &self.state;
        s.counters.op(Op::Statfs);
        let root = s.nodes.dcache().root();
        let st = s
            .nodes
            .dcache()
            .with_dir(&root, |fd| rustix::fs::fstatvfs(fd))
            .map_err(|e| errno::of_dcache(&e))?
            .map_err(errno::of_sys)?;
        Ok(Statfs::from(&st))
    }

    fn setxattr(&self, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32) -> R<()> {
        self.state.setxattr(ino, name, value, flags)
    }

    fn getxattr(&self, ino: INodeNo, name: &OsStr, size: u32) -> R<Xattr> {
        self.state.getxattr(ino, name, size)
    }

    fn listxattr(&self, ino: INodeNo, _size: u32) -> R<Xattr> {
        self.state.listxattr(ino)
    }

    fn removexattr(&self, ino: INodeNo, name: &OsStr) -> R<()> {
        self.state.removexattr(ino, name)
    }

    fn fallocate(
        &self,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> R<()> {
        self.state.fallocate(fh, offset, length, mode)
    }

    fn lseek(&self, _ino: INodeNo, fh: FileHandle, offset: i64, whence: i32) -> R<i64> {
        self.state.lseek(fh, offset, whence)
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
