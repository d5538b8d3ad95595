//! Every registered reclaim policy (`vmscan/policy.rs`), built by name, runs the behaviour the
//! shared machinery promises: reads through a cache smaller than the data return the right
//! bytes, reclaim keeps the cache within its budget and leaves shadows that refaults find, the
//! lists stay consistent — and a policy that keeps lists keeps a used hot set through a scan.
//! The tests iterate over `ReclaimPolicy::names()`, so a new policy is tested by registering it.
//!
//! Single-threaded and predictable: order-0 folios, no readahead, synchronous reads, a flusher
//! that never runs, nothing dirty.

mod common;

use std::str::FromStr;
use std::time::Duration;

use quire::filemap::{CacheConfig, PageCache};
use quire::stats::Event;
use quire::vmscan::{ReclaimPolicy, UnknownReclaimPolicy};

use common::{lru_total, quiet_config, wait_for, File, PAGE};

/// The policy called `name`, order-0 folios, no readahead, synchronous reads, `frames` frames.
fn config(name: &str, frames: usize) -> CacheConfig {
    let mut cfg = quiet_config(frames * PAGE)
        .with_reclaim(name)
        .unwrap_or_else(|e| panic!("registered policy {name}: {e}"));
    cfg.max_folio_order = 0;
    cfg.readahead_max = 0;
    cfg.io_threads = 0;
    cfg
}

/// Whether the policy `name` keeps folios on LRU lists: every one but the clock, which sweeps
/// the memmap instead.
fn keeps_lists(name: &str) -> bool {
    name != "clock"
}

/// The next number of a xorshift sequence in `x`.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn the_table_names_the_policies_default_first() {
    let names: Vec<_> = ReclaimPolicy::names().collect();
    assert_eq!(names[0], "lru-gen");
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        names.len(),
        "a name registered twice: {names:?}"
    );
    assert_eq!(ReclaimPolicy::default().name(), names[0]);
    assert_eq!(CacheConfig::new(1 << 20).reclaim, ReclaimPolicy::default());
    for (name, constant) in [
        ("lru-gen", ReclaimPolicy::MultiGen),
        ("lru", ReclaimPolicy::Lru),
        ("clock", ReclaimPolicy::Clock),
    ] {
        assert_eq!(ReclaimPolicy::by_name(name), Ok(constant));
        assert_eq!(constant.to_string(), name);
    }
}

#[test]
fn every_name_round_trips() {
    for name in ReclaimPolicy::names() {
        let p = ReclaimPolicy::by_name(name).unwrap();
        assert_eq!(p.name(), name);
        assert_eq!(ReclaimPolicy::from_str(&p.to_string()), Ok(p));
        assert_eq!(
            CacheConfig::new(1 << 20)
                .with_reclaim(name)
                .unwrap()
                .reclaim,
            p
        );
    }
}

#[test]
fn an_unknown_name_is_a_typed_error() {
    for bad in ["", "arc", "LRU", "lru-gen ", "multigen"] {
        let e: UnknownReclaimPolicy = ReclaimPolicy::by_name(bad).unwrap_err();
        assert_eq!(e.name, bad);
        let msg = e.to_string();
        assert!(msg.contains("unknown reclaim policy"), "{msg}");
        assert!(ReclaimPolicy::names().all(|n| msg.contains(n)), "{msg}");
        assert_eq!(bad.parse::<ReclaimPolicy>(), Err(e.clone()));
        let err = CacheConfig::new(1 << 20).with_reclaim(bad).unwrap_err();
        assert_eq!(err, e);
    }
}

/// Two passes over a file four times the budget: every byte right, the cache within its
/// budget, evictions and refaults counted, the lists consistent.
#[test]
fn every_policy_reclaims_within_the_budget_and_sees_refaults() {
    for name in ReclaimPolicy::names() {
        let cache = PageCache::new(config(name, 128)).unwrap();
        let file = File::open(&cache, 512, 3);
        for _ in 0..2 {
            for p in 0..512 {
                file.read(p);
            }
        }
        let s = cache.stats_exact();
        assert!(s.cached_frames <= 128, "{name}: {} cached", s.cached_frames);
        assert!(
            file.misses() >= 512 + 384,
            "{name}: {} misses",
            file.misses()
        );
        assert!(s.vmstat.get(Event::Evictions) >= 384, "{name}: evictions");
        assert!(
            s.vmstat.get(Event::WorkingsetRefault) > 0,
            "{name}: no refault seen"
        );
        cache.check_lru().unwrap_or_else(|e| panic!("{name}: {e}"));
        // A list policy keeps every folio on the lists; the clock keeps none there. The last
        // reads may have woken background reclaim (kswapd), whose round holds a batch
        // isolated off the lists until it has evicted or put back each folio: the lists are
        // checked against fresh figures until they add up (a frame lost from the lists stays
        // lost).
        if keeps_lists(name) {
            let figures = || {
                let s = cache.stats_exact();
                (lru_total(&s), s.cached_frames)
            };
            wait_for(
                &format!("{name}: every cached frame listed"),
                Duration::from_secs(10),
                || {
                    let (listed, cached) = figures();
                    listed == cached
                },
                || {
                    let (listed, cached) = figures();
                    format!("{listed} listed of {cached} cached")
                },
            );
        } else {
            assert_eq!(lru_total(&s), 0, "{name}: the clock lists nothing");
        }
    }
}

/// The hot set (half the budget, read three times) keeps its hits while a stream four times
/// the budget passes once, its reads interleaved with random hot reads — for every policy that
/// keeps lists (the clock, which keeps none, has to get the bytes right, and nothing more).
#[test]
fn a_scan_does_not_flush_the_hot_set_of_a_list_policy() {
    for name in ReclaimPolicy::names() {
        let cache = PageCache::new(config(name, 256)).unwrap();
        let hot = File::open(&cache, 128, 1);
        let stream = File::open(&cache, 1024, 2);
        for _ in 0..3 {
            for p in 0..128 {
                hot.read(p);
            }
        }
        let before = hot.misses();
        let mut asked = 0u64;
        let mut x = 0x9e37_79b9u64;
        for s in 0..1024 {
            stream.read(s);
            for _ in 0..4 {
                hot.read((xorshift(&mut x) % 128) as usize);
                asked += 1;
            }
        }
        let ratio = 1.0 - (hot.misses() - before) as f64 / asked as f64;
        if keeps_lists(name) {
            assert!(ratio >= 0.95, "{name}: hot hit ratio {ratio}");
        }
        cache.check_lru().unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
