#![cfg(loom)]
//! Loom models of the XArray's lock-free reads (nodes have 4 slots under `--cfg loom`).
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p quire-cache --release --test loom_xarray`.

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use quire::sync::rcu;
use quire::xarray::{Entry, XArray};

mod loom_support;
use loom_support::{fails, model};

/// A reader loads index 0 and index 5 while the writer erases 5 — which deletes a leaf and
/// shrinks the tree twice, moving the entry of index 0 into the head — and then stores over
/// index 0. The reader sees only values that were there, never a freed node, and in order: once
/// it sees the new value of 0, index 5 is gone.
#[test]
fn reader_races_erase_shrink_and_store() {
    model(|| {
        let xa: Arc<XArray<Box<u64>>> = Arc::new(XArray::new());
        xa.store(0, Some(Entry::Value(10))).unwrap();
        xa.store(5, Some(Entry::Value(50))).unwrap();
        assert_eq!(xa.node_count(), 3);
        let writer = {
            let xa = xa.clone();
            thread::spawn(move || {
                xa.erase(5);
                xa.store(0, Some(Entry::Value(11))).unwrap();
            })
        };
        {
            let g = rcu::pin();
            let a = xa.load(0, &g).and_then(|e| e.value());
            let b = xa.load(5, &g).and_then(|e| e.value());
            assert!(a == Some(10) || a == Some(11), "index 0 read {a:?}");
            assert!(b == Some(50) || b.is_none(), "index 5 read {b:?}");
            if a == Some(11) {
                assert_eq!(b, None, "5 was erased before 0 was replaced");
            }
        }
        writer.join().unwrap();
        assert_eq!(xa.node_count(), 0);
        let g = rcu::pin();
        assert_eq!(xa.load(0, &g).and_then(|e| e.value()), Some(11));
        assert!(xa.load(5, &g).is_none());
    });
}

struct Item {
    id: u64,
    freed: Arc<AtomicBool>,
}

impl Drop for Item {
    fn drop(&mut self) {
        self.freed.store(true, Ordering::SeqCst);
    }
}

/// A reader loads a pointer, keeps it while it re-checks the slot through its cursor, while the
/// writer replaces it and then erases another index (shrinking the tree). The pointer the reader
/// holds is not freed before its guard is dropped, and the re-check sees either the same pointer
/// or a change.
#[test]
fn pointer_stays_valid_while_the_writer_replaces_it_and_shrinks() {
    model(|| {
        let freed1 = Arc::new(AtomicBool::new(false));
        let freed2 = Arc::new(AtomicBool::new(false));
        let xa: Arc<XArray<Box<Item>>> = Arc::new(XArray::new());
        let one = Box::new(Item {
            id: 1,
            freed: freed1.clone(),
        });
        let one_ptr = &*one as *const Item;
        xa.store(1, Some(Entry::Pointer(one))).unwrap();
        xa.store(6, Some(Entry::Value(6))).unwrap();
        let writer = {
            let xa = xa.clone();
            let freed2 = freed2.clone();
            thread::spawn(move || {
                let old = xa.store(
                    1,
                    Some(Entry::Pointer(Box::new(Item {
                        id: 2,
                        freed: freed2,
                    }))),
                );
                drop(old);
                xa.erase(6);
            })
        };
        {
            let g = rcu::pin();
            let mut c = xa.cursor(1, &g);
            if let Some(Entry::Pointer(item)) = c.load() {
                let is_one = std::ptr::eq(item, one_ptr);
                let freed = if is_one { &freed1 } else { &freed2 };
                assert!(
                    !freed.load(Ordering::SeqCst),
                    "an item was freed under a guard"
                );
                assert_eq!(item.id, if is_one { 1 } else { 2 });
                match c.reload() {
                    Some(Entry::Pointer(again)) => {
                        if !std::ptr::eq(again, item) {
                            // Changed: only from 1 to 2.
                            assert!(is_one);
                            assert_eq!(again.id, 2);
                        }
                    }
                    other => panic!(
                        "index 1 is never empty, reloaded {:?}",
                        other.map(|e| e.value())
                    ),
                }
                assert!(!freed.load(Ordering::SeqCst));
            } else {
                panic!("index 1 is never empty");
            }
        }
        writer.join().unwrap();
        assert!(!freed2.load(Ordering::SeqCst));
        drop(xa);
        assert!(freed1.load(Ordering::SeqCst) && freed2.load(Ordering::SeqCst));
    });
}

/// A multi-index store over existing entries (canonical slot first, then its sibling) races a
/// reader of the second index: it sees the old entry or the new one, never a sibling of
/// something else.
#[test]
fn reader_of_a_sibling_races_a_multi_index_store() {
    model(|| {
        let xa: Arc<XArray<Box<u64>>> = Arc::new(XArray::new());
        xa.store(4, Some(Entry::Value(4))).unwrap();
        xa.store(5, Some(Entry::Value(5))).unwrap();
        // The reader is the spawned thread (see tests/loom_support/mod.rs).
        let reader = {
            let xa = xa.clone();
            thread::spawn(move || {
                let g = rcu::pin();
                let got = xa.load(5, &g).and_then(|e| e.value());
                assert!(got == Some(5) || got == Some(45), "index 5 read {got:?}");
                let first: Vec<(u64, Option<u64>)> = xa
                    .range(0, 8, &g)
                    .map(|f| (f.index, f.entry.value()))
                    .collect();
                // Entries replaced while the iteration runs may or may not be seen; nothing
                // else may appear, and nothing twice.
                assert!(
                    first == vec![(4, Some(4)), (5, Some(5))]
                        || first == vec![(4, Some(4))]
                        || first == vec![(4, Some(45))]
                        || first == vec![(4, Some(45)), (5, Some(5))],
                    "iteration saw {first:?}"
                );
            })
        };
        xa.store_order(4, 1, Some(Entry::Value(45))).unwrap();
        reader.join().unwrap();
    });
}

/// The re-check of a lock-free lookup: a reader loads a pointer through a node that the
/// writer then shrinks away (the entry moves to the head), after which the writer erases the
/// entry and says so. A reader that learns of the erase (as a page-cache reader learns of it by
/// failing or succeeding to take a reference) must not find the old pointer again when it
/// re-checks through its cursor: the stale slot holds a retry entry.
#[test]
fn reload_after_removal_never_returns_the_stale_pointer() {
    model(|| {
        let freed = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let xa: Arc<XArray<Box<Item>>> = Arc::new(XArray::new());
        xa.store(
            0,
            Some(Entry::Pointer(Box::new(Item {
                id: 1,
                freed: freed.clone(),
            }))),
        )
        .unwrap();
        xa.store(5, Some(Entry::Value(5))).unwrap();
        let writer = {
            let (xa, done) = (xa.clone(), done.clone());
            thread::spawn(move || {
                xa.erase(5); // shrink: the entry of index 0 moves to the head
                drop(xa.erase(0));
                done.store(true, Ordering::Release);
            })
        };
        {
            let g = rcu::pin();
            let mut c = xa.cursor(0, &g);
            let first = c.load().map(|e| e.as_raw());
            if let Some(Entry::Pointer(p)) = first {
                // SAFETY: loaded under `g`, which is still held.
                assert_eq!(unsafe { (*p).id }, 1);
                assert!(!freed.load(Ordering::SeqCst));
            }
            if done.load(Ordering::Acquire) {
                let again = c.reload().map(|e| e.as_raw());
                assert!(again.is_none(), "the re-check found an erased entry");
            }
        }
        writer.join().unwrap();
    });
}

type SplitXa = XArray<std::sync::Arc<u64>>;

/// An entry of order 3 at 8 (with 4-slot nodes: a canonical slot for 8..=11 and a sibling for
/// 12..=15 in a shift-2 node) split at 13 into pieces of `order` while a spawned reader (see
/// tests/loom_support/mod.rs) runs `read` under a guard. Returns the array after both.
fn split_races(order: u32, read: fn(&SplitXa, &rcu::Guard)) -> Arc<SplitXa> {
    let xa: Arc<SplitXa> = Arc::new(XArray::new());
    xa.store_order(8, 3, Some(Entry::Value(8))).unwrap();
    let reader = {
        let xa = xa.clone();
        thread::spawn(move || read(&xa, &rcu::pin()))
    };
    xa.split(13, order).unwrap();
    reader.join().unwrap();
    xa
}

/// A split (its nodes allocated outside the lock, then linked siblings first) races a reader:
/// every index of the entry reads the same value throughout, and an iteration reports the
/// whole entry or disjoint pieces of it.
#[test]
fn reader_races_a_split() {
    model(|| {
        let xa = split_races(0, |xa, g| {
            assert_eq!(xa.load(13, g).and_then(|e| e.value()), Some(8));
            let mut next = 8;
            for f in xa.range(0, 100, g) {
                assert_eq!(f.entry.value(), Some(8));
                assert!(f.index >= next, "pieces overlap");
                assert!(f.last() <= 15);
                next = f.last() + 1;
            }
        });
        let g = rcu::pin();
        assert_eq!(xa.range(0, 100, &g).count(), 8);
    });
}

/// An iteration that starts inside an entry follows a sibling slot to the entry's canonical
/// slot while a split to order 2 turns the entry into pieces that keep its word: the order read
/// after the step may be a piece's that does not cover the start. The iterator must look again
/// instead of reporting a piece that ends before its start (a real failure, first found by
/// `xarray_stress`).
fn iteration_from_inside_an_entry(xa: &SplitXa, g: &rcu::Guard, broken: bool) {
    let mut it = if broken {
        xa.broken_range_without_cover_check(13, 100, g)
    } else {
        xa.range(13, 100, g)
    };
    let f = it.next().expect("the entry or its piece covers 13");
    assert_eq!(f.entry.value(), Some(8));
    assert!(
        f.index <= 13 && f.last() >= 13,
        "reported {}+{} for a range that starts at 13",
        f.index,
        f.order
    );
    assert!(it.next().is_none());
}

#[test]
fn iteration_from_inside_an_entry_races_a_split_that_keeps_the_word() {
    model(|| {
        split_races(2, |xa, g| iteration_from_inside_an_entry(xa, g, false));
    });
}

#[test]
fn the_model_catches_an_iteration_without_the_cover_check() {
    assert!(fails(|| {
        split_races(2, |xa, g| iteration_from_inside_an_entry(xa, g, true));
    }));
}

/// The insert of technique 4 over a larger shadow drops the lock to allocate the split's nodes;
/// another writer replaces the shadow meanwhile by a larger one, whose split needs more nodes.
/// The insert notices, starts over (allocating again) and returns the shadow it really
/// replaced; the end state is one of the two serial orders.
#[test]
fn add_over_a_larger_shadow_races_a_writer_that_replaces_it() {
    model(|| {
        let xa: Arc<XArray<Box<u64>>> = Arc::new(XArray::new());
        // Order 3 with 4-slot nodes: two slots of a shift-2 node; splitting it to order 0
        // needs two nodes, allocated outside the lock.
        xa.store_order(8, 3, Some(Entry::Value(3))).unwrap();
        let other = {
            let xa = xa.clone();
            thread::spawn(move || {
                xa.store_order(0, 4, Some(Entry::Value(99)))
                    .unwrap()
                    .and_then(|e| e.value())
            })
        };
        let shadow = xa.add(12, 0, Entry::Pointer(Box::new(7))).unwrap();
        let replaced = other.join().unwrap();
        let g = rcu::pin();
        let at = |i| xa.load(i, &g).map(|e| e.value());
        match shadow {
            // The insert went first; the other store then replaced everything in 0..=15.
            Some(3) => {
                assert_eq!(replaced, Some(3));
                assert_eq!(xa.get_order(12, &g), 4);
                assert_eq!(at(12), Some(Some(99)));
            }
            // The other store went first: the insert split the new shadow.
            Some(99) => {
                assert_eq!(replaced, Some(3));
                assert_eq!(at(12), Some(None), "the pointer is there");
                assert_eq!(at(13), Some(Some(99)));
                assert_eq!(xa.get_order(13, &g), 0);
            }
            other => panic!("the insert returned {other:?}"),
        }
    });
}

/// An entry of order 3 at 8 (a canonical slot for 8..=11 and a sibling for 12..=15 in a shift-2
/// node) is replaced by a smaller entry of order 2 at 8 (the run is dissolved, canonical slot
/// first, then the new entry is stored in the canonical slot), which is then replaced by an
/// entry of order 3 again, while a spawned reader loads 13. A load that follows the sibling of
/// 13 to slot 2 must not report the order-2 entry found there, which never covered 13 (the
/// `xarray_stress` failure "index … outside stored range …"): after the step it looks at 13's
/// slot again, then at the canonical slot again, and starts over if either changed. The second
/// store checks the second look at the canonical slot: it puts the sibling back in 13's slot.
fn load_races_a_smaller_store(read: fn(&SplitXa, &rcu::Guard) -> Option<u64>) {
    let xa: Arc<SplitXa> = Arc::new(XArray::new());
    xa.store_order(8, 3, Some(Entry::Value(8))).unwrap();
    let reader = {
        let xa = xa.clone();
        thread::spawn(move || read(&xa, &rcu::pin()))
    };
    xa.store_order(8, 2, Some(Entry::Value(82))).unwrap();
    xa.store_order(8, 3, Some(Entry::Value(83))).unwrap();
    let seen = reader.join().unwrap();
    assert!(
        seen == Some(8) || seen.is_none() || seen == Some(83),
        "index 13 read {seen:?}, an entry that never covered it"
    );
    let g = rcu::pin();
    assert_eq!(xa.load(13, &g).and_then(|e| e.value()), Some(83));
}

#[test]
fn load_through_a_sibling_races_a_smaller_store() {
    model(|| {
        load_races_a_smaller_store(|xa, g| xa.load(13, g).and_then(|e| e.value()));
    });
}

#[test]
fn the_model_catches_a_load_without_the_sibling_recheck() {
    assert!(fails(|| {
        load_races_a_smaller_store(|xa, g| {
            xa.broken_load_without_sibling_recheck(13, g)
                .and_then(|e| e.value())
        });
    }));
}

/// A reader loads 8 through a cursor and then asks for the order of what it loaded, while the
/// writer replaces the order-2 entry at 8 by an order-3 entry (same canonical slot, one more
/// sibling). The order counted from the node after the load may be the new entry's: the cursor
/// must not report order 3 for the order-2 entry it loaded (the `xarray_stress` failure
/// "piece …+9 outside …+8").
#[test]
fn cursor_order_races_a_larger_store_in_the_same_slot() {
    model(|| {
        let xa: Arc<SplitXa> = Arc::new(XArray::new());
        xa.store_order(8, 2, Some(Entry::Value(82))).unwrap();
        let reader = {
            let xa = xa.clone();
            thread::spawn(move || {
                let g = rcu::pin();
                let mut c = xa.cursor(8, &g);
                let v = c.load().and_then(|e| e.value());
                let order = c.order();
                match v {
                    Some(82) => assert!(order <= 2, "order {order} for the order-2 entry"),
                    Some(83) => assert!(order <= 3),
                    other => panic!("index 8 read {other:?}"),
                }
            })
        };
        xa.store_order(8, 3, Some(Entry::Value(83))).unwrap();
        reader.join().unwrap();
    });
}
