//! The state's side of the operations: from a FUSE node to its dentry and backing descriptor,
//! handles, attributes, directory listings, creation and attribute changes.

use super::*;

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
        use std::fmt::Write as _;
        // Without a page cache (the passthrough), no figures of one.
        if let Some(cs) = self.files.cache().map(|c| c.stats()) {
            let _ = writeln!(out, "capacity_bytes {}", self.cfg.capacity);
            let _ = writeln!(out, "frames {}", cs.frames);
            let _ = writeln!(out, "free_frames {}", cs.free_frames);
            let _ = writeln!(out, "cached_frames {}", cs.cached_frames);
            let _ = writeln!(out, "dirty_frames {}", cs.dirty_frames);
            let _ = writeln!(out, "mappings {}", cs.files);
        }
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

    pub(super) fn node(&self, id: INodeNo) -> R<Arc<Node>> {
        self.nodes.get(id.0).ok_or(Errno::ESTALE)
    }

    pub(super) fn dentry(&self, node: &Node) -> R<DentryRef<'_>> {
        self.nodes.dentry(node).ok_or(Errno::ESTALE)
    }

    /// Opens the name of `d` in its directory with `flags` (never following a symbolic link):
    /// the dentry cache's errors as an `errno`, the system call's left to the caller.
    pub(super) fn open_name(
        &self,
        d: &DentryRef<'_>,
        flags: OFlags,
    ) -> R<rustix::io::Result<OwnedFd>> {
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
    pub(super) fn check_same(node: &Node, fd: &OwnedFd) -> R<rustix::fs::Statx> {
        let st = statx_fd(fd.as_fd()).map_err(errno::of_sys)?;
        if !node.is(&st) {
            return Err(Errno::ESTALE);
        }
        Ok(st)
    }

    /// Opens `node`'s file with `flags` (never following a symbolic link), checked to be that
    /// file; with its attributes.
    pub(super) fn open_node(&self, node: &Node, flags: OFlags) -> R<(OwnedFd, rustix::fs::Statx)> {
        let d = self.dentry(node)?;
        let fd = self.open_name(&d, flags)?.map_err(errno::of_sys)?;
        let st = Self::check_same(node, &fd)?;
        Ok((fd, st))
    }

    pub(super) fn handle(&self, fh: FileHandle) -> R<Arc<Handle>> {
        self.handles[fh.0 as usize % HANDLE_SHARDS]
            .lock()
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    pub(super) fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    /// The backing file's `statx`, with the length and modification time of cached writes.
    pub(super) fn stat_node(&self, node: &Node) -> R<rustix::fs::Statx> {
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

    pub(super) fn stat_by_name(&self, node: &Node) -> R<rustix::fs::Statx> {
        let d = self.dentry(node)?;
        let st = if node.ident.kind == FileKind::Dir {
            self.nodes.dcache().with_dir(&d, statx_fd)
        } else {
            self.nodes.dcache().with_name(&d, |dir, name| {
                rustix::fs::statx(
                    dir,
                    name,
                    AtFlags::SYMLINK_NOFOLLOW,
                    StatxFlags::BASIC_STATS | StatxFlags::BTIME,
                )
            })
        }
        .map_err(|e| errno::of_dcache(&e))?
        .map_err(errno::of_sys)?;
        if !node.is(&st) {
            // The name now names another file (changed behind the mount).
            return Err(Errno::ESTALE);
        }
        Ok(st)
    }

    /// An `O_PATH` descriptor of the node's file, checked to be that file.
    pub(super) fn opath(&self, node: &Node) -> R<OwnedFd> {
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

    pub(super) fn entry(&self, node: &Node, st: &rustix::fs::Statx) -> FileAttr {
        let mut st = *st;
        if let Some(f) = self.files.get(&node.ident) {
            st.stx_size = f.main.len();
        }
        attr_of(node.id, &st)
    }

    // ---- opening ---------------------------------------------------------------------------

    /// Opens the backing file of `node` (read-write and `O_DIRECT` where possible).
    pub(super) fn open_backing(&self, node: &Node) -> R<Opened> {
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

    /// A handle on `file`, and what OPEN and CREATE answer for it: quire is the only data
    /// cache, so every open is `FOPEN_DIRECT_IO` (with parallel direct writes).
    pub(super) fn add_handle(&self, file: Arc<FileData>, writable: bool) -> Open {
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
        Open {
            fh: FileHandle(fh),
            flags: FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES,
        }
    }

    pub(super) fn check_size(&self, end: u64) -> R<()> {
        if end > self.cfg.max_file_size {
            Err(Errno::EFBIG)
        } else {
            Ok(())
        }
    }

    /// Runs `f` (one backing system call that creates something) as the caller of `req`
    /// where the daemon runs as root (see [`crate::creds`]), keeping of the capabilities in
    /// `keep` those the caller holds.
    pub(super) fn as_caller<T>(
        &self,
        req: &Req,
        keep: CapabilitySet,
        f: impl FnOnce() -> rustix::io::Result<T>,
    ) -> rustix::io::Result<T> {
        if !self.creds.switches_for(req.uid(), req.gid()) {
            return f();
        }
        self.creds.as_caller(&Caller::of(req), keep, f)?
    }

    // ---- directories -----------------------------------------------------------------------

    pub(super) fn read_dir(&self, dir: &DirHandle) -> R<Arc<Vec<DirEnt>>> {
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

    pub(super) fn dir_entries(
        &self,
        fh: FileHandle,
        offset: u64,
    ) -> R<(Arc<DirHandle>, Arc<Vec<DirEnt>>)> {
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
    pub(super) fn dirent_ino(&self, dir_node: u64, dev: u64, e: &DirEnt) -> u64 {
        match e.name.as_bytes() {
            b"." => dir_node,
            b".." if dir_node == ROOT_ID => ROOT_ID,
            _ => self.nodes.id_for(dev, e.ino),
        }
    }

    // ---- writes to the tree ------------------------------------------------------------------

    pub(super) fn parent_dentry(&self, parent: INodeNo) -> R<(Arc<Node>, DentryRef<'_>)> {
        let node = self.node(parent)?;
        let d = self.dentry(&node)?;
        Ok((node, d))
    }

    /// Creates `name` in `parent` with `op` and answers with its entry (one kernel lookup).
    /// With `as_caller` (the capabilities to keep), `op` runs as the caller, so what it makes
    /// is the caller's; without, as the daemon (a hard link makes no new file).
    pub(super) fn make(
        &self,
        req: &Req,
        parent: INodeNo,
        name: &OsStr,
        as_caller: Option<CapabilitySet>,
        op: impl FnOnce(BorrowedFd<'_>, &OsStr) -> rustix::io::Result<()>,
    ) -> R<FileAttr> {
        let (_, pd) = self.parent_dentry(parent)?;
        let (d, st, ()) = self
            .nodes
            .dcache()
            .make_at(&pd, name, |dir, name| match as_caller {
                Some(keep) => self.as_caller(req, keep, || op(dir, name)),
                None => op(dir, name),
            })
            .map_err(|e| errno::of_dcache(&e))?;
        let node = self.nodes.remember(d, &st);
        Ok(attr_of(node.id, &st))
    }

    /// CREATE's tree side: makes the regular file `name` in `parent` as the caller (an empty
    /// file, exactly what `O_CREAT|O_EXCL` makes: the caller's owner and group, the kernel's
    /// set-group-id rules), then opens it with `open` as the daemon, for the descriptor the
    /// data path uses. Without `O_EXCL` in `flags`, a name that exists already is opened as it
    /// is (the kernel checked the caller may). One kernel lookup of the node answered with.
    pub(super) fn create_file(
        &self,
        req: &Req,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
        open: impl FnOnce(BorrowedFd<'_>, &OsStr) -> rustix::io::Result<OwnedFd>,
    ) -> R<(Arc<Node>, rustix::fs::Statx, OwnedFd)> {
        let (_, pd) = self.parent_dentry(parent)?;
        let excl = flags & libc::O_EXCL != 0;
        let perm = Mode::from_raw_mode(mode & 0o7777);
        let (d, st, fd) = self
            .nodes
            .dcache()
            .make_at(&pd, name, |dir, name| {
                let made = self.as_caller(req, CapabilitySet::empty(), || {
                    rustix::fs::mknodat(dir, name, rustix::fs::FileType::RegularFile, perm, 0)
                });
                match made {
                    Err(rustix::io::Errno::EXIST) if !excl => {}
                    r => r?,
                }
                open(dir, name)
            })
            .map_err(|e| errno::of_dcache(&e))?;
        if u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFREG {
            return Err(Errno::EISDIR);
        }
        Ok((self.nodes.remember(d, &st), st, fd))
    }

    // ---- attributes ------------------------------------------------------------------------

    pub(super) fn set_attr(&self, node: &Node, set: &SetAttr) -> R<rustix::fs::Statx> {
        let (mode, uid, gid, atime, mtime) = (set.mode, set.uid, set.gid, set.atime, set.mtime);
        let file = match set.fh {
            Some(fh) => Some(self.handle(fh)?.file.clone()),
            None => self.files.get(&node.ident),
        };
        if let Some(size) = set.size {
            self.check_size(size)?;
            match &file {
                Some(f) => {
                    f.main.set_len(size).map_err(|e| errno::of_filemap(&e))?;
                    f.touch();
                }
                None => {
                    let (fd, _) = self.open_node(node, OFlags::WRONLY)?;
                    rustix::fs::ftruncate(&fd, size).map_err(errno::of_sys)?;
                }
            }
        }
        let rest = mode.is_some() || uid.is_some() || gid.is_some() || atime.is_some();
        let rest = rest || mtime.is_some();
        if !rest && set.size.is_some() && file.is_none() {
            return self.stat_node(node);
        }
        // Owner, mode and times: on the open backing file if there is one (it works after the
        // last name is gone), else on an O_PATH descriptor of the node's file.
        let opath;
        let fd: BorrowedFd<'_> = match &file {
            Some(f) => f.backing.fd(),
            None => {
                opath = self.opath(node)?;
                opath.as_fd()
            }
        };
        self.set_meta(node, set, fd, || {
            if let Some(f) = &file {
                // Data still cached would get a new modification time when written back:
                // write it back first, so the times set now stay.
                f.main.flush().map_err(|e| errno::of_filemap(&e))?;
                f.untouch();
            }
            Ok(())
        })?;
        if let Some(f) = &file {
            f.backing.restamp();
        }
        self.stat_node(node)
    }

    /// SETATTR's owner, mode and times of `node`, on `fd` (its open file, or an `O_PATH`
    /// descriptor of it); `before_times` runs before times are set. The length is the
    /// caller's to change (it is where the data path is).
    pub(super) fn set_meta(
        &self,
        node: &Node,
        set: &SetAttr,
        fd: BorrowedFd<'_>,
        before_times: impl FnOnce() -> R<()>,
    ) -> R<()> {
        let (mode, uid, gid, atime, mtime) = (set.mode, set.uid, set.gid, set.atime, set.mtime);
        let rest = mode.is_some() || uid.is_some() || gid.is_some() || atime.is_some();
        let rest = rest || mtime.is_some();
        // A change of nothing (`chown(f, -1, -1)`, which the kernel still sends) changes the
        // file's ctime on Linux: so it does here, through the same call on the backing file.
        if uid.is_some() || gid.is_some() || (!rest && set.size.is_none()) {
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
            before_times()?;
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
        Ok(())
    }

    // ---- extended attributes -----------------------------------------------------------------

    /// Notes a change of `ident`'s metadata made through the mount (link count, ctime), so
    /// that the next open does not take it for a change behind the mount.
    pub(super) fn restamp(&self, ident: &Identity) {
        if let Some(f) = self.files.get(ident) {
            f.backing.restamp();
        }
    }

    /// Runs an xattr call on the node's file through `/proc/self/fd/N` of an `O_PATH`
    /// descriptor (symbolic links hold no user attributes: `EPERM`/`ENODATA` as Linux says).
    pub(super) fn xattr_path(&self, node: &Node) -> R<(OwnedFd, PathBuf)> {
        if node.ident.kind == FileKind::Symlink {
            return Err(Errno::EPERM);
        }
        let fd = self.opath(node)?;
        let p = proc_path(fd.as_fd());
        Ok((fd, p))
    }
}
