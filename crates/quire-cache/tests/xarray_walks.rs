//! Tree walks are counted, not assumed (rule 8 of docs/RULES.md). The counters are global to the
//! process, so this file holds a single test: nothing else walks while it counts.

use std::sync::Arc;

use quire::stats::{self, Event};
use quire::sync::rcu;
use quire::xarray::{Entry, Mark, XArray};

fn walks<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let before = stats::read(Event::XaWalks);
    let r = f();
    (stats::read(Event::XaWalks) - before, r)
}

#[test]
fn walks_per_operation() {
    let xa: XArray<Arc<u64>> = XArray::new();
    let page = Arc::new(1u64);
    // Shadows: order 0 at 0..4096, order 2 at 8192..12288.
    for i in 0..4096u64 {
        xa.store(i, Some(Entry::Value(i))).unwrap();
    }
    for i in (8192..12288u64).step_by(4) {
        xa.store_order(i, 2, Some(Entry::Value(i))).unwrap();
    }
    // Single walk: exactly one per insert over same-order shadows, smaller shadows, or empty.
    let (n, _) = walks(|| {
        for i in 0..1024u64 {
            assert_eq!(xa.add(i, 0, Entry::Pointer(page.clone())).unwrap(), Some(i));
        }
    });
    assert_eq!(n, 1024, "order 0 over order-0 shadows");
    let (n, _) = walks(|| {
        for i in (8192..9216u64).step_by(4) {
            assert_eq!(xa.add(i, 2, Entry::Pointer(page.clone())).unwrap(), Some(i));
        }
    });
    assert_eq!(n, 256, "order 2 over order-2 shadows");
    let (n, _) = walks(|| {
        for i in (1024..2048u64).step_by(4) {
            assert_eq!(xa.add(i, 2, Entry::Pointer(page.clone())).unwrap(), Some(i));
        }
    });
    assert_eq!(n, 256, "order 2 over order-0 shadows");
    let (n, _) = walks(|| xa.add(1 << 30, 0, Entry::Pointer(page.clone())).unwrap());
    assert_eq!(n, 1, "into an empty range");
    let (n, r) = walks(|| xa.add(5, 0, Entry::Pointer(page.clone())));
    assert!(r.is_err());
    assert_eq!(n, 1, "an existing pointer");

    // Multi walk (the "before"): three per insert over a shadow, two into empty.
    let (n, _) = walks(|| {
        for i in 2048..3072u64 {
            assert_eq!(
                xa.add_multi_walk(i, 0, Entry::Pointer(page.clone()))
                    .unwrap(),
                Some(i)
            );
        }
    });
    assert_eq!(n, 3 * 1024);
    let (n, _) = walks(|| {
        for i in (9216..10240u64).step_by(4) {
            assert_eq!(
                xa.add_multi_walk(i, 2, Entry::Pointer(page.clone()))
                    .unwrap(),
                Some(i)
            );
        }
    });
    assert_eq!(n, 3 * 256);
    let (n, _) = walks(|| {
        xa.add_multi_walk(1 << 31, 0, Entry::Pointer(page.clone()))
            .unwrap()
    });
    assert_eq!(n, 2);

    // A larger shadow needs a split: allocate unlocked and walk again.
    xa.store_order(1 << 40, 9, Some(Entry::Value(7))).unwrap();
    let (n, r) = walks(|| xa.add(1 << 40, 0, Entry::Pointer(page.clone())).unwrap());
    assert_eq!(r, Some(7));
    assert_eq!(n, 2, "one walk finds the shadow, one more after allocating");
    // A same-level split needs no allocation: still one walk.
    xa.store_order(1 << 41, 3, Some(Entry::Value(8))).unwrap();
    let (n, r) = walks(|| xa.add(1 << 41, 0, Entry::Pointer(page.clone())).unwrap());
    assert_eq!(r, Some(8));
    assert_eq!(n, 1);

    // The writer's cursor walks once for several things at one index, and not at all to move
    // within the same node.
    let (n, _) = walks(|| {
        let mut lock = xa.lock();
        let mut st = lock.state(3500);
        assert_eq!(st.load().and_then(|e| e.value()), Some(3500));
        assert_eq!(st.get_order(), 0);
        st.store(Some(Entry::Value(1))).unwrap();
        assert!(st.set_mark(Mark::M0));
        assert!(st.get_mark(Mark::M0));
        for i in 3501..3540 {
            assert_eq!(st.advance().and_then(|e| e.value()), Some(i));
        }
    });
    assert_eq!(n, 1);

    // A lock-free load is one walk; the re-check is none.
    let g = rcu::pin();
    let (n, _) = walks(|| {
        let mut c = xa.cursor(3600, &g);
        assert!(c.load().is_some());
        assert!(c.reload().is_some());
        assert!(c.reload().is_some());
    });
    assert_eq!(n, 1);
}
