//! The `empty` file system of the `fuse` benchmark suite: the bare cost of the FUSE round trip.
//!
//! At mount it copies the *names* of the source tree (kinds, sizes, modes) into memory, and from
//! then on answers every request from memory without touching any data: lookups and `getattr`
//! from the copy, reads with zeros (as many as the file holds), writes by counting them (the
//! length grows, nothing is kept), `fsync` at once. Whatever a real file system spends beyond
//! this per request is its own work; this is what FUSE itself costs.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::RwLock;

struct ENode {
    kind: FileType,
    perm: u16,
    size: AtomicU64,
    parent: u64,
    children: HashMap<OsString, u64>,
    /// Children in readdir order.
    order: Vec<OsString>,
}

/// The empty file system.
pub struct Empty {
    nodes: RwLock<Vec<ENode>>,
    mtime: SystemTime,
    ttl: Duration,
}

static ZEROS: [u8; 1 << 20] = [0; 1 << 20];

impl Empty {
    /// A copy of the names under `src` (recursively; symbolic links are not followed).
    pub fn new(src: &Path) -> io::Result<Empty> {
        let mut nodes = vec![ENode {
            kind: FileType::Directory,
            perm: 0o755,
            size: AtomicU64::new(4096),
            parent: 1,
            children: HashMap::new(),
            order: Vec::new(),
        }];
        let mut todo = vec![(src.to_path_buf(), 1u64)];
        while let Some((dir, id)) = todo.pop() {
            for e in std::fs::read_dir(&dir)? {
                let e = e?;
                let md = e.path().symlink_metadata()?;
                let kind = if md.is_dir() {
                    FileType::Directory
                } else if md.file_type().is_symlink() {
                    FileType::Symlink
                } else {
                    FileType::RegularFile
                };
                nodes.push(ENode {
                    kind,
                    perm: (md.permissions().mode() & 0o7777) as u16,
                    size: AtomicU64::new(md.size()),
                    parent: id,
                    children: HashMap::new(),
                    order: Vec::new(),
                });
                let child = nodes.len() as u64;
                let p = &mut nodes[id as usize - 1];
                p.children.insert(e.file_name(), child);
                p.order.push(e.file_name());
                if kind == FileType::Directory {
                    todo.push((e.path(), child));
                }
            }
        }
        Ok(Empty {
            nodes: RwLock::new(nodes),
            mtime: SystemTime::now(),
            ttl: Duration::from_secs(1),
        })
    }

    fn attr(&self, id: u64) -> Result<FileAttr, Errno> {
        let nodes = self.nodes.read();
        let n = nodes
            .get((id as usize).wrapping_sub(1))
            .ok_or(Errno::ESTALE)?;
        let size = n.size.load(Ordering::Relaxed);
        Ok(FileAttr {
            ino: INodeNo(id),
            size,
            blocks: size.div_ceil(512),
            atime: self.mtime,
            mtime: self.mtime,
            ctime: self.mtime,
            crtime: self.mtime,
            kind: n.kind,
            perm: n.perm,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }
}

impl Filesystem for Empty {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let id = {
            let nodes = self.nodes.read();
            nodes
                .get((parent.0 as usize).wrapping_sub(1))
                .and_then(|p| p.children.get(name).copied())
        };
        match id.map(|id| self.attr(id)) {
            Some(Ok(a)) => reply.entry(&self.ttl, &a, Generation(0)),
            Some(Err(e)) => reply.error(e),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.0) {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if let Some(size) = size {
            if let Some(n) = self.nodes.read().get((ino.0 as usize).wrapping_sub(1)) {
                n.size.store(size, Ordering::Relaxed);
            }
        }
        match self.attr(ino.0) {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(
            FileHandle(ino.0),
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES,
        );
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let id = {
            let mut nodes = self.nodes.write();
            let Some(p) = nodes.get((parent.0 as usize).wrapping_sub(1)) else {
                reply.error(Errno::ENOENT);
                return;
            };
            match p.children.get(name) {
                Some(&id) => id,
                None => {
                    nodes.push(ENode {
                        kind: FileType::RegularFile,
                        perm: (mode & 0o7777) as u16,
                        size: AtomicU64::new(0),
                        parent: parent.0,
                        children: HashMap::new(),
                        order: Vec::new(),
                    });
                    let id = nodes.len() as u64;
                    let p = &mut nodes[parent.0 as usize - 1];
                    p.children.insert(name.to_os_string(), id);
                    p.order.push(name.to_os_string());
                    id
                }
            }
        };
        match self.attr(id) {
            Ok(a) => reply.created(
                &self.ttl,
                &a,
                Generation(0),
                FileHandle(id),
                FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let len = match self.nodes.read().get((ino.0 as usize).wrapping_sub(1)) {
            Some(n) => n.size.load(Ordering::Relaxed),
            None => {
                reply.error(Errno::ESTALE);
                return;
            }
        };
        let n = len.saturating_sub(offset).min(u64::from(size)) as usize;
        reply.data(&ZEROS[..n.min(ZEROS.len())]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Some(n) = self.nodes.read().get((ino.0 as usize).wrapping_sub(1)) {
            n.size
                .fetch_max(offset + data.len() as u64, Ordering::Relaxed);
        }
        reply.written(data.len() as u32);
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

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut nodes = self.nodes.write();
        match nodes.get_mut((parent.0 as usize).wrapping_sub(1)) {
            Some(p) => {
                if p.children.remove(name).is_some() {
                    p.order.retain(|n| n != name);
                    reply.ok();
                } else {
                    reply.error(Errno::ENOENT);
                }
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(ino.0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let nodes = self.nodes.read();
        let Some(d) = nodes.get((ino.0 as usize).wrapping_sub(1)) else {
            reply.error(Errno::ESTALE);
            return;
        };
        let mut all: Vec<(u64, FileType, &OsStr)> = vec![
            (ino.0, FileType::Directory, OsStr::new(".")),
            (d.parent, FileType::Directory, OsStr::new("..")),
        ];
        for name in &d.order {
            let id = d.children[name];
            all.push((id, nodes[id as usize - 1].kind, name));
        }
        for (i, (id, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(id), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 30, 1 << 29, 1 << 29, 1 << 20, 1 << 19, 4096, 255, 4096);
    }
}

impl std::fmt::Debug for Empty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Empty")
            .field("nodes", &self.nodes.read().len())
            .finish()
    }
}
