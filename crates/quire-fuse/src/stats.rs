//! Live counters of a mounted instance, read with `quire stat MNT` through the virtual extended
//! attribute [`STATS_XATTR`] of the mount's root: one `name value` line each, like
//! `/proc/vmstat`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The extended attribute of the mount's root that holds the counters (not listed by
/// `listxattr`, so copies of the tree do not carry it).
pub const STATS_XATTR: &str = "user.quire.stats";

/// Which channel the mount's requests come through, and why: set once at mount (and again if
/// the kernel refuses the rings), shown by `quire stat`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Channel {
    /// FUSE over io_uring (`false`: the classic `/dev/fuse` reads and writes).
    pub uring: bool,
    /// Queues (one per possible CPU) and entries in each, with io_uring.
    pub queues: usize,
    /// Entries per queue.
    pub entries: usize,
    /// Bytes of the entries' request and reply buffers.
    pub buffer_bytes: u64,
    /// Why this channel (what was asked, what the kernel offered or refused).
    pub why: String,
}

static CHANNEL: parking_lot::Mutex<Option<Channel>> = parking_lot::Mutex::new(None);

static SCHED: parking_lot::Mutex<Option<crate::sched::Sched>> = parking_lot::Mutex::new(None);

/// Records the policy the daemon's threads run under.
pub(crate) fn set_sched(s: crate::sched::Sched) {
    *SCHED.lock() = Some(s);
}

/// The policy the daemon's threads run under, once set.
pub fn sched() -> Option<crate::sched::Sched> {
    SCHED.lock().clone()
}

/// Appends the `fuse_sched_idle` and `fuse_sched` lines, once the policy is set (for every file
/// system's `quire stat`).
pub fn render_sched(out: &mut String) {
    if let Some(s) = sched() {
        let _ = writeln!(out, "fuse_sched_idle {}", u8::from(s.idle));
        let _ = writeln!(out, "fuse_sched {s}");
    }
}

/// Counts the requests served through the rings.
type RingCounter = std::sync::Arc<dyn Fn() -> u64 + Send + Sync>;

static RING_SERVED: parking_lot::Mutex<Option<RingCounter>> = parking_lot::Mutex::new(None);

/// Where the count of requests served through the rings is read.
pub(crate) fn set_ring_counter(f: RingCounter) {
    *RING_SERVED.lock() = Some(f);
}

/// Records the mount's channel.
pub fn set_channel(c: Channel) {
    *CHANNEL.lock() = Some(c);
}

/// The mount's channel, once chosen.
pub fn channel() -> Option<Channel> {
    CHANNEL.lock().clone()
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.uring {
            write!(
                f,
                "io_uring ({} queues x {} entries, {} KiB of buffers): {}",
                self.queues,
                self.entries,
                self.buffer_bytes >> 10,
                self.why
            )
        } else {
            write!(f, "classic /dev/fuse: {}", self.why)
        }
    }
}

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
        if let Some(c) = channel() {
            let _ = writeln!(out, "fuse_uring {}", u8::from(c.uring));
            let _ = writeln!(out, "fuse_ring_buffer_bytes {}", c.buffer_bytes);
            let served = RING_SERVED.lock().clone();
            let _ = writeln!(out, "fuse_ring_requests {}", served.map_or(0, |f| f()));
            let _ = writeln!(out, "fuse_channel {c}");
        }
        render_sched(out);
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
