//! Several threads create, rename, unlink and walk at random through one dentry cache over a
//! real directory, for a bounded time; afterwards the cache must agree with the directory, and
//! every reference must be accounted for.
#![cfg(not(loom))]

mod common;
use common::TempDir;
use std::collections::HashMap;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quire::dcache::{Dcache, DcacheConfig, DcacheError, DentryRef, FileKind, RefPolicy};
use rustix::io::Errno;

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

fn random_path(rng: &mut Rng) -> String {
    let depth = 1 + rng.below(3) as usize;
    (0..depth)
        .map(|_| NAMES[rng.below(NAMES.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join("/")
}

fn kind_of(md: &fs::Metadata) -> FileKind {
    let ft = md.file_type();
    if ft.is_symlink() {
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Dir
    } else {
        FileKind::File
    }
}

/// Every path under `dir`, relative to `base`, not following symlinks.
fn disk_paths(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        out.push(p.strip_prefix(base).unwrap().to_path_buf());
        if e.file_type().unwrap().is_dir() {
            disk_paths(base, &p, out);
        }
    }
}

/// Errors the random operations may legitimately meet.
fn expected(e: &DcacheError) -> bool {
    match e {
        DcacheError::NotFound { .. } | DcacheError::NotDir { .. } | DcacheError::Loop { .. } => {
            true
        }
        DcacheError::Io { errno, .. } => {
            [Errno::EXIST, Errno::NOTEMPTY, Errno::ISDIR, Errno::INVAL]
                .iter()
                .any(|x| x.raw_os_error() == *errno)
        }
        _ => false,
    }
}

fn run(policy: RefPolicy, threads: usize, duration: Duration) {
    let t = TempDir::new(&format!("stress-{policy:?}"));
    let dc = Dcache::new(
        &t.0,
        DcacheConfig {
            ref_policy: policy,
            // Small, so that eviction runs concurrently with everything else.
            max_unused: 24,
            hash_buckets: 64,
            revalidate_after: None,
            hold_dir_fds: false,
        },
    )
    .unwrap();
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let unexpected = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for i in 0..threads {
            let (dc, stop, ops, unexpected) = (&dc, &stop, &ops, &unexpected);
            s.spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((i as u64 + 1) * 0x1234_5678_9ABC));
                let mut held: Vec<DentryRef<'_>> = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let p = random_path(&mut rng);
                    let r: Result<(), DcacheError> = match rng.below(100) {
                        0..=44 => dc.walk(&p).map(|d| {
                            // A parent, a path and a clone of what the walk found.
                            let parent = d.dget_parent();
                            let path = dc.path_of(&d);
                            assert!(path.to_str().unwrap().starts_with('/'));
                            assert!(parent.is_dir() || parent.is_root());
                            if held.len() < 4 {
                                held.push(d.clone());
                            }
                        }),
                        45..=49 => dc.walk_nofollow(&p).map(drop),
                        50..=59 => dc.create(&p).map(drop),
                        60..=69 => dc.mkdir(&p).map(drop),
                        70..=76 => dc.unlink(&p),
                        77..=83 => dc.rmdir(&p),
                        84..=95 => dc.rename(&p, random_path(&mut rng)),
                        96..=97 => {
                            let target = random_path(&mut rng);
                            dc.symlink(&target, &p).map(drop)
                        }
                        _ => {
                            dc.shrink(4);
                            Ok(())
                        }
                    };
                    if let Err(e) = r {
                        if !expected(&e) {
                            unexpected.lock().unwrap().push(e);
                        }
                    }
                    if !held.is_empty() && rng.below(4) == 0 {
                        let k = rng.below(held.len() as u64) as usize;
                        held.swap_remove(k);
                    }
                }
                ops.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
    });
    let unexpected = unexpected.into_inner().unwrap();
    assert!(unexpected.is_empty(), "unexpected errors: {unexpected:?}");
    assert!(ops.load(Ordering::Relaxed) > 100, "too few operations ran");

    // 1. Every hashed entry reachable from the root says what the directory says.
    let mut checked = 0;
    for d in dc.cached() {
        let Some(real) = dc.fs_path_of(&d) else {
            continue; // under an unhashed directory: unreachable
        };
        match (d.identity(), fs::symlink_metadata(&real)) {
            (Some(id), Ok(md)) => {
                assert_eq!(id.ino, md.ino(), "{real:?}");
                assert_eq!(id.kind, kind_of(&md), "{real:?}");
            }
            (None, Err(e)) => assert_eq!(e.kind(), ErrorKind::NotFound, "{real:?}"),
            (id, md) => panic!("{real:?}: cache says {id:?}, disk says {md:?}"),
        }
        checked += 1;
    }
    // 2. Every name on disk resolves through the cache to the same file.
    let mut paths = Vec::new();
    disk_paths(&t.0, &t.0, &mut paths);
    let mut inos = HashMap::new();
    for p in &paths {
        let md = fs::symlink_metadata(t.0.join(p)).unwrap();
        let d = dc.walk_nofollow(p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        assert_eq!(d.identity().unwrap().ino, md.ino(), "{p:?}");
        assert_eq!(dc.path_of(&d), Path::new("/").join(p));
        inos.insert(p.clone(), md.ino());
    }
    assert!(checked + paths.len() > 0);
    // 3. No reference leaked and none was put twice: with every reference gone, evicting
    // everything leaves the root alone.
    dc.shrink_all();
    assert_eq!(dc.nr_dentry(), 1, "entries left: {:?}", dc.cached());
    assert_eq!(dc.nr_unused(), 0);
    assert_eq!(dc.root().ref_count(), 2, "the cache's own and ours");
}

#[test]
fn random_changes_and_walks_agree_with_the_directory_cmpxchg() {
    run(RefPolicy::Cmpxchg, 4, Duration::from_millis(300));
}

#[test]
fn random_changes_and_walks_agree_with_the_directory_spinlock() {
    run(RefPolicy::Spinlock, 4, Duration::from_millis(300));
}

/// Walkers and `dget_parent` on a fixed set of deep entries while other threads rename their
/// ancestors back and forth: every walk that succeeds finds the right file, and every parent
/// taken is the entry's parent at some moment (one of the two directories it moves between).
#[test]
fn walks_and_dget_parent_race_renames() {
    for policy in [RefPolicy::Cmpxchg, RefPolicy::Spinlock] {
        let t = TempDir::new(&format!("rename-race-{policy:?}"));
        for d in ["p/x/y", "q"] {
            fs::create_dir_all(t.0.join(d)).unwrap();
        }
        fs::write(t.0.join("p/x/y/f"), b"f").unwrap();
        let f_ino = fs::metadata(t.0.join("p/x/y/f")).unwrap().ino();
        let dc = Dcache::new(
            &t.0,
            DcacheConfig {
                ref_policy: policy,
                revalidate_after: None,
                ..DcacheConfig::default()
            },
        )
        .unwrap();
        let x = dc.walk("p/x").unwrap();
        let p = dc.walk("p").unwrap();
        let q = dc.walk("q").unwrap();
        let stop = AtomicBool::new(false);
        let found = AtomicU64::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                // Move x between p and q.
                let mut in_p = true;
                while !stop.load(Ordering::Relaxed) {
                    if in_p {
                        dc.rename("p/x", "q/x").unwrap();
                    } else {
                        dc.rename("q/x", "p/x").unwrap();
                    }
                    in_p = !in_p;
                }
            });
            for _ in 0..3 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        for path in ["p/x/y/f", "q/x/y/f"] {
                            match dc.walk(path) {
                                Ok(f) => {
                                    assert_eq!(f.identity().unwrap().ino, f_ino);
                                    found.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(DcacheError::NotFound { .. }) => {}
                                Err(e) => panic!("{path}: {e}"),
                            }
                        }
                        let par = x.dget_parent();
                        assert!(
                            DentryRef::ptr_eq(&par, &p) || DentryRef::ptr_eq(&par, &q),
                            "{par:?}"
                        );
                        let path = dc.path_of(&x);
                        assert!(
                            path == Path::new("/p/x") || path == Path::new("/q/x"),
                            "{path:?}"
                        );
                    }
                });
            }
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(200) {
                std::thread::sleep(Duration::from_millis(10));
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(found.load(Ordering::Relaxed) > 0);
        // p and q: ours + the snapshot's + one per cached child (x, or a negative `x`) — the
        // races leaked nothing.
        let x_in_p = t.0.join("p/x").exists();
        let cached = dc.cached();
        let children = |dir: &DentryRef<'_>| {
            cached
                .iter()
                .filter(|c| DentryRef::ptr_eq(&c.dget_parent(), dir))
                .count() as i32
        };
        assert_eq!(p.ref_count(), 2 + children(&p));
        assert_eq!(q.ref_count(), 2 + children(&q));
        assert!(DentryRef::ptr_eq(
            &x.dget_parent(),
            if x_in_p { &p } else { &q }
        ));
        drop(cached);
        drop((x, p, q));
        dc.shrink_all();
        assert_eq!(dc.nr_dentry(), 1);
    }
}
