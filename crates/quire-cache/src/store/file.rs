//! [`FileStore`]: a real file, through rustix's `pread`/`pwrite`, buffered or with `O_DIRECT`.
//!
//! With `O_DIRECT` the kernel moves data between the device and the caller's buffer without its
//! own page cache, which is what a cache above it wants (no double caching, and benchmarks see
//! real misses). The price is alignment: offset, length and buffer address must be multiples of
//! the device's logical block size. quire asks for [`DIRECT_ALIGN`] (4 KiB), which every Linux
//! block device satisfies and which the pool's frames have.
//!
//! Some file systems refuse `O_DIRECT` (tmpfs before Linux 6.6, some FUSE and overlay setups):
//! `open` fails with `EINVAL`. [`IoMode::Direct`] reports that as
//! [`StoreError::DirectUnsupported`]; [`IoMode::PreferDirect`] quietly opens the file buffered
//! instead, and [`FileStore::is_direct`] tells which one the caller got.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{self, Mode, OFlags};
use rustix::io::Errno;

use super::{check_range, check_request, Op, Result, Store, StoreError};

/// The alignment a [`FileStore`] opened with `O_DIRECT` demands.
pub const DIRECT_ALIGN: usize = 4096;

/// How a [`FileStore`] moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IoMode {
    /// Through the kernel's page cache; any offset, length and buffer.
    #[default]
    Buffered,
    /// `O_DIRECT`; requests must be aligned to [`DIRECT_ALIGN`]. Opening fails with
    /// [`StoreError::DirectUnsupported`] where the file system refuses it.
    Direct,
    /// `O_DIRECT` where the file system allows it, buffered otherwise.
    PreferDirect,
}

/// How to open a [`FileStore`] (after `std::fs::OpenOptions`). The file is always opened for
/// reading and writing.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    create: bool,
    truncate: bool,
    mode: IoMode,
}

impl OpenOptions {
    /// Open an existing file, buffered.
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }

    /// Create the file if it does not exist (mode 0644 before the umask).
    pub fn create(mut self, create: bool) -> OpenOptions {
        self.create = create;
        self
    }

    /// Cut the file to length 0 on open.
    pub fn truncate(mut self, truncate: bool) -> OpenOptions {
        self.truncate = truncate;
        self
    }

    /// How data moves; see [`IoMode`].
    pub fn mode(mut self, mode: IoMode) -> OpenOptions {
        self.mode = mode;
        self
    }

    /// Opens `path`.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<FileStore> {
        let path = path.as_ref();
        let mut flags = OFlags::RDWR | OFlags::CLOEXEC;
        if self.create {
            flags |= OFlags::CREATE;
        }
        if self.truncate {
            flags |= OFlags::TRUNC;
        }
        let mode = Mode::from_raw_mode(0o644);
        let open = |flags| loop {
            match fs::open(path, flags, mode) {
                Err(Errno::INTR) => continue,
                r => return r,
            }
        };
        let (fd, direct) = match self.mode {
            IoMode::Buffered => (open(flags), false),
            IoMode::Direct | IoMode::PreferDirect => match open(flags | OFlags::DIRECT) {
                Err(Errno::INVAL) if self.mode == IoMode::PreferDirect => (open(flags), false),
                Err(Errno::INVAL) => {
                    return Err(StoreError::DirectUnsupported {
                        path: path.display().to_string(),
                        errno: Errno::INVAL.raw_os_error(),
                    })
                }
                r => (r, true),
            },
        };
        let fd = fd.map_err(|e| StoreError::errno(Op::Open, 0, e))?;
        Ok(FileStore {
            fd,
            direct,
            path: path.to_path_buf(),
        })
    }
}

/// A file as a store; see the [module documentation](self).
#[derive(Debug)]
pub struct FileStore {
    fd: OwnedFd,
    direct: bool,
    path: PathBuf,
}

impl FileStore {
    /// Opens an existing file, read-write, in `mode`.
    pub fn open(path: impl AsRef<Path>, mode: IoMode) -> Result<FileStore> {
        OpenOptions::new().mode(mode).open(path)
    }

    /// Creates the file (or cuts an existing one to length 0), read-write, in `mode`.
    pub fn create(path: impl AsRef<Path>, mode: IoMode) -> Result<FileStore> {
        OpenOptions::new()
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(path)
    }

    /// Wraps a file the caller opened itself — for instance relative to a directory descriptor
    /// with `openat`, as a file system that must never leave its directory does. Whether it is
    /// `O_DIRECT` is read from the descriptor's status flags. `path` names it in messages; it
    /// is not opened. The descriptor should be open for reading and writing: one open for
    /// reading only serves reads, and writes to it fail with the system's `EBADF`.
    pub fn from_fd(fd: OwnedFd, path: impl Into<PathBuf>) -> Result<FileStore> {
        let flags = fs::fcntl_getfl(&fd).map_err(|e| StoreError::errno(Op::Open, 0, e))?;
        Ok(FileStore {
            fd,
            direct: flags.contains(OFlags::DIRECT),
            path: path.into(),
        })
    }

    /// The file's descriptor (for `fstat`, `fallocate` and the like; reads and writes should
    /// go through the store, which checks alignment).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether the file is open with `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// The path it was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Asks the kernel to drop its cached pages of this file (`posix_fadvise(DONTNEED)`), e.g.
    /// before a cold-read benchmark of a buffered store. Dirty pages are not dropped; sync first.
    pub fn drop_kernel_cache(&self) -> Result<()> {
        fs::fadvise(&self.fd, 0, None, fs::Advice::DontNeed)
            .map_err(|e| StoreError::errno(Op::Sync, 0, e))
    }
}

/// Runs a system call again while it fails with `EINTR` (a signal arrived before it did
/// anything); any other error becomes the store's error for `op` at `offset`.
fn restart<T>(op: Op, offset: u64, mut call: impl FnMut() -> rustix::io::Result<T>) -> Result<T> {
    loop {
        match call() {
            Ok(n) => return Ok(n),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(StoreError::errno(op, offset, e)),
        }
    }
}

impl Store for FileStore {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        check_request(Op::Read, offset, buf, self.alignment())?;
        restart(Op::Read, offset, || {
            rustix::io::pread(&self.fd, &mut *buf, offset)
        })
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        check_request(Op::Write, offset, buf, self.alignment())?;
        restart(Op::Write, offset, || {
            rustix::io::pwrite(&self.fd, buf, offset)
        })
    }

    /// `fdatasync`: the data and the length, not the other metadata.
    fn sync(&self) -> Result<()> {
        restart(Op::Sync, 0, || fs::fdatasync(&self.fd))
    }

    /// `fsync`: the data, the length and the other metadata (times, owner, mode).
    fn sync_all(&self) -> Result<()> {
        restart(Op::Sync, 0, || fs::fsync(&self.fd))
    }

    fn len(&self) -> Result<u64> {
        let st = fs::fstat(&self.fd).map_err(|e| StoreError::errno(Op::Len, 0, e))?;
        Ok(st.st_size as u64)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        check_range(Op::SetLen, len, 0)?;
        restart(Op::SetLen, len, || fs::ftruncate(&self.fd, len))
    }

    fn alignment(&self) -> usize {
        if self.direct {
            DIRECT_ALIGN
        } else {
            1
        }
    }

    /// The file itself: its reads and writes are plain `pread`/`pwrite`.
    fn io_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }
}
