//! Suite `inflight` (misses in flight): what one thread gets from storage through
//! quire with one miss in flight, against the kernel's page cache and the device itself with
//! 1, 8 and 32 reads in flight.
//!
//! The data file is 4× the budget (64 MiB; 16 MiB with `--quick`), written with tagged pages
//! (`read.rs`'s [`Content`]) into a fresh directory on a disk file system (`read.rs`'s
//! [`Scratch`]: `/var/tmp` where it is not tmpfs), so that `O_DIRECT` works and misses reach
//! the device; it is removed at the end, also on error.
//!
//! Variants:
//! - `quire-sync`: today's path — one thread calling [`CachedFile::read_exact_at`] (quire's
//!   default configuration, the budget as its capacity, an `O_DIRECT` store). It has one miss
//!   in flight whatever the depth (readahead aside): the depth of a case does not change what
//!   it does, and it is measured in each case all the same.
//! - `kernel`: fio, `--ioengine=io_uring --direct=0 --iodepth=N`, buffered, in a memory cgroup
//!   (v1, [`MemGroups`]) limited to the budget plus fio's own footprint (the peak
//!   usage of a first fio run of the same shape with `--direct=1`, which brings no page into
//!   the cache), so that the kernel's page cache gets the budget and no more. (`cold-seq` only:
//!   should the group kill fio, it runs once more with a budget's worth of room more, noted in
//!   the report; a cold pass has nothing to gain from it.)
//! - `device`: fio, `--ioengine=io_uring --direct=1 --iodepth=N`: no cache, the physical limit.
//!
//! Where fio is missing, io_uring is refused (`/proc/sys/kernel/io_uring_disabled`, or a tiny
//! fio run fails), or no memory cgroup can be made, the affected variants print `skipped: why`
//! and record nothing.
//!
//! Cases (threads is always 1):
//! - `zipf-qd1`, `zipf-qd8`, `zipf-qd32`: random 4 KiB reads, Zipf θ = 0.99 over the file's
//!   pages — one trace of `evict.rs`'s sampler (a fixed shuffle spreads the hot pages over the
//!   file), which quire reads and fio replays (`--read_iolog`, an iolog of version 2, with
//!   `--replay_no_stall`), so every variant sees the same accesses — three budgets'
//!   worth of reads to warm up (quire: the trace's first reads; `kernel`: a fio replay of
//!   them in the same cgroup, before the measured one with `--invalidate=0`;
//!   `device` has no cache to warm), then 40,000 measured reads (160,000 without `--quick`;
//!   `device` stops after 3 s, 10 s without `--quick`, if it has not done them by then).
//!   Metrics `iops` (measured reads per second) and `miss_iops`, reads that went to storage
//!   per second:
//!   - quire: folios read from the store, from its counters (`page_cache_misses`, the misses
//!     the reader waited for, plus `readahead`, folios read ahead of use), over the measured
//!     reads' time;
//!   - `kernel` and `device`: the bytes fio and its job processes had the kernel read from
//!     storage (task I/O accounting, `read_bytes` of `/proc/PID/io`, summed over the waited-for
//!     children by `getrusage(RUSAGE_CHILDREN).ru_inblock`), in 4 KiB pages, over fio's
//!     runtime. fio advises `POSIX_FADV_RANDOM` on random reads, so the kernel reads one page
//!     per miss; for `device`, every read is one.
//! - `cold-seq`: the whole file read once from start to end in 1 MiB reads, one at a time
//!   (depth 1), from a cold cache of the budget (quire: a fresh cache, after an untimed pass
//!   that faults its memory in and is then invalidated; `kernel`: fio `--rw=read --bs=1M` in a
//!   cgroup as above, the file's pages dropped first); `mb_per_s`.
//! - `fsync-1g`: a new file of 1 GiB (128 MiB with `--quick`) written in 1 MiB writes, all of
//!   it left dirty, then synced: `seconds` of the fsync alone. quire: a cache of twice the file
//!   whose flusher thresholds and expiry are above the file and the run (nothing is written
//!   back before the fsync; checked); `kernel`: a buffered file and `sync_all` (the kernel's
//!   own thresholds apply; the note says how much was dirty machine-wide when the fsync began).
//!
//! - `quire-async` (Zipf cases only): one thread polls `depth` futures of
//!   [`CachedFile::read_exact_at_async`], so that `depth` reads are in flight: a miss submits
//!   its read to the I/O engine and waits in the folio's wait queue while the thread polls the
//!   others.
//!
//! - `quire-local` (Zipf cases only): `quire-async`'s polling thread with its own ring
//!   ([`ThreadRing`]): the misses its futures await are submitted there, and when all wait the
//!   thread sleeps in that ring and runs the completions itself (no engine thread between the
//!   device and the futures).
//!
//! To add a quire variant of the Zipf cases: write one [`ZipfReads`] function, add its row to
//! [`QUIRE`] and its name to [`VARIANTS`].

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use quire::bio::{ThreadRing, Unparker};
use quire::filemap::{CacheConfig, CachedFile, PageCache};
use quire::stats::{Event, Snapshot};

use super::cgroup::{MemGroup, MemGroups};
use super::evict::workload::zipf_trace;
use super::fuse::{fio, FioResult};
use super::read::{
    direct_store, drop_kernel_cache, mib_per_s, write_data_file, Content, Scratch, CHUNK, PAGE,
};
use super::{Bench, Suite};

pub const SUITE: Suite = Suite {
    name: "inflight",
    about: "one thread, 1/8/32 reads in flight (Zipf), cold sequential, fsync: quire vs the kernel (fio io_uring) vs the device",
    variants: VARIANTS,
    steps,
    run,
};

/// The suite's variants: the rows of [`QUIRE`], then the fio ones.
const VARIANTS: &[&str] = &[
    "quire-sync",
    "quire-async",
    "quire-local",
    "kernel",
    "device",
];

/// Reads in flight in the Zipf cases.
const DEPTHS: [usize; 3] = [1, 8, 32];

/// The cases fio runs (what a `kernel` or `device` skipped for want of fio, io_uring or a
/// memory cgroup leaves out; `kernel`'s `fsync-1g` needs none of them).
const FIO_CASES: &str = "zipf-qd1, zipf-qd8, zipf-qd32, cold-seq";

/// How a quire variant reads the pages of a Zipf case: every page of `pages` (page numbers, in
/// order), each checked against its tag, with up to `depth` reads in flight. Returns what the
/// polling thread saw, where one polls futures.
type ZipfReads =
    fn(file: &CachedFile, pages: &[u32], depth: usize) -> anyhow::Result<Option<Polling>>;

/// What the thread polling `quire-async`'s futures saw: how long a future woken by a read's end
/// waited for its poll, and how many futures each of its wake-ups found ready.
#[derive(Clone, Copy, Debug, Default)]
struct Polling {
    /// Wake-ups (a future's waker called) followed by a poll, and their waits summed.
    woken: u64,
    wait_ns: u64,
    /// Passes over the ready futures, and the futures they polled.
    passes: u64,
    polled: u64,
}

/// One quire variant of the Zipf cases.
struct QuireVariant {
    name: &'static str,
    reads: ZipfReads,
}

/// The quire variants of the Zipf cases, in the order they run. (`cold-seq` and `fsync-1g` run
/// `quire-sync`'s path.)
const QUIRE: &[QuireVariant] = &[
    QuireVariant {
        name: "quire-sync",
        reads: sync_reads,
    },
    QuireVariant {
        name: "quire-async",
        reads: async_reads,
    },
    QuireVariant {
        name: "quire-local",
        reads: local_reads,
    },
];

/// `quire-sync`: one read at a time, whatever the depth.
fn sync_reads(file: &CachedFile, pages: &[u32], _depth: usize) -> anyhow::Result<Option<Polling>> {
    let mut buf = [0u8; PAGE];
    for &p in pages {
        let off = u64::from(p) * PAGE as u64;
        file.read_exact_at(off, &mut buf)?;
        ensure!(Content::check_tags(off, &buf), "wrong bytes at {off}");
    }
    Ok(None)
}

/// `quire-async`: one thread polls `depth` futures, each reading the next page of `pages` with
/// [`CachedFile::read_exact_at_async`] when its previous read is done — `depth` reads in
/// flight, misses waiting in the folios' wait queues, the thread parked only when all wait.
/// Each waker notes when it was called, so the thread can tell how long a woken future waited
/// for its poll.
fn async_reads(file: &CachedFile, pages: &[u32], depth: usize) -> anyhow::Result<Option<Polling>> {
    poll_reads(file, pages, depth, None)
}

/// `quire-local`: `quire-async`'s thread with its own ring ([`ThreadRing`]): the futures'
/// misses go to it, the thread parks in it and runs their completions itself.
fn local_reads(file: &CachedFile, pages: &[u32], depth: usize) -> anyhow::Result<Option<Polling>> {
    let ring = ThreadRing::current().context("this thread cannot have an io_uring")?;
    poll_reads(file, pages, depth, Some(&ring))
}

/// The polling thread of `quire-async` (`ring` `None`) and `quire-local`.
fn poll_reads(
    file: &CachedFile,
    pages: &[u32],
    depth: usize,
    ring: Option<&ThreadRing>,
) -> anyhow::Result<Option<Polling>> {
    use std::cell::Cell;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context as TaskContext, Poll, Wake, Waker};

    /// Queues its slot as ready, with when, and unparks the polling thread.
    struct SlotWaker {
        slot: usize,
        ready: Arc<Mutex<Vec<(usize, Instant)>>>,
        thread: std::thread::Thread,
        ring: Option<Unparker>,
    }
    impl Wake for SlotWaker {
        fn wake(self: Arc<Self>) {
            self.ready.lock().unwrap().push((self.slot, Instant::now()));
            match &self.ring {
                Some(u) => u.unpark(),
                None => self.thread.unpark(),
            }
        }
    }

    let next = Cell::new(0usize);
    let worker = || async {
        let mut buf = [0u8; PAGE];
        loop {
            let i = next.get();
            if i == pages.len() {
                return anyhow::Ok(());
            }
            next.set(i + 1);
            let off = u64::from(pages[i]) * PAGE as u64;
            file.read_exact_at_async(off, &mut buf).await?;
            ensure!(Content::check_tags(off, &buf), "wrong bytes at {off}");
        }
    };
    type Worker<'a> = Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>>;
    let mut slots: Vec<Option<Worker<'_>>> = (0..depth.max(1))
        .map(|_| Some(Box::pin(worker()) as Worker<'_>))
        .collect();
    let ready = Arc::new(Mutex::new(Vec::new()));
    let wakers: Vec<Waker> = (0..slots.len())
        .map(|slot| {
            Waker::from(Arc::new(SlotWaker {
                slot,
                ready: ready.clone(),
                thread: std::thread::current(),
                ring: ring.map(|r| r.unparker()),
            }))
        })
        .collect();
    let mut polling = Polling::default();
    // Every future is polled once to start.
    let mut now: Vec<(usize, Option<Instant>)> = (0..slots.len()).map(|s| (s, None)).collect();
    let mut left = slots.len();
    while left > 0 {
        if now.is_empty() {
            if let Some(r) = ring {
                // Completions that arrived during the pass.
                r.reap();
            }
            let woken = std::mem::take(&mut *ready.lock().unwrap());
            if woken.is_empty() {
                match ring {
                    Some(r) => r.park(),
                    None => std::thread::park(),
                }
                continue;
            }
            now = woken.into_iter().map(|(s, t)| (s, Some(t))).collect();
        }
        polling.passes += 1;
        for (slot, woke) in now.drain(..) {
            let Some(fut) = &mut slots[slot] else {
                continue;
            };
            if let Some(t) = woke {
                polling.woken += 1;
                polling.wait_ns += t.elapsed().as_nanos() as u64;
            }
            polling.polled += 1;
            let mut cx = TaskContext::from_waker(&wakers[slot]);
            let polled = match ring {
                Some(r) => r.enter(|| fut.as_mut().poll(&mut cx)),
                None => fut.as_mut().poll(&mut cx),
            };
            if let Poll::Ready(r) = polled {
                r?;
                slots[slot] = None;
                left -= 1;
            }
        }
    }
    Ok(Some(polling))
}

/// Sizes of one run.
struct Sizes {
    budget: u64,
    /// Measured reads of a Zipf case.
    zipf_ops: usize,
    /// The file of `fsync-1g`.
    fsync: u64,
    /// The longest a `device` run of a Zipf case goes on.
    device_cap_s: u64,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                budget: 16 << 20,
                zipf_ops: 40_000,
                fsync: 128 << 20,
                device_cap_s: 3,
            }
        } else {
            Sizes {
                budget: 64 << 20,
                zipf_ops: 160_000,
                fsync: 1 << 30,
                device_cap_s: 10,
            }
        }
    }

    fn file(&self) -> u64 {
        4 * self.budget
    }

    /// Reads before measuring in a Zipf case: three budgets' worth.
    fn warm(&self) -> usize {
        3 * (self.budget / PAGE as u64) as usize
    }
}

fn steps(_: &super::Plan<'_>) -> u64 {
    // The file, the probes, each Zipf case's variants, cold-seq's three, fsync's two.
    (2 + DEPTHS.len() * (QUIRE.len() + 2) + 3 + 2) as u64
}

/// What the machine lets the fio variants do: `Err(why)` where a variant cannot run.
struct FioEnv {
    kernel: Result<MemGroups, String>,
    device: Result<(), String>,
}

/// `/proc/sys/kernel/io_uring_disabled`, if the kernel has it.
fn io_uring_disabled() -> Option<String> {
    let v = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok()?;
    match v.trim() {
        "0" => None,
        "2" => Some("io_uring is disabled (kernel.io_uring_disabled = 2)".into()),
        // 1: only members of kernel.io_uring_group (and root) may use it; the probe says.
        _ => None,
    }
}

/// A tiny fio run over `file` (io_uring, `direct`), to see whether this one can run here.
fn probe(file: &Path, direct: bool) -> Result<(), String> {
    let out = Command::new("fio")
        .args([
            "--name=probe",
            "--ioengine=io_uring",
            "--rw=read",
            "--bs=4k",
            "--size=64k",
            "--iodepth=2",
        ])
        .arg(format!("--direct={}", u8::from(direct)))
        .arg(format!("--filename={}", file.display()))
        .output()
        .map_err(|e| format!("fio does not run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        Err(format!(
            "fio --ioengine=io_uring --direct={} fails here ({}): {}",
            u8::from(direct),
            out.status,
            last.trim()
        ))
    }
}

impl FioEnv {
    /// Finds out what runs here, with a probe file in `scratch`.
    fn probe(scratch: &Scratch) -> anyhow::Result<FioEnv> {
        let fio_ok = match Command::new("fio").arg("--version").output() {
            Ok(o) if o.status.success() => Ok(()),
            _ => Err("fio is not installed".to_string()),
        };
        let uring = fio_ok.and_then(|()| io_uring_disabled().map_or(Ok(()), Err));
        let path = scratch.path("probe");
        std::fs::write(&path, vec![7u8; 64 << 10])
            .with_context(|| format!("writing {}", path.display()))?;
        let buffered = uring.clone().and_then(|()| probe(&path, false));
        let device = uring.and_then(|()| probe(&path, true));
        let kernel =
            buffered.and_then(|()| MemGroups::new().map_err(|e| format!("no memory cgroup: {e}")));
        std::fs::remove_file(&path).ok();
        Ok(FioEnv { kernel, device })
    }
}

/// Bytes the waited-for children of this process (and theirs) had the kernel read from
/// storage: `getrusage(RUSAGE_CHILDREN).ru_inblock`, in 512-byte blocks.
fn children_read_bytes() -> u64 {
    // SAFETY: getrusage writes a plain struct that we own; all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_CHILDREN with a valid pointer to a `rusage` is always a valid call.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return 0;
    }
    ru.ru_inblock as u64 * 512
}

/// One fio run and the bytes it read from storage.
fn fio_counted(args: &[String], group: Option<&MemGroup>) -> anyhow::Result<(FioResult, u64)> {
    let before = children_read_bytes();
    let r = fio(args, group, false)?;
    Ok((r, children_read_bytes().saturating_sub(before)))
}

/// The arguments of a fio read job over `file`.
fn fio_args(
    name: &str,
    file: &Path,
    len: u64,
    direct: bool,
    depth: usize,
    extra: &[String],
) -> Vec<String> {
    let mut v = vec![
        format!("--name={name}"),
        format!("--filename={}", file.display()),
        format!("--size={len}"),
        "--ioengine=io_uring".into(),
        format!("--direct={}", u8::from(direct)),
        format!("--iodepth={depth}"),
    ];
    v.extend(extra.iter().cloned());
    v
}

/// The arguments of a Zipf job of `ops` reads with `seed`.
fn zipf_extra(ops: usize, seed: u64) -> Vec<String> {
    vec![
        "--rw=randread".into(),
        "--bs=4k".into(),
        "--random_distribution=zipf:0.99".into(),
        "--norandommap".into(),
        format!("--io_size={}", ops as u64 * PAGE as u64),
        format!("--number_ios={ops}"),
        format!("--randseed={seed}"),
    ]
}

/// Writes `pages` (in order, 4 KiB reads of `data`) as a fio iolog (version 2) beside `data`,
/// named after `what`; returns its path.
fn write_iolog(data: &Path, what: &str, pages: &[u32]) -> anyhow::Result<std::path::PathBuf> {
    let log = data.with_file_name(format!("zipf-{what}.iolog"));
    let mut w = std::io::BufWriter::new(File::create(&log)?);
    let name = data.display();
    writeln!(w, "fio version 2 iolog\n{name} add\n{name} open")?;
    for &p in pages {
        writeln!(w, "{name} read {} {PAGE}", u64::from(p) * PAGE as u64)?;
    }
    writeln!(w, "{name} close")?;
    w.flush()?;
    Ok(log)
}

/// The arguments of a job that replays `log` (4 KiB random reads) as fast as it can.
fn iolog_extra(log: &Path) -> Vec<String> {
    vec![
        "--rw=randread".into(),
        "--bs=4k".into(),
        format!("--read_iolog={}", log.display()),
        "--replay_no_stall=1".into(),
    ]
}

/// A memory cgroup for a `kernel` run whose fio jobs look like `shape`: limited to the budget
/// plus fio's own footprint, found by running `shape` with `--direct=1` (no page cache) in the
/// group first. Returns the group and that footprint.
fn kernel_group(cg: &MemGroups, budget: u64, shape: &[String]) -> anyhow::Result<(MemGroup, u64)> {
    let g = cg.group("inflight", Some(budget + (256 << 20)))?;
    let mut args = shape.to_vec();
    args.push("--direct=1".into()); // the last one given wins
    args.push("--number_ios=64".into());
    args.push("--io_size=64m".into());
    fio(&args, Some(&g), false).context("fio's footprint")?;
    let own = g.max_usage()?;
    g.set_limit(budget + own)?;
    Ok((g, own))
}

fn run(b: &mut Bench) -> anyhow::Result<()> {
    let sz = Sizes::new(b.quick());
    let scratch = Scratch::new("inflight")?;
    let path = scratch.path("data");
    b.step(&format!(
        "writing {} MiB to {}",
        sz.file() >> 20,
        scratch.describe()
    ));
    b.note(format!(
        "budget {} MiB, data file of {} MiB in {}",
        sz.budget >> 20,
        sz.file() >> 20,
        scratch.describe()
    ));
    let content = Content::new();
    write_data_file(&path, sz.file(), &content)?;

    b.step("probing fio, io_uring and memory cgroups");
    let env = if b.wants("kernel") || b.wants("device") {
        FioEnv::probe(&scratch)?
    } else {
        FioEnv {
            kernel: Err("not asked for".into()),
            device: Err("not asked for".into()),
        }
    };
    for (v, r) in [
        ("kernel", env.kernel.as_ref().map(drop)),
        ("device", env.device.as_ref().map(drop)),
    ] {
        if let (true, Err(why)) = (b.wants(v), r) {
            b.note(format!("{FIO_CASES} / {v}: skipped: {why}"));
        }
    }
    b.note(
        "miss_iops: quire — folios read from the store (page_cache_misses + readahead) per \
         second; kernel, device — bytes fio had the kernel read from storage (read_bytes, via \
         getrusage(RUSAGE_CHILDREN)) in 4 KiB pages per second of fio's runtime",
    );

    for depth in DEPTHS {
        zipf_case(b, &sz, &env, &path, depth)?;
    }
    cold_seq(b, &sz, &env, &path)?;
    fsync_case(b, &sz, &scratch)?;
    drop(scratch);
    Ok(())
}

// ---- zipf-qdN -------------------------------------------------------------------------------

fn zipf_case(
    b: &mut Bench,
    sz: &Sizes,
    env: &FioEnv,
    path: &Path,
    depth: usize,
) -> anyhow::Result<()> {
    let case = format!("zipf-qd{depth}");
    let case = case.as_str();
    // The kernel against quire's asynchronous reads; against the blocking ones when those are
    // left out (a case keeps its first pair).
    b.compare(case, "kernel", "quire-async");
    b.compare(case, "kernel", "quire-sync");
    let pages = (sz.file() / PAGE as u64) as usize;
    let (warm, ops) = (sz.warm(), sz.zipf_ops);

    // One trace for every variant: quire reads it, fio replays it (`--read_iolog`), so that
    // all see the same accesses.
    let trace = zipf_trace(pages, warm + ops, 0);
    let wanted: Vec<&QuireVariant> = QUIRE.iter().filter(|v| b.wants(v.name)).collect();
    for v in wanted {
        b.step(&format!("{case} / {}", v.name));
        if v.name == "quire-local" && ThreadRing::current().is_none() {
            b.note(format!(
                "{case} / quire-local: skipped: this thread cannot have an io_uring of its own"
            ));
            continue;
        }
        let cache = PageCache::new(CacheConfig::new(sz.budget as usize))?;
        let file = cache.open(direct_store(b, path, false)?)?;
        (v.reads)(&file, &trace[..warm], depth)?;
        let before = Snapshot::take();
        let io_before = cache.stats_exact().io;
        let t0 = Instant::now();
        let polling = (v.reads)(&file, &trace[warm..], depth)?;
        let secs = t0.elapsed().as_secs_f64();
        let d = Snapshot::take().since(&before);
        let io = cache.stats_exact().io.since(&io_before);
        let (missed, ahead) = (d.get(Event::PageCacheMisses), d.get(Event::Readahead));
        b.record(case, v.name, 1, "iops", ops as f64 / secs, "1/s");
        let read = (missed + ahead) as f64;
        b.record(case, v.name, 1, "miss_iops", read / secs, "1/s");
        if let Some(p) = polling {
            // The depth the device was asked to overlap: every miss of the futures goes through
            // the I/O engine (the blocking path reads its own misses on the caller's thread, so
            // `quire-sync` has no such figure).
            b.record(case, v.name, 1, "mean_depth", io.mean_depth(), "requests");
            b.record(
                case,
                v.name,
                1,
                "wake_to_poll_us",
                p.wait_ns as f64 / p.woken.max(1) as f64 / 1e3,
                "us",
            );
            b.record(
                case,
                v.name,
                1,
                "ready_per_pass",
                p.polled as f64 / p.passes.max(1) as f64,
                "futures",
            );
        }
        b.note(format!(
            "{case} / {}: {missed} misses and {ahead} folios read ahead in {ops} reads",
            v.name
        ));
    }

    let len = sz.file();
    if b.wants("kernel") {
        b.step(&format!("{case} / kernel"));
        if let Ok(cg) = &env.kernel {
            let shape = fio_args(case, path, len, false, depth, &zipf_extra(ops, 1));
            let (g, own) = kernel_group(cg, sz.budget, &shape)?;
            drop_kernel_cache(&File::open(path)?)?;
            // Warm-up: the trace's first reads, as quire's; then the measured run replays the
            // rest and keeps the cache (`--invalidate=0`).
            let warm_log = write_iolog(path, "warm", &trace[..warm])?;
            let meas_log = write_iolog(path, "measured", &trace[warm..])?;
            fio(
                &fio_args(case, path, len, false, depth, &iolog_extra(&warm_log)),
                Some(&g),
                false,
            )?;
            let mut args = fio_args(case, path, len, false, depth, &iolog_extra(&meas_log));
            args.push("--invalidate=0".into());
            let (r, read) = fio_counted(&args, Some(&g))?;
            record_fio(b, case, "kernel", &r, read)?;
            b.note(format!(
                "{case} / kernel: cgroup limit {:.1} MiB = budget + fio's own {:.1} MiB",
                (sz.budget + own) as f64 / (1 << 20) as f64,
                own as f64 / (1 << 20) as f64
            ));
        }
    }
    if b.wants("device") {
        b.step(&format!("{case} / device"));
        if env.device.is_ok() {
            let mut extra = iolog_extra(&write_iolog(path, "measured", &trace[warm..])?);
            extra.push(format!("--runtime={}", sz.device_cap_s));
            let (r, read) = fio_counted(&fio_args(case, path, len, true, depth, &extra), None)?;
            record_fio(b, case, "device", &r, read)?;
        }
    }
    Ok(())
}

/// Records a fio run of a Zipf case: `iops` as fio reports it, `miss_iops` from the bytes it
/// read from storage over its runtime.
fn record_fio(
    b: &mut Bench,
    case: &str,
    variant: &str,
    r: &FioResult,
    read: u64,
) -> anyhow::Result<()> {
    ensure!(
        r.runtime_s > 0.0 && r.ios > 0.0,
        "{case} / {variant}: fio reported no reads ({} in {} s)",
        r.ios,
        r.runtime_s
    );
    b.record(case, variant, 1, "iops", r.iops, "1/s");
    let pages = read as f64 / PAGE as f64;
    b.record(case, variant, 1, "miss_iops", pages / r.runtime_s, "1/s");
    Ok(())
}

// ---- cold-seq -------------------------------------------------------------------------------

fn cold_seq(b: &mut Bench, sz: &Sizes, env: &FioEnv, path: &Path) -> anyhow::Result<()> {
    let case = "cold-seq";
    b.compare(case, "kernel", "quire-sync");
    let len = sz.file();
    if b.wants("quire-sync") {
        b.step(&format!("{case} / quire-sync"));
        let cache = PageCache::new(CacheConfig::new(sz.budget as usize))?;
        let file = cache.open(direct_store(b, path, false)?)?;
        let mut buf = vec![0u8; CHUNK];
        // Untimed: faults the cache's memory in, as the kernel's page cache memory already is.
        read_through(&file, &mut buf)?;
        file.invalidate()?;
        ensure!(
            file.cached_frames() == 0,
            "frames still cached after invalidate"
        );
        let t0 = Instant::now();
        let n = read_through(&file.reopen(), &mut buf)?;
        let t = t0.elapsed();
        ensure!(n == len, "quire read {n} of {len} bytes");
        b.record(case, "quire-sync", 1, "mb_per_s", mib_per_s(n, t), "MiB/s");
    }
    let extra = ["--rw=read".to_string(), "--bs=1M".to_string()];
    if b.wants("kernel") {
        b.step(&format!("{case} / kernel"));
        if let Ok(cg) = &env.kernel {
            let shape = fio_args(case, path, len, false, 1, &extra);
            let (g, own) = kernel_group(cg, sz.budget, &shape)?;
            drop_kernel_cache(&File::open(path)?)?;
            let r = match fio(&shape, Some(&g), false) {
                Ok(r) => r,
                Err(e) => {
                    // Once in CI the group killed fio (SIGKILL) at the budget plus fio's
                    // footprint measured without the page cache, why not established: one
                    // more try with a budget's worth of room more, said in the report. A cold
                    // sequential pass reads every page once, so the extra room gives it
                    // nothing to hit.
                    let limit = 2 * sz.budget + own;
                    b.note(format!(
                        "{case} / kernel: fio failed at a limit of {} MiB ({e:#}); run again at {} MiB",
                        (sz.budget + own) >> 20,
                        limit >> 20
                    ));
                    g.set_limit(limit)?;
                    drop_kernel_cache(&File::open(path)?)?;
                    fio(&shape, Some(&g), false)?
                }
            };
            record_seq_fio(b, case, "kernel", &r)?;
        }
    }
    if b.wants("device") {
        b.step(&format!("{case} / device"));
        if env.device.is_ok() {
            let r = fio(&fio_args(case, path, len, true, 1, &extra), None, false)?;
            record_seq_fio(b, case, "device", &r)?;
        }
    }
    Ok(())
}

/// Reads the whole file from start to end in 1 MiB reads, checking the tags; returns the bytes.
fn read_through(file: &CachedFile, buf: &mut [u8]) -> anyhow::Result<u64> {
    let mut off = 0;
    loop {
        let n = file.read_at(off, buf)?;
        if n == 0 {
            return Ok(off);
        }
        ensure!(Content::check_tags(off, &buf[..n]), "wrong bytes at {off}");
        off += n as u64;
    }
}

fn record_seq_fio(b: &mut Bench, case: &str, variant: &str, r: &FioResult) -> anyhow::Result<()> {
    ensure!(
        r.runtime_s > 0.0 && r.bytes > 0.0,
        "{case} / {variant}: fio reported nothing read"
    );
    let mbps = r.bytes / (1 << 20) as f64 / r.runtime_s;
    b.record(case, variant, 1, "mb_per_s", mbps, "MiB/s");
    Ok(())
}

// ---- fsync-1g -------------------------------------------------------------------------------

/// `Dirty:` of `/proc/meminfo`, in bytes: dirty file data machine-wide.
fn meminfo_dirty() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("Dirty:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

fn fsync_case(b: &mut Bench, sz: &Sizes, scratch: &Scratch) -> anyhow::Result<()> {
    let case = "fsync-1g";
    b.compare(case, "kernel", "quire-sync");
    let size = sz.fsync;
    let mut buf = vec![0u8; CHUNK];
    Content::new().fill(0, &mut buf);
    b.note(format!("{case}: a file of {} MiB", size >> 20));
    if b.wants("quire-sync") {
        b.step(&format!("{case} / quire-sync"));
        let path = scratch.path("fsync-quire");
        let capacity = usize::try_from(2 * size).context("file too large for this machine")?;
        let mut cfg = CacheConfig::new(capacity);
        // Nothing is written back before the fsync: the flusher's thresholds above the file,
        // its expiry beyond the run.
        cfg.dirty_background = capacity;
        cfg.dirty_limit = capacity;
        cfg.dirty_expire = Duration::from_secs(3600);
        let cache = PageCache::new(cfg)?;
        let file = cache.open(direct_store(b, &path, true)?)?;
        let mut off = 0u64;
        while off < size {
            Content::retag(off, &mut buf);
            file.write_all_at(off, &buf)?;
            off += CHUNK as u64;
        }
        let dirty = cache.stats_exact().dirty_frames as u64 * PAGE as u64;
        ensure!(
            dirty == size,
            "{case}: {dirty} of {size} bytes dirty before the fsync (written back early)"
        );
        let t0 = Instant::now();
        file.fsync()?;
        let t = t0.elapsed();
        ensure!(
            cache.stats_exact().dirty_frames == 0,
            "{case}: dirty frames after the fsync"
        );
        b.record(case, "quire-sync", 1, "seconds", t.as_secs_f64(), "s");
        drop(file);
        drop(cache);
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    }
    if b.wants("kernel") {
        b.step(&format!("{case} / kernel"));
        let path = scratch.path("fsync-kernel");
        let mut f = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut off = 0u64;
        while off < size {
            Content::retag(off, &mut buf);
            f.write_all(&buf)
                .with_context(|| format!("writing {}", path.display()))?;
            off += CHUNK as u64;
        }
        let dirty = meminfo_dirty();
        let t0 = Instant::now();
        f.sync_all()
            .with_context(|| format!("syncing {}", path.display()))?;
        let t = t0.elapsed();
        b.record(case, "kernel", 1, "seconds", t.as_secs_f64(), "s");
        if let Some(d) = dirty {
            b.note(format!(
                "{case} / kernel: {:.0} MiB dirty machine-wide (/proc/meminfo) when the fsync began",
                d as f64 / (1 << 20) as f64
            ));
        }
        drop(f);
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_quire_row_is_a_declared_variant() {
        for v in QUIRE {
            assert!(
                VARIANTS.contains(&v.name),
                "{} missing from VARIANTS",
                v.name
            );
        }
        assert!(VARIANTS.contains(&"kernel") && VARIANTS.contains(&"device"));
    }

    #[test]
    fn fio_zipf_arguments() {
        let a = fio_args(
            "zipf-qd8",
            Path::new("/x/data"),
            1 << 26,
            false,
            8,
            &zipf_extra(100, 5),
        );
        for want in [
            "--name=zipf-qd8",
            "--filename=/x/data",
            "--size=67108864",
            "--ioengine=io_uring",
            "--direct=0",
            "--iodepth=8",
            "--rw=randread",
            "--bs=4k",
            "--random_distribution=zipf:0.99",
            "--io_size=409600",
            "--number_ios=100",
            "--randseed=5",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} not in {a:?}");
        }
    }
}
