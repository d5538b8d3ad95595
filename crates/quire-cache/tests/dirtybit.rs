//! The frame pool's dirty bits, hardware (userfaultfd + PAGEMAP_SCAN) and software, against
//! writes made through raw pointers into the pool, by the kernel (`pread` into a frame), by
//! several threads, and across transparent huge pages.
//!
//! The hardware tests need Linux ≥ 6.7 and userfaultfd permission (root here); where the kernel
//! refuses they print "skipped: why" — the software kind is tested either way.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use quire::mem::{DirtyBitKind, DirtyBitMode, DirtyBits, FramePool, FRAME_SIZE};

use common::{Rng, StopOnDrop, TempDir};

/// A pool and its dirty bits; `None` (after printing why) when the hardware kind is asked for
/// and refused.
fn setup(frames: usize, mode: DirtyBitMode) -> Option<(FramePool, DirtyBits)> {
    let pool = FramePool::new(frames * FRAME_SIZE).unwrap();
    let bits = DirtyBits::new(pool.base(), pool.nr_frames(), mode);
    if mode == DirtyBitMode::Auto && bits.kind() != DirtyBitKind::Hardware {
        eprintln!(
            "skipped: the hardware dirty bit is refused here: {}",
            bits.fallback_reason().unwrap_or("?")
        );
        return None;
    }
    Some((pool, bits))
}

/// Writes one byte into frame `pfn` of the pool.
fn poke(pool: &FramePool, pfn: usize, byte: u8) {
    assert!(pfn < pool.nr_frames());
    // SAFETY: the tests never allocate from these pools, so no reference to any frame's bytes
    // exists; the pool stays mapped while borrowed.
    unsafe { pool.base().add(pfn * FRAME_SIZE + 17).write_volatile(byte) };
}

/// What a mapping does on a write: the byte, and (for the software kind) the mark.
fn write(pool: &FramePool, bits: &DirtyBits, pfn: usize, byte: u8) {
    bits.mark_written(pfn, 1);
    poke(pool, pfn, byte);
}

fn both(test: impl Fn(&FramePool, &DirtyBits)) {
    for mode in [DirtyBitMode::Auto, DirtyBitMode::Software] {
        if let Some((pool, bits)) = setup(64, mode) {
            test(&pool, &bits);
        }
    }
}

#[test]
fn a_write_is_reported_once_and_only_for_its_frame() {
    both(|pool, bits| {
        let what = bits.kind().name();
        let n = pool.nr_frames();
        bits.clear(0, n);
        assert_eq!(bits.written(0, n), vec![], "{what}: clean after clear");
        assert!(!bits.test_and_clear(0, n), "{what}");
        write(pool, bits, 3, 1);
        write(pool, bits, 10, 2);
        write(pool, bits, 11, 3);
        assert_eq!(bits.written(0, n), vec![(3, 1), (10, 2)], "{what}");
        assert!(
            !bits.test_and_clear(0, 3),
            "{what}: frames before the write"
        );
        assert!(
            !bits.test_and_clear(4, 6),
            "{what}: frames between the writes"
        );
        assert!(bits.test_and_clear(3, 1), "{what}: the written frame");
        assert!(!bits.test_and_clear(3, 1), "{what}: cleared by the test");
        assert_eq!(bits.written(0, n), vec![(10, 2)], "{what}: the others stay");
        assert!(bits.test_and_clear(9, 2), "{what}: a range holding one");
        assert_eq!(
            bits.written(0, n),
            vec![(11, 1)],
            "{what}: 10 cleared, 11 not"
        );
        write(pool, bits, 3, 4);
        assert!(
            bits.test_and_clear(3, 1),
            "{what}: written again after the test"
        );
        bits.clear(11, 1);
        assert_eq!(bits.written(0, n), vec![], "{what}");
    });
}

#[test]
fn one_test_clears_more_written_runs_than_one_scan_returns() {
    // Every other frame: 32 separate runs, more than one PAGEMAP_SCAN call's buffer holds.
    both(|pool, bits| {
        let what = bits.kind().name();
        let n = pool.nr_frames();
        bits.clear(0, n);
        for pfn in (0..n).step_by(2) {
            write(pool, bits, pfn, 9);
        }
        let want: Vec<_> = (0..n).step_by(2).map(|p| (p, 1)).collect();
        assert_eq!(bits.written(0, n), want, "{what}");
        assert!(bits.test_and_clear(0, n), "{what}");
        assert_eq!(bits.written(0, n), vec![], "{what}: every run cleared");
    });
}

#[test]
fn the_kernel_writing_into_a_frame_marks_it_written() {
    let Some((pool, bits)) = setup(16, DirtyBitMode::Auto) else {
        return;
    };
    let dir = TempDir::new("dirtybit");
    let path = dir.0.join("f");
    std::fs::File::create(&path)
        .unwrap()
        .write_all(&[0x5a; FRAME_SIZE])
        .unwrap();
    let file = std::fs::File::open(&path).unwrap();
    bits.clear(0, pool.nr_frames());
    // SAFETY: no reference to the pool's frames exists (nothing is allocated from it); frame 5
    // lies inside the mapping, which outlives the slice.
    let frame =
        unsafe { std::slice::from_raw_parts_mut(pool.base().add(5 * FRAME_SIZE), FRAME_SIZE) };
    file.read_exact_at(frame, 0).unwrap();
    assert_eq!(frame[100], 0x5a);
    assert_eq!(bits.written(0, pool.nr_frames()), vec![(5, 1)]);
    assert!(bits.test_and_clear(5, 1));
}

#[test]
fn huge_pages_keep_a_one_frame_granularity() {
    // 4 MiB: two 2 MiB-aligned huge pages when the kernel grants them.
    let Some((pool, bits)) = setup(1024, DirtyBitMode::Auto) else {
        return;
    };
    let n = pool.nr_frames();
    for pfn in 0..n {
        poke(&pool, pfn, 1);
    }
    assert_eq!(bits.written(0, n), vec![(0, n)], "everything was written");
    bits.clear(0, n);
    assert_eq!(bits.written(0, n), vec![]);
    for pfn in [0, 511, 512, 700] {
        poke(&pool, pfn, 2);
    }
    assert_eq!(
        bits.written(0, n),
        vec![(0, 1), (511, 2), (700, 1)],
        "huge pages advised: {}",
        pool.huge_pages_advised()
    );
    // A test of part of a huge page clears only that part.
    for pfn in 100..300 {
        poke(&pool, pfn, 3);
    }
    assert!(bits.test_and_clear(150, 10));
    assert_eq!(
        bits.written(0, n),
        vec![(0, 1), (100, 50), (160, 140), (511, 2), (700, 1)]
    );
}

#[test]
fn no_write_is_lost_while_another_thread_tests_and_clears() {
    // The writer takes a ticket before each write; the tester notes the ticket counter after
    // each test that reports a frame. The last write to a frame (ticket `a`) is accounted for
    // if the frame is still written at the end, or a test that ended after that write began
    // (counter > a) reported the frame.
    for mode in [DirtyBitMode::Auto, DirtyBitMode::Software] {
        // 4 MiB: the tests split huge pages while the writer writes into them.
        let Some((pool, bits)) = setup(1024, mode) else {
            continue;
        };
        let what = bits.kind().name();
        let n = pool.nr_frames();
        bits.clear(0, n);
        let stop = AtomicBool::new(false);
        let ticket = AtomicU64::new(0);
        let found = AtomicU64::new(0);
        let mut last_write = vec![None; n];
        let reports = std::thread::scope(|s| {
            let (pool, bits, stop, ticket, found) = (&pool, &bits, &stop, &ticket, &found);
            let tester = s.spawn(move || {
                let mut reports = vec![Vec::new(); n];
                let mut rng = Rng(7);
                while !stop.load(Ordering::Acquire) {
                    let pfn = rng.below(n);
                    if bits.test_and_clear(pfn, 1) {
                        reports[pfn].push(ticket.load(Ordering::SeqCst));
                        found.fetch_add(1, Ordering::Relaxed);
                    }
                }
                reports
            });
            let _stop = StopOnDrop(stop);
            let mut rng = Rng(11);
            // At least 20 000 writes, and on until the tester has reported 1 000 (it may start
            // late), within a bound.
            let start = std::time::Instant::now();
            let mut round = 0u32;
            while round < 20_000
                || (found.load(Ordering::Relaxed) < 1_000
                    && start.elapsed() < std::time::Duration::from_secs(10))
            {
                round += 1;
                let pfn = rng.below(n);
                let a = ticket.fetch_add(1, Ordering::SeqCst);
                write(pool, bits, pfn, round as u8);
                last_write[pfn] = Some(a);
            }
            stop.store(true, Ordering::Release);
            tester.join().unwrap()
        });
        let left: BTreeSet<usize> = bits
            .written(0, n)
            .into_iter()
            .flat_map(|(p, c)| p..p + c)
            .collect();
        for (pfn, a) in last_write.iter().enumerate() {
            let Some(a) = *a else { continue };
            assert!(
                left.contains(&pfn) || reports[pfn].iter().any(|&e| e > a),
                "{what}: the write to frame {pfn} (ticket {a}) was lost; reports {:?}",
                reports[pfn]
            );
        }
        assert!(
            reports.iter().any(|r| !r.is_empty()),
            "{what}: the tester saw writes"
        );
    }
}

#[test]
fn the_software_kind_says_why() {
    let pool = FramePool::new(64 * FRAME_SIZE).unwrap();
    let bits = DirtyBits::new(pool.base(), pool.nr_frames(), DirtyBitMode::Software);
    assert_eq!(bits.kind(), DirtyBitKind::Software);
    assert!(bits.fallback_reason().is_some_and(|r| !r.is_empty()));
    let auto = DirtyBits::new(pool.base(), pool.nr_frames(), DirtyBitMode::Auto);
    assert_eq!(
        auto.kind() == DirtyBitKind::Hardware,
        auto.fallback_reason().is_none(),
        "{auto:?}"
    );
}

#[test]
#[should_panic(expected = "outside the pool")]
fn frames_outside_the_pool_are_refused() {
    let pool = FramePool::new(8 * FRAME_SIZE).unwrap();
    let bits = DirtyBits::new(pool.base(), pool.nr_frames(), DirtyBitMode::Software);
    bits.test_and_clear(4, 5);
}
