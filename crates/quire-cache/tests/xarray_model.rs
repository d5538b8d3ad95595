//! The XArray against a plain model: a `BTreeMap` from each entry's first index to its order,
//! value and marks. Every operation is applied to both and its result compared; after each one
//! the whole array is compared with the model (loads, orders and marks at every entry's edges,
//! full and marked iteration) and its internal invariants are checked.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use proptest::prelude::*;
use quire::sync::rcu;
use quire::xarray::{
    split_nodes, Entry, Mark, NodeList, Retired, XArray, XaError, MAX_SPLIT_NODES, MAX_VALUE,
};

type Xa = XArray<Arc<u64>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    Ptr(u64),
    Value(u64),
}

/// What an op stores: a fresh pointer, a value, or nothing.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Ptr,
    Value(u64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct MEntry {
    order: u32,
    val: Val,
    marks: u8,
}

fn span(order: u32) -> u64 {
    if order >= 64 {
        u64::MAX
    } else {
        (1u64 << order) - 1
    }
}

#[derive(Default)]
struct Model {
    map: BTreeMap<u64, MEntry>,
    ptrs: HashMap<u64, Arc<u64>>,
    next_id: u64,
}

impl Model {
    fn containing(&self, i: u64) -> Option<(u64, MEntry)> {
        let (&s, e) = self.map.range(..=i).next_back()?;
        (s + span(e.order) >= i).then(|| (s, e.clone()))
    }

    /// Starts of the entries overlapping `a ..= b`, in order.
    fn overlapping(&self, a: u64, b: u64) -> Vec<u64> {
        let mut v = Vec::new();
        if let Some((s, _)) = self.containing(a) {
            v.push(s);
        }
        for (&s, _) in self.map.range(a..=b) {
            if v.last() != Some(&s) {
                v.push(s);
            }
        }
        v
    }

    /// Removes every entry overlapping the range; returns the first value and the marks union.
    fn remove_overlapping(&mut self, a: u64, b: u64) -> (Option<Val>, u8) {
        let mut first = None;
        let mut union = 0;
        for s in self.overlapping(a, b) {
            let e = self.map.remove(&s).unwrap();
            first.get_or_insert(e.val);
            union |= e.marks;
        }
        (first, union)
    }

    fn store_order(&mut self, index: u64, order: u32, val: Option<Val>) -> Option<Val> {
        let start = index & !span(order);
        let (first, union) = self.remove_overlapping(start, start + span(order));
        if let Some(val) = val {
            self.map.insert(
                start,
                MEntry {
                    order,
                    val,
                    marks: union,
                },
            );
        }
        first
    }

    fn store(&mut self, index: u64, val: Option<Val>) -> Option<Val> {
        match self.containing(index) {
            Some((s, e)) => {
                match val {
                    Some(val) => {
                        self.map.get_mut(&s).unwrap().val = val;
                    }
                    None => {
                        self.map.remove(&s);
                    }
                }
                Some(e.val)
            }
            None => {
                if let Some(val) = val {
                    self.map.insert(
                        index,
                        MEntry {
                            order: 0,
                            val,
                            marks: 0,
                        },
                    );
                }
                None
            }
        }
    }

    fn split(&mut self, start: u64, order: u32) {
        let e = self.map.remove(&start).unwrap();
        let mut i = start;
        loop {
            self.map.insert(i, MEntry { order, ..e.clone() });
            if i + span(order) >= start + span(e.order) {
                break;
            }
            i += span(order) + 1;
        }
    }

    fn mint(&mut self, kind: Kind) -> (Val, Entry<Arc<u64>>) {
        match kind {
            Kind::Value(v) => (Val::Value(v), Entry::Value(v)),
            Kind::Ptr => {
                self.next_id += 1;
                let id = self.next_id;
                let a = Arc::new(id);
                self.ptrs.insert(id, a.clone());
                (Val::Ptr(id), Entry::Pointer(a))
            }
        }
    }

    fn raw(&self, v: Val) -> Entry<*const u64> {
        match v {
            Val::Ptr(id) => Entry::Pointer(Arc::as_ptr(&self.ptrs[&id])),
            Val::Value(v) => Entry::Value(v),
        }
    }
}

fn val_of(e: Entry<&u64>) -> Val {
    match e {
        Entry::Pointer(p) => Val::Ptr(*p),
        Entry::Value(v) => Val::Value(v),
    }
}

fn old_of(e: Option<Entry<Retired<Arc<u64>>>>) -> Option<Val> {
    e.map(|e| match e {
        Entry::Pointer(p) => Val::Ptr(*p),
        Entry::Value(v) => Val::Value(v),
    })
}

#[derive(Clone, Debug)]
enum Op {
    /// Rotate the node list `skip` times, then delete the oldest listed node (arrays with a
    /// node list only).
    DeleteListed {
        skip: usize,
    },
    Store {
        index: u64,
        kind: Option<Kind>,
    },
    StoreOrder {
        index: u64,
        order: u32,
        kind: Option<Kind>,
    },
    StoreRange {
        first: u64,
        len: u64,
        kind: Option<Kind>,
    },
    Erase {
        index: u64,
    },
    Add {
        index: u64,
        order: u32,
        kind: Kind,
        aligned: bool,
        multi: bool,
    },
    SetMark {
        index: u64,
        mark: Mark,
    },
    ClearMark {
        index: u64,
        mark: Mark,
    },
    Split {
        index: u64,
        down: u32,
    },
    CmpXchg {
        index: u64,
        expect_current: bool,
        kind: Option<Kind>,
    },
    Cursor {
        index: u64,
        kind: Option<Kind>,
        mark: Mark,
    },
    Find {
        start: u64,
        len: u64,
        mark: Option<Mark>,
    },
    FindAfter {
        index: u64,
        mark: Option<Mark>,
    },
    Conflicts {
        index: u64,
        order: u32,
    },
    Paused {
        every: usize,
        mark: Option<Mark>,
    },
}

fn index() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..300,
        4 => 0u64..20_000,
        1 => (u64::MAX - 300)..=u64::MAX,
        1 => (1u64 << 40)..(1u64 << 40) + 300,
    ]
}

fn order() -> impl Strategy<Value = u32> {
    prop_oneof![8 => 0u32..=3, 5 => 0u32..=13, 1 => 58u32..=63]
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        3 => Just(Kind::Ptr),
        3 => (0u64..1000).prop_map(Kind::Value),
        1 => Just(Kind::Value(MAX_VALUE)),
        1 => Just(Kind::Value(MAX_VALUE + 1)),
    ]
}

fn mark() -> impl Strategy<Value = Mark> {
    prop_oneof![Just(Mark::M0), Just(Mark::M1), Just(Mark::M2)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (index(), proptest::option::weighted(0.85, kind()))
            .prop_map(|(index, kind)| Op::Store { index, kind }),
        5 => (index(), order(), proptest::option::weighted(0.85, kind()))
            .prop_map(|(index, order, kind)| Op::StoreOrder { index, order, kind }),
        1 => (index(), 0u64..200, proptest::option::weighted(0.8, kind()))
            .prop_map(|(first, len, kind)| Op::StoreRange { first, len, kind }),
        3 => index().prop_map(|index| Op::Erase { index }),
        5 => (index(), 0u32..=13, kind(), proptest::bool::weighted(0.9), any::<bool>())
            .prop_map(|(index, order, kind, aligned, multi)| Op::Add { index, order, kind, aligned, multi }),
        3 => (index(), mark()).prop_map(|(index, mark)| Op::SetMark { index, mark }),
        2 => (index(), mark()).prop_map(|(index, mark)| Op::ClearMark { index, mark }),
        2 => (index(), 0u32..=8).prop_map(|(index, down)| Op::Split { index, down }),
        2 => (index(), any::<bool>(), proptest::option::weighted(0.8, kind()))
            .prop_map(|(index, expect_current, kind)| Op::CmpXchg { index, expect_current, kind }),
        2 => (index(), proptest::option::weighted(0.8, kind()), mark())
            .prop_map(|(index, kind, mark)| Op::Cursor { index, kind, mark }),
        2 => (index(), 0u64..5000, proptest::option::of(mark()))
            .prop_map(|(start, len, mark)| Op::Find { start, len, mark }),
        1 => (index(), proptest::option::of(mark())).prop_map(|(index, mark)| Op::FindAfter { index, mark }),
        1 => (index(), 0u32..=13).prop_map(|(index, order)| Op::Conflicts { index, order }),
        1 => (1usize..5, proptest::option::of(mark())).prop_map(|(every, mark)| Op::Paused { every, mark }),
        3 => (0usize..8).prop_map(|skip| Op::DeleteListed { skip }),
    ]
}

fn bad(kind: Option<Kind>) -> bool {
    matches!(kind, Some(Kind::Value(v)) if v > MAX_VALUE)
}

fn found_list(xa: &Xa, start: u64, max: u64, mark: Option<Mark>) -> Vec<(u64, u32, Val)> {
    let g = rcu::pin();
    let it = match mark {
        None => xa.range(start, max, &g),
        Some(m) => xa.range_marked(start, max, m, &g),
    };
    it.map(|f| (f.index, f.order, val_of(f.entry))).collect()
}

fn model_list(m: &Model, start: u64, max: u64, mark: Option<Mark>) -> Vec<(u64, u32, Val)> {
    let mut v = Vec::new();
    for s in m.overlapping(start, max) {
        let e = &m.map[&s];
        if mark.is_none_or(|mk| e.marks & (1 << mk as u8) != 0) {
            v.push((s, e.order, e.val));
        }
    }
    v
}

/// Applies one op to both and compares what they return.
fn apply(xa: &Xa, list: Option<&NodeList>, m: &mut Model, op: &Op) {
    match *op {
        Op::DeleteListed { skip } => {
            let Some(list) = list else { return };
            let mut picked = None;
            for _ in 0..=skip {
                picked = list.rotate_oldest();
            }
            let Some(n) = picked else {
                assert!(list.is_empty());
                return;
            };
            let first = n.base;
            let last = n.base.saturating_add(span(n.shift + 6));
            let inside = m.overlapping(first, last);
            if xa.delete_listed(&n) {
                // It held values only, wholly inside its range; they are gone.
                for s in inside {
                    let e = m.map.remove(&s).unwrap();
                    assert!(matches!(e.val, Val::Value(_)), "a deleted node held {e:?}");
                    assert!(
                        s >= first && s + span(e.order) <= last,
                        "entry beyond the node"
                    );
                }
            }
        }
        Op::Store { index, kind } => {
            if bad(kind) {
                let r = xa.store(index, kind.map(|k| m.mint(k).1));
                assert!(
                    matches!(r, Err(ref e) if matches!(e.error, XaError::BadValue { .. }) && e.entry.is_some())
                );
                return;
            }
            let (val, entry) = kind.map(|k| m.mint(k)).unzip();
            let got = old_of(xa.store(index, entry).unwrap());
            assert_eq!(got, m.store(index, val), "store old");
        }
        Op::StoreOrder { index, order, kind } => {
            if bad(kind) {
                assert!(xa
                    .store_order(index, order, kind.map(|k| m.mint(k).1))
                    .is_err());
                return;
            }
            let (val, entry) = kind.map(|k| m.mint(k)).unzip();
            let got = old_of(xa.store_order(index, order, entry).unwrap());
            assert_eq!(got, m.store_order(index, order, val), "store_order old");
        }
        Op::StoreRange { first, len, kind } => {
            let last = first.saturating_add(len);
            if bad(kind) {
                assert!(xa
                    .store_range(first, last, kind.map(|k| m.mint(k).1))
                    .is_err());
                return;
            }
            let (val, entry) = kind.map(|k| m.mint(k)).unzip();
            xa.store_range(first, last, entry).unwrap();
            // The model: largest aligned pieces.
            let mut i = first;
            loop {
                let room = last - i;
                let size = if room == u64::MAX {
                    64
                } else {
                    63 - (room + 1).leading_zeros()
                };
                let align = if i == 0 { 64 } else { i.trailing_zeros() };
                let k = size.min(align).min(63);
                m.store_order(i, k, val);
                if i + span(k) >= last {
                    break;
                }
                i += span(k) + 1;
            }
        }
        Op::Erase { index } => {
            let got = old_of(xa.erase(index));
            assert_eq!(got, m.store(index, None), "erase old");
        }
        Op::Add {
            index,
            order,
            kind,
            aligned,
            multi,
        } => {
            let index = if aligned {
                index & !span(order)
            } else {
                index | 1
            };
            let (val, entry) = m.mint(kind);
            let r = if multi {
                xa.add_multi_walk(index, order, entry)
            } else {
                xa.add(index, order, entry)
            };
            let start = index & !span(order);
            let expect: Result<Option<u64>, XaError> = if order > 0 && index & span(order) != 0 {
                Err(XaError::Unaligned { index, order })
            } else if bad(Some(kind)) {
                Err(XaError::BadValue {
                    value: MAX_VALUE + 1,
                })
            } else {
                let over = m.overlapping(start, start + span(order));
                if over.iter().any(|s| matches!(m.map[s].val, Val::Ptr(_))) {
                    Err(XaError::Exists { index })
                } else {
                    let larger = over
                        .first()
                        .map(|s| (*s, m.map[s].order))
                        .filter(|(_, o)| *o > order);
                    match larger {
                        Some((_, big)) if split_nodes(big, order) > MAX_SPLIT_NODES => {
                            Err(XaError::SplitTooLarge {
                                have: big,
                                want: order,
                                nodes: split_nodes(big, order),
                            })
                        }
                        _ => {
                            if let Some((s, _)) = larger {
                                m.split(s, order);
                            }
                            let (first, _) = (
                                m.overlapping(start, start + span(order))
                                    .first()
                                    .map(|s| m.map[s].val),
                                (),
                            );
                            m.store_order(start, order, Some(val));
                            Ok(first.map(|v| match v {
                                Val::Value(v) => v,
                                Val::Ptr(_) => unreachable!(),
                            }))
                        }
                    }
                }
            };
            match (r, expect) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "add shadow"),
                (Err(e), Err(x)) => {
                    assert_eq!(e.error, x);
                    assert!(e.entry.is_some(), "the entry comes back");
                }
                (a, b) => panic!("add: got {a:?}, expected {b:?}"),
            }
        }
        Op::SetMark { index, mark } | Op::ClearMark { index, mark } => {
            let set = matches!(op, Op::SetMark { .. });
            let got = if set {
                xa.set_mark(index, mark)
            } else {
                xa.clear_mark(index, mark)
            };
            let expect = match m.containing(index) {
                Some((s, _)) => {
                    let e = m.map.get_mut(&s).unwrap();
                    if set {
                        e.marks |= 1 << mark as u8;
                    } else {
                        e.marks &= !(1 << mark as u8);
                    }
                    true
                }
                None => false,
            };
            assert_eq!(got, expect, "mark change");
        }
        Op::Split { index, down } => {
            let (want, expect) = match m.containing(index) {
                None => (0, Err(XaError::NotPresent { index })),
                Some((s, e)) => {
                    let want = e.order.saturating_sub(down);
                    if want == e.order {
                        (want, Ok(()))
                    } else if split_nodes(e.order, want) > MAX_SPLIT_NODES {
                        (
                            want,
                            Err(XaError::SplitTooLarge {
                                have: e.order,
                                want,
                                nodes: split_nodes(e.order, want),
                            }),
                        )
                    } else {
                        m.split(s, want);
                        (want, Ok(()))
                    }
                }
            };
            assert_eq!(xa.split(index, want), expect, "split");
        }
        Op::CmpXchg {
            index,
            expect_current,
            kind,
        } => {
            let cur = m.containing(index).map(|(_, e)| e.val);
            let expected = if expect_current {
                cur.map(|v| m.raw(v))
            } else {
                Some(Entry::Value(123_456_789))
            };
            let matches = expect_current || cur == Some(Val::Value(123_456_789));
            if bad(kind) {
                let r = xa.cmpxchg(index, expected, kind.map(|k| m.mint(k).1));
                assert!(matches!(r, Err(ref e) if matches!(e.error, XaError::BadValue { .. })));
                return;
            }
            let (val, entry) = kind.map(|k| m.mint(k)).unzip();
            let r = xa.cmpxchg(index, expected, entry);
            if matches {
                assert_eq!(old_of(r.unwrap()), m.store(index, val), "cmpxchg old");
            } else {
                let e = r.unwrap_err();
                assert_eq!(e.error, XaError::Mismatch { index });
                assert_eq!(e.entry.is_some(), val.is_some());
            }
        }
        Op::Cursor { index, kind, mark } => {
            if bad(kind) {
                return;
            }
            let (val, entry) = kind.map(|k| m.mint(k)).unzip();
            let mut lock = xa.lock();
            let mut st = lock.state(index);
            let cur = m.containing(index);
            assert_eq!(
                st.load().map(val_of),
                cur.as_ref().map(|(_, e)| e.val),
                "cursor load"
            );
            assert_eq!(
                st.get_order(),
                cur.as_ref().map_or(0, |(_, e)| e.order),
                "cursor order"
            );
            let old = old_of(st.store(entry).unwrap());
            assert_eq!(old, m.store(index, val), "cursor store");
            let cur = m.containing(index);
            assert_eq!(
                st.load().map(val_of),
                cur.as_ref().map(|(_, e)| e.val),
                "cursor reload"
            );
            let had = st.set_mark(mark);
            assert_eq!(had, cur.is_some());
            if let Some((s, _)) = cur {
                m.map.get_mut(&s).unwrap().marks |= 1 << mark as u8;
            }
            assert_eq!(st.get_mark(mark), cur.is_some());
            if index < u64::MAX {
                let next = m.containing(index + 1).map(|(_, e)| e.val);
                assert_eq!(st.advance().map(val_of), next, "cursor next");
                assert_eq!(st.index(), index + 1);
            }
        }
        Op::Find { start, len, mark } => {
            let max = start.saturating_add(len);
            let g = rcu::pin();
            let got = match mark {
                None => xa.find(start, max, &g),
                Some(mk) => xa.find_marked(start, max, mk, &g),
            }
            .map(|f| (f.index, f.order, val_of(f.entry)));
            assert_eq!(
                got,
                model_list(m, start, max, mark).first().copied(),
                "find"
            );
        }
        Op::FindAfter { index, mark } => {
            let g = rcu::pin();
            let got = match mark {
                None => xa.find_after(index, u64::MAX, &g),
                Some(mk) => xa.find_after_marked(index, u64::MAX, mk, &g),
            }
            .map(|f| (f.index, f.order, val_of(f.entry)));
            let expect = m
                .map
                .range(index.saturating_add(1)..)
                .filter(|(s, _)| **s > index)
                .find(|(_, e)| mark.is_none_or(|mk| e.marks & (1 << mk as u8) != 0))
                .map(|(s, e)| (*s, e.order, e.val));
            assert_eq!(got, expect, "find_after");
        }
        Op::Conflicts { index, order } => {
            let g = rcu::pin();
            let got: Vec<_> = xa
                .conflicts(index, order, &g)
                .map(|f| (f.index, f.order, val_of(f.entry)))
                .collect();
            let start = index & !span(order);
            assert_eq!(
                got,
                model_list(m, start, start + span(order), None),
                "conflicts"
            );
        }
        Op::Paused { every, mark } => {
            let mut got = Vec::new();
            let mut from = Some(0u64);
            while let Some(start) = from {
                let g = rcu::pin();
                let mut it = match mark {
                    None => xa.range(start, u64::MAX, &g),
                    Some(mk) => xa.range_marked(start, u64::MAX, mk, &g),
                };
                for f in it.by_ref().take(every) {
                    got.push((f.index, f.order, val_of(f.entry)));
                }
                from = it.resume_index();
            }
            assert_eq!(got, model_list(m, 0, u64::MAX, mark), "paused iteration");
            let mut each = Vec::new();
            xa.for_each(0, u64::MAX, mark, |f| {
                each.push((f.index, f.order, val_of(f.entry)));
                std::ops::ControlFlow::Continue(())
            });
            assert_eq!(each, got, "for_each");
        }
    }
}

/// Compares everything the array shows with the model.
fn compare(xa: &Xa, m: &Model) {
    xa.check().unwrap();
    let g = rcu::pin();
    let all = found_list(xa, 0, u64::MAX, None);
    assert_eq!(all, model_list(m, 0, u64::MAX, None), "iteration");
    for mk in Mark::ALL {
        assert_eq!(
            found_list(xa, 0, u64::MAX, Some(mk)),
            model_list(m, 0, u64::MAX, Some(mk)),
            "marked iteration {mk:?}"
        );
        assert_eq!(
            xa.marked(mk),
            m.map.values().any(|e| e.marks & (1 << mk as u8) != 0),
            "marked {mk:?}"
        );
    }
    for (&s, e) in &m.map {
        let last = s + span(e.order);
        for i in [
            s,
            last,
            s + span(e.order) / 2,
            last.saturating_add(1),
            s.saturating_sub(1),
        ] {
            let c = m.containing(i);
            assert_eq!(
                xa.load(i, &g).map(val_of),
                c.as_ref().map(|(_, e)| e.val),
                "load {i:#x}"
            );
            assert_eq!(
                xa.get_order(i, &g),
                c.as_ref().map_or(0, |(_, e)| e.order),
                "order {i:#x}"
            );
            for mk in Mark::ALL {
                let want = c
                    .as_ref()
                    .is_some_and(|(_, e)| e.marks & (1 << mk as u8) != 0);
                assert_eq!(xa.get_mark(i, mk, &g), want, "mark {mk:?} at {i:#x}");
            }
        }
    }
    if m.map.is_empty() {
        assert!(xa.is_empty());
        assert_eq!(xa.node_count(), 0, "the tree shrinks back to nothing");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn xarray_matches_model(ops in proptest::collection::vec(op(), 1..40)) {
        let xa = Xa::new();
        let mut m = Model::default();
        for op in &ops {
            apply(&xa, None, &mut m, op);
            compare(&xa, &m);
        }
        // Erase everything: no node is left.
        let starts: Vec<u64> = m.map.keys().copied().collect();
        for s in starts {
            assert_eq!(old_of(xa.erase(s)), m.store(s, None));
        }
        compare(&xa, &m);
        assert_eq!(xa.node_count(), 0);
    }

    /// The same with a node list: value-only nodes are listed exactly (checked by `check`), and
    /// deleting a listed node takes exactly its values.
    #[test]
    fn xarray_with_node_list_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        let list = Arc::new(NodeList::new());
        let xa = Xa::with_node_list(list.clone(), 7);
        let mut m = Model::default();
        for op in &ops {
            apply(&xa, Some(&list), &mut m, op);
            compare(&xa, &m);
        }
        let starts: Vec<u64> = m.map.keys().copied().collect();
        for s in starts {
            assert_eq!(old_of(xa.erase(s)), m.store(s, None));
        }
        compare(&xa, &m);
        assert!(list.is_empty(), "no node left listed");
        // Dropping an array takes its nodes off the list.
        let xa = Xa::with_node_list(list.clone(), 8);
        for i in 0..200u64 {
            xa.store(i * 3, Some(Entry::Value(i))).unwrap();
        }
        assert!(!list.is_empty());
        drop(xa);
        assert!(list.is_empty(), "drop unlists");
    }
}
