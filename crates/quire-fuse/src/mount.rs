//! Mounting and serving: mount a file system, serve it on several threads until it is unmounted
//! or the daemon is told to stop (SIGINT, SIGTERM, SIGHUP: write everything back, then unmount),
//! and the limits of the backing file system.

use std::io;
use std::path::Path;

use std::sync::Arc;

use fuser::{Config, MountOption, SessionACL};

use crate::serve::{Fuse, Serve};

/// The kernel's switch for FUSE over io_uring (root may set it).
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Which channel the kernel's requests come through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelChoice {
    /// io_uring where the kernel offers it, else the classic channel (and the reason is shown).
    Auto,
    /// The classic `/dev/fuse` reads and writes.
    Classic,
    /// io_uring or no mount.
    Uring,
}

impl std::str::FromStr for ChannelChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<ChannelChoice, String> {
        match s {
            "auto" => Ok(ChannelChoice::Auto),
            "classic" => Ok(ChannelChoice::Classic),
            "uring" | "io_uring" => Ok(ChannelChoice::Uring),
            _ => Err(format!("unknown FUSE channel {s:?} (auto, classic, uring)")),
        }
    }
}

/// How a file system is mounted.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Threads serving requests (each with its own `/dev/fuse` descriptor).
    pub threads: usize,
    /// Let other users than the one mounting use the mount (`allow_other`).
    pub allow_other: bool,
    /// Let device nodes in the mount be opened as devices (`dev`). Off by default: the mount
    /// is `nodev`, as every FUSE mount of an ordinary user is, so a device node made through it
    /// (which the daemon makes where the caller has `CAP_MKNOD`) is inert here.
    pub dev: bool,
    /// The source shown in `/proc/mounts`.
    pub fsname: String,
    /// The subtype (`fuse.SUBTYPE` in `/proc/mounts`).
    pub subtype: String,
    /// The channel: [`ChannelChoice::Auto`] unless `QUIRE_FUSE_CHANNEL` says otherwise;
    /// `QUIRE_REQUIRE_FUSE_URING=1` makes it [`ChannelChoice::Uring`].
    pub channel: ChannelChoice,
    /// Turn the kernel's `enable_uring` switch on if it is off (root only; said on stderr).
    pub enable_uring: bool,
    /// Entries per io_uring queue: requests one CPU's queue holds at once (each with a payload
    /// buffer of the largest request, 1 MiB).
    pub ring_entries: usize,
}

impl MountOptions {
    /// Defaults: as many threads as CPUs (at least 2), only the mounting user, `quire`.
    pub fn new(fsname: impl Into<String>) -> MountOptions {
        MountOptions {
            threads: std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .max(2),
            allow_other: false,
            dev: false,
            fsname: fsname.into(),
            subtype: "quire".into(),
            channel: if std::env::var("QUIRE_REQUIRE_FUSE_URING").is_ok_and(|v| v == "1") {
                ChannelChoice::Uring
            } else {
                std::env::var("QUIRE_FUSE_CHANNEL")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(ChannelChoice::Auto)
            },
            enable_uring: false,
            ring_entries: 4,
        }
    }

    /// fuser's configuration: permissions checked by the kernel (`default_permissions`),
    /// `nosuid`, `nodev` unless [`MountOptions::dev`], `allow_other` only on request, one
    /// cloned descriptor per thread.
    pub fn fuser_config(&self) -> Config {
        let mut c = Config::default();
        c.mount_options = vec![
            MountOption::FSName(self.fsname.clone()),
            MountOption::Subtype(self.subtype.clone()),
            MountOption::DefaultPermissions,
            MountOption::RW,
            MountOption::NoSuid,
            if self.dev {
                MountOption::Dev
            } else {
                MountOption::NoDev
            },
        ];
        c.acl = if self.allow_other {
            SessionACL::All
        } else {
            SessionACL::Owner
        };
        c.n_threads = Some(self.threads.max(1));
        c.clone_fd = self.threads > 1;
        c
    }
}

/// Raises the limit on open descriptors (cached directories and open files each hold one): to
/// the system's maximum (`fs.nr_open`) where the daemon may (root), else the soft limit to the
/// hard one.
pub fn raise_nofile_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    if let Some(n) = nr_open {
        let all = Rlimit {
            current: Some(n),
            maximum: Some(n),
        };
        if setrlimit(Resource::Nofile, all).is_ok() {
            return;
        }
    }
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
}

/// The signals that stop the daemon cleanly.
fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread, so that every thread it starts from
/// now on inherits the mask and only [`serve`]'s signal thread receives them. Call it before
/// anything starts a thread (the page cache starts its flusher and readahead threads when it is
/// made): a stop signal delivered to a thread that does not block it would kill the daemon
/// without writing back.
pub fn block_stop_signals() -> io::Result<()> {
    let set = stop_signals();
    // SAFETY: a valid set, and no previous mask wanted back.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Mounts `fs` at `mountpoint` and serves it until it is unmounted; on SIGINT, SIGTERM or
/// SIGHUP, runs `on_stop` (write everything back) and unmounts (lazily if the mount is busy,
/// so the daemon serves what is still open and exits when the last user goes). `ready` runs
/// once the mount is in place. The stop signals must have been blocked with
/// [`block_stop_signals`] before any thread was started.
pub fn serve<S: Serve>(
    fs: Fuse<S>,
    mountpoint: &Path,
    opts: &MountOptions,
    on_stop: impl FnOnce() + Send + 'static,
    ready: impl FnOnce(),
) -> io::Result<()> {
    raise_nofile_limit();
    // The kernel applied the caller's umask to the mode of every request that creates a
    // file; the daemon's own must not be applied a second time by the backing calls.
    rustix::process::umask(rustix::fs::Mode::empty());
    block_stop_signals()?;
    let set = stop_signals();
    let choice = choose_channel(opts);
    if let Err(why) = &choice {
        if opts.channel == ChannelChoice::Uring {
            return Err(io::Error::other(format!("no io_uring channel: {why}")));
        }
    }
    let slot = fs.ring_slot();
    match choice {
        Ok(why) => slot.arm(crate::serve::adapter::RingWant {
            entries: opts.ring_entries.max(1),
            required: opts.channel == ChannelChoice::Uring,
            why,
        }),
        Err(why) => channel_chosen(crate::stats::Channel {
            why,
            ..Default::default()
        }),
    }
    // fuser mounts and answers INIT here; the ring's queues (started at INIT) wait for the
    // session's descriptor.
    let session = fuser::Session::new(fs, mountpoint, &opts.fuser_config());
    let mut session = match session {
        Ok(s) => s,
        Err(e) => {
            slot.fuse.set(None);
            return Err(e);
        }
    };
    {
        use std::os::fd::AsFd;
        match session.as_fd().try_clone_to_owned() {
            Ok(fd) => slot.fuse.set(Some(Arc::new(fd))),
            Err(e) => {
                slot.fuse.set(None);
                return Err(e);
            }
        }
    }
    let mut unmounter = session.unmount_callable();
    let mnt = mountpoint.to_path_buf();
    std::thread::Builder::new()
        .name("quire-signals".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: waits for one of the blocked signals of a valid set.
            let rc = unsafe { libc::sigwait(&set, &mut sig) };
            if rc != 0 {
                return;
            }
            on_stop();
            if unmounter.unmount().is_err() {
                // Busy: detach it; the session ends when its last user goes.
                let _ = rustix::mount::unmount(&mnt, rustix::mount::UnmountFlags::DETACH);
            }
        })?;
    ready();
    session.run()
}

/// Whether to ask for FUSE over io_uring: `Ok(why)`, or `Err(why not)`.
fn choose_channel(opts: &MountOptions) -> Result<String, String> {
    if opts.channel == ChannelChoice::Classic {
        return Err("asked for (--channel classic or QUIRE_FUSE_CHANNEL=classic)".into());
    }
    let on = match std::fs::read_to_string(ENABLE_URING) {
        Ok(v) => v.trim() == "Y" || v.trim() == "1",
        Err(_) => {
            return Err(format!(
                "the kernel has no FUSE over io_uring ({ENABLE_URING} is missing: \
                 Linux 6.14+ with CONFIG_FUSE_IO_URING)"
            ))
        }
    };
    let mut why = "the kernel offers it (enable_uring is on)".to_string();
    if !on {
        if !opts.enable_uring {
            return Err(format!(
                "{ENABLE_URING} is off (as root, --fuse-uring turns it on)"
            ));
        }
        std::fs::write(ENABLE_URING, "Y")
            .map_err(|e| format!("{ENABLE_URING} is off and could not be turned on: {e}"))?;
        eprintln!("quire: turned FUSE over io_uring on: wrote Y to {ENABLE_URING} (--fuse-uring)");
        why = format!("--fuse-uring turned {ENABLE_URING} on");
    }
    crate::ring::probe().map_err(|e| format!("io_uring is refused here: {e}"))?;
    Ok(why)
}

/// Records and logs the mount's channel.
pub(crate) fn channel_chosen(c: crate::stats::Channel) {
    eprintln!("quire: FUSE channel: {c}");
    crate::stats::set_channel(c);
}

/// Watches the rings' registration for a while: if the kernel refuses an entry it serves
/// everything through `/dev/fuse` (the classic threads are there), and that is recorded.
pub(crate) fn watch_ring(shared: Arc<crate::ring::Shared>) {
    let _ = std::thread::Builder::new()
        .name("quire-ring-watch".into())
        .spawn(move || {
            use std::sync::atomic::Ordering::Relaxed;
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_secs(15) {
                if shared.refused.load(Relaxed) > 0 {
                    let why = shared.why.lock().clone().unwrap_or_default();
                    let mut c = crate::stats::channel().unwrap_or_default();
                    c.uring = false;
                    c.why = format!("the kernel refused the rings ({why})");
                    channel_chosen(c);
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
}

/// The largest file length the file system of `dir` accepts, found by cutting an unnamed
/// temporary file (`O_TMPFILE`, never visible, gone when closed) to ever larger lengths, as a
/// whole number of pages and at most quire's limit. quire's own limit if the file system has no
/// `O_TMPFILE`.
pub fn probe_max_file_size(dir: &Path) -> u64 {
    use rustix::fs::{ftruncate, openat, Mode, OFlags, CWD};
    let max = quire::filemap::MAX_FILE_SIZE;
    let Ok(fd) = openat(
        CWD,
        dir,
        OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    ) else {
        return max;
    };
    if ftruncate(&fd, max).is_ok() {
        return max;
    }
    // Invariant: lo is accepted, hi is not.
    let (mut lo, mut hi) = (0u64, max);
    while hi - lo > 4096 {
        let mid = lo + (hi - lo) / 2;
        if ftruncate(&fd, mid).is_ok() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let _ = ftruncate(&fd, 0);
    lo & !4095
}

/// Whether FUSE can be used here: `/dev/fuse` opens for reading and writing. (Mounting may still
/// be refused, e.g. without privileges and without `fusermount3`.)
pub fn fuse_available() -> Result<(), String> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("/dev/fuse cannot be opened: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_finds_a_page_aligned_limit_no_larger_than_quires() {
        let dir = std::env::temp_dir();
        let m = probe_max_file_size(&dir);
        assert_eq!(m % 4096, 0);
        assert!(m <= quire::filemap::MAX_FILE_SIZE);
        assert!(
            m >= 1 << 30,
            "every file system here takes 1 GiB files: {m}"
        );
        // A file that long can be made there, one page longer cannot (unless at quire's limit).
        let p = dir.join(format!("quire-probe-{}", std::process::id()));
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(m).unwrap();
        if m < quire::filemap::MAX_FILE_SIZE {
            assert!(f.set_len(m + 8192).is_err(), "the limit is tight");
        }
        drop(f);
        std::fs::remove_file(&p).unwrap();
    }
}
