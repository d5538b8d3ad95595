//! [`FilemapError`], the page cache's error, and the checks that make one.

use std::io;

use super::MAX_FILE_SIZE;
use crate::mem::pool::PoolError;
use crate::store::StoreError;

/// Errors of the page cache. Nothing cached is lost when one is returned.
#[derive(Debug, thiserror::Error)]
pub enum FilemapError {
    /// `offset + len` is past [`MAX_FILE_SIZE`](super::MAX_FILE_SIZE) (or overflows): `EFBIG` for
    /// a file system.
    #[error("offset {offset} with length {len} is past the largest file offset")]
    Overflow {
        /// The offset asked for.
        offset: u64,
        /// The length asked for.
        len: u64,
    },
    /// The backing store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Write-back of this file failed since this handle last asked; the data is still cached
    /// and dirty, and will be written again.
    #[error("write-back failed: {}", io::Error::from_raw_os_error(*errno))]
    Writeback {
        /// The error number (EIO for faults without one).
        errno: i32,
    },
    /// The frame pool could not be made.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A configuration value is out of range.
    #[error("bad cache configuration: {0}")]
    Config(String),
    /// An index operation failed (an internal inconsistency; nothing was changed).
    #[error(transparent)]
    Index(#[from] crate::xarray::XaError),
    /// The cache's background threads could not be started.
    #[error("could not start the cache's threads: {0}")]
    Threads(std::io::Error),
    /// No memory could be freed in time: every frame is pinned by references or locks.
    #[error("the page cache has no reclaimable memory (all {frames} frames are in use)")]
    NoMemory {
        /// Frames in the cache.
        frames: usize,
    },
    /// The cache's dirty memory is at its limit and the last write-back of this file failed:
    /// the write is refused (nothing more of it is written) rather than let the file's
    /// unwritable data fill the cache. Writes go through again once a write-back of the file
    /// succeeds, or dirty memory falls below the limit.
    #[error("dirty memory is at its limit and write-back of this file fails: {}", io::Error::from_raw_os_error(*errno))]
    DirtyLimit {
        /// The error of the file's last write-back (EIO for faults without one).
        errno: i32,
    },
}

impl FilemapError {
    /// The error's [`io::ErrorKind`].
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            FilemapError::Overflow { .. } => io::ErrorKind::FileTooLarge,
            FilemapError::Config(_) | FilemapError::Index(_) => io::ErrorKind::InvalidInput,
            FilemapError::Store(e) => e.kind(),
            FilemapError::Writeback { errno } | FilemapError::DirtyLimit { errno } => {
                io::Error::from_raw_os_error(*errno).kind()
            }
            FilemapError::Pool(_) | FilemapError::NoMemory { .. } => io::ErrorKind::OutOfMemory,
            FilemapError::Threads(e) => e.kind(),
        }
    }
}

/// The result type of page cache operations.
pub type Result<T, E = FilemapError> = std::result::Result<T, E>;

/// The errno recorded for a store error in a mapping's [`ErrSeq`](super::ErrSeq).
pub(super) fn errno_of(e: &StoreError) -> u16 {
    const EIO: i32 = 5;
    let errno = match e {
        StoreError::Io { errno: Some(n), .. } => *n,
        _ => EIO,
    };
    u16::try_from(errno).unwrap_or(EIO as u16)
}

/// Checks that `offset + len` stays within a file.
pub(super) fn check_range(offset: u64, len: usize) -> Result<u64> {
    let len = len as u64;
    match offset.checked_add(len) {
        Some(end) if end <= MAX_FILE_SIZE => Ok(end),
        _ => Err(FilemapError::Overflow { offset, len }),
    }
}

/// The error of a read that found the file ending at `offset`.
pub(super) fn short_read(offset: u64) -> FilemapError {
    FilemapError::Store(StoreError::Io {
        op: crate::store::Op::Read,
        offset,
        kind: io::ErrorKind::UnexpectedEof,
        errno: None,
    })
}
