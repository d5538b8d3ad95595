//! The dentry cache's counters: which walks took the lock-free path, which fell back, and which
//! names had to be asked of the file system. The counters are global to the process, so this
//! file holds a single test and the deltas are exact.
#![cfg(not(loom))]

use std::fs;
use std::os::unix::fs::symlink;

use quire::dcache::{Dcache, DcacheConfig, DcacheError};
use quire::stats::{Event, Snapshot};

fn delta(before: &Snapshot) -> (u64, u64, u64) {
    let d = Snapshot::take().since(before);
    (
        d.get(Event::DcacheFastWalks),
        d.get(Event::DcacheSlowWalks),
        d.get(Event::DcacheMisses),
    )
}

#[test]
fn walks_count_fast_slow_and_misses() {
    let root = std::env::temp_dir().join(format!("quire-dcache-counters-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::write(root.join("a/b/c"), b"c").unwrap();
    symlink("b", root.join("a/l")).unwrap();
    let dc = Dcache::new(
        &root,
        DcacheConfig {
            revalidate_after: None,
            ..DcacheConfig::default()
        },
    )
    .unwrap();

    // Cold: the lock-free walk misses at `a`, the reference walk asks the file system for
    // each of the three names.
    let s = Snapshot::take();
    drop(dc.walk("a/b/c").unwrap());
    assert_eq!(delta(&s), (0, 1, 3));

    // Warm: lock-free, no system call.
    let s = Snapshot::take();
    for _ in 0..10 {
        drop(dc.walk("a/b/c").unwrap());
        drop(dc.walk("/a/./b/../b/c").unwrap());
    }
    assert_eq!(delta(&s), (20, 0, 0));

    // A missing name: one miss, cached negative; the next walk answers lock-free.
    let s = Snapshot::take();
    assert!(matches!(dc.walk("a/x"), Err(DcacheError::NotFound { .. })));
    assert_eq!(delta(&s), (0, 1, 1));
    let s = Snapshot::take();
    assert!(matches!(dc.walk("a/x"), Err(DcacheError::NotFound { .. })));
    assert!(matches!(
        dc.walk("a/b/c/d"),
        Err(DcacheError::NotDir { .. })
    ));
    assert_eq!(delta(&s), (2, 0, 0));

    // A symlink to follow sends the walk to the reference walk: one miss the first time (the
    // link's name), none after (its target is kept).
    let s = Snapshot::take();
    drop(dc.walk("a/l/c").unwrap());
    assert_eq!(delta(&s), (0, 1, 1));
    let s = Snapshot::take();
    drop(dc.walk("a/l/c").unwrap());
    assert_eq!(delta(&s), (0, 1, 0));

    drop(dc);
    fs::remove_dir_all(&root).unwrap();
}
