//! The layer between fuser and this crate's file systems: a file system implements [`Serve`] —
//! one method per FUSE operation, taking only what the operation needs and returning
//! `Result<T, Errno>` — and [`Fuse`] makes it a [`fuser::Filesystem`]: it owns fuser's
//! signatures, sends each result as the kernel's reply, and tells the file system of every error
//! it answers with ([`Serve::failed`], where [`QuireFs`](crate::QuireFs) counts them). An
//! operation is declared once, here; a file system only does its work.
//!
//! Where a reply cannot be a returned value without a copy, the method is given a place to
//! write: a read fills the serving thread's buffer ([`ReadBuf`]), or returns bytes it already
//! holds, and the reply is sent from that slice; a directory listing adds its entries to the
//! kernel's reply buffer as it goes. Work a write leaves for after its reply (quire's
//! write-behind) comes back with the count written ([`AfterReply`]) and runs once the kernel has
//! its answer.

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::time::Duration;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, KernelConfig,
    OpenFlags, RenameFlags, ReplyDirectory, ReplyDirectoryPlus, TimeOrNow,
};

pub(crate) mod adapter;
mod reader;

pub use adapter::Fuse;

/// Who sent a request: the calling thread's file-system ids and its thread id, as the kernel
/// puts them in every request's header. The same on every channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Req {
    uid: u32,
    gid: u32,
    pid: u32,
}

impl Req {
    /// A request from `uid`/`gid`, thread `pid`.
    pub const fn new(uid: u32, gid: u32, pid: u32) -> Req {
        Req { uid, gid, pid }
    }

    /// The caller's file-system user id.
    #[inline]
    pub const fn uid(&self) -> u32 {
        self.uid
    }

    /// The caller's file-system group id.
    #[inline]
    pub const fn gid(&self) -> u32 {
        self.gid
    }

    /// The calling thread's id (0 where the kernel has none to give).
    #[inline]
    pub const fn pid(&self) -> u32 {
        self.pid
    }
}

impl From<&fuser::Request> for Req {
    #[inline]
    fn from(r: &fuser::Request) -> Req {
        Req::new(r.uid(), r.gid(), r.pid())
    }
}

/// Where READDIR's entries go: the channel's reply buffer.
pub trait DirOut {
    /// Adds an entry; `offset` is where the next READDIR starts after it. `true`: the buffer is
    /// full and the entry was not added.
    fn add(&mut self, ino: INodeNo, offset: u64, kind: FileType, name: &OsStr) -> bool;
}

impl DirOut for ReplyDirectory {
    #[inline]
    fn add(&mut self, ino: INodeNo, offset: u64, kind: FileType, name: &OsStr) -> bool {
        ReplyDirectory::add(self, ino, offset, kind, name)
    }
}

/// Where READDIRPLUS's entries go: the channel's reply buffer.
pub trait DirPlusOut {
    /// Adds an entry with its attributes, valid for `ttl`; `true`: the buffer is full and the
    /// entry was not added (and so does not count as a lookup).
    fn add(
        &mut self,
        ino: INodeNo,
        offset: u64,
        name: &OsStr,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) -> bool;
}

impl DirPlusOut for ReplyDirectoryPlus {
    #[inline]
    fn add(
        &mut self,
        ino: INodeNo,
        offset: u64,
        name: &OsStr,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) -> bool {
        ReplyDirectoryPlus::add(self, ino, offset, name, ttl, attr, generation)
    }
}

/// `Ok`, or the `errno` the kernel is answered with.
pub type Res<T> = Result<T, Errno>;

/// A READ answered later ([`Serve::read_deferred`]): the bytes (fewer at the end of the file)
/// or the errno.
pub type Deferred =
    std::pin::Pin<Box<dyn std::future::Future<Output = Res<Vec<u8>>> + Send + 'static>>;

/// What OPEN, OPENDIR and CREATE answer: the file system's handle for the open file and how the
/// kernel is to treat it (`FOPEN_DIRECT_IO`: no kernel page cache of its data...).
#[derive(Clone, Copy, Debug)]
pub struct Open {
    /// The handle the kernel passes back with every request on the open file.
    pub fh: FileHandle,
    /// The `FOPEN_*` flags.
    pub flags: FopenFlags,
}

impl Open {
    /// fuser's answer for a file system that does not say: handle 0, no flags.
    pub const NONE: Open = Open {
        fh: FileHandle(0),
        flags: FopenFlags::empty(),
    };
}

/// What SETATTR asks to change (`None`: leave it). The BSD and macOS attributes fuser also
/// passes are not used here.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    /// The open file the change came through (`ftruncate`, `fchmod`...), if any.
    pub fh: Option<FileHandle>,
    /// Permission bits (and set-id bits).
    pub mode: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Length.
    pub size: Option<u64>,
    /// Access time.
    pub atime: Option<TimeOrNow>,
    /// Modification time.
    pub mtime: Option<TimeOrNow>,
}

/// What STATFS answers (`statvfs(2)`'s fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Statfs {
    /// Size of the file system in `frsize` units.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks for unprivileged users.
    pub bavail: u64,
    /// Inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// The preferred block size.
    pub bsize: u32,
    /// The longest name.
    pub namelen: u32,
    /// The fragment size.
    pub frsize: u32,
}

impl Default for Statfs {
    /// fuser's answer for a file system that does not say: all zero, 512-byte blocks, names of
    /// up to 255 bytes.
    fn default() -> Statfs {
        Statfs {
            blocks: 0,
            bfree: 0,
            bavail: 0,
            files: 0,
            ffree: 0,
            bsize: 512,
            namelen: 255,
            frsize: 0,
        }
    }
}

impl From<&rustix::fs::StatVfs> for Statfs {
    /// A backing file system's figures, passed on.
    fn from(st: &rustix::fs::StatVfs) -> Statfs {
        Statfs {
            blocks: st.f_blocks,
            bfree: st.f_bfree,
            bavail: st.f_bavail,
            files: st.f_files,
            ffree: st.f_ffree,
            bsize: st.f_bsize as u32,
            namelen: st.f_namemax as u32,
            frsize: st.f_frsize as u32,
        }
    }
}

/// What GETXATTR and LISTXATTR answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Xattr {
    /// The value (or the list of names, each ending in a NUL). [`Fuse`] answers a request of
    /// size 0 with its length, one too small with `ERANGE`, else with the bytes.
    Value(Vec<u8>),
    /// The file's own answer that it has no such value (`ENODATA`, `EOPNOTSUPP`...): sent as
    /// it is, and not a failure of the file system ([`Serve::failed`] is not told).
    NoValue(Errno),
}

/// A read's destination, lent to [`Serve::read`] for one request: the serving thread's buffer
/// (classic channel: it grows to the largest read it has served and stays, so that reads
/// allocate nothing), or the reply's own buffer (io_uring channel: the bytes read go straight
/// where the kernel copies the reply from).
#[derive(Debug)]
pub struct ReadBuf<'a> {
    buf: Dest<'a>,
    size: usize,
}

#[derive(Debug)]
enum Dest<'a> {
    Grow(&'a mut Vec<u8>),
    Fixed(&'a mut [u8]),
}

impl<'a> ReadBuf<'a> {
    /// A destination of exactly `buf.len()` bytes.
    pub fn fixed(buf: &'a mut [u8]) -> ReadBuf<'a> {
        ReadBuf {
            size: buf.len(),
            buf: Dest::Fixed(buf),
        }
    }

    /// `size` bytes of `buf`, grown (zero-filled) if it is shorter.
    pub(crate) fn grow(buf: &'a mut Vec<u8>, size: usize) -> ReadBuf<'a> {
        ReadBuf {
            buf: Dest::Grow(buf),
            size,
        }
    }

    /// How many bytes the kernel asked for.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The buffer, [`size`](Self::size) bytes long (zero-filled where it had to grow).
    pub fn take(self) -> &'a mut [u8] {
        match self.buf {
            Dest::Grow(buf) => {
                if buf.len() < self.size {
                    buf.resize(self.size, 0);
                }
                &mut buf[..self.size]
            }
            Dest::Fixed(buf) => buf,
        }
    }
}

/// Work an operation leaves for after its reply is sent (see [`Serve::write`]).
pub trait AfterReply: Send + 'static {
    /// Does it (after the kernel has its answer: on the thread that served the request on the
    /// classic channel, on a thread of its own on the io_uring channel, whose serving thread
    /// takes the CPU's next request at once).
    fn run(self);

    /// Whether there is nothing to do (no thread is started for it).
    fn is_empty(&self) -> bool {
        false
    }
}

impl AfterReply for () {
    #[inline]
    fn run(self) {}

    #[inline]
    fn is_empty(&self) -> bool {
        true
    }
}

/// A file system served through [`Fuse`]: one method per FUSE operation. Each takes what the
/// operation needs (the node, the handle, the name...; `req` where the caller's identity
/// matters) and returns the value the kernel is answered with, or the `errno`. An operation a
/// file system does not implement answers as fuser's own default does (mostly `ENOSYS`, which
/// the kernel remembers for some operations and stops sending).
#[allow(unused_variables)]
pub trait Serve: Send + Sync + 'static {
    /// Work [`Serve::write`] leaves for after its reply (`()`: none).
    type AfterWrite: AfterReply;

    /// How long the kernel may keep the names and attributes it is given.
    fn ttl(&self) -> Duration;

    /// Told of every error a request is answered with (not of [`Xattr::NoValue`]).
    #[inline]
    fn failed(&self, errno: Errno) {}

    /// INIT: what to ask of the kernel, beyond what [`Fuse`] asks for every file system here
    /// (requests of up to 1 MiB, 64 in the background).
    fn init(&mut self, config: &mut KernelConfig) -> io::Result<()> {
        Ok(())
    }

    /// The session ends (unmounted): the kernel sends nothing more and holds no node.
    fn destroy(&mut self) {}

    /// LOOKUP: the attributes of `name` in directory `parent`. Counts as one kernel lookup of
    /// the node it answers with, given back by FORGET.
    fn lookup(&self, parent: INodeNo, name: &OsStr) -> Res<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// FORGET: the kernel gives back `nlookup` of its lookups of `ino` (no answer).
    fn forget(&self, ino: INodeNo, nlookup: u64) {}

    /// GETATTR: the attributes of `ino`, through the open file `fh` if the caller has one
    /// (`fstat`).
    fn getattr(&self, ino: INodeNo, fh: Option<FileHandle>) -> Res<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// SETATTR: changes what `set` names, and answers with the attributes after it.
    fn setattr(&self, ino: INodeNo, set: &SetAttr) -> Res<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// READLINK: the symbolic link's target.
    fn readlink(&self, ino: INodeNo) -> Res<Vec<u8>> {
        Err(Errno::ENOSYS)
    }

    /// MKNOD: makes `name` in `parent`, a node of `mode`'s type (the caller's umask already
    /// applied), as the caller; one kernel lookup.
    fn mknod(
        &self,
        req: &Req,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> Res<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// MKDIR: makes directory `name` in `parent` as the caller; one kernel lookup.
    fn mkdir(&self, req: &Req, parent: INodeNo, name: &OsStr, mode: u32) -> Res<FileAttr> {
        Err(Errno::ENOSYS)
    }

    /// UNLINK: removes the name `name` of a file that is not a directory.
    fn unlink(&self, parent: INodeNo, name: &OsStr) -> Res<()> {
        Err(Errno::ENOSYS)
    }

    /// RMDIR: removes the empty directory `name`.
    fn rmdir(&self, parent: INodeNo, name: &OsStr) -> Res<()> {
        Err(Errno::ENOSYS)
    }

    /// SYMLINK: makes a symbolic link `name` to `target` as the caller; one kernel lookup.
    /// fuser's default answer is `EPERM`.
    fn symlink(&self, req: &Req, parent: INodeNo, name: &OsStr, target: &Path) -> Res<FileAttr> {
        Err(Errno::EPERM)
    }

    /// RENAME (and `renameat2`'s `RENAME_NOREPLACE`, `RENAME_EXCHANGE` in `flags`).
    fn rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Res<()> {
        Err(Errno::ENOSYS)
    }

    /// LINK: a new name `newname` in `newparent` for the file `ino`; one kernel lookup.
    /// fuser's default answer is `EPERM`.
    fn link(&self, req: &Req, ino: INodeNo, newparent: INodeNo, newname: &OsStr) -> Res<FileAttr> {
        Err(Errno::EPERM)
    }

    /// OPEN: opens `ino` with the `open(2)` `flags` the kernel passes on (not `O_CREAT`,
    /// `O_EXCL`, `O_NOCTTY`). fuser's default answers handle 0, no flags.
    fn open(&self, ino: INodeNo, flags: OpenFlags) -> Res<Open> {
        Ok(Open::NONE)
    }

    /// CREATE: makes and opens a regular file `name` in `parent` as the caller (`flags` as
    /// `open(2)` had them, `O_EXCL` included); one kernel lookup.
    fn create(
        &self,
        req: &Req,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Res<(FileAttr, Open)> {
        Err(Errno::ENOSYS)
    }

    /// READ: up to `buf.size()` bytes at `offset`, fewer only at the end of the file. The bytes
    /// come back as a slice of `buf` (filled through [`ReadBuf::take`]) or of data the file
    /// system holds, and the reply is sent from there: no copy beyond the one into `buf`.
    fn read<'a>(
        &'a self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        buf: ReadBuf<'a>,
    ) -> Res<&'a [u8]> {
        Err(Errno::ENOSYS)
    }

    /// READ for a file system that can wait for a miss without holding the serving thread: a
    /// future of the answer, which [`Fuse`] polls once on the serving thread and, if it must
    /// wait, hands to its runtime, replying from there (fuser lets a reply be sent from any
    /// thread) while the serving thread takes the next request. `None` (the default, and
    /// for a read that would not wait): [`Serve::read`] serves it. [`Fuse`] asks only with
    /// `QUIRE_FUSE_DEFER_READS=1` in the daemon's environment (off by default: measured slower
    /// on 2 CPUs), and then only while another serving thread is inside a read: the first
    /// miss blocks its thread (a wait on the runtime costs two thread switches more), the ones
    /// beside it do not.
    fn read_deferred(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
    ) -> Option<Deferred> {
        None
    }

    /// WRITE: `data` at `offset` (at most 1 MiB); answers with the count written, and with the
    /// work to do once that answer is sent.
    fn write(
        &self,
        req: &Req,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
    ) -> Res<(u32, Self::AfterWrite)> {
        Err(Errno::ENOSYS)
    }

    /// FLUSH: a descriptor of the open file is closed (every `close(2)`).
    fn flush(&self, ino: INodeNo, fh: FileHandle) -> Res<()> {
        Err(Errno::ENOSYS)
    }

    /// RELEASE: the open file's last descriptor is gone (no error reaches the caller).
    fn release(&self, ino: INodeNo, fh: FileHandle) -> Res<()> {
        Ok(())
    }

    /// FSYNC: makes the file's data durable, and its metadata too unless `datasync`.
    fn fsync(&self, ino: INodeNo, fh: FileHandle, datasync: bool) -> Res<()> {
        Err(Errno::ENOSYS)
    }

    /// OPENDIR. fuser's default answers handle 0, no flags.
    fn opendir(&self, ino: INodeNo, flags: OpenFlags) -> Res<Open> {
        Ok(Open::NONE)
    }

    /// READDIR: adds entries from `offset` on to `out` until it says it is full; each entry's
    /// offset is where the next call starts. The listing is sent when this returns `Ok`.
    fn readdir(&self, ino: INodeNo, fh: FileHandle, offset: u64, out: &mut dyn DirOut) -> Res<()> {
        Err(Errno::ENOSYS)
    }

    /// READDIRPLUS: as READDIR, each entry with its attributes; every entry other than `.`
    /// and `..` that fits counts as one kernel lookup.
    fn readdirplus(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        out: &mut dyn DirPlusOut,
    ) -> Res<()> {
        Err(Errno::ENOSYS)
    }

    /// RELEASEDIR: the open directory's last descriptor is gone.
    fn releasedir(&self, ino: INodeNo, fh: FileHandle) -> Res<()> {
        Ok(())
    }

    /// FSYNCDIR: as FSYNC, for a directory.
    fn fsyncdir(&self, ino: INodeNo, fh: FileHandle, datasync: bool) -> Res<()> {
        Err(Errno::ENOSYS)
    }

    /// STATFS. fuser's default answers [`Statfs::default`].
    fn statfs(&self, ino: INodeNo) -> Res<Statfs> {
        Ok(Statfs::default())
    }

    /// SETXATTR (`flags`: `XATTR_CREATE`, `XATTR_REPLACE`).
    fn setxattr(&self, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32) -> Res<()> {
        Err(Errno::ENOSYS)
    }

    /// GETXATTR: the value of `name`; `size` is the caller's buffer (0: it asks the length),
    /// which [`Fuse`] checks the value against.
    fn getxattr(&self, ino: INodeNo, name: &OsStr, size: u32) -> Res<Xattr> {
        Err(Errno::ENOSYS)
    }

    /// LISTXATTR: the names, each ending in a NUL; `size` as for GETXATTR.
    fn listxattr(&self, ino: INodeNo, size: u32) -> Res<Xattr> {
        Err(Errno::ENOSYS)
    }

    /// REMOVEXATTR.
    fn removexattr(&self, ino: INodeNo, name: &OsStr) -> Res<()> {
        Err(Errno::ENOSYS)
    }

    /// FALLOCATE: `fallocate(2)` of `length` bytes at `offset` with `mode`'s `FALLOC_FL_*`.
    fn fallocate(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Res<()> {
        Err(Errno::ENOSYS)
    }

    /// LSEEK: the offset `lseek(2)` answers for `whence` (the kernel sends only `SEEK_DATA`
    /// and `SEEK_HOLE`).
    fn lseek(&self, ino: INodeNo, fh: FileHandle, offset: i64, whence: i32) -> Res<i64> {
        Err(Errno::ENOSYS)
    }
}
