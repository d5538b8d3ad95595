//! Suite `write`: writing a file through quire's page cache and making it durable, against the
//! kernel's buffered write and `fsync`.
//!
//! - case `seq-fsync`: a new file of 256 MiB (32 MiB with `--quick`) written from start to end
//!   in 1 MiB writes, then synced; metric `mb_per_s` (MiB/s of the whole, sync included), best
//!   of several runs taken alternately, each on a newly created file that is deleted after.
//!   - `quire`: [`CachedFile::write_at`] over an O_DIRECT [`FileStore`] of a new file, then
//!     [`CachedFile::fsync`]. One cache (twice the file, default [`CacheConfig`] otherwise: the
//!     flusher starts at a tenth of it, writers wait at two fifths) serves every run, so its
//!     memory is faulted in once, by a first untimed run — which is also checked: the file is
//!     read back and every page's tag compared.
//!   - `kernel`: a buffered [`File`] written the same way, then `sync_all`.
//!
//! The files live in a fresh directory like the `read` suite's (on a disk file system where
//! there is one), removed at the end, also on error.
//!
//! [`CachedFile::write_at`]: quire::filemap::CachedFile::write_at
//! [`CachedFile::fsync`]: quire::filemap::CachedFile::fsync
//! [`FileStore`]: quire::store::FileStore
//! [`CacheConfig`]: quire::filemap::CacheConfig

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use quire::filemap::PageCache;

use super::read::{
    best, cache_for, direct_store, file_size, record_seq, seq_runs, Content, Scratch, CHUNK,
};
use super::{Bench, Suite};

pub const SUITE: Suite = Suite {
    name: "write",
    about: "page cache writes: sequential 1 MiB writes + fsync of a new file, vs the kernel",
    variants: &["kernel", "quire"],
    steps: |p| (1 + 2 * seq_runs(p.quick)) as u64,
    run,
};

fn run(b: &mut Bench) -> anyhow::Result<()> {
    let size = file_size(b.quick());
    let scratch = Scratch::new("write")?;
    b.note(format!(
        "files of {} MiB in {}",
        size >> 20,
        scratch.describe()
    ));
    seq_fsync(b, &scratch, size)?;
    drop(scratch);
    Ok(())
}

/// Removes `path` if it exists.
fn remove(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Writes and syncs a new file through quire; returns the time it took.
fn quire_run(
    b: &Bench,
    cache: &PageCache,
    path: &Path,
    size: u64,
    buf: &mut [u8],
) -> anyhow::Result<Duration> {
    remove(path)?;
    let t0 = Instant::now();
    let file = cache.open(direct_store(b, path, true)?)?;
    let mut off = 0u64;
    while off < size {
        Content::retag(off, buf);
        let n = file.write_at(off, buf)?;
        ensure!(
            n == buf.len(),
            "quire wrote {n} of {} bytes at {off}",
            buf.len()
        );
        off += n as u64;
    }
    file.fsync()?;
    let t = t0.elapsed();
    drop(file);
    ensure!(
        cache.stats_exact().cached_frames == 0,
        "{} frames still cached after the file was closed",
        cache.stats_exact().cached_frames
    );
    Ok(t)
}

/// Writes and syncs a new file through the kernel; returns the time it took.
fn kernel_run(path: &Path, size: u64, buf: &mut [u8]) -> anyhow::Result<Duration> {
    remove(path)?;
    let t0 = Instant::now();
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut off = 0u64;
    while off < size {
        Content::retag(off, buf);
        f.write_all(buf)
            .with_context(|| format!("writing {}", path.display()))?;
        off += buf.len() as u64;
    }
    f.sync_all()
        .with_context(|| format!("syncing {}", path.display()))?;
    Ok(t0.elapsed())
}

/// Reads `path` back and checks every page's tag and its length.
fn verify(path: &Path, size: u64) -> anyhow::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = f.metadata()?.len();
    ensure!(len == size, "{} is {len} bytes, not {size}", path.display());
    let mut off = 0u64;
    while off < size {
        f.read_exact(&mut buf)
            .with_context(|| format!("reading back {}", path.display()))?;
        ensure!(
            Content::check_tags(off, &buf),
            "{} holds wrong data in the MiB at {off}",
            path.display()
        );
        off += buf.len() as u64;
    }
    Ok(())
}

fn seq_fsync(b: &mut Bench, scratch: &Scratch, size: u64) -> anyhow::Result<()> {
    let case = "seq-fsync";
    b.compare(case, "kernel", "quire");
    let content = Content::new();
    let mut buf = vec![0u8; CHUNK];
    content.fill(0, &mut buf);
    let cache = cache_for(size)?;
    let (qpath, kpath) = (scratch.path("quire"), scratch.path("kernel"));

    let (want_k, want_q) = (b.wants("kernel"), b.wants("quire"));
    if want_q {
        b.step(&format!("{case}: first quire run (untimed, checked)"));
        quire_run(b, &cache, &qpath, size, &mut buf)?;
        verify(&qpath, size)?;
        remove(&qpath)?;
    }

    let (mut best_k, mut best_q) = (None, None);
    for _ in 0..seq_runs(b.quick()) {
        if want_k {
            b.step(&format!("{case} kernel"));
            best_k = best(best_k, kernel_run(&kpath, size, &mut buf)?);
            remove(&kpath)?;
        }
        if want_q {
            b.step(&format!("{case} quire"));
            best_q = best(best_q, quire_run(b, &cache, &qpath, size, &mut buf)?);
            remove(&qpath)?;
        }
    }
    record_seq(b, case, size, best_k, best_q);
    Ok(())
}
