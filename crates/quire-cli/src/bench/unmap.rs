//! Suite `unmap`: what skipping dead anonymous content saves when anonymous memory goes away
//! (technique 5, `quire::mm`). Variants: `skip-dead-anon` (the rule: no dirty-bit test for
//! anonymous folios
//! outside the swap cache) and `always-test-dirty` (the before: test every folio's dirty bit on
//! its last unmap). The dirty bit in use (hardware or software) is printed.
//!
//! - case `exit`: a space of N dirty anonymous pages (8192; 2048 with `--quick`), none in swap,
//!   is dropped; `ns_per_page` of the drop and `dirty_tests_per_page`.
//! - case `exit-swapcache`: the same, with every 4th page swapped out and written again after its
//!   swap-in, so that it sits in the swap cache (its dirty bit must be tested under both).
//! - case `fork-exit`: a parent of M pages (4096; 1024 with `--quick`), all written; each
//!   operation forks a child, writes 10% of the pages in it (copies on write) and drops it — the
//!   seed's "fork, exec an empty shell, exit" measured in spaces; `ops_per_s` and the child
//!   exit's `dirty_tests_per_page`.
//!
//! Each figure is the best of 5 timed runs (3 with `--quick`), variants interleaved; each variant
//! has its own cache (128 MiB budget) and swap on a temporary file.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use quire::filemap::{CacheConfig, PageCache};
use quire::mm::{AnonConfig, AnonMemory, DirtyTest, Space};
use quire::stats::Event;
use quire::store::{FileStore, IoMode};

use super::read::Scratch;
use super::{Bench, Suite};

const VARIANTS: [(&str, DirtyTest); 2] = [
    ("always-test-dirty", DirtyTest::Always),
    ("skip-dead-anon", DirtyTest::SkipDeadAnon),
];

pub const SUITE: Suite = Suite {
    name: "unmap",
    about: "exit and fork-exit of anonymous memory: the dirty-bit test skipped for dead anonymous pages vs always",
    variants: &["always-test-dirty", "skip-dead-anon"],
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

const PAGE: u64 = 4096;

struct Setup {
    name: &'static str,
    _cache: PageCache,
    anon: AnonMemory,
    _dir: Scratch,
}

/// One setup per variant asked for.
fn setups(b: &Bench) -> anyhow::Result<Vec<Setup>> {
    let mut out = Vec::new();
    for (name, rule) in VARIANTS {
        if !b.wants(name) {
            continue;
        }
        let mut cfg = CacheConfig::new(128 << 20);
        cfg.alloc_timeout = Duration::from_secs(10);
        let cache = PageCache::new(cfg)?;
        let dir = Scratch::new(&format!("unmap-{name}"))?;
        let store = FileStore::create(dir.path("swap"), IoMode::Buffered)
            .context("creating the swap file")?;
        let mut config = AnonConfig::new().with_swap(store, 16384);
        config.dirty_test = rule;
        let anon = AnonMemory::new(&cache, config)?;
        out.push(Setup {
            name,
            _cache: cache,
            anon,
            _dir: dir,
        });
    }
    Ok(out)
}

fn tests(anon: &AnonMemory) -> u64 {
    anon.stats().get(Event::DirtyTests)
}

/// A space of `pages` written pages; every `swap_every`-th page (if any) swapped out and
/// written again after its swap-in, so that it is mapped writable and in the swap cache.
fn filled(anon: &AnonMemory, pages: u64, swap_every: Option<u64>) -> anyhow::Result<Space> {
    let space = anon.new_space(pages)?;
    for p in 0..pages {
        space.write(p * PAGE + 8, &p.to_le_bytes())?;
    }
    if let Some(n) = swap_every {
        for p in (0..pages).step_by(n as usize) {
            ensure!(space.pageout(p..p + 1)? == 1, "page {p} did not go to swap");
            space.write(p * PAGE + 16, &p.to_le_bytes())?;
        }
    }
    Ok(space)
}

fn run(b: &mut Bench) -> anyhow::Result<()> {
    let runs = runs(b.quick());
    let s = setups(b)?;
    if let Some(v) = s.first() {
        b.note(format!("dirty bit: {:?}", v.anon.dirty_bit()));
    }
    let pages: u64 = if b.quick() { 2048 } else { 8192 };
    for (case, swap_every) in [("exit", None), ("exit-swapcache", Some(4))] {
        let mut best = vec![(f64::MAX, 0.0); s.len()];
        for _ in 0..runs {
            b.step(case);
            for (v, best) in s.iter().zip(&mut best) {
                let space = filled(&v.anon, pages, swap_every)?;
                let t0 = tests(&v.anon);
                let start = Instant::now();
                drop(space);
                let ns = start.elapsed().as_nanos() as f64 / pages as f64;
                let per_page = (tests(&v.anon) - t0) as f64 / pages as f64;
                v.anon.trim_swap_cache();
                if ns < best.0 {
                    *best = (ns, per_page);
                }
            }
        }
        for (v, (ns, per_page)) in s.iter().zip(best) {
            b.record(case, v.name, 1, "ns_per_page", ns, "ns");
            b.record(case, v.name, 1, "dirty_tests_per_page", per_page, "1/page");
        }
        b.compare(case, "always-test-dirty", "skip-dead-anon");
    }

    let m: u64 = if b.quick() { 1024 } else { 4096 };
    let ops = if b.quick() { 10 } else { 20 };
    let mut best = vec![(0.0f64, 0.0); s.len()];
    let parents: Vec<Space> = s
        .iter()
        .map(|v| filled(&v.anon, m, None))
        .collect::<anyhow::Result<_>>()?;
    for _ in 0..runs {
        b.step("fork-exit");
        for ((v, parent), best) in s.iter().zip(&parents).zip(&mut best) {
            let t0 = tests(&v.anon);
            let start = Instant::now();
            for i in 0..ops {
                let child = parent.fork()?;
                for p in (0..m).step_by(10) {
                    child.write(p * PAGE, &[i as u8])?;
                }
                drop(child);
            }
            let rate = ops as f64 / start.elapsed().as_secs_f64();
            let per_page = (tests(&v.anon) - t0) as f64 / (ops as u64 * m) as f64;
            if rate > best.0 {
                *best = (rate, per_page);
            }
        }
    }
    for (v, (rate, per_page)) in s.iter().zip(best) {
        b.record("fork-exit", v.name, 1, "ops_per_s", rate, "1/s");
        b.record(
            "fork-exit",
            v.name,
            1,
            "dirty_tests_per_page",
            per_page,
            "1/page",
        );
    }
    b.compare("fork-exit", "always-test-dirty", "skip-dead-anon");
    b.note(format!(
        "exit: {pages} pages; fork-exit: {m} pages, 10% written in the child, {ops} forks a run"
    ));
    Ok(())
}
