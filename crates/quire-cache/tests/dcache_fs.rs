//! The dentry cache's interface for file-system front ends: held directory descriptors,
//! `lookup_stat`, `with_dir`/`with_name`, `make_at`, and `rename_at2` with `NoReplace` and
//! `Exchange`.
#![cfg(not(loom))]

mod common;
use common::TempDir;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use quire::dcache::{Dcache, DcacheConfig, DcacheError, DentryRef, FileKind, RenameMode};
use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};

/// The tests of this file run one at a time: one of them counts the process's descriptors.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn cache(dir: &TempDir, hold: bool) -> Dcache {
    Dcache::new(
        &dir.0,
        DcacheConfig {
            hold_dir_fds: hold,
            revalidate_after: None,
            ..DcacheConfig::default()
        },
    )
    .unwrap()
}

fn ino_of(dir: &TempDir, rel: &str) -> u64 {
    fs::symlink_metadata(dir.0.join(rel)).unwrap().ino()
}

fn ino(d: &DentryRef<'_>) -> u64 {
    d.identity().expect("positive").ino
}

/// Open descriptors of this process.
fn open_fds() -> usize {
    fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// The open descriptors once entries an earlier test freed have been destroyed: they wait in the
/// epoch and close whenever some thread next collects it, which may be in the middle of a count.
fn settled_fds() -> usize {
    let mut last = open_fds();
    let mut steady = 0;
    for _ in 0..1000 {
        quire::sync::rcu::pin().flush();
        std::thread::sleep(std::time::Duration::from_millis(1));
        let now = open_fds();
        steady = if now == last { steady + 1 } else { 0 };
        last = now;
        if steady == 20 {
            break;
        }
    }
    last
}

#[test]
fn lookup_stat_returns_fresh_attributes_and_replaces_stale_entries() {
    let _serial = serial();
    for hold in [false, true] {
        let t = TempDir::new("dcfs-lookup");
        fs::create_dir(t.0.join("d")).unwrap();
        fs::write(t.0.join("d/f"), b"hello").unwrap();
        let dc = cache(&t, hold);
        let d = dc.walk("d").unwrap();
        let (f, st) = dc.lookup_stat(&d, "f").unwrap();
        assert_eq!(st.stx_size, 5);
        assert_eq!(ino(&f), ino_of(&t, "d/f"));
        // Changed behind the cache's back: the size is fresh, and a replaced file gets a new
        // entry while the holder of the old one sees it deleted.
        fs::write(t.0.join("d/f"), b"hello, world").unwrap();
        let (f2, st) = dc.lookup_stat(&d, "f").unwrap();
        assert_eq!(st.stx_size, 12);
        assert!(DentryRef::ptr_eq(&f, &f2), "same file, same entry");
        // (The new file is made before the old one goes, so it cannot reuse its inode number.)
        fs::write(t.0.join("d/g"), b"x").unwrap();
        fs::remove_file(t.0.join("d/f")).unwrap();
        fs::rename(t.0.join("d/g"), t.0.join("d/f")).unwrap();
        let (f3, _) = dc.lookup_stat(&d, "f").unwrap();
        assert!(!DentryRef::ptr_eq(&f, &f3), "another file, another entry");
        assert!(!f.is_hashed());
        assert_eq!(ino(&f3), ino_of(&t, "d/f"));
        // A missing name is NotFound and cached negative.
        fs::remove_file(t.0.join("d/f")).unwrap();
        assert!(matches!(
            dc.lookup_stat(&d, "f"),
            Err(DcacheError::NotFound { .. })
        ));
        assert!(!f3.is_hashed());
        assert!(matches!(
            dc.lookup_stat(&d, "a/b"),
            Err(DcacheError::InvalidName { .. })
        ));
        let (file, _) = {
            fs::write(t.0.join("d/plain"), b"").unwrap();
            dc.lookup_stat(&d, "plain").unwrap()
        };
        assert!(matches!(
            dc.lookup_stat(&file, "x"),
            Err(DcacheError::NotDir { .. })
        ));
    }
}

#[test]
fn held_directory_descriptors_follow_the_directory_and_close_with_the_entry() {
    let _serial = serial();
    let t = TempDir::new("dcfs-held");
    fs::create_dir_all(t.0.join("a/b")).unwrap();
    let before = settled_fds();
    {
        let dc = cache(&t, true);
        let b = dc.walk("a/b").unwrap();
        let (f, _, fd) = dc
            .make_at(&b, "f", |dir, name| {
                rustix::fs::openat(
                    dir,
                    name,
                    OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
            })
            .unwrap();
        rustix::io::write(&fd, b"abc").unwrap();
        drop(fd);
        assert_eq!(fs::read(t.0.join("a/b/f")).unwrap(), b"abc");
        // The directories' descriptors are held now: a and b (the root's is the cache's own).
        assert!(open_fds() >= before + 2, "{} {}", open_fds(), before);
        // Renamed behind the cache's back, b's descriptor still is b.
        fs::rename(t.0.join("a/b"), t.0.join("a/moved")).unwrap();
        let n = dc
            .with_dir(&b, |fd| {
                rustix::fs::statx(fd, "f", AtFlags::SYMLINK_NOFOLLOW, StatxFlags::SIZE)
                    .unwrap()
                    .stx_size
            })
            .unwrap();
        assert_eq!(n, 3);
        // Removed: a deleted directory is still reachable through its held descriptor.
        fs::remove_file(t.0.join("a/moved/f")).unwrap();
        drop(f);
        fs::remove_dir(t.0.join("a/moved")).unwrap();
        let a = dc.walk("a").unwrap();
        assert!(matches!(
            dc.lookup_stat(&a, "b"),
            Err(DcacheError::NotFound { .. })
        ));
        assert!(!b.is_hashed());
        let nlink = dc
            .with_dir(&b, |fd| {
                rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::NLINK)
                    .unwrap()
                    .stx_nlink
            })
            .unwrap();
        assert_eq!(nlink, 0, "the removed directory itself");
        drop((a, b));
        dc.shrink_all();
        assert_eq!(dc.nr_dentry(), 1);
    }
    // Freed entries are handed to the epoch; let it run their destructors.
    for _ in 0..1000 {
        if open_fds() == before {
            break;
        }
        quire::sync::rcu::pin().flush();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(open_fds(), before, "every held descriptor was closed");
}

#[test]
fn a_directory_swapped_behind_the_cache_is_not_held() {
    let _serial = serial();
    let t = TempDir::new("dcfs-swap");
    fs::create_dir(t.0.join("d")).unwrap();
    let dc = cache(&t, true);
    let d = dc.walk("d").unwrap();
    fs::rename(t.0.join("d"), t.0.join("old")).unwrap();
    fs::create_dir(t.0.join("d")).unwrap();
    // The entry names the old directory; a path walk would open the new one: refused.
    assert!(matches!(
        dc.with_dir(&d, |_| ()),
        Err(DcacheError::NotFound { .. })
    ));
}

#[test]
fn with_name_acts_on_the_file_an_entry_names() {
    let _serial = serial();
    for hold in [false, true] {
        let t = TempDir::new("dcfs-name");
        fs::create_dir(t.0.join("d")).unwrap();
        fs::write(t.0.join("d/f"), b"x").unwrap();
        let dc = cache(&t, hold);
        let f = dc.walk("d/f").unwrap();
        dc.with_name(&f, |dir, name| {
            assert_eq!(name, OsStr::new("f"));
            rustix::fs::chmodat(dir, name, Mode::from_raw_mode(0o640), AtFlags::empty()).unwrap();
        })
        .unwrap();
        let mode = fs::metadata(t.0.join("d/f")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        // After a rename through the cache, the same entry reaches the file at its new name.
        let d = dc.walk("d").unwrap();
        dc.rename_at(&d, "f", &d, "g").unwrap();
        let name = dc.with_name(&f, |_, name| name.to_owned()).unwrap();
        assert_eq!(name, "g");
        dc.unlink_at(&d, "g").unwrap();
        assert!(matches!(
            dc.with_name(&f, |_, _| ()),
            Err(DcacheError::NotFound { .. })
        ));
        assert!(matches!(
            dc.with_name(&dc.root(), |_, _| ()),
            Err(DcacheError::InvalidName { .. })
        ));
    }
}

#[test]
fn make_at_records_what_the_callers_system_call_made_and_errors_change_nothing() {
    let _serial = serial();
    let t = TempDir::new("dcfs-make");
    let dc = cache(&t, true);
    let root = dc.root();
    let (d, st, ()) = dc
        .make_at(&root, "dir", |dir, name| {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))
        })
        .unwrap();
    assert_eq!(d.kind(), Some(FileKind::Dir));
    assert_eq!(u32::from(st.stx_mode) & 0o777, 0o700);
    let (l, _, ()) = dc
        .make_at(&d, "link", |dir, name| {
            rustix::fs::symlinkat("../elsewhere", dir, name)
        })
        .unwrap();
    assert_eq!(l.kind(), Some(FileKind::Symlink));
    let (n, _, ()) = dc
        .make_at(&d, "node", |dir, name| {
            rustix::fs::mknodat(
                dir,
                name,
                rustix::fs::FileType::RegularFile,
                Mode::from_raw_mode(0o644),
                0,
            )
        })
        .unwrap();
    assert_eq!(n.kind(), Some(FileKind::File));
    assert_eq!(ino(&n), ino_of(&t, "dir/node"));
    // EEXIST from the system call: a typed error, the entry unchanged.
    let e = dc
        .make_at(&d, "node", |dir, name| {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))
        })
        .unwrap_err();
    assert_eq!(e.errno(), libc_eexist());
    assert_eq!(dc.walk("dir/node").unwrap().kind(), Some(FileKind::File));
    // Hard link to an existing file: both names, one identity.
    let (h, _, ()) = dc
        .make_at(&root, "hard", |dir, name| {
            rustix::fs::linkat(dir, "dir/node", dir, name, AtFlags::empty())
        })
        .unwrap();
    assert_eq!(h.identity(), n.identity());
}

fn libc_eexist() -> i32 {
    rustix::io::Errno::EXIST.raw_os_error()
}

#[test]
fn rename_noreplace_refuses_an_existing_name_and_moves_otherwise() {
    let _serial = serial();
    for hold in [false, true] {
        let t = TempDir::new("dcfs-noreplace");
        fs::write(t.0.join("a"), b"a").unwrap();
        fs::write(t.0.join("b"), b"b").unwrap();
        let dc = cache(&t, hold);
        let root = dc.root();
        let a = dc.walk("a").unwrap();
        let b = dc.walk("b").unwrap();
        let e = dc
            .rename_at2(&root, "a", &root, "b", RenameMode::NoReplace)
            .unwrap_err();
        assert_eq!(e.errno(), libc_eexist());
        assert!(a.is_hashed() && b.is_hashed());
        assert_eq!(fs::read(t.0.join("b")).unwrap(), b"b");
        dc.rename_at2(&root, "a", &root, "c", RenameMode::NoReplace)
            .unwrap();
        assert_eq!(dc.path_of(&a), std::path::Path::new("/c"));
        assert_eq!(fs::read(t.0.join("c")).unwrap(), b"a");
        assert!(dc.walk("a").is_err());
    }
}

#[test]
fn rename_exchange_swaps_entries_with_their_children() {
    let _serial = serial();
    for hold in [false, true] {
        let t = TempDir::new("dcfs-exchange");
        fs::create_dir_all(t.0.join("p/dir/sub")).unwrap();
        fs::create_dir(t.0.join("q")).unwrap();
        fs::write(t.0.join("q/file"), b"file").unwrap();
        fs::write(t.0.join("p/dir/sub/x"), b"x").unwrap();
        let dc = cache(&t, hold);
        let (p, q) = (dc.walk("p").unwrap(), dc.walk("q").unwrap());
        let dir = dc.walk("p/dir").unwrap();
        let x = dc.walk("p/dir/sub/x").unwrap();
        let file = dc.walk("q/file").unwrap();
        let (pc, qc) = (p.ref_count(), q.ref_count());
        dc.rename_at2(&p, "dir", &q, "file", RenameMode::Exchange)
            .unwrap();
        // The file system and the cache agree.
        assert_eq!(fs::read(t.0.join("p/dir")).unwrap(), b"file");
        assert_eq!(fs::read(t.0.join("q/file/sub/x")).unwrap(), b"x");
        assert_eq!(dc.path_of(&dir), std::path::Path::new("/q/file"));
        assert_eq!(dc.path_of(&file), std::path::Path::new("/p/dir"));
        assert_eq!(dc.path_of(&x), std::path::Path::new("/q/file/sub/x"));
        assert!(DentryRef::ptr_eq(&dc.walk("q/file/sub/x").unwrap(), &x));
        assert_eq!(ino(&dc.walk("p/dir").unwrap()), ino_of(&t, "p/dir"));
        assert_eq!((p.ref_count(), q.ref_count()), (pc, qc), "no count moved");
        // Exchange with a name that is not cached: the cached side moves.
        fs::write(t.0.join("p/other"), b"other").unwrap();
        dc.rename_at2(&p, "dir", &p, "other", RenameMode::Exchange)
            .unwrap();
        assert_eq!(dc.path_of(&file), std::path::Path::new("/p/other"));
        assert_eq!(fs::read(t.0.join("p/other")).unwrap(), b"file");
        assert_eq!(ino(&dc.walk("p/dir").unwrap()), ino_of(&t, "p/dir"));
        // Exchange with a missing name fails (ENOENT) and changes nothing.
        assert!(dc
            .rename_at2(&p, "other", &p, "missing", RenameMode::Exchange)
            .is_err());
        assert_eq!(dc.path_of(&file), std::path::Path::new("/p/other"));
        drop((p, q, dir, x, file));
        dc.shrink_all();
        assert_eq!(dc.nr_dentry(), 1, "nothing leaked");
    }
}
