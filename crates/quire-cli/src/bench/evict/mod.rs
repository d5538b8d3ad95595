//! Suite `evict`: what reclaim keeps in memory, and what it costs, against the clock it
//! replaced, the kernel's own page cache under the same budget, and the optimum.
//!
//! The budget is 64 MiB (16 MiB with `--quick`); the suite writes its data files (about 16×
//! the budget in all) into a fresh directory under `/var/tmp` (see `read.rs`), read by quire
//! through `O_DIRECT` stores so that every miss is real I/O, and removes them at the end.
//!
//! Variants of each case:
//! - `clock`: [`ReclaimPolicy::Clock`], quire's first reclaim;
//! - `lru`: LRU lists and background reclaim, workingset detection off;
//! - `lru-workingset`: the LRU lists with workingset detection (the "before" column);
//! - `multigen`: [`ReclaimPolicy::MultiGen`], the multi-generational LRU, loop protection off;
//! - `multigen-loop`: the multi-generational LRU with loop protection (`CacheConfig::new`'s
//!   configuration);
//! - `multigen-loop-4k`: the same with order-0 folios only (`max_folio_order` 0): the policy
//!   at page granularity, as the cache libraries it is compared with keep entries, without
//!   what large folios cost a loop (a stream's 2 MiB folios on probation, and the free frames
//!   background reclaim keeps for 2 MiB allocations);
//! - `default`: the figures of whichever variant `CacheConfig::new` gives (the "after" column);
//! - `kernel`: the same accesses as buffered reads by a child process in a memory cgroup (v1)
//!   limited to the same budget (`kernel.rs`); "skipped: why" where that cannot be had;
//! - `opt`: Belady's optimal replacement over the same page trace, with room for the budget,
//!   every missed page inserted (the ceiling of a cache that keeps every page it reads, as a
//!   page cache must; where threads run side by side their traces are merged in turn).
//!
//! A hit ratio is the share of page reads not read from storage: `1 - bytes read from storage /
//! bytes asked for`, from the file's `CachedFile::store_bytes_read` for quire (counted by the
//! cache, so that the stores keep their file descriptors and readahead runs on io_uring as a
//! user's would) and from `read_bytes` of `/proc/*/io` for the kernel.
//!
//! Cases:
//! - `zipf`: a file 4× the budget, random 4 KiB reads with Zipf skew 0.99 over its pages (a
//!   fixed shuffle puts the hot pages all over the file), 2 threads with fixed seeds; three
//!   budgets' worth of accesses per thread to warm up, then the measured ones. `hit_ratio`,
//!   `iops`, and for quire `free_share_at_end` (free frames / frames once the readers are done:
//!   the reserve background reclaim keeps, which holds no cached data).
//! - `scan`: a hot set of half the budget, read twice in shuffled order (so that it is in use),
//!   then read at random by one thread while another reads a file 4× the budget once, in 1 MiB
//!   reads: `hot_hit_ratio` while the scan runs.
//! - `scan-files`: `scan` with its stream cut into files of 1 MiB (4× the budget in all, kept
//!   open, as a mount keeps its inodes), read one after another, and a hot reader that waits
//!   100 µs between reads: a backup or `grep -r` beside a hot set in use, but slowly — whose
//!   pages go untouched while much of the scan passes, as a working set that is gone would.
//!   `hot_hit_ratio`.
//! - `loop`: a file 1.25× the budget read from start to end in 1 MiB reads again and again; the
//!   first pass fills the cache, the next ones are measured: `hit_ratio`, `mb_per_s`.
//! - `switch`: two files of 0.8× the budget, each read from start to end four times in a row,
//!   in turns (A, B, A, B): the working set changes while each fits in the budget — the case
//!   workingset detection is for (the kernel's thrash-detection patches measured this kind of
//!   transition). The first turn warms up; `hit_ratio` over the other three, and for quire
//!   `refaults_activated` (workingset activations / refaults over those turns).
//! - `readonce`: one reader per CPU (2), each reading its own file of 5× the budget once in
//!   1 MiB reads (vm-scalability's `lru-file-readonce`): `mb_per_s`, and for quire
//!   `direct_reclaims_per_gib`, `direct_reclaims_per_alloc` (allocations that had to reclaim
//!   themselves, per folio allocated) and `store_read_per_asked` (bytes read from the store per
//!   byte read: above 1 where readahead was evicted before its reader reached it).
//! - `shadow-memory`: 100× a 16 MiB budget (4 MiB with `--quick`) streamed through order-0
//!   folios from a store whose bytes are computed, not stored; the most heap the index nodes
//!   held at any moment, sampled every 4 MiB (`index_heap_bytes_per_budget_byte`: nodes ×
//!   their 576 bytes), with the shadow shrinker (`shrinker`) and without (`no-shrinker`).
//!
//! With `--trace PATH` the suite runs none of these cases: it replays the page-access traces
//! PATH names (a file, a directory or a pattern; one page number per line, or libCacheSim's
//! `oracleGeneral` binary or csv, perhaps gzip-compressed; format by extension or
//! `--trace-format text|oracle-general|csv`) through every quire variant above, through
//! `default` (the configuration a user gets without choosing), through `opt` and through the
//! cache libraries of `peers.rs`, with a budget of `--budget SIZE` (default: a quarter of the
//! trace's distinct pages, at least 1 MiB) or at each size of `--sizes LIST`: `hit_ratio`,
//! `accesses_per_s`, and for quire `demand_hit_ratio`, `evicted_pages` and
//! `reclaim_ns_per_evicted` (`trace.rs`), then a table per trace and a summary per size
//! against exact LRU (`summary.rs`). A size larger than a trace is clamped to its distinct
//! pages, and sizes that come to the same entries are one cell. The pages are read one at a
//! time, single-threaded, from a store whose bytes are computed, through the ordinary cache,
//! so readahead acts as it would for a real reader (and pages it reads that go unused count
//! against `hit_ratio`; the summary then says so above it):
//! `quire bench evict --trace my.trace --budget 64M`.

mod kernel;
mod lifecycle;
mod patterns;
mod peers;
mod summary;
mod trace;
pub(crate) mod workload;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::ensure;
use quire::filemap::{CacheConfig, CachedFile, PageCache};
use quire::stats::Event;
use quire::vmscan::ReclaimPolicy;

use super::read::{direct_store, drop_kernel_cache, write_data_file, Content, Scratch, CHUNK};
use super::{Bench, Suite};
use lifecycle::{readonce_case, shadow_case, switch_case};
use patterns::{loop_case, scan_case, zipf_case, SCAN_FILES_NAP};
use workload::{interleave, opt_ratio, permutation, uniform_trace, zipf_trace};

pub use kernel::child_main;
pub use summary::{
    collect as trace_report, render as render_trace, CellInfo, SkippedCell, TraceReport,
};
pub use trace::{parse_sizes, steps as trace_steps, TraceArgs, TraceFormat, TraceSizes};

pub const SUITE: Suite = Suite {
    name: "evict",
    about: "reclaim: zipf, scan, loop, readonce, shadow memory; clock vs LRU vs workingset vs the kernel vs OPT",
    variants: VARIANTS,
    steps,
    run,
};

/// Bytes in a page.
pub(crate) const PAGE: usize = 4096;

/// Reader threads of the `zipf` and `readonce` cases.
const THREADS: usize = 2;

/// One quire variant of the suite: a name and how its cache is configured.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Variant {
    pub name: &'static str,
    policy: ReclaimPolicy,
    workingset: bool,
    loop_protection: bool,
    /// The largest folio order, where not the default's.
    max_folio_order: Option<u32>,
}

impl Variant {
    /// The cache configuration of this variant with a budget of `budget` bytes.
    pub(crate) fn config(&self, budget: u64) -> CacheConfig {
        let mut cfg = CacheConfig::new(budget as usize);
        cfg.reclaim = self.policy;
        cfg.workingset = self.workingset;
        cfg.loop_protection = self.loop_protection;
        if let Some(order) = self.max_folio_order {
            cfg.max_folio_order = order;
        }
        cfg
    }

    /// Whether this is what a cache gets without choosing (`CacheConfig::new`): its figures
    /// are also reported under the variant name `default`.
    pub(crate) fn is_default(&self) -> bool {
        let d = CacheConfig::new(1 << 20);
        (
            d.reclaim,
            d.workingset,
            d.loop_protection,
            d.max_folio_order,
        ) == (
            self.policy,
            self.workingset,
            self.loop_protection,
            self.max_folio_order.unwrap_or(d.max_folio_order),
        )
    }
}

/// The quire variants, in the order they run.
pub(crate) const QUIRE: &[Variant] = &[
    Variant {
        name: "clock",
        policy: ReclaimPolicy::Clock,
        workingset: false,
        loop_protection: false,
        max_folio_order: None,
    },
    Variant {
        name: "lru",
        policy: ReclaimPolicy::Lru,
        workingset: false,
        loop_protection: false,
        max_folio_order: None,
    },
    Variant {
        name: "lru-workingset",
        policy: ReclaimPolicy::Lru,
        workingset: true,
        loop_protection: false,
        max_folio_order: None,
    },
    Variant {
        name: "multigen",
        policy: ReclaimPolicy::MultiGen,
        workingset: true,
        loop_protection: false,
        max_folio_order: None,
    },
    Variant {
        name: "multigen-loop",
        policy: ReclaimPolicy::MultiGen,
        workingset: true,
        loop_protection: true,
        max_folio_order: None,
    },
    Variant {
        name: "multigen-loop-4k",
        policy: ReclaimPolicy::MultiGen,
        workingset: true,
        loop_protection: true,
        max_folio_order: Some(0),
    },
];

/// The suite's variants: those of [`QUIRE`], `default` (the figures of whichever of them
/// `CacheConfig::new` gives), `kernel`, `opt`, and the two of `shadow-memory`.
pub(crate) const VARIANTS: &[&str] = &[
    "clock",
    "lru",
    "lru-workingset",
    "multigen",
    "multigen-loop",
    "multigen-loop-4k",
    "default",
    "kernel",
    "opt",
    "no-shrinker",
    "shrinker",
];

/// The variants of a trace replay (`--trace`): those of [`QUIRE`], `default` (a replay of
/// `CacheConfig::new`'s configuration), `opt`, and the cache libraries of `peers.rs`
/// ([`peers::PEERS`], in its order).
pub(crate) const TRACE_VARIANTS: &[&str] = &[
    "clock",
    "lru",
    "lru-workingset",
    "multigen",
    "multigen-loop",
    "multigen-loop-4k",
    "default",
    "opt",
    "exact-lru",
    "arc",
    "2q",
    "s3-fifo",
    "sieve",
    "w-tinylfu",
    "foyer-lru",
    "moka",
    "quick_cache",
];

/// Whether the quire variant `v` runs: asked for by its name, or, being the default, as
/// `default` (`--variants`; its figures are then recorded only under the names asked for).
fn runs(b: &Bench, v: &Variant) -> bool {
    b.wants(v.name) || (v.is_default() && b.wants("default"))
}

/// Records a quire variant's figure, and again under `default` if the variant is the default.
fn record_q(
    b: &mut Bench,
    case: &str,
    v: &Variant,
    threads: usize,
    metric: &'static str,
    value: f64,
    unit: &'static str,
) {
    b.record(case, v.name, threads, metric, value, unit);
    if v.is_default() {
        b.record(case, "default", threads, metric, value, unit);
    }
}

/// Records what reclaim cost per evicted page over the cache's life (`reclaim_ns` /
/// `evictions`), when it evicted anything.
fn record_reclaim_cost(b: &mut Bench, case: &str, v: &Variant, threads: usize, cache: &PageCache) {
    let s = cache.stats_exact().vmstat;
    let evicted = s.get(Event::Evictions);
    if evicted > 0 {
        let ns = s.get(Event::ReclaimNs) as f64 / evicted as f64;
        record_q(b, case, v, threads, "reclaim_ns_per_evicted", ns, "ns");
    }
}

/// Sizes of one run.
struct Sizes {
    budget: u64,
    /// Accesses per thread measured in `zipf`.
    zipf_ops: usize,
    /// Passes measured in `loop`.
    loop_passes: usize,
    /// The `shadow-memory` budget.
    shadow_budget: u64,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                budget: 16 << 20,
                zipf_ops: 40_000,
                loop_passes: 3,
                shadow_budget: 4 << 20,
            }
        } else {
            Sizes {
                budget: 64 << 20,
                zipf_ops: 160_000,
                loop_passes: 4,
                shadow_budget: 16 << 20,
            }
        }
    }

    fn pages(&self) -> usize {
        (self.budget / PAGE as u64) as usize
    }
}

fn steps(_: &super::Plan<'_>) -> u64 {
    // Files, then zipf/scan/loop/switch (quire variants + kernel + opt each), scan-files and
    // readonce (quire variants + kernel each), shadow-memory (2).
    let q = QUIRE.len() as u64;
    1 + 4 * (q + 2) + 2 * (q + 1) + 2
}

/// The suite's data files.
struct Files {
    /// 4× the budget: `zipf`, and the stream of `scan`.
    big: PathBuf,
    /// Half the budget: the hot set of `scan`.
    hot: PathBuf,
    /// 1.25× the budget: `loop`.
    looped: PathBuf,
    /// 5× the budget each: `readonce`.
    once: [PathBuf; THREADS],
    /// 0.8× the budget each: `switch`.
    switch: [PathBuf; 2],
    /// 1 MiB each, 4× the budget in all: the stream of `scan-files`.
    small: Vec<PathBuf>,
}

/// Passes over one file per turn of `switch`, and its turns.
const SWITCH_PASSES: usize = 4;
const SWITCH_TURNS: usize = 4;

fn run(b: &mut Bench) -> anyhow::Result<()> {
    if let Some(args) = b.trace().cloned() {
        return trace::run(b, &args);
    }
    let sz = Sizes::new(b.quick());
    // Only `shadow-memory`'s variants asked for: no data files are needed.
    let shadow_only = !VARIANTS
        .iter()
        .any(|v| !["no-shrinker", "shrinker"].contains(v) && b.wants(v));
    if shadow_only {
        return shadow_case(b, &sz);
    }
    let scratch = Scratch::new("evict")?;
    b.step(&format!("writing data files in {}", scratch.describe()));
    let files = Files {
        big: scratch.path("big"),
        hot: scratch.path("hot"),
        looped: scratch.path("loop"),
        once: [scratch.path("once-0"), scratch.path("once-1")],
        switch: [scratch.path("switch-a"), scratch.path("switch-b")],
        small: (0..4 * sz.budget / CHUNK as u64)
            .map(|i| scratch.path(&format!("small-{i}")))
            .collect(),
    };
    let content = Content::new();
    let mb = |x: u64| (x / CHUNK as u64).max(1) * CHUNK as u64;
    write_data_file(&files.big, mb(4 * sz.budget), &content)?;
    write_data_file(&files.hot, mb(sz.budget / 2), &content)?;
    write_data_file(&files.looped, mb(sz.budget * 5 / 4), &content)?;
    for f in &files.once {
        write_data_file(f, mb(5 * sz.budget), &content)?;
    }
    for f in &files.switch {
        write_data_file(f, mb(sz.budget * 4 / 5), &content)?;
    }
    for f in &files.small {
        write_data_file(f, CHUNK as u64, &content)?;
    }
    for case in ["zipf", "scan", "scan-files", "loop", "switch", "readonce"] {
        b.compare(case, "lru-workingset", "default");
    }
    zipf_case(b, &sz, &files)?;
    let big = std::slice::from_ref(&files.big);
    scan_case(b, &sz, "scan", &files.hot, big, Duration::ZERO)?;
    scan_case(
        b,
        &sz,
        "scan-files",
        &files.hot,
        &files.small,
        SCAN_FILES_NAP,
    )?;
    loop_case(b, &sz, &files)?;
    switch_case(b, &sz, &files)?;
    readonce_case(b, &sz, &files)?;
    shadow_case(b, &sz)?;
    Ok(())
}

/// An O_DIRECT store over `path`, opened in a new cache; the file's misses are its
/// [`CachedFile::store_bytes_read`], counted by the cache, so that the store keeps its file
/// descriptor and the I/O engine reads it as it would a user's (io_uring where the kernel
/// allows: a wrapper that counted in `read_at` would send every read to the engine's threads).
fn open_counted(b: &Bench, cache: &PageCache, path: &Path) -> anyhow::Result<CachedFile> {
    Ok(cache.open(direct_store(b, path, false)?)?)
}

/// Reads page `p` of `file` into `buf` and checks its tag.
fn read_checked(file: &CachedFile, p: u32, buf: &mut [u8]) -> anyhow::Result<()> {
    let off = u64::from(p) * PAGE as u64;
    file.read_exact_at(off, buf)?;
    ensure!(Content::check_tags(off, buf), "wrong bytes at {off}");
    Ok(())
}

/// The kernel variant of a case: `spec` run by a child in a fresh memory cgroup, after the
/// files' pages were dropped from the kernel's cache; `None` (with the reason printed) where
/// no memory cgroup can be had.
fn kernel_run(
    b: &Bench,
    case: &str,
    spec: impl FnOnce(PathBuf) -> kernel::Spec,
) -> anyhow::Result<Option<kernel::Outcome>> {
    if !b.wants("kernel") {
        return Ok(None);
    }
    let memcg = match kernel::Memcg::create(case) {
        Ok(m) => m,
        Err(why) => {
            b.note(format!("{case} / kernel: skipped: {why}"));
            return Ok(None);
        }
    };
    let spec = spec(memcg.path().to_path_buf());
    for f in &spec.files {
        drop_kernel_cache(&File::open(f)?)?;
    }
    let outcome = kernel::run(&spec)?;
    // What the kernel's page cache could use: the limit, less what the child held when it set
    // it (its threads and buffers), which the budget does not count.
    b.note(format!(
        "{case} / kernel: cgroup limit {:.2} MiB for a {:.0} MiB budget",
        outcome.limit as f64 / (1 << 20) as f64,
        spec.budget as f64 / (1 << 20) as f64
    ));
    Ok(Some(outcome))
}

fn hit_ratio(read_bytes: u64, asked_bytes: u64) -> f64 {
    1.0 - read_bytes as f64 / asked_bytes.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_variants_cover_the_quire_table() {
        for v in QUIRE {
            assert!(
                VARIANTS.contains(&v.name),
                "{} missing from VARIANTS",
                v.name
            );
            assert!(
                TRACE_VARIANTS.contains(&v.name),
                "{} missing from TRACE_VARIANTS",
                v.name
            );
        }
        assert_eq!(QUIRE.len() + 5, VARIANTS.len());
        // The peers follow quire's variants, `default` and `opt`, in their table's order.
        let peers: Vec<&str> = peers::PEERS.iter().map(|p| p.name()).collect();
        assert_eq!(TRACE_VARIANTS[QUIRE.len() + 2..], peers[..]);
        for (i, v) in TRACE_VARIANTS.iter().enumerate() {
            assert!(!TRACE_VARIANTS[..i].contains(v), "{v} twice");
        }
        assert_eq!(QUIRE.iter().filter(|v| v.is_default()).count(), 1);
    }
}
