//! Bounded stress test: readers load and iterate lock-free while a writer stores, splits,
//! adds, erases and shrinks the tree. Every entry says which range it was stored over, so a
//! reader can tell a wrong, torn or freed entry from a right one.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quire::sync::rcu;
use quire::xarray::{Entry, Mark, XArray};

const ALIVE: u64 = 0xA11C_E5ED;
const DEAD: u64 = 0xDEAD_DEAD;
/// Indices used: enough for three levels.
const KEYS: u64 = 1 << 14;

struct Item {
    start: u64,
    order: u32,
    canary: AtomicU64,
    drops: Arc<AtomicUsize>,
}

impl Drop for Item {
    fn drop(&mut self) {
        self.canary.store(DEAD, Ordering::SeqCst);
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

type Xa = XArray<Arc<Item>>;

fn encode(start: u64, order: u32) -> u64 {
    (start << 6) | order as u64
}

/// Checks that an entry found at `index` (first index `first`, order `order`) was stored over
/// a range that holds it.
fn check_entry(e: Entry<&Item>, index: u64, first: u64, order: u32) {
    let (start, stored_order) = match e {
        Entry::Pointer(item) => {
            assert_eq!(
                item.canary.load(Ordering::SeqCst),
                ALIVE,
                "a reader saw a freed item"
            );
            (item.start, item.order)
        }
        Entry::Value(v) => (v >> 6, (v & 63) as u32),
    };
    let last = start + (1u64 << stored_order) - 1;
    assert!(
        start <= index && index <= last,
        "index {index} outside stored range {start}+{stored_order}"
    );
    assert!(
        first >= start && first + (1u64 << order) - 1 <= last,
        "piece {first}+{order} outside {start}+{stored_order}"
    );
    assert_eq!(first & ((1u64 << order) - 1), 0, "unaligned piece");
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn readers_race_a_writer_that_stores_splits_erases_and_shrinks() {
    let xa = Xa::new();
    let drops = Arc::new(AtomicUsize::new(0));
    let made = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let duration = Duration::from_millis(400);
    std::thread::scope(|s| {
        for r in 0..3u64 {
            let (xa, stop, reads) = (&xa, &stop, &reads);
            s.spawn(move || {
                let mut rng = Rng(0x1234_5678 + r);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let g = rcu::pin();
                    match rng.below(8) {
                        0 => {
                            // Iterate a window: entries in order, disjoint, each consistent.
                            let start = rng.below(KEYS);
                            let mut prev_last: Option<u64> = None;
                            for f in xa.range(start, start + 2000, &g).take(200) {
                                if let Some(p) = prev_last {
                                    assert!(f.index > p, "overlapping or repeated entries");
                                }
                                assert!(f.last() >= start);
                                check_entry(f.entry, f.index, f.index, f.order);
                                prev_last = Some(f.last());
                            }
                        }
                        1 => {
                            let mut prev = None;
                            for f in xa.range_marked(0, KEYS, Mark::M1, &g).take(50) {
                                assert!(prev.is_none_or(|p| f.index > p));
                                check_entry(f.entry, f.index, f.index, f.order);
                                prev = Some(f.last());
                            }
                        }
                        2 => {
                            // Load, "take a reference", re-check through the cursor.
                            let i = rng.below(KEYS);
                            let mut c = xa.cursor(i, &g);
                            if let Some(e) = c.load() {
                                let order = c.order();
                                check_entry(e, i, i & !((1u64 << order) - 1), order);
                                if let Some(again) = c.reload() {
                                    check_entry(again, i, i, 0);
                                }
                            }
                        }
                        _ => {
                            for _ in 0..64 {
                                let i = if rng.below(4) == 0 {
                                    0
                                } else {
                                    rng.below(KEYS)
                                };
                                if let Some(e) = xa.load(i, &g) {
                                    check_entry(e, i, i, 0);
                                }
                                n += 1;
                            }
                        }
                    }
                }
                reads.fetch_add(n, Ordering::Relaxed);
            });
        }
        // The writer.
        let mut rng = Rng(0xfeed_beef);
        let started = Instant::now();
        let mut ops = 0u64;
        let item = |start: u64, order: u32| {
            made.fetch_add(1, Ordering::Relaxed);
            Arc::new(Item {
                start,
                order,
                canary: AtomicU64::new(ALIVE),
                drops: drops.clone(),
            })
        };
        while started.elapsed() < duration {
            ops += 1;
            let order = [0, 0, 0, 1, 2, 3, 5, 6, 8, 9, 12][rng.below(11) as usize];
            let start = rng.below(KEYS) & !((1u64 << order) - 1);
            match rng.below(12) {
                0..=2 => {
                    let e = if rng.below(2) == 0 {
                        Entry::Pointer(item(start, order))
                    } else {
                        Entry::Value(encode(start, order))
                    };
                    xa.store_order(start, order, Some(e)).unwrap();
                }
                3 => {
                    // Plain store keeps the order of what is there: store a value naming it.
                    let i = rng.below(KEYS);
                    let g = rcu::pin();
                    let o = xa.get_order(i, &g);
                    drop(g);
                    let s0 = i & !((1u64 << o) - 1);
                    xa.store(i, Some(Entry::Value(encode(s0, o)))).unwrap();
                }
                4..=6 => {
                    let _ = xa.add(
                        start,
                        order.min(2),
                        Entry::Pointer(item(start, order.min(2))),
                    );
                }
                7 => {
                    let _ = xa.add_multi_walk(
                        start,
                        order.min(2),
                        Entry::Pointer(item(start, order.min(2))),
                    );
                }
                8 => {
                    let _ = xa.split(rng.below(KEYS), [0, 1, 2, 6][rng.below(4) as usize]);
                }
                9 => {
                    xa.set_mark(rng.below(KEYS), Mark::M1);
                    xa.clear_mark(rng.below(KEYS), Mark::M1);
                }
                10 => {
                    for _ in 0..8 {
                        xa.erase(rng.below(KEYS));
                    }
                }
                _ => {
                    if rng.below(8) == 0 {
                        // Empty it completely: every node goes, readers race the shrink.
                        xa.store_range(0, u64::MAX, None).unwrap();
                        assert_eq!(xa.node_count(), 0);
                        xa.store(0, Some(Entry::Value(encode(0, 0)))).unwrap();
                    } else {
                        let first = rng.below(KEYS);
                        xa.store_range(first, first + rng.below(100), None).unwrap();
                    }
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        assert!(ops > 100, "the writer made progress");
    });
    assert!(
        reads.load(Ordering::Relaxed) > 0,
        "the readers made progress"
    );
    xa.check().unwrap();
    // Quiescent: everything iterated agrees with loads.
    let g = rcu::pin();
    for f in xa.iter(&g) {
        check_entry(f.entry, f.index, f.index, f.order);
        let e = xa.load(f.last(), &g).unwrap();
        assert_eq!(e.as_raw(), f.entry.as_raw());
    }
    drop(g);
    xa.store_range(0, u64::MAX, None).unwrap();
    assert!(xa.is_empty());
    assert_eq!(xa.node_count(), 0);
    drop(xa);
    // Every item is dropped once (the retired ones after their grace periods).
    let deadline = Instant::now() + Duration::from_secs(10);
    while drops.load(Ordering::SeqCst) < made.load(Ordering::SeqCst) && Instant::now() < deadline {
        rcu::pin().flush();
        std::thread::yield_now();
    }
    assert_eq!(drops.load(Ordering::SeqCst), made.load(Ordering::SeqCst));
}
