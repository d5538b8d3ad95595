//! Errors at the file-system boundary: every error of the library, of the dentry cache and of
//! the system becomes the `errno` Linux would return for it.

use std::io;

use fuser::Errno;
use quire::dcache::DcacheError;
use quire::filemap::FilemapError;
use quire::store::StoreError;

/// The `errno` of a dentry-cache error.
pub fn of_dcache(e: &DcacheError) -> Errno {
    Errno::from_i32(e.errno())
}

/// The `errno` of a system call's error.
pub fn of_sys(e: rustix::io::Errno) -> Errno {
    Errno::from_i32(e.raw_os_error())
}

/// The `errno` of a store error.
pub fn of_store(e: &StoreError) -> Errno {
    match e {
        StoreError::Io { errno: Some(n), .. } => Errno::from_i32(*n),
        StoreError::Overflow { .. } | StoreError::TooLarge { .. } => Errno::EFBIG,
        StoreError::Io { kind, .. } => of_kind(*kind),
        _ => Errno::EIO,
    }
}

/// The `errno` of a page-cache error.
pub fn of_filemap(e: &FilemapError) -> Errno {
    match e {
        FilemapError::Overflow { .. } => Errno::EFBIG,
        FilemapError::Store(s) => of_store(s),
        FilemapError::Writeback { errno } => Errno::from_i32(*errno),
        FilemapError::NoMemory { .. } | FilemapError::Pool(_) => Errno::ENOMEM,
        _ => Errno::EIO,
    }
}

/// The `errno` closest to an [`io::ErrorKind`] (for errors without an OS error number).
pub fn of_kind(kind: io::ErrorKind) -> Errno {
    match kind {
        io::ErrorKind::NotFound => Errno::ENOENT,
        io::ErrorKind::PermissionDenied => Errno::EACCES,
        io::ErrorKind::AlreadyExists => Errno::EEXIST,
        io::ErrorKind::InvalidInput => Errno::EINVAL,
        io::ErrorKind::FileTooLarge => Errno::EFBIG,
        io::ErrorKind::StorageFull => Errno::ENOSPC,
        io::ErrorKind::OutOfMemory => Errno::ENOMEM,
        io::ErrorKind::Unsupported => Errno::EOPNOTSUPP,
        _ => Errno::EIO,
    }
}

/// The `errno` of an [`io::Error`].
pub fn of_io(e: &io::Error) -> Errno {
    match e.raw_os_error() {
        Some(n) => Errno::from_i32(n),
        None => of_kind(e.kind()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quire::store::Op;

    #[test]
    fn errors_map_to_the_errno_linux_gives() {
        assert_eq!(
            of_filemap(&FilemapError::Overflow { offset: 1, len: 2 }),
            Errno::EFBIG
        );
        assert_eq!(
            of_filemap(&FilemapError::Writeback {
                errno: libc::ENOSPC
            }),
            Errno::ENOSPC
        );
        let e = StoreError::Io {
            op: Op::Write,
            offset: 0,
            kind: io::ErrorKind::Other,
            errno: Some(libc::EDQUOT),
        };
        assert_eq!(of_filemap(&FilemapError::Store(e)), Errno::EDQUOT);
        let eof = StoreError::Io {
            op: Op::Read,
            offset: 0,
            kind: io::ErrorKind::UnexpectedEof,
            errno: None,
        };
        assert_eq!(of_store(&eof), Errno::EIO);
        assert_eq!(
            of_dcache(&DcacheError::NotDir { path: "x".into() }),
            Errno::ENOTDIR
        );
        assert_eq!(of_sys(rustix::io::Errno::NAMETOOLONG), Errno::ENAMETOOLONG);
        assert_eq!(of_kind(io::ErrorKind::StorageFull), Errno::ENOSPC);
    }
}
