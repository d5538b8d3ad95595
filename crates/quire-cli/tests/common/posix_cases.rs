// The POSIX conformance scenarios (see `fuse_posix.rs`), included by each test file that runs
// them on a kind of mount: `KIND`, the `quire mount` arguments that choose it, is the
// including file's. One copy of the scenarios, so that the mounts are held to the same checks.

/// A scratch directory's tag for this kind of mount (one test process may run several kinds).
fn kind_tag(tag: &str) -> String {
    format!("{tag}{}", KIND.concat())
}

/// A mount with other users allowed, and a plain directory beside its source on the same file
/// system.
struct Both {
    mount: Option<Mount>,
    dir: Scratch,
}

impl Both {
    fn new(tag: &str, extra: &[&str]) -> Option<Both> {
        if !as_user::can_switch() {
            skip("acting as other users needs root");
            return None;
        }
        let dir = Scratch::new(&kind_tag(tag));
        for d in ["src", "mnt", "plain"] {
            fs::create_dir(dir.path(d)).unwrap();
        }
        let mut args = vec!["--allow-other"];
        args.extend_from_slice(KIND);
        args.extend_from_slice(extra);
        match Mount::start_with(&dir.path("src"), &dir.path("mnt"), "32M", &args) {
            Ok(m) => Some(Both {
                mount: Some(m),
                dir,
            }),
            Err(why) => {
                skip(&why);
                None
            }
        }
    }

    fn mnt(&self) -> PathBuf {
        self.dir.path("mnt")
    }

    fn plain(&self) -> PathBuf {
        self.dir.path("plain")
    }

    fn check(&self, s: &Scenario) -> Vec<String> {
        s.same_as_kernel(&self.mnt(), &self.plain())
    }
}

impl Drop for Both {
    fn drop(&mut self) {
        if let Some(m) = self.mount.take() {
            let st = m.unmount();
            if !std::thread::panicking() {
                assert!(st.success(), "the daemon exited with {st}");
            }
        }
    }
}

fn alice() -> User {
    User::new(1001, 1001, &[1001, 1002])
}

fn bob() -> User {
    User::new(1003, 1003, &[1003])
}

#[test]
fn device_nodes_are_made_where_the_caller_may_and_are_inert_on_the_mount() {
    let Some(b) = Both::new("posix-dev", &[]) else {
        return;
    };
    let root = User::root();
    let t = b.check(
        &Scenario::new()
            .step(
                &root,
                "mkdir w 0777
                 mknod w/null c 0666 1 3
                 mknod w/blk b 0600 7 200
                 mknod w/fifo p 0644 0 0
                 mknod w/sock s 0644 0 0
                 mknod w/file f 0644 0 0
                 stat w/null
                 stat w/blk
                 stat w/fifo
                 stat w/sock
                 stat w/file",
            )
            .step(
                &alice(),
                "mknod w/anull c 0666 1 3
                 mknod w/ablk b 0666 7 200
                 mknod w/afifo p 0644 0 0
                 stat w/afifo
                 rename w/null w/null2
                 unlink w/blk",
            )
            .step(&root, "rename w/null w/null2\nunlink w/blk\nunlink w/null2"),
    );
    expect(&t, "mknod w/null c 0666 1 3", "ok");
    expect(&t, "stat w/null", "uid=0 gid=0 mode=20666 rdev=1:3");
    expect(&t, "stat w/blk", "uid=0 gid=0 mode=60600 rdev=7:200");
    expect(&t, "mknod w/anull c 0666 1 3", "EPERM");
    expect(&t, "stat w/afifo", "uid=1001 gid=1001 mode=10644 rdev=0:0");

    // The mount is nodev: a device node made through it opens as nothing; the same node in the
    // backing directory is the device.
    fs::create_dir_all(b.mnt().join("d")).unwrap();
    let t = as_user::run(&b.mnt(), &root, "mknod d/zero c 0666 1 5\nread d/zero");
    assert_eq!(
        t,
        ["ok", "EACCES"],
        "a device node on a nodev mount does not open"
    );
    let t = as_user::run(&b.dir.path("src"), &root, "read d/zero");
    assert_eq!(
        t,
        ["ok"],
        "the node made through the mount is the device behind it"
    );
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.contains(&*b.mnt().to_string_lossy()))
        .expect("the mount is listed");
    assert!(line.contains("nodev") && line.contains("nosuid"), "{line}");
}

#[test]
fn with_dev_device_nodes_open_as_devices() {
    let Some(b) = Both::new("posix-devopt", &["--dev"]) else {
        return;
    };
    let t = as_user::run(&b.mnt(), &User::root(), "mknod zero c 0666 1 5\nread zero");
    assert_eq!(t, ["ok", "ok"]);
}

#[test]
fn what_a_user_creates_is_the_users_with_the_kernels_group_rules() {
    let Some(b) = Both::new("posix-owner", &[]) else {
        return;
    };
    let (root, a) = (User::root(), alice());
    let t = b.check(
        &Scenario::new()
            .step(
                &root,
                "mkdir w 0777
                 mkdir sg 0777
                 chown sg 0 1003
                 chmod sg 02777
                 mkdir sg2 0777
                 chown sg2 0 1002
                 chmod sg2 02777
                 create w/rootfile 0644",
            )
            .step(
                &a,
                "create w/f 0640
                 stat w/f
                 mkdir w/d 0750
                 stat w/d
                 mknod w/p p 0600 0 0
                 stat w/p
                 symlink target w/l
                 lstat w/l
                 link w/f w/f2
                 stat w/f2
                 link w/rootfile w/rootlink
                 stat w/rootfile
                 create w/suid 04755
                 stat w/suid
                 create w/sgid 02755
                 stat w/sgid
                 create sg/f 0644
                 stat sg/f
                 mkdir sg/d 0755
                 stat sg/d
                 create sg/sgid 02755
                 stat sg/sgid
                 mkdir sg/sgd 02755
                 stat sg/sgd
                 create sg2/sgid 02755
                 stat sg2/sgid
                 mknod sg/p p 02644 0 0
                 stat sg/p
                 open_ftruncate w/o rdwr 0644 0
                 stat w/o",
            ),
    );
    expect(&t, "stat w/f", "uid=1001 gid=1001 mode=100640 rdev=0:0");
    expect(&t, "stat w/d", "uid=1001 gid=1001 mode=40750 rdev=0:0");
    expect(&t, "lstat w/l", "uid=1001 gid=1001 mode=120777 rdev=0:0");
    // A hard link makes no file: the linked file keeps its owner.
    expect(&t, "stat w/rootfile", "uid=0 gid=0 mode=100644 rdev=0:0");
    expect(&t, "stat w/suid", "uid=1001 gid=1001 mode=104755 rdev=0:0");
    // The directory's group, and its set-group-id bit on a new directory.
    expect(&t, "stat sg/f", "uid=1001 gid=1003 mode=100644 rdev=0:0");
    expect(&t, "stat sg/d", "uid=1001 gid=1003 mode=42755 rdev=0:0");
    // Not in the group the file gets: its set-group-id bit goes; in it: it stays.
    expect(&t, "stat sg/sgid", "uid=1001 gid=1003 mode=100755 rdev=0:0");
    expect(
        &t,
        "stat sg2/sgid",
        "uid=1001 gid=1002 mode=102755 rdev=0:0",
    );
}

#[test]
fn unlink_and_rename_change_times_as_the_kernel_does_and_failures_change_none() {
    let Some(b) = Both::new("posix-times", &[]) else {
        return;
    };
    let (root, a) = (User::root(), alice());
    let t = b.check(
        &Scenario::new()
            .step(
                &root,
                "mkdir ro 0755
                 create ro/f 0666
                 link ro/f ro/f2
                 mkdir w 0777
                 mkdir w2 0777
                 create w/x 0666
                 link w/x w/x2
                 create w/y 0666
                 mkdir w/dir 0777",
            )
            .step(
                &a,
                "mark ro/f
                 mark ro
                 sleep 30
                 unlink ro/f2
                 ctime ro/f
                 ctime ro
                 mtime ro
                 rename ro/f ro/g
                 ctime ro/f
                 ctime ro
                 unlink ro/missing
                 mtime ro
                 mark w/x
                 mark w
                 sleep 30
                 unlink w/x2
                 ctime w/x
                 ctime w
                 mtime w
                 mark w/y
                 mark w
                 mark w2
                 sleep 30
                 rename w/y w2/y
                 ctime w2/y w/y
                 ctime w
                 mtime w
                 ctime w2
                 mtime w2
                 mark w/dir
                 mark w/x
                 sleep 30
                 rename w/dir w/x
                 ctime w/dir
                 ctime w/x
                 rename w/x w/xdir
                 ctime w/xdir w/x
                 rename w/dir w/x
                 ctime w/x w/dir
                 mark w2/y
                 sleep 30
                 chown w2/y -1 -1
                 ctime w2/y
                 chown w2/y 1001 -1
                 ctime w2/y",
            ),
    );
    expect(&t, "unlink ro/f2", "EACCES");
    expect(&t, "ctime ro/f", "same");
    expect(&t, "ctime w/x", "changed");
    expect(&t, "mtime w", "changed");
    expect(&t, "ctime w2/y w/y", "changed");
    expect(&t, "rename w/dir w/x", "ENOTDIR");
    // chown(f, -1, -1) changes nothing but ctime (on Linux; POSIX lets it keep it).
    expect(&t, "chown w2/y -1 -1", "ok");
    expect(&t, "ctime w2/y", "changed");
}

#[test]
fn set_id_bits_go_as_the_kernel_takes_them_on_chmod_write_and_truncate() {
    let Some(b) = Both::new("posix-setid", &[]) else {
        return;
    };
    let (root, a) = (User::root(), alice());
    let t = b.check(
        &Scenario::new()
            .step(
                &root,
                "mkdir w 0777
                 create w/other 0644
                 chown w/other 1001 1003
                 create w/rootsuid 06777
                 create w/rootw 06777
                 create w/rootkeep 02767",
            )
            .step(
                &a,
                "create w/f 0644
                 chmod w/f 02755
                 stat w/f
                 chown w/f -1 1002
                 chmod w/f 02755
                 stat w/f
                 chmod w/other 02755
                 stat w/other
                 chmod w/f 06755
                 open_write w/f wronly
                 stat w/f
                 chmod w/f 06755
                 truncate w/f 100
                 stat w/f
                 chmod w/f 06755
                 open_write w/f trunc
                 stat w/f
                 open_write w/rootw wronly
                 stat w/rootw
                 open_write w/rootkeep wronly
                 stat w/rootkeep
                 chmod w/f 06755
                 open_ftruncate w/f wronly 0 10
                 stat w/f",
            )
            .step(
                &root,
                "open_write w/rootsuid wronly
                 stat w/rootsuid",
            ),
    );
    expect(&t, "chmod w/other 02755", "ok");
    expect(&t, "stat w/other", "uid=1001 gid=1003 mode=100755 rdev=0:0");
    expect(&t, "stat w/rootw", "uid=0 gid=0 mode=100777 rdev=0:0");
    expect(&t, "stat w/rootsuid", "uid=0 gid=0 mode=106777 rdev=0:0");
}

#[test]
fn a_descriptor_opened_for_writing_keeps_its_right_to_write() {
    let Some(b) = Both::new("posix-open", &[]) else {
        return;
    };
    let t = b.check(&Scenario::new().step(&User::root(), "mkdir w 0777").step(
        &alice(),
        "open_ftruncate w/a rdwr_excl 0444 1000
             stat w/a
             open_ftruncate w/b rdwr_excl 0 5
             open_fallocate w/c 0444 8192
             open_fallocate w/d 0 4096
             open w/a wronly
             open_ftruncate w/a rdwr 0444 0
             truncate w/a 0
             chmod w/a 0644
             truncate w/a 0",
    ));
    expect(&t, "open_ftruncate w/a rdwr_excl 0444 1000", "ok");
    expect(&t, "open_fallocate w/c 0444 8192", "ok");
    expect(&t, "open w/a wronly", "EACCES");
    expect(&t, "truncate w/a 0", "EACCES");
}

#[test]
fn moving_a_directory_to_another_parent_needs_write_permission_on_it() {
    let Some(b) = Both::new("posix-mvdir", &[]) else {
        return;
    };
    let t = b.check(
        &Scenario::new()
            .step(
                &User::root(),
                "mkdir p1 0777
                 mkdir p2 0777
                 mkdir p1/rootdir 0755
                 mkdir p1/open 0777
                 create p1/rootfile 0644",
            )
            .step(
                &alice(),
                "rename p1/rootdir p2/rootdir
                 rename p1/rootdir p1/samedir
                 rename p1/open p2/open
                 rename p1/rootfile p2/rootfile",
            ),
    );
    expect(&t, "rename p1/rootdir p2/rootdir", "EACCES");
    expect(&t, "rename p1/rootdir p1/samedir", "ok");
    expect(&t, "rename p1/open p2/open", "ok");
}

#[test]
fn users_cannot_reach_what_permissions_keep_from_them() {
    let Some(b) = Both::new("posix-perm", &[]) else {
        return;
    };
    let (root, a, bo) = (User::root(), alice(), bob());
    let t = b.check(
        &Scenario::new()
            .step(
                &root,
                "mkdir w 0777
                 create w/secret 0600
                 create w/ro 0644
                 mkdir sticky 01777",
            )
            .step(&bo, "create sticky/bobs 0666\ncreate w/bobs 0644")
            .step(
                &a,
                "read w/secret
                 open w/ro wronly
                 open_write w/ro wronly
                 read w/ro
                 unlink sticky/bobs
                 rename sticky/bobs sticky/mine
                 chmod w/bobs 0777
                 chown w/bobs 1001 -1
                 chown w/bobs -1 1001
                 truncate w/bobs 0
                 create sticky/alices 0644",
            )
            .step(&bo, "unlink sticky/alices\nchmod w/bobs 0600\nstat w/bobs"),
    );
    expect(&t, "read w/secret", "EACCES");
    expect(&t, "open w/ro wronly", "EACCES");
    expect(&t, "read w/ro", "ok");
    expect(&t, "unlink sticky/bobs", "EPERM");
    expect(&t, "chmod w/bobs 0777", "EPERM");
    expect(&t, "chown w/bobs 1001 -1", "EPERM");
    expect(&t, "unlink sticky/alices", "EPERM");
}

#[test]
fn holes_copies_fallocate_and_locks_behave_as_on_the_backing_file_system() {
    let Some(b) = Both::new("posix-beyond", &[]) else {
        return;
    };
    let root = User::root();
    // A sparse file: data at 0 and at 1 MiB, a hole between, then what fallocate makes of it.
    let t = b.check(&Scenario::new().step(
        &root,
        "pwrite f 0 4096
             pwrite f 1048576 4096
             size f
             seek_data f 0
             seek_hole f 0
             seek_data f 4096
             seek_hole f 1048576
             seek_data f 2000000
             seek_hole f 2000000
             fallocate f punch 0 4096
             seek_data f 0
             sum f
             pwrite f 8192 8192
             fallocate f zero 8192 4096
             sum f
             fallocate f zero_keep 1048576 2097152
             size f
             fallocate f keep 1052672 65536
             size f
             fallocate f alloc 1052672 65536
             size f
             sum f
             copy f g 1118208
             sum g
             copy f g2 100
             sum g2
             pwrite g3 0 10
             fallocate f punch 0 8000000
             sum f
             seek_hole f 0",
    ));
    expect(&t, "seek_data f 4096", "1048576");
    expect(&t, "seek_hole f 0", "4096");
    expect(&t, "seek_data f 2000000", "ENXIO");
    expect(&t, "size f", "1052672");
    expect(&t, "copy f g 1118208", "1118208");

    // Modes the mount does not do are refused as not supported (programs fall back), where
    // the backing file system may do them.
    let t = as_user::run(
        &b.mnt(),
        &root,
        "pwrite h 0 65536\nfallocate h collapse 0 4096\nfallocate h insert 0 4096\nsum h",
    );
    assert_eq!(&t[1..3], ["EOPNOTSUPP", "EOPNOTSUPP"], "{t:?}");
    assert_eq!(
        t[3],
        as_user::run(&b.plain(), &root, "pwrite h 0 65536\nsum h")[1]
    );

    // Locks held by this process are seen by another, on the mount as on the plain directory.
    use rustix::fs::{self as f, FlockOperation, Mode, OFlags};
    for dir in [b.mnt(), b.plain()] {
        let a = f::open(
            dir.join("a"),
            OFlags::CREATE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        let c = f::open(
            dir.join("c"),
            OFlags::CREATE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        f::flock(&a, FlockOperation::LockExclusive).unwrap();
        f::fcntl_lock(&c, FlockOperation::LockExclusive).unwrap();
        let t = as_user::run(
            &dir,
            &root,
            "flock_nb a\nsetlk_nb c\nflock_nb c\nsetlk_nb a",
        );
        assert_eq!(t, ["EAGAIN", "EAGAIN", "ok", "ok"], "in {}", dir.display());
        drop((a, c));
        let t = as_user::run(&dir, &root, "flock_nb a\nsetlk_nb c");
        assert_eq!(
            t,
            ["ok", "ok"],
            "released with the descriptors, in {}",
            dir.display()
        );
    }
}

/// Swaps `<src>/d` between a real directory and a symbolic link to `outside`, many times, while
/// calls go through the mount into `d`; then nothing in `outside` may have changed.
#[test]
fn a_directory_swapped_for_a_symlink_never_leads_the_daemon_outside() {
    if !as_user::can_switch() {
        return skip("the mount serves other users (and the daemon acts as root) only as root");
    }
    let dir = Scratch::new(&kind_tag("posix-race"));
    for d in ["src", "mnt", "outside", "src/d"] {
        fs::create_dir(dir.path(d)).unwrap();
    }
    let outside = dir.path("outside");
    fs::write(outside.join("victim"), b"outside data").unwrap();
    fs::create_dir(outside.join("vdir")).unwrap();
    fs::write(dir.path("src/d/victim"), b"inside data").unwrap();
    fs::create_dir(dir.path("src/d/vdir")).unwrap();
    // Name, length, mode and owner of each entry.
    let snapshot = |p: &Path| -> Vec<(String, u64, u32, u32)> {
        let mut v: Vec<_> = fs::read_dir(p)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let m = fs::symlink_metadata(e.path()).unwrap();
                use std::os::unix::fs::MetadataExt;
                let name = e.file_name().to_string_lossy().into_owned();
                (name, m.len(), m.mode(), m.uid())
            })
            .collect();
        v.sort();
        v
    };
    let before = snapshot(&outside);
    let mut args = vec!["--allow-other"];
    args.extend_from_slice(KIND);
    let m = match Mount::start_with(&dir.path("src"), &dir.path("mnt"), "16M", &args) {
        Ok(m) => m,
        Err(why) => return skip(&why),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let (d, real, outside) = (dir.path("src/d"), dir.path("src/d.real"), outside.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if fs::rename(&d, &real).is_ok() {
                    let _ = std::os::unix::fs::symlink(&outside, &d);
                    std::thread::sleep(Duration::from_micros(200));
                    let _ = fs::remove_file(&d);
                    let _ = fs::rename(&real, &d);
                    swaps += 1;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            swaps
        })
    };
    let t0 = Instant::now();
    let mut calls = 0u64;
    // The client never follows a symbolic link itself (a link to an absolute path outside the
    // mount leads any program there, on any file system): `d` is opened with
    // RESOLVE_NO_SYMLINKS and every call is made relative to that descriptor, so whatever
    // reaches `outside` was done by the daemon.
    use rustix::fs::{self as f, AtFlags, Mode, OFlags, ResolveFlags};
    // Close-on-exec, as every descriptor here: a child another test forks meanwhile must not
    // keep the mount busy past its unmount.
    let mroot = f::open(
        &m.mnt,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    while t0.elapsed() < Duration::from_secs(3) {
        let Ok(d) = f::openat2(
            &mroot,
            "d",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH,
        ) else {
            calls += 1;
            continue;
        };
        let n = calls % 1000;
        let (new, dir, ln) = (format!("new{n}"), format!("dir{n}"), format!("ln{n}"));
        let nf = OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let rw = Mode::from_raw_mode(0o644);
        // Every kind of call that names a file in `d`; each may fail (the name is gone for a
        // moment, or the kernel's view is stale), none may reach `outside`.
        if let Ok(fd) = f::openat(&d, "victim", OFlags::WRONLY | OFlags::TRUNC | nf, rw) {
            let _ = rustix::io::write(&fd, b"written through the mount");
        }
        if let Ok(fd) = f::openat(&d, new.as_str(), OFlags::CREATE | OFlags::WRONLY | nf, rw) {
            let _ = rustix::io::write(&fd, b"x");
        }
        let _ = f::unlinkat(&d, new.as_str(), AtFlags::empty());
        let _ = f::mkdirat(&d, dir.as_str(), Mode::from_raw_mode(0o755));
        let _ = f::unlinkat(&d, dir.as_str(), AtFlags::REMOVEDIR);
        let _ = f::renameat(&d, "victim", &d, "moved");
        let _ = f::renameat(&d, "moved", &d, "victim");
        let _ = f::symlinkat("/etc/passwd", &d, ln.as_str());
        let _ = f::unlinkat(&d, ln.as_str(), AtFlags::empty());
        let _ = f::linkat(&d, "victim", &d, "hard", AtFlags::empty());
        let _ = f::unlinkat(&d, "hard", AtFlags::empty());
        let _ = f::chmodat(&d, "vdir", Mode::from_raw_mode(0o700), AtFlags::empty());
        let _ = f::chownat(
            &d,
            "victim",
            Some(rustix::fs::Uid::from_raw(1001)),
            None,
            AtFlags::SYMLINK_NOFOLLOW,
        );
        let _ = f::unlinkat(&d, "victim", AtFlags::empty());
        let _ = f::unlinkat(&d, "vdir", AtFlags::REMOVEDIR);
        if let Ok(fd) = f::openat(&d, "victim", OFlags::CREATE | OFlags::WRONLY | nf, rw) {
            let _ = rustix::io::write(&fd, b"inside again");
        }
        let _ = f::mkdirat(&d, "vdir", Mode::from_raw_mode(0o755));
        calls += 1;
    }
    drop(mroot);
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    let st = m.unmount();
    assert!(st.success(), "the daemon exited with {st}");
    assert!(swaps > 100, "the race ran: {swaps} swaps");
    assert!(
        calls > 100,
        "calls went through the mount meanwhile: {calls}"
    );
    assert_eq!(
        snapshot(&outside),
        before,
        "the directory outside the source is as it was ({swaps} swaps, {calls} rounds)"
    );
    assert_eq!(fs::read(outside.join("victim")).unwrap(), b"outside data");
    eprintln!("{swaps} swaps, {calls} rounds of calls: nothing outside touched");
}
