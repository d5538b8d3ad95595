//! Mounting `quire mount` over a temporary directory for the real-program tests, and the checks
//! they share. A test that cannot run here (no FUSE, a program missing) prints
//! `skipped: why` and passes; it never fakes a result.

#![allow(dead_code)]

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub mod as_user;

pub const QUIRE: &str = env!("CARGO_BIN_EXE_quire");

/// A fresh directory on a disk file system (`/var/tmp` if it is one), removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let base = if Path::new("/var/tmp").is_dir() {
            PathBuf::from("/var/tmp")
        } else {
            std::env::temp_dir()
        };
        // Tests of one binary run in parallel threads of one process, and two of them may use
        // one tag (each S3 server's root, say): a counter keeps their directories apart.
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = base.join(format!("quire-fusetest-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Whether `prog` runs here.
pub fn have(prog: &str) -> bool {
    Command::new(prog)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Prints why a test is skipped (the test then returns and passes).
pub fn skip(why: &str) {
    eprintln!("skipped: {why}");
}

/// Whether `mnt` is a FUSE mount point now.
pub fn is_mounted(mnt: &Path) -> bool {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = mnt.to_string_lossy();
    info.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-");
        f.len() > 4
            && f[4] == want
            && sep.is_some_and(|i| f.get(i + 1).is_some_and(|t| t.starts_with("fuse")))
    })
}

/// A `quire mount --foreground` daemon over `src` at `mnt`.
pub struct Mount {
    pub src: PathBuf,
    pub mnt: PathBuf,
    pub child: Option<Child>,
    pub capacity: String,
}

impl Mount {
    /// Mounts `src` at `mnt` (both existing directories) with a budget of `capacity`; `Err`
    /// with the reason if FUSE cannot be used here.
    pub fn start(src: &Path, mnt: &Path, capacity: &str) -> Result<Mount, String> {
        Self::start_with(src, mnt, capacity, &[])
    }

    pub fn start_with(
        src: &Path,
        mnt: &Path,
        capacity: &str,
        extra: &[&str],
    ) -> Result<Mount, String> {
        if let Err(e) = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
        {
            return Err(format!("/dev/fuse cannot be opened: {e}"));
        }
        let mnt = fs::canonicalize(mnt).unwrap();
        let mut child = Command::new(QUIRE)
            .arg("mount")
            .arg("--foreground")
            .arg("--capacity")
            .arg(capacity)
            .args(extra)
            .arg(src)
            .arg(&mnt)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting quire: {e}"))?;
        let t0 = Instant::now();
        while !is_mounted(&mnt) {
            if let Ok(Some(st)) = child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return Err(format!(
                    "quire mount exited ({st}) before mounting: {}",
                    err.trim()
                ));
            }
            if t0.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                return Err("quire mount did not mount within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Mount {
            src: src.to_path_buf(),
            mnt,
            child: Some(child),
            capacity: capacity.to_string(),
        })
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Unmounts (`umount`, as a user would) and waits for the daemon to exit; returns its
    /// status. Panics if it does not exit in time.
    pub fn unmount(mut self) -> ExitStatus {
        let st = Command::new("umount")
            .arg(&self.mnt)
            .status()
            .expect("umount runs");
        if !st.success() {
            // Fall back to the system call (umount(8) missing or refusing).
            rustix::mount::unmount(&self.mnt, rustix::mount::UnmountFlags::empty())
                .expect("unmounting");
        }
        self.wait()
    }

    /// Waits for the daemon to exit (after an unmount or a signal).
    pub fn wait(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let t0 = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                if !err.trim().is_empty() {
                    eprintln!("quire mount said: {}", err.trim());
                }
                return st;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the daemon did not exit within 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Mounts the same source again.
    pub fn remount(src: &Path, mnt: &Path, capacity: &str) -> Mount {
        Mount::start(src, mnt, capacity).expect("mounted before, mounts again")
    }

    /// The daemon's resident memory in bytes.
    pub fn rss(&self) -> u64 {
        let s = fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // Also after a failed test whose daemon already exited: never leave a mount behind.
        if self.child.is_some() || is_mounted(&self.mnt) {
            let _ = rustix::mount::unmount(&self.mnt, rustix::mount::UnmountFlags::DETACH);
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A source and a mount point under one scratch directory, mounted. (The mount is declared
/// first: it is dropped — unmounted — before the directory is removed.)
pub struct Setup {
    pub mount: Option<Mount>,
    pub dir: Scratch,
}

impl Setup {
    /// Mounts `<scratch>/src` at `<scratch>/mnt`; `None` (after printing why) if FUSE is not
    /// available here.
    pub fn new(tag: &str, capacity: &str) -> Option<Setup> {
        let dir = Scratch::new(tag);
        fs::create_dir(dir.path("src")).unwrap();
        fs::create_dir(dir.path("mnt")).unwrap();
        match Mount::start(&dir.path("src"), &dir.path("mnt"), capacity) {
            Ok(m) => Some(Setup {
                mount: Some(m),
                dir,
            }),
            Err(why) => {
                skip(&why);
                None
            }
        }
    }

    /// [`Setup::new`] with more `quire mount` arguments (`--kind`, `--allow-other`...).
    pub fn with(tag: &str, capacity: &str, extra: &[&str]) -> Option<Setup> {
        let dir = Scratch::new(tag);
        fs::create_dir(dir.path("src")).unwrap();
        fs::create_dir(dir.path("mnt")).unwrap();
        match Mount::start_with(&dir.path("src"), &dir.path("mnt"), capacity, extra) {
            Ok(m) => Some(Setup {
                mount: Some(m),
                dir,
            }),
            Err(why) => {
                skip(&why);
                None
            }
        }
    }

    pub fn src(&self, rel: &str) -> PathBuf {
        self.dir.path("src").join(rel)
    }

    pub fn mnt(&self, rel: &str) -> PathBuf {
        self.dir.path("mnt").join(rel)
    }

    pub fn m(&self) -> &Mount {
        self.mount.as_ref().expect("mounted")
    }

    /// Unmounts and checks that the daemon exited cleanly.
    pub fn unmount(&mut self) {
        let st = self.mount.take().expect("mounted").unmount();
        assert!(st.success(), "the daemon exited with {st}");
        assert!(!is_mounted(&self.dir.path("mnt")));
    }

    /// Mounts again after [`Setup::unmount`].
    pub fn remount(&mut self, capacity: &str) {
        self.mount = Some(Mount::remount(
            &self.dir.path("src"),
            &self.dir.path("mnt"),
            capacity,
        ));
    }
}

/// Runs a command (through `sh -c`) and asserts it succeeds; returns its stdout.
#[track_caller]
pub fn sh(cmd: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "`{cmd}` failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Deterministic pseudo-random bytes.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(n);
    out
}
