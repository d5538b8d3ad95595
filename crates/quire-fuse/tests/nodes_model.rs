//! The inode table without FUSE: lookup counts against a model (what the kernel would hold),
//! under renames, unlinks, hard links, and concurrent lookups and forgets; and the proof that
//! forget puts back exactly the references lookup took — once everything is forgotten, the
//! dentry cache frees every entry.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quire::dcache::{DcacheConfig, RenameMode};
use quire_fuse::nodes::{Birth, Nodes, ROOT_ID};

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "quire-nodes-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `statx` of `p` (not following a symlink), birth time included.
fn statx(p: &Path) -> rustix::io::Result<rustix::fs::Statx> {
    rustix::fs::statx(
        rustix::fs::CWD,
        p,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        rustix::fs::StatxFlags::BASIC_STATS | rustix::fs::StatxFlags::BTIME,
    )
}

fn table(t: &TempDir) -> Nodes {
    Nodes::new(
        &t.0,
        DcacheConfig {
            hold_dir_fds: true,
            revalidate_after: None,
            max_unused: 64,
            ..DcacheConfig::default()
        },
    )
    .unwrap()
}

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Everything forgotten: no node left, and the cache can free every entry but the root.
#[track_caller]
fn assert_all_released(n: &Nodes) {
    assert_eq!(n.len(), 0, "nodes left in the table");
    n.dcache().shrink_all();
    assert_eq!(
        n.dcache().nr_dentry(),
        1,
        "a reference was not put back (only the root may remain)"
    );
}

#[test]
fn lookups_and_forgets_match_the_kernels_count_through_renames_unlinks_and_links() {
    let t = TempDir::new("model");
    fs::create_dir(t.0.join("d")).unwrap();
    for n in ["a", "b", "c"] {
        fs::write(t.0.join(n), n).unwrap();
        fs::write(t.0.join("d").join(n), n).unwrap();
    }
    let nodes = table(&t);
    let names = ["a", "b", "c", "x", "y"];
    let dirs = ["", "d"];
    // The model: what the kernel holds, by node id.
    let mut held: HashMap<u64, u64> = HashMap::new();
    let mut rng = Rng(0x5eed);
    for step in 0..3000 {
        let dir = dirs[rng.below(2)];
        let name = names[rng.below(names.len())];
        let parent_node = if dir.is_empty() {
            nodes.root()
        } else {
            let (n, _) = nodes.lookup(&nodes.root(), OsStr::new(dir)).unwrap();
            *held.entry(n.id).or_default() += 1;
            n
        };
        let pd = nodes.dentry(&parent_node).unwrap();
        let dc = nodes.dcache();
        match rng.below(10) {
            0..=3 => {
                // LOOKUP: a count on the file the name holds, if any.
                let exists = t.0.join(dir).join(name).exists();
                match nodes.lookup(&parent_node, OsStr::new(name)) {
                    Ok((n, st)) => {
                        assert!(exists, "step {step}: found {dir}/{name}");
                        assert!(n.is(&st), "step {step}: the node is the file found");
                        // The id is the inode number, unless the kernel still held that
                        // number for a file now gone when this one was first looked up.
                        assert!(
                            n.id == st.stx_ino || n.id >= 1 << 63,
                            "step {step}: id {} for inode {}",
                            n.id,
                            st.stx_ino
                        );
                        *held.entry(n.id).or_default() += 1;
                    }
                    Err(_) => assert!(!exists, "step {step}: missed {dir}/{name}"),
                }
            }
            4..=5 => {
                // FORGET some of what the kernel holds on a node.
                let ids: Vec<u64> = held.keys().copied().collect();
                if !ids.is_empty() {
                    let id = ids[rng.below(ids.len())];
                    let k = 1 + rng.below(held[&id] as usize) as u64;
                    nodes.forget(id, k);
                    let left = held[&id] - k;
                    if left == 0 {
                        held.remove(&id);
                    } else {
                        held.insert(id, left);
                    }
                }
            }
            6 => {
                let other = names[rng.below(names.len())];
                let odir = dirs[rng.below(2)];
                let op = if odir.is_empty() {
                    dc.root()
                } else {
                    dc.walk(odir).unwrap()
                };
                let mode = [
                    RenameMode::Replace,
                    RenameMode::NoReplace,
                    RenameMode::Exchange,
                ][rng.below(3)];
                let _ = dc.rename_at2(&pd, name, &op, other, mode);
            }
            7 => {
                let _ = dc.unlink_at(&pd, name);
            }
            8 => {
                let _ = dc.make_at(&pd, name, |dir, n| {
                    rustix::fs::openat(
                        dir,
                        n,
                        rustix::fs::OFlags::CREATE
                            | rustix::fs::OFlags::EXCL
                            | rustix::fs::OFlags::WRONLY,
                        rustix::fs::Mode::from_raw_mode(0o644),
                    )
                    .map(drop)
                });
            }
            _ => {
                // A hard link: the new name is the same node.
                let other = names[rng.below(names.len())];
                if let Ok((src, _)) = nodes.lookup(&parent_node, OsStr::new(name)) {
                    *held.entry(src.id).or_default() += 1;
                    let r = dc.make_at(&pd, other, |dir, n| {
                        rustix::fs::linkat(dir, name, dir, n, rustix::fs::AtFlags::empty())
                    });
                    if let Ok((d, st, ())) = r {
                        let n = nodes.remember(d, &st);
                        assert_eq!(n.id, src.id, "a hard link is the same node");
                        *held.entry(n.id).or_default() += 1;
                    }
                }
            }
        }
        drop(pd);
        nodes.check().unwrap_or_else(|e| panic!("step {step}: {e}"));
        assert_eq!(nodes.len(), held.len(), "step {step}: nodes in the table");
        // One file, one node: no two held nodes name the same file.
        let mut files: HashMap<(u64, u64, Birth), u64> = HashMap::new();
        for id in held.keys() {
            let n = nodes.get(*id).expect("a held node is in the table");
            let file = (n.ident.dev, n.ident.ino, n.born);
            if let Some(other) = files.insert(file, *id) {
                panic!("step {step}: nodes {other} and {id} are one file");
            }
        }
        for (id, k) in &held {
            let n = nodes.get(*id).expect("a held node is in the table");
            assert_eq!(n.lookups(), *k, "step {step}: node {id}");
            assert_eq!(n.alias_refs(), *k, "step {step}: node {id}'s references");
            // A node's name, while it has one, names its file.
            if n.has_name() {
                let d = nodes.dentry(&n).unwrap();
                if let Some(p) = nodes.dcache().fs_path_of(&d) {
                    if let Ok(st) = statx(&p) {
                        assert!(
                            n.is(&st),
                            "step {step}: {} is node {id}'s file",
                            p.display()
                        );
                    }
                }
            }
        }
    }
    assert!(nodes.get(ROOT_ID).is_some());
    for (id, k) in held.drain() {
        nodes.forget(id, k);
    }
    assert_all_released(&nodes);
}

#[test]
fn concurrent_lookups_forgets_and_renames_leave_exact_counts() {
    let t = TempDir::new("concurrent");
    fs::create_dir(t.0.join("d")).unwrap();
    for i in 0..8 {
        fs::write(t.0.join(format!("f{i}")), b"x").unwrap();
        fs::write(t.0.join("d").join(format!("f{i}")), b"x").unwrap();
    }
    let nodes = Arc::new(table(&t));
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_millis(1500);
    std::thread::scope(|s| {
        // Lookers: take lookups, forget some as they go; at the end give back all they hold.
        let mut lookers = Vec::new();
        for w in 0..4u64 {
            let (nodes, stop) = (nodes.clone(), stop.clone());
            lookers.push(s.spawn(move || {
                let mut rng = Rng(w + 1);
                let mut mine: HashMap<u64, u64> = HashMap::new();
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let root = nodes.root();
                    let parent = if rng.below(2) == 0 {
                        root
                    } else {
                        match nodes.lookup(&root, OsStr::new("d")) {
                            Ok((n, _)) => {
                                *mine.entry(n.id).or_default() += 1;
                                n
                            }
                            Err(_) => continue,
                        }
                    };
                    let name = format!("f{}", rng.below(8));
                    if let Ok((n, _)) = nodes.lookup(&parent, OsStr::new(&name)) {
                        *mine.entry(n.id).or_default() += 1;
                    }
                    if rng.below(3) == 0 {
                        let ids: Vec<u64> = mine.keys().copied().collect();
                        if !ids.is_empty() {
                            let id = ids[rng.below(ids.len())];
                            let k = mine.remove(&id).unwrap();
                            nodes.forget(id, k);
                        }
                    }
                    done += 1;
                }
                for (id, k) in mine {
                    nodes.forget(id, k);
                }
                done
            }));
        }
        // A renamer and unlinker/creator changing the names under them.
        {
            let (nodes, stop) = (nodes.clone(), stop.clone());
            s.spawn(move || {
                let mut rng = Rng(99);
                let dc = nodes.dcache();
                while !stop.load(Ordering::Relaxed) {
                    let root = dc.root();
                    let Ok(d) = dc.walk("d") else { continue };
                    let (a, b) = (format!("f{}", rng.below(8)), format!("f{}", rng.below(8)));
                    let (pa, pb) = if rng.below(2) == 0 {
                        (root.clone(), d.clone())
                    } else {
                        (d.clone(), root.clone())
                    };
                    match rng.below(4) {
                        0 => {
                            let _ = dc.rename_at2(&pa, &a, &pb, &b, RenameMode::Replace);
                        }
                        1 => {
                            let _ = dc.rename_at2(&pa, &a, &pb, &b, RenameMode::Exchange);
                        }
                        2 => {
                            let _ = dc.unlink_at(&pa, &a);
                        }
                        _ => {
                            let _ = dc.make_at(&pa, &a, |dir, n| {
                                rustix::fs::openat(
                                    dir,
                                    n,
                                    rustix::fs::OFlags::CREATE | rustix::fs::OFlags::WRONLY,
                                    rustix::fs::Mode::from_raw_mode(0o644),
                                )
                                .map(drop)
                            });
                        }
                    }
                }
            });
        }
        // The invariant holds at any moment (checked while they run).
        while Instant::now() < deadline {
            if let Err(e) = nodes.check() {
                // Stop the others first: the scope joins them before the panic can end it.
                stop.store(true, Ordering::Relaxed);
                panic!("{e}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        let total: u64 = lookers.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(total > 100, "the lookers ran ({total} rounds)");
    });
    nodes.check().unwrap();
    assert_all_released(&nodes);
}

#[test]
fn a_removed_name_keeps_its_node_until_forgotten_and_ids_are_inode_numbers() {
    let t = TempDir::new("removed");
    fs::write(t.0.join("f"), b"data").unwrap();
    fs::hard_link(t.0.join("f"), t.0.join("g")).unwrap();
    let nodes = table(&t);
    let root = nodes.root();
    let (f, st) = nodes.lookup(&root, OsStr::new("f")).unwrap();
    let (g, _) = nodes.lookup(&root, OsStr::new("g")).unwrap();
    assert_eq!(f.id, g.id, "two names, one file, one node");
    assert_eq!(f.id, fs::metadata(t.0.join("f")).unwrap().ino());
    assert_eq!(st.stx_nlink, 2);
    assert_eq!((f.lookups(), f.alias_refs()), (2, 2));
    nodes
        .dcache()
        .unlink_at(&nodes.dcache().root(), "f")
        .unwrap();
    assert!(f.has_name(), "still reachable as g");
    nodes
        .dcache()
        .unlink_at(&nodes.dcache().root(), "g")
        .unwrap();
    assert!(!f.has_name());
    assert!(nodes.get(f.id).is_some(), "the kernel still knows it");
    assert!(
        nodes.dentry(&f).is_some(),
        "and its dentry lives on, unhashed"
    );
    nodes.forget(f.id, 1);
    assert_eq!(f.lookups(), 1);
    nodes.forget(f.id, 5);
    assert!(
        nodes.get(f.id).is_none(),
        "gone at zero (an excess is clamped)"
    );
    nodes.forget(ROOT_ID, 3);
    assert!(nodes.get(ROOT_ID).is_some(), "the root is never forgotten");
    assert_all_released(&nodes);
}

/// Makes files of one kind in `dir` (directories or regular files) until the file system gives
/// one the inode number `ino`; its name, or `None` if none of 256 got it.
fn make_until_numbered(dir: &Path, tag: &str, as_dir: bool, ino: u64) -> Option<String> {
    for i in 0..256 {
        let name = format!("{tag}{i}");
        let p = dir.join(&name);
        if as_dir {
            fs::create_dir(&p).unwrap();
        } else {
            fs::write(&p, b"new").unwrap();
        }
        if fs::symlink_metadata(&p).unwrap().ino() == ino {
            return Some(name);
        }
    }
    None
}

#[test]
fn a_number_reused_while_the_kernel_holds_the_old_file_is_a_new_node() {
    let t = TempDir::new("reuse");
    let nodes = table(&t);
    let root = nodes.root();
    let dc = nodes.dcache();
    // The old file's type differs (a directory takes a file's number), then only its birth time
    // does (a file takes a file's number).
    for (round, as_dir) in [(0, true), (1, false)] {
        let old_name = format!("old{round}");
        fs::write(t.0.join(&old_name), b"old").unwrap();
        // The kernel knows the file, then its last name goes; its FORGET has not come yet.
        let (old, _) = nodes.lookup(&root, OsStr::new(&old_name)).unwrap();
        assert_eq!(old.id, old.ident.ino);
        dc.unlink_at(&dc.root(), &old_name).unwrap();
        let ino = old.ident.ino;
        let Some(name) = make_until_numbered(&t.0, &format!("new{round}-"), as_dir, ino) else {
            eprintln!("skipped: the file system never gave inode {ino} to a new file");
            return;
        };
        if !as_dir && old.born.is_none() {
            eprintln!("skipped: the file system reports no birth times");
            return;
        }
        let (new, _) = nodes.lookup(&root, OsStr::new(&name)).unwrap();
        assert_eq!(
            new.ident.ino, ino,
            "round {round}: the backing number is the same"
        );
        assert_ne!(
            new.id, old.id,
            "round {round}: a new file gets a node of its own"
        );
        assert!(!old.is(&statx(&t.0.join(&name)).unwrap()));
        assert!(new.is(&statx(&t.0.join(&name)).unwrap()));
        assert_eq!(
            nodes.id_for(new.ident.dev, ino),
            new.id,
            "d_ino in listings"
        );
        let (again, _) = nodes.lookup(&root, OsStr::new(&name)).unwrap();
        assert_eq!(again.id, new.id, "round {round}: found again by its number");
        assert_eq!((old.lookups(), new.lookups()), (1, 2));
        assert_eq!(nodes.synthetic_len(), 1);
        nodes.check().unwrap();
        // The kernel forgets the old file: the new one keeps its id while the kernel knows it.
        nodes.forget(old.id, 1);
        assert!(nodes.get(old.id).is_none());
        let (again, _) = nodes.lookup(&root, OsStr::new(&name)).unwrap();
        assert_eq!(again.id, new.id);
        nodes.check().unwrap();
        nodes.forget(new.id, 3);
        assert!(nodes.get(new.id).is_none() && nodes.synthetic_len() == 0);
        nodes.check().unwrap();
        // Once nothing holds the number, the file's id is its number again.
        let (later, _) = nodes.lookup(&root, OsStr::new(&name)).unwrap();
        assert_eq!(later.id, ino);
        assert_eq!(nodes.id_for(later.ident.dev, ino), ino);
        nodes.forget(later.id, 1);
    }
    nodes.check().unwrap();
    assert_all_released(&nodes);
}
