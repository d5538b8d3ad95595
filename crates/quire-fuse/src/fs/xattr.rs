//! Extended attributes (the kernel's `fs/fuse/xattr.c` side): passed through to the backing file,
//! except the statistics attribute of the root. The backing file's own answers (`ENODATA`: no
//! such attribute, `ERANGE`...) are answers, not errors of the mount: not counted.

use super::*;

impl FsState {
    pub(super) fn setxattr(&self, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32) -> R<()> {
        let s = self;
        s.counters.op(Op::Xattr);
        if ino.0 == ROOT_ID && name == STATS_XATTR {
            return Err(Errno::EPERM);
        }
        let node = s.node(ino)?;
        let (_fd, p) = s.xattr_path(&node)?;
        let flags = rustix::fs::XattrFlags::from_bits_retain(flags as u32);
        rustix::fs::setxattr(&p, name, value, flags).map_err(errno::of_sys)?;
        if let Some(f) = s.files.get(&node.ident) {
            f.backing.restamp();
        }
        Ok(())
    }

    pub(super) fn getxattr(&self, ino: INodeNo, name: &OsStr, size: u32) -> R<Xattr> {
        let s = self;
        s.counters.op(Op::Xattr);
        if ino.0 == ROOT_ID && name == STATS_XATTR {
            return Ok(Xattr::Value(s.render_stats().into_bytes()));
        }
        let node = s.node(ino)?;
        let (_fd, p) = match s.xattr_path(&node) {
            Ok(x) => x,
            Err(e) if e == Errno::EPERM => return Ok(Xattr::NoValue(Errno::ENODATA)),
            Err(e) => return Err(e),
        };
        let mut buf = vec![0u8; (size as usize).clamp(1, 1 << 16)];
        loop {
            match rustix::fs::getxattr(&p, name, &mut buf[..]) {
                Ok(n) => {
                    buf.truncate(n);
                    return Ok(Xattr::Value(buf));
                }
                Err(rustix::io::Errno::RANGE) if buf.len() < (1 << 16) => buf.resize(1 << 16, 0),
                Err(e) => return Ok(Xattr::NoValue(errno::of_sys(e))),
            }
        }
    }

    pub(super) fn listxattr(&self, ino: INodeNo) -> R<Xattr> {
        let s = self;
        s.counters.op(Op::Xattr);
        let node = s.node(ino)?;
        let (_fd, p) = match s.xattr_path(&node) {
            Ok(x) => x,
            Err(e) if e == Errno::EPERM => return Ok(Xattr::Value(Vec::new())),
            Err(e) => return Err(e),
        };
        let mut buf = vec![0u8; 1 << 16];
        match rustix::fs::listxattr(&p, &mut buf[..]) {
            Ok(n) => {
                buf.truncate(n);
                Ok(Xattr::Value(buf))
            }
            Err(e) => Ok(Xattr::NoValue(errno::of_sys(e))),
        }
    }

    pub(super) fn removexattr(&self, ino: INodeNo, name: &OsStr) -> R<()> {
        let s = self;
        s.counters.op(Op::Xattr);
        let node = s.node(ino)?;
        let (_fd, p) = s.xattr_path(&node)?;
        rustix::fs::removexattr(&p, name).map_err(errno::of_sys)
    }
}
