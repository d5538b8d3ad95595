//! Local files the object cache writes and reads back later — write staging files and the disk
//! tier's chunks — kept out of the kernel's page cache.
//!
//! Such a file's pages are read at most once more (a staged range when it is uploaded, a tier
//! page when a miss finds it), and what is read goes straight into quire's own frames: a copy in
//! the kernel's page cache is a second copy of data quire already budgets. It is not free
//! either: a memory cgroup charges the page cache its processes bring in to the group, and dirty
//! pages cannot be reclaimed until written — a 1 GiB upload staged through the page cache filled
//! a group of `--capacity` + 64 MiB with dirty pages and got the mount killed.
//!
//! So what is written is started to disk (`sync_file_range(SYNC_FILE_RANGE_WRITE)`) once
//! [`FLUSH_AT`] bytes have gathered, and the batch before it is waited for and dropped
//! (`posix_fadvise(POSIX_FADV_DONTNEED)`): at most 2 × [`FLUSH_AT`] bytes of a file being
//! written are in the page cache at once, and the disk writes overlap the next batch's. What is
//! read is dropped as soon as it is copied out.
//!
//! Why not `O_DIRECT` for everything: the writes and most staged reads are of any length at any
//! offset (a reader's range of a staged file), so each would need an aligned bounce buffer and
//! its own alignment rules per file system, and tmpfs and some FUSE file systems refuse it; a
//! write-out and a drop per few MiB gives the same bound with the kernel's own write-back. A
//! read that is aligned, as the disk tier's whole pages into quire's frames are, does go
//! direct ([`read_direct`]): it saves the kernel's copy, the page cache's fill and its drop,
//! which cost more CPU than the disk's transfer. On tmpfs (a staging directory in
//! `/tmp` on some systems) neither helps: its pages are memory until the file is deleted, so
//! the staged bytes of a file are memory until its upload (`quire stat` shows them as
//! `memory_staging_page_cache_bytes`).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// Bytes written to a file between two write-outs.
pub(crate) const FLUSH_AT: u64 = 4 << 20;

/// Starts writing `off..off + len` of `f` to disk (`wait`: and waits until it is written).
fn write_out(f: &File, off: u64, len: u64, wait: bool) {
    let flags = if wait {
        libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER
    } else {
        libc::SYNC_FILE_RANGE_WRITE
    };
    // SAFETY: a plain system call on a descriptor `f` owns; it touches no memory of ours. An
    // error (a file system without it) leaves the pages to the kernel's write-back, which is
    // only slower to free them.
    unsafe { libc::sync_file_range(f.as_raw_fd(), off as i64, len as i64, flags) };
}

/// Drops the clean pages of `off..off + len` of `f` (`len` 0: to the end) from the page cache.
pub(crate) fn drop_cached(f: &File, off: u64, len: u64) {
    // SAFETY: as above; advice only, its failure changes nothing but what stays cached.
    unsafe {
        libc::posix_fadvise(
            f.as_raw_fd(),
            off as i64,
            len as i64,
            libc::POSIX_FADV_DONTNEED,
        )
    };
}

/// Writes out and drops every page of `f`, waiting for the write (the disk tier's writer, after
/// a batch of pages).
pub(crate) fn flush_all(f: &File) {
    write_out(f, 0, 0, true);
    drop_cached(f, 0, 0);
}

/// Reads `buf.len()` bytes at `off` and drops them from the page cache.
pub(crate) fn read_dropping(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<()> {
    let r = f.read_exact_at(buf, off);
    drop_cached(f, off, buf.len() as u64);
    r
}

/// Reads `buf.len()` bytes at `off` of `f`, without the page cache where it can: where `buf`'s
/// address, its length and `off` are all multiples of 4 KiB, through a descriptor of the same
/// file opened with `O_DIRECT` for this read, so the disk's bytes land in `buf` (quire's frames,
/// for the disk tier) with no copy in the kernel's page cache to make and drop again. Anywhere
/// else, and where the file system refuses `O_DIRECT` (`EINVAL`), as [`read_dropping`].
///
/// Dirty pages of the range still in the page cache (a tier page written moments ago) are
/// written out by the kernel before a direct read, so the read sees them.
pub(crate) fn read_direct(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<()> {
    const ALIGN: u64 = 4096;
    let aligned = (buf.as_ptr() as u64).is_multiple_of(ALIGN)
        && (buf.len() as u64).is_multiple_of(ALIGN)
        && off.is_multiple_of(ALIGN);
    if aligned && !buf.is_empty() {
        // The same open file description's inode, wherever its path is now (a chunk deleted
        // by the tier's bound stays readable through it).
        let path = format!("/proc/self/fd/{}", f.as_raw_fd());
        let direct = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path);
        if let Ok(direct) = direct {
            match direct.read_exact_at(buf, off) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                r => return r,
            }
        }
    }
    read_dropping(f, buf, off)
}

/// A zeroed buffer whose first byte is page aligned, so that a direct read can land in it (a
/// plain `Vec<u8>`'s start is aligned only as the allocator happens to place it, and a read
/// into it would go through the page cache): a `Vec` with a page of slack, used from its first
/// aligned byte. The fetches that gather a range for a copy (a read of the store's own, adjacent
/// requests merged, an upload's part) use it, so that what the disk tier has of the range is
/// read direct.
pub(crate) struct PageBuf {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageBuf {
    const ALIGN: usize = 4096;

    /// `len` zeroed bytes.
    pub(crate) fn zeroed(len: usize) -> PageBuf {
        let buf = vec![0u8; len + Self::ALIGN - 1];
        let start = (Self::ALIGN - buf.as_ptr() as usize % Self::ALIGN) % Self::ALIGN;
        PageBuf { buf, start, len }
    }

    /// Keeps the first `len` bytes (all of them if there are fewer).
    pub(crate) fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// The bytes, without a copy.
    pub(crate) fn into_bytes(self) -> bytes::Bytes {
        bytes::Bytes::from(self.buf).slice(self.start..self.start + self.len)
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// A span of a file written since its last write-out: `lo..hi`, `bytes` written into it.
#[derive(Clone, Copy, Debug, Default)]
struct Span {
    lo: u64,
    hi: u64,
    bytes: u64,
}

impl Span {
    fn add(&mut self, off: u64, len: u64) {
        if self.bytes == 0 {
            (self.lo, self.hi) = (off, off + len);
        } else {
            self.lo = self.lo.min(off);
            self.hi = self.hi.max(off + len);
        }
        self.bytes += len;
    }
}

#[derive(Debug, Default)]
struct Pending {
    /// Written, not yet started to disk.
    open: Span,
    /// Started to disk, not yet waited for and dropped.
    started: Span,
}

/// A staging file: written through the page cache, its pages written out and dropped every
/// [`FLUSH_AT`] bytes, and dropped again as they are read (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct StagingFile {
    file: File,
    pending: Mutex<Pending>,
    /// The backing-wide count of staged bytes that may be in the page cache (written, not yet
    /// dropped).
    cached: Arc<AtomicU64>,
}

impl StagingFile {
    pub(crate) fn new(file: File, cached: Arc<AtomicU64>) -> StagingFile {
        StagingFile {
            file,
            pending: Mutex::new(Pending::default()),
            cached,
        }
    }

    pub(crate) fn write_all_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        self.file.write_all_at(buf, off)?;
        let len = buf.len() as u64;
        self.cached.fetch_add(len, Ordering::Relaxed);
        let mut p = self.pending.lock();
        p.open.add(off, len);
        if p.open.bytes < FLUSH_AT {
            return Ok(());
        }
        // The batch before is written out by now or nearly: wait for it and drop it; start this
        // one.
        let done = std::mem::take(&mut p.started);
        if done.bytes > 0 {
            write_out(&self.file, done.lo, done.hi - done.lo, true);
            drop_cached(&self.file, done.lo, done.hi - done.lo);
            self.cached.fetch_sub(done.bytes, Ordering::Relaxed);
        }
        let now = std::mem::take(&mut p.open);
        write_out(&self.file, now.lo, now.hi - now.lo, false);
        p.started = now;
        Ok(())
    }

    pub(crate) fn read_exact_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        read_dropping(&self.file, buf, off)
    }

    pub(crate) fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }
}

impl Drop for StagingFile {
    /// The file is deleted (it was made unlinked) as it closes, and its pages with it.
    fn drop(&mut self) {
        let p = self.pending.get_mut();
        self.cached
            .fetch_sub(p.open.bytes + p.started.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::{read_direct, PageBuf};
    use std::os::unix::fs::FileExt;

    /// A 4 KiB-aligned stretch of `len` bytes inside `v` (which has 4 KiB to spare).
    fn aligned(v: &mut [u8], len: usize) -> &mut [u8] {
        let skip = v.as_ptr().align_offset(4096);
        &mut v[skip..skip + len]
    }

    #[test]
    fn a_page_buf_is_aligned_zeroed_and_handed_on_whole() {
        for len in [0, 1, 4095, 4096, 100_000] {
            let mut b = PageBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % 4096, 0, "len {len}");
            assert!(b.iter().all(|&x| x == 0));
            for (i, x) in b.iter_mut().enumerate() {
                *x = (i % 251) as u8;
            }
            b.truncate(len / 2);
            b.truncate(len);
            assert_eq!(b.len(), len / 2, "truncate only shortens");
            let want: Vec<u8> = (0..len / 2).map(|i| (i % 251) as u8).collect();
            assert_eq!(&b[..], &want[..]);
            let bytes = b.into_bytes();
            assert_eq!(&bytes[..], &want[..]);
        }
        // A direct read lands in it.
        let f = tempfile::tempfile().unwrap();
        f.write_all_at(&[7u8; 8192], 0).unwrap();
        let mut b = PageBuf::zeroed(8192);
        read_direct(&f, &mut b, 0).unwrap();
        assert_eq!(&b[..], &[7u8; 8192][..]);
    }

    #[test]
    fn a_direct_read_sees_bytes_written_moments_ago() {
        let f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 % 251) as u8).collect();
        f.write_all_at(&data, 4096).unwrap();
        // Aligned: through O_DIRECT, which must first write the dirty pages out.
        let mut v = vec![0u8; 64 * 1024 + 4096];
        let buf = aligned(&mut v, 32 * 1024);
        read_direct(&f, buf, 4096 + 8192).unwrap();
        assert_eq!(buf, &data[8192..8192 + 32 * 1024]);
        // Rewritten in place, read again: the new bytes, not what the disk had.
        f.write_all_at(&[0xab; 4096], 4096 + 8192).unwrap();
        read_direct(&f, buf, 4096 + 8192).unwrap();
        assert_eq!(&buf[..4096], &[0xab; 4096][..]);
        assert_eq!(&buf[4096..], &data[8192 + 4096..8192 + 32 * 1024]);
    }

    #[test]
    fn unaligned_reads_and_short_files_are_served_or_refused_as_plain_reads() {
        let f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..20_000).map(|i| (i % 253) as u8).collect();
        f.write_all_at(&data, 0).unwrap();
        let mut v = vec![0u8; 16384];
        // An address off the alignment, an offset off it, a length off it.
        read_direct(&f, &mut v[1..4097], 0).unwrap();
        assert_eq!(&v[1..4097], &data[..4096]);
        let buf = aligned(&mut v, 4096);
        read_direct(&f, buf, 100).unwrap();
        assert_eq!(buf, &data[100..4196]);
        read_direct(&f, &mut buf[..1000], 4096).unwrap();
        assert_eq!(&buf[..1000], &data[4096..5096]);
        // Past the end: an error, as a plain read_exact_at gives, not short or wrong bytes.
        let buf = aligned(&mut v, 8192);
        let e = read_direct(&f, buf, 16384).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
