//! `std::io` for cached files: [`FilemapError`] as an [`io::Error`], the positional
//! [`FileExt`] trait of `std::fs::File` for [`CachedFile`] (its documentation says how the
//! trait's methods and the inherent ones coexist), and [`FileCursor`], a position in a cached
//! file with [`Read`], [`Write`] and [`Seek`].

use std::borrow::Borrow;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use super::{CachedFile, FilemapError};

impl From<FilemapError> for io::Error {
    /// An error that carries an OS error number (a store's I/O error, a write-back error,
    /// [`FilemapError::DirtyLimit`]) becomes that OS error, as `std::fs` reports it
    /// (`raw_os_error()` gives the number); any other keeps its [`FilemapError::kind`] and
    /// wraps the typed error, which `io::Error::get_ref` and `into_inner` give back.
    fn from(e: FilemapError) -> io::Error {
        match e {
            FilemapError::Store(e) => io::Error::from(e),
            FilemapError::Writeback { errno } | FilemapError::DirtyLimit { errno } => {
                io::Error::from_raw_os_error(errno)
            }
            FilemapError::Threads(e) => e,
            e => io::Error::new(e.kind(), e),
        }
    }
}

/// `std::os::unix::fs::FileExt` over the inherent methods, for code written against that
/// trait.
///
/// # Inherent methods and `FileExt`
///
/// [`CachedFile`] has its own `read_at(offset, buf)`, `read_exact_at(offset, buf)`,
/// `write_at(offset, data)` and `write_all_at(offset, data)`, returning [`FilemapError`]: the
/// typed error, with the offset first as in the rest of quire. [`FileExt`] has the same names
/// with the buffer first and [`io::Error`]. Method-call syntax picks the inherent method, so
/// `file.read_at(0, &mut buf)` is quire's; code generic over `FileExt`, or a call written
/// `FileExt::read_at(&file, &mut buf, 0)`, gets the trait's. Passing the arguments in the other
/// method's order does not compile (an offset is not a buffer), so the two cannot be mixed up
/// silently. Both behave alike: reads are short only at the end of the file, writes are short
/// only when an error stopped them after a prefix was written (the error then comes from the
/// next call), and `read_exact_at`/`write_all_at` complete or fail.
///
/// ```
/// use std::os::unix::fs::FileExt;
/// use quire::{CacheConfig, MemStore, PageCache};
///
/// # fn main() -> std::io::Result<()> {
/// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
/// let file = cache.open(MemStore::new())?;
/// FileExt::write_all_at(&file, b"positional", 100)?;
/// let mut buf = [0u8; 10];
/// FileExt::read_exact_at(&file, &mut buf, 100)?;
/// assert_eq!(&buf, b"positional");
/// # Ok(())
/// # }
/// ```
impl FileExt for CachedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        CachedFile::read_at(self, offset, buf).map_err(io::Error::from)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        CachedFile::write_at(self, offset, buf).map_err(io::Error::from)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        CachedFile::read_exact_at(self, offset, buf).map_err(io::Error::from)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        CachedFile::write_all_at(self, offset, buf).map_err(io::Error::from)
    }
}

/// A cached file and a position in it: [`Read`], [`Write`] and [`Seek`] over
/// [`CachedFile::read_at`] and [`CachedFile::write_at`], like `std::io::Cursor` over a file.
///
/// `F` is anything that borrows a [`CachedFile`]: `&CachedFile` (from [`CachedFile::cursor`]),
/// an owned `CachedFile`, an `Arc<CachedFile>`. Each cursor has its own position; several
/// cursors on one file read and write it independently, as threads with `pread`/`pwrite`
/// would. Reading at or past the end returns 0; writing past the end extends the file (a gap
/// reads as zeros). [`Write::flush`] does nothing, as for a `std::fs::File`: written bytes are
/// in the page cache, visible to every reader, as soon as `write` returns; make them durable
/// with [`CachedFile::fsync`].
///
/// ```
/// use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
/// use quire::{CacheConfig, MemStore, PageCache};
///
/// # fn main() -> std::io::Result<()> {
/// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
/// let file = cache.open(MemStore::new())?;
/// let mut cur = file.cursor();
/// writeln!(cur, "first line")?;
/// writeln!(cur, "second line")?;
/// cur.seek(SeekFrom::Start(0))?;
/// let lines: Vec<String> = BufReader::new(cur).lines().collect::<Result<_, _>>()?;
/// assert_eq!(lines, ["first line", "second line"]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct FileCursor<F: Borrow<CachedFile>> {
    file: F,
    pos: u64,
}

impl<F: Borrow<CachedFile>> FileCursor<F> {
    /// A cursor at the start of `file`.
    pub fn new(file: F) -> FileCursor<F> {
        FileCursor { file, pos: 0 }
    }

    /// The position: the offset of the next byte read or written.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Moves to `pos` (which may be past the end).
    pub fn set_position(&mut self, pos: u64) {
        self.pos = pos;
    }

    /// The file.
    pub fn get_ref(&self) -> &CachedFile {
        self.file.borrow()
    }

    /// Gives the file back.
    pub fn into_inner(self) -> F {
        self.file
    }
}

impl<F: Borrow<CachedFile>> Read for FileCursor<F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.borrow().read_at(self.pos, buf)?;
        self.pos += n as u64;
        Ok(n)
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        // Reads are short only at the end of the file: one read tells.
        let n = self.file.borrow().read_at(self.pos, buf)?;
        self.pos += n as u64;
        if n < buf.len() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }
}

impl<F: Borrow<CachedFile>> Write for FileCursor<F> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.borrow().write_at(self.pos, buf)?;
        self.pos += n as u64;
        Ok(n)
    }

    /// Nothing to do: the bytes are in the cache already (see [`FileCursor`]).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<F: Borrow<CachedFile>> Seek for FileCursor<F> {
    /// Seeking before the start fails with [`io::ErrorKind::InvalidInput`] and leaves the
    /// position as it was; seeking past the end is allowed.
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let (base, delta) = match to {
            SeekFrom::Start(n) => {
                self.pos = n;
                return Ok(n);
            }
            SeekFrom::End(d) => (self.file.borrow().len(), d),
            SeekFrom::Current(d) => (self.pos, d),
        };
        match base.checked_add_signed(delta) {
            Some(n) => {
                self.pos = n;
                Ok(n)
            }
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("seek to {base} {delta:+} is before the start of the file or overflows"),
            )),
        }
    }

    fn stream_position(&mut self) -> io::Result<u64> {
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filemap::{CacheConfig, PageCache};
    use crate::store::{Fault, FaultyStore, MemStore};

    fn cache() -> PageCache {
        PageCache::new(CacheConfig::new(4 << 20)).unwrap()
    }

    #[test]
    fn cursor_reads_writes_and_seeks() {
        let cache = cache();
        let file = cache.open(MemStore::new()).unwrap();
        let mut c = file.cursor();
        c.write_all(&[1u8; 5000]).unwrap();
        assert_eq!(c.position(), 5000);
        c.write_all(b"tail").unwrap();
        assert_eq!(file.len(), 5004);
        assert_eq!(c.seek(SeekFrom::End(-4)).unwrap(), 5000);
        let mut tail = [0u8; 4];
        c.read_exact(&mut tail).unwrap();
        assert_eq!(&tail, b"tail");
        // At the end: 0, and read_exact fails with UnexpectedEof.
        assert_eq!(c.read(&mut tail).unwrap(), 0);
        assert_eq!(
            c.read_exact(&mut tail).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        // Before the start: refused, the position stays.
        c.seek(SeekFrom::Start(10)).unwrap();
        let e = c.seek(SeekFrom::Current(-11)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(c.stream_position().unwrap(), 10);
        assert_eq!(c.seek(SeekFrom::Current(-10)).unwrap(), 0);
        // Past the end: a write leaves a gap of zeros.
        c.seek(SeekFrom::Start(6000)).unwrap();
        c.write_all(b"x").unwrap();
        let mut all = Vec::new();
        c.seek(SeekFrom::Start(0)).unwrap();
        c.read_to_end(&mut all).unwrap();
        assert_eq!(all.len(), 6001);
        assert!(all[..5000].iter().all(|&b| b == 1));
        assert_eq!(&all[5000..5004], b"tail");
        assert!(all[5004..6000].iter().all(|&b| b == 0));
        assert_eq!(all[6000], b'x');
    }

    #[test]
    fn owned_cursor_and_io_copy() {
        let cache = cache();
        let src = cache.open(MemStore::from_vec(vec![7u8; 100_000])).unwrap();
        let dst = cache.open(MemStore::new()).unwrap();
        let mut to = FileCursor::new(std::sync::Arc::new(dst));
        let copied = io::copy(&mut FileCursor::new(src), &mut to).unwrap();
        assert_eq!(copied, 100_000);
        let dst = to.into_inner();
        let mut back = vec![0u8; 100_000];
        FileExt::read_exact_at(&*dst, &mut back, 0).unwrap();
        assert!(back.iter().all(|&b| b == 7));
    }

    #[test]
    fn errors_become_io_errors_with_their_errno() {
        let store = FaultyStore::new(MemStore::from_vec(vec![0u8; 3 * 4096]));
        store.add(Fault::read_error(4096..8192).persistent());
        let cache = cache();
        let file = cache.open(store).unwrap();
        let e = FileExt::read_at(&file, &mut [0u8; 10], 5000).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(5), "EIO: {e}");
        // An error without an errno keeps its kind and the typed error.
        let e = FileExt::write_at(&file, b"x", crate::filemap::MAX_FILE_SIZE).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        let inner = e.get_ref().and_then(|e| e.downcast_ref::<FilemapError>());
        assert!(
            matches!(inner, Some(FilemapError::Overflow { .. })),
            "{inner:?}"
        );
        let e = io::Error::from(FilemapError::Writeback { errno: 28 });
        assert_eq!(e.raw_os_error(), Some(28));
    }

    #[test]
    fn write_all_at_fails_where_write_at_is_short() {
        // Pages 0 and 1 are in the store; page 1 cannot be read, so a write that covers the end
        // of page 0 and the start of page 1 writes page 0's part and stops.
        let store = FaultyStore::new(MemStore::from_vec(vec![9u8; 2 * 4096]));
        store.add(Fault::read_error(4096..8192).persistent());
        let cache = cache();
        let file = cache.open(store).unwrap();
        let data = [3u8; 200];
        assert_eq!(
            file.write_at(4000, &data).unwrap(),
            96,
            "short: page 0 only"
        );
        let e = file.write_all_at(4000, &data).unwrap_err();
        assert!(matches!(e, FilemapError::Store(_)), "{e:?}");
        let e = FileExt::write_all_at(&file, &data, 4000).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(5));
        let mut got = [0u8; 96];
        file.read_exact_at(4000, &mut got).unwrap();
        assert_eq!(got, [3u8; 96]);
        // Where nothing fails, write_all_at writes everything.
        file.write_all_at(0, &[4u8; 4096]).unwrap();
        file.read_exact_at(0, &mut got).unwrap();
        assert_eq!(got, [4u8; 96]);
    }
}
