//! Backing stores: where a cached file's bytes live when they are not in memory (the block
//! layer below a file system).
//!
//! A [`Store`] is a flat, resizable array of bytes with positional reads and writes, like a file
//! accessed with `pread`/`pwrite`. Implementations:
//!
//! - [`FileStore`]: a real file through rustix, buffered or with `O_DIRECT` (straight into the
//!   page-aligned frames of the pool, bypassing the kernel's page cache — what benchmarks use, so
//!   that the kernel's cache does not hide quire's misses).
//! - [`MemStore`]: bytes in memory, for tests; it also keeps the image as of the last `sync`, so
//!   tests can check what would survive a crash.
//! - [`FaultyStore`]: wraps another store and injects I/O errors and short transfers on chosen
//!   byte ranges, for the error-handling tests.
//!
//! # Contract
//!
//! - `read_at` transfers at most `buf.len()` bytes and returns how many. It returns fewer at the
//!   end of the store (0 at or past it), and may return fewer anywhere (a short transfer), as
//!   `pread` may; [`Store::read_full_at`] loops until the buffer is full or the end is reached.
//! - `write_at` likewise may write fewer bytes than asked; [`Store::write_all_at`] loops. Writing
//!   past the end extends the store; a gap reads as zeros.
//! - Offsets are byte offsets; `offset + len` must not exceed `i64::MAX` ([`StoreError::Overflow`]).
//! - [`Store::alignment`] says what a store needs of its requests: with `n > 1`, the offset, the
//!   length and the buffer's address must all be multiples of `n` ([`StoreError::Unaligned`]
//!   otherwise). Frames of the pool are 4 KiB aligned, so whole-folio I/O always qualifies; a
//!   file whose length is not a multiple of `n` is written with whole pages and then cut back
//!   with [`Store::set_len`]. A read at the end returns the bytes up to the end, as usual.
//! - Errors are typed ([`StoreError`]) and carry the operation and the offset; they are `Clone`
//!   so that the page cache can record one per file and report it to every `fsync`.

use std::io;
use std::sync::Arc;

pub mod faulty;
pub mod file;
pub mod mem;
mod read;

pub use faulty::{Fault, FaultId, FaultKind, FaultyStore};
pub use file::{FileStore, IoMode, OpenOptions, DIRECT_ALIGN};
pub use mem::MemStore;
pub(crate) use read::ReadEnd;
pub use read::ReadRequest;

/// The largest offset a store accepts (the kernel's `loff_t` limit).
pub const MAX_OFFSET: u64 = i64::MAX as u64;

/// Which operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Opening the store.
    Open,
    /// A read.
    Read,
    /// A write.
    Write,
    /// A sync to stable storage.
    Sync,
    /// Reading the length.
    Len,
    /// Setting the length.
    SetLen,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Op::Open => "open",
            Op::Read => "read",
            Op::Write => "write",
            Op::Sync => "sync",
            Op::Len => "len",
            Op::SetLen => "set_len",
        })
    }
}

/// An error from a store.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The operating system (or an injected fault) reported an I/O error.
    #[error("{op} at offset {offset} failed: {}", describe(*kind, *errno))]
    Io {
        /// The operation.
        op: Op,
        /// The byte offset it was at (0 for operations without one).
        offset: u64,
        /// The error's kind.
        kind: io::ErrorKind,
        /// The OS error number, if there was one.
        errno: Option<i32>,
    },
    /// A request that the store's alignment rules out (see [`Store::alignment`]).
    #[error(
        "{op} at offset {offset} of {len} bytes (buffer at {addr:#x}) is not aligned to {align} bytes"
    )]
    Unaligned {
        /// The operation.
        op: Op,
        /// The offset asked for.
        offset: u64,
        /// The length asked for.
        len: usize,
        /// The buffer's address.
        addr: usize,
        /// The alignment the store needs.
        align: usize,
    },
    /// `offset + len` is past [`MAX_OFFSET`].
    #[error("{op} at offset {offset} of {len} bytes overflows the largest file offset")]
    Overflow {
        /// The operation.
        op: Op,
        /// The offset asked for.
        offset: u64,
        /// The length asked for.
        len: u64,
    },
    /// The store would grow past its limit (a [`MemStore`]'s maximum length).
    #[error("{op} at offset {offset} would grow the store to {len} bytes, past its limit {limit}")]
    TooLarge {
        /// The operation.
        op: Op,
        /// The offset asked for.
        offset: u64,
        /// The length the store would have.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// The file system refused `O_DIRECT` for this file (e.g. some tmpfs, overlayfs or FUSE
    /// mounts); open it with [`IoMode::Buffered`] or [`IoMode::PreferDirect`].
    #[error("the file system refused O_DIRECT for {path}: {}", describe(io::ErrorKind::InvalidInput, Some(*errno)))]
    DirectUnsupported {
        /// The file.
        path: String,
        /// The OS error number.
        errno: i32,
    },
    /// `write_all_at` made no progress: the store accepted zero bytes.
    #[error("write at offset {offset} wrote zero bytes")]
    WriteZero {
        /// Where it stopped.
        offset: u64,
    },
}

fn describe(kind: io::ErrorKind, errno: Option<i32>) -> String {
    match errno {
        Some(e) => io::Error::from_raw_os_error(e).to_string(),
        None => io::Error::from(kind).to_string(),
    }
}

impl StoreError {
    /// An I/O error from an OS error.
    pub fn io(op: Op, offset: u64, err: &io::Error) -> StoreError {
        StoreError::Io {
            op,
            offset,
            kind: err.kind(),
            errno: err.raw_os_error(),
        }
    }

    /// An I/O error from a rustix error number.
    pub fn errno(op: Op, offset: u64, e: rustix::io::Errno) -> StoreError {
        StoreError::io(op, offset, &io::Error::from(e))
    }

    /// The error's [`io::ErrorKind`].
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            StoreError::Io { kind, .. } => *kind,
            StoreError::Unaligned { .. }
            | StoreError::Overflow { .. }
            | StoreError::DirectUnsupported { .. } => io::ErrorKind::InvalidInput,
            StoreError::TooLarge { .. } => io::ErrorKind::FileTooLarge,
            StoreError::WriteZero { .. } => io::ErrorKind::WriteZero,
        }
    }

    /// The offset the error is about (0 where there is none).
    pub fn offset(&self) -> u64 {
        match self {
            StoreError::Io { offset, .. }
            | StoreError::Unaligned { offset, .. }
            | StoreError::Overflow { offset, .. }
            | StoreError::TooLarge { offset, .. }
            | StoreError::WriteZero { offset } => *offset,
            StoreError::DirectUnsupported { .. } => 0,
        }
    }
}

impl From<StoreError> for io::Error {
    fn from(e: StoreError) -> io::Error {
        match e {
            StoreError::Io {
                errno: Some(errno), ..
            } => io::Error::from_raw_os_error(errno),
            e => io::Error::new(e.kind(), e),
        }
    }
}

/// The result type of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Checks that `offset + len` stays within [`MAX_OFFSET`].
pub fn check_range(op: Op, offset: u64, len: usize) -> Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= MAX_OFFSET => Ok(()),
        _ => Err(StoreError::Overflow {
            op,
            offset,
            len: len as u64,
        }),
    }
}

/// Checks a request against an alignment (1: anything goes).
pub fn check_alignment(op: Op, offset: u64, len: usize, addr: usize, align: usize) -> Result<()> {
    if align > 1
        && (!offset.is_multiple_of(align as u64)
            || !len.is_multiple_of(align)
            || !addr.is_multiple_of(align))
    {
        return Err(StoreError::Unaligned {
            op,
            offset,
            len,
            addr,
            align,
        });
    }
    Ok(())
}

/// Checks a read or write of `buf` at `offset` against the offset limit ([`check_range`]) and
/// against `align` ([`check_alignment`]: the offset, the length and the buffer's address).
pub fn check_request(op: Op, offset: u64, buf: &[u8], align: usize) -> Result<()> {
    check_range(op, offset, buf.len())?;
    check_alignment(op, offset, buf.len(), buf.as_ptr() as usize, align)
}

/// A backing store; see the [module documentation](self) for the contract.
pub trait Store: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many (0 at or past the end).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize>;

    /// Writes up to `buf.len()` bytes at `offset`, extending the store if needed; returns how
    /// many.
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize>;

    /// Makes every completed write (and length change) durable.
    #[doc(alias = "fdatasync")]
    fn sync(&self) -> Result<()>;

    /// [`Store::sync`], and the store's other metadata (times, owner, mode) durable too: what
    /// `fsync` is to `fdatasync`, in one call (a second sync after the first would pay the
    /// device's flush twice). By default, [`Store::sync`]: a store without such metadata.
    #[doc(alias = "fsync")]
    fn sync_all(&self) -> Result<()> {
        self.sync()
    }

    /// The store's length in bytes.
    fn len(&self) -> Result<u64>;

    /// Sets the length: cuts the store or extends it with zeros.
    fn set_len(&self, len: u64) -> Result<()>;

    /// The alignment requests must have (offset, length and buffer address), 1 for none. 4096
    /// for a [`FileStore`] opened with `O_DIRECT`.
    fn alignment(&self) -> usize {
        1
    }

    /// A file descriptor whose `pread`/`pwrite` at the same offsets are this store's reads and
    /// writes (same alignment rules), for an I/O engine to submit them asynchronously
    /// ([`crate::bio`]: io_uring). `None` (the default): the engine calls
    /// [`Store::read_at`]/[`Store::write_at`] on its threads — the choice for any store that
    /// does more than plain file I/O.
    ///
    /// A wrapper around a [`FileStore`] chooses here: forwarding `io_fd` keeps its reads on
    /// io_uring, but the engine then reads the descriptor itself and the wrapper's `read_at`
    /// never sees them; not forwarding it (the default) sends every read through the wrapper,
    /// on the engine's few threads — a stream of small folios that way ran at a tenth of its
    /// speed (docs/journal/). To count a file's misses, forward `io_fd` and
    /// read [`crate::CachedFile::store_bytes_read`].
    fn io_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// Called when a write the I/O engine made on [`Store::io_fd`] has ended (whatever its
    /// result): what [`Store::write_at`] does after its `pwrite`, for a store that keeps state
    /// about its file (the FUSE mount's change stamp). The default does nothing.
    fn io_fd_written(&self) {}

    /// Whether the store completes reads itself, asynchronously (asked once, when a file is
    /// opened): the file's read batches then go to [`Store::submit_reads`] instead of the I/O
    /// engine's threads running [`Store::read_at`] (a store over the network that keeps many requests in
    /// flight on its own runtime, and merges adjacent ones). The default: no.
    fn completes_reads(&self) -> bool {
        false
    }

    /// Takes reads to complete later ([`ReadRequest::complete`]), on any thread;
    /// called only where [`Store::completes_reads`] says so, with a batch's requests for this
    /// store in offset order as submitted (a readahead window: usually adjacent). It must not
    /// block on their I/O. The default completes each at once with [`Store::read_full_at`].
    fn submit_reads(&self, reqs: Vec<ReadRequest>) {
        for mut r in reqs {
            let offset = r.offset();
            let res = self.read_full_at(offset, r.buf());
            r.complete(res);
        }
    }

    /// Whether the store keeps copies of clean data the cache evicts ([`Store::evicted_clean`]):
    /// a second, slower tier below the memory budget (a local disk cache in front of a remote
    /// store). Asked once, when a file is opened. The default: no.
    fn keeps_evicted(&self) -> bool {
        false
    }

    /// Reclaim evicted the clean, up-to-date folio holding `data` at store offset `offset`
    /// (the kernel's cleancache "put"). Called under the folio's lock during reclaim: copy or
    /// queue, don't block. The bytes are what the store would return for that range (the
    /// cache's copy, which may be newer than the store's if the store lost a write: a tier must
    /// key what it keeps by what it knows of the store's version).
    #[doc(alias = "cleancache_put_page")]
    fn evicted_clean(&self, offset: u64, data: &[u8]) {
        let _ = (offset, data);
    }

    /// Whether the store is empty.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Reads until `buf` is full or the end is reached, retrying short transfers; returns the
    /// bytes read (less than `buf.len()` only at the end). On an error, the bytes before it may
    /// have been read. On a store that needs aligned requests, a transfer that ends off the
    /// alignment is the end of the data (that is how `O_DIRECT` reports a file's end), since the
    /// rest could not be asked for anyway.
    fn read_full_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        check_range(Op::Read, offset, buf.len())?;
        let align = self.alignment().max(1);
        let mut done = 0;
        while done < buf.len() && done % align == 0 {
            match self.read_at(offset + done as u64, &mut buf[done..])? {
                0 => break,
                n => done += n,
            }
        }
        Ok(done)
    }

    /// Writes all of `buf`, retrying short transfers.
    fn write_all_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        check_range(Op::Write, offset, buf.len())?;
        let mut done = 0;
        while done < buf.len() {
            match self.write_at(offset + done as u64, &buf[done..])? {
                0 => {
                    return Err(StoreError::WriteZero {
                        offset: offset + done as u64,
                    })
                }
                n => done += n,
            }
        }
        Ok(())
    }
}

macro_rules! forward_store {
    ($($ty:ty),*) => {$(
        impl<S: Store + ?Sized> Store for $ty {
            fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
                (**self).read_at(offset, buf)
            }
            fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
                (**self).write_at(offset, buf)
            }
            fn sync(&self) -> Result<()> {
                (**self).sync()
            }
            fn sync_all(&self) -> Result<()> {
                (**self).sync_all()
            }
            fn len(&self) -> Result<u64> {
                (**self).len()
            }
            fn set_len(&self, len: u64) -> Result<()> {
                (**self).set_len(len)
            }
            fn alignment(&self) -> usize {
                (**self).alignment()
            }
            fn io_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
                (**self).io_fd()
            }
            fn io_fd_written(&self) {
                (**self).io_fd_written()
            }
            fn completes_reads(&self) -> bool {
                (**self).completes_reads()
            }
            fn keeps_evicted(&self) -> bool {
                (**self).keeps_evicted()
            }
            fn evicted_clean(&self, offset: u64, data: &[u8]) {
                (**self).evicted_clean(offset, data)
            }
            fn submit_reads(&self, reqs: Vec<ReadRequest>) {
                (**self).submit_reads(reqs)
            }
        }
    )*};
}

forward_store!(Arc<S>, Box<S>, &S);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_convert_and_describe() {
        let e = StoreError::Io {
            op: Op::Read,
            offset: 8192,
            kind: io::ErrorKind::Other,
            errno: Some(5),
        };
        assert_eq!(e.offset(), 8192);
        let msg = e.to_string();
        assert!(msg.contains("read at offset 8192"), "{msg}");
        let io: io::Error = e.clone().into();
        assert_eq!(io.raw_os_error(), Some(5));
        let u = StoreError::Unaligned {
            op: Op::Write,
            offset: 1,
            len: 4096,
            addr: 0x1000,
            align: 4096,
        };
        assert_eq!(u.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(io::Error::from(u).kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn range_and_alignment_checks() {
        assert!(check_range(Op::Read, MAX_OFFSET - 10, 10).is_ok());
        assert!(matches!(
            check_range(Op::Read, MAX_OFFSET - 10, 11),
            Err(StoreError::Overflow { .. })
        ));
        assert!(check_range(Op::Read, u64::MAX, 1).is_err());
        assert!(check_alignment(Op::Read, 4096, 8192, 0x2000, 4096).is_ok());
        assert!(check_alignment(Op::Read, 4096, 100, 0x2000, 4096).is_err());
        assert!(check_alignment(Op::Read, 1, 100, 3, 1).is_ok());
    }
}
