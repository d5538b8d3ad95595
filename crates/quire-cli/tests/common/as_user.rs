//! Acting as other users, the way a POSIX conformance suite does on any file system: a script
//! of file-system calls run by a child process that has dropped to a given uid, gid and
//! supplementary groups (`setgroups`, `setresgid`, `setresuid`), one outcome per call — `ok`,
//! an errno name, or what a `stat` saw. The same script run on a quire mount and on a plain
//! directory of the backing file system must give the same transcript: the kernel's own answer
//! is the expectation, never a hand-written one.
//!
//! The child is the test binary itself, run again through `/proc/self/exe` (so it needs no
//! permission on the directories the binary lies in) with the script in its environment; a
//! test file that uses this module declares the child's entry point with [`child_main!`].

#![allow(dead_code)]

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The environment variable that carries the script to the child.
pub const SCRIPT_ENV: &str = "QUIRE_AS_USER_SCRIPT";
/// The directory the script's paths are relative to.
pub const ROOT_ENV: &str = "QUIRE_AS_USER_ROOT";
const OUT_PREFIX: &str = "as-user-out: ";

/// Who runs a script.
#[derive(Clone, Debug)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl User {
    /// root, as the test runs.
    pub fn root() -> User {
        User {
            uid: 0,
            gid: 0,
            groups: vec![0],
        }
    }

    pub fn new(uid: u32, gid: u32, groups: &[u32]) -> User {
        User {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }
}

/// Whether this test process can switch users (it runs as root).
pub fn can_switch() -> bool {
    rustix::process::geteuid().is_root()
}

/// Declares the child's entry point in a test file: a test named `as_user_child` that does
/// nothing unless it was started by [`run`].
#[macro_export]
macro_rules! child_main {
    () => {
        #[test]
        fn as_user_child() {
            common::as_user::child();
        }
    };
}

/// Runs `script` (one call a line, see [`call`]) as `user` with paths relative to `root`;
/// the outcome of each line, in order.
pub fn run(root: &Path, user: &User, script: &str) -> Vec<String> {
    let mut cmd = Command::new("/proc/self/exe");
    cmd.args([
        "as_user_child",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(SCRIPT_ENV, script)
    .env(ROOT_ENV, root);
    let (uid, gid, groups) = (user.uid, user.gid, user.groups.clone());
    // SAFETY: the closure runs in the forked child before exec and makes only system calls
    // (no allocation: the groups were copied before the fork).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setresgid(gid, gid, gid) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd
        .output()
        .expect("running the test binary as another user");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the child as {user:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.split_once(OUT_PREFIX).map(|(_, o)| o.to_string()))
        .collect();
    let calls = script.lines().filter(|l| !l.trim().is_empty()).count();
    assert_eq!(lines.len(), calls, "one outcome per call:\n{stdout}");
    lines
}

/// A scenario: scripts run in turn by several users on one directory. Its transcript pairs
/// each call with its outcome, so that two transcripts can be compared line by line.
pub struct Scenario {
    steps: Vec<(User, String)>,
}

impl Scenario {
    pub fn new() -> Scenario {
        Scenario { steps: Vec::new() }
    }

    /// Adds `script`, run as `user`.
    pub fn step(mut self, user: &User, script: &str) -> Scenario {
        self.steps.push((user.clone(), script.to_string()));
        self
    }

    /// Runs every step on `root`: `uid: call -> outcome`, a line per call.
    pub fn transcript(&self, root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for (user, script) in &self.steps {
            let calls: Vec<&str> = script.lines().filter(|l| !l.trim().is_empty()).collect();
            for (call, outcome) in calls.iter().zip(run(root, user, script)) {
                out.push(format!("{}: {} -> {}", user.uid, call.trim(), outcome));
            }
        }
        out
    }

    /// Runs the scenario on a quire mount at `mnt` and on the plain directory `plain` of the
    /// backing file system, asserts the transcripts are the same, and returns the mount's.
    #[track_caller]
    pub fn same_as_kernel(&self, mnt: &Path, plain: &Path) -> Vec<String> {
        let kernel = self.transcript(plain);
        let quire = self.transcript(mnt);
        let diff: Vec<String> = kernel
            .iter()
            .zip(&quire)
            .filter(|(k, q)| k != q)
            .map(|(k, q)| format!("  kernel: {k}\n  quire:  {q}"))
            .collect();
        assert!(
            diff.is_empty(),
            "the mount answers otherwise than the backing file system:\n{}\nwhole transcript \
             on the mount:\n{}",
            diff.join("\n"),
            quire.join("\n")
        );
        quire
    }
}

/// Asserts the outcome of `call` in a transcript (the first line that makes it): the
/// assertions that keep a scenario from passing vacuously.
#[track_caller]
pub fn expect(transcript: &[String], call: &str, want: &str) {
    let got = transcript
        .iter()
        .find_map(|l| {
            let (_, rest) = l.split_once(": ")?;
            let (c, o) = rest.split_once(" -> ")?;
            (c == call).then_some(o)
        })
        .unwrap_or_else(|| panic!("no call `{call}` in\n{}", transcript.join("\n")));
    assert_eq!(
        got,
        want,
        "`{call}`; the transcript:\n{}",
        transcript.join("\n")
    );
}

/// The child's side: runs the script of its environment, if any, and prints each outcome.
pub fn child() {
    let Ok(script) = std::env::var(SCRIPT_ENV) else {
        return;
    };
    let root = PathBuf::from(std::env::var(ROOT_ENV).expect("root set with the script"));
    // Modes as the script gives them, unless it sets a umask itself.
    rustix::process::umask(rustix::fs::Mode::empty());
    let mut marks = HashMap::new();
    for line in script.lines().filter(|l| !l.trim().is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        println!("{OUT_PREFIX}{}", call(&root, &words, &mut marks));
    }
}

fn errno_name(e: rustix::io::Errno) -> String {
    use rustix::io::Errno as E;
    let known = [
        (E::PERM, "EPERM"),
        (E::NOENT, "ENOENT"),
        (E::ACCESS, "EACCES"),
        (E::EXIST, "EEXIST"),
        (E::NOTDIR, "ENOTDIR"),
        (E::ISDIR, "EISDIR"),
        (E::INVAL, "EINVAL"),
        (E::NOTEMPTY, "ENOTEMPTY"),
        (E::XDEV, "EXDEV"),
        (E::BADF, "EBADF"),
        (E::FBIG, "EFBIG"),
        (E::NOSPC, "ENOSPC"),
        (E::ROFS, "EROFS"),
        (E::NXIO, "ENXIO"),
        (E::NOTSUP, "EOPNOTSUPP"),
        (E::LOOP, "ELOOP"),
        (E::BUSY, "EBUSY"),
        (E::AGAIN, "EAGAIN"),
        (E::NOSYS, "ENOSYS"),
        (E::NODATA, "ENODATA"),
    ];
    known.iter().find(|(k, _)| *k == e).map_or_else(
        || format!("errno{}", e.raw_os_error()),
        |(_, n)| n.to_string(),
    )
}

fn octal(s: &str) -> u32 {
    u32::from_str_radix(s, 8).expect("an octal mode")
}

fn id(s: &str) -> Option<u32> {
    (s != "-1").then(|| s.parse().expect("an id"))
}

/// One call: `words[0]` names it, the rest are its arguments (paths relative to the root,
/// modes in octal). Outcome `ok`, an errno name, or for `stat`/`lstat` the owner, group and
/// mode (type and permission bits), and for `ctime`/`mtime` whether the time differs from the
/// one `mark` took.
///
/// | call | what |
/// |---|---|
/// | `create P MODE` | `open(O_CREAT\|O_EXCL\|O_WRONLY, MODE)`, close |
/// | `open_ftruncate P FLAGS MODE LEN` | `open(O_CREAT\|FLAGS, MODE)` (`FLAGS`: `rdwr`, `wronly`, `rdwr_excl`), then `ftruncate(LEN)` on that descriptor |
/// | `open_fallocate P MODE LEN` | `open(O_CREAT\|O_RDWR, MODE)`, `posix_fallocate(0, LEN)` |
/// | `open_write P FLAGS` | `open(FLAGS)` (`wronly`, `rdwr`, `trunc`), write 1 byte |
/// | `read P` | `open(O_RDONLY)`, read 1 byte |
/// | `open P FLAGS` | open (`rdonly`, `wronly`, `rdwr`) and close |
/// | `mkdir P MODE`, `rmdir P`, `unlink P`, `symlink TARGET P`, `link P Q`, `rename P Q` | as named |
/// | `mknod P TYPE MODE MAJOR MINOR` | `TYPE`: `c`, `b`, `p` (fifo), `s` (socket), `f` (file) |
/// | `chmod P MODE`, `chown P UID GID`, `lchown P UID GID`, `truncate P LEN` | as named (`-1` keeps an id) |
/// | `stat P`, `lstat P` | `uid=U gid=G mode=TYPE+PERM` |
/// | `mark P` | remembers P's ctime and mtime |
/// | `ctime P [Q]`, `mtime P [Q]` | `same` or `changed` since `mark P` (or `mark Q`: the file was renamed since) |
/// | `sleep MS` | sleeps |
/// | `umask MODE` | sets the umask (the child starts with 0) |
/// | `pwrite P OFF LEN` | writes LEN bytes of a pattern at OFF (`O_CREAT`, 0644) |
/// | `seek_data P OFF`, `seek_hole P OFF` | `lseek(SEEK_DATA/SEEK_HOLE)`: the offset found |
/// | `fallocate P HOW OFF LEN` | `HOW`: `alloc`, `keep`, `punch`, `zero`, `zero_keep`, `collapse`, `insert` |
/// | `size P`, `sum P` | the length; a checksum of the contents (and the length) |
/// | `copy P Q LEN` | `copy_file_range` of LEN bytes from P's start to Q's (`O_CREAT`): bytes copied |
/// | `flock_nb P`, `setlk_nb P` | an exclusive `flock`, or a `fcntl` write lock, not waiting |
pub fn call(root: &Path, w: &[&str], marks: &mut HashMap<String, (i64, i64)>) -> String {
    use rustix::fs::{self as f, Mode, OFlags, CWD};
    let p = |i: usize| root.join(w[i]);
    let res = |r: rustix::io::Result<()>| match r {
        Ok(()) => "ok".to_string(),
        Err(e) => errno_name(e),
    };
    let open_flags = |s: &str| match s {
        "rdonly" => OFlags::RDONLY,
        "wronly" => OFlags::WRONLY,
        "rdwr" => OFlags::RDWR,
        "rdwr_excl" => OFlags::RDWR | OFlags::EXCL,
        "trunc" => OFlags::WRONLY | OFlags::TRUNC,
        other => panic!("unknown open flags {other}"),
    };
    let times = |path: &Path| -> rustix::io::Result<(i64, i64)> {
        let st = f::statx(
            CWD,
            path,
            f::AtFlags::SYMLINK_NOFOLLOW,
            f::StatxFlags::BASIC_STATS,
        )?;
        Ok((
            st.stx_ctime.tv_sec * 1_000_000_000 + i64::from(st.stx_ctime.tv_nsec),
            st.stx_mtime.tv_sec * 1_000_000_000 + i64::from(st.stx_mtime.tv_nsec),
        ))
    };
    match w[0] {
        "create" => res(f::open(
            p(1),
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
            Mode::from_raw_mode(octal(w[2])),
        )
        .map(drop)),
        "open_ftruncate" => res(open_then(
            &p(1),
            OFlags::CREATE | open_flags(w[2]),
            octal(w[3]),
            |fd| f::ftruncate(fd, w[4].parse().unwrap()),
        )),
        "open_fallocate" => res(open_then(
            &p(1),
            OFlags::CREATE | OFlags::RDWR,
            octal(w[2]),
            |fd| f::fallocate(fd, f::FallocateFlags::empty(), 0, w[3].parse().unwrap()),
        )),
        "open_write" => res(open_then(&p(1), open_flags(w[2]), 0, |fd| {
            rustix::io::write(fd, b"x").map(drop)
        })),
        "read" => res(open_then(&p(1), OFlags::RDONLY, 0, |fd| {
            rustix::io::read(fd, &mut [0u8; 1]).map(drop)
        })),
        "open" => res(f::open(p(1), open_flags(w[2]), Mode::empty()).map(drop)),
        "mkdir" => res(f::mkdir(p(1), Mode::from_raw_mode(octal(w[2])))),
        "rmdir" => res(f::rmdir(p(1))),
        "unlink" => res(f::unlink(p(1))),
        "symlink" => res(f::symlink(w[1], p(2))),
        "link" => res(f::link(p(1), p(2))),
        "rename" => res(f::rename(p(1), p(2))),
        "mknod" => {
            let kind = match w[2] {
                "c" => f::FileType::CharacterDevice,
                "b" => f::FileType::BlockDevice,
                "p" => f::FileType::Fifo,
                "s" => f::FileType::Socket,
                "f" => f::FileType::RegularFile,
                other => panic!("unknown node type {other}"),
            };
            let dev = rustix::fs::makedev(w[4].parse().unwrap(), w[5].parse().unwrap());
            res(f::mknodat(
                CWD,
                p(1),
                kind,
                Mode::from_raw_mode(octal(w[3])),
                dev,
            ))
        }
        "chmod" => res(f::chmod(p(1), Mode::from_raw_mode(octal(w[2])))),
        "chown" | "lchown" => {
            let flags = if w[0] == "lchown" {
                f::AtFlags::SYMLINK_NOFOLLOW
            } else {
                f::AtFlags::empty()
            };
            res(f::chownat(
                CWD,
                p(1),
                id(w[2]).map(rustix::fs::Uid::from_raw),
                id(w[3]).map(rustix::fs::Gid::from_raw),
                flags,
            ))
        }
        "truncate" => res(truncate(&p(1), w[2].parse().unwrap())),
        "stat" | "lstat" => {
            let flags = if w[0] == "lstat" {
                f::AtFlags::SYMLINK_NOFOLLOW
            } else {
                f::AtFlags::empty()
            };
            match f::statx(CWD, p(1), flags, f::StatxFlags::BASIC_STATS) {
                Ok(st) => format!(
                    "uid={} gid={} mode={:o} rdev={}:{}",
                    st.stx_uid, st.stx_gid, st.stx_mode, st.stx_rdev_major, st.stx_rdev_minor
                ),
                Err(e) => errno_name(e),
            }
        }
        "mark" => match times(&p(1)) {
            Ok(t) => {
                marks.insert(w[1].to_string(), t);
                "ok".into()
            }
            Err(e) => errno_name(e),
        },
        "ctime" | "mtime" => match times(&p(1)) {
            Ok((c, m)) => {
                let key = w.get(2).unwrap_or(&w[1]);
                let (mc, mm) = *marks.get(*key).expect("`mark` before `ctime`/`mtime`");
                let same = if w[0] == "ctime" { c == mc } else { m == mm };
                if same { "same" } else { "changed" }.into()
            }
            Err(e) => errno_name(e),
        },
        "pwrite" => {
            let (off, len): (u64, usize) = (w[2].parse().unwrap(), w[3].parse().unwrap());
            let buf: Vec<u8> = (0..len).map(|i| (off as usize + i) as u8 ^ 0x5a).collect();
            res(open_then(
                &p(1),
                OFlags::CREATE | OFlags::WRONLY,
                0o644,
                |fd| rustix::io::pwrite(fd, &buf, off).map(drop),
            ))
        }
        "seek_data" | "seek_hole" => {
            let off = w[2].parse().unwrap();
            let how = if w[0] == "seek_data" {
                f::SeekFrom::Data(off)
            } else {
                f::SeekFrom::Hole(off)
            };
            let mut found = 0;
            match open_then(&p(1), OFlags::RDONLY, 0, |fd| {
                found = f::seek(fd, how)?;
                Ok(())
            }) {
                Ok(()) => found.to_string(),
                Err(e) => errno_name(e),
            }
        }
        "fallocate" => {
            use f::FallocateFlags as F;
            let how = match w[2] {
                "alloc" => F::empty(),
                "keep" => F::KEEP_SIZE,
                "punch" => F::PUNCH_HOLE | F::KEEP_SIZE,
                "zero" => F::ZERO_RANGE,
                "zero_keep" => F::ZERO_RANGE | F::KEEP_SIZE,
                "collapse" => F::COLLAPSE_RANGE,
                "insert" => F::INSERT_RANGE,
                other => panic!("unknown fallocate mode {other}"),
            };
            let (off, len) = (w[3].parse().unwrap(), w[4].parse().unwrap());
            res(open_then(&p(1), OFlags::RDWR, 0, |fd| {
                f::fallocate(fd, how, off, len)
            }))
        }
        "size" | "sum" => match std::fs::read(p(1)) {
            Ok(b) if w[0] == "size" => b.len().to_string(),
            Ok(b) => {
                let h = b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
                    (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
                });
                format!("{}:{h:016x}", b.len())
            }
            Err(e) => errno_name(rustix::io::Errno::from_io_error(&e).unwrap()),
        },
        "copy" => {
            let mut copied = 0;
            let r = open_then(&p(1), OFlags::RDONLY, 0, |from| {
                open_then(&p(2), OFlags::CREATE | OFlags::WRONLY, 0o644, |to| {
                    let (mut a, mut b) = (0u64, 0u64);
                    copied = f::copy_file_range(
                        from,
                        Some(&mut a),
                        to,
                        Some(&mut b),
                        w[3].parse().unwrap(),
                    )?;
                    Ok(())
                })
            });
            match r {
                Ok(()) => copied.to_string(),
                Err(e) => errno_name(e),
            }
        }
        "flock_nb" => res(open_then(&p(1), OFlags::RDONLY, 0, |fd| {
            f::flock(fd, f::FlockOperation::NonBlockingLockExclusive)
        })),
        "setlk_nb" => res(open_then(&p(1), OFlags::RDWR, 0, |fd| {
            f::fcntl_lock(fd, f::FlockOperation::NonBlockingLockExclusive)
        })),
        "umask" => {
            rustix::process::umask(Mode::from_raw_mode(octal(w[1])));
            "ok".into()
        }
        "sleep" => {
            std::thread::sleep(Duration::from_millis(w[1].parse().unwrap()));
            "ok".into()
        }
        other => panic!("unknown call {other}"),
    }
}

/// Opens `path` with `flags` (and `mode` where it creates) and runs `then` on the descriptor.
fn open_then(
    path: &Path,
    flags: rustix::fs::OFlags,
    mode: u32,
    then: impl FnOnce(&std::os::fd::OwnedFd) -> rustix::io::Result<()>,
) -> rustix::io::Result<()> {
    let fd = rustix::fs::open(path, flags, rustix::fs::Mode::from_raw_mode(mode))?;
    then(&fd)
}

/// `truncate(2)` of a path (rustix has only `ftruncate`).
fn truncate(path: &Path, len: i64) -> rustix::io::Result<()> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string; truncate(2) only reads it.
    if unsafe { libc::truncate(c.as_ptr(), len) } == 0 {
        Ok(())
    } else {
        Err(rustix::io::Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ))
    }
}
