//! Suite `read`: reading file data through quire's page cache against the kernel's own.
//!
//! The suite writes a data file of its own (256 MiB; 32 MiB with `--quick`) into a fresh
//! directory under `/var/tmp`, or under the temporary directory when `/var/tmp` is missing or
//! on tmpfs — a real disk file system where there is one, so that `O_DIRECT` works and cold
//! reads reach the device — and removes the directory at the end, also on error. Every page of
//! the file starts with a tag derived from its offset, so reads are checked (outside the timed
//! loops for the hot case, page by page inside them for the cold case, where it costs both
//! variants the same few microseconds per MiB). The caches are large enough to hold the file
//! (`2 × file`, default [`CacheConfig`] otherwise).
//!
//! - case `hot-random`: random 4 KiB reads at 4 KiB-aligned offsets, the whole file cached, on
//!   1 and 2 threads sharing one handle (as threads share one file descriptor), metric `iops`,
//!   and `iops_per_cpu_s` (reads per CPU second of the process, from getrusage): on a machine
//!   shared with other work the threads do not always get a core, which lowers `iops` but not
//!   the CPU cost of a read.
//!   - `quire-read`: [`CachedFile::read_at`] into a 4 KiB buffer (one O_DIRECT store; quire's
//!     cache warmed by reading the whole file once, which lands it in large folios).
//!   - `quire-ref`: [`CachedFile::read_folio`], then 64 bytes of the page read from the
//!     zero-copy reference, which is then dropped.
//!   - `quire-with-folio`: [`CachedFile::with_folio`], 64 bytes of the page read inside the
//!     closure — the zero-copy borrow that takes no reference (the thread names the folio in a
//!     slot of its own instead).
//!   - `quire-reader-read`, `quire-reader-ref`, `quire-reader-with-folio`: the same through a
//!     [`quire::filemap::FileReader`] per thread (one read-side critical section kept across 64
//!     hits; the reader's own translations instead of the thread's).
//!   - `quire-read-64`, `quire-reader-read-64`: a 64-byte [`CachedFile::read_at`] at the start of
//!     the page, from the handle and through a reader: the copying hit that takes no reference,
//!     doing what `kernel-mmap-ref` does (64 bytes of a random page into a buffer).
//!   - `kernel-pread`: `pread` of 4 KiB from a plain buffered [`File`], the file read whole
//!     once first so the kernel caches it.
//!   - `kernel-mmap`: a 4 KiB copy out of a shared read-only mapping of the file, pre-faulted by
//!     touching every page.
//!   - `kernel-mmap-ref`: 64 bytes of a random page of that mapping (the zero-copy anchor beside
//!     `quire-ref`).
//! - case `cold-seq`: the whole file read sequentially in 1 MiB reads on one thread, metric
//!   `mb_per_s` (MiB/s), best of several runs taken alternately.
//!   - `quire`: an O_DIRECT store with readahead into large folios; before each run the file is
//!     invalidated in the cache (which stays, so its memory is already faulted in, as a kernel's
//!     page cache memory is; a first untimed run faults it in) and read through a fresh handle.
//!   - `kernel`: buffered reads of a freshly opened [`File`] after `posix_fadvise(DONTNEED)`
//!     on the file (which was synced when written, so nothing dirty keeps pages cached).
//!
//! Full runs: 256 MiB, 2 s per hot measurement, 3 runs per sequential variant (about 20 s with
//! the `write` suite). `--quick`: 32 MiB, 0.5 s per hot measurement, 2 runs per sequential
//! variant (about 5 s for `read` and `write` together).
//!
//! Why the first quire run of a sequential case is not timed: the frame pool is an anonymous
//! mapping advised for transparent huge pages, and its first touch (page faults, zeroing, and
//! compaction where the kernel has to make huge pages) cost 0.3 to 1.7 s per 256 MiB on the
//! development machine — a one-off cost of a new cache, not of reading or writing a file.

use std::ffi::CString;
use std::fs::File;
use std::hint::black_box;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use quire::filemap::{CacheConfig, CachedFile, PageCache};
use quire::mem::FolioRef;
use quire::store::{FileStore, IoMode, StoreError};

use super::harness::{measure, Rng};
use super::{Bench, Suite};

pub const SUITE: Suite = Suite {
    name: "read",
    about: "page cache reads: hot random 4 KiB, cold sequential; vs the kernel's",
    variants: &VARIANTS,
    steps,
    run,
};

/// Bytes in a page.
pub(super) const PAGE: usize = 4096;
/// Bytes per sequential read or write.
pub(super) const CHUNK: usize = 1 << 20;
/// Threads of the hot case.
const HOT_THREADS: [usize; 2] = [1, 2];
/// The suite's variants: those of the hot case, in the order they run, then those of the cold
/// case.
const VARIANTS: [&str; 13] = [
    "quire-read",
    "quire-ref",
    "quire-with-folio",
    "quire-reader-read",
    "quire-reader-ref",
    "quire-reader-with-folio",
    "quire-read-64",
    "quire-reader-read-64",
    "kernel-pread",
    "kernel-mmap",
    "kernel-mmap-ref",
    "kernel",
    "quire",
];
/// Variants of the hot case, in the order they run.
const HOT_VARIANTS: &[&str] = VARIANTS.split_at(11).0;
/// Pages whose contents are checked through each variant before the hot case is timed.
const CHECKED_PAGES: usize = 2048;

/// The data file's size: 256 MiB, or 32 MiB with `--quick`.
pub(super) fn file_size(quick: bool) -> u64 {
    if quick {
        32 << 20
    } else {
        256 << 20
    }
}

/// Timed runs of each variant of a sequential case (the best one is recorded).
pub(super) fn seq_runs(quick: bool) -> usize {
    if quick {
        2
    } else {
        3
    }
}

/// How long each hot measurement runs.
fn hot_duration(quick: bool) -> Duration {
    Duration::from_secs_f64(if quick { 0.5 } else { 2.0 })
}

fn steps(p: &super::Plan<'_>) -> u64 {
    // Writing the file, warming the hot case, its measurements, the untimed cold run, the cold
    // runs.
    (2 + p.threads(&HOT_THREADS).len() * HOT_VARIANTS.len() + 1 + 2 * seq_runs(p.quick)) as u64
}

// ---- the scratch directory and the file's contents ------------------------------------------

/// A fresh directory for the suite's files, removed (with everything in it) when dropped.
pub(super) struct Scratch {
    dir: PathBuf,
    fs: String,
}

const TMPFS_MAGIC: i64 = 0x0102_1994;

/// The file system type of `path` (from `statfs`'s magic number), and whether it is tmpfs.
fn fs_type(path: &Path) -> Option<(String, bool)> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statfs` only writes the struct we own; all-zero bytes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a valid pointer to a `statfs`.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // `f_type`'s type differs between targets.
    let magic = st.f_type as i64;
    let name = match magic {
        0xEF53 => "ext4".to_string(),
        0x5846_5342 => "xfs".to_string(),
        0x9123_683E => "btrfs".to_string(),
        0x2FC1_2FC1 => "zfs".to_string(),
        0x794C_7630 => "overlayfs".to_string(),
        0x6573_5546 => "fuse".to_string(),
        TMPFS_MAGIC => "tmpfs".to_string(),
        m => format!("fs magic {m:#x}"),
    };
    Some((name, magic == TMPFS_MAGIC))
}

impl Scratch {
    /// Makes `quire-bench-<tag>-<pid>-<nanos>` under `/var/tmp` if that is on a disk file
    /// system, else under [`std::env::temp_dir`].
    pub(super) fn new(tag: &str) -> anyhow::Result<Scratch> {
        let tmp = std::env::temp_dir();
        let var_tmp = PathBuf::from("/var/tmp");
        let base = match fs_type(&var_tmp) {
            Some((_, false)) => var_tmp,
            _ => tmp,
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("quire-bench-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let fs = fs_type(&dir).map_or_else(|| "unknown fs".to_string(), |(n, _)| n);
        Ok(Scratch { dir, fs })
    }

    /// A path inside the directory.
    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Where the directory is and on what file system, for the user.
    pub(super) fn describe(&self) -> String {
        format!("{} ({})", self.dir.display(), self.fs)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The suite files' contents: a fixed random 1 MiB pattern repeated, with the first 8 bytes of
/// every page replaced by a tag derived from the page's offset.
pub(super) struct Content {
    pattern: Vec<u8>,
}

impl Content {
    pub(super) fn new() -> Content {
        let mut rng = Rng::new(0x0051_7569_7265);
        let pattern = (0..CHUNK / 8)
            .flat_map(|_| rng.next_u64().to_le_bytes())
            .collect();
        Content { pattern }
    }

    /// The tag of the page at byte `offset`.
    #[inline]
    pub(super) fn tag(offset: u64) -> u64 {
        // splitmix64's finaliser.
        let mut z = offset.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Fills `buf` (at most 1 MiB) with the bytes at `offset` (a multiple of 1 MiB).
    pub(super) fn fill(&self, offset: u64, buf: &mut [u8]) {
        debug_assert_eq!(offset % CHUNK as u64, 0);
        buf.copy_from_slice(&self.pattern[..buf.len()]);
        Content::retag(offset, buf);
    }

    /// Rewrites the tags of `buf`, filled for some other offset, for `offset`: cheaper than
    /// [`Content::fill`] when only the offset changes.
    #[inline]
    pub(super) fn retag(offset: u64, buf: &mut [u8]) {
        for (i, page) in buf.chunks_mut(PAGE).enumerate() {
            let tag = Content::tag(offset + (i * PAGE) as u64).to_le_bytes();
            let n = page.len().min(8);
            page[..n].copy_from_slice(&tag[..n]);
        }
    }

    /// Whether `page` (a whole page, or its first bytes) holds the bytes at `offset` (a
    /// multiple of 4 KiB).
    pub(super) fn check_page(&self, offset: u64, page: &[u8]) -> bool {
        let n = page.len().min(PAGE);
        let at = (offset % CHUNK as u64) as usize;
        let tag = Content::tag(offset).to_le_bytes();
        let t = n.min(8);
        page[..t] == tag[..t] && page[t..n] == self.pattern[at + t..at + n]
    }

    /// Whether every page of `buf`, read at `offset` (a multiple of 4 KiB), starts with its tag.
    #[inline]
    pub(super) fn check_tags(offset: u64, buf: &[u8]) -> bool {
        buf.chunks(PAGE).enumerate().all(|(i, page)| {
            let tag = Content::tag(offset + (i * PAGE) as u64).to_le_bytes();
            let n = page.len().min(8);
            page[..n] == tag[..n]
        })
    }
}

/// Writes a file of `size` bytes (a multiple of 1 MiB) with [`Content`], in 1 MiB writes, and
/// syncs it.
pub(super) fn write_data_file(path: &Path, size: u64, content: &Content) -> anyhow::Result<()> {
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0;
    while off < size {
        content.fill(off, &mut buf);
        f.write_all(&buf)
            .with_context(|| format!("writing {}", path.display()))?;
        off += CHUNK as u64;
    }
    f.sync_all()
        .with_context(|| format!("syncing {}", path.display()))?;
    Ok(())
}

/// Opens `path` as an O_DIRECT store; falls back to a buffered one (with a note) where the file
/// system refuses O_DIRECT.
pub(super) fn direct_store(b: &Bench, path: &Path, create: bool) -> anyhow::Result<FileStore> {
    let open = |mode| {
        if create {
            FileStore::create(path, mode)
        } else {
            FileStore::open(path, mode)
        }
    };
    match open(IoMode::Direct) {
        Ok(s) => Ok(s),
        Err(StoreError::DirectUnsupported { .. }) => {
            b.note(format!(
                "note: {} refuses O_DIRECT; quire reads it buffered",
                path.display()
            ));
            Ok(open(IoMode::Buffered)?)
        }
        Err(e) => Err(e).with_context(|| format!("opening {}", path.display())),
    }
}

/// `posix_fadvise(DONTNEED)` on the whole file: the kernel drops its clean cached pages.
pub(super) fn drop_kernel_cache(f: &File) -> anyhow::Result<()> {
    // SAFETY: advice on a file descriptor we own; it changes no memory of ours.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        bail!(
            "posix_fadvise(DONTNEED): {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }
    Ok(())
}

/// The first error any benchmark thread met.
#[derive(Default)]
pub(super) struct FirstError(Mutex<Option<anyhow::Error>>);

impl FirstError {
    pub(super) fn set(&self, e: anyhow::Error) {
        self.0.lock().unwrap().get_or_insert(e);
    }

    pub(super) fn take(&self) -> anyhow::Result<()> {
        match self.0.lock().unwrap().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

// ---- the mapping for `kernel-mmap` -----------------------------------------------------------

/// A shared, read-only mapping of a whole file.
struct MappedFile {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the mapping is read-only and lives until drop; sharing the address between threads
// shares only reads.
unsafe impl Send for MappedFile {}
// SAFETY: as for `Send`.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    fn new(file: &File, len: usize) -> anyhow::Result<MappedFile> {
        ensure!(len > 0, "cannot map an empty file");
        // SAFETY: a new shared read-only mapping of a file we opened, at an address of the
        // kernel's choosing; it aliases nothing of ours.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap of the data file");
        }
        Ok(MappedFile {
            ptr: p as *const u8,
            len,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` readable bytes are mapped at `ptr` until drop. The file lives in the
        // suite's own fresh directory and is not written or truncated while mapped, so the
        // bytes do not change under the shared borrow.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Touches every page so that no read of the benchmark faults.
    fn prefault(&self) -> u64 {
        let mut sum = 0u64;
        for page in self.bytes().chunks(PAGE) {
            sum = sum.wrapping_add(u64::from(page[0]));
        }
        black_box(sum)
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`; no borrow of it outlives `self`.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

// ---- the suite -------------------------------------------------------------------------------

fn run(b: &mut Bench) -> anyhow::Result<()> {
    let quick = b.quick();
    let size = file_size(quick);
    let scratch = Scratch::new("read")?;
    let content = Content::new();
    let path = scratch.path("data");
    b.step(&format!(
        "writing {} MiB to {}",
        size >> 20,
        scratch.describe()
    ));
    b.note(format!(
        "data file of {} MiB in {}",
        size >> 20,
        scratch.describe()
    ));
    write_data_file(&path, size, &content)?;
    hot_random(b, &path, size, &content)?;
    cold_seq(b, &path, size)?;
    drop(scratch);
    Ok(())
}

/// A cache that holds `size` bytes with room to spare.
pub(super) fn cache_for(size: u64) -> anyhow::Result<PageCache> {
    let capacity = usize::try_from(size * 2).context("file too large for this machine")?;
    Ok(PageCache::new(CacheConfig::new(capacity))?)
}

/// Reads the whole file through quire in 1 MiB reads, checking the tags; returns the bytes read.
fn quire_read_all(file: &CachedFile, buf: &mut [u8]) -> anyhow::Result<u64> {
    let mut off = 0u64;
    loop {
        let n = file.read_at(off, buf)?;
        if n == 0 {
            return Ok(off);
        }
        ensure!(
            Content::check_tags(off, &buf[..n]),
            "quire read wrong data at offset {off}"
        );
        off += n as u64;
    }
}

/// Reads the whole file through the kernel in 1 MiB reads, checking the tags; returns the bytes
/// read.
fn kernel_read_all(f: &mut File, buf: &mut [u8]) -> anyhow::Result<u64> {
    let mut off = 0u64;
    loop {
        let n = f.read(buf).context("reading the data file")?;
        if n == 0 {
            return Ok(off);
        }
        // A buffered read can stop short of the buffer; whole pages keep the tags checkable.
        ensure!(
            n % PAGE == 0 || off + n as u64 == f.metadata()?.len(),
            "short read of {n} bytes at {off}"
        );
        ensure!(
            Content::check_tags(off, &buf[..n]),
            "kernel read wrong data at offset {off}"
        );
        off += n as u64;
    }
}

/// Checks the page at byte `off` inside `folio` (a zero-copy read of `variant`).
fn check_folio(
    content: &Content,
    off: u64,
    folio: &FolioRef<'_>,
    variant: &str,
) -> anyhow::Result<()> {
    let at = ((off / PAGE as u64 - folio.index()) as usize) * PAGE;
    let bytes = folio
        .bytes()
        .with_context(|| format!("{variant}: a folio not up to date"))?;
    ensure!(
        content.check_page(off, &bytes[at..at + PAGE]),
        "{variant}: wrong data at {off}"
    );
    Ok(())
}

/// Whether page `off` (bytes) holds its tags, found in the bytes of the folio whose first page
/// is `first`: the check of the `with_folio` variants.
fn page_checks(content: &Content, off: u64, bytes: &[u8], first: u64) -> bool {
    let at = ((off / PAGE as u64 - first) as usize) * PAGE;
    content.check_page(off, &bytes[at..at + PAGE])
}

/// What the zero-copy variants do with a page: copy its first 64 bytes out of the bytes of the
/// folio whose first page is `first`, kept from the optimiser. Inlined, so that each variant's
/// loop is what it would be with the body written out.
#[inline(always)]
fn touch_head(bytes: &[u8], first: u64, idx: u64) {
    let at = ((idx - first) as usize) * PAGE;
    let mut head = [0u8; 64];
    head.copy_from_slice(&bytes[at..at + 64]);
    black_box(&head);
}

fn hot_random(b: &mut Bench, path: &Path, size: u64, content: &Content) -> anyhow::Result<()> {
    let case = "hot-random";
    if !HOT_VARIANTS.iter().any(|v| b.wants(v)) {
        return Ok(());
    }
    b.compare(case, "kernel-pread", "quire-read");
    b.step(&format!("{case}: warming the caches"));
    let pages = size / PAGE as u64;

    let cache = cache_for(size)?;
    let file = cache.open(direct_store(b, path, false)?)?;
    let mut chunk = vec![0u8; CHUNK];
    ensure!(
        quire_read_all(&file, &mut chunk)? == size,
        "quire read a short file"
    );
    ensure!(
        file.cached_frames() as u64 == pages,
        "quire cached {} of {pages} pages after reading the file",
        file.cached_frames()
    );

    let mut kfile = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    ensure!(
        kernel_read_all(&mut kfile, &mut chunk)? == size,
        "short file"
    );
    let map = MappedFile::new(&kfile, size as usize)?;
    map.prefault();

    // Every variant reads the right bytes.
    let mut rng = Rng::new(7);
    let mut page = vec![0u8; PAGE];
    let mut reader = file.reader();
    for _ in 0..CHECKED_PAGES {
        let off = rng.below(pages) * PAGE as u64;
        file.read_exact_at(off, &mut page)?;
        ensure!(
            content.check_page(off, &page),
            "quire-read: wrong data at {off}"
        );
        check_folio(
            content,
            off,
            &file.read_folio(off / PAGE as u64)?,
            "quire-ref",
        )?;
        let idx = off / PAGE as u64;
        ensure!(
            file.with_folio(idx, |bytes, first| page_checks(content, off, bytes, first))?,
            "quire-with-folio: wrong data at {off}"
        );
        reader.read_exact_at(off, &mut page)?;
        ensure!(
            content.check_page(off, &page),
            "quire-reader-read: wrong data at {off}"
        );
        check_folio(
            content,
            off,
            &reader.read_folio(off / PAGE as u64)?,
            "quire-reader-ref",
        )?;
        ensure!(
            reader.with_folio(idx, |bytes, first| page_checks(content, off, bytes, first))?,
            "quire-reader-with-folio: wrong data at {off}"
        );
        let mut head = [0u8; 64];
        file.read_exact_at(off, &mut head)?;
        ensure!(head[..] == page[..64], "quire-read-64: wrong data at {off}");
        reader.read_exact_at(off, &mut head)?;
        ensure!(
            head[..] == page[..64],
            "quire-reader-read-64: wrong data at {off}"
        );
        kfile.read_exact_at(&mut page, off)?;
        ensure!(
            content.check_page(off, &page),
            "kernel-pread: wrong data at {off}"
        );
        let m = &map.bytes()[off as usize..off as usize + PAGE];
        ensure!(
            content.check_page(off, m),
            "kernel-mmap: wrong data at {off}"
        );
    }

    drop(reader);
    let dur = hot_duration(b.quick());
    let errors = FirstError::default();
    for threads in b.threads(&HOT_THREADS).to_vec() {
        for &variant in HOT_VARIANTS {
            if !b.wants(variant) {
                continue;
            }
            b.step(&format!("{case} {variant} ×{threads}"));
            let m = measure(threads, dur, |t, stop| {
                let mut rng = Rng::new(0x1000 + t as u64);
                let r = match variant {
                    "quire-read" => hot_loop(stop, &mut rng, pages, |idx, buf| {
                        file.read_at(idx * PAGE as u64, buf)?;
                        Ok(())
                    }),
                    "quire-ref" => hot_loop(stop, &mut rng, pages, |idx, _| {
                        let f = file.read_folio(idx)?;
                        touch_head(f.bytes().context("not up to date")?, f.index(), idx);
                        Ok(())
                    }),
                    "quire-with-folio" => hot_loop(stop, &mut rng, pages, |idx, _| {
                        file.with_folio(idx, |bytes, first| touch_head(bytes, first, idx))?;
                        Ok(())
                    }),
                    "quire-reader-read" => {
                        let mut reader = file.reader();
                        hot_loop(stop, &mut rng, pages, |idx, buf| {
                            reader.read_at(idx * PAGE as u64, buf)?;
                            Ok(())
                        })
                    }
                    "quire-reader-ref" => {
                        let mut reader = file.reader();
                        hot_loop(stop, &mut rng, pages, |idx, _| {
                            let f = reader.read_folio(idx)?;
                            touch_head(f.bytes().context("not up to date")?, f.index(), idx);
                            Ok(())
                        })
                    }
                    "quire-reader-with-folio" => {
                        let mut reader = file.reader();
                        hot_loop(stop, &mut rng, pages, |idx, _| {
                            reader.with_folio(idx, |bytes, first| touch_head(bytes, first, idx))?;
                            Ok(())
                        })
                    }
                    "quire-read-64" => hot_loop(stop, &mut rng, pages, |idx, buf| {
                        file.read_at(idx * PAGE as u64, &mut buf[..64])?;
                        Ok(())
                    }),
                    "quire-reader-read-64" => {
                        let mut reader = file.reader();
                        hot_loop(stop, &mut rng, pages, |idx, buf| {
                            reader.read_at(idx * PAGE as u64, &mut buf[..64])?;
                            Ok(())
                        })
                    }
                    "kernel-pread" => hot_loop(stop, &mut rng, pages, |idx, buf| {
                        kfile.read_exact_at(buf, idx * PAGE as u64)?;
                        Ok(())
                    }),
                    "kernel-mmap" => hot_loop(stop, &mut rng, pages, |idx, buf| {
                        let at = idx as usize * PAGE;
                        buf.copy_from_slice(&map.bytes()[at..at + PAGE]);
                        Ok(())
                    }),
                    "kernel-mmap-ref" => hot_loop(stop, &mut rng, pages, |idx, _| {
                        let at = idx as usize * PAGE;
                        let mut head = [0u8; 64];
                        head.copy_from_slice(&map.bytes()[at..at + 64]);
                        black_box(&head);
                        Ok(())
                    }),
                    other => Err(anyhow::anyhow!("unknown variant {other}")),
                };
                r.unwrap_or_else(|e| {
                    errors.set(e);
                    stop.store(true, Ordering::Relaxed);
                    0
                })
            });
            errors.take()?;
            b.record(case, variant, threads, "iops", m.ops_per_s(), "1/s");
            b.record(
                case,
                variant,
                threads,
                "iops_per_cpu_s",
                m.ops_per_cpu_s(),
                "1/s",
            );
        }
    }
    drop(map);
    drop(file);
    drop(cache);
    Ok(())
}

/// Reads random pages with `op(index, buffer)` until `stop`; returns how many.
#[inline]
fn hot_loop(
    stop: &AtomicBool,
    rng: &mut Rng,
    pages: u64,
    mut op: impl FnMut(u64, &mut [u8]) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let mut buf = [0u8; PAGE];
    let mut ops = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..64 {
            op(rng.below(pages), &mut buf)?;
            black_box(&buf);
        }
        ops += 64;
    }
    Ok(ops)
}

/// MiB per second for `bytes` in `t`.
pub(super) fn mib_per_s(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / (1 << 20) as f64 / t.as_secs_f64().max(1e-9)
}

fn cold_seq(b: &mut Bench, path: &Path, size: u64) -> anyhow::Result<()> {
    let case = "cold-seq";
    let (want_k, want_q) = (b.wants("kernel"), b.wants("quire"));
    if !want_k && !want_q {
        return Ok(());
    }
    b.compare(case, "kernel", "quire");
    let cache = cache_for(size)?;
    let store = direct_store(b, path, false)?;
    let direct = store.is_direct();
    let file = cache.open(store)?;
    let mut buf = vec![0u8; CHUNK];

    let quire_run = |buf: &mut [u8]| -> anyhow::Result<Duration> {
        file.invalidate()?;
        ensure!(
            file.cached_frames() == 0,
            "{} frames still cached after invalidate",
            file.cached_frames()
        );
        if !direct {
            let k = File::open(path)?;
            drop_kernel_cache(&k)?;
        }
        let handle = file.reopen();
        let t0 = Instant::now();
        let n = quire_read_all(&handle, buf)?;
        let t = t0.elapsed();
        ensure!(n == size, "quire read {n} of {size} bytes");
        Ok(t)
    };
    let kernel_run = |buf: &mut [u8]| -> anyhow::Result<Duration> {
        let mut k = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        k.sync_all()?;
        drop_kernel_cache(&k)?;
        let t0 = Instant::now();
        let n = kernel_read_all(&mut k, buf)?;
        let t = t0.elapsed();
        ensure!(n == size, "kernel read {n} of {size} bytes");
        Ok(t)
    };

    // Faults the cache's memory in (untimed).
    if want_q {
        b.step(&format!("{case}: first quire run (untimed)"));
        quire_run(&mut buf)?;
    }

    let (mut best_k, mut best_q) = (None, None);
    for _ in 0..seq_runs(b.quick()) {
        if want_k {
            b.step(&format!("{case} kernel"));
            best_k = best(best_k, kernel_run(&mut buf)?);
        }
        if want_q {
            b.step(&format!("{case} quire"));
            best_q = best(best_q, quire_run(&mut buf)?);
        }
    }
    record_seq(b, case, size, best_k, best_q);
    Ok(())
}

/// The shorter of the best time so far (if any) and `t`.
pub(super) fn best(so_far: Option<Duration>, t: Duration) -> Option<Duration> {
    Some(so_far.map_or(t, |b| b.min(t)))
}

/// Records the best times of a sequential case's `kernel` and `quire` variants as MiB/s (those
/// that ran).
pub(super) fn record_seq(
    b: &mut Bench,
    case: &str,
    size: u64,
    kernel: Option<Duration>,
    quire: Option<Duration>,
) {
    for (variant, t) in [("kernel", kernel), ("quire", quire)] {
        if let Some(t) = t {
            b.record(case, variant, 1, "mb_per_s", mib_per_s(size, t), "MiB/s");
        }
    }
}
