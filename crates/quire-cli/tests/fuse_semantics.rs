//! What a program sees on a `quire mount`: the errno of each kind of bad request, files that
//! stay usable after their last name goes, renames with `RENAME_NOREPLACE`/`EXCHANGE`, shared
//! mappings, changes made behind the mount, `st_size` of cached writes, attributes and
//! extended attributes, a clean stop on SIGTERM, a client killed mid-write, and that nothing
//! outside the source directory is ever touched. Skipped (with the reason) without FUSE.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{is_mounted, random_bytes, sh, Scratch, Setup};
use rustix::fs::{RenameFlags, CWD};

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

#[test]
fn bad_requests_get_the_errno_linux_gives() {
    let Some(s) = Setup::new("errno", "16M") else {
        return;
    };
    fs::create_dir(s.mnt("d")).unwrap();
    fs::write(s.mnt("d/f"), b"x").unwrap();
    fs::write(s.mnt("file"), b"x").unwrap();
    let e = File::open(s.mnt("missing")).unwrap_err();
    assert_eq!(errno_of(&e), libc::ENOENT);
    let e = fs::create_dir(s.mnt("d")).unwrap_err();
    assert_eq!(errno_of(&e), libc::EEXIST);
    let e = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(s.mnt("file"))
        .unwrap_err();
    assert_eq!(errno_of(&e), libc::EEXIST);
    let e = fs::hard_link(s.mnt("file"), s.mnt("d/f")).unwrap_err();
    assert_eq!(errno_of(&e), libc::EEXIST);
    let e = fs::remove_dir(s.mnt("d")).unwrap_err();
    assert_eq!(errno_of(&e), libc::ENOTEMPTY);
    let e = File::open(s.mnt("file/x")).unwrap_err();
    assert_eq!(errno_of(&e), libc::ENOTDIR);
    let e = fs::remove_dir(s.mnt("file")).unwrap_err();
    assert_eq!(errno_of(&e), libc::ENOTDIR);
    let e = fs::remove_file(s.mnt("d")).unwrap_err();
    assert_eq!(errno_of(&e), libc::EISDIR);
    let e = OpenOptions::new().write(true).open(s.mnt("d")).unwrap_err();
    assert_eq!(errno_of(&e), libc::EISDIR);
    let long = "n".repeat(256);
    let e = fs::write(s.mnt(&long), b"x").unwrap_err();
    assert_eq!(errno_of(&e), libc::ENAMETOOLONG);
    // EFBIG: at the largest offset a file may have, and past the backing file system's limit
    // (ext4: 16 TiB), at write time — not as an EIO at fsync.
    let f = OpenOptions::new().write(true).open(s.mnt("file")).unwrap();
    // (A write that would cross 2^63 is refused by the kernel itself, EINVAL; one that ends
    // just below it reaches the daemon.)
    let e = f.write_at(b"abcd", (1u64 << 63) - 10).unwrap_err();
    assert_eq!(errno_of(&e), libc::EFBIG);
    let e = f.set_len(1 << 62).unwrap_err();
    assert_eq!(errno_of(&e), libc::EFBIG);
    let limit = quire_fuse::probe_max_file_size(&s.src(""));
    if limit < quire::filemap::MAX_FILE_SIZE {
        let e = f.write_at(b"abcd", limit - 2).unwrap_err();
        assert_eq!(errno_of(&e), libc::EFBIG, "past the backing limit {limit}");
        f.write_at(b"ab", limit - 2).unwrap();
        f.set_len(2).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(
        fs::metadata(s.src("file")).unwrap().len(),
        if limit < quire::filemap::MAX_FILE_SIZE {
            2
        } else {
            1
        }
    );
}

#[test]
fn a_full_backing_disk_is_reported_at_write_and_the_daemon_keeps_serving() {
    if !rustix::process::geteuid().is_root() {
        return common::skip("mounting a small tmpfs needs root");
    }
    let dir = Scratch::new("enospc");
    let small = dir.path("small");
    fs::create_dir(&small).unwrap();
    fs::create_dir(dir.path("mnt")).unwrap();
    if let Err(e) = rustix::mount::mount(
        "tmpfs",
        &small,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        Some(c"size=4m"),
    ) {
        return common::skip(&format!("mounting a tmpfs: {e}"));
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
        }
    }
    let _u = Unmount(small.clone());
    let m = match common::Mount::start(&small, &dir.path("mnt"), "16M") {
        Ok(m) => m,
        Err(why) => return common::skip(&why),
    };
    let mut f = File::create(m.path("fill")).unwrap();
    let chunk = vec![7u8; 256 << 10];
    let mut written = 0usize;
    let err = loop {
        match f.write_all(&chunk) {
            Ok(()) => written += chunk.len(),
            Err(e) => break e,
        }
        assert!(
            written < 16 << 20,
            "a 4 MiB file system took {written} bytes"
        );
    };
    assert_eq!(errno_of(&err), libc::ENOSPC, "{err}");
    assert!(
        written >= 2 << 20,
        "most of the space was usable ({written})"
    );
    // What was accepted is kept and durable.
    f.sync_all().unwrap();
    drop(f);
    let mut back = Vec::new();
    File::open(m.path("fill"))
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert!(back.len() >= written && back[..written].iter().all(|&b| b == 7));
    // Still serving.
    fs::remove_file(m.path("fill")).unwrap();
    fs::write(m.path("after"), b"ok").unwrap();
    assert_eq!(fs::read(m.path("after")).unwrap(), b"ok");
    assert!(m.unmount().success());
}

#[test]
fn an_unlinked_file_keeps_working_through_its_handles() {
    let Some(mut s) = Setup::new("unlinked", "16M") else {
        return;
    };
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(s.mnt("tmp"))
        .unwrap();
    f.write_all(b"before unlink;").unwrap();
    fs::remove_file(s.mnt("tmp")).unwrap();
    assert!(!s.mnt("tmp").exists() && !s.src("tmp").exists());
    f.write_all(b" after unlink").unwrap();
    f.sync_all().unwrap();
    let md = f.metadata().unwrap();
    assert_eq!(md.len(), 27);
    assert_eq!(md.nlink(), 0);
    let mut got = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_string(&mut got).unwrap();
    assert_eq!(got, "before unlink; after unlink");
    f.set_len(6).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 6);
    drop(f);
    s.unmount();
}

#[test]
fn renames_replace_refuse_or_exchange_as_asked() {
    let Some(mut s) = Setup::new("rename", "16M") else {
        return;
    };
    fs::write(s.mnt("a"), b"A").unwrap();
    fs::write(s.mnt("b"), b"B").unwrap();
    fs::create_dir(s.mnt("d")).unwrap();
    let held = File::open(s.mnt("b")).unwrap();
    // Over an existing target: the target's open handle still reads the old file.
    fs::rename(s.mnt("a"), s.mnt("b")).unwrap();
    assert_eq!(fs::read(s.mnt("b")).unwrap(), b"A");
    assert!(!s.mnt("a").exists());
    let mut old = String::new();
    (&held).read_to_string(&mut old).unwrap();
    assert_eq!(old, "B");
    fs::write(s.mnt("c"), b"C").unwrap();
    let e = rustix::fs::renameat_with(CWD, s.mnt("c"), CWD, s.mnt("b"), RenameFlags::NOREPLACE)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), libc::EEXIST);
    rustix::fs::renameat_with(CWD, s.mnt("c"), CWD, s.mnt("d/c"), RenameFlags::NOREPLACE).unwrap();
    rustix::fs::renameat_with(CWD, s.mnt("b"), CWD, s.mnt("d/c"), RenameFlags::EXCHANGE).unwrap();
    assert_eq!(fs::read(s.mnt("b")).unwrap(), b"C");
    assert_eq!(fs::read(s.mnt("d/c")).unwrap(), b"A");
    let e = rustix::fs::renameat_with(CWD, s.mnt("b"), CWD, s.mnt("zz"), RenameFlags::EXCHANGE)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), libc::ENOENT);
    drop(held);
    s.unmount();
    assert_eq!(fs::read(s.src("b")).unwrap(), b"C");
    assert_eq!(fs::read(s.src("d/c")).unwrap(), b"A");
}

#[test]
fn shared_mappings_reach_the_cache_and_the_backing_file() {
    let Some(mut s) = Setup::new("mmap", "16M") else {
        return;
    };
    let stats = sh(&format!("{} stat {}", common::QUIRE, s.mnt("").display()));
    if !stats.contains("mmap_allowed 1") {
        return common::skip("the kernel refused FUSE_DIRECT_IO_ALLOW_MMAP (Linux < 6.6)");
    }
    const LEN: usize = 64 << 10;
    fs::write(s.mnt("m"), vec![0u8; LEN]).unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(s.mnt("m"))
        .unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: a new shared mapping of LEN bytes of an open file; unmapped below, used only
    // through the slice while mapped.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    // SAFETY: the mapping is LEN bytes, readable and writable, alive until munmap below.
    let map = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), LEN) };
    map[100..105].copy_from_slice(b"mmap!");
    // A read() of the range sees the mapped store (the kernel writes it back first).
    let mut b = [0u8; 5];
    File::open(s.mnt("m"))
        .unwrap()
        .read_exact_at(&mut b, 100)
        .unwrap();
    assert_eq!(&b, b"mmap!");
    // A write() is seen by the mapping at its next touch.
    f.write_at(b"WRITE", 200).unwrap();
    assert_eq!(&map[200..205], b"WRITE");
    // msync(MS_SYNC) makes it durable in the backing file.
    map[300..304].copy_from_slice(b"sync");
    // SAFETY: the mapping above.
    assert_eq!(unsafe { libc::msync(p, LEN, libc::MS_SYNC) }, 0);
    let on_disk = fs::read(s.src("m")).unwrap();
    assert_eq!(&on_disk[300..304], b"sync");
    assert_eq!(&on_disk[100..105], b"mmap!");
    // SAFETY: unmapping the mapping made above; the slice is not used after.
    assert_eq!(unsafe { libc::munmap(p, LEN) }, 0);
    drop(f);
    s.unmount();
    let on_disk = fs::read(s.src("m")).unwrap();
    assert_eq!(&on_disk[200..205], b"WRITE");
}

#[test]
fn changes_behind_the_mount_are_seen_at_the_next_open_never_as_made_up_zeros() {
    let Some(mut s) = Setup::new("behind", "16M") else {
        return;
    };
    let data = random_bytes(1 << 20, 5);
    fs::write(s.mnt("f"), &data).unwrap();
    // Read it whole (cached), then cut it to zero behind the mount.
    assert_eq!(fs::read(s.mnt("f")).unwrap(), data);
    let held = File::open(s.mnt("f")).unwrap();
    OpenOptions::new()
        .write(true)
        .open(s.src("f"))
        .unwrap()
        .set_len(0)
        .unwrap();
    // Give the kernel's attribute cache its time-to-live.
    std::thread::sleep(Duration::from_millis(1100));
    // A new open sees the new length and no old bytes.
    assert_eq!(fs::read(s.mnt("f")).unwrap(), b"");
    // The handle opened before reads no invented zeros either: its data was dropped when the
    // change was noticed, and the store ends at 0.
    let mut buf = vec![0xaau8; 4096];
    let n = held.read_at(&mut buf, 0).unwrap();
    assert_eq!(n, 0, "a short read, not {n} bytes of zeros");
    drop(held);
    // Rewritten with other bytes of the same length behind the mount: seen at the next open.
    fs::write(s.mnt("g"), b"original").unwrap();
    assert_eq!(fs::read(s.mnt("g")).unwrap(), b"original");
    fs::write(s.src("g"), b"replaced").unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(fs::read(s.mnt("g")).unwrap(), b"replaced");
    // A file made behind the mount appears.
    fs::write(s.src("new"), b"hello").unwrap();
    assert_eq!(fs::read(s.mnt("new")).unwrap(), b"hello");
    s.unmount();
}

#[test]
fn st_size_and_attributes_follow_cached_writes_and_setattr() {
    let Some(mut s) = Setup::new("attrs", "16M") else {
        return;
    };
    let f = File::create(s.mnt("f")).unwrap();
    f.write_at(&[1u8; 10_000], 0).unwrap();
    assert_eq!(
        fs::metadata(s.mnt("f")).unwrap().len(),
        10_000,
        "cached, not yet written back"
    );
    f.write_at(b"x", 1 << 20).unwrap();
    assert_eq!(f.metadata().unwrap().len(), (1 << 20) + 1);
    drop(f);
    fs::set_permissions(s.mnt("f"), fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(
        fs::metadata(s.src("f")).unwrap().permissions().mode() & 0o777,
        0o640
    );
    // Times set by a program (tar, cp -p) stay, even though data was cached.
    let mut g = File::create(s.mnt("g")).unwrap();
    g.write_all(b"data").unwrap();
    let when = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    g.set_modified(when).unwrap();
    drop(g);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(fs::metadata(s.mnt("g")).unwrap().modified().unwrap(), when);
    assert_eq!(fs::metadata(s.src("g")).unwrap().modified().unwrap(), when);
    // Regular-file and FIFO nodes; device nodes where the caller may make them (root: CAP_MKNOD),
    // inert on the mount (nodev). (Other users: tests/fuse_posix.rs.)
    sh(&format!("mkfifo {}", s.mnt("fifo").display()));
    assert!(fs::symlink_metadata(s.src("fifo"))
        .unwrap()
        .file_type()
        .is_fifo_like());
    let r = rustix::fs::mknodat(
        CWD,
        s.mnt("dev"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 3),
    );
    if rustix::process::geteuid().is_root() {
        r.unwrap();
        let m = fs::symlink_metadata(s.src("dev")).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_char_device(
            &m.file_type()
        ));
        assert_eq!(m.rdev(), rustix::fs::makedev(1, 3));
        let e = File::open(s.mnt("dev")).unwrap_err();
        assert_eq!(errno_of(&e), libc::EACCES, "nodev: not opened as a device");
    } else {
        let e = r.unwrap_err();
        assert!(e == rustix::io::Errno::PERM, "{e}");
    }
    // Extended attributes pass through; the counters' attribute is not listed.
    rustix::fs::setxattr(
        s.mnt("f"),
        "user.test",
        b"value",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    let mut v = [0u8; 16];
    let n = rustix::fs::getxattr(s.src("f"), "user.test", &mut v).unwrap();
    assert_eq!(&v[..n], b"value");
    let mut names = [0u8; 256];
    let n = rustix::fs::listxattr(s.mnt(""), &mut names).unwrap();
    assert!(!String::from_utf8_lossy(&names[..n]).contains("quire"));
    // Many entries in one directory: readdir comes in several replies.
    fs::create_dir(s.mnt("many")).unwrap();
    for i in 0..1500 {
        File::create(s.mnt(&format!("many/entry-with-a-longish-name-{i:05}"))).unwrap();
    }
    assert_eq!(fs::read_dir(s.mnt("many")).unwrap().count(), 1500);
    s.unmount();
    assert_eq!(fs::metadata(s.src("f")).unwrap().len(), (1 << 20) + 1);
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for fs::FileType {
    fn is_fifo_like(&self) -> bool {
        use std::os::unix::fs::FileTypeExt;
        self.is_fifo()
    }
}

#[test]
fn sigterm_writes_everything_back_and_unmounts() {
    let Some(mut s) = Setup::new("sigterm", "16M") else {
        return;
    };
    let data = random_bytes(3 << 20, 11);
    // Written, closed, never synced: still in quire's cache when the signal comes.
    {
        let mut f = File::create(s.mnt("f")).unwrap();
        f.write_all(&data).unwrap();
    }
    let mut m = s.mount.take().unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(m.pid() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let st = m.wait();
    assert!(st.success(), "a clean exit: {st}");
    assert!(!is_mounted(&m.mnt), "unmounted");
    drop(m);
    assert_eq!(fs::read(s.src("f")).unwrap(), data);
}

#[test]
fn a_client_killed_mid_write_leaves_the_daemon_serving() {
    let Some(mut s) = Setup::new("killclient", "16M") else {
        return;
    };
    let mut dd = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", s.mnt("big").display()))
        .args(["bs=1M", "count=100000", "status=none"])
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while fs::metadata(s.mnt("big")).map_or(0, |m| m.len()) < (4 << 20) {
        assert!(t0.elapsed() < Duration::from_secs(30), "dd wrote");
        std::thread::sleep(Duration::from_millis(10));
    }
    dd.kill().unwrap();
    dd.wait().unwrap();
    fs::write(s.mnt("after"), b"still here").unwrap();
    assert_eq!(fs::read(s.mnt("after")).unwrap(), b"still here");
    let len = fs::metadata(s.mnt("big")).unwrap().len();
    assert!(len >= 4 << 20);
    let stats = sh(&format!("{} stat {}", common::QUIRE, s.mnt("").display()));
    assert!(stats.contains("fuse_write "), "{stats}");
    s.unmount();
    assert_eq!(fs::metadata(s.src("big")).unwrap().len(), len);
}

#[test]
fn nothing_outside_the_source_is_touched_through_swapped_symlinks() {
    let Some(mut s) = Setup::new("escape", "16M") else {
        return;
    };
    let outside = s.dir.path("outside");
    fs::create_dir(&outside).unwrap();
    fs::create_dir(s.mnt("d")).unwrap();
    fs::write(s.mnt("d/f"), b"in").unwrap();
    // Swap the directory for a symbolic link to outside, behind the mount, while the kernel
    // and quire hold it: requests for it go to the directory quire holds, not the link.
    fs::rename(s.src("d"), s.src("d.old")).unwrap();
    std::os::unix::fs::symlink(&outside, s.src("d")).unwrap();
    let _ = fs::write(s.mnt("d/new"), b"x");
    assert!(
        !outside.join("new").exists(),
        "the daemon followed the swapped link"
    );
    // Through the mount (once the kernel asks again), a symbolic link in the source is returned
    // as a link: the kernel, not the daemon, resolves it, in the caller's namespace.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(fs::read_link(s.mnt("d")).unwrap(), outside);
    s.unmount();
    assert!(!outside.join("new").exists());
    assert_eq!(fs::read(s.src("d.old/f")).unwrap(), b"in");
}

#[test]
fn quire_stat_reports_the_live_counters() {
    let Some(mut s) = Setup::new("stat", "16M") else {
        return;
    };
    fs::write(s.mnt("f"), random_bytes(100_000, 2)).unwrap();
    let _ = fs::read(s.mnt("f")).unwrap();
    let out = sh(&format!("{} stat {}", common::QUIRE, s.mnt("").display()));
    let get = |k: &str| -> u64 {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .unwrap_or_else(|| panic!("no {k} in:\n{out}"))
            .parse()
            .unwrap()
    };
    assert_eq!(get("capacity_bytes"), 16 << 20);
    assert!(get("fuse_bytes_written") >= 100_000);
    assert!(get("fuse_bytes_read") >= 100_000);
    assert!(get("fuse_create") >= 1);
    assert!(get("rss_bytes") > 0);
    let e = Command::new(common::QUIRE)
        .arg("stat")
        .arg(s.src(""))
        .output()
        .unwrap();
    assert!(!e.status.success(), "not a quire mount");
    s.unmount();
    let _ = ErrorKind::NotFound;
}
