//! The FUSE operations: [`Serve`] for [`ObjectFs`].

use std::ffi::OsStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    OpenFlags, RenameFlags,
};
use quire_fuse::serve::{
    DirOut, DirPlusOut, Open, ReadBuf, Req, Res, Serve, SetAttr, Statfs, Xattr,
};

use super::nodes::join;
use super::nodes::Kind;
use super::remote::Found;
use super::{err, fm, ObjectFs, STATS_XATTR};

impl Serve for ObjectFs {
    type AfterWrite = ();

    fn ttl(&self) -> Duration {
        self.config.ttl
    }

    fn init(&mut self, config: &mut KernelConfig) -> std::io::Result<()> {
        // READDIRPLUS where the kernel judges a listing will be followed by lookups (the
        // first read of a directory, `ls -l`); a kernel without it keeps READDIR.
        for f in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
        ] {
            let _ = config.add_capabilities(f);
        }
        Ok(())
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
        _req: &Req,
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

    fn mkdir(&self, _req: &Req, parent: INodeNo, name: &OsStr, _mode: u32) -> Res<FileAttr> {
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
        // The object at `to` was replaced: a handle of the old one still open (its RELEASE may
        // come after this, from another CPU's queue) must not leave its cached file to the
        // next open.
        let _ = self.cache.replaced(&to);
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
        _req: &Req,
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
        _req: &Req,
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

    fn readdir(&self, _ino: INodeNo, fh: FileHandle, offset: u64, out: &mut dyn DirOut) -> Res<()> {
        let d = self.dirs.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)?;
        for (i, e) in d.iter().enumerate().skip(offset as usize) {
            let kind = e.found.kind.file_type();
            if out.add(INodeNo(e.ino), i as u64 + 1, kind, e.name.as_ref()) {
                break;
            }
        }
        Ok(())
    }

    /// Each entry with the attributes its directory's listing gave (size and `Last-Modified`
    /// of each object), so `ls -l` of a directory costs its one LIST rather than a HEAD and a
    /// LIST per name. A file this mount has open answers from its handle, as a lookup does.
    fn readdirplus(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        out: &mut dyn DirPlusOut,
    ) -> Res<()> {
        let d = self.dirs.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)?;
        let (dir, _, _, _) = self.node(ino)?;
        let ttl = self.config.ttl;
        for (i, e) in d.iter().enumerate().skip(offset as usize) {
            let next = i as u64 + 1;
            if e.name == "." || e.name == ".." {
                // Not looked up by the kernel: no count taken.
                let attr = self.attr(e.ino, Kind::Dir, 0, e.found.mtime);
                if out.add(
                    INodeNo(e.ino),
                    next,
                    e.name.as_ref(),
                    &ttl,
                    &attr,
                    Generation(0),
                ) {
                    break;
                }
                continue;
            }
            let path = join(&dir, &e.name);
            let found = match self.shared_of(&path) {
                Some(s) if e.found.kind == Kind::File => Found {
                    kind: Kind::File,
                    size: s.handle.len(),
                    mtime: s.written.lock().unwrap_or(e.found.mtime),
                },
                _ => e.found,
            };
            // Each entry added counts as a kernel lookup.
            let attr = self.remember(&path, found);
            if out.add(attr.ino, next, e.name.as_ref(), &ttl, &attr, Generation(0)) {
                // Did not fit: the kernel never saw it.
                self.forget(attr.ino, 1);
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
            let memory = self.cache.memory();
            text.push_str(&memory.to_string());
            // The FUSE channel's buffers are the mount's, beside the cache's budget.
            let ring = quire_fuse::stats::channel().map_or(0, |c| c.buffer_bytes);
            text.push_str(&format!(
                "fuse_ring_buffer_bytes {ring}\nmemory_mount_budget_bytes {}\n",
                memory.budget + ring
            ));
            if let Some(c) = quire_fuse::stats::channel() {
                text.push_str(&format!("fuse_channel {c}\n"));
            }
            quire_fuse::stats::render_sched(&mut text);
            return Ok(Xattr::Value(text.into_bytes()));
        }
        Ok(Xattr::NoValue(Errno::ENODATA))
    }

    fn listxattr(&self, _ino: INodeNo, _size: u32) -> Res<Xattr> {
        Ok(Xattr::Value(Vec::new()))
    }
}
