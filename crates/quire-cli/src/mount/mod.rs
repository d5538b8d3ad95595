//! `quire mount SRC MNT` and `quire stat MNT`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use quire_fuse::mount::{serve, MountOptions};
use quire_fuse::stats::STATS_XATTR;
use quire_fuse::{probe_max_file_size, FsConfig, Passthrough, QuireFs};
use quire_object::{Backing, BackingConfig, ObjectCache, ObjectFs, ObjectFsConfig};
use std::time::Duration;

use empty::Empty;

// The `fuse` benchmark's comparison `--kind empty` (`passthrough` and `passthrough-cached` are
// quire-fuse's `Passthrough`: quire's file system without its data cache).
mod empty;

/// Which file system to serve (`passthrough*` and `empty` are the benchmark's comparisons).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// quire's page cache and dentry cache.
    Quire,
    /// quire's file system without its data cache: reads and writes straight to the backing
    /// files, direct I/O opens, no cache in the daemon.
    Passthrough,
    /// The same with the kernel's FUSE page cache on.
    PassthroughCached,
    /// Answers from memory without touching data.
    Empty,
}

/// What `quire mount` was asked.
pub struct MountArgs {
    pub src: PathBuf,
    pub mnt: PathBuf,
    pub capacity: usize,
    pub threads: Option<usize>,
    pub foreground: bool,
    pub allow_other: bool,
    pub dev: bool,
    /// The FUSE channel asked for (`None`: the default, [`MountOptions::new`]'s).
    pub channel: Option<quire_fuse::ChannelChoice>,
    /// Turn the kernel's FUSE over io_uring on if it is off (root).
    pub fuse_uring: bool,
    /// The daemon threads' scheduling policy.
    pub sched: quire_fuse::sched::SchedChoice,
    pub kind: Kind,
    /// Object store mounts: the staging directory.
    pub staging: Option<PathBuf>,
    /// Object store mounts: the retry timeout in seconds.
    pub retry_timeout: Option<f64>,
    /// Object store mounts: the disk tier's directory, if any.
    pub disk_cache: Option<PathBuf>,
    /// Object store mounts: the disk tier's size bound.
    pub disk_size: usize,
}

impl MountArgs {
    /// The source as an object store URL, if it is one (`SCHEME://...`).
    fn url(&self) -> Option<&str> {
        self.src.to_str().filter(|s| s.contains("://"))
    }
}

/// Parses a size: a number of bytes with an optional K, M, G or T suffix (powers of 1024,
/// `KiB`/`KB` spellings accepted).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = t[digits.len()..].to_ascii_lowercase();
    let n: usize = digits
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 512M, 2G, 1048576)"))?;
    let mult: usize = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("{s:?}: unknown unit {unit:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

fn check_dirs(a: &MountArgs) -> anyhow::Result<()> {
    for (what, p) in [("source", &a.src), ("mount point", &a.mnt)] {
        if what == "source" && a.url().is_some() {
            continue;
        }
        let md = std::fs::metadata(p).with_context(|| format!("{what} {}", p.display()))?;
        if !md.is_dir() {
            bail!("{what} {} is not a directory", p.display());
        }
    }
    if a.capacity < 1 << 20 || !a.capacity.is_multiple_of(4096) {
        bail!("--capacity must be at least 1 MiB and a multiple of 4 KiB");
    }
    Ok(())
}

/// Mounts and serves until unmounted or signalled; without `--foreground`, in a child process
/// that reports back once the mount is in place (or why it failed).
pub fn mount(a: MountArgs) -> anyhow::Result<()> {
    check_dirs(&a)?;
    if a.foreground {
        return run(&a, false, || {});
    }
    let (r, w) = rustix::pipe::pipe().context("making a pipe")?;
    // SAFETY: the process is single-threaded here (nothing has started a thread yet: the page
    // cache and FUSE threads are made in the child), so the child may go on running Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork failed: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        drop(r);
        let _ = rustix::process::setsid();
        redirect_stdio();
        let mut report = std::fs::File::from(w);
        let mut ok_end = report.try_clone().ok();
        let result = run(&a, true, move || {
            if let Some(r) = ok_end.as_mut() {
                let _ = r.write_all(b"ok");
            }
        });
        if let Err(e) = &result {
            let _ = write!(report, "error: {e:#}");
        }
        std::process::exit(i32::from(result.is_err()));
    }
    drop(w);
    // "ok" once mounted (the daemon keeps its end open while it serves), or an error and the
    // end of the pipe.
    let mut pipe = std::fs::File::from(r);
    let mut first = [0u8; 2];
    let mut got = 0;
    while got < 2 {
        match pipe
            .read(&mut first[got..])
            .context("waiting for the daemon")?
        {
            0 => break,
            n => got += n,
        }
    }
    if &first[..got] == b"ok" {
        println!(
            "mounted {} at {} (daemon pid {pid})",
            a.src.display(),
            a.mnt.display()
        );
        return Ok(());
    }
    let mut msg = String::from_utf8_lossy(&first[..got]).into_owned();
    let _ = pipe.read_to_string(&mut msg);
    let msg = msg.trim_start_matches("error: ").to_string();
    if msg.is_empty() {
        bail!("the daemon exited before mounting");
    }
    bail!("{msg}")
}

fn redirect_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        for fd in 0..=2 {
            // SAFETY: dup2 onto the standard descriptors, which this process owns.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

/// Builds the file system and serves it; `ready` runs once mounted. `detached`: this is the
/// daemon's child process, whose parent exits once it is mounted.
fn run(a: &MountArgs, detached: bool, ready: impl FnOnce()) -> anyhow::Result<()> {
    // Before the page cache starts its threads: they must not take the stop signals.
    quire_fuse::mount::block_stop_signals().context("blocking the stop signals")?;
    // Before the first thread too: every thread inherits the policy. An object store mount
    // keeps the normal policy unless told: its requests wait on the network and the disk tier
    // rather than ping-pong with the program, and `quire bench object --quick --variants quire`
    // measured it no faster at SCHED_IDLE (warm-reread 0.84x, zipf-randread at 4 jobs 0.93x,
    // list 1.10x: medians of 4 and 5 runs, ranges overlapping).
    let sched = match (a.url(), a.sched) {
        (Some(_), quire_fuse::sched::SchedChoice::Auto) => quire_fuse::sched::keep_normal(
            "an object store mount: its requests wait on the store (--sched idle overrides)",
        ),
        _ => quire_fuse::sched::apply(a.sched, detached),
    };
    eprintln!("quire: scheduling: {sched}");
    let mut opts = MountOptions::new(format!("quire:{}", a.src.display()));
    if let Some(t) = a.threads {
        opts.threads = t.max(1);
    }
    opts.allow_other = a.allow_other;
    opts.dev = a.dev;
    if let Some(c) = a.channel {
        opts.channel = c;
    }
    opts.enable_uring = a.fuse_uring;
    if let Some(url) = a.url() {
        return run_object(a, url, opts, ready);
    }
    let src = std::fs::canonicalize(&a.src)?;
    match a.kind {
        Kind::Quire => {
            let mut cfg = FsConfig::new(a.capacity);
            cfg.max_file_size = probe_max_file_size(&src);
            let fs = QuireFs::new(&src, cfg).context("setting up the file system")?;
            let state = fs.state();
            serve(
                fs,
                &a.mnt,
                &opts,
                move || {
                    if let Err(e) = state.sync_all() {
                        eprintln!("quire: writing back before unmounting: {e}");
                    }
                },
                ready,
            )
            .with_context(|| format!("mounting at {}", a.mnt.display()))
        }
        Kind::Passthrough | Kind::PassthroughCached => {
            opts.subtype = "quire-passthrough".into();
            let fs = Passthrough::new(&src, a.kind == Kind::PassthroughCached)
                .context("setting up the file system")?;
            serve(fs, &a.mnt, &opts, || {}, ready)
                .with_context(|| format!("mounting at {}", a.mnt.display()))
        }
        Kind::Empty => {
            opts.subtype = "quire-empty".into();
            let fs = Empty::new(&src)?;
            serve(fs, &a.mnt, &opts, || {}, ready)
                .with_context(|| format!("mounting at {}", a.mnt.display()))
        }
    }
}

/// The retry timeout of an object store mount: `--retry-timeout`, else
/// `QUIRE_OBJECT_RETRY_TIMEOUT`, else the backing's default.
fn retry_timeout(a: &MountArgs) -> anyhow::Result<Option<Duration>> {
    let secs = match a.retry_timeout {
        Some(s) => Some(s),
        None => match std::env::var("QUIRE_OBJECT_RETRY_TIMEOUT") {
            Ok(v) => Some(v.trim().parse::<f64>().map_err(|_| {
                anyhow::anyhow!("QUIRE_OBJECT_RETRY_TIMEOUT={v:?} is not a number of seconds")
            })?),
            Err(_) => None,
        },
    };
    match secs {
        Some(s) if !(s.is_finite() && s >= 0.0) => {
            bail!("the retry timeout must be a number of seconds, not {s}")
        }
        Some(s) => Ok(Some(Duration::from_secs_f64(s))),
        None => Ok(None),
    }
}

/// Makes glibc's malloc serve every allocation of 256 KiB or more with a mapping of its own,
/// unmapped when freed.
///
/// An object mount's large buffers (upload parts of 8 MiB, GET bodies of 1 MiB, tier offers)
/// are short-lived and made on many threads. By default glibc raises its mmap threshold to the
/// size of each such buffer freed (up to 32 MiB), after which they come from its per-thread
/// arenas, whose freed memory stays resident: a 1 GiB upload left some 240 MiB of arena heap
/// beside a 256 MiB cache. Setting the threshold turns that adjustment off.
fn fixed_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt changes only the allocator's tuning (under its own locks), nothing a
    // live allocation depends on.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
    }
}

/// Serves the object store at `url`: checks the bucket first (an error here mounts nothing).
fn run_object(
    a: &MountArgs,
    url: &str,
    mut opts: MountOptions,
    ready: impl FnOnce(),
) -> anyhow::Result<()> {
    fixed_mmap_threshold();
    let mut cfg = BackingConfig::default();
    if let Some(t) = retry_timeout(a)? {
        cfg.retry_timeout = t;
        if t.is_zero() {
            cfg.max_retries = 0;
        }
    }
    // One level of message: object_store's errors already carry their causes.
    let backing = Backing::connect(url, cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
    backing
        .check()
        .map_err(|e| anyhow::anyhow!("{e} (nothing mounted)"))?;
    if let Some(dir) = &a.staging {
        let md = std::fs::metadata(dir).with_context(|| format!("staging {}", dir.display()))?;
        if !md.is_dir() {
            bail!("staging {} is not a directory", dir.display());
        }
    }
    // --capacity pays for what grows with the cache: the frames get what their descriptors and
    // the disk tier's queue leave of it.
    let tier = a.disk_cache.is_some();
    let frames =
        quire_object::budget::frame_pool_within(a.capacity as u64, tier).with_context(|| {
            format!(
                "--capacity {} leaves less than 1 MiB of frames beside their descriptors{}",
                a.capacity,
                if tier {
                    " and the disk tier's queue"
                } else {
                    ""
                }
            )
        })?;
    let mut config = quire::CacheConfig::new(frames);
    config.readahead_max = std::env::var("QUIRE_OBJECT_READAHEAD")
        .ok()
        .and_then(|v| parse_size(&v).ok())
        .unwrap_or(quire_object::READAHEAD_MAX);
    let cache = quire::PageCache::new(config).context("setting up the page cache")?;
    let mut cache = ObjectCache::new(cache, backing, a.staging.clone());
    if let Some(dir) = &a.disk_cache {
        let tier = quire_object::DiskTier::open(dir, a.disk_size as u64)
            .map_err(|e| anyhow::anyhow!("{e} (nothing mounted)"))?;
        cache = cache.with_tier(tier);
    }
    let fs = ObjectFs::new(cache, ObjectFsConfig::default());
    let sync = fs.syncer();
    opts.subtype = "quire-object".into();
    serve(
        quire_fuse::Fuse::new(fs),
        &a.mnt,
        &opts,
        move || {
            if let Err(e) = sync.sync_all() {
                eprintln!("quire: uploading before unmounting: {e}");
            }
        },
        ready,
    )
    .with_context(|| format!("mounting at {}", a.mnt.display()))
}

/// Reads the live counters of the quire mount at `mnt`.
pub fn read_stats(mnt: &Path) -> anyhow::Result<String> {
    let mut buf = vec![0u8; 1 << 16];
    match rustix::fs::getxattr(mnt, STATS_XATTR, &mut buf[..]) {
        Ok(n) => Ok(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(rustix::io::Errno::NODATA | rustix::io::Errno::OPNOTSUPP) => {
            bail!("{} is not the root of a quire mount", mnt.display())
        }
        Err(e) => Err(e).with_context(|| format!("reading the counters of {}", mnt.display())),
    }
}

/// `quire stat MNT`.
pub fn stat(mnt: &Path) -> anyhow::Result<()> {
    print!("{}", read_stats(mnt)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("99999999999999999999T").is_err());
    }
}
