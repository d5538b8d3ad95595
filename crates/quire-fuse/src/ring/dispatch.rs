//! One request from a ring entry, served by a [`Serve`] file system and answered in the same
//! entry: the operation's fixed argument is read from the header buffer's `op_in`, names and
//! written bytes from the payload, and the reply's records go back into the payload. A READ
//! is read straight into the payload (the buffer the kernel copies the reply from), so a hit
//! costs one copy, from quire's folio.

use std::time::Duration;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Generation, INodeNo, OpenFlags, RenameFlags, TimeOrNow,
};

use super::abi::{self, op, u32_at, u64_at, InHeader, Out};
use crate::serve::{AfterReply, DirOut, DirPlusOut, Open, ReadBuf, Req, Serve, SetAttr, Xattr};

/// A request's answer: the errno (0: success), the payload's length, and the work to run once
/// the reply is on its way.
pub(crate) struct Answer<A> {
    pub error: i32,
    pub len: usize,
    pub after: Option<A>,
}

/// Why a request is answered with an errno: the file system failed ([`Serve::failed`] is told),
/// or the errno is the answer itself (an extended attribute with no value).
enum Fail {
    Failed(Errno),
    Answer(Errno),
}

impl From<Errno> for Fail {
    fn from(e: Errno) -> Fail {
        Fail::Failed(e)
    }
}

type R = Result<usize, Fail>;

/// Serves request `h` (fixed argument `arg`, the first `in_len` bytes of `payload` its
/// variable part) and writes its reply into `payload`.
pub(crate) fn serve<S: Serve>(
    fs: &S,
    h: &InHeader,
    arg: &[u8],
    payload: &mut [u8],
    in_len: usize,
) -> Answer<S::AfterWrite> {
    let mut after = None;
    let in_len = in_len.min(payload.len());
    // A file system that panics answers EIO: the request must be answered, or its caller
    // would wait for ever and the queue would be an entry short.
    let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        match run(fs, h, arg, payload, in_len, &mut after) {
            Ok(len) => (0, len),
            Err(Fail::Failed(e)) => {
                fs.failed(e);
                (-e.code(), 0)
            }
            Err(Fail::Answer(e)) => (-e.code(), 0),
        }
    }));
    match answered {
        Ok((error, len)) => Answer {
            error,
            len,
            after: if error == 0 { after } else { None },
        },
        Err(_) => Answer {
            error: -libc::EIO,
            len: 0,
            after: None,
        },
    }
}

fn bad() -> Fail {
    Fail::Failed(Errno::EINVAL)
}

fn a32(b: &[u8], off: usize) -> Result<u32, Fail> {
    u32_at(b, off).ok_or_else(bad)
}

fn a64(b: &[u8], off: usize) -> Result<u64, Fail> {
    u64_at(b, off).ok_or_else(bad)
}

fn entry(payload: &mut [u8], attr: &FileAttr, ttl: Duration) -> R {
    let mut o = Out::new(payload);
    o.entry(attr, ttl)?;
    Ok(o.len())
}

fn opened(payload: &mut [u8], o: Open) -> R {
    let mut out = Out::new(payload);
    out.open_out(o.fh.0, o.flags.bits())?;
    Ok(out.len())
}

/// An extended attribute's answer, as [`crate::Fuse`] gives it: its length if the caller asked
/// for that (`size` 0), `ERANGE` if it does not fit the caller's buffer, else the value.
fn xattr(payload: &mut [u8], size: u32, x: Xattr) -> R {
    match x {
        Xattr::Value(v) if size == 0 => {
            let mut o = Out::new(payload);
            o.u32(v.len() as u32)?;
            o.u32(0)?;
            Ok(o.len())
        }
        // The caller's buffer is too small: its answer, not the file system's failure.
        Xattr::Value(v) if v.len() > size as usize => Err(Fail::Answer(Errno::ERANGE)),
        Xattr::Value(v) => {
            let mut o = Out::new(payload);
            o.bytes(&v)?;
            Ok(o.len())
        }
        Xattr::NoValue(e) => Err(Fail::Answer(e)),
    }
}

fn time_or_now(set: bool, now: bool, secs: u64, nsecs: u32) -> Option<TimeOrNow> {
    match (set, now) {
        (false, _) => None,
        (true, true) => Some(TimeOrNow::Now),
        (true, false) => Some(TimeOrNow::SpecificTime(abi::system_time(secs, nsecs))),
    }
}

/// `FATTR_*`: which fields of a SETATTR are set.
const FATTR_MODE: u32 = 1 << 0;
const FATTR_UID: u32 = 1 << 1;
const FATTR_GID: u32 = 1 << 2;
const FATTR_SIZE: u32 = 1 << 3;
const FATTR_ATIME: u32 = 1 << 4;
const FATTR_MTIME: u32 = 1 << 5;
const FATTR_FH: u32 = 1 << 6;
const FATTR_ATIME_NOW: u32 = 1 << 7;
const FATTR_MTIME_NOW: u32 = 1 << 8;
/// `FUSE_GETATTR_FH`: the GETATTR names an open file.
const GETATTR_FH: u32 = 1;

fn run<S: Serve>(
    fs: &S,
    h: &InHeader,
    arg: &[u8],
    payload: &mut [u8],
    in_len: usize,
    after: &mut Option<S::AfterWrite>,
) -> R {
    let ino = INodeNo(h.nodeid);
    let req = Req::new(h.uid, h.gid, h.pid);
    let ttl = fs.ttl();
    match h.opcode {
        op::LOOKUP => {
            let (name, _) = abi::name(&payload[..in_len])?;
            let attr = fs.lookup(ino, name)?;
            entry(payload, &attr, ttl)
        }
        op::GETATTR => {
            let flags = a32(arg, 0)?;
            let fh = (flags & GETATTR_FH != 0).then(|| FileHandle(u64_at(arg, 8).unwrap_or(0)));
            let attr = fs.getattr(ino, fh)?;
            let mut o = Out::new(payload);
            o.attr_out(&attr, ttl)?;
            Ok(o.len())
        }
        op::SETATTR => {
            let valid = a32(arg, 0)?;
            let has = |bit| valid & bit != 0;
            let set = SetAttr {
                fh: has(FATTR_FH).then(|| FileHandle(u64_at(arg, 8).unwrap_or(0))),
                size: has(FATTR_SIZE).then(|| u64_at(arg, 16).unwrap_or(0)),
                atime: time_or_now(
                    has(FATTR_ATIME),
                    has(FATTR_ATIME_NOW),
                    a64(arg, 32)?,
                    a32(arg, 56)?,
                ),
                mtime: time_or_now(
                    has(FATTR_MTIME),
                    has(FATTR_MTIME_NOW),
                    a64(arg, 40)?,
                    a32(arg, 60)?,
                ),
                mode: has(FATTR_MODE).then(|| u32_at(arg, 68).unwrap_or(0)),
                uid: has(FATTR_UID).then(|| u32_at(arg, 76).unwrap_or(0)),
                gid: has(FATTR_GID).then(|| u32_at(arg, 80).unwrap_or(0)),
            };
            let attr = fs.setattr(ino, &set)?;
            let mut o = Out::new(payload);
            o.attr_out(&attr, ttl)?;
            Ok(o.len())
        }
        op::READLINK => {
            let target = fs.readlink(ino)?;
            let mut o = Out::new(payload);
            o.bytes(&target)?;
            Ok(o.len())
        }
        op::SYMLINK => {
            let (name, rest) = abi::name(&payload[..in_len])?;
            let (target, _) = abi::name(rest)?;
            let attr = fs.symlink(&req, ino, name, target.as_ref())?;
            entry(payload, &attr, ttl)
        }
        op::MKNOD => {
            let (mode, rdev) = (a32(arg, 0)?, a32(arg, 4)?);
            let (name, _) = abi::name(&payload[..in_len])?;
            let attr = fs.mknod(&req, ino, name, mode, rdev)?;
            entry(payload, &attr, ttl)
        }
        op::MKDIR => {
            let mode = a32(arg, 0)?;
            let (name, _) = abi::name(&payload[..in_len])?;
            let attr = fs.mkdir(&req, ino, name, mode)?;
            entry(payload, &attr, ttl)
        }
        op::UNLINK | op::RMDIR => {
            let (name, _) = abi::name(&payload[..in_len])?;
            if h.opcode == op::UNLINK {
                fs.unlink(ino, name)?;
            } else {
                fs.rmdir(ino, name)?;
            }
            Ok(0)
        }
        op::RENAME | op::RENAME2 => {
            let newdir = INodeNo(a64(arg, 0)?);
            let flags = if h.opcode == op::RENAME2 {
                RenameFlags::from_bits_retain(a32(arg, 8)?)
            } else {
                RenameFlags::empty()
            };
            let (old, rest) = abi::name(&payload[..in_len])?;
            let (new, _) = abi::name(rest)?;
            fs.rename(ino, old, newdir, new, flags)?;
            Ok(0)
        }
        op::LINK => {
            let old = INodeNo(a64(arg, 0)?);
            let (name, _) = abi::name(&payload[..in_len])?;
            let attr = fs.link(&req, old, ino, name)?;
            entry(payload, &attr, ttl)
        }
        op::OPEN | op::OPENDIR => {
            let flags = OpenFlags(a32(arg, 0)? as i32);
            let o = if h.opcode == op::OPEN {
                fs.open(ino, flags)?
            } else {
                fs.opendir(ino, flags)?
            };
            opened(payload, o)
        }
        op::CREATE => {
            let (flags, mode) = (a32(arg, 0)?, a32(arg, 4)?);
            let (name, _) = abi::name(&payload[..in_len])?;
            let (attr, o) = fs.create(&req, ino, name, mode, flags as i32)?;
            let mut out = Out::new(payload);
            out.entry(&attr, ttl)?;
            out.open_out(o.fh.0, o.flags.bits())?;
            Ok(out.len())
        }
        op::READ => {
            let (fh, offset, size) = (FileHandle(a64(arg, 0)?), a64(arg, 8)?, a32(arg, 16)?);
            let size = (size as usize).min(payload.len());
            let (ptr, n) = {
                let data = fs.read(ino, fh, offset, ReadBuf::fixed(&mut payload[..size]))?;
                (data.as_ptr() as usize, data.len().min(size))
            };
            let start = payload.as_ptr() as usize;
            if ptr >= start && ptr < start + payload.len() {
                // Read into the payload it was lent (at its start, or further in).
                let off = ptr - start;
                let n = n.min(payload.len() - off);
                if off != 0 {
                    payload.copy_within(off..off + n, 0);
                }
                Ok(n)
            } else {
                // The file system answered from bytes it holds: copy them in.
                // SAFETY: `ptr` is the start of `n` bytes the file system returned, borrowed
                // from `fs` (which outlives this call) and outside the payload; the payload is
                // borrowed afresh here and `n <= payload.len()`.
                unsafe { std::ptr::copy_nonoverlapping(ptr as *const u8, payload.as_mut_ptr(), n) };
                Ok(n)
            }
        }
        op::WRITE => {
            let (fh, offset, size) = (FileHandle(a64(arg, 0)?), a64(arg, 8)?, a32(arg, 16)?);
            let data = payload.get(..size as usize).ok_or_else(bad)?;
            let (n, a) = fs.write(&req, ino, fh, offset, data)?;
            *after = Some(a);
            let mut o = Out::new(payload);
            o.u32(n)?;
            o.u32(0)?;
            Ok(o.len())
        }
        op::STATFS => {
            let s = fs.statfs(ino)?;
            let mut o = Out::new(payload);
            for v in [s.blocks, s.bfree, s.bavail, s.files, s.ffree] {
                o.u64(v)?;
            }
            for v in [s.bsize, s.namelen, s.frsize, 0, 0, 0, 0, 0, 0, 0] {
                o.u32(v)?;
            }
            Ok(o.len())
        }
        op::RELEASE => {
            fs.release(ino, FileHandle(a64(arg, 0)?))?;
            Ok(0)
        }
        op::RELEASEDIR => {
            fs.releasedir(ino, FileHandle(a64(arg, 0)?))?;
            Ok(0)
        }
        op::FLUSH => {
            fs.flush(ino, FileHandle(a64(arg, 0)?))?;
            Ok(0)
        }
        op::FSYNC | op::FSYNCDIR => {
            let fh = FileHandle(a64(arg, 0)?);
            let datasync = a32(arg, 8)? & 1 != 0;
            if h.opcode == op::FSYNC {
                fs.fsync(ino, fh, datasync)?;
            } else {
                fs.fsyncdir(ino, fh, datasync)?;
            }
            Ok(0)
        }
        op::SETXATTR => {
            let (size, flags) = (a32(arg, 0)?, a32(arg, 4)?);
            let (name, rest) = abi::name(&payload[..in_len])?;
            let value = rest.get(..size as usize).ok_or_else(bad)?;
            fs.setxattr(ino, name, value, flags as i32)?;
            Ok(0)
        }
        op::GETXATTR => {
            let size = a32(arg, 0)?;
            let (name, _) = abi::name(&payload[..in_len])?;
            let x = fs.getxattr(ino, name, size)?;
            xattr(payload, size, x)
        }
        op::LISTXATTR => {
            let size = a32(arg, 0)?;
            let x = fs.listxattr(ino, size)?;
            xattr(payload, size, x)
        }
        op::REMOVEXATTR => {
            let (name, _) = abi::name(&payload[..in_len])?;
            fs.removexattr(ino, name)?;
            Ok(0)
        }
        op::READDIR => {
            let (fh, offset, size) = (FileHandle(a64(arg, 0)?), a64(arg, 8)?, a32(arg, 16)?);
            let mut d = Dir {
                out: Out::new(payload),
                limit: size as usize,
                err: None,
            };
            fs.readdir(ino, fh, offset, &mut d)?;
            if let Some(e) = d.err {
                return Err(e.into());
            }
            Ok(d.out.len())
        }
        op::READDIRPLUS => {
            let (fh, offset, size) = (FileHandle(a64(arg, 0)?), a64(arg, 8)?, a32(arg, 16)?);
            let mut d = Dir {
                out: Out::new(payload),
                limit: size as usize,
                err: None,
            };
            fs.readdirplus(ino, fh, offset, &mut d)?;
            if let Some(e) = d.err {
                return Err(e.into());
            }
            Ok(d.out.len())
        }
        op::FALLOCATE => {
            let fh = FileHandle(a64(arg, 0)?);
            let (offset, length, mode) = (a64(arg, 8)?, a64(arg, 16)?, a32(arg, 24)?);
            fs.fallocate(ino, fh, offset, length, mode as i32)?;
            Ok(0)
        }
        op::LSEEK => {
            let fh = FileHandle(a64(arg, 0)?);
            let (offset, whence) = (a64(arg, 8)? as i64, a32(arg, 16)?);
            let off = fs.lseek(ino, fh, offset, whence as i32)?;
            let mut o = Out::new(payload);
            o.u64(off as u64)?;
            Ok(o.len())
        }
        // An operation this file system does not serve (the kernel remembers some of these
        // answers and stops asking): not a failure, as fuser answers it too.
        _ => Err(Fail::Answer(Errno::ENOSYS)),
    }
}

/// A directory listing's reply being written into the payload, up to the kernel's `size`.
struct Dir<'a> {
    out: Out<'a>,
    limit: usize,
    err: Option<Errno>,
}

impl DirOut for Dir<'_> {
    fn add(&mut self, ino: INodeNo, offset: u64, kind: FileType, name: &std::ffi::OsStr) -> bool {
        match self.out.dirent(self.limit, ino.0, offset, kind, name) {
            Ok(added) => !added,
            Err(e) => {
                self.err = Some(e);
                true
            }
        }
    }
}

impl DirPlusOut for Dir<'_> {
    fn add(
        &mut self,
        _ino: INodeNo,
        offset: u64,
        name: &std::ffi::OsStr,
        ttl: &Duration,
        attr: &FileAttr,
        _generation: Generation,
    ) -> bool {
        match self.out.direntplus(self.limit, offset, name, *ttl, attr) {
            Ok(added) => !added,
            Err(e) => {
                self.err = Some(e);
                true
            }
        }
    }
}

/// Runs what a request left for after its reply, on a thread of its own: the serving thread's
/// entry is the first the kernel fills with the CPU's next request (it reuses the entry
/// committed last), which must not wait behind this work. A panic in it ends that thread only.
pub(crate) fn run_after<A: AfterReply>(a: Option<A>) {
    let Some(a) = a.filter(|a| !a.is_empty()) else {
        return;
    };
    if let Err(e) = std::thread::Builder::new()
        .name("quire-fuse-after".into())
        .spawn(move || a.run())
    {
        eprintln!("quire-fuse: no thread for write-behind ({e}); it is left to the flusher");
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::time::{Duration, UNIX_EPOCH};

    use fuser::FopenFlags;

    use super::*;
    use crate::ring::abi::{u32_at, u64_at};

    /// A file system of one directory (node 1) holding file `a` (node 2, 10 bytes), answering
    /// reads of node 2 from bytes it holds and of node 3 into the lent buffer.
    struct Mini {
        written: parking_lot::Mutex<Vec<(u64, Vec<u8>)>>,
        held: Vec<u8>,
    }

    fn attr(ino: u64) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size: 10,
            blocks: 1,
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: FileType::RegularFile,
            perm: 0o600,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    impl Serve for Mini {
        type AfterWrite = ();
        fn ttl(&self) -> Duration {
            Duration::from_secs(2)
        }
        fn lookup(&self, parent: INodeNo, name: &OsStr) -> Result<FileAttr, Errno> {
            match (parent.0, name.to_str()) {
                (1, Some("a")) => Ok(attr(2)),
                (1, Some("boom")) => panic!("a defect in the file system"),
                _ => Err(Errno::ENOENT),
            }
        }
        fn open(&self, _ino: INodeNo, _flags: OpenFlags) -> Result<Open, Errno> {
            Ok(Open {
                fh: FileHandle(9),
                flags: FopenFlags::FOPEN_DIRECT_IO,
            })
        }
        fn read<'a>(
            &'a self,
            ino: INodeNo,
            _fh: FileHandle,
            offset: u64,
            buf: ReadBuf<'a>,
        ) -> Result<&'a [u8], Errno> {
            let n = buf
                .size()
                .min(self.held.len().saturating_sub(offset as usize));
            let src = &self.held[offset as usize..offset as usize + n];
            if ino.0 == 2 {
                return Ok(src);
            }
            let b = buf.take();
            b[..n].copy_from_slice(src);
            Ok(&b[..n])
        }
        fn write(
            &self,
            _req: &Req,
            _ino: INodeNo,
            _fh: FileHandle,
            offset: u64,
            data: &[u8],
        ) -> Result<(u32, ()), Errno> {
            self.written.lock().push((offset, data.to_vec()));
            Ok((data.len() as u32, ()))
        }
        fn readdir(
            &self,
            _ino: INodeNo,
            _fh: FileHandle,
            offset: u64,
            out: &mut dyn DirOut,
        ) -> Result<(), Errno> {
            let all = [
                (1, FileType::Directory, "."),
                (2, FileType::RegularFile, "a"),
            ];
            for (i, (ino, k, n)) in all.iter().enumerate().skip(offset as usize) {
                if out.add(INodeNo(*ino), i as u64 + 1, *k, OsStr::new(n)) {
                    break;
                }
            }
            Ok(())
        }
        fn getxattr(&self, _ino: INodeNo, name: &OsStr, _size: u32) -> Result<Xattr, Errno> {
            if name == "user.x" {
                Ok(Xattr::Value(b"value".to_vec()))
            } else {
                Ok(Xattr::NoValue(Errno::NO_XATTR))
            }
        }
    }

    fn mini() -> Mini {
        Mini {
            written: parking_lot::Mutex::new(Vec::new()),
            held: b"0123456789".to_vec(),
        }
    }

    fn header(opcode: u32, nodeid: u64) -> InHeader {
        InHeader {
            opcode,
            unique: 42,
            nodeid,
            uid: 0,
            gid: 0,
            pid: 1,
        }
    }

    fn arg(fields: &[u64]) -> [u8; 128] {
        let mut a = [0u8; 128];
        for (i, f) in fields.iter().enumerate() {
            a[i * 8..i * 8 + 8].copy_from_slice(&f.to_ne_bytes());
        }
        a
    }

    #[test]
    fn lookup_answers_an_entry_or_the_errno() {
        let fs = mini();
        let mut p = vec![0u8; 4096];
        p[..2].copy_from_slice(b"a\0");
        let a = serve(&fs, &header(op::LOOKUP, 1), &[0; 128], &mut p, 2);
        assert_eq!((a.error, a.len), (0, 128));
        assert_eq!(u64_at(&p, 0), Some(2), "nodeid");
        assert_eq!(u64_at(&p, 16), Some(2), "entry_valid: the ttl");
        p[..2].copy_from_slice(b"b\0");
        let a = serve(&fs, &header(op::LOOKUP, 1), &[0; 128], &mut p, 2);
        assert_eq!((a.error, a.len), (-libc::ENOENT, 0));
        // A file system that panics answers EIO (the request is answered).
        p[..5].copy_from_slice(b"boom\0");
        let a = serve(&fs, &header(op::LOOKUP, 1), &[0; 128], &mut p, 5);
        assert_eq!((a.error, a.len), (-libc::EIO, 0));
        // A name without its NUL is refused, not read past.
        p[..2].copy_from_slice(b"ab");
        let a = serve(&fs, &header(op::LOOKUP, 1), &[0; 128], &mut p, 2);
        assert_eq!(a.error, -libc::EINVAL);
    }

    #[test]
    fn reads_land_in_the_payload_from_either_source() {
        let fs = mini();
        for ino in [2, 3] {
            let mut p = vec![0xffu8; 64];
            // fuse_read_in: fh, offset, size.
            let a = serve(&fs, &header(op::READ, ino), &arg(&[9, 4, 100]), &mut p, 0);
            assert_eq!((a.error, a.len), (0, 6), "node {ino}: the bytes to the end");
            assert_eq!(&p[..6], b"456789");
        }
    }

    #[test]
    fn a_write_takes_its_bytes_from_the_payload_and_answers_the_count() {
        let fs = mini();
        let mut p = vec![0u8; 64];
        p[..5].copy_from_slice(b"hello");
        // fuse_write_in: fh, offset, size (low half of the third word).
        let a = serve(&fs, &header(op::WRITE, 2), &arg(&[9, 100, 5]), &mut p, 5);
        assert_eq!((a.error, a.len), (0, 8));
        assert_eq!(u32_at(&p, 0), Some(5));
        assert_eq!(*fs.written.lock(), vec![(100, b"hello".to_vec())]);
        // A size beyond the payload is refused.
        let a = serve(&fs, &header(op::WRITE, 2), &arg(&[9, 0, 1000]), &mut p, 5);
        assert_eq!(a.error, -libc::EINVAL);
        assert_eq!(fs.written.lock().len(), 1);
    }

    #[test]
    fn open_readdir_and_xattrs_are_encoded_as_the_kernel_reads_them() {
        let fs = mini();
        let mut p = vec![0u8; 4096];
        let a = serve(&fs, &header(op::OPEN, 2), &arg(&[0]), &mut p, 0);
        assert_eq!((a.error, a.len), (0, 16));
        assert_eq!(u64_at(&p, 0), Some(9));
        assert_eq!(u32_at(&p, 8), Some(FopenFlags::FOPEN_DIRECT_IO.bits()));
        // Room for one entry only (32 bytes each): the listing stops there.
        let a = serve(&fs, &header(op::READDIR, 1), &arg(&[0, 0, 40]), &mut p, 0);
        assert_eq!((a.error, a.len), (0, 32));
        assert_eq!(u64_at(&p, 8), Some(1), "the next entry's offset");
        let a = serve(&fs, &header(op::READDIR, 1), &arg(&[0, 1, 4096]), &mut p, 0);
        assert_eq!((a.error, a.len), (0, 32));
        assert_eq!(&p[24..25], b"a");
        // GETXATTR: the length when asked for 0, ERANGE when it does not fit, else the value.
        p[..7].copy_from_slice(b"user.x\0");
        let a = serve(&fs, &header(op::GETXATTR, 2), &arg(&[0]), &mut p, 7);
        assert_eq!((a.error, a.len, u32_at(&p, 0)), (0, 8, Some(5)));
        p[..7].copy_from_slice(b"user.x\0");
        let a = serve(&fs, &header(op::GETXATTR, 2), &arg(&[2]), &mut p, 7);
        assert_eq!(a.error, -libc::ERANGE);
        p[..7].copy_from_slice(b"user.x\0");
        let a = serve(&fs, &header(op::GETXATTR, 2), &arg(&[64]), &mut p, 7);
        assert_eq!((a.error, &p[..a.len]), (0, &b"value"[..]));
        p[..7].copy_from_slice(b"user.y\0");
        let a = serve(&fs, &header(op::GETXATTR, 2), &arg(&[64]), &mut p, 7);
        assert_eq!(a.error, -libc::ENODATA);
        // An operation nobody serves.
        let a = serve(&fs, &header(9999, 1), &arg(&[]), &mut p, 0);
        assert_eq!(a.error, -libc::ENOSYS);
    }
}
