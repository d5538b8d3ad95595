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

use fuser::{Errno, FileAttr, FileHandle, FileType, FopenFlags, INodeNo, OpenFlags};
use parking_lot::RwLock;

use quire_fuse::serve::{DirOut, Fuse, Open, ReadBuf, Req, Res, Serve, SetAttr, Statfs};

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
    /// A copy of the names under `src` (recursively; symbolic links are not followed), ready
    /// to mount.
    pub fn new(src: &Path) -> io::Result<Fuse<Empty>> {
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
        Ok(Fuse::new(Empty {
            nodes: RwLock::new(nodes),
            mtime: SystemTime::now(),
            ttl: Duration::from_secs(1),
        }))
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

/// Every open answers direct I/O: each read and write reaches the daemon.
const OPEN_FLAGS: FopenFlags =
    FopenFlags::FOPEN_DIRECT_IO.union(FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES);

impl Serve for Empty {
    type AfterWrite = ();

    fn ttl(&self) -> Duration {
        self.ttl
    }

    fn lookup(&self, parent: INodeNo, name: &OsStr) -> Res<FileAttr> {
        let id = {
            let nodes = self.nodes.read();
            nodes
                .get((parent.0 as usize).wrapping_sub(1))
                .and_then(|p| p.children.get(name).copied())
        };
        self.attr(id.ok_or(Errno::ENOENT)?)
    }

    fn getattr(&self, ino: INodeNo, _fh: Option<FileHandle>) -> Res<FileAttr> {
        self.attr(ino.0)
    }

    fn setattr(&self, ino: INodeNo, set: &SetAttr) -> Res<FileAttr> {
        if let Some(size) = set.size {
            if let Some(n) = self.nodes.read().get((ino.0 as usize).wrapping_sub(1)) {
                n.size.store(size, Ordering::Relaxed);
            }
        }
        self.attr(ino.0)
    }

    fn open(&self, ino: INodeNo, _flags: OpenFlags) -> Res<Open> {
        Ok(Open {
            fh: FileHandle(ino.0),
            flags: OPEN_FLAGS,
        })
    }

    fn create(
        &self,
        _req: &Req,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _flags: i32,
    ) -> Res<(FileAttr, Open)> {
        let id = {
            let mut nodes = self.nodes.write();
            let p = nodes
                .get((parent.0 as usize).wrapping_sub(1))
                .ok_or(Errno::ENOENT)?;
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
        let open = Open {
            fh: FileHandle(id),
            flags: OPEN_FLAGS,
        };
        Ok((self.attr(id)?, open))
    }

    fn read<'a>(
        &'a self,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        buf: ReadBuf<'a>,
    ) -> Res<&'a [u8]> {
        let len = match self.nodes.read().get((ino.0 as usize).wrapping_sub(1)) {
            Some(n) => n.size.load(Ordering::Relaxed),
            None => return Err(Errno::ESTALE),
        };
        // Straight from the zeros: the buffer is never touched.
        let n = len.saturating_sub(offset).min(buf.size() as u64) as usize;
        Ok(&ZEROS[..n.min(ZEROS.len())])
    }

    fn write(
        &self,
        _req: &Req,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
    ) -> Res<(u32, ())> {
        if let Some(n) = self.nodes.read().get((ino.0 as usize).wrapping_sub(1)) {
            n.size
                .fetch_max(offset + data.len() as u64, Ordering::Relaxed);
        }
        Ok((data.len() as u32, ()))
    }

    fn flush(&self, _ino: INodeNo, _fh: FileHandle) -> Res<()> {
        Ok(())
    }

    fn fsync(&self, _ino: INodeNo, _fh: FileHandle, _datasync: bool) -> Res<()> {
        Ok(())
    }

    fn unlink(&self, parent: INodeNo, name: &OsStr) -> Res<()> {
        let mut nodes = self.nodes.write();
        let p = nodes
            .get_mut((parent.0 as usize).wrapping_sub(1))
            .ok_or(Errno::ENOENT)?;
        p.children.remove(name).ok_or(Errno::ENOENT)?;
        p.order.retain(|n| n != name);
        Ok(())
    }

    fn opendir(&self, ino: INodeNo, _flags: OpenFlags) -> Res<Open> {
        Ok(Open {
            fh: FileHandle(ino.0),
            flags: FopenFlags::empty(),
        })
    }

    fn readdir(&self, ino: INodeNo, _fh: FileHandle, offset: u64, out: &mut dyn DirOut) -> Res<()> {
        let nodes = self.nodes.read();
        let d = nodes
            .get((ino.0 as usize).wrapping_sub(1))
            .ok_or(Errno::ESTALE)?;
        let mut all: Vec<(u64, FileType, &OsStr)> = vec![
            (ino.0, FileType::Directory, OsStr::new(".")),
            (d.parent, FileType::Directory, OsStr::new("..")),
        ];
        for name in &d.order {
            let id = d.children[name];
            all.push((id, nodes[id as usize - 1].kind, name));
        }
        for (i, (id, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if out.add(INodeNo(id), i as u64 + 1, kind, name) {
                break;
            }
        }
        Ok(())
    }

    fn statfs(&self, _ino: INodeNo) -> Res<Statfs> {
        Ok(Statfs {
            blocks: 1 << 30,
            bfree: 1 << 29,
            bavail: 1 << 29,
            files: 1 << 20,
            ffree: 1 << 19,
            bsize: 4096,
            namelen: 255,
            frsize: 4096,
        })
    }
}

impl std::fmt::Debug for Empty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Empty")
            .field("nodes", &self.nodes.read().len())
            .finish()
    }
}
