//! One test per semantic of the XArray (as `lib/xarray.c` defines them), on small hand-built
//! arrays.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use quire::sync::rcu;
use quire::xarray::{Entry, Found, Mark, NodeReserve, XArray, XaError, MAX_VALUE};

type Xa = XArray<Arc<u64>>;

fn v(x: u64) -> Option<Entry<Arc<u64>>> {
    Some(Entry::Value(x))
}

fn p(x: u64) -> Option<Entry<Arc<u64>>> {
    Some(Entry::Pointer(Arc::new(x)))
}

/// What a load shows: `Some(Ok(pointee))` for a pointer, `Some(Err(value))` for a value.
fn get(xa: &Xa, i: u64) -> Option<Result<u64, u64>> {
    let g = rcu::pin();
    xa.load(i, &g).map(|e| match e {
        Entry::Pointer(p) => Ok(*p),
        Entry::Value(v) => Err(v),
    })
}

fn all(xa: &Xa) -> Vec<(u64, u32)> {
    let g = rcu::pin();
    xa.iter(&g).map(|f| (f.index, f.order)).collect()
}

#[test]
fn store_into_multi_index_entry_replaces_whole_range_and_keeps_order() {
    let xa = Xa::new();
    xa.store_order(64, 4, v(7)).unwrap();
    // Store through an index in the middle.
    let old = xa.store(70, p(9)).unwrap();
    assert_eq!(old.and_then(|e| e.value()), Some(7));
    for i in 64..80 {
        assert_eq!(get(&xa, i), Some(Ok(9)), "index {i}");
        let g = rcu::pin();
        assert_eq!(xa.get_order(i, &g), 4);
    }
    assert_eq!(get(&xa, 63), None);
    assert_eq!(get(&xa, 80), None);
    // Storing nothing dissolves it entirely.
    xa.store(79, None).unwrap();
    for i in 60..84 {
        assert_eq!(get(&xa, i), None);
    }
    assert!(xa.is_empty());
    assert_eq!(xa.node_count(), 0);
    xa.check().unwrap();
}

#[test]
fn unaligned_store_index_is_rounded_down() {
    let xa = Xa::new();
    xa.store_order(1000, 3, v(5)).unwrap(); // 1000 & !7 = 1000 (aligned); use 1003
    xa.store_order(1003, 3, v(6)).unwrap();
    assert_eq!(all(&xa), vec![(1000, 3)]);
    assert_eq!(get(&xa, 1000), Some(Err(6)));
    assert_eq!(get(&xa, 1007), Some(Err(6)));
    assert_eq!(get(&xa, 1008), None);
    // An order-7 store at 200 covers 128..=255.
    xa.store_order(200, 7, v(1)).unwrap();
    assert_eq!(all(&xa), vec![(128, 7), (1000, 3)]);
    xa.check().unwrap();
}

#[test]
fn multi_index_store_carries_union_of_marks_and_marks_belong_to_entry() {
    let xa = Xa::new();
    xa.store(8, v(1)).unwrap();
    xa.store(9, v(2)).unwrap();
    xa.store(15, v(3)).unwrap();
    xa.store(16, v(4)).unwrap(); // outside the range below
    assert!(xa.set_mark(8, Mark::M0));
    assert!(xa.set_mark(15, Mark::M2));
    assert!(xa.set_mark(16, Mark::M1));
    xa.store_order(8, 3, v(10)).unwrap();
    let g = rcu::pin();
    for i in 8..16 {
        assert!(xa.get_mark(i, Mark::M0, &g), "M0 at {i}");
        assert!(!xa.get_mark(i, Mark::M1, &g), "M1 at {i}");
        assert!(xa.get_mark(i, Mark::M2, &g), "M2 at {i}");
    }
    // Marks belong to the whole entry: clear through another index.
    assert!(xa.clear_mark(13, Mark::M0));
    for i in 8..16 {
        assert!(!xa.get_mark(i, Mark::M0, &g));
    }
    assert!(xa.set_mark(11, Mark::M1));
    let marked: Vec<u64> = xa
        .range_marked(0, 100, Mark::M1, &g)
        .map(|f| f.index)
        .collect();
    assert_eq!(marked, vec![8, 16], "one hit per entry, at its first index");
    // Marks on an empty index do nothing.
    assert!(!xa.set_mark(500, Mark::M0));
    assert!(!xa.get_mark(500, Mark::M0, &g));
    drop(g);
    xa.check().unwrap();
}

fn build_mixed() -> Xa {
    let xa = Xa::new();
    xa.store(0, v(0)).unwrap();
    xa.store_order(64, 6, v(1)).unwrap(); // 64..=127, one slot in a shift-6 node
    xa.store_order(256, 8, v(2)).unwrap(); // 256..=511, four slots
    xa.store(600, p(3)).unwrap();
    xa.store_order(4096, 12, v(4)).unwrap(); // 4096..=8191
    xa.store(u64::MAX, v(5)).unwrap();
    xa.set_mark(300, Mark::M1);
    xa.set_mark(u64::MAX, Mark::M1);
    xa
}

#[test]
fn iteration_returns_each_entry_once_at_its_first_index() {
    let xa = build_mixed();
    let expect = vec![
        (0, 0),
        (64, 6),
        (256, 8),
        (600, 0),
        (4096, 12),
        (u64::MAX, 0),
    ];
    assert_eq!(all(&xa), expect);
    let g = rcu::pin();
    // find, starting mid-entry.
    let f = xa.find(300, u64::MAX, &g).unwrap();
    assert_eq!((f.index, f.order, f.entry.value()), (256, 8, Some(2)));
    // find_after skips the rest of the entry holding the index.
    let f = xa.find_after(300, u64::MAX, &g).unwrap();
    assert_eq!(f.index, 600);
    let f = xa.find_after(599, u64::MAX, &g).unwrap();
    assert_eq!(f.index, 600);
    assert_eq!(xa.find_after(u64::MAX, u64::MAX, &g).map(|f| f.index), None);
    // Bounded by max.
    assert_eq!(xa.find(601, 4095, &g).map(|f| f.index), None);
    assert_eq!(xa.find(601, 4096, &g).map(|f| f.index), Some(4096));
    // A range starting mid-entry.
    let mid: Vec<_> = xa.range(5000, u64::MAX, &g).map(|f| f.index).collect();
    assert_eq!(mid, vec![4096, u64::MAX]);
    // Marked iteration.
    let marked: Vec<_> = xa
        .range_marked(0, u64::MAX, Mark::M1, &g)
        .map(|f| f.index)
        .collect();
    assert_eq!(marked, vec![256, u64::MAX]);
    assert_eq!(
        xa.find_marked(257, u64::MAX, Mark::M1, &g).map(|f| f.index),
        Some(256)
    );
    assert_eq!(
        xa.find_after_marked(256, u64::MAX, Mark::M1, &g)
            .map(|f| f.index),
        Some(u64::MAX)
    );
    assert_eq!(
        xa.find_marked(0, u64::MAX, Mark::M0, &g).map(|f| f.index),
        None
    );
    // for_each sees the same.
    let mut seen = Vec::new();
    xa.for_each(0, u64::MAX, None, |f: Found<'_, u64>| {
        seen.push((f.index, f.order));
        ControlFlow::Continue(())
    });
    assert_eq!(seen, expect);
    // ... and stops when told.
    let mut n = 0;
    xa.for_each(0, u64::MAX, None, |_| {
        n += 1;
        if n == 2 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    assert_eq!(n, 2);
}

#[test]
fn iteration_resumes_after_a_pause_while_the_array_changes() {
    let xa = Xa::new();
    for i in 0..200u64 {
        xa.store(i * 3, v(i)).unwrap();
    }
    xa.store_order(1024, 5, v(999)).unwrap();
    let mut seen = Vec::new();
    let mut resume = Some(0);
    let mut round = 0;
    while let Some(start) = resume {
        {
            let g = rcu::pin();
            let mut it = xa.range(start, u64::MAX, &g);
            for f in it.by_ref().take(7) {
                seen.push(f.index);
            }
            resume = it.resume_index();
        }
        // While paused: erase what was already seen, store behind and ahead.
        round += 1;
        if round == 3 {
            xa.erase(0);
            xa.store(1, v(1)).unwrap(); // behind the iteration: not seen
            xa.store(1500, v(2)).unwrap(); // ahead: seen
        }
        if round == 4 {
            // Resume point in the middle of a new multi-index entry: it is reported once.
            let r = resume.unwrap();
            xa.store_order(r + 1, 1, v(3)).unwrap();
        }
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "each entry once, in order");
    assert!(seen.contains(&1500));
    assert!(!seen.contains(&1));
    assert!(seen.contains(&1024));
    assert_eq!(
        seen.iter().filter(|&&i| (1024..1056).contains(&i)).count(),
        1
    );
}

#[test]
fn get_order_at_every_covered_index_and_zero_when_empty() {
    let xa = build_mixed();
    let g = rcu::pin();
    for f in xa.iter(&g).collect::<Vec<_>>() {
        let last = f.last();
        let mut i = f.index;
        loop {
            assert_eq!(xa.get_order(i, &g), f.order, "index {i:#x}");
            if i == last {
                break;
            }
            // Every index for small entries, a stride for big ones.
            i = (i + 1 + (last - f.index) / 97).min(last);
        }
    }
    for i in [1, 63, 128, 255, 512, 601, 4095, 8192, u64::MAX - 1] {
        assert_eq!(xa.get_order(i, &g), 0, "empty {i}");
    }
}

#[test]
fn conflict_walk_yields_each_overlapping_entry_and_a_larger_one_once() {
    let xa = build_mixed();
    let g = rcu::pin();
    let c = |i, o| -> Vec<u64> { xa.conflicts(i, o, &g).map(|f| f.index).collect() };
    assert_eq!(c(300, 2), vec![256], "inside a larger entry: once");
    assert_eq!(c(300, 0), vec![256]);
    assert_eq!(c(0, 9), vec![0, 64, 256]);
    assert_eq!(c(0, 10), vec![0, 64, 256, 600]);
    assert_eq!(c(4200, 12), vec![4096]);
    assert_eq!(c(4200, 13), vec![0, 64, 256, 600, 4096]);
    assert_eq!(c(700, 3), Vec::<u64>::new());
    assert_eq!(c(5, 63), vec![0, 64, 256, 600, 4096]);
}

#[test]
fn split_is_uniform_and_keeps_marks() {
    let xa = Xa::new();
    xa.store_order(4096, 12, p(42)).unwrap();
    xa.set_mark(5000, Mark::M2);
    let before = xa.node_count();
    xa.split(4100, 2).unwrap();
    assert!(xa.node_count() > before);
    let g = rcu::pin();
    let pieces: Vec<_> = xa.range(0, u64::MAX, &g).collect();
    assert_eq!(pieces.len(), 1024);
    for (k, f) in pieces.iter().enumerate() {
        assert_eq!(f.index, 4096 + 4 * k as u64);
        assert_eq!(f.order, 2);
        assert!(matches!(f.entry, Entry::Pointer(&42)));
        assert!(xa.get_mark(f.index + 3, Mark::M2, &g));
        assert!(!xa.get_mark(f.index, Mark::M0, &g));
    }
    drop(g);
    xa.check().unwrap();
    // Same-level split (no nodes needed), values.
    let xa = Xa::new();
    xa.store_order(32, 5, v(8)).unwrap();
    xa.split(40, 3).unwrap();
    assert_eq!(all(&xa), vec![(32, 3), (40, 3), (48, 3), (56, 3)]);
    // Errors, nothing changed.
    assert_eq!(xa.split(40, 4), Err(XaError::BadSplit { have: 3, want: 4 }));
    assert_eq!(xa.split(1000, 0), Err(XaError::NotPresent { index: 1000 }));
    assert_eq!(xa.split(40, 64), Err(XaError::BadOrder { order: 64 }));
    assert_eq!(xa.split(40, 3), Ok(()));
    assert_eq!(all(&xa), vec![(32, 3), (40, 3), (48, 3), (56, 3)]);
}

#[test]
fn split_nodes_are_allocated_before_taking_the_lock() {
    let xa = Xa::new();
    xa.store_order(0, 7, v(1)).unwrap(); // slots 0-1 of a shift-6 node
    let needed = xa.lock().split_needs(5, 0).unwrap();
    assert_eq!(needed, 2);
    // Allocate with the lock released, then split under it.
    let mut reserve = NodeReserve::new(needed - 1);
    assert_eq!(
        xa.lock().split_with(5, 0, &mut reserve),
        Err(XaError::ReserveTooSmall { needed: 2, have: 1 })
    );
    assert_eq!(all(&xa), vec![(0, 7)], "nothing changed");
    let mut reserve = NodeReserve::new(needed);
    xa.lock().split_with(5, 0, &mut reserve).unwrap();
    assert!(reserve.is_empty());
    assert_eq!(all(&xa).len(), 128);
    xa.check().unwrap();
}

#[test]
fn store_range_stores_largest_aligned_pieces() {
    let xa = Xa::new();
    xa.store_range(3, 20, v(1)).unwrap();
    assert_eq!(all(&xa), vec![(3, 0), (4, 2), (8, 3), (16, 2), (20, 0)]);
    xa.store_range(0, u64::MAX, p(2)).unwrap();
    assert_eq!(all(&xa), vec![(0, 63), (1 << 63, 63)]);
    assert!(matches!(get(&xa, 12345), Some(Ok(2))));
    // Errors lose nothing.
    let e = xa.store_range(10, 9, v(1)).unwrap_err();
    assert_eq!(e.error, XaError::EmptyRange { first: 10, last: 9 });
    assert_eq!(e.entry.and_then(|e| e.value()), Some(1));
    let e = xa.store_range(0, 9, v(MAX_VALUE + 1)).unwrap_err();
    assert_eq!(
        e.error,
        XaError::BadValue {
            value: MAX_VALUE + 1
        }
    );
    assert_eq!(all(&xa), vec![(0, 63), (1 << 63, 63)]);
    xa.store_range(0, u64::MAX, None).unwrap();
    assert!(xa.is_empty());
    assert_eq!(xa.node_count(), 0);
}

#[test]
fn the_tree_shrinks_back_after_erasing_everything() {
    let xa = Xa::new();
    let idx: Vec<u64> = (0..3000u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (i % 64))
        .collect();
    for (k, &i) in idx.iter().enumerate() {
        xa.store(i, p(k as u64)).unwrap();
        if k % 7 == 0 {
            xa.set_mark(i, Mark::M0);
        }
    }
    xa.store_order(1 << 20, 14, v(1)).unwrap();
    assert!(xa.node_count() > 100);
    xa.check().unwrap();
    xa.erase(1 << 20);
    for (k, &i) in idx.iter().enumerate() {
        xa.erase(i);
        if k % 250 == 0 {
            xa.check()
                .unwrap_or_else(|e| panic!("after erasing {i:#x}: {e}"));
        }
    }
    assert!(xa.is_empty());
    assert_eq!(xa.node_count(), 0);
    assert!(!xa.marked(Mark::M0));
    // Index 0 alone needs no node; index 1 needs one, which goes away again.
    xa.store(0, v(1)).unwrap();
    assert_eq!(xa.node_count(), 0);
    xa.store(1, v(1)).unwrap();
    assert_eq!(xa.node_count(), 1);
    xa.erase(1);
    assert_eq!(xa.node_count(), 0);
    assert_eq!(get(&xa, 0), Some(Err(1)));
}

#[test]
fn cmpxchg_on_one_index_of_a_multi_index_entry_replaces_or_removes_it_whole() {
    let xa = Xa::new();
    let a = Arc::new(5u64);
    xa.store_order(256, 6, Some(Entry::Pointer(a.clone())))
        .unwrap();
    // Mismatch: nothing changes, the new entry comes back.
    let e = xa.cmpxchg(300, Some(Entry::Value(5)), v(6)).unwrap_err();
    assert_eq!(e.error, XaError::Mismatch { index: 300 });
    assert_eq!(e.entry.and_then(|e| e.value()), Some(6));
    // Match through an inner index: the whole entry is replaced, order kept.
    let old = xa
        .cmpxchg(300, Some(Entry::Pointer(Arc::as_ptr(&a))), v(6))
        .unwrap();
    assert!(matches!(old, Some(Entry::Pointer(ref r)) if **r == 5));
    assert_eq!(all(&xa), vec![(256, 6)]);
    assert_eq!(get(&xa, 319), Some(Err(6)));
    // Remove the whole entry through its last index.
    let old = xa.cmpxchg(319, Some(Entry::Value(6)), None).unwrap();
    assert_eq!(old.and_then(|e| e.value()), Some(6));
    assert!(xa.is_empty());
    // Insert into empty.
    xa.cmpxchg(7, None, v(1)).unwrap();
    assert_eq!(all(&xa), vec![(7, 0)]);
}

#[test]
fn add_returns_shadows_refuses_pointers_and_splits_larger_shadows() {
    let xa = Xa::new();
    // Empty.
    assert_eq!(xa.add(8, 2, Entry::Pointer(Arc::new(1))).unwrap(), None);
    // A pointer in the range: Exists, nothing changed, the entry comes back.
    let e = xa.add(10, 1, Entry::Pointer(Arc::new(2))).unwrap_err();
    assert_eq!(e.error, XaError::Exists { index: 10 });
    assert!(matches!(e.entry, Some(Entry::Pointer(ref a)) if **a == 2));
    assert_eq!(all(&xa), vec![(8, 2)]);
    // Shadows of the same and smaller order: the first is returned, marks are carried.
    xa.store(17, v(70)).unwrap();
    xa.store(18, v(71)).unwrap();
    xa.set_mark(18, Mark::M1);
    xa.store_order(20, 2, v(72)).unwrap();
    assert_eq!(
        xa.add(16, 2, Entry::Pointer(Arc::new(3))).unwrap(),
        Some(70)
    );
    assert_eq!(
        xa.add(20, 2, Entry::Pointer(Arc::new(4))).unwrap(),
        Some(72)
    );
    let g = rcu::pin();
    assert!(xa.get_mark(16, Mark::M1, &g));
    drop(g);
    // A larger shadow is split: the rest keeps the shadow at the new order.
    xa.store_order(4096, 9, v(99)).unwrap(); // 512 indices, in a shift-6 node: needs 8 nodes
    assert_eq!(
        xa.add(4100, 2, Entry::Pointer(Arc::new(5))).unwrap(),
        Some(99)
    );
    assert_eq!(get(&xa, 4100), Some(Ok(5)));
    assert_eq!(get(&xa, 4103), Some(Ok(5)));
    assert_eq!(get(&xa, 4096), Some(Err(99)));
    assert_eq!(get(&xa, 4607), Some(Err(99)));
    let g = rcu::pin();
    assert_eq!(xa.get_order(4096, &g), 2);
    assert_eq!(xa.get_order(4600, &g), 2);
    drop(g);
    // The same with the multi-walk insert.
    xa.store_order(1 << 20, 8, v(98)).unwrap();
    assert_eq!(
        xa.add_multi_walk(1 << 20, 0, Entry::Pointer(Arc::new(6)))
            .unwrap(),
        Some(98)
    );
    assert_eq!(get(&xa, (1 << 20) + 1), Some(Err(98)));
    // Bad input.
    let e = xa.add(3, 1, Entry::Value(1)).unwrap_err();
    assert_eq!(e.error, XaError::Unaligned { index: 3, order: 1 });
    let e = xa.add(0, 64, Entry::Value(1)).unwrap_err();
    assert_eq!(e.error, XaError::BadOrder { order: 64 });
    let e = xa.add(1 << 30, 0, Entry::Value(MAX_VALUE + 1)).unwrap_err();
    assert_eq!(
        e.error,
        XaError::BadValue {
            value: MAX_VALUE + 1
        }
    );
    xa.check().unwrap();
}

#[test]
fn xa_state_walks_once_and_works_at_its_position() {
    let xa = Xa::new();
    for i in 0..100 {
        xa.store(i, v(i)).unwrap();
    }
    let mut lock = xa.lock();
    let mut st = lock.state(10);
    assert_eq!(st.load().and_then(|e| e.value()), Some(10));
    let old = st.store(p(1000)).unwrap();
    assert_eq!(old.and_then(|e| e.value()), Some(10));
    assert!(st.set_mark(Mark::M0));
    assert!(st.get_mark(Mark::M0));
    assert_eq!(st.advance().and_then(|e| e.value()), Some(11));
    st.set_index(99);
    assert_eq!(st.load().and_then(|e| e.value()), Some(99));
    st.store_order(2, v(5)).unwrap(); // 96..=99
    assert_eq!(st.get_order(), 2);
    st.set_index(200);
    assert!(st.load().is_none());
    st.store(v(7)).unwrap();
    drop(lock);
    let g = rcu::pin();
    assert!(xa.get_mark(10, Mark::M0, &g));
    assert_eq!(xa.get_order(97, &g), 2);
    assert!(matches!(xa.load(200, &g), Some(Entry::Value(7))));
    drop(g);
    xa.check().unwrap();
}

#[test]
fn read_cursor_reload_sees_changes_and_shrinks() {
    let xa = Xa::new();
    xa.store(0, p(1)).unwrap();
    xa.store(70, p(2)).unwrap();
    let g = rcu::pin();
    let mut c = xa.cursor(0, &g);
    let first = c.load().unwrap().as_raw();
    assert_eq!(c.reload().unwrap().as_raw(), first);
    // Erasing 70 shrinks the tree: the entry of index 0 moves to the head.
    xa.erase(70);
    assert_eq!(xa.node_count(), 0);
    assert_eq!(
        c.reload().unwrap().as_raw(),
        first,
        "still there, found again"
    );
    xa.store(0, v(3)).unwrap();
    assert_eq!(c.reload().and_then(|e| e.value()), Some(3));
    c.set_index(5);
    assert!(c.load().is_none());
    assert_eq!(c.order(), 0);
}

struct Counted {
    _value: u64,
    drops: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn every_pointer_is_dropped_exactly_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let mk = |x| {
        Some(Entry::Pointer(Box::new(Counted {
            _value: x,
            drops: drops.clone(),
        })))
    };
    {
        let xa: XArray<Box<Counted>> = XArray::new();
        for i in 0..500 {
            xa.store(i * 5, mk(i)).unwrap();
        }
        // Replaced and erased pointers are retired through the epoch.
        for i in 0..100 {
            drop(xa.store(i * 5, mk(1000 + i)).unwrap());
        }
        for i in 100..200 {
            drop(xa.erase(i * 5));
        }
        // A subtree replaced by one large entry.
        drop(xa.store_order(0, 12, mk(7)).unwrap());
        // Dropping the array frees the rest at once.
    }
    // 500 + 100 + 1 pointers were created.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while drops.load(Ordering::SeqCst) < 601 && std::time::Instant::now() < deadline {
        rcu::pin().flush();
        std::thread::yield_now();
    }
    assert_eq!(drops.load(Ordering::SeqCst), 601);
}

#[test]
fn retired_pointers_outlive_readers_that_hold_a_guard() {
    let drops = Arc::new(AtomicUsize::new(0));
    let xa: XArray<Box<Counted>> = XArray::new();
    xa.store(
        3,
        Some(Entry::Pointer(Box::new(Counted {
            _value: 3,
            drops: drops.clone(),
        }))),
    )
    .unwrap();
    let g = rcu::pin();
    let seen = xa.load(3, &g).unwrap().pointer().unwrap();
    drop(xa.erase(3));
    for _ in 0..1000 {
        rcu::pin().flush();
    }
    // Still readable: the guard holds the grace period back.
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    assert_eq!(seen._value, 3);
    drop(g);
}

/// Nodes that come to hold only values are listed, oldest first; a pointer or a child takes a
/// node off; deleting a listed node removes its values, frees it and its emptied ancestors.
#[test]
fn value_only_nodes_are_listed_and_can_be_deleted() {
    use quire::xarray::NodeList;
    let list = Arc::new(NodeList::new());
    let xa: XArray<Arc<u64>> = XArray::with_node_list(list.clone(), 42);
    // Leaf 0 (indices 0..64) gets values, leaf 1 (64..128) a pointer and values.
    for i in 0..10u64 {
        xa.store(i, Some(Entry::Value(i))).unwrap();
    }
    xa.store(64, Some(Entry::Pointer(Arc::new(1)))).unwrap();
    xa.store(65, Some(Entry::Value(65))).unwrap();
    assert_eq!(list.len(), 1, "only the leaf of values is listed");
    assert_eq!(list.tokens(), vec![42]);
    // Replacing the pointer by a value lists the second leaf after the first.
    xa.store(64, Some(Entry::Value(64))).unwrap();
    assert_eq!(list.len(), 2);
    xa.check().unwrap();
    // A pointer arriving takes leaf 0 off again.
    xa.store(3, Some(Entry::Pointer(Arc::new(3)))).unwrap();
    assert_eq!(list.len(), 1);
    let oldest = list.rotate_oldest().unwrap();
    assert_eq!((oldest.token, oldest.base, oldest.shift), (42, 64, 0));
    let nodes = xa.node_count();
    assert!(xa.delete_listed(&oldest));
    assert!(!xa.delete_listed(&oldest), "a node is deleted once");
    assert!(list.is_empty());
    // The leaf is freed, and the root, left with leaf 0 alone, collapses onto it.
    assert_eq!((nodes, xa.node_count()), (3, 1));
    let g = rcu::pin();
    assert_eq!(xa.load(64, &g), None);
    assert_eq!(xa.load(65, &g), None);
    assert_eq!(
        xa.load(2, &g),
        Some(Entry::Value(2)),
        "other leaves keep theirs"
    );
    drop(g);
    xa.check().unwrap();
    // A stale description (the node changed since it was listed) deletes nothing.
    xa.store(3, Some(Entry::Value(3))).unwrap();
    let listed = list.rotate_oldest().unwrap();
    xa.store(5, Some(Entry::Pointer(Arc::new(5)))).unwrap();
    assert!(!xa.delete_listed(&listed));
    xa.check().unwrap();
}
