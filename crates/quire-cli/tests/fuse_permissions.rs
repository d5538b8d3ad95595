//! The mount behaves like a bind mount of its source even where the source lies under a
//! directory only root may search (a `mktemp -d` parent, mode 0700): permissions are checked
//! from the source's root down, never on the path above it. The daemon acts as the caller for
//! what a request creates (`fsuid`, `fsgid` and groups switched for the one creating call): a
//! backing call made as the caller that resolved a path through that parent — from `/`, or
//! through a `/proc/self/fd` path — would fail with `EACCES` where a bind mount lets the
//! caller in. So every kind of call that runs as the caller, or whose outcome depends on the
//! caller, is made by an unprivileged user through the mount and through a bind mount of a
//! twin source under the same parent, and the outcomes must be the same (the kernel's own
//! answer is the expectation), with the important ones named outright.
//!
//! Switching users and bind-mounting need root: without it the test prints `skipped: why`.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use common::as_user::{self, expect, Scenario, User};
use common::{skip, Mount, Scratch};

child_main!();

/// `<scratch>/private` (0700, root's) holds the mount's source and a twin source; the mount
/// point `<scratch>/mnt` and the twin's bind mount `<scratch>/bind` are reachable by everyone.
struct UnderPrivate {
    mount: Option<Mount>,
    bound: bool,
    dir: Scratch,
}

impl UnderPrivate {
    fn new(tag: &str) -> Option<UnderPrivate> {
        if !as_user::can_switch() {
            skip("acting as other users and bind-mounting need root");
            return None;
        }
        let dir = Scratch::new(tag);
        fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o755)).unwrap();
        for d in ["private", "private/src", "private/twin", "mnt", "bind"] {
            fs::create_dir(dir.path(d)).unwrap();
        }
        fs::set_permissions(dir.path("private"), fs::Permissions::from_mode(0o700)).unwrap();
        let mut me = UnderPrivate {
            mount: None,
            bound: false,
            dir,
        };
        if let Err(e) = rustix::mount::mount_bind(me.dir.path("private/twin"), me.bind()) {
            skip(&format!("bind mount refused: {e}"));
            return None;
        }
        me.bound = true;
        match Mount::start_with(
            &me.dir.path("private/src"),
            &me.mnt(),
            "32M",
            &["--allow-other"],
        ) {
            Ok(m) => me.mount = Some(m),
            Err(why) => {
                skip(&why);
                return None;
            }
        }
        Some(me)
    }

    fn mnt(&self) -> PathBuf {
        self.dir.path("mnt")
    }

    fn bind(&self) -> PathBuf {
        self.dir.path("bind")
    }
}

impl Drop for UnderPrivate {
    fn drop(&mut self) {
        if self.bound {
            let _ = rustix::mount::unmount(self.bind(), rustix::mount::UnmountFlags::DETACH);
        }
        if let Some(m) = self.mount.take() {
            let st = m.unmount();
            if !std::thread::panicking() {
                assert!(st.success(), "the daemon exited with {st}");
            }
        }
    }
}

fn nobody() -> User {
    User::new(65534, 65534, &[65534])
}

fn daemon_user() -> User {
    User::new(1, 1, &[1])
}

#[test]
fn a_source_under_a_private_parent_serves_other_users_as_a_bind_mount_does() {
    let Some(u) = UnderPrivate::new("perm-private") else {
        return;
    };
    // The layout is what it claims: the parent really keeps other users out of the sources.
    let t = as_user::run(
        &u.dir.0,
        &nobody(),
        "stat private/src\nstat private/twin\nstat mnt",
    );
    assert_eq!(
        t[..2],
        ["EACCES", "EACCES"],
        "the parent is searchable: {t:?}"
    );
    assert!(
        t[2].starts_with("uid=0 "),
        "the mount point is reachable: {t:?}"
    );

    let (root, n, d) = (User::root(), nobody(), daemon_user());
    let t = Scenario::new()
        .step(
            &root,
            "mkdir w 0777
             mkdir r 0755
             create r/f 0644
             link r/f r/flink
             mkdir r/d 0755
             mkdir sub 0777
             mkdir sub/d 0700
             mkdir new 0777
             create w/g 0755
             chown w/g 65534 0
             create w/h 0755
             chown w/h 65534 65534",
        )
        .step(
            &n,
            // What a request creates is made as the caller.
            "create w/f 0644
             stat w/f
             mkdir w/d 0755
             stat w/d
             mknod w/p p 0644 0 0
             stat w/p
             mknod w/n f 0600 0 0
             stat w/n
             symlink target w/l
             lstat w/l
             open_ftruncate w/t rdwr 0444 10
             stat w/t
             size w/t
             open_fallocate w/a 0444 4096
             size w/a
             pwrite w/f 0 100
             sum w/f
             mark r/flink
             unlink r/f
             ctime r/flink
             rename r/f w/x
             ctime r/flink
             rename r/d w/d2
             rename sub/d sub/d2
             rename sub/d2 new/d
             chmod w/g 02755
             stat w/g
             chmod w/h 02755
             stat w/h
             chmod w/h 0755
             stat w/h",
        )
        .step(
            &d,
            "unlink w/f
             rmdir w/d
             chmod w/t 0644
             rename w/p w/p2
             create w/e 0640
             stat w/e",
        )
        .same_as_kernel(&u.mnt(), &u.bind());
    expect(&t, "create w/f 0644", "ok");
    expect(&t, "stat w/f", "uid=65534 gid=65534 mode=100644 rdev=0:0");
    expect(&t, "stat w/d", "uid=65534 gid=65534 mode=40755 rdev=0:0");
    expect(&t, "stat w/p", "uid=65534 gid=65534 mode=10644 rdev=0:0");
    expect(&t, "stat w/n", "uid=65534 gid=65534 mode=100600 rdev=0:0");
    expect(&t, "lstat w/l", "uid=65534 gid=65534 mode=120777 rdev=0:0");
    // A descriptor's rights are settled at open: a file made 0444 is cut and allocated
    // through the descriptor that made it.
    expect(&t, "open_ftruncate w/t rdwr 0444 10", "ok");
    expect(&t, "stat w/t", "uid=65534 gid=65534 mode=100444 rdev=0:0");
    expect(&t, "size w/t", "10");
    expect(&t, "open_fallocate w/a 0444 4096", "ok");
    expect(&t, "size w/a", "4096");
    // Removing and renaming in a directory the caller may not write fail, and change nothing.
    expect(&t, "unlink r/f", "EACCES");
    expect(&t, "rename r/f w/x", "EACCES");
    expect(&t, "ctime r/flink", "same");
    expect(&t, "rename r/d w/d2", "EACCES");
    // Write permission on the parent renames a directory in place; moving it to another
    // parent needs write permission on it too (its `..` changes).
    expect(&t, "rename sub/d sub/d2", "ok");
    expect(&t, "rename sub/d2 new/d", "EACCES");
    // chmod by the owner from outside the file's group drops the set-group-id bit; from
    // inside it keeps it.
    expect(&t, "chmod w/g 02755", "ok");
    expect(&t, "stat w/g", "uid=65534 gid=0 mode=100755 rdev=0:0");
    expect(&t, "chmod w/h 02755", "ok");
    expect(&t, "stat w/h", "uid=65534 gid=65534 mode=102755 rdev=0:0");
    expect(&t, "unlink w/f", "ok");
    expect(&t, "chmod w/t 0644", "EPERM");
    expect(&t, "stat w/e", "uid=1 gid=1 mode=100640 rdev=0:0");
}
