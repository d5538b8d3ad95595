//! A minimal passthrough file system for the `fuse` benchmark suite: every request goes straight
//! to the backing file system, with no cache of its own — reads are `pread`s of the backing
//! file, so the data comes from the kernel's page cache of the *backing* file system behind the
//! same FUSE round trip quire pays. With `cached`, files are opened without direct I/O
//! (`FOPEN_KEEP_CACHE`): the kernel's FUSE page cache serves repeated reads without asking the
//! daemon, as most FUSE file systems run.
//!
//! Enough of the protocol for fio and `stat`: lookup/forget, getattr/setattr (size, mode,
//! times), open/create/read/write/flush/release/fsync, readdir, unlink, mkdir, statfs. Nodes are
//! backing inode numbers; directories hold an `O_PATH` descriptor, files are reached by name in
//! theirs (as quire's dentry cache does), so a tree of 50 000 files needs no 50 000 descriptors.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags, CWD};

use crate::errno::of_sys;
// The passthrough's nodes get the same attributes as `quire mount`'s.
use crate::fs::{attr_of as attr, statx_fd};

/// A directory's entries: name, inode number, type.
type Listing = Vec<(Vec<u8>, u64, FileType)>;

/// A node: a directory with its `O_PATH` descriptor, or a file by its name in its directory
/// (one descriptor per directory, as quire's dentry cache holds; this passthrough has no rename,
/// so names stay true).
struct PNode {
    fd: Option<OwnedFd>,
    parent: Option<Arc<PNode>>,
    name: std::ffi::OsString,
    lookups: AtomicU64,
}

impl PNode {
    /// The directory's descriptor (`ENOTDIR` for a file).
    fn dir(&self) -> Result<&OwnedFd, Errno> {
        self.fd.as_ref().ok_or(Errno::ENOTDIR)
    }

    fn stat(&self) -> rustix::io::Result<rustix::fs::Statx> {
        match (&self.fd, &self.parent) {
            (Some(fd), _) => fstat(fd),
            (None, Some(p)) => rustix::fs::statx(
                p.fd.as_ref().expect("a parent is a directory"),
                &self.name,
                AtFlags::SYMLINK_NOFOLLOW,
                StatxFlags::BASIC_STATS,
            ),
            (None, None) => Err(rustix::io::Errno::STALE),
        }
    }

    /// Opens the node's file with `flags` (never following a final symbolic link).
    fn open(&self, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        match (&self.fd, &self.parent) {
            (Some(fd), _) => rustix::fs::openat(fd, ".", flags | OFlags::CLOEXEC, Mode::empty()),
            (None, Some(p)) => rustix::fs::openat(
                p.fd.as_ref().expect("a parent is a directory"),
                &self.name,
                flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ),
            (None, None) => Err(rustix::io::Errno::STALE),
        }
    }
}

/// The passthrough file system.
pub struct Passthrough {
    root: Arc<PNode>,
    root_ino: u64,
    nodes: Mutex<HashMap<u64, Arc<PNode>>>,
    files: Mutex<HashMap<u64, Arc<OwnedFd>>>,
    dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    next_fh: AtomicU64,
    cached: bool,
    ttl: Duration,
}

fn fstat(fd: impl AsFd) -> rustix::io::Result<rustix::fs::Statx> {
    statx_fd(fd.as_fd())
}

fn proc_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

thread_local! {
    static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

macro_rules! tri {
    ($reply:ident, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(err) => {
                $reply.error(err);
                return;
            }
        }
    };
}

impl Passthrough {
    /// A passthrough of `src`; `cached` turns the kernel's FUSE page cache on.
    pub fn new(src: &Path, cached: bool) -> io::Result<Passthrough> {
        let fd = rustix::fs::openat(
            CWD,
            src,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let st = fstat(&fd)?;
        Ok(Passthrough {
            root: Arc::new(PNode {
                fd: Some(fd),
                parent: None,
                name: ".".into(),
                lookups: AtomicU64::new(1),
            }),
            root_ino: st.stx_ino,
            nodes: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            cached,
            ttl: Duration::from_secs(1),
        })
    }

    fn id(&self, ino: u64) -> u64 {
        if ino == self.root_ino {
            1
        } else {
            ino
        }
    }

    fn node(&self, id: INodeNo) -> Result<Arc<PNode>, Errno> {
        if id.0 == 1 {
            return Ok(self.root.clone());
        }
        self.nodes.lock().get(&id.0).cloned().ok_or(Errno::ESTALE)
    }

    fn remember(&self, node: PNode, st: &rustix::fs::Statx) -> FileAttr {
        let id = self.id(st.stx_ino);
        if id != 1 {
            let mut nodes = self.nodes.lock();
            let n = nodes.entry(id).or_insert_with(|| Arc::new(node));
            n.lookups.fetch_add(1, Ordering::Relaxed);
        }
        attr(id, st)
    }

    fn lookup_at(&self, parent: INodeNo, name: &OsStr) -> Result<FileAttr, Errno> {
        let p = self.node(parent)?;
        let dir = p.dir()?;
        let st = rustix::fs::statx(
            dir,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::BASIC_STATS,
        )
        .map_err(of_sys)?;
        let fd = if u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR {
            Some(
                rustix::fs::openat(
                    dir,
                    name,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(of_sys)?,
            )
        } else {
            None
        };
        let node = PNode {
            fd,
            parent: Some(p.clone()),
            name: name.to_os_string(),
            lookups: AtomicU64::new(0),
        };
        Ok(self.remember(node, &st))
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<OwnedFd>, Errno> {
        self.files.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    fn fopen(&self) -> FopenFlags {
        if self.cached {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
        }
    }
}

impl Filesystem for Passthrough {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_background(64);
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let a = tri!(reply, self.lookup_at(parent, name));
        reply.entry(&self.ttl, &a, Generation(0));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut nodes = self.nodes.lock();
        if let Some(n) = nodes.get(&ino.0) {
            if n.lookups.fetch_sub(nlookup, Ordering::Relaxed) <= nlookup {
                nodes.remove(&ino.0);
            }
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let n = tri!(reply, self.node(ino));
        let st = tri!(reply, n.stat().map_err(of_sys));
        reply.attr(&self.ttl, &attr(ino.0, &st));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
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
        let n = tri!(reply, self.node(ino));
        let opath = tri!(reply, n.open(OFlags::PATH).map_err(of_sys));
        let p = proc_path(&opath);
        if let Some(size) = size {
            let r = match fh.and_then(|fh| self.file(fh).ok()) {
                Some(f) => rustix::fs::ftruncate(&*f, size),
                None => rustix::fs::openat(
                    CWD,
                    p.as_str(),
                    OFlags::WRONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .and_then(|f| rustix::fs::ftruncate(&f, size)),
            };
            tri!(reply, r.map_err(of_sys));
        }
        if let Some(mode) = mode {
            tri!(
                reply,
                rustix::fs::chmodat(
                    CWD,
                    p.as_str(),
                    Mode::from_raw_mode(mode & 0o7777),
                    AtFlags::empty()
                )
                .map_err(of_sys)
            );
        }
        if atime.is_some() || mtime.is_some() {
            let ts = |t: Option<TimeOrNow>| match t {
                None => rustix::fs::Timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                },
                Some(TimeOrNow::Now) => rustix::fs::Timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                },
                Some(TimeOrNow::SpecificTime(t)) => {
                    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                    rustix::fs::Timespec {
                        tv_sec: d.as_secs() as i64,
                        tv_nsec: i64::from(d.subsec_nanos()),
                    }
                }
            };
            let times = rustix::fs::Timestamps {
                last_access: ts(atime),
                last_modification: ts(mtime),
            };
            tri!(
                reply,
                rustix::fs::utimensat(CWD, p.as_str(), &times, AtFlags::empty()).map_err(of_sys)
            );
        }
        let st = tri!(reply, n.stat().map_err(of_sys));
        reply.attr(&self.ttl, &attr(ino.0, &st));
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let p = tri!(reply, self.node(parent));
        tri!(
            reply,
            p.dir().and_then(
                |d| rustix::fs::mkdirat(d, name, Mode::from_raw_mode(mode & 0o7777))
                    .map_err(of_sys)
            )
        );
        let a = tri!(reply, self.lookup_at(parent, name));
        reply.entry(&self.ttl, &a, Generation(0));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let p = tri!(reply, self.node(parent));
        tri!(
            reply,
            p.dir()
                .and_then(|d| rustix::fs::unlinkat(d, name, AtFlags::empty()).map_err(of_sys))
        );
        reply.ok();
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let n = tri!(reply, self.node(ino));
        let fl = OFlags::from_bits_retain(flags.0 as u32)
            & !(OFlags::CREATE | OFlags::EXCL | OFlags::NOCTTY | OFlags::TRUNC | OFlags::DIRECT);
        let fd = tri!(reply, n.open(fl).map_err(of_sys));
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files.lock().insert(fh, Arc::new(fd));
        reply.opened(FileHandle(fh), self.fopen());
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let p = tri!(reply, self.node(parent));
        let fl = OFlags::from_bits_retain(flags as u32) & !(OFlags::NOCTTY | OFlags::DIRECT);
        let dir = tri!(reply, p.dir());
        let fd = tri!(
            reply,
            rustix::fs::openat(
                dir,
                name,
                fl | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode & 0o7777),
            )
            .map_err(of_sys)
        );
        let a = tri!(reply, self.lookup_at(parent, name));
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files.lock().insert(fh, Arc::new(fd));
        reply.created(&self.ttl, &a, Generation(0), FileHandle(fh), self.fopen());
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
        let f = tri!(reply, self.file(fh));
        BUF.with(|b| {
            let mut buf = b.borrow_mut();
            if buf.len() < size as usize {
                buf.resize(size as usize, 0);
            }
            let mut done = 0;
            while done < size as usize {
                match rustix::io::pread(&*f, &mut buf[done..size as usize], offset + done as u64) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        reply.error(of_sys(e));
                        return;
                    }
                }
            }
            reply.data(&buf[..done]);
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
        let f = tri!(reply, self.file(fh));
        let mut done = 0;
        while done < data.len() {
            match rustix::io::pwrite(&*f, &data[done..], offset + done as u64) {
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    reply.error(of_sys(e));
                    return;
                }
            }
        }
        reply.written(done as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
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
        self.files.lock().remove(&fh.0);
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
        let f = tri!(reply, self.file(fh));
        let r = if datasync {
            rustix::fs::fdatasync(&*f)
        } else {
            rustix::fs::fsync(&*f)
        };
        tri!(reply, r.map_err(of_sys));
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let n = tri!(reply, self.node(ino));
        let fd = tri!(
            reply,
            n.open(OFlags::RDONLY | OFlags::DIRECTORY).map_err(of_sys)
        );
        let mut out = Vec::new();
        let mut buf = Vec::with_capacity(32 * 1024);
        let mut it = rustix::fs::RawDir::new(&fd, buf.spare_capacity_mut());
        while let Some(e) = it.next() {
            let e = tri!(reply, e.map_err(of_sys));
            let k = match e.file_type() {
                rustix::fs::FileType::Directory => FileType::Directory,
                rustix::fs::FileType::Symlink => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            out.push((e.file_name().to_bytes().to_vec(), e.ino(), k));
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().insert(fh, Arc::new(out));
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let d = tri!(
            reply,
            self.dirs.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)
        );
        for (i, (name, ino, k)) in d.iter().enumerate().skip(offset as usize) {
            if reply.add(
                INodeNo(self.id(*ino)),
                i as u64 + 1,
                *k,
                OsStr::from_bytes(name),
            ) {
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
        self.dirs.lock().remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let root = tri!(reply, self.root.dir());
        let st = tri!(reply, rustix::fs::fstatvfs(root).map_err(of_sys));
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
}

impl std::fmt::Debug for Passthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passthrough")
            .field("cached", &self.cached)
            .finish()
    }
}
