//! `quire-fuse`: a FUSE file system that serves a directory through quire — its page cache
//! (the only data cache: every file is opened with direct I/O in the kernel), its memory budget,
//! its write-back, and its dentry cache — so that unmodified programs (dd, fio, sqlite, git,
//! tar) run on it.
//!
//! - [`fs`]: [`QuireFs`], the file system, and [`Passthrough`], the same file system with its
//!   data read and written straight from the backing files (the benchmark's comparison).
//! - [`serve`]: the layer every file system here is served through: [`Serve`] (one method per
//!   operation, returning its answer) and [`Fuse`], fuser's `Filesystem` over any of them.
//! - [`creds`]: acting as the caller (its ids, groups and capabilities) where a request
//!   creates something.
//! - [`nodes`]: FUSE node ids over quire dentries (lookup takes a reference, forget puts exactly
//!   the kernel's count), testable without FUSE.
//! - [`files`]: one quire mapping per backing file, its handles, and revalidation against
//!   changes made behind the mount.
//! - [`mount`]: mounting, choosing the channel (FUSE over io_uring where the kernel offers
//!   it, else the classic `/dev/fuse`), serving until unmounted or signalled, unmounting.
//! - [`sched`]: the daemon's threads at `SCHED_IDLE` where its scheduling group is its own, so
//!   that a reply does not move the program it wakes to another CPU.
//! - [`stats`]: the counters `quire stat` reads.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod creds;
pub mod errno;
pub mod files;
pub mod fs;
pub mod mount;
pub mod nodes;
mod ring;
pub mod sched;
pub mod serve;
pub mod stats;

pub use fs::{FsConfig, FsState, Passthrough, QuireFs};
pub use mount::{probe_max_file_size, ChannelChoice, MountOptions};
pub use serve::{Fuse, Serve};
