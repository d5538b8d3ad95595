//! The parts of the FUSE protocol (`include/uapi/linux/fuse.h`) the io_uring channel reads and
//! writes itself: the request and reply headers, each operation's fixed argument, and the
//! replies' records. Everything is read from and written to byte slices at the kernel's
//! offsets (native byte order, as the kernel lays them out), so no `unsafe` cast of a buffer
//! the kernel writes into is ever made; a short buffer is `EINVAL`, never a panic.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType};

/// Opcodes (`enum fuse_opcode`) the channel serves; anything else is answered `ENOSYS`.
#[allow(missing_docs)]
pub(crate) mod op {
    pub(crate) const LOOKUP: u32 = 1;
    pub(crate) const GETATTR: u32 = 3;
    pub(crate) const SETATTR: u32 = 4;
    pub(crate) const READLINK: u32 = 5;
    pub(crate) const SYMLINK: u32 = 6;
    pub(crate) const MKNOD: u32 = 8;
    pub(crate) const MKDIR: u32 = 9;
    pub(crate) const UNLINK: u32 = 10;
    pub(crate) const RMDIR: u32 = 11;
    pub(crate) const RENAME: u32 = 12;
    pub(crate) const LINK: u32 = 13;
    pub(crate) const OPEN: u32 = 14;
    pub(crate) const READ: u32 = 15;
    pub(crate) const WRITE: u32 = 16;
    pub(crate) const STATFS: u32 = 17;
    pub(crate) const RELEASE: u32 = 18;
    pub(crate) const FSYNC: u32 = 20;
    pub(crate) const SETXATTR: u32 = 21;
    pub(crate) const GETXATTR: u32 = 22;
    pub(crate) const LISTXATTR: u32 = 23;
    pub(crate) const REMOVEXATTR: u32 = 24;
    pub(crate) const FLUSH: u32 = 25;
    pub(crate) const OPENDIR: u32 = 27;
    pub(crate) const READDIR: u32 = 28;
    pub(crate) const RELEASEDIR: u32 = 29;
    pub(crate) const FSYNCDIR: u32 = 30;
    pub(crate) const CREATE: u32 = 35;
    pub(crate) const FALLOCATE: u32 = 43;
    pub(crate) const READDIRPLUS: u32 = 44;
    pub(crate) const RENAME2: u32 = 45;
    pub(crate) const LSEEK: u32 = 46;
}

/// `FUSE_IO_URING_CMD_REGISTER`: gives the kernel an entry's buffers; completes with the
/// entry's first request.
pub(crate) const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: the reply in an entry's buffers; completes with the
/// entry's next request.
pub(crate) const CMD_COMMIT_AND_FETCH: u32 = 2;

/// `struct fuse_uring_req_header`: `in_out` (the request's `fuse_in_header`, then the reply's
/// `fuse_out_header`), `op_in` (the operation's fixed argument), `ring_ent_in_out`.
pub(crate) const HEADER_SIZE: usize = 288;
/// Where `op_in` starts in the entry's header buffer.
pub(crate) const OP_IN: usize = 128;
/// Size of `op_in`.
pub(crate) const OP_IN_SIZE: usize = 128;
/// Where `ring_ent_in_out` starts (`flags`, `commit_id`, `payload_sz`).
pub(crate) const ENT_IN_OUT: usize = 256;

/// `struct fuse_uring_cmd_req` in the SQE's command area: `flags`, `commit_id`, `qid`.
pub(crate) fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    c[16..18].copy_from_slice(&qid.to_ne_bytes());
    c
}

/// A native-endian field of `b` at `off`; `None` past the end.
#[inline]
pub(crate) fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

/// As [`u32_at`], 64 bits.
#[inline]
pub(crate) fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

/// `struct fuse_in_header`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InHeader {
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl InHeader {
    /// Reads the header at the start of `b`.
    pub(crate) fn parse(b: &[u8]) -> Option<InHeader> {
        Some(InHeader {
            opcode: u32_at(b, 4)?,
            unique: u64_at(b, 8)?,
            nodeid: u64_at(b, 16)?,
            uid: u32_at(b, 24)?,
            gid: u32_at(b, 28)?,
            pid: u32_at(b, 32)?,
        })
    }
}

/// Writes `struct fuse_out_header` (`len`, `error` as a negative errno or 0, `unique`).
pub(crate) fn out_header(b: &mut [u8], len: u32, error: i32, unique: u64) {
    b[0..4].copy_from_slice(&len.to_ne_bytes());
    b[4..8].copy_from_slice(&error.to_ne_bytes());
    b[8..16].copy_from_slice(&unique.to_ne_bytes());
}

/// The NUL-terminated name at the start of `b`, and what follows its NUL.
pub(crate) fn name(b: &[u8]) -> Result<(&OsStr, &[u8]), Errno> {
    let end = b.iter().position(|&c| c == 0).ok_or(Errno::EINVAL)?;
    Ok((OsStr::from_bytes(&b[..end]), &b[end + 1..]))
}

/// A reply's payload being written: records appended in order, each within the buffer.
pub(crate) struct Out<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> Out<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Out<'a> {
        Out { buf, len: 0 }
    }

    /// Bytes written so far.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends `b`; `EIO` if it does not fit (the payload buffer is as large as the largest
    /// reply the kernel can ask for, so this is a defect, not a user's error).
    pub(crate) fn bytes(&mut self, b: &[u8]) -> Result<(), Errno> {
        let end = self.len + b.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(Errno::EIO)?
            .copy_from_slice(b);
        self.len = end;
        Ok(())
    }

    pub(crate) fn u32(&mut self, v: u32) -> Result<(), Errno> {
        self.bytes(&v.to_ne_bytes())
    }

    pub(crate) fn u64(&mut self, v: u64) -> Result<(), Errno> {
        self.bytes(&v.to_ne_bytes())
    }

    /// Zeros up to the next multiple of 8 (directory entries are 8-aligned).
    pub(crate) fn pad8(&mut self) -> Result<(), Errno> {
        let pad = self.len.next_multiple_of(8) - self.len;
        self.bytes(&[0u8; 8][..pad])
    }

    /// `struct fuse_attr`.
    pub(crate) fn attr(&mut self, a: &FileAttr) -> Result<(), Errno> {
        let (at, atn) = time(a.atime);
        let (mt, mtn) = time(a.mtime);
        let (ct, ctn) = time(a.ctime);
        self.u64(a.ino.0)?;
        self.u64(a.size)?;
        self.u64(a.blocks)?;
        self.u64(at)?;
        self.u64(mt)?;
        self.u64(ct)?;
        self.u32(atn)?;
        self.u32(mtn)?;
        self.u32(ctn)?;
        self.u32(mode_type(a.kind) | u32::from(a.perm))?;
        self.u32(a.nlink)?;
        self.u32(a.uid)?;
        self.u32(a.gid)?;
        self.u32(a.rdev)?;
        self.u32(a.blksize)?;
        self.u32(a.flags)
    }

    /// `struct fuse_entry_out`: the node, generation 0, name and attributes valid for `ttl`.
    pub(crate) fn entry(&mut self, a: &FileAttr, ttl: Duration) -> Result<(), Errno> {
        self.u64(a.ino.0)?;
        self.u64(0)?;
        self.u64(ttl.as_secs())?;
        self.u64(ttl.as_secs())?;
        self.u32(ttl.subsec_nanos())?;
        self.u32(ttl.subsec_nanos())?;
        self.attr(a)
    }

    /// `struct fuse_attr_out`.
    pub(crate) fn attr_out(&mut self, a: &FileAttr, ttl: Duration) -> Result<(), Errno> {
        self.u64(ttl.as_secs())?;
        self.u32(ttl.subsec_nanos())?;
        self.u32(0)?;
        self.attr(a)
    }

    /// `struct fuse_open_out` (`fh`, `open_flags`, `backing_id` 0).
    pub(crate) fn open_out(&mut self, fh: u64, flags: u32) -> Result<(), Errno> {
        self.u64(fh)?;
        self.u32(flags)?;
        self.u32(0)
    }

    /// `struct fuse_dirent` (8-aligned) if it fits in `limit` bytes of payload; `false` if not.
    pub(crate) fn dirent(
        &mut self,
        limit: usize,
        ino: u64,
        off: u64,
        kind: FileType,
        name: &OsStr,
    ) -> Result<bool, Errno> {
        let size = (24 + name.len()).next_multiple_of(8);
        if self.len + size > limit.min(self.buf.len()) {
            return Ok(false);
        }
        self.u64(ino)?;
        self.u64(off)?;
        self.u32(name.len() as u32)?;
        self.u32(mode_type(kind) >> 12)?;
        self.bytes(name.as_bytes())?;
        self.pad8()?;
        Ok(true)
    }

    /// `struct fuse_direntplus` (an entry record, then a dirent) if it fits in `limit`.
    pub(crate) fn direntplus(
        &mut self,
        limit: usize,
        off: u64,
        name: &OsStr,
        ttl: Duration,
        attr: &FileAttr,
    ) -> Result<bool, Errno> {
        let size = 128 + (24 + name.len()).next_multiple_of(8);
        if self.len + size > limit.min(self.buf.len()) {
            return Ok(false);
        }
        self.entry(attr, ttl)?;
        self.u64(attr.ino.0)?;
        self.u64(off)?;
        self.u32(name.len() as u32)?;
        self.u32(mode_type(attr.kind) >> 12)?;
        self.bytes(name.as_bytes())?;
        self.pad8()?;
        Ok(true)
    }
}

/// A time as the protocol's seconds (two's complement before 1970) and nanoseconds.
fn time(t: SystemTime) -> (u64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            if d.subsec_nanos() == 0 {
                ((-(d.as_secs() as i64)) as u64, 0)
            } else {
                (
                    (-(d.as_secs() as i64) - 1) as u64,
                    1_000_000_000 - d.subsec_nanos(),
                )
            }
        }
    }
}

/// The time a SETATTR carries: seconds (signed) and nanoseconds since 1970.
pub(crate) fn system_time(secs: u64, nsecs: u32) -> SystemTime {
    let secs = secs as i64;
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nsecs.into())
    }
}

/// The `S_IF*` bits of a file type.
fn mode_type(k: FileType) -> u32 {
    match k {
        FileType::NamedPipe => libc::S_IFIFO,
        FileType::CharDevice => libc::S_IFCHR,
        FileType::BlockDevice => libc::S_IFBLK,
        FileType::Directory => libc::S_IFDIR,
        FileType::RegularFile => libc::S_IFREG,
        FileType::Symlink => libc::S_IFLNK,
        FileType::Socket => libc::S_IFSOCK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuser::INodeNo;

    fn attr() -> FileAttr {
        FileAttr {
            ino: INodeNo(7),
            size: 4096,
            blocks: 8,
            atime: UNIX_EPOCH + Duration::new(10, 5),
            mtime: UNIX_EPOCH - Duration::new(1, 250),
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: FileType::RegularFile,
            perm: 0o644,
            nlink: 1,
            uid: 1000,
            gid: 100,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    #[test]
    fn records_have_the_kernels_sizes_and_offsets() {
        let mut buf = [0u8; 512];
        let mut o = Out::new(&mut buf);
        o.attr(&attr()).unwrap();
        assert_eq!(o.len(), 88, "struct fuse_attr");
        let mut o = Out::new(&mut buf);
        o.entry(&attr(), Duration::new(1, 500)).unwrap();
        assert_eq!(o.len(), 128, "struct fuse_entry_out");
        assert_eq!(u64_at(&buf, 0), Some(7));
        assert_eq!(u64_at(&buf, 16), Some(1), "entry_valid");
        assert_eq!(u32_at(&buf, 36), Some(500), "attr_valid_nsec");
        assert_eq!(u32_at(&buf, 40 + 60), Some(libc::S_IFREG | 0o644), "mode");
        // mtime one second and 250 ns before 1970: seconds -2, 1e9 - 250 ns.
        assert_eq!(u64_at(&buf, 40 + 32), Some((-2i64) as u64));
        assert_eq!(u32_at(&buf, 40 + 52), Some(999_999_750));
        let mut o = Out::new(&mut buf);
        o.attr_out(&attr(), Duration::ZERO).unwrap();
        assert_eq!(o.len(), 104, "struct fuse_attr_out");
    }

    #[test]
    fn times_round_trip_through_the_setattr_encoding() {
        for t in [
            UNIX_EPOCH + Duration::new(1_700_000_000, 123),
            UNIX_EPOCH - Duration::new(5, 1),
            UNIX_EPOCH - Duration::new(5, 0),
        ] {
            let (s, n) = time(t);
            assert_eq!(system_time(s, n), t);
        }
    }

    #[test]
    fn dirents_are_aligned_and_stop_at_the_limit() {
        let mut buf = [0u8; 64];
        let mut o = Out::new(&mut buf);
        assert!(o
            .dirent(64, 5, 1, FileType::Directory, OsStr::new("abc"))
            .unwrap());
        assert_eq!(o.len(), 32);
        assert!(!o
            .dirent(40, 6, 2, FileType::RegularFile, OsStr::new("d"))
            .unwrap());
        assert_eq!(o.len(), 32, "a refused entry writes nothing");
        assert_eq!(u32_at(&buf, 20), Some(u32::from(libc::DT_DIR)));
    }

    #[test]
    fn names_need_their_nul() {
        assert_eq!(name(b"a\0rest").unwrap().0, OsStr::new("a"));
        assert_eq!(name(b"a\0rest").unwrap().1, b"rest");
        assert!(name(b"abc").is_err());
        assert!(InHeader::parse(&[0u8; 20]).is_none());
    }
}
