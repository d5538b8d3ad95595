//! From the backing file's `statx` to what the kernel is told: times, file types and attributes.

use super::*;

pub(super) fn to_time(sec: i64, nsec: u32) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec)
    } else {
        UNIX_EPOCH - Duration::new(sec.unsigned_abs(), 0) + Duration::new(0, nsec)
    }
}

pub(super) fn kind_of_mode(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

pub(super) fn kind_of_dtype(t: rustix::fs::FileType) -> FileType {
    use rustix::fs::FileType as T;
    match t {
        T::Directory => FileType::Directory,
        T::Symlink => FileType::Symlink,
        T::Fifo => FileType::NamedPipe,
        T::Socket => FileType::Socket,
        T::CharacterDevice => FileType::CharDevice,
        T::BlockDevice => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// The attributes the kernel gets for node `id` whose backing file `st` describes.
pub fn attr_of(id: u64, st: &rustix::fs::Statx) -> FileAttr {
    let mode = u32::from(st.stx_mode);
    FileAttr {
        ino: INodeNo(id),
        size: st.stx_size,
        blocks: st.stx_blocks,
        atime: to_time(st.stx_atime.tv_sec, st.stx_atime.tv_nsec),
        mtime: to_time(st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
        ctime: to_time(st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
        crtime: to_time(st.stx_btime.tv_sec, st.stx_btime.tv_nsec),
        kind: kind_of_mode(mode),
        perm: (mode & 0o7777) as u16,
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        rdev: libc::makedev(st.stx_rdev_major, st.stx_rdev_minor) as u32,
        blksize: st.stx_blksize,
        flags: 0,
    }
}

/// `statx` of the file `fd` refers to (also an `O_PATH` descriptor).
pub fn statx_fd(fd: BorrowedFd<'_>) -> rustix::io::Result<rustix::fs::Statx> {
    rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    )
}

/// `/proc/self/fd/N`: the file an `O_PATH` descriptor refers to, for calls that have no
/// `*at` form taking a descriptor (chmod without following, xattrs).
pub(super) fn proc_path(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}
