//! The kernel's side of the `evict` cases: the same accesses, as buffered reads, in a child
//! process (`quire bench-child`) inside a memory cgroup (v1) whose limit holds the kernel's page
//! cache to quire's budget.
//!
//! A cgroup charges page cache to the cgroup of the process that brings a page in, so the child
//! joins the cgroup itself before it reads anything, after the parent dropped the files' pages
//! from the kernel's cache (`posix_fadvise(DONTNEED)`). The child builds its traces before it
//! joins (that memory stays charged to the parent's cgroup), starts its threads, and then sets
//! the limit to the budget plus what the cgroup already holds (its threads' stacks and buffers),
//! so that the page cache gets the budget and no more. Misses are counted from the bytes the
//! process (or, in `scan` and `scan-files`, the hot thread) read from storage (`/proc/*/io`,
//! `read_bytes`).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::workload::{uniform_trace, zipf_trace};
use super::PAGE;

/// Where cgroup v1's memory controller is mounted on these machines.
const MEMCG_ROOT: &str = "/sys/fs/cgroup/memory";

/// What the child runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Spec {
    /// `zipf`, `scan`, `scan-files`, `loop`, `switch` or `readonce`.
    pub case: String,
    /// The cgroup directory to join.
    pub cgroup: PathBuf,
    /// The page cache budget in bytes.
    pub budget: u64,
    /// The files: the one read (zipf, loop), the hot one then the stream's (scan, scan-files:
    /// read one after another), one per reader (readonce).
    pub files: Vec<PathBuf>,
    /// Accesses before measuring, per thread (zipf), hot-set passes (scan), turns (switch).
    pub warm: usize,
    /// Accesses measured, per thread (zipf); passes measured (loop), or per turn (switch).
    pub ops: usize,
    /// Reader threads (zipf).
    pub threads: usize,
    /// Passes (loop) or turns (switch) read before measuring.
    pub skip: usize,
    /// Microseconds the hot reader waits between its reads (scan-files).
    #[serde(default)]
    pub nap_us: u64,
}

/// What the child measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Outcome {
    /// Wall time of the measured part.
    pub elapsed_s: f64,
    /// Accesses measured (pages for zipf and scan's hot reader, bytes read for loop and
    /// readonce).
    pub ops: u64,
    /// Bytes read from storage during the measured part (by the hot reader, for scan).
    pub read_bytes: u64,
    /// The limit the child set, in bytes.
    pub limit: u64,
}

/// A memory cgroup made for one child, removed when dropped.
pub struct Memcg {
    path: PathBuf,
}

impl Memcg {
    /// Makes a fresh cgroup under the v1 memory controller, or says why it cannot.
    pub fn create(tag: &str) -> Result<Memcg, String> {
        let root = Path::new(MEMCG_ROOT);
        if !root.join("cgroup.procs").exists() {
            return Err(format!("no cgroup v1 memory controller at {MEMCG_ROOT}"));
        }
        let path = root.join(format!("quire-bench-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir(&path);
        std::fs::create_dir(&path)
            .map_err(|e| format!("cannot make a memory cgroup at {}: {e}", path.display()))?;
        // Keep the child's own memory out of swap, so the limit squeezes the page cache.
        let _ = std::fs::write(path.join("memory.swappiness"), "0");
        Ok(Memcg { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Memcg {
    fn drop(&mut self) {
        // The child has exited; its cgroup empties at once, or within a few milliseconds.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// Times a child killed by SIGKILL is run again before the case fails.
const KILLED_RETRIES: u32 = 2;

/// Runs `spec` in a child process and returns what it measured. A child the memory group's
/// OOM killer ends (SIGKILL: with a limit of a few MiB, the kernel may find too little to
/// reclaim at once while two readers have reads in flight) is run again, up to
/// [`KILLED_RETRIES`] times, each said on standard error: its figures would have been the
/// kernel's as much as a run that finishes.
pub fn run(spec: &Spec) -> anyhow::Result<Outcome> {
    use std::os::unix::process::ExitStatusExt;
    let exe = std::env::current_exe().context("finding the quire executable")?;
    let mut tries = 0;
    let out = loop {
        let out = Command::new(&exe)
            .arg("bench-child")
            .arg("--spec")
            .arg(serde_json::to_string(spec)?)
            .output()
            .context("starting the kernel-side benchmark child")?;
        if out.status.signal() == Some(libc::SIGKILL) && tries < KILLED_RETRIES {
            tries += 1;
            // What the killed child read stays charged to the group: reclaim it, so that the
            // next child's limit is measured from an empty group again.
            let _ = std::fs::write(spec.cgroup.join("memory.force_empty"), "0");
            eprintln!(
                "evict: {} / kernel: the child was killed (the memory group's OOM killer); \
                 running it again ({tries} of {KILLED_RETRIES})",
                spec.case
            );
            continue;
        }
        break out;
    };
    if !out.status.success() {
        bail!(
            "the kernel-side child failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("reading the child's report {line:?}"))
}

/// `read_bytes` of `/proc/<which>/io`: bytes this process (`self`) or thread (`thread-self`)
/// made the kernel read from storage.
fn read_bytes(which: &str) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{which}/io"))
        .with_context(|| format!("reading /proc/{which}/io"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no read_bytes in /proc/{which}/io"))
}

fn advise_random(f: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: advice on a descriptor we own; it changes no memory of ours.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
}

/// Moves the child into its cgroup: from now on the pages it brings in are charged there.
fn join(spec: &Spec) -> anyhow::Result<()> {
    std::fs::write(
        spec.cgroup.join("cgroup.procs"),
        std::process::id().to_string(),
    )
    .context("joining the memory cgroup")
}

/// Limits the cgroup to the budget plus what it holds now (the child's threads, set up and
/// waiting); returns the limit.
fn set_limit(spec: &Spec) -> anyhow::Result<u64> {
    let usage: u64 = std::fs::read_to_string(spec.cgroup.join("memory.usage_in_bytes"))
        .context("reading the cgroup's usage")?
        .trim()
        .parse()
        .context("parsing the cgroup's usage")?;
    // The budget for the page cache, on top of what the child itself holds (its stacks and
    // buffers, which quire's budget does not count either).
    let limit = spec.budget + usage;
    std::fs::write(spec.cgroup.join("memory.limit_in_bytes"), limit.to_string())
        .context("setting the cgroup's limit")?;
    Ok(limit)
}

/// A buffer of `len` bytes whose pages exist now: written once, so that the memory group is
/// charged for them before [`set_limit`] reads what the child holds. A zeroed allocation of
/// this size is mapped lazily and charged at the first read that fills it — after the limit
/// is set, taking its room from the page cache the limit is for (with two 1 MiB readers in a
/// 16 MiB group, enough to have the child killed now and then).
fn touched(len: usize) -> Vec<u8> {
    vec![0xA5; len]
}

/// The child: `quire bench-child --spec JSON`. Prints one JSON [`Outcome`] line.
pub fn child_main(spec_json: &str) -> anyhow::Result<()> {
    let spec: Spec = serde_json::from_str(spec_json).context("parsing the child's spec")?;
    let outcome = match spec.case.as_str() {
        "zipf" => zipf(&spec)?,
        "scan" | "scan-files" => scan(&spec)?,
        "loop" => loop_case(&spec)?,
        "switch" => switch(&spec)?,
        "readonce" => readonce(&spec)?,
        other => bail!("unknown case {other:?}"),
    };
    println!("{}", serde_json::to_string(&outcome)?);
    Ok(())
}

fn open(path: &Path) -> anyhow::Result<File> {
    File::open(path).with_context(|| format!("opening {}", path.display()))
}

fn read_page(f: &File, page: u64, buf: &mut [u8]) -> anyhow::Result<()> {
    f.read_exact_at(buf, page * PAGE as u64)
        .with_context(|| format!("reading page {page}"))
}

fn zipf(spec: &Spec) -> anyhow::Result<Outcome> {
    let f = open(&spec.files[0])?;
    advise_random(&f);
    let pages = (f.metadata()?.len() / PAGE as u64) as usize;
    let traces: Vec<Vec<u32>> = (0..spec.threads)
        .map(|t| zipf_trace(pages, spec.warm + spec.ops, t))
        .collect();
    join(spec)?;
    let ready = Barrier::new(spec.threads + 1);
    let warmed = Barrier::new(spec.threads + 1);
    let go = Barrier::new(spec.threads + 1);
    let mut outcome = Outcome::default();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = traces
            .iter()
            .map(|trace| {
                let (f, ready, warmed, go) = (&f, &ready, &warmed, &go);
                s.spawn(move || -> anyhow::Result<()> {
                    let mut buf = vec![0u8; PAGE];
                    ready.wait();
                    for &p in &trace[..spec.warm] {
                        read_page(f, u64::from(p), &mut buf)?;
                    }
                    warmed.wait();
                    go.wait();
                    for &p in &trace[spec.warm..] {
                        read_page(f, u64::from(p), &mut buf)?;
                    }
                    Ok(())
                })
            })
            .collect();
        outcome.limit = set_limit(spec)?;
        ready.wait();
        warmed.wait();
        let before = read_bytes("self")?;
        let t0 = Instant::now();
        go.wait();
        for h in handles {
            h.join().expect("child thread panicked")?;
        }
        outcome.elapsed_s = t0.elapsed().as_secs_f64();
        outcome.read_bytes = read_bytes("self")? - before;
        outcome.ops = (spec.threads * spec.ops) as u64;
        Ok(())
    })?;
    Ok(outcome)
}

fn scan(spec: &Spec) -> anyhow::Result<Outcome> {
    let hot = open(&spec.files[0])?;
    let streams: Vec<File> = spec.files[1..]
        .iter()
        .map(|p| open(p))
        .collect::<anyhow::Result<_>>()?;
    let nap = std::time::Duration::from_micros(spec.nap_us);
    advise_random(&hot);
    let hot_pages = (hot.metadata()?.len() / PAGE as u64) as usize;
    let warm: Vec<u32> = (0..spec.warm)
        .flat_map(|pass| super::workload::permutation(hot_pages, 0xB0 + pass as u64))
        .collect();
    // More than the hot reader can do while the stream runs; it stops with the stream.
    let trace = uniform_trace(hot_pages, 1 << 24, 0x5CA);
    join(spec)?;
    let done = AtomicBool::new(false);
    let ready = Barrier::new(3);
    let go = Barrier::new(3);
    let stream_buf = touched(super::CHUNK);
    let mut outcome = Outcome::default();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let h = s.spawn(|| -> anyhow::Result<(u64, u64)> {
            let mut buf = vec![0u8; PAGE];
            ready.wait();
            for &p in &warm {
                read_page(&hot, u64::from(p), &mut buf)?;
            }
            go.wait();
            let before = read_bytes("thread-self")?;
            let mut n = 0u64;
            for &p in &trace {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                read_page(&hot, u64::from(p), &mut buf)?;
                n += 1;
                if !nap.is_zero() {
                    std::thread::sleep(nap);
                }
            }
            Ok((n, read_bytes("thread-self")? - before))
        });
        let st = s.spawn(|| -> anyhow::Result<()> {
            let mut buf = stream_buf;
            ready.wait();
            go.wait();
            for stream in &streams {
                let mut off = 0u64;
                let len = stream.metadata()?.len();
                while off < len {
                    let n = stream.read_at(&mut buf, off)?;
                    if n == 0 {
                        break;
                    }
                    off += n as u64;
                }
            }
            done.store(true, Ordering::Relaxed);
            Ok(())
        });
        outcome.limit = set_limit(spec)?;
        ready.wait();
        let t0 = Instant::now();
        go.wait();
        let r = st.join().expect("stream thread panicked");
        done.store(true, Ordering::Relaxed);
        let (n, bytes) = h.join().expect("hot thread panicked")?;
        r?;
        outcome.elapsed_s = t0.elapsed().as_secs_f64();
        outcome.ops = n;
        outcome.read_bytes = bytes;
        Ok(())
    })?;
    Ok(outcome)
}

/// Reads `f` from start to end in 1 MiB reads; returns the bytes read.
fn read_through(f: &mut File, buf: &mut [u8]) -> anyhow::Result<u64> {
    use std::io::Seek;
    f.seek(std::io::SeekFrom::Start(0))?;
    let mut total = 0u64;
    loop {
        let n = f.read(buf)?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
    }
}

fn loop_case(spec: &Spec) -> anyhow::Result<Outcome> {
    let mut f = open(&spec.files[0])?;
    join(spec)?;
    let mut buf = touched(super::CHUNK);
    let mut outcome = Outcome {
        limit: set_limit(spec)?,
        ..Outcome::default()
    };
    for _ in 0..spec.skip {
        read_through(&mut f, &mut buf)?;
    }
    let before = read_bytes("self")?;
    let t0 = Instant::now();
    for _ in 0..spec.ops {
        outcome.ops += read_through(&mut f, &mut buf)?;
    }
    outcome.elapsed_s = t0.elapsed().as_secs_f64();
    outcome.read_bytes = read_bytes("self")? - before;
    Ok(outcome)
}

/// `switch`: `warm` turns of `ops` passes over the files in turn; the first `skip` turns are not
/// measured.
fn switch(spec: &Spec) -> anyhow::Result<Outcome> {
    let mut files: Vec<File> = spec
        .files
        .iter()
        .map(|p| open(p))
        .collect::<anyhow::Result<_>>()?;
    join(spec)?;
    let mut buf = touched(super::CHUNK);
    let mut outcome = Outcome {
        limit: set_limit(spec)?,
        ..Outcome::default()
    };
    let n = files.len();
    for turn in 0..spec.warm {
        let f = &mut files[turn % n];
        let before = read_bytes("self")?;
        let t0 = Instant::now();
        let mut asked = 0;
        for _ in 0..spec.ops {
            asked += read_through(f, &mut buf)?;
        }
        if turn >= spec.skip {
            outcome.elapsed_s += t0.elapsed().as_secs_f64();
            outcome.ops += asked;
            outcome.read_bytes += read_bytes("self")? - before;
        }
    }
    Ok(outcome)
}

fn readonce(spec: &Spec) -> anyhow::Result<Outcome> {
    let files: Vec<File> = spec
        .files
        .iter()
        .map(|p| open(p))
        .collect::<anyhow::Result<_>>()?;
    join(spec)?;
    let ready = Barrier::new(files.len() + 1);
    let bufs: Vec<Vec<u8>> = files.iter().map(|_| touched(super::CHUNK)).collect();
    let mut outcome = Outcome::default();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = files
            .into_iter()
            .zip(bufs)
            .map(|(mut f, mut buf)| {
                let ready = &ready;
                s.spawn(move || -> anyhow::Result<u64> {
                    ready.wait();
                    read_through(&mut f, &mut buf)
                })
            })
            .collect();
        outcome.limit = set_limit(spec)?;
        let before = read_bytes("self")?;
        let t0 = Instant::now();
        ready.wait();
        for h in handles {
            outcome.ops += h.join().expect("reader panicked")?;
        }
        outcome.elapsed_s = t0.elapsed().as_secs_f64();
        outcome.read_bytes = read_bytes("self")? - before;
        Ok(())
    })?;
    Ok(outcome)
}
