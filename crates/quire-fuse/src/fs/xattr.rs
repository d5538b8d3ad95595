//! Extended attributes (the kernel's `fs/fuse/xattr.c` side): passed through to the backing file,
//! except the statistics attribute of the root.

use super::*;

fn reply_xattr(reply: ReplyXattr, size: u32, value: &[u8]) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

impl FsState {
    pub(super) fn setxattr(
        &self,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        reply: ReplyEmpty,
    ) {
        let s = self;
        s.counters.op(Op::Xattr);
        if ino.0 == ROOT_ID && name == STATS_XATTR {
            s.counters.error();
            reply.error(Errno::EPERM);
            return;
        }
        let node = tri!(@state self, reply, s.node(ino));
        let (_fd, p) = tri!(@state self, reply, s.xattr_path(&node));
        let flags = rustix::fs::XattrFlags::from_bits_retain(flags as u32);
        tri!(
            @state self,
            reply,
            rustix::fs::setxattr(&p, name, value, flags).map_err(errno::of_sys)
        );
        if let Some(f) = s.files.get(&node.ident) {
            f.backing.restamp();
        }
        reply.ok();
    }

    pub(super) fn getxattr(&self, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let s = self;
        s.counters.op(Op::Xattr);
        if ino.0 == ROOT_ID && name == STATS_XATTR {
            let text = s.render_stats();
            reply_xattr(reply, size, text.as_bytes());
            return;
        }
        let node = tri!(@state self, reply, s.node(ino));
        let (_fd, p) = match s.xattr_path(&node) {
            Ok(x) => x,
            Err(e) if e == Errno::EPERM => {
                reply.error(Errno::ENODATA);
                return;
            }
            Err(e) => {
                s.counters.error();
                reply.error(e);
                return;
            }
        };
        let mut buf = vec![0u8; (size as usize).clamp(1, 1 << 16)];
        loop {
            match rustix::fs::getxattr(&p, name, &mut buf[..]) {
                Ok(n) => {
                    reply_xattr(reply, size, &buf[..n]);
                    return;
                }
                Err(rustix::io::Errno::RANGE) if buf.len() < (1 << 16) => buf.resize(1 << 16, 0),
                Err(e) => {
                    reply.error(errno::of_sys(e));
                    return;
                }
            }
        }
    }

    pub(super) fn listxattr(&self, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let s = self;
        s.counters.op(Op::Xattr);
        let node = tri!(@state self, reply, s.node(ino));
        let (_fd, p) = match s.xattr_path(&node) {
            Ok(x) => x,
            Err(e) if e == Errno::EPERM => {
                reply_xattr(reply, size, &[]);
                return;
            }
            Err(e) => {
                s.counters.error();
                reply.error(e);
                return;
            }
        };
        let mut buf = vec![0u8; 1 << 16];
        match rustix::fs::listxattr(&p, &mut buf[..]) {
            Ok(n) => reply_xattr(reply, size, &buf[..n]),
            Err(e) => reply.error(errno::of_sys(e)),
        }
    }

    pub(super) fn removexattr(&self, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let s = self;
        s.counters.op(Op::Xattr);
        let node = tri!(@state self, reply, s.node(ino));
        let (_fd, p) = tri!(@state self, reply, s.xattr_path(&node));
        tri!(
            @state self,
            reply,
            rustix::fs::removexattr(&p, name).map_err(errno::of_sys)
        );
        reply.ok();
    }
}
