//! Directory handles and listings (the kernel's `fs/fuse/readdir.c` side): a handle keeps the
//! listing it read at open, and `readdir`/`readdirplus` page through it.

use super::*;

impl FsState {
    pub(super) fn opendir(&self, ino: INodeNo) -> R<Open> {
        let s = self;
        let node = s.node(ino)?;
        let d = s.dentry(&node)?;
        let fd = s
            .nodes
            .dcache()
            .with_dir(&d, |fd| {
                rustix::fs::openat(
                    fd,
                    ".",
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            })
            .map_err(|e| errno::of_dcache(&e))?
            .map_err(errno::of_sys)?;
        let fh = s.new_fh();
        s.dirs.lock().insert(
            fh,
            Arc::new(DirHandle {
                fd,
                dev: node.ident.dev,
                entries: Mutex::new(None),
            }),
        );
        Ok(Open {
            fh: FileHandle(fh),
            flags: FopenFlags::empty(),
        })
    }

    pub(super) fn readdir(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        out: &mut dyn DirOut,
    ) -> R<()> {
        let s = self;
        s.counters.op(Op::Readdir);
        let (dir, entries) = s.dir_entries(fh, offset)?;
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            let ino = s.dirent_ino(ino.0, dir.dev, e);
            if out.add(INodeNo(ino), i as u64 + 1, e.kind, &e.name) {
                break;
            }
        }
        Ok(())
    }

    pub(super) fn readdirplus(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        out: &mut dyn DirPlusOut,
    ) -> R<()> {
        let s = self;
        s.counters.op(Op::Readdirplus);
        let (dir, entries) = s.dir_entries(fh, offset)?;
        let dnode = s.node(ino)?;
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
                if out.add(attr.ino, next, &e.name, &s.cfg.ttl, &attr, Generation(0)) {
                    break;
                }
                continue;
            }
            // Each entry counts as a lookup in the kernel.
            let Ok((node, st)) = s.nodes.lookup(&dnode, &e.name) else {
                continue;
            };
            let attr = s.entry(&node, &st);
            if out.add(attr.ino, next, &e.name, &s.cfg.ttl, &attr, Generation(0)) {
                // Did not fit: the kernel never saw it.
                s.nodes.forget(node.id, 1);
                break;
            }
        }
        Ok(())
    }

    pub(super) fn fsyncdir(&self, fh: FileHandle, datasync: bool) -> R<()> {
        let dir = self.dirs.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)?;
        let r = if datasync {
            rustix::fs::fdatasync(&dir.fd)
        } else {
            rustix::fs::fsync(&dir.fd)
        };
        r.map_err(errno::of_sys)
    }
}
