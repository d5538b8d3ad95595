//! Proptest state machines: random sequences of changes to a small namespace, made through the
//! dentry cache (and, in the second property, also behind its back), checked after every step
//! against a plain model (a `BTreeMap` of path → kind): the operation's result against the
//! model's prediction, the real directory against the model, and a walk of every possible path
//! through the cache against both.
#![cfg(not(loom))]

mod common;
use common::TempDir;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use quire::dcache::{Dcache, DcacheConfig, DcacheError, FileKind, RefPolicy, RenameMode};
use rustix::io::Errno;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum K {
    File,
    Dir,
}

/// An outcome, as the model predicts it and as the cache or the file system reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum E {
    NotFound,
    NotDir,
    Errno(i32),
}

fn e_of(err: &DcacheError) -> E {
    match err {
        DcacheError::NotFound { .. } => E::NotFound,
        DcacheError::NotDir { .. } => E::NotDir,
        other => E::Errno(other.errno()),
    }
}

fn e_of_io(err: &std::io::Error) -> E {
    match err.raw_os_error() {
        Some(n) if n == Errno::NOENT.raw_os_error() => E::NotFound,
        Some(n) if n == Errno::NOTDIR.raw_os_error() => E::NotDir,
        Some(n) => E::Errno(n),
        None => panic!("{err}"),
    }
}

const NAMES: [&str; 3] = ["a", "b", "c"];

fn all_paths() -> Vec<String> {
    let mut out: Vec<String> = NAMES.iter().map(|s| s.to_string()).collect();
    for _ in 0..2 {
        let more: Vec<String> = out
            .iter()
            .filter(|p| p.matches('/').count() == out.last().unwrap().matches('/').count())
            .flat_map(|p| NAMES.iter().map(move |n| format!("{p}/{n}")))
            .collect();
        out.extend(more);
    }
    out
}

type Model = BTreeMap<String, K>;

fn prefixes(p: &str) -> impl Iterator<Item = &str> {
    p.match_indices('/').map(move |(i, _)| &p[..i])
}

/// The parent directories of `p` must exist in the model.
fn check_parents(m: &Model, p: &str) -> Result<(), E> {
    for pre in prefixes(p) {
        match m.get(pre) {
            None => return Err(E::NotFound),
            Some(K::File) => return Err(E::NotDir),
            Some(K::Dir) => {}
        }
    }
    Ok(())
}

fn lookup(m: &Model, p: &str) -> Result<K, E> {
    check_parents(m, p)?;
    m.get(p).copied().ok_or(E::NotFound)
}

fn has_children(m: &Model, p: &str) -> bool {
    let pre = format!("{p}/");
    m.keys().any(|k| k.starts_with(&pre))
}

#[derive(Clone, Debug)]
enum Op {
    Create(String),
    Mkdir(String),
    Unlink(String),
    Rmdir(String),
    Rename(String, String),
    RenameNoReplace(String, String),
    Exchange(String, String),
}

fn path_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(0..NAMES.len(), 1..=3).prop_map(|v| {
        v.into_iter()
            .map(|i| NAMES[i])
            .collect::<Vec<_>>()
            .join("/")
    })
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => path_strategy().prop_map(Op::Create),
        3 => path_strategy().prop_map(Op::Mkdir),
        2 => path_strategy().prop_map(Op::Unlink),
        2 => path_strategy().prop_map(Op::Rmdir),
        3 => (path_strategy(), path_strategy()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => (path_strategy(), path_strategy()).prop_map(|(a, b)| Op::RenameNoReplace(a, b)),
        3 => (path_strategy(), path_strategy()).prop_map(|(a, b)| Op::Exchange(a, b)),
    ]
}

/// What the model says the operation does: `Ok` with the model changed, or the error.
/// `None` for a rename whose error the model does not pin down (Linux's order of checks).
fn predict(m: &mut Model, op: &Op) -> Option<Result<(), E>> {
    let r = match op {
        Op::Create(p) | Op::Mkdir(p) => check_parents(m, p).and_then(|()| {
            if m.contains_key(p) {
                return Err(E::Errno(Errno::EXIST.raw_os_error()));
            }
            let k = if matches!(op, Op::Create(_)) {
                K::File
            } else {
                K::Dir
            };
            m.insert(p.clone(), k);
            Ok(())
        }),
        Op::Unlink(p) => lookup(m, p).and_then(|k| match k {
            K::Dir => Err(E::Errno(Errno::ISDIR.raw_os_error())),
            K::File => {
                m.remove(p);
                Ok(())
            }
        }),
        Op::Rmdir(p) => lookup(m, p).and_then(|k| match k {
            K::File => Err(E::NotDir),
            K::Dir if has_children(m, p) => Err(E::Errno(Errno::NOTEMPTY.raw_os_error())),
            K::Dir => {
                m.remove(p);
                Ok(())
            }
        }),
        Op::RenameNoReplace(from, to) => {
            if lookup(m, from).is_err() || check_parents(m, to).is_err() || from == to {
                return None;
            }
            if m.contains_key(to.as_str()) {
                return Some(Err(E::Errno(Errno::EXIST.raw_os_error())));
            }
            return predict(m, &Op::Rename(from.clone(), to.clone()));
        }
        Op::Exchange(a, b) => {
            if lookup(m, a).is_err() || lookup(m, b).is_err() {
                return None;
            }
            if a == b {
                return Some(Ok(()));
            }
            if b.starts_with(&format!("{a}/")) || a.starts_with(&format!("{b}/")) {
                // One inside the other: refused (EINVAL or ENOTEMPTY, Linux's choice).
                return None;
            }
            let (pa, pb) = (format!("{a}/"), format!("{b}/"));
            let mut next = Model::new();
            for (k, v) in m.iter() {
                let k2 = if k == a || k.starts_with(&pa) {
                    format!("{b}{}", &k[a.len()..])
                } else if k == b || k.starts_with(&pb) {
                    format!("{a}{}", &k[b.len()..])
                } else {
                    k.clone()
                };
                next.insert(k2, *v);
            }
            *m = next;
            Ok(())
        }
        Op::Rename(from, to) => {
            let Ok(src) = lookup(m, from) else {
                return None;
            };
            if check_parents(m, to).is_err() {
                return None;
            }
            if from == to {
                return Some(Ok(()));
            }
            if src == K::Dir && to.starts_with(&format!("{from}/")) {
                return Some(Err(E::Errno(Errno::INVAL.raw_os_error())));
            }
            if from.starts_with(&format!("{to}/")) {
                // The target is an ancestor of the source: a non-empty directory.
                return Some(Err(E::Errno(Errno::NOTEMPTY.raw_os_error())));
            }
            match (src, m.get(to.as_str()).copied()) {
                (K::Dir, Some(K::File)) => return Some(Err(E::NotDir)),
                (K::File, Some(K::Dir)) => return Some(Err(E::Errno(Errno::ISDIR.raw_os_error()))),
                (K::Dir, Some(K::Dir)) if has_children(m, to) => {
                    return Some(Err(E::Errno(Errno::NOTEMPTY.raw_os_error())))
                }
                _ => {}
            }
            m.remove(to.as_str());
            let pre = format!("{from}/");
            let moved: Vec<(String, K)> = m
                .iter()
                .filter(|(k, _)| *k == from || k.starts_with(&pre))
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            for (k, v) in moved {
                m.remove(&k);
                m.insert(format!("{to}{}", &k[from.len()..]), v);
            }
            Ok(())
        }
    };
    Some(r)
}

fn through_cache(dc: &Dcache, op: &Op) -> Result<(), E> {
    match op {
        Op::Create(p) => dc.create(p).map(drop),
        Op::Mkdir(p) => dc.mkdir(p).map(drop),
        Op::Unlink(p) => dc.unlink(p),
        Op::Rmdir(p) => dc.rmdir(p),
        Op::Rename(a, b) => dc.rename(a, b),
        Op::RenameNoReplace(a, b) => rename2(dc, a, b, RenameMode::NoReplace),
        Op::Exchange(a, b) => rename2(dc, a, b, RenameMode::Exchange),
    }
    .map_err(|e| e_of(&e))
}

/// `rename_at2` by paths.
fn rename2(dc: &Dcache, a: &str, b: &str, mode: RenameMode) -> Result<(), DcacheError> {
    let split = |p: &str| match p.rfind('/') {
        Some(i) => (p[..i].to_string(), p[i + 1..].to_string()),
        None => (String::new(), p.to_string()),
    };
    let (da, na) = split(a);
    let (db, nb) = split(b);
    let dir = |d: &str| {
        if d.is_empty() {
            Ok(dc.root())
        } else {
            dc.walk(d)
        }
    };
    let (pa, pb) = (dir(&da)?, dir(&db)?);
    dc.rename_at2(&pa, na, &pb, nb, mode)
}

fn rename2_behind(
    root: &Path,
    a: &str,
    b: &str,
    flags: rustix::fs::RenameFlags,
) -> std::io::Result<()> {
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        root.join(a),
        rustix::fs::CWD,
        root.join(b),
        flags,
    )
    .map_err(std::io::Error::from)
}

fn behind_the_back(root: &Path, op: &Op) -> Result<(), E> {
    let j = |p: &str| root.join(p);
    match op {
        Op::Create(p) => fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(j(p))
            .map(drop),
        Op::Mkdir(p) => fs::create_dir(j(p)),
        Op::Unlink(p) => fs::remove_file(j(p)),
        Op::Rmdir(p) => fs::remove_dir(j(p)),
        Op::Rename(a, b) => fs::rename(j(a), j(b)),
        Op::RenameNoReplace(a, b) => rename2_behind(root, a, b, rustix::fs::RenameFlags::NOREPLACE),
        Op::Exchange(a, b) => rename2_behind(root, a, b, rustix::fs::RenameFlags::EXCHANGE),
    }
    .map_err(|e| e_of_io(&e))
}

fn disk(root: &Path, dir: &Path, out: &mut Model) {
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
        if e.file_type().unwrap().is_dir() {
            out.insert(rel, K::Dir);
            disk(root, &p, out);
        } else {
            out.insert(rel, K::File);
        }
    }
}

/// The directory is the model, and every path walks through the cache to what both say.
fn check(dc: &Dcache, root: &Path, m: &Model, paths: &[String]) -> Result<(), TestCaseError> {
    let mut d = Model::new();
    disk(root, root, &mut d);
    prop_assert_eq!(&d, m, "directory and model differ");
    for p in paths {
        let want = lookup(m, p);
        let got = dc.walk_nofollow(p);
        match (&want, &got) {
            (Ok(k), Ok(e)) => {
                let id = e.identity().unwrap();
                let kind = if *k == K::Dir {
                    FileKind::Dir
                } else {
                    FileKind::File
                };
                prop_assert_eq!(id.kind, kind, "{}", p);
                prop_assert_eq!(
                    id.ino,
                    fs::symlink_metadata(root.join(p)).unwrap().ino(),
                    "{}",
                    p
                );
                prop_assert_eq!(dc.path_of(e), Path::new("/").join(p));
            }
            (Err(w), Err(g)) => prop_assert_eq!(*w, e_of(g), "{}", p),
            _ => prop_assert!(false, "{}: model {:?}, cache {:?}", p, want, got),
        }
    }
    // Every entry the cache holds and can reach says what the model says — no stale entry
    // hides behind a fresh one.
    for e in dc.cached() {
        let Some(real) = dc.fs_path_of(&e) else {
            continue;
        };
        let rel = real
            .strip_prefix(root)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        match (e.identity(), m.get(&rel)) {
            (None, None) => {}
            (Some(id), Some(k)) => {
                let kind = if *k == K::Dir {
                    FileKind::Dir
                } else {
                    FileKind::File
                };
                prop_assert_eq!(id.kind, kind, "{}", rel);
                prop_assert_eq!(
                    id.ino,
                    fs::symlink_metadata(&real).unwrap().ino(),
                    "{}",
                    rel
                );
            }
            (id, k) => prop_assert!(false, "cached {}: {:?}, model {:?}", rel, id, k),
        }
    }
    Ok(())
}

fn run(
    ops: &[(bool, Op)],
    policy: RefPolicy,
    revalidate: Option<Duration>,
    hold_dir_fds: bool,
) -> Result<(), TestCaseError> {
    let t = TempDir::new("model");
    let dc = Dcache::new(
        &t.0,
        DcacheConfig {
            ref_policy: policy,
            max_unused: 32,
            hash_buckets: 16,
            revalidate_after: revalidate,
            hold_dir_fds,
        },
    )
    .unwrap();
    let paths = all_paths();
    let mut m = Model::new();
    for (behind, op) in ops {
        let mut next = m.clone();
        let want = predict(&mut next, op);
        let got = if *behind {
            behind_the_back(&t.0, op)
        } else {
            through_cache(&dc, op)
        };
        match want {
            Some(w) => prop_assert_eq!(w, got, "{:?} (behind: {})", op, behind),
            // Only the success of an unpinned rename matters: it cannot have succeeded.
            None => prop_assert!(got.is_err(), "{:?}", op),
        }
        if got.is_ok() {
            m = next;
        }
        check(&dc, &t.0, &m, &paths)?;
    }
    drop(dc);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Changes through the cache keep it true; nothing is ever revalidated.
    #[test]
    fn changes_through_the_cache(ops in prop::collection::vec(op_strategy(), 1..40), spin in any::<bool>(), hold in any::<bool>()) {
        let ops: Vec<(bool, Op)> = ops.into_iter().map(|o| (false, o)).collect();
        let policy = if spin { RefPolicy::Spinlock } else { RefPolicy::Cmpxchg };
        run(&ops, policy, None, hold)?;
    }

    /// Changes behind the cache's back are seen at the next lookup when every lookup
    /// revalidates.
    #[test]
    fn changes_behind_the_back(ops in prop::collection::vec((any::<bool>(), op_strategy()), 1..40), hold in any::<bool>()) {
        run(&ops, RefPolicy::Cmpxchg, Some(Duration::ZERO), hold)?;
    }
}

#[test]
fn all_paths_are_the_namespace() {
    let p = all_paths();
    assert_eq!(p.len(), 3 + 9 + 27);
    assert!(p.contains(&"c/b/a".to_string()));
}
