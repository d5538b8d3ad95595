//! The errors of the dentry cache: one typed variant per way a lookup or a change can fail.

use std::ffi::OsString;
use std::path::PathBuf;

use rustix::io::Errno;

/// Why a dentry-cache operation failed. Every variant leaves the cache consistent: an operation
/// that fails changes neither the directory tree nor the cached entries (except that a lookup may
/// have cached what it learnt on the way, such as a negative entry for a missing name).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DcacheError {
    /// A name given to an `*_at` operation (or the last component of a path that names the object
    /// to create, remove or rename) is empty, `.` or `..`, or contains `/` or a NUL byte; or a
    /// path contains a NUL byte.
    #[error("invalid name {name:?}: a name is non-empty, is not `.` or `..`, and holds neither '/' nor NUL")]
    InvalidName {
        /// The offending name (or path).
        name: OsString,
    },
    /// The path was empty.
    #[error("empty path")]
    EmptyPath,
    /// A component that had to be a directory is not one (`ENOTDIR`).
    #[error("{path:?}: not a directory")]
    NotDir {
        /// The path as given.
        path: PathBuf,
    },
    /// A component does not exist (`ENOENT`), or the directory it was looked up in was removed.
    #[error("{path:?}: no such file or directory")]
    NotFound {
        /// The path as given.
        path: PathBuf,
    },
    /// More than [`MAX_SYMLINKS`](super::MAX_SYMLINKS) symbolic links were followed (`ELOOP`).
    #[error("{path:?}: too many levels of symbolic links")]
    Loop {
        /// The path as given.
        path: PathBuf,
    },
    /// The file system refused access (`EACCES` or `EPERM`).
    #[error("{path:?}: permission denied")]
    PermissionDenied {
        /// The path as given.
        path: PathBuf,
    },
    /// A [`DentryRef`](super::DentryRef) of another [`Dcache`](super::Dcache) was passed in.
    #[error("the entry belongs to another dentry cache")]
    ForeignEntry,
    /// Any other error of the file system, with its `errno` (`EEXIST`, `ENOTEMPTY`, `EISDIR`,
    /// `EXDEV`, `EINVAL`, `ENAMETOOLONG`, `EBUSY`, ...).
    #[error("{path:?}: {}", std::io::Error::from_raw_os_error(*errno))]
    Io {
        /// The path as given.
        path: PathBuf,
        /// The raw `errno` value.
        errno: i32,
    },
}

impl DcacheError {
    /// The `errno` that describes this error (for a file-system front end such as FUSE).
    pub fn errno(&self) -> i32 {
        match self {
            DcacheError::InvalidName { .. } | DcacheError::ForeignEntry => Errno::INVAL,
            DcacheError::EmptyPath | DcacheError::NotFound { .. } => Errno::NOENT,
            DcacheError::NotDir { .. } => Errno::NOTDIR,
            DcacheError::Loop { .. } => Errno::LOOP,
            DcacheError::PermissionDenied { .. } => Errno::ACCESS,
            DcacheError::Io { errno, .. } => return *errno,
        }
        .raw_os_error()
    }

    /// The error for a failed system call on `path`.
    pub(crate) fn from_errno(e: Errno, path: impl Into<PathBuf>) -> DcacheError {
        let path = path.into();
        match e {
            Errno::NOENT => DcacheError::NotFound { path },
            Errno::NOTDIR => DcacheError::NotDir { path },
            Errno::LOOP => DcacheError::Loop { path },
            Errno::ACCESS | Errno::PERM => DcacheError::PermissionDenied { path },
            e => DcacheError::Io {
                path,
                errno: e.raw_os_error(),
            },
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn errno_round_trips() {
        for e in [
            Errno::NOENT,
            Errno::NOTDIR,
            Errno::LOOP,
            Errno::ACCESS,
            Errno::EXIST,
            Errno::NOTEMPTY,
        ] {
            assert_eq!(DcacheError::from_errno(e, "x").errno(), e.raw_os_error());
        }
        assert_eq!(
            DcacheError::from_errno(Errno::PERM, "x"),
            DcacheError::PermissionDenied { path: "x".into() }
        );
        let io = DcacheError::from_errno(Errno::EXIST, "a/b");
        assert!(io.to_string().contains("a/b"), "{io}");
        assert_eq!(DcacheError::EmptyPath.errno(), Errno::NOENT.raw_os_error());
    }
}
