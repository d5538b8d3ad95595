//! Suite `dirtybit`: what the frame pool's dirty bit costs to test — the real, costly test that
//! the reverse map's skip for dead anonymous memory avoids (technique 5).
//!
//! Variants: `hardware` (userfaultfd asynchronous write protection and `PAGEMAP_SCAN`, see
//! `quire::mem::dirtybit`) and `software` (the bitmap set by the mapping API). Where the kernel
//! refuses the hardware bit, its rows are skipped with the reason.
//!
//! - case `test-clean`: `test_and_clear` of one frame that was not written; `ns_per_test`.
//! - case `write-test`: one byte written into a frame, then `test_and_clear` of it (under the
//!   hardware kind the write takes the kernel's write-protect fault, resolved without a
//!   user-space handler); `ns_per_test`, write included.
//! - case `scan`: a pool of 128 MiB (16 MiB with `--quick`), every 7th frame written, then one
//!   `test_and_clear` over all of it; `ns_per_page` of the whole pool.
//!
//! Each figure is the best of 5 timed runs (3 with `--quick`), variants interleaved.

use std::time::Instant;

use anyhow::ensure;
use quire::mem::{DirtyBitKind, DirtyBitMode, DirtyBits, FramePool, FRAME_SIZE};

use super::{Bench, Suite};

const VARIANTS: [(&str, DirtyBitMode); 2] = [
    ("software", DirtyBitMode::Software),
    ("hardware", DirtyBitMode::Auto),
];

pub const SUITE: Suite = Suite {
    name: "dirtybit",
    about: "the frame pool's dirty bit: test-and-clear cost, hardware (userfaultfd + PAGEMAP_SCAN) vs software",
    variants: &["software", "hardware"],
    steps: |p| 3 * runs(p.quick) as u64,
    run,
};

fn runs(quick: bool) -> usize {
    if quick {
        3
    } else {
        5
    }
}

/// Writes one byte into frame `pfn`, as a mapping would (marking it for the software kind).
fn write(pool: &FramePool, bits: &DirtyBits, pfn: usize, byte: u8) {
    assert!(pfn < pool.nr_frames());
    bits.mark_written(pfn, 1);
    // SAFETY: nothing is allocated from the benchmark's pools, so no reference to any frame's
    // bytes exists; the pool stays mapped while borrowed.
    unsafe { pool.base().add(pfn * FRAME_SIZE + 64).write_volatile(byte) };
}

struct Setup {
    name: &'static str,
    pool: FramePool,
    bits: DirtyBits,
}

fn setups(b: &Bench, frames: usize) -> anyhow::Result<Vec<Setup>> {
    let mut out = Vec::new();
    for (name, mode) in VARIANTS {
        if !b.wants(name) {
            continue;
        }
        let pool = FramePool::new(frames * FRAME_SIZE)?;
        let bits = DirtyBits::new(pool.base(), pool.nr_frames(), mode);
        if mode == DirtyBitMode::Auto && bits.kind() != DirtyBitKind::Hardware {
            b.note(format!(
                "skipped: hardware: {}",
                bits.fallback_reason().unwrap_or("refused")
            ));
            continue;
        }
        // Fault every frame in, then start tracking from clean.
        for pfn in 0..pool.nr_frames() {
            write(&pool, &bits, pfn, 1);
        }
        bits.clear(0, pool.nr_frames());
        out.push(Setup { name, pool, bits });
    }
    Ok(out)
}

fn run(b: &mut Bench) -> anyhow::Result<()> {
    let runs = runs(b.quick());
    // One frame at a time, cycling through 1024 frames (4 MiB).
    let small = setups(b, 1024)?;
    let per_run = if b.quick() { 20_000 } else { 100_000 };
    for (case, written) in [("test-clean", false), ("write-test", true)] {
        let mut best = vec![f64::MAX; small.len()];
        for _ in 0..runs {
            b.step(case);
            for (s, best) in small.iter().zip(&mut best) {
                let n = s.pool.nr_frames();
                let start = Instant::now();
                let mut found = 0usize;
                for i in 0..per_run {
                    let pfn = i % n;
                    if written {
                        write(&s.pool, &s.bits, pfn, i as u8);
                    }
                    found += usize::from(s.bits.test_and_clear(pfn, 1));
                }
                let ns = start.elapsed().as_nanos() as f64 / per_run as f64;
                let want = if written { per_run } else { 0 };
                ensure!(
                    found == want,
                    "{}: {case}: {found} frames reported written, {want} expected",
                    s.name
                );
                *best = best.min(ns);
            }
        }
        for (s, best) in small.iter().zip(best) {
            b.record(case, s.name, 1, "ns_per_test", best, "ns");
        }
        b.compare(case, "software", "hardware");
    }
    drop(small);

    let frames = if b.quick() { 4096 } else { 32768 };
    let big = setups(b, frames)?;
    let mut best = vec![f64::MAX; big.len()];
    for _ in 0..runs {
        b.step("scan");
        for (s, best) in big.iter().zip(&mut best) {
            for pfn in (0..frames).step_by(7) {
                write(&s.pool, &s.bits, pfn, 2);
            }
            let start = Instant::now();
            let any = s.bits.test_and_clear(0, frames);
            let ns = start.elapsed().as_nanos() as f64 / frames as f64;
            ensure!(
                any && s.bits.written(0, frames).is_empty(),
                "{}: scan: the written frames were not all reported and cleared",
                s.name
            );
            *best = best.min(ns);
        }
    }
    for (s, best) in big.iter().zip(best) {
        b.record("scan", s.name, 1, "ns_per_page", best, "ns");
    }
    b.compare("scan", "software", "hardware");
    b.note(format!(
        "scan: {} MiB, every 7th of {frames} frames written",
        (frames * FRAME_SIZE) >> 20
    ));
    Ok(())
}
