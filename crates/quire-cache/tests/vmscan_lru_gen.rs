//! The multi-generational LRU (`vmscan/lru_gen.rs`) through the page cache: its invariants
//! against a plain model under random reads, reclaim and reopening (property test); what it
//! keeps on small synthetic traces against the classic lists (a scan, a loop, a switch); and
//! exact-count scenarios for uses, tiers, protection and the loop protection's admission test.
//!
//! Single-threaded and predictable where counts are exact: order-0 folios, no readahead,
//! synchronous reads, a flusher that never runs, nothing dirty; `PageCache::stats_exact` drains the
//! LRU batches, so after each call every folio is on its list.

mod common;

use std::collections::BTreeSet;

use proptest::prelude::*;
use quire::filemap::{CacheConfig, CacheStats, CachedFile, PageCache};
use quire::stats::Event;
use quire::vmscan::lru_gen::{tier_of_uses, FILE_TYPE, MAX_NR_GENS, MAX_NR_TIERS, MIN_NR_GENS};
use quire::vmscan::ReclaimPolicy;

use common::{quiet_config, same, File, PAGE};

/// Order-0 folios, no readahead, synchronous reads, `frames` frames.
fn config(frames: usize, policy: ReclaimPolicy, loop_protection: bool) -> CacheConfig {
    let mut cfg = quiet_config(frames * PAGE);
    cfg.max_folio_order = 0;
    cfg.readahead_max = 0;
    cfg.io_threads = 0;
    cfg.reclaim = policy;
    cfg.loop_protection = loop_protection;
    cfg
}

/// The multi-generational LRU's invariants in `s`, beside `check_lru`'s: 2..=4 generations
/// per type, every frame on a generation or probation list of the file type (no anonymous memory
/// here), the stats' generations and probation adding up to the cached frames. Background
/// reclaim (kswapd) may hold a batch isolated off the lists when `s` was taken: the sum is
/// then checked again on fresh figures until it holds (2 s at most), as a frame lost from the
/// lists stays lost.
#[track_caller]
fn check_gens(cache: &PageCache, s: &CacheStats) {
    cache.check_lru().unwrap();
    let g = s.lru_gen.as_ref().expect("multi-generational state");
    for t in 0..2 {
        let live = g.max_seq + 1 - g.min_seq[t];
        assert!(
            (MIN_NR_GENS..=MAX_NR_GENS as u64).contains(&live),
            "type {t}: {live} generations: {g:?}"
        );
    }
    assert!(g.tier_idx.iter().all(|&t| t < MAX_NR_TIERS));
    let listed = |s: &CacheStats| {
        let g = s.lru_gen.as_ref().expect("multi-generational state");
        let file: usize = g.gens.iter().map(|&(_, _, f)| f).sum();
        let anon: usize = g.gens.iter().map(|&(_, a, _)| a).sum();
        assert_eq!(anon + g.probation[0], 0, "no anonymous memory: {g:?}");
        file + g.probation[FILE_TYPE]
    };
    if listed(s) == s.cached_frames {
        return;
    }
    let start = std::time::Instant::now();
    loop {
        let now = cache.stats_exact();
        let on_lists = listed(&now);
        if on_lists == now.cached_frames {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "every cached frame on one generation or probation list: {on_lists} listed, {} cached: {:?}",
            now.cached_frames,
            now.lru_gen
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Figures in which every frame read from the stores and not dropped with a closed file,
/// `resident`, is counted once: as an eviction or as cached. Background reclaim counts an
/// eviction before it takes the folio's frames out of the cached count, and `stats_exact` reads
/// the cached frames before the counters, so figures read while it evicts may count a frame
/// twice; they are read again until they add up (10 s at most: a frame lost or counted twice
/// for good never does).
#[track_caller]
fn settled(cache: &PageCache, resident: u64) -> CacheStats {
    let counted = |s: &CacheStats| s.vmstat.get(Event::Evictions) + s.cached_frames as u64;
    let start = std::time::Instant::now();
    loop {
        let s = cache.stats_exact();
        if counted(&s) == resident {
            return s;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{resident} frames read and not closed, {} evicted or cached: {s:?}",
            counted(&s)
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Figures read while background reclaim had no batch in flight: every cached frame listed,
/// every eviction's steal counted (a batch's steals are counted once it is evicted), and the
/// same evictions and cached frames read twice in a row (10 s at most).
#[track_caller]
fn at_rest(cache: &PageCache) -> CacheStats {
    let quiet = |s: &CacheStats| {
        let g = s.lru_gen.as_ref().expect("multi-generational state");
        let listed: usize =
            g.gens.iter().map(|&(_, _, f)| f).sum::<usize>() + g.probation[FILE_TYPE];
        listed == s.cached_frames && s.vmstat.get(Event::PgSteal) == s.vmstat.get(Event::Evictions)
    };
    let key = |s: &CacheStats| (s.vmstat.get(Event::Evictions), s.cached_frames);
    let start = std::time::Instant::now();
    loop {
        let s = cache.stats_exact();
        if quiet(&s) {
            std::thread::sleep(std::time::Duration::from_millis(1));
            let again = cache.stats_exact();
            if quiet(&again) && key(&again) == key(&s) {
                return again;
            }
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "background reclaim never rested: {s:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[derive(Clone, Debug)]
enum Op {
    Read { file: usize, page: usize },
    Shrink(usize),
    Reopen(usize),
}

fn op(files: usize, pages: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..files, 0..pages).prop_map(|(file, page)| Op::Read { file, page }),
        2 => (1..40usize).prop_map(Op::Shrink),
        1 => (0..files).prop_map(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random reads, reclaim and reopening on a 96-frame cache with three files of up to twice
    /// its size, with and without the loop protection: after every operation the lists and
    /// generations check out, the sequence numbers never go back, every read returns the file's
    /// bytes, and every page read from a store is either still cached or was evicted (the model:
    /// the set of pages each file has had read).
    #[test]
    fn generations_keep_their_invariants(
        loop_protection in any::<bool>(),
        ops in prop::collection::vec(op(3, 192), 1..200),
    ) {
        let cache = PageCache::new(config(96, ReclaimPolicy::MultiGen, loop_protection)).unwrap();
        let mut files: Vec<File> = (0..3).map(|i| File::open(&cache, 192, i as u8 + 1)).collect();
        let mut seen: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); 3];
        let mut last = (0u64, [0u64; 2]);
        let mut closed_misses = 0;
        let mut closed_cached = 0usize;
        for op in ops {
            match op {
                Op::Read { file, page } => {
                    files[file].read(page);
                    seen[file].insert(page);
                }
                Op::Shrink(n) => {
                    cache.shrink(n);
                }
                Op::Reopen(file) => {
                    // Closing drops the file's folios (and its shadows) from the cache. Background
                    // reclaim may evict meanwhile, this file's folios or others': what left the
                    // cache without being counted as an eviction went with the closed file — all
                    // of its frames when nothing was evicted meanwhile, else all that reclaim did
                    // not take.
                    let read = files.iter().map(|f| f.misses()).sum::<u64>() + closed_misses;
                    let before = settled(&cache, read - closed_cached as u64);
                    let frames = files[file].f.cached_frames();
                    closed_misses += files[file].misses();
                    drop(std::mem::replace(
                        &mut files[file],
                        File::open(&cache, 192, file as u8 + 1),
                    ));
                    let after = at_rest(&cache);
                    let counted = |s: &CacheStats| {
                        s.vmstat.get(Event::Evictions) + s.cached_frames as u64
                    };
                    let evicted =
                        after.vmstat.get(Event::Evictions) - before.vmstat.get(Event::Evictions);
                    let gone = counted(&before).checked_sub(counted(&after));
                    let frames = frames as u64;
                    prop_assert!(
                        gone.is_some_and(|g| g <= frames && g + evicted >= frames),
                        "closing a file of {frames} frames: {gone:?} left uncounted, {evicted} \
                         evicted meanwhile"
                    );
                    closed_cached += gone.unwrap() as usize;
                    seen[file].clear();
                }
            }
            let s = cache.stats_exact();
            check_gens(&cache, &s);
            let g = s.lru_gen.as_ref().unwrap();
            prop_assert!(g.max_seq >= last.0 && g.min_seq[0] >= last.1[0] && g.min_seq[1] >= last.1[1],
                "sequence numbers went back: {last:?} then {g:?}");
            last = (g.max_seq, g.min_seq);
            let distinct: usize = seen.iter().map(|s| s.len()).sum();
            prop_assert!(s.cached_frames <= distinct, "{} cached, {distinct} pages read", s.cached_frames);
            // Every page read from a store is cached, was evicted, or went with its file.
            let misses: u64 = files.iter().map(|f| f.misses()).sum::<u64>() + closed_misses;
            settled(&cache, misses - closed_cached as u64);
        }
    }
}

#[test]
fn tiers_are_the_bit_length_of_the_uses_beyond_the_first() {
    for n in 0..=64u64 {
        let plain = {
            let mut t = 0;
            while (1u64 << t) < n + 1 {
                t += 1;
            }
            t
        };
        assert_eq!(tier_of_uses(n), plain.min(MAX_NR_TIERS - 1), "uses {n}");
    }
}

/// Pages read from the store while `f` runs, and pages asked.
fn hits(files: &[&File], f: impl FnOnce() -> u64) -> f64 {
    let before: u64 = files.iter().map(|x| x.misses()).sum();
    let asked = f();
    let read: u64 = files.iter().map(|x| x.misses()).sum::<u64>() - before;
    1.0 - read as f64 / asked as f64
}

/// The next number of a xorshift sequence in `x`.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The hot set (half the budget, read three times) keeps its hits while a stream four times
/// the budget passes once, its reads interleaved with random hot reads.
#[test]
fn a_scan_does_not_flush_the_hot_set() {
    // The default, and the classic lists it is compared with.
    for (policy, lp) in [(ReclaimPolicy::MultiGen, true), (ReclaimPolicy::Lru, false)] {
        let cache = PageCache::new(config(256, policy, lp)).unwrap();
        let hot = File::open(&cache, 128, 1);
        let stream = File::open(&cache, 1024, 2);
        for _ in 0..3 {
            for p in 0..128 {
                hot.read(p);
            }
        }
        let mut x = 0x9e37_79b9u64;
        let ratio = hits(&[&hot], || {
            let mut asked = 0;
            for s in 0..1024 {
                stream.read(s);
                for _ in 0..4 {
                    hot.read((xorshift(&mut x) % 128) as usize);
                    asked += 1;
                }
            }
            asked
        });
        assert!(
            ratio >= 0.95,
            "{policy:?} loop protection {lp}: hot hit ratio {ratio}"
        );
        if policy == ReclaimPolicy::MultiGen {
            check_gens(&cache, &cache.stats_exact());
        } else {
            cache.check_lru().unwrap();
        }
    }
}

/// A scan cut into small files, each read whole and in order through its own handle (a backup
/// or `grep -r` beside a service), while the hot set is used slowly — two hot reads per file, so
/// that most hot pages go untouched while much of the scan passes: the hot set keeps its hits,
/// with readahead (the files' pages read in folios of up to 8 pages, as streams) and without.
/// First reads wait on probation whatever the residents' marks say; a rule that let a new
/// sequential working set in where the resident it would displace looked idle lost half the
/// hot set here (the measured alternative is in docs/journal/). The bar is 0.92 on the best of
/// three fresh caches, not on one: background reclaim runs beside the reads, and its timing
/// costs the hot set a few of its 128 reads now and then (0.945 in about one run in six on the
/// 2-core development machine, as low as 0.89 under load on the blocking-thread engine), where
/// the rule above loses about half of them in every run.
#[test]
fn a_scan_of_small_files_does_not_flush_a_slowly_used_hot_set() {
    let run = |readahead: usize| {
        let mut cfg = config(256, ReclaimPolicy::MultiGen, true);
        cfg.readahead_max = readahead * PAGE;
        cfg.max_folio_order = if readahead > 0 { 3 } else { 0 };
        let cache = PageCache::new(cfg).unwrap();
        let hot = File::open(&cache, 128, 1);
        for _ in 0..3 {
            for p in 0..128 {
                hot.read(p);
            }
        }
        // 64 files of 16 pages: four times the budget, all kept open.
        let files: Vec<File> = (0..64u8).map(|i| File::open(&cache, 16, 20 + i)).collect();
        let mut x = 0x9e37_79b9u64;
        let mut b = vec![0u8; PAGE];
        let ratio = hits(&[&hot], || {
            let mut asked = 0;
            for f in &files {
                let h = f.f.reopen();
                for p in 0..16 {
                    h.read_exact_at((p * PAGE) as u64, &mut b).unwrap();
                    same(&b, &f.data[p * PAGE..(p + 1) * PAGE], "scanned page");
                }
                for _ in 0..2 {
                    hot.read((xorshift(&mut x) % 128) as usize);
                    asked += 1;
                }
            }
            asked
        });
        let scanned: u64 = files.iter().map(|f| f.misses()).sum();
        assert!(
            scanned >= 64 * 16,
            "every scanned page read from its store: {scanned}"
        );
        check_gens(&cache, &cache.stats_exact());
        ratio
    };
    for readahead in [0, 8] {
        let mut ratios = Vec::new();
        while ratios.len() < 3 && !ratios.iter().any(|&r| r >= 0.92) {
            ratios.push(run(readahead));
        }
        assert!(
            ratios.iter().any(|&r| r >= 0.92),
            "readahead {readahead} pages: hot hit ratios {ratios:?}"
        );
    }
}

/// A file 1.25× the budget read start to end five times: with the loop protection a resident
/// share stays (passes 2–5 hit); without it, and under the classic lists, nothing does. The
/// share is what the generations hold, and they hold all but what probation keeps: every
/// candidate is turned away (the residents are all in use), so probation keeps about the size
/// it had when the cache first filled, set by its target, which starts at its floor (here two
/// order-0 folios). (With the target starting at 1/16 of the budget, as it used to, probation
/// ended at 32–47 frames and the loop kept 0.59 here, against 0.64 and 26 frames now.)
#[test]
fn a_loop_keeps_a_resident_share() {
    let run = |policy, lp| {
        let cache = PageCache::new(config(256, policy, lp)).unwrap();
        let f = File::open(&cache, 320, 3);
        for p in 0..320 {
            f.read(p);
        }
        let ratio = hits(&[&f], || {
            for _ in 0..4 {
                for p in 0..320 {
                    f.read(p);
                }
            }
            4 * 320
        });
        (ratio, cache.stats_exact())
    };
    let (protected, s) = run(ReclaimPolicy::MultiGen, true);
    let (plain, _) = run(ReclaimPolicy::MultiGen, false);
    let (classic, _) = run(ReclaimPolicy::Lru, false);
    assert!(protected >= 0.5, "loop protection: {protected}");
    assert!(plain <= 0.05 && classic <= 0.05, "{plain} {classic}");
    // The target never grew past its floor: no folio evicted from probation came back within
    // its length (a loop's refaults return a whole pass later).
    let g = s.lru_gen.as_ref().unwrap();
    assert_eq!(g.probation_target, 2, "{g:?}");
}

/// Two files of 0.8× the budget, each read four times in turns (A, B, A, B): the
/// multi-generational LRU moves over to each new working set within the turn — its last pass
/// hits; with the loop protection, B's third pass already hits in its first turn.
#[test]
fn a_switch_adapts_within_a_few_passes() {
    // The hit ratio of every pass, turn by turn.
    let run = |policy, lp| {
        // The bounds below were set with background reclaim keeping its headroom free (about
        // 220 frames caching). A 256-frame cache reclaims in the reader by default and caches
        // 255: the plain generations then keep more of A when B comes back — their last pass of
        // turn 4 measured 0.78 so, where the bound is 0.9 — and the loop protection's passes
        // are within its bound either way.
        let mut cfg = config(256, policy, lp);
        cfg.background_reclaim = true;
        let cache = PageCache::new(cfg).unwrap();
        let files = [File::open(&cache, 204, 4), File::open(&cache, 204, 5)];
        let mut passes = Vec::new();
        for turn in 0..4 {
            let f = &files[turn % 2];
            passes.push(
                (0..4)
                    .map(|_| {
                        hits(&[f], || {
                            for p in 0..204 {
                                f.read(p);
                            }
                            204
                        })
                    })
                    .collect::<Vec<_>>(),
            );
        }
        passes
    };
    let last = |passes: &[Vec<f64>]| passes[1..].iter().map(|t| t[3]).collect::<Vec<_>>();
    let plain_passes = run(ReclaimPolicy::MultiGen, false);
    let protected_passes = run(ReclaimPolicy::MultiGen, true);
    let (plain, protected) = (last(&plain_passes), last(&protected_passes));
    // B's first turn under the loop protection: its first pass, read for the first time, waits
    // on probation, but each of its folios moves the admission hand over one of A's residents,
    // clearing A's marks; so its second pass's refaults find A idle and are let in, and its
    // third pass hits (measured 0.96–0.99; 0.18 when only candidates moved the hand).
    let b1 = &protected_passes[1];
    assert!(b1[2] >= 0.8, "B's first turn, pass by pass: {b1:?}");
    eprintln!("last passes of turns 2-4: multigen {plain:?}, loop protection {protected:?}");
    assert!(plain.iter().all(|&r| r >= 0.9), "multigen: {plain:?}");
    // The loop protection makes a new working set earn its place (its refaults are turned
    // away while the residents are in use, until the hand has found them idle): slower, and
    // with background reclaim's timing in it (measured 0.71–1.0 on the last pass of turn 4,
    // below 0.5 once with the machine loaded by two spinning threads and the tests of two
    // binaries), but in by the fourth pass; a policy that never adapted would stay near 0.
    assert!(
        protected.iter().all(|&r| r >= 0.3),
        "loop protection: {protected:?}"
    );
}

/// A cache that never reclaims on its own (256 frames, at most 112 cached): `shrink(1)`
/// evicts exactly the oldest tail.
fn quiet() -> PageCache {
    PageCache::new(config(256, ReclaimPolicy::MultiGen, false)).unwrap()
}

/// Whether reading page `p` of `f` now reads it from the store (after which it is cached).
fn misses_on(f: &File, p: usize) -> bool {
    let before = f.misses();
    f.read(p);
    f.misses() > before
}

/// The uses a folio had when evicted come back with it: its refault is charged to its tier; a
/// folio whose use bits are all set (five reads) is protected — moved up a generation — rather
/// than evicted.
#[test]
fn a_refault_is_charged_to_the_tier_it_left() {
    // Uses beyond the first → tier: 0 → 0, 1 → 1, 2 → 2, 3 → 2, 4 → 3.
    for (reads, tier) in [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3)] {
        let cache = quiet();
        let f = File::open(&cache, 8, 6);
        // Page 0 first (the oldest), read `reads` times, then pages 1..5 once.
        for _ in 0..reads {
            f.read(0);
        }
        for p in 1..5 {
            f.read(p);
        }
        let before = cache.stats_exact().lru_gen.unwrap().refaulted[FILE_TYPE];
        assert_eq!(cache.shrink(1), 1);
        if reads < 5 {
            // Nothing is protected before refaults say so: page 0 goes, and comes back.
            assert!(misses_on(&f, 0), "{reads} reads: page 0 was evicted");
            let after = cache.stats_exact().lru_gen.unwrap().refaulted[FILE_TYPE];
            for t in 0..MAX_NR_TIERS {
                let want = u64::from(t == tier);
                assert_eq!(after[t] - before[t], want, "{reads} reads: tier {t}");
            }
        } else {
            // Saturated: protected, and page 1 went instead.
            assert!(!misses_on(&f, 0), "the saturated page stayed");
            assert!(misses_on(&f, 1), "the next oldest went");
        }
        check_gens(&cache, &cache.stats_exact());
        assert_eq!(cache.stats_exact().vmstat.get(Event::KswapdWakeups), 0);
    }
}

/// With the loop protection, reclaim keeps what the admission hand keeps: at the oldest tail, a
/// folio with a reuse on record that was used since reclaim last looked moves up a generation,
/// its mark spent, and must be used again to stay; one read only once goes, used or not. The
/// kernel's generations (loop protection off) evict it: tier 1 is not protected before
/// refaults say so.
#[test]
fn reclaim_keeps_a_resident_in_use_with_a_reuse_on_record() {
    for lp in [true, false] {
        let cache = PageCache::new(config(256, ReclaimPolicy::MultiGen, lp)).unwrap();
        let f = File::open(&cache, 8, 8);
        let cached = |p: usize| f.f.is_cached((p * PAGE) as u64, PAGE);
        // Pages 0..5 read once each, 0 the oldest; then page 0 read again.
        for p in 0..5 {
            f.read(p);
        }
        f.read(0);
        assert_eq!(cache.shrink(1), 1);
        if !lp {
            assert!(!cached(0) && cached(1), "multigen: the oldest went");
            continue;
        }
        assert!(cached(0) && !cached(1), "page 0 stayed, page 1 went");
        // Pages 2..5 go next, then page 0: not used since reclaim last looked.
        assert_eq!(cache.shrink(3), 3);
        assert!(cached(0) && (1..5).all(|p| !cached(p)));
        assert_eq!(cache.shrink(1), 1);
        assert!(!cached(0), "page 0 went once idle");
        check_gens(&cache, &cache.stats_exact());
    }
}

/// The admission test: a recent refault with no reuse on record, added while the oldest
/// resident was used since reclaim last looked, waits on probation — and the resident, its
/// mark spent, moves up a generation; once the residents are idle, a candidate is let in.
#[test]
fn the_admission_test_turns_away_refaults_while_the_residents_are_in_use() {
    let cache = PageCache::new(config(256, ReclaimPolicy::MultiGen, true)).unwrap();
    let f = File::open(&cache, 16, 7);
    // Pages 0..8 read once each: in the generations (the cache is still filling).
    for p in 0..8 {
        f.read(p);
    }
    // Pages 0..4, the oldest, are evicted.
    assert_eq!(cache.shrink(4), 4);
    assert_eq!(f.f.cached_frames(), 4);
    // Each refault of 0..4 is a candidate and finds the oldest resident used (its one read):
    // four turned away to probation, pages 4..8 each passed by the hand.
    let s0 = cache.stats_exact().lru_gen.unwrap();
    for p in 0..4 {
        assert!(misses_on(&f, p), "page {p} refaults");
    }
    let s1 = cache.stats_exact().lru_gen.unwrap();
    assert_eq!(
        (s1.rejected - s0.rejected, s1.admitted - s0.admitted),
        (4, 0),
        "{s1:?}"
    );
    assert_eq!(s1.probation[FILE_TYPE], 4, "{s1:?}");
    // Probation holds more than its target (its floor: two of this cache's order-0 folios),
    // so reclaim takes its tail: page 0.
    assert_eq!(s1.probation_target, 2, "{s1:?}");
    assert_eq!(cache.shrink(1), 1);
    // Its refault finds the oldest resident (page 4) idle, its mark spent by the hand: let in.
    assert!(misses_on(&f, 0), "page 0 was evicted");
    let s2 = cache.stats_exact().lru_gen.unwrap();
    assert_eq!(
        (s2.rejected - s1.rejected, s2.admitted - s1.admitted),
        (0, 1),
        "{s2:?}"
    );
    check_gens(&cache, &cache.stats_exact());
}

/// Uses of a folio while it is among the last to join probation (its fresh part, 1% of the
/// budget: here 2 frames) are one use with its read, a burst rather than a reuse: when the
/// folio moves on its count starts over, and only a use after that takes it into the
/// generations. Here page 4 is read again while fresh, page 2 after it moved on; reclaim then
/// goes through probation: page 2 joins the generations, page 4 is evicted as if used once.
#[test]
fn uses_while_fresh_are_forgotten_when_the_folio_moves_on() {
    let cache = PageCache::new(config(256, ReclaimPolicy::MultiGen, true)).unwrap();
    let f = File::open(&cache, 20, 5);
    let cached = |p: usize| f.f.is_cached((p * PAGE) as u64, PAGE);
    // Pages 0..20 read once each (the generations: the cache is filling); 0..10 evicted.
    for p in 0..20 {
        f.read(p);
    }
    assert_eq!(cache.shrink(10), 10);
    // Refaults of 0..6: candidates, each turned away to probation by a resident in use (10..16,
    // passed by the hand). The last two are fresh.
    for p in 0..6 {
        assert!(misses_on(&f, p), "page {p} refaults");
    }
    let s = cache.stats_exact().lru_gen.unwrap();
    assert_eq!((s.rejected, s.admitted), (6, 0), "{s:?}");
    assert_eq!(s.probation[FILE_TYPE], 6, "{s:?}");
    // Page 4 used again while fresh, page 2 after it moved on.
    assert!(!misses_on(&f, 4) && !misses_on(&f, 2));
    // Two more refaults (turned away by 16 and 17) make 4 and 5 move on.
    for p in 6..8 {
        assert!(misses_on(&f, p), "page {p} refaults");
    }
    let s = cache.stats_exact().lru_gen.unwrap();
    assert_eq!((s.rejected, s.probation[FILE_TYPE]), (8, 8), "{s:?}");
    // Reclaim takes probation's older part from its tail: 0, 1, 3, 4 and 5 go; 2 joins the
    // generations; 6 and 7 (fresh, and probation down to its target) stay.
    assert_eq!(cache.shrink(5), 5);
    let gone: Vec<usize> = (0..8).filter(|&p| !cached(p)).collect();
    assert_eq!(gone, [0, 1, 3, 4, 5]);
    check_gens(&cache, &cache.stats_exact());
}

/// The start of the readahead scenarios: a cache of 256 frames with readahead of 8 pages and
/// a file of 96 pages; pages 0..64 read once into the generations (the cache is filling), the
/// oldest 32 evicted; then one handle — returned — reads 0..20 in order: refaults without a
/// reuse, turned away to probation while the residents are in use (each moving the hand over
/// one), and read ahead to page 29.
fn read_ahead_behind_residents(seed: u8) -> (PageCache, File, CachedFile) {
    let mut cfg = config(256, ReclaimPolicy::MultiGen, true);
    cfg.readahead_max = 8 * PAGE;
    let cache = PageCache::new(cfg).unwrap();
    let f = File::open(&cache, 96, seed);
    for p in 0..64 {
        f.read(p);
    }
    assert_eq!(cache.shrink(32), 32);
    let h = f.f.reopen();
    let mut b = vec![0u8; PAGE];
    for p in 0..20 {
        h.read_exact_at((p * PAGE) as u64, &mut b).unwrap();
    }
    (cache, f, h)
}

/// Readahead its reader has not reached waits on probation for one more turn instead of moving
/// into the generations unused (where, read once, it would take a resident's place): reclaim
/// goes round probation once past it and takes from the generations; still unread on its next
/// turn (a later round), it is evicted; once read, it goes from probation like any folio used
/// once.
#[test]
fn read_ahead_waits_on_probation_for_its_reader() {
    let (cache, f, h) = read_ahead_behind_residents(9);
    let cached = |p: usize| f.f.is_cached((p * PAGE) as u64, PAGE);
    let gens = |s: &CacheStats| -> usize {
        let g = s.lru_gen.as_ref().unwrap();
        g.gens.iter().map(|&(_, _, file)| file).sum()
    };
    let mut b = vec![0u8; PAGE];
    let s = cache.stats_exact();
    let g = s.lru_gen.as_ref().unwrap();
    assert_eq!(g.probation[FILE_TYPE], 30, "{g:?}");
    assert!(g.probation_target < 10, "{g:?}");
    assert!((20..30).all(cached));
    // Reclaim takes the 20 read ones, the tail of probation.
    assert_eq!(cache.shrink(20), 20);
    assert!((0..20).all(|p| !cached(p)) && (20..30).all(cached));
    // Probation holds only the 10 unread ones, above its target: reclaim goes round them and
    // takes from the generations.
    let gens_before = gens(&cache.stats_exact());
    assert_eq!(cache.shrink(2), 2);
    let s = cache.stats_exact();
    assert_eq!(
        s.lru_gen.as_ref().unwrap().probation[FILE_TYPE],
        10,
        "{s:?}"
    );
    assert_eq!(gens(&s), gens_before - 2);
    assert!((20..30).all(cached), "the readahead waited");
    // The next round finds them still unread, their extra turn had: the first two go, and
    // the generations are not touched.
    let gens_before = gens(&cache.stats_exact());
    assert_eq!(cache.shrink(2), 2);
    let s = cache.stats_exact();
    assert_eq!(s.lru_gen.as_ref().unwrap().probation[FILE_TYPE], 8, "{s:?}");
    assert_eq!(gens(&s), gens_before);
    assert!(!cached(20) && !cached(21) && (22..30).all(cached));
    // Its reader gets to the rest (hits: they are cached), and those folios, read once, are
    // the first to go.
    for p in 22..30 {
        h.read_exact_at((p * PAGE) as u64, &mut b).unwrap();
    }
    assert_eq!(cache.shrink(4), 4);
    assert!((22..26).all(|p| !cached(p)) && (26..30).all(cached));
    check_gens(&cache, &cache.stats_exact());
}

/// A round of reclaim that takes from the generations only because probation holds readahead
/// waiting for its reader takes the oldest resident there, in use or not: keeping every
/// resident in use (reclaim's claim) would sweep the generations in one round, every mark
/// cleared — a loop's residents are all in use, and its share would go.
#[test]
fn a_round_behind_waiting_read_ahead_takes_the_oldest_resident() {
    // The 20 refaults and the 10 folios read ahead move the hand over 32..62: they move up a
    // generation, their marks cleared; 62 and 63 stay in the oldest.
    let (cache, f, _h) = read_ahead_behind_residents(10);
    let cached = |p: usize| f.f.is_cached((p * PAGE) as u64, PAGE);
    let test_counts = |s: &CacheStats| {
        let g = s.lru_gen.as_ref().unwrap();
        (g.rejected, g.admitted)
    };
    // 32..64 are read twice more: every resident in use, with a reuse on record.
    for _ in 0..2 {
        for p in 32..64 {
            f.read(p);
        }
    }
    // Reclaim takes the 20 read ones, the tail of probation; the 10 unread ones are left.
    assert_eq!(cache.shrink(20), 20);
    assert!((0..20).all(|p| !cached(p)) && (20..30).all(cached));
    // The next round goes round them and takes the two oldest residents, in use as they are.
    assert_eq!(cache.shrink(2), 2);
    assert!((20..30).all(cached), "the readahead waited");
    assert!(!cached(62) && !cached(63) && (32..62).all(cached));
    // And it swept nothing: the oldest residents are still marked in use, so the next
    // candidates (page 0 again, and what is read ahead with it) are turned away. After a sweep
    // they would be let in.
    let before = test_counts(&cache.stats_exact());
    assert!(misses_on(&f, 0));
    let after = test_counts(&cache.stats_exact());
    assert!(
        after.0 > before.0 && after.1 == before.1,
        "turned away, let in: {before:?} -> {after:?}"
    );
    check_gens(&cache, &cache.stats_exact());
}
