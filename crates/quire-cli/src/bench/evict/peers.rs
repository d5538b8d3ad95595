//! The cache libraries a user would pick instead of quire, replayed on a trace's page ids with
//! the accounting of a cache simulator, beside quire's variants and OPT (`trace.rs`).
//!
//! # The peers
//!
//! - `exact-lru`: exact LRU (the `lru` crate), the baseline every figure of the summary is
//!   measured against. Named apart from quire's own `lru` variant, which is quire's reclaim
//!   with LRU lists, not this one;
//! - `arc`: ARC, Megiddo and Modha's adaptive replacement cache (`caches::AdaptiveCache`);
//! - `2q`: 2Q, Johnson and Shasha's (`caches::TwoQueueCache`, its default ratios);
//! - `s3-fifo`, `sieve`, `w-tinylfu`, `foyer-lru`: foyer's in-memory cache (`foyer-memory`)
//!   with S3-FIFO, SIEVE, its LFU (a W-TinyLFU: window, probation and protected queues behind
//!   a count-min sketch) and its LRU, each with its default configuration and **one shard**,
//!   so that the policy sees the whole capacity (foyer's default of 8 shards would give each
//!   an eighth, and the trace's hash spread would decide as much as the policy);
//! - `moka`: moka's synchronous cache (W-TinyLFU, as Caffeine's);
//! - `quick_cache`: quick_cache's unsynchronised cache (a CLOCK-Pro-like policy with ghost
//!   entries).
//!
//! # Accounting
//!
//! One thread; for each access, a lookup of its page id (a `u32` key with a unit value); on a
//! miss, an insert of weight 1. The capacity is a number of entries (the cell's size). The
//! hit ratio is hits over accesses, every access counted, cold misses included — as quire's
//! replay and OPT count them.
//!
//! moka keeps its policy's bookkeeping (the frequency sketch, the queues, eviction) in logs
//! that it applies in batches, on its own every 64 reads or writes; between two batches the
//! cache holds more entries than its capacity. The replay calls `run_pending_tasks()` after
//! every insert, so that no lookup ever sees more than `capacity` entries and every admission
//! decision is taken with the reads before it counted: the policy as Caffeine specifies it,
//! not a larger cache. On the six traces of `../shared/traces/` at 0.1%, 1%, 10% and 40% of
//! their distinct pages, running them after every access, hits included, gives the same hit
//! ratios within the seed's spread; leaving them to moka's own batches gives higher ones where
//! the capacity is small (64 entries more is an eighth more of a 489-entry cache), which the
//! policy does not earn. moka's `accesses_per_s` includes these calls: it is the speed of the
//! policy kept exact, not of moka as an application would drive it.
//!
//! A peer whose behaviour depends on a random seed (moka and quick_cache: their hashers are
//! seeded per instance, and the sketch and the ghost entries hash with them) is replayed 3
//! times, each in a fresh cache, and its figure is the median hit ratio (and the median
//! speed). The others are deterministic and replayed once.
//!
//! Each replay is timed: `accesses_per_s`, the trace's accesses over the replay's wall time
//! (building the cache included; for moka, `run_pending_tasks()` after every insert included).
//!
//! # Against OPT
//!
//! OPT (`trace.rs`) is Belady's replacement with forced insertion: every missed page enters the
//! cache, evicting the resident page used furthest in the future. It is the ceiling of a cache
//! that keeps every page it reads, as a page cache must, and of every peer here that inserts
//! each miss and keeps it ([`Peer::may_refuse`] false). A cache with an admission policy may
//! instead leave a new entry out, and with capacity 1 the trace `A B A` shows what that is
//! worth: OPT inserts B over A and misses three times, a cache that refuses B hits the second
//! A. W-TinyLFU admits a new entry only if its estimated frequency beats the victim's: foyer's
//! (`w-tinylfu`) and moka's (`moka`) may refuse, and their hit ratios may exceed OPT's. The
//! others always keep the entry they insert: LRU, ARC, 2Q and SIEVE insert at the head of a
//! list; foyer's S3-FIFO inserts into its small queue, and quick_cache into its cold section,
//! evicting from elsewhere first.

use std::num::NonZeroUsize;
use std::time::Instant;

use foyer_memory::{EvictionConfig, LfuConfig, LruConfig, S3FifoConfig, SieveConfig};

/// One cache library, as the replay drives it.
pub(crate) trait Peer: Sync {
    /// The variant name (`--variants`, the report).
    fn name(&self) -> &'static str;
    /// Whether its figures depend on a random seed: it is replayed [`SEEDED_RUNS`] times.
    fn randomised(&self) -> bool;
    /// Whether it may keep a missed page out of the cache (an admission policy that refuses
    /// the new entry, or evicts it in the insert that adds it): OPT, which inserts every
    /// missed page, is no ceiling of its hits.
    fn may_refuse(&self) -> bool {
        false
    }
    /// What its `accesses_per_s` includes beyond lookups and inserts, where anything.
    fn timing_note(&self) -> Option<&'static str> {
        None
    }
    /// Replays `ids` through a fresh cache of `capacity` entries; the accesses that hit.
    fn replay(&self, ids: &[u32], capacity: usize) -> u64;
}

/// Replays of a randomised peer: its figure is their median.
pub(crate) const SEEDED_RUNS: usize = 3;

/// Every peer, in the order the replay runs and the tables show them.
pub(crate) const PEERS: &[&dyn Peer] = &[
    &ExactLru,
    // ARC: `caches::AdaptiveCache`; 2Q: `caches::TwoQueueCache`, its default ratios.
    &CachesCrate {
        name: "arc",
        new: |n| caches::AdaptiveCache::new(n).expect("a capacity of at least 1"),
    },
    &CachesCrate {
        name: "2q",
        new: |n| caches::TwoQueueCache::new(n).expect("a capacity of at least 1"),
    },
    &Foyer {
        name: "s3-fifo",
        eviction: || S3FifoConfig::default().into(),
        admission: false,
    },
    &Foyer {
        name: "sieve",
        eviction: || SieveConfig.into(),
        admission: false,
    },
    &Foyer {
        name: "w-tinylfu",
        eviction: || LfuConfig::default().into(),
        admission: true,
    },
    &Foyer {
        name: "foyer-lru",
        eviction: || LruConfig::default().into(),
        admission: false,
    },
    &Moka,
    &QuickCache,
];

/// The name of the baseline peer (exact LRU).
pub(crate) const BASELINE: &str = "exact-lru";

/// What a peer's replay measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PeerOutcome {
    pub hits: u64,
    pub hit_ratio: f64,
    pub accesses_per_s: f64,
}

/// Replays `ids` through `peer` with `capacity` entries: once, or [`SEEDED_RUNS`] times for a
/// randomised peer, taking the median hit ratio and the median speed. A library that panics
/// (`caches`' ARC and 2Q unwrap an empty list at capacities of a few entries) gives `Err`
/// with its message, so that one library's defect costs its own figure, not the whole run.
pub(crate) fn run(peer: &dyn Peer, ids: &[u32], capacity: usize) -> Result<PeerOutcome, String> {
    let runs = if peer.randomised() { SEEDED_RUNS } else { 1 };
    let mut hits = Vec::with_capacity(runs);
    let mut speed = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let replay = std::panic::AssertUnwindSafe(|| peer.replay(ids, capacity));
        hits.push(std::panic::catch_unwind(replay).map_err(|e| panic_message(&*e))?);
        speed.push(ids.len() as f64 / t.elapsed().as_secs_f64().max(1e-9));
    }
    hits.sort_unstable();
    speed.sort_by(f64::total_cmp);
    let h = hits[runs / 2];
    Ok(PeerOutcome {
        hits: h,
        hit_ratio: h as f64 / ids.len().max(1) as f64,
        accesses_per_s: speed[runs / 2],
    })
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// Exact LRU: the `lru` crate.
struct ExactLru;

impl Peer for ExactLru {
    fn name(&self) -> &'static str {
        BASELINE
    }
    fn randomised(&self) -> bool {
        false
    }
    fn replay(&self, ids: &[u32], capacity: usize) -> u64 {
        let cap = NonZeroUsize::new(capacity.max(1)).expect("at least 1");
        let mut c = lru::LruCache::<u32, ()>::new(cap);
        let mut hits = 0;
        for &id in ids {
            if c.get(&id).is_some() {
                hits += 1;
            } else {
                c.put(id, ());
            }
        }
        hits
    }
}

/// A policy of the `caches` crate (ARC, 2Q), made by `new` for a capacity.
struct CachesCrate<C> {
    name: &'static str,
    new: fn(usize) -> C,
}

impl<C: caches::Cache<u32, ()>> Peer for CachesCrate<C> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn randomised(&self) -> bool {
        false
    }
    fn replay(&self, ids: &[u32], capacity: usize) -> u64 {
        let mut c = (self.new)(capacity.max(1));
        let mut hits = 0;
        for &id in ids {
            if c.get(&id).is_some() {
                hits += 1;
            } else {
                let _ = c.put(id, ());
            }
        }
        hits
    }
}

/// foyer's in-memory cache with one shard and the eviction policy `eviction` gives.
struct Foyer {
    name: &'static str,
    eviction: fn() -> EvictionConfig,
    /// Whether the policy may keep a new entry out ([`Peer::may_refuse`]).
    admission: bool,
}

impl Peer for Foyer {
    fn name(&self) -> &'static str {
        self.name
    }
    fn randomised(&self) -> bool {
        // Its hasher (xxHash64) and its sketch are seeded with constants.
        false
    }
    fn may_refuse(&self) -> bool {
        self.admission
    }
    fn replay(&self, ids: &[u32], capacity: usize) -> u64 {
        let c: foyer_memory::Cache<u32, ()> = foyer_memory::CacheBuilder::new(capacity.max(1))
            .with_shards(1)
            .with_eviction_config((self.eviction)())
            .build();
        let mut hits = 0;
        for &id in ids {
            if c.get(&id).is_some() {
                hits += 1;
            } else {
                // The entry handle is dropped at once: a held handle would pin the entry.
                drop(c.insert(id, ()));
            }
        }
        hits
    }
}

/// moka's synchronous cache, its pending tasks run after every insert.
struct Moka;

impl Peer for Moka {
    fn name(&self) -> &'static str {
        "moka"
    }
    fn randomised(&self) -> bool {
        true
    }
    fn may_refuse(&self) -> bool {
        // TinyLFU admission: a new entry whose estimated frequency is below the victim's is
        // dropped.
        true
    }
    fn timing_note(&self) -> Option<&'static str> {
        Some("run_pending_tasks after every insert included")
    }
    fn replay(&self, ids: &[u32], capacity: usize) -> u64 {
        let c: moka::sync::Cache<u32, ()> = moka::sync::Cache::builder()
            .max_capacity(capacity as u64)
            .build();
        let mut hits = 0;
        for &id in ids {
            if c.get(&id).is_some() {
                hits += 1;
            } else {
                c.insert(id, ());
                c.run_pending_tasks();
            }
        }
        hits
    }
}

/// quick_cache's unsynchronised cache.
struct QuickCache;

impl Peer for QuickCache {
    fn name(&self) -> &'static str {
        "quick_cache"
    }
    fn randomised(&self) -> bool {
        true
    }
    fn replay(&self, ids: &[u32], capacity: usize) -> u64 {
        let mut c = quick_cache::unsync::Cache::<u32, ()>::new(capacity.max(1));
        let mut hits = 0;
        for &id in ids {
            if c.get(&id).is_some() {
                hits += 1;
            } else {
                c.insert(id, ());
            }
        }
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str) -> &'static dyn Peer {
        *PEERS.iter().find(|p| p.name() == name).expect(name)
    }

    #[test]
    fn names_are_distinct_and_the_baseline_is_there() {
        for (i, p) in PEERS.iter().enumerate() {
            assert!(
                PEERS[..i].iter().all(|q| q.name() != p.name()),
                "{} twice",
                p.name()
            );
        }
        assert!(!peer(BASELINE).randomised());
    }

    #[test]
    fn exact_lru_and_opt_on_a_hand_computed_trace() {
        // Capacity 2 on 1 2 3 1 2 3 1 1 2 (positions 0..=8):
        // - exact LRU: a loop of 3 over 2 entries misses every time, so 0..=6 miss (6 evicts
        //   2, leaving {3, 1}); 7 (1) hits; 8 (2) misses: 1 hit;
        // - OPT: 0, 1 miss; 2 (3) misses and evicts 2 (next use 4; 1's is 3); 3 (1) hits;
        //   4 (2) misses and evicts 1 (next use 6; 3's is 5); 5 (3) hits; 6 (1) misses and
        //   evicts 3 (never used again); 7 (1) and 8 (2) hit: 4 hits.
        let ids = [1, 2, 3, 1, 2, 3, 1, 1, 2];
        assert_eq!(peer(BASELINE).replay(&ids, 2), 1);
        let opt = super::super::workload::opt_hits(&ids, 2);
        assert_eq!(opt.iter().filter(|&&h| h).count(), 4);
        // foyer's LRU is an LRU too.
        assert_eq!(peer("foyer-lru").replay(&ids, 2), 1);
        // No peer that keeps every missed page beats OPT.
        for p in PEERS.iter().filter(|p| !p.may_refuse()) {
            let h = p.replay(&ids, 2);
            assert!(h <= 4, "{}: {h} hits", p.name());
        }
    }

    #[test]
    fn opt_bounds_every_peer_that_keeps_what_it_misses() {
        // Capacity 1, A B A: OPT must insert B, evicting A, and misses all three; a cache that
        // keeps B out hits the second A. So OPT bounds only the peers that never refuse.
        let opt = |ids: &[u32], cap| {
            super::super::workload::opt_hits(ids, cap)
                .iter()
                .filter(|&&h| h)
                .count() as u64
        };
        assert_eq!(opt(&[1, 2, 1], 1), 0);
        let refusing: Vec<&str> = PEERS
            .iter()
            .filter(|p| p.may_refuse())
            .map(|p| p.name())
            .collect();
        assert_eq!(refusing, ["w-tinylfu", "moka"]);
        // Skewed random traces over few ids at small capacities, where an admission policy or
        // an entry evicted by its own insert would show.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..24u32 {
            let ids_n = 4 + round % 12;
            let ids: Vec<u32> = (0..600)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // The smaller of two draws: low ids more often.
                    let a = (x % u64::from(ids_n)) as u32;
                    let b = ((x >> 32) % u64::from(ids_n)) as u32;
                    a.min(b)
                })
                .collect();
            for cap in [1, 2, 3, 5, 8, 13] {
                let o = opt(&ids, cap);
                for p in PEERS.iter().filter(|p| !p.may_refuse()) {
                    // caches 0.3's ARC and 2Q panic on these traces below 8 entries (an
                    // `unwrap` on a ghost entry their own eviction removed); a replay's cells
                    // have at least 256.
                    if cap < 8 && ["arc", "2q"].contains(&p.name()) {
                        continue;
                    }
                    let h = p.replay(&ids, cap);
                    assert!(h <= o, "{} at {cap}: {h} hits, opt {o}", p.name());
                }
            }
        }
    }

    #[test]
    fn a_trace_that_fits_misses_only_its_first_accesses() {
        // 50 ids, each seen 4 times in shuffled-looking rounds, in a cache of 64 entries.
        let ids: Vec<u32> = (0..4u32)
            .flat_map(|r| (0..50u32).map(move |i| (i * 7 + r * 13) % 50))
            .collect();
        for p in PEERS {
            let o = run(*p, &ids, 64).unwrap();
            assert_eq!(o.hits, 150, "{}", p.name());
            assert_eq!(o.hit_ratio, 0.75, "{}", p.name());
            assert!(o.accesses_per_s > 0.0, "{}", p.name());
        }
    }

    /// A library that panics costs its own figure: `run` gives its message.
    #[test]
    fn a_panicking_library_gives_an_error_not_a_crash() {
        struct Broken;
        impl Peer for Broken {
            fn name(&self) -> &'static str {
                "broken"
            }
            fn randomised(&self) -> bool {
                false
            }
            fn replay(&self, _ids: &[u32], _capacity: usize) -> u64 {
                panic!("list empty")
            }
        }
        assert_eq!(run(&Broken, &[1, 2, 3], 2), Err("list empty".to_string()));
    }
}
