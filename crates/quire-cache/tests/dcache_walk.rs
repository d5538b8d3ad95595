//! The dentry cache over a real directory: walks, symlinks, paths, changes through the cache,
//! changes behind its back, bad input, permissions, references.
#![cfg(not(loom))]

mod common;
use common::TempDir;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use quire::dcache::{
    Dcache, DcacheConfig, DcacheError, DentryRef, FileKind, RefPolicy, MAX_SYMLINKS,
};

impl TempDir {
    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }

    fn mkdir(&self, rel: &str) {
        fs::create_dir_all(self.path(rel)).unwrap();
    }

    fn touch(&self, rel: &str) {
        fs::write(self.path(rel), b"x").unwrap();
    }
}

fn config(policy: RefPolicy, revalidate: Option<Duration>) -> DcacheConfig {
    DcacheConfig {
        ref_policy: policy,
        revalidate_after: revalidate,
        ..DcacheConfig::default()
    }
}

fn each_policy(f: impl Fn(RefPolicy)) {
    f(RefPolicy::Cmpxchg);
    f(RefPolicy::Spinlock);
}

/// Asserts that `d` is the entry of the file at `real` (not following a final symlink).
fn assert_is(d: &DentryRef<'_>, real: &Path) {
    let md = fs::symlink_metadata(real).unwrap();
    let id = d.identity().expect("positive entry");
    assert_eq!(id.ino, md.ino(), "{real:?}");
    let kind = if md.file_type().is_symlink() {
        FileKind::Symlink
    } else if md.is_dir() {
        FileKind::Dir
    } else {
        FileKind::File
    };
    assert_eq!(id.kind, kind, "{real:?}");
}

fn is_not_found<T: std::fmt::Debug>(r: Result<T, DcacheError>) -> bool {
    matches!(r, Err(DcacheError::NotFound { .. }))
}

fn is_not_dir<T: std::fmt::Debug>(r: Result<T, DcacheError>) -> bool {
    matches!(r, Err(DcacheError::NotDir { .. }))
}

fn errno_of<T: std::fmt::Debug>(r: Result<T, DcacheError>) -> i32 {
    r.expect_err("expected an error").errno()
}

#[test]
fn walks_resolve_components_and_cache_results() {
    each_policy(|policy| {
        let t = TempDir::new("walk");
        t.mkdir("a/b");
        t.touch("a/b/c");
        let dc = Dcache::new(&t.0, config(policy, None)).unwrap();
        let c = dc.walk("a/b/c").unwrap();
        assert_is(&c, &t.path("a/b/c"));
        let n = dc.nr_dentry();
        assert_eq!(n, 4, "root, a, b, c");
        for p in [
            "a/b/c",
            "/a/b/c",
            "a//b/./c",
            "./a/b/../b/c",
            "../../a/b/c",
            "a/../../a/b/c",
        ] {
            let d = dc.walk(p).unwrap();
            assert!(DentryRef::ptr_eq(&d, &c), "{p}");
        }
        assert_eq!(dc.nr_dentry(), n, "nothing new was looked up");
        assert!(DentryRef::ptr_eq(&dc.walk("/").unwrap(), &dc.root()));
        assert!(DentryRef::ptr_eq(&dc.walk(".").unwrap(), &dc.root()));
        assert!(DentryRef::ptr_eq(&dc.walk("..").unwrap(), &dc.root()));
        assert!(dc.walk("a/b/").unwrap().is_dir());
        // Through a non-directory.
        assert!(is_not_dir(dc.walk("a/b/c/")));
        assert!(is_not_dir(dc.walk("a/b/c/x")));
        assert!(is_not_dir(dc.walk("a/b/c/.")));
        assert!(is_not_dir(dc.walk("a/b/c/..")));
        // Missing names are cached as negative entries.
        assert!(is_not_found(dc.walk("a/x")));
        assert!(is_not_found(dc.walk("a/x/y")));
        assert!(is_not_found(dc.walk("a/x")));
        let neg: Vec<_> = dc
            .cached()
            .into_iter()
            .filter(|d| d.is_negative())
            .collect();
        assert_eq!(neg.len(), 1);
        assert_eq!(neg[0].name(), "x");
        assert_eq!(dc.path_of(&neg[0]), Path::new("/a/x"));
        // Bad paths.
        assert_eq!(dc.walk("").unwrap_err(), DcacheError::EmptyPath);
        for bad in ["a\0b", "a/x/y\0", "a/b/c/\0", "\0"] {
            assert!(
                matches!(
                    dc.walk(OsStr::new(bad)),
                    Err(DcacheError::InvalidName { .. })
                ),
                "{bad:?}"
            );
        }
        drop((c, neg));
        assert!(dc.shrink_all() >= 4);
        assert_eq!(dc.nr_dentry(), 1);
    });
}

#[test]
fn path_of_and_dget_parent() {
    each_policy(|policy| {
        let t = TempDir::new("path");
        t.mkdir("a/b");
        t.touch("a/b/c");
        let dc = Dcache::new(&t.0, config(policy, None)).unwrap();
        let c = dc.walk("a/b/c").unwrap();
        assert_eq!(dc.path_of(&c), Path::new("/a/b/c"));
        assert_eq!(dc.fs_path_of(&c).unwrap(), t.path("a/b/c"));
        assert_eq!(dc.path_of(&dc.root()), Path::new("/"));
        let b = c.dget_parent();
        assert_eq!(b.name(), "b");
        assert!(DentryRef::ptr_eq(&b, &dc.walk("a/b").unwrap()));
        let a = b.dget_parent();
        let root = a.dget_parent();
        assert!(root.is_root());
        assert!(DentryRef::ptr_eq(&root.dget_parent(), &root));
        // Children hold a reference on their parent.
        assert_eq!(b.ref_count(), 2, "ours + c's");
        // Round trip through a raw pointer.
        let raw = c.clone().into_raw();
        // SAFETY: `raw` comes from `into_raw` on a reference of `dc`, taken back once.
        let back = unsafe { dc.ref_from_raw(raw) };
        assert!(DentryRef::ptr_eq(&back, &c));
        assert_eq!(c.ref_count(), 2);
    });
}

#[test]
fn symlinks_are_followed_inside_the_root() {
    each_policy(|policy| {
        let t = TempDir::new("symlink");
        t.mkdir("a/b");
        t.touch("a/b/f");
        t.mkdir("etc");
        t.touch("etc/marker");
        symlink("b", t.path("a/rel")).unwrap();
        symlink("/a/b", t.path("abs")).unwrap();
        symlink("../../../../../etc", t.path("a/esc")).unwrap();
        symlink("/etc/marker", t.path("absfile")).unwrap();
        symlink("nowhere", t.path("dangling")).unwrap();
        symlink("l2", t.path("l1")).unwrap();
        symlink("l1", t.path("l2")).unwrap();
        let dc = Dcache::new(&t.0, config(policy, None)).unwrap();
        let f = dc.walk("a/b/f").unwrap();
        for p in ["a/rel/f", "abs/f", "a/rel/../b/f", "abs/../b/f"] {
            assert!(DentryRef::ptr_eq(&dc.walk(p).unwrap(), &f), "{p}");
        }
        // The last component is followed by `walk`, not by `walk_nofollow`.
        assert!(dc.walk("a/rel").unwrap().is_dir());
        let l = dc.walk_nofollow("a/rel").unwrap();
        assert_eq!(l.kind(), Some(FileKind::Symlink));
        assert!(dc.walk_nofollow("a/rel/").unwrap().is_dir());
        // Never outside the root: `..` stops at it, absolute targets start from it.
        assert_is(&dc.walk("a/esc/marker").unwrap(), &t.path("etc/marker"));
        assert_is(&dc.walk("absfile").unwrap(), &t.path("etc/marker"));
        assert!(is_not_dir(dc.walk("absfile/")));
        assert!(is_not_found(dc.walk("dangling")));
        assert!(matches!(dc.walk("l1"), Err(DcacheError::Loop { .. })));
        assert!(matches!(dc.walk("l1/x"), Err(DcacheError::Loop { .. })));
        // A walk with symlinks is repeatable (the target is kept) and still right.
        assert!(DentryRef::ptr_eq(&dc.walk("a/rel/f").unwrap(), &f));
    });
}

#[test]
fn symlink_hops_are_limited_to_forty() {
    let t = TempDir::new("hops");
    t.touch("end");
    // s0 -> end, s1 -> s0, ..., s40 -> s39: s39 needs 40 hops, s40 needs 41.
    symlink("end", t.path("s0")).unwrap();
    for i in 1..=MAX_SYMLINKS {
        symlink(format!("s{}", i - 1), t.path(&format!("s{i}"))).unwrap();
    }
    let dc = Dcache::new(&t.0, config(RefPolicy::Cmpxchg, None)).unwrap();
    assert_is(
        &dc.walk(format!("s{}", MAX_SYMLINKS - 1)).unwrap(),
        &t.path("end"),
    );
    let r = dc.walk(format!("s{MAX_SYMLINKS}"));
    assert!(matches!(r, Err(DcacheError::Loop { .. })), "{r:?}");
    assert_eq!(errno_of(r), libc_eloop());
}

fn libc_eloop() -> i32 {
    rustix::io::Errno::LOOP.raw_os_error()
}

#[test]
fn changes_through_the_cache_keep_it_true() {
    each_policy(|policy| {
        let t = TempDir::new("changes");
        let dc = Dcache::new(&t.0, config(policy, None)).unwrap();
        // A negative entry turns positive in place.
        assert!(is_not_found(dc.walk("n")));
        let neg = dc.cached().into_iter().find(|d| d.name() == "n").unwrap();
        assert!(neg.is_negative());
        let n = dc.create("n").unwrap();
        assert!(DentryRef::ptr_eq(&n, &neg));
        assert_is(&n, &t.path("n"));
        assert_is(&dc.walk("n").unwrap(), &t.path("n"));
        drop((n, neg));

        // A renamed directory moves with its children.
        let d = dc.mkdir("d").unwrap();
        assert!(d.is_dir());
        let f = dc.create("d/f").unwrap();
        dc.mkdir("q").unwrap();
        dc.rename("d", "q/e").unwrap();
        assert!(!t.path("d").exists());
        assert_is(&f, &t.path("q/e/f"));
        assert_eq!(dc.path_of(&f), Path::new("/q/e/f"));
        assert!(DentryRef::ptr_eq(&dc.walk("q/e/f").unwrap(), &f));
        assert!(DentryRef::ptr_eq(&f.dget_parent(), &d));
        assert_eq!(d.name(), "e");
        assert!(is_not_found(dc.walk("d/f")));
        assert!(is_not_found(dc.walk("d")));

        // Renaming over a file: the old target becomes deleted for its holders.
        let x = dc.create("x").unwrap();
        let y = dc.create("y").unwrap();
        let x_ino = x.identity().unwrap().ino;
        dc.rename("x", "y").unwrap();
        assert_eq!(dc.path_of(&y), Path::new("/y (deleted)"));
        assert!(dc.fs_path_of(&y).is_none());
        assert!(!y.is_hashed());
        assert!(DentryRef::ptr_eq(&dc.walk("y").unwrap(), &x));
        assert_eq!(dc.walk("y").unwrap().identity().unwrap().ino, x_ino);
        assert!(is_not_found(dc.walk("x")));

        // Unlink and rmdir.
        dc.unlink("q/e/f").unwrap();
        assert!(is_not_found(dc.walk("q/e/f")));
        assert!(!f.is_hashed());
        assert_eq!(dc.path_of(&f), Path::new("/q/e/f (deleted)"));
        dc.rmdir("q/e").unwrap();
        assert!(is_not_found(dc.walk("q/e")));
        assert!(!t.path("q/e").exists());
        assert_eq!(dc.path_of(&f), Path::new("/q/e/f (deleted)"));

        // Symlink through the cache.
        dc.symlink("q", "toq").unwrap();
        assert!(DentryRef::ptr_eq(
            &dc.walk("toq").unwrap(),
            &dc.walk("q").unwrap()
        ));
        assert_eq!(fs::read_link(t.path("toq")).unwrap(), Path::new("q"));

        // The `*_at` forms.
        let q = dc.walk("q").unwrap();
        let g = dc.create_at(&q, "g").unwrap();
        assert_eq!(dc.path_of(&g), Path::new("/q/g"));
        assert!(DentryRef::ptr_eq(&dc.lookup(&q, "g").unwrap(), &g));
        dc.rename_at(&q, "g", &dc.root(), "g2").unwrap();
        assert_eq!(dc.path_of(&g), Path::new("/g2"));
        dc.unlink_at(&dc.root(), "g2").unwrap();
        assert!(is_not_found(dc.lookup(&dc.root(), "g2")));
        drop((d, f, x, y, q, g));
        dc.shrink_all();
        assert_eq!(dc.nr_dentry(), 1);
    });
}

#[test]
fn failed_changes_leave_everything_as_it_was() {
    each_policy(|policy| {
        let t = TempDir::new("failures");
        t.mkdir("dir/sub");
        t.touch("dir/file");
        t.touch("file2");
        let dc = Dcache::new(&t.0, config(policy, None)).unwrap();
        let dir = dc.walk("dir").unwrap();
        let file = dc.walk("dir/file").unwrap();
        let e = |r: Result<(), DcacheError>| errno_of(r);
        use rustix::io::Errno;
        assert_eq!(errno_of(dc.create("dir/file")), Errno::EXIST.raw_os_error());
        assert_eq!(errno_of(dc.mkdir("dir")), Errno::EXIST.raw_os_error());
        assert_eq!(e(dc.rmdir("dir")), Errno::NOTEMPTY.raw_os_error());
        assert_eq!(e(dc.unlink("dir/sub")), Errno::ISDIR.raw_os_error());
        assert!(is_not_dir(dc.rmdir("dir/file")));
        assert_eq!(
            e(dc.rename("dir", "dir/sub/x")),
            Errno::INVAL.raw_os_error()
        );
        assert!(is_not_found(dc.unlink("nope")));
        assert!(is_not_found(dc.create("nope/x")));
        assert!(is_not_dir(dc.create("dir/file/x")));
        assert!(is_not_found(dc.rename("nope", "x")));
        assert_eq!(
            e(dc.rename("file2", "dir/sub")),
            Errno::ISDIR.raw_os_error()
        );
        // Invalid names.
        let root = dc.root();
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(
                matches!(
                    dc.create_at(&root, bad),
                    Err(DcacheError::InvalidName { .. })
                ),
                "{bad:?}"
            );
            assert!(matches!(
                dc.lookup(&root, bad),
                Err(DcacheError::InvalidName { .. })
            ));
        }
        assert!(matches!(
            dc.mkdir("/"),
            Err(DcacheError::InvalidName { .. })
        ));
        assert!(matches!(
            dc.rmdir("dir/.."),
            Err(DcacheError::InvalidName { .. })
        ));
        assert_eq!(dc.unlink("").unwrap_err(), DcacheError::EmptyPath);
        // Entries of another cache are refused.
        let other = Dcache::new(&t.0, config(policy, None)).unwrap();
        assert_eq!(
            other.create_at(&root, "z").unwrap_err(),
            DcacheError::ForeignEntry
        );
        assert!(!t.path("z").exists());
        // Everything is where it was, in the cache and on disk.
        assert!(DentryRef::ptr_eq(&dc.walk("dir").unwrap(), &dir));
        assert!(DentryRef::ptr_eq(&dc.walk("dir/file").unwrap(), &file));
        assert_is(&file, &t.path("dir/file"));
        assert!(t.path("dir/sub").is_dir());
        assert!(t.path("file2").is_file());
        assert!(dir.is_hashed() && file.is_hashed());
    });
}

#[test]
fn changes_behind_the_back_are_seen_when_revalidation_is_due() {
    let t = TempDir::new("behind");
    t.touch("f");
    // Revalidate on every lookup.
    let dc = Dcache::new(&t.0, config(RefPolicy::Cmpxchg, Some(Duration::ZERO))).unwrap();
    let f1 = dc.walk("f").unwrap();
    assert_eq!(f1.kind(), Some(FileKind::File));
    fs::remove_file(t.path("f")).unwrap();
    fs::create_dir(t.path("f")).unwrap();
    let f2 = dc.walk("f").unwrap();
    assert_is(&f2, &t.path("f"));
    assert_eq!(f2.kind(), Some(FileKind::Dir));
    assert!(!f1.is_hashed(), "the stale entry was unhashed");
    fs::remove_dir(t.path("f")).unwrap();
    assert!(is_not_found(dc.walk("f")));
    fs::write(t.path("f"), b"again").unwrap();
    assert_is(&dc.walk("f").unwrap(), &t.path("f"));
    // A cached directory replaced behind the back: its cached children go with it.
    t.mkdir("d");
    t.touch("d/x");
    let x = dc.walk("d/x").unwrap();
    fs::remove_file(t.path("d/x")).unwrap();
    fs::remove_dir(t.path("d")).unwrap();
    t.touch("d");
    assert!(is_not_dir(dc.walk("d/x")));
    assert!(dc.fs_path_of(&x).is_none(), "under an unhashed directory");

    // Never revalidated: the cache is trusted.
    let t2 = TempDir::new("behind-none");
    t2.touch("f");
    let dc = Dcache::new(&t2.0, config(RefPolicy::Cmpxchg, None)).unwrap();
    let f = dc.walk("f").unwrap();
    fs::remove_file(t2.path("f")).unwrap();
    assert!(DentryRef::ptr_eq(&dc.walk("f").unwrap(), &f));

    // Revalidated after an age.
    let t3 = TempDir::new("behind-age");
    t3.touch("f");
    let dc = Dcache::new(
        &t3.0,
        config(RefPolicy::Spinlock, Some(Duration::from_millis(40))),
    )
    .unwrap();
    let f = dc.walk("f").unwrap();
    fs::remove_file(t3.path("f")).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    assert!(is_not_found(dc.walk("f")));
    assert!(!f.is_hashed());
}

#[test]
fn lru_keeps_a_bounded_number_of_unused_entries() {
    let t = TempDir::new("lru");
    t.mkdir("d");
    for i in 0..50 {
        t.touch(&format!("d/f{i}"));
    }
    let cfg = DcacheConfig {
        max_unused: 16,
        revalidate_after: None,
        ..DcacheConfig::default()
    };
    let dc = Dcache::new(&t.0, cfg).unwrap();
    for round in 0..3 {
        for i in 0..200 {
            let p = format!("d/f{}", (i * 7 + round) % 100);
            let _ = dc.walk(&p);
            assert!(dc.nr_unused() <= 16, "{}", dc.nr_unused());
        }
    }
    // root + d + at most 16 unused (d itself is in use by its children).
    assert!(dc.nr_dentry() <= 18, "{}", dc.nr_dentry());
    // Evicted entries are looked up again, correctly.
    for i in 0..50 {
        assert_is(
            &dc.walk(format!("d/f{i}")).unwrap(),
            &t.path(&format!("d/f{i}")),
        );
    }
    dc.shrink_all();
    assert_eq!(dc.nr_dentry(), 1);
    // With no unused entries kept, entries die with their last reference.
    let cfg = DcacheConfig {
        max_unused: 0,
        revalidate_after: None,
        ..DcacheConfig::default()
    };
    let dc = Dcache::new(&t.0, cfg).unwrap();
    let f = dc.walk("d/f1").unwrap();
    assert_eq!(dc.nr_dentry(), 3);
    drop(f);
    assert_eq!(dc.nr_dentry(), 1);
}

/// Runs `f` on a thread whose effective uid is `nobody` (per-thread credentials; the rest of
/// the process keeps root), if we are root; otherwise on a plain thread.
fn as_unprivileged<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(|| {
            let root = rustix::process::geteuid().is_root();
            if root {
                // This changes only this thread's credentials.
                let nobody = rustix::process::Uid::from_raw(65534);
                rustix::thread::set_thread_res_uid(None, nobody, None).unwrap();
            }
            let r = f();
            if root {
                rustix::thread::set_thread_res_uid(None, rustix::process::Uid::ROOT, None).unwrap();
            }
            r
        })
        .join()
        .unwrap()
    })
}

#[test]
fn permission_errors_are_typed_and_cache_nothing() {
    let t = TempDir::new("perm");
    t.mkdir("locked/inner");
    t.touch("locked/inner/f");
    t.mkdir("open");
    fs::set_permissions(t.path("locked"), fs::Permissions::from_mode(0o000)).unwrap();
    fs::set_permissions(&t.0, fs::Permissions::from_mode(0o755)).unwrap();
    let dc = Dcache::new(&t.0, config(RefPolicy::Cmpxchg, None)).unwrap();
    let before = dc.nr_dentry();
    let (r1, r2, r3) = as_unprivileged(|| {
        (
            dc.walk("locked/inner/f").map(drop),
            dc.create("locked/new").map(drop),
            dc.walk("locked").map(|d| d.is_dir()),
        )
    });
    assert!(
        matches!(r1, Err(DcacheError::PermissionDenied { .. })),
        "{r1:?}"
    );
    assert_eq!(
        r1.unwrap_err().errno(),
        rustix::io::Errno::ACCESS.raw_os_error()
    );
    assert!(
        matches!(r2, Err(DcacheError::PermissionDenied { .. })),
        "{r2:?}"
    );
    // The directory itself can be looked up (its parent is searchable).
    assert_eq!(r3, Ok(true));
    assert_eq!(dc.nr_dentry(), before + 1, "only `locked` was cached");
    assert!(!t.path("locked/new").exists());
    fs::set_permissions(t.path("locked"), fs::Permissions::from_mode(0o755)).unwrap();
    assert_is(
        &dc.walk("locked/inner/f").unwrap(),
        &t.path("locked/inner/f"),
    );
}

#[test]
fn root_must_be_a_directory() {
    let t = TempDir::new("root");
    t.touch("file");
    assert!(matches!(
        Dcache::new(t.path("file"), DcacheConfig::default()),
        Err(DcacheError::NotDir { .. })
    ));
    assert!(matches!(
        Dcache::new(t.path("missing"), DcacheConfig::default()),
        Err(DcacheError::NotFound { .. })
    ));
    assert_eq!(
        Dcache::new("", DcacheConfig::default()).unwrap_err(),
        DcacheError::EmptyPath
    );
}
