//! Suite `dcache`: path walks through the dentry cache with lockref reference counts against
//! the same cache with every count change under the entry's spinlock (the dcache before
//! lockref).
//!
//! - case `short` (after AIM7's `short` workload, where `dget_parent` and `dput` spent most of
//!   the time in one spinlock): a tree of about 10 000 entries — 4 × 4 × 4 directories, then
//!   5 × 5 directories under each, then 5 files in each of those (10 004 entries, depth 6) — is
//!   created in a temporary directory. Each thread walks random paths of depth 4 to 6, takes
//!   `dget_parent` of the result, rebuilds its path with `path_of`, and puts both references.
//!   The walk itself is the lock-free one (no reference traffic on the way down), so the count
//!   traffic per walk is one `get_not_dead` on the final entry, one `get_not_zero` on its parent
//!   and two puts — on parents shared by many walks (64 directories at depth 3, 320 at depth 4,
//!   1 600 at depth 5). `lockref` makes those compare-and-swaps; `spinlock` takes each entry's
//!   lock for each of them. Same tree, same cache configuration, both caches warmed first. The
//!   tree lives on tmpfs (`/dev/shm`) when there is one, else in the temporary directory.
//! - case `same-path` (after AIM7's `short` on many cores, where every process looked up the
//!   same few paths and the count of each shared dentry was the contended word): the same tree
//!   and caches, but every thread walks the SAME file at depth 6 and does the same work per walk.
//!   All the count traffic lands on two entries — the file (`get_not_dead`, put) and its
//!   directory (`get_not_zero`, put) — so every thread's compare-and-swaps (`lockref`) or lock
//!   round trips (`spinlock`) meet on the same two words, the case lockref was made for.
//!
//! Both cases run at each thread count (`--threads`, else 2 and 32) and record the same metrics:
//! walks per second and per CPU second, and per walk the slow (locked) walks, the lockref's
//! fallbacks to its lock and the context switches.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use quire::dcache::{Dcache, DcacheConfig, RefPolicy};
use quire::stats::Event;

use super::harness::{measure, Measurement, Rng};
use super::{Bench, Suite};

pub const SUITE: Suite = Suite {
    name: "dcache",
    about: "dentry cache: path walk + dget_parent + path_of + dput, lockref vs spinlock counts \
            (cases short: random paths; same-path: every thread on one path)",
    variants: &["spinlock", "lockref"],
    steps: |p| 3 + (CASES.len() * p.threads(&THREADS).len()) as u64,
    run,
};

const THREADS: [usize; 2] = [2, 32];
/// The cases, in the order they run.
const CASES: [&str; 2] = ["short", "same-path"];
/// The one path every thread walks in `same-path`: a file at depth 6.
const SAME_PATH: &str = "d00/d10/d20/d30/d40/f0";
/// Entries per level: directories at depths 1 to 5, files at depth 6.
const FANOUT: [usize; 6] = [4, 4, 4, 5, 5, 5];

/// A temporary directory removed when dropped.
struct TempTree(PathBuf);

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Creates the tree and returns the paths (relative) of every entry at depth 4, 5 and 6.
fn build_tree(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut level: Vec<String> = vec![String::new()];
    let mut targets = Vec::new();
    for (depth, &fan) in FANOUT.iter().enumerate() {
        let mut next = Vec::with_capacity(level.len() * fan);
        for parent in &level {
            for i in 0..fan {
                let name = if depth + 1 == FANOUT.len() {
                    format!("{parent}f{i}")
                } else {
                    format!("{parent}d{depth}{i}")
                };
                let real = root.join(&name);
                if depth + 1 == FANOUT.len() {
                    std::fs::write(&real, b"")
                } else {
                    std::fs::create_dir(&real)
                }
                .with_context(|| format!("creating {}", real.display()))?;
                next.push(name);
            }
        }
        if depth + 1 >= 4 {
            targets.extend(next.iter().cloned());
        }
        level = next.into_iter().map(|p| format!("{p}/")).collect();
    }
    Ok(targets)
}

/// Where to build the tree: tmpfs (`/dev/shm`) if it is there and writable, else the temporary
/// directory. The walks never touch the disk once the caches are warm, but creating and removing
/// 10 000 entries on a busy virtual disk can take seconds, which `--quick` cannot afford.
fn scratch_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let probe = shm.join(format!("quire-probe-{}", std::process::id()));
    if std::fs::create_dir(&probe).is_ok() {
        let _ = std::fs::remove_dir(&probe);
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// One variant's runs added up.
#[derive(Default)]
struct Totals {
    walks: u64,
    wall_s: f64,
    cpu_s: f64,
    ctx: u64,
    slow_walks: u64,
    lockref_slow: u64,
}

impl Totals {
    fn add(&mut self, m: &Measurement) {
        self.walks += m.ops;
        self.wall_s += m.elapsed.as_secs_f64();
        self.cpu_s += m.cpu.as_secs_f64();
        self.ctx += m.ctx_switches;
        self.slow_walks += m.events.get(Event::DcacheSlowWalks);
        self.lockref_slow += m.events.get(Event::LockrefSlowPaths);
    }
}

fn run(b: &mut Bench) -> anyhow::Result<()> {
    // Per thread count and variant: `rounds` runs of `round` each.
    let (rounds, round) = if b.quick() {
        (3, Duration::from_millis(250))
    } else {
        (6, Duration::from_millis(1000))
    };
    for case in CASES {
        b.compare(case, "spinlock", "lockref");
    }

    b.step("building the tree");
    let tree = TempTree(scratch_dir().join(format!("quire-bench-dcache-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tree.0);
    std::fs::create_dir_all(&tree.0).with_context(|| format!("creating {}", tree.0.display()))?;
    let paths = build_tree(&tree.0)?;
    anyhow::ensure!(
        paths.iter().any(|p| p == SAME_PATH),
        "the tree has no {SAME_PATH}"
    );

    let mut caches = Vec::new();
    for (variant, policy) in [
        ("spinlock", RefPolicy::Spinlock),
        ("lockref", RefPolicy::Cmpxchg),
    ] {
        if !b.wants(variant) {
            continue;
        }
        b.step(&format!("{variant}: warming the cache"));
        let dc = Dcache::new(
            &tree.0,
            DcacheConfig {
                ref_policy: policy,
                max_unused: 1 << 15,
                hash_buckets: 1 << 15,
                // Nothing changes the tree behind the cache's back during the run.
                revalidate_after: None,
                hold_dir_fds: false,
            },
        )?;
        for p in &paths {
            dc.walk(p).with_context(|| format!("warming {p}"))?;
        }
        caches.push((variant, dc));
    }

    for case in CASES {
        // The path of a thread's next walk.
        let pick = |rng: &mut Rng| -> &str {
            if case == "same-path" {
                SAME_PATH
            } else {
                &paths[rng.below(paths.len() as u64) as usize]
            }
        };
        for threads in b.threads(&THREADS).to_vec() {
            b.step(&format!("{case} {threads} threads"));
            run_case(b, case, &caches, threads, rounds, round, &pick);
        }
    }
    drop(caches);
    drop(tree);
    Ok(())
}

/// Runs one case at one thread count on every cache and records its figures. Rounds alternate
/// the variants, so that load from elsewhere on the machine (and frequency changes) fall on both
/// alike; each figure sums its variant's rounds.
fn run_case<'p>(
    b: &mut Bench,
    case: &str,
    caches: &[(&str, Dcache)],
    threads: usize,
    rounds: usize,
    round: Duration,
    pick: &(dyn Fn(&mut Rng) -> &'p str + Sync),
) {
    let mut totals: Vec<Totals> = caches.iter().map(|_| Totals::default()).collect();
    for _ in 0..rounds {
        for ((_, dc), tot) in caches.iter().zip(totals.iter_mut()) {
            let m = measure(threads, round, |t, stop| {
                let mut rng = Rng::new(t as u64 * 7919 + 17);
                let mut walks = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let d = dc
                        .walk(pick(&mut rng))
                        .expect("every path of the tree exists");
                    let parent = d.dget_parent();
                    black_box(dc.path_of(&d));
                    drop(parent);
                    drop(d);
                    walks += 1;
                }
                walks
            });
            tot.add(&m);
        }
    }
    for ((variant, _), tot) in caches.iter().zip(&totals) {
        let per_walk = |n: u64| n as f64 / tot.walks.max(1) as f64;
        b.record(
            case,
            variant,
            threads,
            "walks_per_s",
            tot.walks as f64 / tot.wall_s,
            "1/s",
        );
        b.record(
            case,
            variant,
            threads,
            "walks_per_cpu_s",
            tot.walks as f64 / tot.cpu_s.max(1e-9),
            "1/s",
        );
        b.record(
            case,
            variant,
            threads,
            "slow_walks_per_walk",
            per_walk(tot.slow_walks),
            "1",
        );
        b.record(
            case,
            variant,
            threads,
            "lockref_slow_paths_per_walk",
            per_walk(tot.lockref_slow),
            "1",
        );
        b.record(
            case,
            variant,
            threads,
            "ctx_switches_per_walk",
            per_walk(tot.ctx),
            "1",
        );
    }
}
