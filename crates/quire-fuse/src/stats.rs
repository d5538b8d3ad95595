//! Live counters of a mounted instance, read with `quire stat MNT` through the virtual extended
//! attribute [`STATS_XATTR`] of the mount's root: one `name value` line each, like
//! `/proc/vmstat`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The extended attribute of the mount's root that holds the counters (not listed by
/// `listxattr`, so copies of the tree do not carry it).
pub const STATS_XATTR: &str = "user.quire.stats";

/// FUSE operations counted one by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
#[allow(missing_docs)]
pub enum Op {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Open,
    Create,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Readdir,
    Readdirplus,
    Mkdir,
    Mknod,
    Symlink,
    Link,
    Unlink,
    Rmdir,
    Rename,
    Readlink,
    Xattr,
    Fallocate,
    Lseek,
    Statfs,
}

const OPS: [(&str, Op); 25] = [
    ("lookup", Op::Lookup),
    ("forget", Op::Forget),
    ("getattr", Op::Getattr),
    ("setattr", Op::Setattr),
    ("open", Op::Open),
    ("create", Op::Create),
    ("read", Op::Read),
    ("write", Op::Write),
    ("flush", Op::Flush),
    ("release", Op::Release),
    ("fsync", Op::Fsync),
    ("readdir", Op::Readdir),
    ("readdirplus", Op::Readdirplus),
    ("mkdir", Op::Mkdir),
    ("mknod", Op::Mknod),
    ("symlink", Op::Symlink),
    ("link", Op::Link),
    ("unlink", Op::Unlink),
    ("rmdir", Op::Rmdir),
    ("rename", Op::Rename),
    ("readlink", Op::Readlink),
    ("xattr", Op::Xattr),
    ("fallocate", Op::Fallocate),
    ("lseek", Op::Lseek),
    ("statfs", Op::Statfs),
];

/// The file system's own counters.
#[derive(Debug, Default)]
pub struct FsCounters {
    ops: [AtomicU64; 25],
    errors: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

impl FsCounters {
    /// Counts one request of `op`.
    #[inline]
    pub fn op(&self, op: Op) {
        self.ops[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one request answered with an error.
    #[inline]
    pub fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts bytes read.
    #[inline]
    pub fn read(&self, n: usize) {
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts bytes written.
    #[inline]
    pub fn written(&self, n: usize) {
        self.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Appends `fuse_<op> n` lines and the byte and error counts.
    pub fn render(&self, out: &mut String) {
        for (name, op) in OPS {
            let _ = writeln!(
                out,
                "fuse_{name} {}",
                self.ops[op as usize].load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(out, "fuse_errors {}", self.errors.load(Ordering::Relaxed));
        let _ = writeln!(
            out,
            "fuse_bytes_read {}",
            self.bytes_read.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "fuse_bytes_written {}",
            self.bytes_written.load(Ordering::Relaxed)
        );
    }
}

/// Parses the text of [`STATS_XATTR`] into `(name, value)` pairs (lines that do not parse are
/// skipped).
pub fn parse(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The resident memory of this process in bytes (from `/proc/self/statm`), if known.
pub fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_and_parse_back() {
        let c = FsCounters::default();
        c.op(Op::Read);
        c.op(Op::Read);
        c.op(Op::Statfs);
        c.read(4096);
        c.error();
        let mut s = String::new();
        c.render(&mut s);
        let p = parse(&s);
        let get = |k: &str| p.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        assert_eq!(get("fuse_read"), Some(2));
        assert_eq!(get("fuse_statfs"), Some(1));
        assert_eq!(get("fuse_write"), Some(0));
        assert_eq!(get("fuse_bytes_read"), Some(4096));
        assert_eq!(get("fuse_errors"), Some(1));
        assert_eq!(p.len(), OPS.len() + 3);
        for (i, (_, op)) in OPS.iter().enumerate() {
            assert_eq!(*op as usize, i, "the table is in the enum's order");
        }
        assert!(rss_bytes().is_some_and(|r| r > 0));
    }
}
