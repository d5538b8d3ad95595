//! `quire-object`: quire's page cache in front of object storage — S3 and every S3-compatible
//! server, Google Cloud Storage, Azure Blob Storage — through the [`object_store`] crate.
//!
//! One object is one cached file. Its misses are ranged GETs: a readahead window goes to the
//! store as one batch ([`quire::Store::submit_reads`]) and out as ranges of at most
//! [`BackingConfig::range_size`], all in flight at once on the backing's runtime, with no thread
//! per request. Writes stay in the cache (and, written back, in a local staging file) until
//! `fsync` or close uploads the object: one PUT when small, a multipart upload with parts in
//! flight when large.
//!
//! - [`Backing`]: a bucket (or a prefix of one): the client, its runtime, its counters.
//! - [`ObjectCache`]: the page cache in front of it, with close-to-open consistency
//!   ([`cache`] says exactly what it promises); [`ObjectHandle`]: an open object.
//! - [`mod@file`]: one object as a [`quire::Store`], and where each byte of it comes from.
//! - [`CachedStore`]: an [`object_store::ObjectStore`] that wraps any other and serves its reads
//!   from the cache — what a query engine (DataFusion, `parquet`, delta-rs, lance, SlateDB) takes.
//! - [`DiskTier`]: the second tier, clean folios evicted from memory kept on local disk.
//! - [`mod@budget`]: what the cache holds beside its page cache, each part bounded, and the
//!   bound on its resident memory ([`MemoryStats`], `quire stat`'s `memory_*` lines).
#![cfg_attr(
    feature = "fuse",
    doc = "- [`fs`] (feature `fuse`): [`ObjectFs`], the bucket as a FUSE file system (`quire mount \
           s3://…`), and exactly what it does and does not do."
)]
#![cfg_attr(
    not(feature = "fuse"),
    doc = "- `fs` (feature `fuse`): `ObjectFs`, the bucket as a FUSE file system (`quire mount \
           s3://…`), and exactly what it does and does not do."
)]
#![cfg_attr(
    feature = "object-store-013",
    doc = "- [`compat013`] (feature `object-store-013`): [`As014`](compat013::As014) and \
           [`As013`](compat013::As013), a store of object_store 0.13 (DataFusion 55's) as one of \
           0.14 (this crate's) and the other way round."
)]
#![cfg_attr(
    not(feature = "object-store-013"),
    doc = "- `compat013` (feature `object-store-013`): `As014` and `As013`, a store of \
           object_store 0.13 (DataFusion 55's) as one of 0.14 (this crate's) and the other way \
           round."
)]
//! - [`ObjectStats`]: requests by kind, bytes, HTTP attempts (so retries), errors, in flight.
//!
//! Errors at a file-system boundary are errnos: a missing object `ENOENT`, an object changed
//! under a reader or writer `ESTALE`, a key taken by another creator `EEXIST`, a refused
//! credential `EACCES`, anything else after the retries `EIO`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod backing;
pub mod budget;
pub mod cache;
#[cfg(feature = "object-store-013")]
pub mod compat013;
pub mod counters;
pub mod file;
#[cfg(feature = "fuse")]
pub mod fs;
mod spill;
pub mod store;
pub mod tier;

pub use backing::{errno_of, Backing, BackingConfig};
pub use budget::MemoryStats;
pub use cache::{ObjectCache, ObjectHandle};
pub use counters::{ObjectStats, Request};
pub use file::Version;
#[cfg(feature = "fuse")]
pub use fs::{ObjectFs, ObjectFsConfig};
pub use store::{CacheHint, CachedStore, CachedStoreConfig, CachedStoreStats, WritePolicy};
pub use tier::{DiskTier, TierStats};

/// The readahead window a cache in front of object storage should allow
/// ([`quire::CacheConfig::readahead_max`]; the page cache's default, 2 MiB, suits a local disk):
/// a sequential reader keeps this much in flight, which a link of a few milliseconds' latency
/// needs to run at its bandwidth. `quire mount URL` uses it. The window costs memory beside the
/// frames while it is in flight: the disk tier's queue of the same bytes, and a buffer for the
/// fetch where several requests share one range (a request alone in its range, as a large folio
/// of readahead is, gets each GET body written into its frames as it arrives). A cold 1 GiB read
/// by a mount of `--capacity 256M` (its frames, descriptors and tier queue) peaks at about
/// 275 MiB of its memory group with 8 MiB; a larger window reads no faster (the emulated link:
/// 2 ms a request, 1000 Mbit/s), and with 4 MiB a cold sequential read falls to 0.84× the link.
pub const READAHEAD_MAX: usize = 8 << 20;

/// What can go wrong outside a read or write (those report [`quire::FilemapError`]).
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The URL names no store this crate knows.
    #[error("bad object store URL {url}: {why}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The store could not be reached, or refused the credentials, or has no such bucket.
    #[error("cannot use {url}: {source}")]
    Connect {
        /// The URL.
        url: String,
        /// The store's error.
        source: Box<object_store::Error>,
    },
    /// A name that is not a valid object key.
    #[error("bad object name {key:?}: {why}")]
    Key {
        /// The name.
        key: String,
        /// Why.
        why: String,
    },
    /// A request about an object failed (after its retries).
    #[error("{key}: {message}")]
    Store {
        /// The object.
        key: String,
        /// The errno it stands for (`ENOENT` for a missing object).
        errno: i32,
        /// The store's message.
        message: String,
    },
    /// The page cache refused (no memory, a failed write-back).
    #[error(transparent)]
    Cache(#[from] quire::FilemapError),
    /// The disk tier's directory could not be used.
    #[error("disk tier {dir}: {source}")]
    Tier {
        /// The directory.
        dir: String,
        /// The error.
        source: std::io::Error,
    },
    /// The runtime could not be started.
    #[error("could not start the object store's runtime: {0}")]
    Runtime(std::io::Error),
}

impl ObjectError {
    pub(crate) fn store(key: &object_store::path::Path, e: &object_store::Error) -> ObjectError {
        ObjectError::Store {
            key: key.to_string(),
            errno: errno_of(e),
            message: e.to_string(),
        }
    }

    /// The errno a file system answers with.
    pub fn errno(&self) -> i32 {
        match self {
            ObjectError::Store { errno, .. } => *errno,
            ObjectError::Key { .. } | ObjectError::Url { .. } => libc::EINVAL,
            ObjectError::Cache(e) => filemap_errno(e),
            _ => libc::EIO,
        }
    }
}

/// The errno a page-cache error stands for (`EIO` where it carries none).
pub fn filemap_errno(e: &quire::FilemapError) -> i32 {
    use quire::FilemapError as F;
    match e {
        F::Store(quire::StoreError::Io {
            errno: Some(errno), ..
        }) => *errno,
        F::Writeback { errno } | F::DirtyLimit { errno } => *errno,
        F::Overflow { .. } => libc::EFBIG,
        F::NoMemory { .. } => libc::ENOMEM,
        _ => libc::EIO,
    }
}
