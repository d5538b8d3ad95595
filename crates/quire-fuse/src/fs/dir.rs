//! Directory handles and listings (the kernel's `fs/fuse/readdir.c` side): a handle keeps the
//! listing it read at open, and `readdir`/`readdirplus` page through it.

use super::*;

impl FsState {
    pub(super) fn opendir(&self, ino: INodeNo, reply: ReplyOpen) {
        let s = self;
        let node = tri!(@state self, reply, s.node(ino));
        let d = tri!(@state self, reply, s.dentry(&node));
        let fd = tri!(
            @state self,
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

    pub(super) fn readdir(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let s = self;
        s.counters.op(Op::Readdir);
        let (dir, entries) = tri!(@state self, reply, s.dir_entries(fh, offset));
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            let ino = s.dirent_ino(ino.0, dir.dev, e);
            if reply.add(INodeNo(ino), i as u64 + 1, e.kind, &e.name) {
                break;
            }
        }
        reply.ok();
    }

    pub(super) fn readdirplus(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let s = self;
        s.counters.op(Op::Readdirplus);
        let (dir, entries) = tri!(@state self, reply, s.dir_entries(fh, offset));
        let dnode = tri!(@state self, reply, s.node(ino));
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

    pub(super) fn fsyncdir(&self, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let s = self;
        let dir = tri!(
            @state self,
            reply,
            s.dirs.lock().get(&fh.0).cloned().ok_or(Errno::EBADF)
        );
        let r = if datasync {
            rustix::fs::fdatasync(&dir.fd)
        } else {
            rustix::fs::fsync(&dir.fd)
        };
        tri!(@state self, reply, r.map_err(errno::of_sys));
        reply.ok();
    }
}
