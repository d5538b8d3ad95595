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
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, INodeNo, KernelConfig, OpenFlags, TimeOrNow,
};
use parking_lot::Mutex;
use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags, CWD};

use quire_fuse::errno::of_sys;
// The passthrough's nodes get the same attributes as `quire mount`'s.
use quire_fuse::fs::{attr_of as attr, statx_fd};
use quire_fuse::serve::{DirOut, Fuse, Open, ReadBuf, Req, Res, Serve, SetAttr, Statfs};

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

impl Passthrough {
    /// A passthrough of `src`, ready to mount; `cached` turns the kernel's FUSE page cache on.
    pub fn new(src: &Path, cached: bool) -> io::Result<Fuse<Passthrough>> {
        let fd = rustix::fs::openat(
            CWD,
            src,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let st = fstat(&fd)?;
        Ok(Fuse::new(Passthrough {
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
        }))
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

    /// A handle on the open file `fd`: with `cached`, the kernel keeps its data cached
    /// (`FOPEN_KEEP_CACHE`), else every read and write reaches the daemon.
    fn add_file(&self, fd: OwnedFd) -> Open {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files.lock().insert(fh, Arc::new(fd));
        let flags = if self.cached {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
        };
        Open {
            fh: FileHandle(fh),
            flags,
        }
    }
}

impl Serve for Passthrough {
    type AfterWrite = ();

    fn ttl(&self) -> Duration {
        self.ttl
    }

    fn init(&mut self, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        Ok(())
    }

    fn lookup(&self, parent: INodeNo, name: &OsStr) -> Res<FileAttr> {
        self.lookup_at(parent, name)
    }

    fn forget(&self, ino: INodeNo, nlookup: u64) {
        let mut nodes = self.nodes.lock();
        if let Some(n) = nodes.get(&ino.0) {
            if n.lookups.fetch_sub(nlookup, Ordering::Relaxed) <= nlookup {
                nodes.remove(&ino.0);
            }
        }
    }

    fn getattr(&self, ino: INodeNo, _fh: Option<FileHandle>) -> Res<FileAttr> {
        let n = self.node(ino)?;
        let st = n.stat().map_err(of_sys)?;
        Ok(attr(ino.0, &st))
    }

    fn setattr(&self, ino: INodeNo, set: &SetAttr) -> Res<FileAttr> {
        let n = self.node(ino)?;
        let opath = n.open(OFlags::PATH).map_err(of_sys)?;
        let p = proc_path(&opath);
        if let Some(size) = set.size {
            let r = match set.fh.and_then(|fh| self.file(fh).ok()) {
                Some(f) => rustix::fs::ftruncate(&*f, size),
                None => rustix::fs::openat(
                    CWD,
                    p.as_str(),
                    OFlags::WRONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .and_then(|f| rustix::fs::ftruncate(&f, size)),
            };
            r.map_err(of_sys)?;
        }
        if let Some(mode) = set.mode {
            let mode = Mode::from_raw_mode(mode & 0o7777);
            rustix::fs::chmodat(CWD, p.as_str(), mode, AtFlags::empty()).map_err(of_sys)?;
        }
        if set.atime.is_some() || set.mtime.is_some() {
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
                last_access: ts(set.atime),
                last_modification: ts(set.mtime),
            };
            rustix::fs::utimensat(CWD, p.as_str(), &times, AtFlags::empty()).map_err(of_sys)?;
        }
        let st = n.stat().map_err(of_sys)?;
        Ok(attr(ino.0, &st))
    }

    fn mkdir(&self, _req: &Req, parent: INodeNo, name: &OsStr, mode: u32) -> Res<FileAttr> {
        let p = self.node(parent)?;
        let mode = Mode::from_raw_mode(mode & 0o7777);
        rustix::fs::mkdirat(p.dir()?, name, mode).map_err(of_sys)?;
        self.lookup_at(parent, name)
    }

    fn unlink(&self, parent: INodeNo, name: &OsStr) -> Res<()> {
        let p = self.node(parent)?;
        rustix::fs::unlinkat(p.dir()?, name, AtFlags::empty()).map_err(of_sys)
    }

    fn open(&self, ino: INodeNo, flags: OpenFlags) -> Res<Open> {
        let n = self.node(ino)?;
        let fl = OFlags::from_bits_retain(flags.0 as u32)
            & !(OFlags::CREATE | OFlags::EXCL | OFlags::NOCTTY | OFlags::TRUNC | OFlags::DIRECT);
        let fd = n.open(fl).map_err(of_sys)?;
        Ok(self.add_file(fd))
    }

    fn create(
        &self,
        _req: &Req,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Res<(FileAttr, Open)> {
        let p = self.node(parent)?;
        let fl = OFlags::from_bits_retain(flags as u32) & !(OFlags::NOCTTY | OFlags::DIRECT);
        let dir = p.dir()?;
        let fd = rustix::fs::openat(
            dir,
            name,
            fl | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode & 0o7777),
        )
        .map_err(of_sys)?;
        let a = self.lookup_at(parent, name)?;
        Ok((a, self.add_file(fd)))
    }

    fn read<'a>(
        &'a self,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        buf: ReadBuf<'a>,
    ) -> Res<&'a [u8]> {
        let f = self.file(fh)?;
        let buf = buf.take();
        let mut done = 0;
        while done < buf.len() {
            match rustix::io::pread(&*f, &mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(of_sys(e)),
            }
        }
        Ok(&buf[..done])
    }

    fn write(
        &self,
        _req: &Req,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
    ) -> Res<(u32, ())> {
        let f = self.file(fh)?;
        let mut done = 0;
        while done < data.len() {
            match rustix::io::pwrite(&*f, &data[done..], offset + done as u64) {
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(of_sys(e)),
            }
        }
        Ok((done as u32, ()))
    }

    fn flush(&self, _ino: INodeNo, _fh: FileHandle) -> Res<()> {
        Ok(())
    }

    fn release(&self, _ino: INodeNo, fh: FileHandle) -> Res<()> {
        self.files.lock().remove(&fh.0);
        Ok(())
    }

    fn fsync(&self, _ino: INodeNo, fh: FileHandle, datasync: bool) -> Res<()> {
        let f = self.file(fh)?;
        let r = if datasync {
            rustix::fs::fdatasync(&*f)
        } else {
            rustix::fs::fsync(&*f)
        };
        r.map_err(of_sys)
    }

    fn opendir(&self, ino: INodeNo, _flags: OpenFlags) -> Res<Open> {
        let n = self.node(ino)?;
        let fd = n.open(OFlags::RDONLY | OFlags::DIRECTORY).map_err(of_sys)?;
        let mut out = Vec::new();
        let mut buf = Vec::with_capacity(32 * 1024);
        let mut it = rustix::fs::RawDir::new(&fd, buf.spare_capacity_mut());
        while let Some(e) = it.next() {
            let e = e.map_err(of_sys)?;
            let k = match e.file_type() {
                rustix::fs::FileType::Directory => FileType::Directory,
                rustix::fs::FileType::Symlink => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            out.push((e.file_name().to_bytes().to_vec(), e.ino(), k));
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().insert(fh, Arc::new(out));
        Ok(Open {
            fh: FileHandle(fh),
            flags: FopenFlags::empty(),
        })
    }

    fn readdir(&self, _ino: INodeNo, fh: FileHandle, offset: u64, out: &mut dyn DirOut) -> Res<()> {
        let d = self.dirs.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)?;
        for (i, (name, ino, k)) in d.iter().enumerate().skip(offset as usize) {
            let ino = INodeNo(self.id(*ino));
            if out.add(ino, i as u64 + 1, *k, OsStr::from_bytes(name)) {
                break;
            }
        }
        Ok(())
    }

    fn releasedir(&self, _ino: INodeNo, fh: FileHandle) -> Res<()> {
        self.dirs.lock().remove(&fh.0);
        Ok(())
    }

    fn statfs(&self, _ino: INodeNo) -> Res<Statfs> {
        let st = rustix::fs::fstatvfs(self.root.dir()?).map_err(of_sys)?;
        Ok(Statfs::from(&st))
    }
}

impl std::fmt::Debug for Passthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passthrough")
            .field("cached", &self.cached)
            .finish()
    }
}
