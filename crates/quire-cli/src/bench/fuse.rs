//! Suite `fuse`: programs on a FUSE mount of a directory through quire, side by side with the
//! same FUSE round trip without quire, with the kernel's FUSE page cache, without FUSE at all,
//! and with no data at all. fio drives the I/O cases; a stat walk drives `stat-storm`.
//!
//! Variants (each a daemon started by the suite — `quire mount --foreground --kind K` — with 4
//! serving threads, over the same source directory and files):
//! - `quire`: quire's page cache (`--capacity` = the budget) and dentry cache; direct I/O opens.
//!   Every variant's daemon takes the mount's default channel: FUSE over io_uring where the
//!   kernel offers it (the suite prints which).
//! - `quire-classic`: the same on the classic `/dev/fuse` channel (`--channel classic`).
//! - `quire-normal`: the same with the daemon's threads at the normal scheduling policy
//!   (`--sched normal`), where every other daemon runs them at `SCHED_IDLE` (`quire_fuse::sched`:
//!   each daemon leads a session of its own, as a detached `quire mount` does, so that it has an
//!   autogroup of its own where autogroups are on; the suite prints the policy `quire` got).
//! - `passthrough`: quire's file system without its data cache (`quire_fuse::Passthrough`: the
//!   same metadata operations, every read and write straight to the backing file), direct I/O
//!   opens, no cache in the daemon: reads are `pread`s served by the kernel's page cache of the
//!   *backing* file system, behind the same round trip. Its daemon runs in a cgroup-v1 memory group limited to
//!   the budget (plus the daemon's own resident memory at start), so that the page cache it
//!   fills is held to the budget too; where no memory group can be made, the suite says why and
//!   runs it unlimited.
//! - `passthrough-cached`: the same daemon (same memory group), files opened with the kernel's
//!   FUSE page cache on (`FOPEN_KEEP_CACHE`, as most FUSE file systems run); that cache is
//!   charged to the reader (fio), not limited.
//! - `kernel`: fio on the backing directory itself, no FUSE; fio runs in a memory group of the
//!   budget plus 32 MiB for fio itself.
//! - `ext4`: the program cases' `kernel`: the database on the backing directory itself, its
//!   programs in a memory group of the budget plus their own memory (named after the backing
//!   file system the published runs use; `fuse: budget …, files in …` says which it is).
//! - `empty`: a mount that answers from memory without touching data (reads are zeros, writes
//!   are counted and dropped): the bare cost of the round trip.
//!
//! Cases, each at 1 and 4 fio jobs (threads of the stat walk):
//! - `hot-randread`: 4 KiB random reads of a file half the budget, read once before (cached);
//!   `iops` and mean latency `lat_us`.
//! - `zipf-randread`: 4 KiB random reads, Zipf θ = 0.99, of a file 4× the budget, from a cold
//!   start (fresh daemon, backing pages dropped) after a warm-up (`ramp_time`); `iops`,
//!   `lat_us`.
//! - `seqread`: the 4×-budget file read once in 1 MiB reads from a cold start (4 jobs: a quarter
//!   each); `mb_per_s`.
//! - `seqwrite-fsync`: new files written in 1 MiB writes and synced (`end_fsync`), per job;
//!   `mb_per_s` of the whole, from the wall-clock time of the fio run.
//! - `wal-append`: a database's log: a new file per job appended in 8 KiB writes, each followed
//!   by `fdatasync` (fio `--fdatasync=1`), for the run time or `write_per_job` bytes; `iops`
//!   (appends per second, their syncs included) and `sync_us`, the mean `fdatasync`. Compared
//!   with `kernel` as well: what the mount costs a commit.
//! - `stat-storm`: `statx` of every file of a tree (50 000 files; 10 000 with `--quick`), split
//!   among the threads: `cold` (fresh mount; for `kernel`, dentries and inodes dropped with
//!   `drop_caches=2`) and then `warm` (the same again at once); `stats_per_s`.
//! - `hot-randread` also records `round_trip_share`: the `empty` mount's mean latency over
//!   quire's at 1 job — how much of quire's time per request is the FUSE round trip itself.
//!
//! - `pgbench`, `db_bench-fill`, `db_bench-readrandom`, `db_bench-readseq`: a database in the
//!   mount (PostgreSQL, RocksDB), on `quire`, `passthrough` and `ext4` (see `programs`).
//!
//! Budget 256 MiB (64 MiB with `--quick`); fio runs 5 s (1 s with `--quick`), zipf after 10 s of
//! warm-up (2 s), enough for every variant's cache to fill. Before each timed run of the `quire`
//! variant its frame pool is faulted in, untimed (see `warm_pool`). Where FUSE is missing the
//! suite prints `skipped: why` and records nothing; where fio (or a database program) is
//! missing, so do the cases that need it.

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

use super::cgroup::{MemGroup, MemGroups};
use super::read::{drop_kernel_cache, Scratch};
use super::{Bench, Suite};

pub const SUITE: Suite = Suite {
    name: "fuse",
    about: "a FUSE mount through quire vs passthrough, kernel FUSE cache, no FUSE, empty (fio)",
    variants: &VARIANTS,
    steps: |_| (FIO_VARIANTS.len() * 6 + programs::STEPS) as u64,
    run,
};

mod programs;

/// Every variant: those of the fio cases and stat walk, and `ext4`, the program cases' name for
/// the backing directory used directly.
const VARIANTS: [&str; 8] = [
    "kernel",
    "empty",
    "passthrough",
    "passthrough-cached",
    "quire-classic",
    "quire-normal",
    "quire",
    "ext4",
];
/// The variants of the fio cases and the stat walk.
const FIO_VARIANTS: [&str; 7] = [
    "kernel",
    "empty",
    "passthrough",
    "passthrough-cached",
    "quire-classic",
    "quire-normal",
    "quire",
];
const JOBS: [usize; 2] = [1, 4];
const DAEMON_THREADS: usize = 4;

struct Sizes {
    budget: u64,
    hot: u64,
    zipf: u64,
    write_per_job: u64,
    runtime: u64,
    ramp: u64,
    tree_dirs: usize,
    tree_files_per_dir: usize,
}

fn sizes(quick: bool) -> Sizes {
    if quick {
        Sizes {
            budget: 64 << 20,
            hot: 32 << 20,
            zipf: 256 << 20,
            write_per_job: 16 << 20,
            runtime: 1,
            ramp: 2,
            tree_dirs: 20,
            tree_files_per_dir: 500,
        }
    } else {
        Sizes {
            budget: 256 << 20,
            hot: 128 << 20,
            zipf: 1 << 30,
            write_per_job: 128 << 20,
            runtime: 5,
            ramp: 10,
            tree_dirs: 100,
            tree_files_per_dir: 500,
        }
    }
}

/// Why fio cannot run here, if it cannot.
fn have_fio() -> Result<(), String> {
    match Command::new("fio").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("fio is not installed".into()),
    }
}

fn run(b: &mut Bench) -> anyhow::Result<()> {
    if let Err(why) = quire_fuse::mount::fuse_available() {
        b.progress.println(format!("fuse: skipped: {why}"));
        return Ok(());
    }
    let sz = sizes(b.quick());
    let scratch = Scratch::new("fuse")?;
    let src = scratch.path("src");
    let mnt = scratch.path("mnt");
    fs::create_dir(&src)?;
    fs::create_dir(&mnt)?;
    b.progress.println(format!(
        "fuse: budget {} MiB, files in {}",
        sz.budget >> 20,
        scratch.describe()
    ));
    // The fio cases' files, where they will run.
    let fio = have_fio();
    if let Err(why) = &fio {
        b.note(format!("fio cases and stat-storm: skipped: {why}"));
    }
    let fio = fio.is_ok() && FIO_VARIANTS.iter().any(|v| b.wants(v));
    if fio {
        write_file(&src.join("hot.dat"), sz.hot)?;
        write_file(&src.join("zipf.dat"), sz.zipf)?;
        make_tree(&src.join("tree"), sz.tree_dirs, sz.tree_files_per_dir)?;
    }
    fs::create_dir(src.join("w"))?;

    // Can we mount at all? (Privileges, fusermount3.) And which scheduling policy does the
    // mount's default give its threads here?
    match Daemon::start("quire", &src, &mnt, sz.budget, None, &[]) {
        Ok(d) => {
            let policy = crate::mount::read_stats(&mnt).ok().and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("fuse_sched ").map(str::to_string))
            });
            b.note(format!(
                "scheduling of the daemons but `quire-normal`: {}",
                policy
                    .as_deref()
                    .unwrap_or("unknown (no fuse_sched in `quire stat`)")
            ));
            d.stop()?
        }
        Err(e) => {
            b.progress
                .println(format!("fuse: skipped: cannot mount here: {e:#}"));
            return Ok(());
        }
    }
    let cg = MemGroups::new();
    if let Err(why) = &cg {
        b.progress.println(format!(
            "fuse: note: no memory cgroup ({why}): passthrough and kernel run unlimited"
        ));
    }
    let cg = cg.ok();
    let mut env = Env {
        src,
        mnt,
        sz,
        cg,
        lat_1job: Default::default(),
    };
    b.progress
        .println(format!("fuse: channel: {}", channel_note()));
    if fio {
        fio_cases(b, &mut env)?;
    }
    programs::run(b, &env);
    drop(env);
    drop(scratch);
    Ok(())
}

/// The fio cases and the stat walk.
fn fio_cases(b: &mut Bench, env: &mut Env) -> anyhow::Result<()> {
    for case in [
        "hot-randread",
        "zipf-randread",
        "seqread",
        "seqwrite-fsync",
        "wal-append",
    ] {
        b.compare(case, "passthrough", "quire");
        b.compare(case, "quire-classic", "quire");
        b.compare(case, "quire-normal", "quire");
        if case == "wal-append" {
            b.compare(case, "kernel", "quire");
        }
        for v in FIO_VARIANTS {
            if !b.wants(v) {
                continue;
            }
            b.step(&format!("{case} {v}"));
            env.fio_case(b, case, v)
                .with_context(|| format!("{case}, variant {v}"))?;
        }
    }
    b.compare("stat-storm-cold", "passthrough", "quire");
    b.compare("stat-storm-warm", "passthrough", "quire");
    for v in FIO_VARIANTS {
        if !b.wants(v) {
            continue;
        }
        b.step(&format!("stat-storm {v}"));
        env.stat_case(b, v)
            .with_context(|| format!("stat-storm, variant {v}"))?;
    }
    if let (Some(e), Some(q)) = (
        env.lat_1job.get("empty").copied(),
        env.lat_1job.get("quire").copied(),
    ) {
        b.record("hot-randread", "quire", 1, "round_trip_share", e / q, "1");
    }
    Ok(())
}

/// Which channel the daemons other than `*-classic` get.
fn channel_note() -> String {
    match fs::read_to_string("/sys/module/fuse/parameters/enable_uring") {
        Ok(v) if v.trim() == "Y" => "io_uring (enable_uring is on); `quire-classic` on /dev/fuse".into(),
        Ok(_) => "classic for every variant: /sys/module/fuse/parameters/enable_uring is off (`quire mount --fuse-uring` turns it on, as root)".into(),
        Err(_) => "classic for every variant: this kernel has no FUSE over io_uring".into(),
    }
}

/// Removes every file of `dir` (the write cases' own directory, between runs).
fn clear_dir(dir: &Path) -> anyhow::Result<()> {
    for e in fs::read_dir(dir)? {
        fs::remove_file(e?.path())?;
    }
    Ok(())
}

/// Writes `size` bytes of a fixed pseudo-random pattern and syncs.
fn write_file(path: &Path, size: u64) -> anyhow::Result<()> {
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let buf: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut off = 0;
    while off < size {
        f.write_all(&buf)?;
        off += buf.len() as u64;
    }
    f.sync_all()?;
    Ok(())
}

fn make_tree(root: &Path, dirs: usize, per_dir: usize) -> anyhow::Result<()> {
    for d in 0..dirs {
        let dir = root.join(format!("d{d:04}"));
        fs::create_dir_all(&dir)?;
        for f in 0..per_dir {
            File::create(dir.join(format!("f{f:05}")))?;
        }
    }
    Ok(())
}

/// Faults quire's frame pool in, untimed, by writing a file of the budget's size through the
/// mount and removing it (its pages go back to the pool, still resident): a new daemon's first
/// touch of its memory is a one-off cost of starting it (page faults, zeroing, huge-page
/// compaction), which the kernel's page cache, whose memory the machine already has, never
/// pays in these runs.
fn warm_pool(dir: &Path, budget: u64) -> anyhow::Result<()> {
    let p = dir.join("warm-up");
    write_file(&p, budget)?;
    fs::remove_file(&p)?;
    Ok(())
}

/// Drops the kernel's cached pages of a backing file (so that reads charge whoever reads it).
fn drop_cache(path: &Path) -> anyhow::Result<()> {
    let f = File::open(path)?;
    f.sync_all()?;
    drop_kernel_cache(&f)
}

// ---- daemons ---------------------------------------------------------------------------------

fn is_mounted(mnt: &Path) -> bool {
    let want = mnt.to_string_lossy();
    fs::read_to_string("/proc/self/mountinfo").is_ok_and(|info| {
        info.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.len() > 4 && f[4] == want && l.contains(" - fuse")
        })
    })
}

/// A `quire mount --foreground --kind K` daemon.
struct Daemon {
    child: Child,
    mnt: PathBuf,
}

impl Daemon {
    /// Starts a daemon of `kind` (in `group` if given, with the mount options `extra`) and waits
    /// until it is mounted.
    fn start(
        kind: &str,
        src: &Path,
        mnt: &Path,
        budget: u64,
        group: Option<&MemGroup>,
        extra: &[&str],
    ) -> anyhow::Result<Daemon> {
        let exe = std::env::current_exe()?;
        let mut cmd = match group {
            // The shell joins the group and then becomes the daemon, so that every thread and
            // every page it faults in is charged there from the start.
            Some(g) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(r#"echo $$ > "$0" && exec "$@""#)
                    .arg(g.procs())
                    .arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        // `K-classic`: the same daemon on the classic /dev/fuse channel; every other variant
        // gets the mount's default channel (io_uring where the kernel offers it). `K-normal`:
        // its threads at the normal scheduling policy; every other variant gets the mount's
        // default (`SCHED_IDLE` where its scheduling group is its own).
        let (kind, channel) = match kind.strip_suffix("-classic") {
            Some(k) => (k, "classic"),
            None => (kind, "auto"),
        };
        let (kind, sched) = match kind.strip_suffix("-normal") {
            Some(k) => (k, "normal"),
            None => (kind, "auto"),
        };
        // A session of its own, as a detached `quire mount` has (it calls `setsid`): with
        // autogroups on, its own scheduling group. Out of the terminal's process group, it no
        // longer gets a Ctrl-C of the suite: it is told to stop (SIGTERM: write back, unmount)
        // when the suite's thread that started it ends.
        // SAFETY: between fork and exec only async-signal-safe calls (`setsid`, `prctl`,
        // `errno` through `last_os_error`), no allocation, no lock, no panic.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.arg("mount")
            .arg("--foreground")
            .arg("--channel")
            .arg(channel)
            .arg("--sched")
            .arg(sched)
            .arg("--kind")
            .arg(kind)
            .arg("--capacity")
            .arg(budget.to_string())
            .arg("--threads")
            .arg(DAEMON_THREADS.to_string())
            .args(extra)
            .arg(src)
            .arg(mnt)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("starting the daemon")?;
        let t0 = Instant::now();
        while !is_mounted(mnt) {
            if let Some(st) = child.try_wait()? {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                bail!("the {kind} daemon exited ({st}): {}", err.trim());
            }
            if t0.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                bail!("the {kind} daemon did not mount within 30 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(Daemon {
            child,
            mnt: mnt.to_path_buf(),
        })
    }

    fn rss(&self) -> u64 {
        fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(0, |kb| kb * 1024)
    }

    /// Unmounts and waits for the daemon to exit.
    fn stop(mut self) -> anyhow::Result<()> {
        let mut tries = 0;
        while let Err(e) = rustix::mount::unmount(&self.mnt, rustix::mount::UnmountFlags::empty()) {
            tries += 1;
            if tries > 100 {
                let _ = rustix::mount::unmount(&self.mnt, rustix::mount::UnmountFlags::DETACH);
                bail!("unmounting {}: {e}", self.mnt.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let t0 = Instant::now();
        while self.child.try_wait()?.is_none() {
            if t0.elapsed() > Duration::from_secs(60) {
                let _ = self.child.kill();
                bail!("the daemon did not exit after unmounting");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = rustix::mount::unmount(&self.mnt, rustix::mount::UnmountFlags::DETACH);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---- the cases -------------------------------------------------------------------------------

struct Env {
    src: PathBuf,
    mnt: PathBuf,
    sz: Sizes,
    cg: Option<MemGroups>,
    /// Mean latency at 1 job of hot-randread, by variant (µs).
    lat_1job: std::collections::HashMap<&'static str, f64>,
}

/// What one fio run measured (its first job, group-reported).
pub(super) struct FioResult {
    pub(super) iops: f64,
    pub(super) lat_us: f64,
    pub(super) bytes: f64,
    /// I/Os completed.
    pub(super) ios: f64,
    /// How long the job ran, in seconds (fio's `runtime`).
    pub(super) runtime_s: f64,
    /// The mean latency of the job's `fsync`/`fdatasync` calls in µs (0 with none).
    pub(super) sync_us: f64,
}

/// Runs fio with `args` (in `group` if given); parses its JSON report.
pub(super) fn fio(
    args: &[String],
    group: Option<&MemGroup>,
    write: bool,
) -> anyhow::Result<FioResult> {
    let mut cmd = match group {
        Some(g) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(r#"echo $$ > "$0" && exec fio "$@""#)
                .arg(g.procs());
            c
        }
        None => Command::new("fio"),
    };
    let out = cmd
        .args(["--output-format=json", "--group_reporting"])
        .args(args)
        .output()
        .context("running fio")?;
    if !out.status.success() {
        bail!(
            "fio failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // fio may print notes before the JSON.
    let start = text.find('{').context("no JSON from fio")?;
    let v: Value = serde_json::from_str(&text[start..]).context("parsing fio's JSON")?;
    let job = &v["jobs"][0][if write { "write" } else { "read" }];
    Ok(FioResult {
        iops: job["iops"].as_f64().unwrap_or(0.0),
        lat_us: job["lat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0,
        bytes: job["io_bytes"].as_f64().unwrap_or(0.0),
        ios: job["total_ios"].as_f64().unwrap_or(0.0),
        runtime_s: job["runtime"].as_f64().unwrap_or(0.0) / 1000.0,
        sync_us: v["jobs"][0]["sync"]["lat_ns"]["mean"]
            .as_f64()
            .unwrap_or(0.0)
            / 1000.0,
    })
}

impl Env {
    /// The directory the variant's fio works in, and the daemon serving it (none for `kernel`).
    fn mount(
        &self,
        variant: &str,
        group: Option<&MemGroup>,
    ) -> anyhow::Result<(PathBuf, Option<Daemon>)> {
        if variant == "kernel" {
            return Ok((self.src.clone(), None));
        }
        let d = Daemon::start(variant, &self.src, &self.mnt, self.sz.budget, group, &[])?;
        Ok((self.mnt.clone(), Some(d)))
    }

    /// The memory group a variant runs in (the daemon's for the passthroughs, fio's for the
    /// kernel).
    fn group(&self, variant: &str) -> anyhow::Result<Option<MemGroup>> {
        let Some(cg) = &self.cg else {
            return Ok(None);
        };
        let limit = match variant {
            "passthrough" | "passthrough-cached" => self.sz.budget + (64 << 20),
            "kernel" => self.sz.budget + (32 << 20),
            _ => return Ok(None),
        };
        Ok(Some(cg.group(variant, Some(limit))?))
    }

    /// After the daemon started (in its group, with room to start): the limit becomes the budget
    /// plus what the daemon holds of its own.
    fn tighten(
        &self,
        variant: &str,
        group: Option<&MemGroup>,
        daemon: Option<&Daemon>,
    ) -> anyhow::Result<()> {
        if let (Some(g), Some(d)) = (group, daemon) {
            if variant.starts_with("passthrough") {
                g.set_limit(self.sz.budget + d.rss())?;
            }
        }
        Ok(())
    }

    fn fio_case(&mut self, b: &mut Bench, case: &str, variant: &'static str) -> anyhow::Result<()> {
        let rt = self.sz.runtime.to_string();
        for jobs in JOBS {
            for f in ["hot.dat", "zipf.dat"] {
                drop_cache(&self.src.join(f))?;
            }
            let group = self.group(variant)?;
            let (dir, daemon) = self.mount(variant, group.as_ref())?;
            self.tighten(variant, group.as_ref(), daemon.as_ref())?;
            let fio_group = if variant == "kernel" {
                group.as_ref()
            } else {
                None
            };
            if variant.starts_with("quire") {
                warm_pool(&dir.join("w"), self.sz.budget)?;
            }
            let common = |extra: &[&str]| -> Vec<String> {
                let mut v: Vec<String> = vec![
                    format!("--name={case}"),
                    "--ioengine=psync".into(),
                    format!("--numjobs={jobs}"),
                ];
                v.extend(extra.iter().map(|s| s.to_string()));
                v
            };
            match case {
                "hot-randread" => {
                    let file = dir.join("hot.dat");
                    // Read once, so that every variant's cache holds it.
                    let _ = fs::read(&file)?;
                    let r = fio(
                        &common(&[
                            &format!("--filename={}", file.display()),
                            "--rw=randread",
                            "--bs=4k",
                            "--time_based",
                            &format!("--runtime={rt}"),
                            "--norandommap",
                        ]),
                        fio_group,
                        false,
                    )?;
                    b.record(case, variant, jobs, "iops", r.iops, "1/s");
                    b.record(case, variant, jobs, "lat_us", r.lat_us, "us");
                    if jobs == 1 {
                        self.lat_1job.insert(variant, r.lat_us);
                    }
                }
                "zipf-randread" => {
                    let file = dir.join("zipf.dat");
                    let r = fio(
                        &common(&[
                            &format!("--filename={}", file.display()),
                            "--rw=randread",
                            "--bs=4k",
                            "--random_distribution=zipf:0.99",
                            "--norandommap",
                            "--time_based",
                            &format!("--runtime={rt}"),
                            &format!("--ramp_time={}", self.sz.ramp),
                        ]),
                        fio_group,
                        false,
                    )?;
                    b.record(case, variant, jobs, "iops", r.iops, "1/s");
                    b.record(case, variant, jobs, "lat_us", r.lat_us, "us");
                    if let Some(d) = &daemon {
                        b.record(
                            case,
                            variant,
                            jobs,
                            "daemon_rss_mib",
                            d.rss() as f64 / (1 << 20) as f64,
                            "MiB",
                        );
                    }
                }
                "seqread" => {
                    let file = dir.join("zipf.dat");
                    let part = self.sz.zipf / jobs as u64;
                    let t0 = Instant::now();
                    let r = fio(
                        &common(&[
                            &format!("--filename={}", file.display()),
                            "--rw=read",
                            "--bs=1M",
                            &format!("--size={part}"),
                            &format!("--offset_increment={part}"),
                        ]),
                        fio_group,
                        false,
                    )?;
                    let secs = t0.elapsed().as_secs_f64();
                    b.record(
                        case,
                        variant,
                        jobs,
                        "mb_per_s",
                        r.bytes / secs / (1 << 20) as f64,
                        "MiB/s",
                    );
                }
                "seqwrite-fsync" => {
                    let wdir = dir.join("w");
                    clear_dir(&wdir)?;
                    let t0 = Instant::now();
                    let r = fio(
                        &common(&[
                            &format!("--directory={}", wdir.display()),
                            "--rw=write",
                            "--bs=1M",
                            &format!("--size={}", self.sz.write_per_job),
                            "--end_fsync=1",
                        ]),
                        fio_group,
                        true,
                    )?;
                    let secs = t0.elapsed().as_secs_f64();
                    b.record(
                        case,
                        variant,
                        jobs,
                        "mb_per_s",
                        r.bytes / secs / (1 << 20) as f64,
                        "MiB/s",
                    );
                    clear_dir(&wdir)?;
                }
                "wal-append" => {
                    let wdir = dir.join("w");
                    clear_dir(&wdir)?;
                    let r = fio(
                        &common(&[
                            &format!("--directory={}", wdir.display()),
                            "--rw=write",
                            "--bs=8k",
                            &format!("--size={}", self.sz.write_per_job),
                            &format!("--runtime={rt}"),
                            "--fdatasync=1",
                        ]),
                        fio_group,
                        true,
                    )?;
                    b.record(case, variant, jobs, "iops", r.iops, "1/s");
                    b.record(case, variant, jobs, "sync_us", r.sync_us, "us");
                    clear_dir(&wdir)?;
                }
                _ => unreachable!(),
            }
            if let Some(d) = daemon {
                d.stop()?;
            }
            drop(group);
        }
        Ok(())
    }

    fn stat_case(&mut self, b: &mut Bench, variant: &'static str) -> anyhow::Result<()> {
        let files: Vec<PathBuf> = (0..self.sz.tree_dirs)
            .flat_map(|d| {
                (0..self.sz.tree_files_per_dir)
                    .map(move |f| PathBuf::from(format!("tree/d{d:04}/f{f:05}")))
            })
            .collect();
        for jobs in JOBS {
            let group = self.group(variant)?;
            let (dir, daemon) = self.mount(variant, group.as_ref())?;
            self.tighten(variant, group.as_ref(), daemon.as_ref())?;
            if variant == "kernel" {
                // Cold for the kernel: its dentries and inodes dropped (machine-wide; root only).
                if fs::write("/proc/sys/vm/drop_caches", "2").is_err() {
                    b.progress.println("fuse: note: cannot drop the kernel's dentries (not root): kernel stat-storm-cold is warm");
                }
            }
            for phase in ["cold", "warm"] {
                let t0 = Instant::now();
                std::thread::scope(|s| -> anyhow::Result<()> {
                    let chunks: Vec<&[PathBuf]> =
                        files.chunks(files.len().div_ceil(jobs)).collect();
                    let handles: Vec<_> = chunks
                        .into_iter()
                        .map(|chunk| {
                            let dir = &dir;
                            s.spawn(move || -> anyhow::Result<()> {
                                for f in chunk {
                                    rustix::fs::statx(
                                        rustix::fs::CWD,
                                        dir.join(f),
                                        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                                        rustix::fs::StatxFlags::BASIC_STATS,
                                    )
                                    .with_context(|| format!("stat {}", f.display()))?;
                                }
                                Ok(())
                            })
                        })
                        .collect();
                    for h in handles {
                        h.join().expect("stat thread")?;
                    }
                    Ok(())
                })?;
                let secs = t0.elapsed().as_secs_f64();
                b.record(
                    &format!("stat-storm-{phase}"),
                    variant,
                    jobs,
                    "stats_per_s",
                    files.len() as f64 / secs,
                    "1/s",
                );
            }
            if let Some(d) = daemon {
                d.stop()?;
            }
            drop(group);
        }
        Ok(())
    }
}
