//! The buddy allocator against a model (a map of allocated ranges), and a bounded multi-thread
//! stress run (no frame handed out twice, none leaked).
#![cfg(not(loom))]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use quire::mem::buddy::{Buddy, MAX_ORDER};

#[derive(Clone, Debug)]
enum Step {
    Alloc(u32),
    /// Free the allocation at this position (modulo the number live).
    Free(usize),
    Drain,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        // Mostly small orders, as a page cache would ask; sometimes an invalid one.
        6 => (0u32..=3).prop_map(Step::Alloc),
        2 => (4u32..=MAX_ORDER + 1).prop_map(Step::Alloc),
        7 => any::<usize>().prop_map(Step::Free),
        1 => Just(Step::Drain),
    ]
}

/// The allocated ranges, by first frame.
struct Model {
    n: usize,
    live: BTreeMap<u32, u32>,
}

impl Model {
    fn overlaps(&self, start: u32, len: u32) -> bool {
        let end = start + len;
        // The last range starting before `end` is the only one that can reach into [start, end).
        self.live
            .range(..end)
            .next_back()
            .is_some_and(|(&s, &o)| s + (1 << o) > start)
    }

    fn allocated_frames(&self) -> usize {
        self.live.values().map(|&o| 1usize << o).sum()
    }

    /// Whether some naturally aligned block of `order` lies wholly in free frames.
    fn has_free_block(&self, order: u32) -> bool {
        let size = 1u32 << order;
        (0..self.n as u32)
            .step_by(size as usize)
            .filter(|&p| (p + size) as usize <= self.n)
            .any(|p| !self.overlaps(p, size))
    }
}

fn check_accounting(b: &Buddy, m: &Model) {
    let s = b.stats();
    assert_eq!(s.total, m.n);
    assert_eq!(s.allocated, m.allocated_frames());
    assert_eq!(s.free + s.cached + s.allocated, s.total);
    assert!(s.cached <= b.pcp_shards() * b.pcp_high());
    // The lock-free readings agree with the locked ones when nothing runs concurrently.
    assert_eq!(b.zone_free_frames(), s.free, "zone_free_frames");
    assert_eq!(b.cached_free_frames(), s.cached, "cached_free_frames");
    for order in 0..=MAX_ORDER {
        assert_eq!(
            b.has_free_block(order),
            s.free_blocks[order as usize..].iter().any(|&n| n > 0),
            "has_free_block({order})"
        );
    }
}

fn run(n: usize, shards: usize, high: usize, steps: &[Step]) {
    let b = Buddy::with_caches(n, shards, high);
    let mut m = Model {
        n,
        live: BTreeMap::new(),
    };
    let mut order_of_pos: Vec<u32> = Vec::new();
    for s in steps {
        match *s {
            Step::Alloc(order) => match b.alloc(order) {
                Some(pfn) => {
                    assert!(order <= MAX_ORDER);
                    assert_eq!(
                        pfn % (1 << order),
                        0,
                        "block {pfn} of order {order} misaligned"
                    );
                    assert!(pfn as usize + (1 << order) <= n, "block out of bounds");
                    assert!(!m.overlaps(pfn, 1 << order), "block {pfn}/{order} overlaps");
                    m.live.insert(pfn, order);
                    order_of_pos.push(pfn);
                }
                None => {
                    // Single-threaded, so a failure means no aligned free block exists at all
                    // (the caches were drained before giving up).
                    assert!(
                        order > MAX_ORDER || !m.has_free_block(order),
                        "alloc({order}) failed with a free block available"
                    );
                }
            },
            Step::Free(i) => {
                if order_of_pos.is_empty() {
                    continue;
                }
                let pfn = order_of_pos.swap_remove(i % order_of_pos.len());
                let order = m.live.remove(&pfn).unwrap();
                // SAFETY: the model says this block is allocated with this order, once.
                unsafe { b.free(pfn, order) };
            }
            Step::Drain => {
                b.drain();
                assert_eq!(b.stats().cached, 0);
            }
        }
        check_accounting(&b, &m);
    }
    for (pfn, order) in std::mem::take(&mut m.live) {
        // SAFETY: as above.
        unsafe { b.free(pfn, order) };
    }
    b.drain();
    check_accounting(&b, &m);
    assert_eq!(
        b.free_blocks(),
        Buddy::initial_blocks(n),
        "did not coalesce back"
    );
    // And the whole capacity is usable again, frame by frame.
    let all: Vec<u32> = std::iter::from_fn(|| b.alloc(0)).collect();
    assert_eq!(all.len(), n);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn buddy_matches_model(
        n in prop_oneof![1usize..64, 500usize..530, 1000usize..2100],
        shards in 1usize..4,
        high in prop_oneof![Just(0usize), 4usize..16],
        steps in proptest::collection::vec(step(), 1..300),
    ) {
        run(n, shards, high, &steps);
    }
}

#[test]
fn fills_exactly_to_capacity_with_mixed_orders() {
    let n = 3 * 512 + 77;
    let b = Buddy::with_caches(n, 4, 16);
    let mut got = 0usize;
    let mut blocks = Vec::new();
    for order in (0..=MAX_ORDER).rev() {
        while let Some(pfn) = b.alloc(order) {
            blocks.push((pfn, order));
            got += 1 << order;
        }
    }
    assert_eq!(got, n);
    assert_eq!(b.alloc(0), None);
    for (pfn, order) in blocks {
        // SAFETY: each block was allocated once above.
        unsafe { b.free(pfn, order) };
    }
    b.drain();
    assert_eq!(b.free_blocks(), Buddy::initial_blocks(n));
}

/// Several threads allocate and free random orders for a bounded time; an ownership map catches
/// any frame handed out twice; at the end nothing is leaked and everything merges back.
#[test]
fn stress_no_double_allocation_no_leak() {
    let n = 4096 + 100;
    let b = Buddy::with_caches(n, 4, 32);
    let owner: Vec<AtomicU8> = (0..n).map(|_| AtomicU8::new(0)).collect();
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_millis(400);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (b, owner, stop) = (&b, &owner, &stop);
            s.spawn(move || {
                let mut rng = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                let mut mine: Vec<(u32, u32)> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let r = next();
                    if mine.len() < 64 && r % 3 != 0 {
                        let order = match r % 16 {
                            0 => (next() % (MAX_ORDER as u64 + 1)) as u32,
                            1..=3 => 1 + (next() % 3) as u32,
                            _ => 0,
                        };
                        if let Some(pfn) = b.alloc(order) {
                            for f in pfn..pfn + (1 << order) {
                                let prev = owner[f as usize].swap(t as u8 + 1, Ordering::Relaxed);
                                assert_eq!(prev, 0, "frame {f} handed out twice");
                            }
                            mine.push((pfn, order));
                        }
                    } else if !mine.is_empty() {
                        let i = (next() % mine.len() as u64) as usize;
                        let (pfn, order) = mine.swap_remove(i);
                        for f in pfn..pfn + (1 << order) {
                            let prev = owner[f as usize].swap(0, Ordering::Relaxed);
                            assert_eq!(prev, t as u8 + 1, "frame {f} owned by someone else");
                        }
                        // SAFETY: this thread allocated the block and frees it once.
                        unsafe { b.free(pfn, order) };
                    }
                    if r % 1024 == 0 {
                        b.drain();
                    }
                }
                for (pfn, order) in mine {
                    for f in pfn..pfn + (1 << order) {
                        owner[f as usize].store(0, Ordering::Relaxed);
                    }
                    // SAFETY: as above.
                    unsafe { b.free(pfn, order) };
                }
            });
        }
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        stop.store(true, Ordering::Relaxed);
    });
    let s = b.stats();
    assert_eq!(s.allocated, 0, "{s:?}");
    assert_eq!(s.free + s.cached, n);
    b.drain();
    assert_eq!(b.free_blocks(), Buddy::initial_blocks(n));
}

/// Under memory pressure (more demand than frames) allocations fail cleanly and accounting
/// stays exact.
#[test]
fn stress_exhaustion_is_clean() {
    let n = 256;
    let b = Buddy::with_caches(n, 2, 8);
    std::thread::scope(|s| {
        for _ in 0..3 {
            let b = &b;
            s.spawn(move || {
                let end = Instant::now() + Duration::from_millis(150);
                let mut mine = Vec::new();
                while Instant::now() < end {
                    while let Some(pfn) = b.alloc(0) {
                        mine.push(pfn);
                        if mine.len() > 200 {
                            break;
                        }
                    }
                    for pfn in mine.drain(..) {
                        // SAFETY: allocated above by this thread, freed once.
                        unsafe { b.free(pfn, 0) };
                    }
                }
            });
        }
    });
    let s = b.stats();
    assert_eq!(s.allocated, 0);
    assert_eq!(s.free + s.cached, n);
}
