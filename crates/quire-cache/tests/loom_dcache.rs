//! Model checks of the dentry cache's reference protocol, on the real code of
//! `quire::dcache::tree` (public under `--cfg loom`; no file system involved).
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p quire-cache --release --test loom_dcache`.
#![cfg(loom)]

use std::sync::Arc;

use loom::thread;
use quire::dcache::tree::Core;
use quire::dcache::{FileKind, Identity, RefPolicy};

mod loom_support;
use loom_support::model;

fn ident(ino: u64, kind: FileKind) -> Option<Identity> {
    Some(Identity { dev: 1, ino, kind })
}

// Name hashes are arbitrary but fixed per name. The models use a single hash bucket: the bucket
// index mixes in the parent's address, which differs between executions, and loom needs every
// execution to make the same choices.
const BUCKETS: usize = 1;
const H_P: u64 = 11;
const H_Q: u64 = 12;
const H_C: u64 = 13;

/// `dput` kills an entry while `dget_parent` races it on a child.
///
/// `c` lives in the directory `p`, which is unhashed (its name was removed), so `p` dies with its
/// last reference — the one `c` holds. Thread A holds `c` and takes `dget_parent(c)`. The main
/// thread renames `c` into `q`: `d_move` points `c` at `q` and puts `c`'s reference on `p`,
/// which kills `p` unless A got its reference in first — in which case A's `dput(p)` kills it.
/// `dget_parent` must return `p` or `q` with a live reference (never a dead or freed `p`); `p`
/// must die exactly once; and every count must come out right.
fn dget_parent_races_rename_and_kill(policy: RefPolicy) {
    model(move || {
        let core = Arc::new(Core::new(
            policy,
            16,
            BUCKETS,
            ident(1, FileKind::Dir).unwrap(),
        ));
        let (c_for_a, c_for_main, q_ref) = {
            let root = core.root_ref();
            let p = core.d_alloc(&root, b"p", H_P, ident(2, FileKind::Dir), 0);
            let q = core.d_alloc(&root, b"q", H_Q, ident(3, FileKind::Dir), 0);
            let c = core.d_alloc(&p, b"c", H_C, ident(4, FileKind::File), 0);
            core.d_drop(&p);
            drop(p);
            assert_eq!(core.nr_dentry(), 4);
            (c.dget().into_raw(), c.into_raw(), q.into_raw())
        };
        let c_addr = c_for_a.as_ptr() as usize;

        let core_a = core.clone();
        let a = thread::spawn(move || {
            // SAFETY: from `into_raw` on a reference of this core, taken back once.
            let c = unsafe { core_a.ref_from_raw(c_for_a) };
            let parent = c.dget_parent();
            // Our reference is counted: the parent is alive, not dead.
            assert!(parent.ref_count() >= 1, "dget_parent returned a dead entry");
            let name = parent.name();
            assert!(name == "p" || name == "q", "{name:?}");
            // The reference may be the last on `p`: this dput may kill it.
            drop(parent);
            c.into_raw()
        });

        // SAFETY: as above.
        let c = unsafe { core.ref_from_raw(c_for_main) };
        // SAFETY: as above.
        let q = unsafe { core.ref_from_raw(q_ref) };
        let w = core.rename_begin();
        core.d_move(&w, &c, &q, b"c", H_C);
        drop(w);
        let c_back = a.join().unwrap();
        // SAFETY: as above.
        drop(unsafe { core.ref_from_raw(c_back) });
        assert_eq!(core.path_of(&c), (b"/q/c".to_vec(), false));
        drop((c, q));

        // `p` died (once: a second kill would have taken nr_dentry below this); root, q, c
        // remain, c unused on the LRU, q held by c alone.
        assert_eq!(core.nr_dentry(), 3);
        let root = core.root_ref();
        let q = core.lookup_ref(&root, b"q", H_Q).unwrap();
        assert_eq!(q.ref_count(), 2, "c's and ours");
        let c = core.lookup_ref(&q, b"c", H_C).unwrap().into_raw();
        assert_eq!(c.as_ptr() as usize, c_addr, "the same entry moved");
        // SAFETY: as above.
        let c = unsafe { core.ref_from_raw(c) };
        assert_eq!(c.ref_count(), 1);
        assert!(core.lookup_ref(&root, b"p", H_P).is_none());
        drop((c, q, root));
        core.shrink_all();
        assert_eq!(core.nr_dentry(), 1);
    });
}

#[test]
fn dget_parent_races_rename_and_kill_cmpxchg() {
    dget_parent_races_rename_and_kill(RefPolicy::Cmpxchg);
}

#[test]
fn dget_parent_races_rename_and_kill_spinlock() {
    dget_parent_races_rename_and_kill(RefPolicy::Spinlock);
}

/// The last `dput` of a hashed entry (which keeps it on the LRU — without a lock, since it is
/// already there and marked referenced), followed by a lookup that takes a reference on the
/// unused entry, race the shrinker, which evicts unused entries. Whatever the order: the entry
/// is either alive — found by the lookup, or kept on the LRU — or dead and gone from the table,
/// never both, and it dies at most once.
#[test]
fn last_dput_and_lookup_race_shrink() {
    model(|| {
        let core = Arc::new(Core::new(
            RefPolicy::Cmpxchg,
            16,
            BUCKETS,
            ident(1, FileKind::Dir).unwrap(),
        ));
        let c_raw = {
            let root = core.root_ref();
            // Through count zero once: now on the LRU and marked referenced.
            drop(core.d_alloc(&root, b"c", H_C, ident(4, FileKind::File), 0));
            assert_eq!(core.nr_unused(), 1);
            core.lookup_ref(&root, b"c", H_C).unwrap().into_raw()
        };
        let core_b = core.clone();
        let b = thread::spawn(move || {
            // Twice: the first pass may only clear the referenced bit.
            core_b.shrink(1);
            core_b.shrink(1);
        });
        // SAFETY: from `into_raw` on a reference of this core, taken back once.
        drop(unsafe { core.ref_from_raw(c_raw) });
        let root = core.root_ref();
        let found = core.lookup_ref(&root, b"c", H_C);
        if let Some(c) = &found {
            assert!(c.ref_count() >= 1, "the lookup got a dead entry");
        }
        b.join().unwrap();
        let again = core.lookup_ref(&root, b"c", H_C);
        match (&found, &again) {
            (Some(_), None) => panic!("the entry found by the lookup was killed"),
            (_, Some(c)) => {
                assert_eq!(core.nr_dentry(), 2);
                assert_eq!(c.ref_count(), 1 + i32::from(found.is_some()));
            }
            (None, None) => {
                assert_eq!(core.nr_dentry(), 1);
                assert_eq!(core.nr_unused(), 0);
            }
        }
        drop((found, again, root));
        core.shrink_all();
        assert_eq!(core.nr_dentry(), 1);
        assert_eq!(core.nr_unused(), 0);
    });
}

/// The last `dput` of a hashed entry races a lookup that takes a new reference, unhashes the
/// entry (as unlink does) and puts it. The entry is killed exactly once, by whoever puts the last
/// reference after it was unhashed — never while the lookup still holds it.
#[test]
fn last_dput_races_lookup_and_unhash() {
    model(|| {
        let core = Arc::new(Core::new(
            RefPolicy::Cmpxchg,
            16,
            BUCKETS,
            ident(1, FileKind::Dir).unwrap(),
        ));
        let c_raw = {
            let root = core.root_ref();
            core.d_alloc(&root, b"c", H_C, ident(4, FileKind::File), 0)
                .into_raw()
        };
        let core_a = core.clone();
        let a = thread::spawn(move || {
            // SAFETY: from `into_raw` on a reference of this core, taken back once.
            drop(unsafe { core_a.ref_from_raw(c_raw) });
        });
        let found = {
            let root = core.root_ref();
            core.lookup_ref(&root, b"c", H_C).map(|c| {
                assert!(c.ref_count() >= 1, "the lookup got a dead entry");
                core.d_drop(&c);
                assert!(c.ref_count() >= 1, "killed while referenced");
            })
        };
        a.join().unwrap();
        let root = core.root_ref();
        match found {
            // Unhashed and unreferenced: dead and gone.
            Some(()) => {
                assert!(core.lookup_ref(&root, b"c", H_C).is_none());
                assert_eq!(core.nr_dentry(), 1);
                assert_eq!(core.nr_unused(), 0);
            }
            // Kept, unused, on the LRU.
            None => {
                assert_eq!(core.nr_dentry(), 2);
                assert_eq!(core.nr_unused(), 1);
            }
        }
        drop(root);
        core.shrink_all();
        assert_eq!(core.nr_dentry(), 1);
    });
}
