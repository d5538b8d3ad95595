//! [`Passthrough`]: the file system of [`QuireFs`] without quire's data cache — the comparison
//! the `fuse` benchmark measures quire's mount against (`quire mount --kind passthrough`).
//!
//! Everything but file data is [`QuireFs`]'s own code, called through its [`Serve`]
//! implementation: the node table over the dentry cache, lookups, attributes, `mknod`, `mkdir`,
//! `symlink`, `link`, `unlink`, `rmdir`, `rename` (all three modes), directories and
//! `readdirplus`, xattrs, `statfs`, acting as the caller for what a request creates
//! ([`crate::creds`]), and the errno mapping — one implementation of each operation, so that
//! the comparison runs every program quire's mount runs, and differs from it only in the data
//! path. That path is its own: an open is one backing descriptor (not `O_DIRECT`), a read is a
//! `pread` of it and a write a `pwrite`, with no cache in the daemon (the [`FsState`] is made
//! without a page cache: no frame pool, no flusher or reclaim thread). In front of it, the
//! kernel's FUSE page cache is on (`FOPEN_KEEP_CACHE`) with `cached`, else every open is
//! `FOPEN_DIRECT_IO` as quire's are, and the data comes from the page cache of the *backing*
//! file system behind the same round trip.

use super::*;

/// One open file: the backing descriptor reads and writes go to.
struct PHandle {
    fd: OwnedFd,
    /// The file's mode held a set-user-id or set-group-id bit at open: a write must clear them
    /// where the kernel does not ([`FsState::kill_privs_fd`]: with direct I/O it clears none,
    /// and with its page cache on it leaves the set-group-id bit of a file that is not
    /// group-executable, which it drops for a writer outside the file's group elsewhere).
    privs: bool,
}

/// One shard of the handle table: file handle → open file.
type PShard = Mutex<HashMap<u64, Arc<PHandle>>>;

/// The passthrough file system (see the module documentation).
pub struct Passthrough {
    tree: QuireFs,
    handles: Box<[PShard]>,
    cached: bool,
}

impl Passthrough {
    /// A passthrough of `src`, ready to mount; `cached` turns the kernel's FUSE page cache on.
    pub fn new(src: &Path, cached: bool) -> Result<Fuse<Passthrough>, SetupError> {
        // No page cache: the configuration's budget is not used.
        let tree = QuireFs::build(src, FsConfig::new(0), None)?;
        Ok(Fuse::new(Passthrough {
            tree,
            handles: (0..HANDLE_SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            cached,
        }))
    }

    fn state(&self) -> &FsState {
        &self.tree.state
    }

    fn handle(&self, fh: FileHandle) -> R<Arc<PHandle>> {
        self.handles[fh.0 as usize % HANDLE_SHARDS]
            .lock()
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// A handle on the open backing file `fd`, and what OPEN and CREATE answer for it.
    fn add_handle(&self, fd: OwnedFd, st: &rustix::fs::Statx) -> Open {
        let privs = u32::from(st.stx_mode) & (libc::S_ISUID | libc::S_ISGID) != 0;
        let fh = self.state().new_fh();
        self.handles[fh as usize % HANDLE_SHARDS]
            .lock()
            .insert(fh, Arc::new(PHandle { fd, privs }));
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

/// The flags the backing file is opened with for an `open(2)` with `flags`: its access mode
/// and status flags, less what the kernel has done already (creation, `O_TRUNC` as a SETATTR,
/// the append position) or what must not reach the backing file (`O_DIRECT`: the data path
/// is the backing file's page cache; `O_APPEND`: `pwrite` would ignore the kernel's offset).
fn backing_flags(flags: i32) -> OFlags {
    OFlags::from_bits_retain(flags as u32)
        & !(OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOCTTY
            | OFlags::TRUNC
            | OFlags::DIRECT
            | OFlags::APPEND)
}

impl Serve for Passthrough {
    type AfterWrite = ();

    fn ttl(&self) -> Duration {
        self.tree.ttl()
    }

    #[inline]
    fn failed(&self, errno: Errno) {
        self.tree.failed(errno);
    }

    fn init(&mut self, config: &mut KernelConfig) -> io::Result<()> {
        self.tree.init(config)
    }

    fn destroy(&mut self) {
        for s in self.handles.iter() {
            s.lock().clear();
        }
        self.tree.destroy();
    }

    fn lookup(&self, parent: INodeNo, name: &OsStr) -> R<FileAttr> {
        self.tree.lookup(parent, name)
    }

    fn forget(&self, ino: INodeNo, nlookup: u64) {
        self.tree.forget(ino, nlookup);
    }

    fn getattr(&self, ino: INodeNo, fh: Option<FileHandle>) -> R<FileAttr> {
        // With a handle (fstat), the open file answers even after its last name went.
        match fh.and_then(|fh| self.handle(fh).ok()) {
            Some(h) => {
                let node = self.state().node(ino)?;
                let st = statx_fd(h.fd.as_fd()).map_err(errno::of_sys)?;
                Ok(attr_of(node.id, &st))
            }
            None => self.tree.getattr(ino, None),
        }
    }

    fn setattr(&self, ino: INodeNo, set: &SetAttr) -> R<FileAttr> {
        let s = self.state();
        s.counters.op(Op::Setattr);
        let node = s.node(ino)?;
        let h = match set.fh {
            Some(fh) => Some(self.handle(fh)?),
            None => None,
        };
        if let Some(size) = set.size {
            let r = match &h {
                Some(h) => rustix::fs::ftruncate(&h.fd, size),
                None => rustix::fs::ftruncate(&s.open_node(&node, OFlags::WRONLY)?.0, size),
            };
            r.map_err(errno::of_sys)?;
        }
        let meta = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
        if meta || set.atime.is_some() || set.mtime.is_some() || set.size.is_none() {
            // Owner, mode and times: on the open file if the change came through one.
            let opath;
            let fd = match &h {
                Some(h) => h.fd.as_fd(),
                None => {
                    opath = s.opath(&node)?;
                    opath.as_fd()
                }
            };
            s.set_meta(&node, set, fd, || Ok(()))?;
        }
        let st = match &h {
            Some(h) => statx_fd(h.fd.as_fd()).map_err(errno::of_sys)?,
            None => s.stat_node(&node)?,
        };
        Ok(attr_of(node.id, &st))
    }

    fn readlink(&self, ino: INodeNo) -> R<Vec<u8>> {
        self.tree.readlink(ino)
    }

    fn mknod(&self, req: &Req, parent: INodeNo, name: &OsStr, mode: u32, rdev: u32) -> R<FileAttr> {
        self.tree.mknod(req, parent, name, mode, rdev)
    }

    fn mkdir(&self, req: &Req, parent: INodeNo, name: &OsStr, mode: u32) -> R<FileAttr> {
        self.tree.mkdir(req, parent, name, mode)
    }

    fn unlink(&self, parent: INodeNo, name: &OsStr) -> R<()> {
        self.tree.unlink(parent, name)
    }

    fn rmdir(&self, parent: INodeNo, name: &OsStr) -> R<()> {
        self.tree.rmdir(parent, name)
    }

    fn symlink(&self, req: &Req, parent: INodeNo, name: &OsStr, target: &Path) -> R<FileAttr> {
        self.tree.symlink(req, parent, name, target)
    }

    fn rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> R<()> {
        self.tree.rename(parent, name, newparent, newname, flags)
    }

    fn link(&self, req: &Req, ino: INodeNo, newparent: INodeNo, newname: &OsStr) -> R<FileAttr> {
        self.tree.link(req, ino, newparent, newname)
    }

    fn open(&self, ino: INodeNo, flags: OpenFlags) -> R<Open> {
        let s = self.state();
        s.counters.op(Op::Open);
        let node = s.node(ino)?;
        if node.ident.kind == FileKind::Dir {
            return Err(Errno::EISDIR);
        }
        let (fd, st) = s.open_node(&node, backing_flags(flags.0))?;
        Ok(self.add_handle(fd, &st))
    }

    fn create(
        &self,
        req: &Req,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> R<(FileAttr, Open)> {
        let s = self.state();
        s.counters.op(Op::Create);
        // O_TRUNC kept: a name that existed already is cut as `open(2)` would.
        let trunc = OFlags::from_bits_retain(flags as u32) & OFlags::TRUNC;
        let fl = backing_flags(flags) | trunc | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let (node, st, fd) = s.create_file(req, parent, name, mode, flags, |dir, name| {
            rustix::fs::openat(dir, name, fl, Mode::empty())
        })?;
        Ok((attr_of(node.id, &st), self.add_handle(fd, &st)))
    }

    fn read<'a>(
        &'a self,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        buf: ReadBuf<'a>,
    ) -> R<&'a [u8]> {
        let h = self.handle(fh)?;
        let buf = buf.take();
        let mut done = 0;
        while done < buf.len() {
            match rustix::io::pread(&h.fd, &mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(errno::of_sys(e)),
            }
        }
        Ok(&buf[..done])
    }

    fn write(
        &self,
        req: &Req,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
    ) -> R<(u32, ())> {
        let h = self.handle(fh)?;
        if h.privs {
            self.state().kill_privs_fd(req, h.fd.as_fd())?;
        }
        let mut done = 0;
        while done < data.len() {
            match rustix::io::pwrite(&h.fd, &data[done..], offset + done as u64) {
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(errno::of_sys(e)),
            }
        }
        Ok((done as u32, ()))
    }

    fn flush(&self, _ino: INodeNo, _fh: FileHandle) -> R<()> {
        // Every write reached the backing file before its reply: nothing is held here.
        Ok(())
    }

    fn release(&self, _ino: INodeNo, fh: FileHandle) -> R<()> {
        self.handles[fh.0 as usize % HANDLE_SHARDS]
            .lock()
            .remove(&fh.0);
        Ok(())
    }

    fn fsync(&self, _ino: INodeNo, fh: FileHandle, datasync: bool) -> R<()> {
        let h = self.handle(fh)?;
        let r = if datasync {
            rustix::fs::fdatasync(&h.fd)
        } else {
            rustix::fs::fsync(&h.fd)
        };
        r.map_err(errno::of_sys)
    }

    fn opendir(&self, ino: INodeNo, flags: OpenFlags) -> R<Open> {
        self.tree.opendir(ino, flags)
    }

    fn readdir(&self, ino: INodeNo, fh: FileHandle, offset: u64, out: &mut dyn DirOut) -> R<()> {
        self.tree.readdir(ino, fh, offset, out)
    }

    fn readdirplus(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        out: &mut dyn DirPlusOut,
    ) -> R<()> {
        self.tree.readdirplus(ino, fh, offset, out)
    }

    fn releasedir(&self, ino: INodeNo, fh: FileHandle) -> R<()> {
        self.tree.releasedir(ino, fh)
    }

    fn fsyncdir(&self, ino: INodeNo, fh: FileHandle, datasync: bool) -> R<()> {
        self.tree.fsyncdir(ino, fh, datasync)
    }

    fn statfs(&self, ino: INodeNo) -> R<Statfs> {
        self.tree.statfs(ino)
    }

    fn setxattr(&self, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32) -> R<()> {
        self.tree.setxattr(ino, name, value, flags)
    }

    fn getxattr(&self, ino: INodeNo, name: &OsStr, size: u32) -> R<Xattr> {
        self.tree.getxattr(ino, name, size)
    }

    fn listxattr(&self, ino: INodeNo, size: u32) -> R<Xattr> {
        self.tree.listxattr(ino, size)
    }

    fn removexattr(&self, ino: INodeNo, name: &OsStr) -> R<()> {
        self.tree.removexattr(ino, name)
    }

    fn fallocate(
        &self,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> R<()> {
        let h = self.handle(fh)?;
        // The modes quire's mount serves, so that the two answer alike: collapsing and
        // inserting ranges are refused as not supported (programs fall back).
        match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE => {}
            _ => return Err(Errno::EOPNOTSUPP),
        }
        let flags = FallocateFlags::from_bits_retain(mode as u32);
        rustix::fs::fallocate(&h.fd, flags, offset, length).map_err(errno::of_sys)
    }

    fn lseek(&self, _ino: INodeNo, fh: FileHandle, offset: i64, whence: i32) -> R<i64> {
        let h = self.handle(fh)?;
        if offset < 0 {
            return Err(Errno::ENXIO);
        }
        let at = offset as u64;
        let whence = match whence {
            libc::SEEK_DATA => rustix::fs::SeekFrom::Data(at),
            libc::SEEK_HOLE => rustix::fs::SeekFrom::Hole(at),
            _ => return Err(Errno::EINVAL),
        };
        // The handle's own position is not the kernel's (reads and writes are positioned):
        // moving it is harmless.
        let found = rustix::fs::seek(&h.fd, whence).map_err(errno::of_sys)?;
        Ok(found as i64)
    }
}

impl std::fmt::Debug for Passthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passthrough")
            .field("cached", &self.cached)
            .field("nodes", &self.state().nodes.len())
            .finish()
    }
}
