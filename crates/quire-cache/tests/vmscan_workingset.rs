//! Workingset detection with exact counts (`vmscan/workingset.rs`): which refaults activate,
//! which count as restores, and what the lists hold afterwards.
//!
//! Every scenario here is single-threaded and predictable to the frame:
//!
//! - order-0 folios, no readahead, synchronous reads, a flusher that never runs, and nothing
//!   dirty, so every folio is inserted by the test's own reads and leaves only through
//!   [`PageCache::shrink`] or a file being closed;
//! - the cache (256 frames) never gets near its low watermark, so background and direct reclaim
//!   never run (asserted at the end: `kswapd_wakeups` and `direct_reclaims` stay 0);
//! - `shrink(1)` with the inactive list at least as long as the active one evicts exactly the
//!   inactive tail and deactivates nothing: at the first priority whose scan is non-zero the
//!   scan is one frame, and the inactive list is never "low". Only a round after refaults
//!   activated moves frames off the active tail first, as many as were activated (the rule in
//!   `vmscan/reclaim.rs`);
//! - [`PageCache::stats_exact`] drains the LRU batches, so after each call every folio is on
//!   its list and the workingset size (the active list) is exact. The tests call it after every refault.
//!
//! The rule under test (`vmscan/workingset.rs`): the non-resident age advances by one on every
//! eviction and every activation; a refault's distance is the age now minus the age at
//! eviction; it activates (and sets WORKINGSET) when the distance is at most the active file
//! list's size; a refault of a folio that had WORKINGSET when evicted is also a restore.

mod common;

use std::sync::Arc;

use quire::filemap::{CacheConfig, CacheStats, CachedFile, PageCache};
use quire::stats::Event;
use quire::store::MemStore;
use quire::vmscan::{Lru, ReclaimPolicy};

use common::{quiet_config, same, PAGE};

/// 256 frames.
const BUDGET: usize = 1 << 20;

fn config(workingset: bool) -> CacheConfig {
    let mut cfg = quiet_config(BUDGET);
    cfg.max_folio_order = 0;
    cfg.readahead_max = 0;
    cfg.io_threads = 0;
    cfg.workingset = workingset;
    // The classic lists' rules (the multi-generational LRU has its own: vmscan_lru_gen.rs).
    cfg.reclaim = ReclaimPolicy::Lru;
    cfg
}

/// A file of `pages` pages whose bytes are `common::pattern(_, seed)`.
struct File {
    f: CachedFile,
    data: Vec<u8>,
}

impl File {
    fn open(cache: &PageCache, pages: usize, seed: u8) -> File {
        let data = common::pattern(pages * PAGE, seed);
        let f = cache
            .open(Arc::new(MemStore::from_vec(data.clone())))
            .unwrap();
        File { f, data }
    }

    /// Reads page `p` alone (one access) and checks its bytes. Through a fresh handle: a read
    /// that starts in the folio where the same handle's previous read ended is not a new access
    /// (reading a folio in pieces is one use), and a pass may read the same page twice in a row.
    #[track_caller]
    fn read(&self, p: usize) {
        let mut b = vec![0u8; PAGE];
        let h = self.f.reopen();
        h.read_exact_at((p * PAGE) as u64, &mut b).unwrap();
        same(&b, &self.data[p * PAGE..(p + 1) * PAGE], "page bytes");
    }

    /// Reads each page of `pages` once, in order.
    #[track_caller]
    fn read_each(&self, pages: impl IntoIterator<Item = usize>) {
        for p in pages {
            self.read(p);
        }
    }
}

fn ev(s: &CacheStats, e: Event) -> u64 {
    s.vmstat.get(e)
}

/// (inactive file, active file) frames, after draining the batches.
fn lists(cache: &PageCache) -> (usize, usize) {
    let s = cache.stats_exact();
    (s.lru(Lru::InactiveFile), s.lru(Lru::ActiveFile))
}

/// Evicts the inactive tail `n` times, one frame each.
#[track_caller]
fn evict_tail(cache: &PageCache, n: usize) {
    for i in 0..n {
        let (inactive, active) = lists(cache);
        assert!(
            inactive > active,
            "eviction {i}: the scenario keeps the inactive list longer ({inactive} <= {active})"
        );
        assert_eq!(cache.shrink(1), 1, "eviction {i} frees exactly the tail");
    }
}

/// Reads each of `pages` once, draining the batches after each (so the next refault sees the
/// exact active list); returns how many refaults activated.
#[track_caller]
fn refault_each(cache: &PageCache, file: &File, pages: impl IntoIterator<Item = usize>) -> u64 {
    let before = ev(&cache.stats_exact(), Event::WorkingsetActivate);
    for p in pages {
        file.read(p);
        cache.stats_exact();
    }
    ev(&cache.stats_exact(), Event::WorkingsetActivate) - before
}

/// Nothing but the test's own `shrink` calls reclaimed.
#[track_caller]
fn no_background_reclaim(s: &CacheStats) {
    assert_eq!(ev(s, Event::KswapdWakeups), 0, "{:?}", s.vmstat);
    assert_eq!(ev(s, Event::DirectReclaims), 0, "{:?}", s.vmstat);
    assert!(
        s.frames - s.cached_frames > s.watermarks.high + 32,
        "the scenario stays far above the watermarks: {s:?}"
    );
}

/// One file of 112 pages:
///
/// 1. pages 0..16 read twice: active (age 16);
/// 2. pages 16..112 read once: inactive;
/// 3. 48 evictions from the inactive tail: pages 16..64, page `p` at age `p` (age 64);
/// 4. page 47 refaults at distance 64 − 47 = 17 > 16 = the active list: not activated;
///    page 48 at distance 16 ≤ 16: activated (age 65, active 17);
///    pages 63 down to 49 (the i-th at age 65 + i, distance 2 + 2i ≤ 17 + i): all activated;
/// 5. pages 16..32 refault at distance ≥ 80 − 31 = 49 > 32: none activated.
///
/// With workingset detection off the same refaults are counted and none activates.
#[test]
fn refaults_within_the_active_list_activate_and_distant_ones_do_not() {
    for workingset in [true, false] {
        let what = format!("workingset {workingset}");
        let cache = PageCache::new(config(workingset)).unwrap();
        let file = File::open(&cache, 112, 1);

        // 1. The hot set.
        file.read_each(0..16);
        assert_eq!(lists(&cache), (16, 0), "{what}: new folios are inactive");
        file.read_each(0..16);
        let s = cache.stats_exact();
        assert_eq!(
            (s.lru(Lru::InactiveFile), s.lru(Lru::ActiveFile)),
            (0, 16),
            "{what}: a second access activates"
        );
        assert_eq!(ev(&s, Event::PgActivate), 16, "{what}");
        assert_eq!(s.nonresident_age, 16, "{what}: activations age");

        // 2. Used once.
        file.read_each(16..112);
        assert_eq!(lists(&cache), (96, 16), "{what}");

        // 3. Evict pages 16..64.
        evict_tail(&cache, 48);
        let s = cache.stats_exact();
        assert_eq!(
            (s.lru(Lru::InactiveFile), s.lru(Lru::ActiveFile)),
            (48, 16),
            "{what}"
        );
        assert_eq!(s.cached_frames, 64, "{what}");
        assert_eq!(s.nonresident_age, 64, "{what}: evictions age");
        for e in [Event::Evictions, Event::PgSteal, Event::PgScan] {
            assert_eq!(ev(&s, e), 48, "{what}: {}", e.name());
        }
        assert_eq!(ev(&s, Event::PgDeactivate), 0, "{what}");
        assert_eq!(ev(&s, Event::WorkingsetRefault), 0, "{what}");

        // 4. Refaults around the boundary.
        let act = refault_each(&cache, &file, [47]);
        assert_eq!(act, 0, "{what}: distance 17 > 16 does not activate");
        let act = refault_each(&cache, &file, [48]);
        assert_eq!(
            act,
            u64::from(workingset),
            "{what}: distance 16 <= 16 activates"
        );
        let act = refault_each(&cache, &file, (49..64).rev());
        assert_eq!(
            act,
            if workingset { 15 } else { 0 },
            "{what}: close refaults"
        );
        let s = cache.stats_exact();
        if workingset {
            assert_eq!(
                (s.lru(Lru::InactiveFile), s.lru(Lru::ActiveFile)),
                (49, 32),
                "{what}: 16 refaults went straight to the active list"
            );
            assert_eq!(s.nonresident_age, 80, "{what}: activations at refault age");
        } else {
            assert_eq!(
                (s.lru(Lru::InactiveFile), s.lru(Lru::ActiveFile)),
                (65, 16),
                "{what}: every refault is inactive"
            );
            assert_eq!(s.nonresident_age, 64, "{what}");
        }

        // 5. Refaults from long ago.
        let act = refault_each(&cache, &file, 16..32);
        assert_eq!(act, 0, "{what}: distant refaults never activate");

        let s = cache.stats_exact();
        assert_eq!(ev(&s, Event::WorkingsetRefault), 33, "{what}");
        assert_eq!(
            ev(&s, Event::WorkingsetActivate),
            if workingset { 16 } else { 0 },
            "{what}"
        );
        assert_eq!(
            ev(&s, Event::WorkingsetRestore),
            0,
            "{what}: none was WORKINGSET"
        );
        // Refault activations are not access activations.
        assert_eq!(ev(&s, Event::PgActivate), 16, "{what}");
        let (inactive, active) = if workingset { (65, 32) } else { (81, 16) };
        assert_eq!(
            (s.lru(Lru::InactiveFile), s.lru(Lru::ActiveFile)),
            (inactive, active),
            "{what}"
        );
        assert_eq!(s.cached_frames, 97, "{what}");
        assert_eq!(common::lru_total(&s), s.cached_frames, "{what}");
        no_background_reclaim(&s);
        cache.check_lru().unwrap();
        // Every byte is still right (the refaults read the store again).
        let mut all = vec![0u8; file.data.len()];
        file.f.read_exact_at(0, &mut all).unwrap();
        same(&all, &file.data, &what);
        drop(file);
        common::check_no_leak(&cache, &what);
    }
}

/// Folios that had been in the working set (WORKINGSET) come back as restores. Files G (16
/// pages), A (8), B (32), H (8) and C (8):
///
/// 1. G read twice: active 16 (age 16);
/// 2. A, then B, read once: inactive, A at the tail;
/// 3. 8 evictions: A0..A7, `Aj` at age 16 + j (age 24);
/// 4. A7 down to A0 refault (the i-th at distance 1 + 2i ≤ 16 + i): all activate, with
///    WORKINGSET (age 32);
/// 5. G closed: the active list is A alone, A7 at its tail;
/// 6. H read twice: active ahead of A (age 40);
/// 7. one round: refaults activated 8 since the last round, so it first deactivates 8 frames
///    from the active tail — A7..A0, to the inactive head — then evicts the inactive tail, B0
///    (age 41);
/// 8. B closed: the inactive list is A alone; 9. C read once: inactive ahead of A;
/// 10. 8 evictions: A7..A0, `Aj` at age 41 + 7 − j, with WORKINGSET in their shadows (age 49);
/// 11. A0..A7 refault (the i-th at distance 1 + 2i ≤ 8 + i): all activate, all restores.
#[test]
fn a_refault_of_a_working_set_folio_is_a_restore() {
    let cache = PageCache::new(config(true)).unwrap();
    let g = File::open(&cache, 16, 2);
    let a = File::open(&cache, 8, 3);
    let b = File::open(&cache, 32, 4);
    let h = File::open(&cache, 8, 5);
    let c = File::open(&cache, 8, 6);

    // 1. (Draining between the passes, so that every second access finds its folio on the
    // inactive list and is counted as `pgactivate`: one still waiting in an add batch is
    // activated in place, uncounted, as the kernel's `__lru_cache_activate_folio` does.)
    g.read_each(0..16);
    assert_eq!(lists(&cache), (16, 0));
    g.read_each(0..16);
    assert_eq!(lists(&cache), (0, 16));
    // 2.
    a.read_each(0..8);
    b.read_each(0..32);
    assert_eq!(lists(&cache), (40, 16));
    // 3.
    evict_tail(&cache, 8);
    assert_eq!(a.f.cached_frames(), 0, "A went first");
    assert_eq!(cache.stats_exact().nonresident_age, 24);
    // 4.
    assert_eq!(refault_each(&cache, &a, (0..8).rev()), 8);
    let s = cache.stats_exact();
    assert_eq!((s.lru(Lru::InactiveFile), s.lru(Lru::ActiveFile)), (32, 24));
    assert_eq!(
        ev(&s, Event::WorkingsetRestore),
        0,
        "A was not WORKINGSET yet"
    );
    assert_eq!(s.nonresident_age, 32);
    // 5.
    drop(g);
    assert_eq!(lists(&cache), (32, 8));
    // 6.
    h.read_each(0..8);
    assert_eq!(lists(&cache), (40, 8));
    h.read_each(0..8);
    let s = cache.stats_exact();
    assert_eq!((s.lru(Lru::InactiveFile), s.lru(Lru::ActiveFile)), (32, 16));
    assert_eq!(s.nonresident_age, 40);
    // 7.
    assert_eq!(cache.shrink(1), 1);
    let s = cache.stats_exact();
    assert_eq!(
        ev(&s, Event::PgDeactivate),
        8,
        "as many frames deactivated as refaults activated"
    );
    assert_eq!((s.lru(Lru::InactiveFile), s.lru(Lru::ActiveFile)), (39, 8));
    assert_eq!(a.f.cached_frames(), 8, "A was deactivated, not evicted");
    assert_eq!(b.f.cached_frames(), 31, "B's tail was evicted");
    assert_eq!(s.nonresident_age, 41);
    // 8, 9.
    drop(b);
    c.read_each(0..8);
    assert_eq!(lists(&cache), (16, 8));
    // 10.
    evict_tail(&cache, 8);
    assert_eq!(a.f.cached_frames(), 0, "A went first again");
    assert_eq!(c.f.cached_frames(), 8);
    assert_eq!(cache.stats_exact().nonresident_age, 49);
    // 11.
    assert_eq!(refault_each(&cache, &a, 0..8), 8);

    let s = cache.stats_exact();
    assert_eq!(ev(&s, Event::WorkingsetRefault), 16);
    assert_eq!(ev(&s, Event::WorkingsetActivate), 16);
    assert_eq!(ev(&s, Event::WorkingsetRestore), 8);
    assert_eq!(ev(&s, Event::PgActivate), 24, "G and H, by access");
    assert_eq!(ev(&s, Event::PgDeactivate), 8);
    for e in [Event::Evictions, Event::PgSteal, Event::PgScan] {
        assert_eq!(ev(&s, e), 17, "{}", e.name());
    }
    assert_eq!(
        (s.lru(Lru::InactiveFile), s.lru(Lru::ActiveFile)),
        (8, 16),
        "H and A active, C inactive"
    );
    assert_eq!(s.nonresident_age, 57);
    assert_eq!(s.cached_frames, 24);
    no_background_reclaim(&s);
    cache.check_lru().unwrap();
    drop((a, h, c));
    common::check_no_leak(&cache, "restore");
}

/// The clock ("before") counts refaults but has no lists to activate on.
#[test]
fn the_clock_counts_refaults_and_never_activates() {
    let mut cfg = config(true);
    cfg.reclaim = ReclaimPolicy::Clock;
    let cache = PageCache::new(cfg).unwrap();
    let file = File::open(&cache, 64, 7);
    file.read_each(0..64);
    file.read_each(0..64);
    // The clock's second chance: a first sweep clears REFERENCED, a second evicts.
    let mut freed = 0;
    for _ in 0..4 {
        freed += cache.shrink(64 - freed);
        if freed >= 64 {
            break;
        }
    }
    assert_eq!(freed, 64, "everything is clean and unused");
    file.read_each(0..64);
    let s = cache.stats_exact();
    assert_eq!(ev(&s, Event::WorkingsetRefault), 64);
    assert_eq!(ev(&s, Event::WorkingsetActivate), 0);
    assert_eq!(common::lru_total(&s), 0, "the clock keeps no lists");
    assert_eq!(ev(&s, Event::PgActivate), 0);
    drop(file);
    common::check_no_leak(&cache, "clock refaults");
}

/// A folio read twice by one handle, with reads of other folios between, is activated: the
/// second access of `folio_mark_accessed`. Each read here is a separate call, so none of them
/// "continues in the folio the previous one ended in" (the only reads `filemap_read` does not
/// mark).
///
/// Fails today: `read_at` decides that from `Readahead::last_read`, which only sequential reads
/// and misses move (random hits leave it alone since e60dc76, to keep shared handles from
/// writing it). After the misses 0..16 it stays at 15, so the later hit of page 15 — after a
/// hit of page 3 — is taken for a continuation and not marked; page 15 never activates, however
/// often it is read between other hits. A hot page that was a handle's last miss stays inactive
/// (and is evicted from the inactive tail like a page used once).
#[test]
fn a_page_read_twice_with_other_reads_between_is_activated() {
    let cache = PageCache::new(config(true)).unwrap();
    let data = common::pattern(16 * PAGE, 8);
    let f = cache.open(Arc::new(MemStore::from_vec(data))).unwrap();
    let mut b = vec![0u8; PAGE];
    for p in 0..16u64 {
        f.read_exact_at(p * PAGE as u64, &mut b).unwrap();
    }
    assert_eq!(lists(&cache), (16, 0));
    for p in [3u64, 15, 3, 15] {
        f.read_exact_at(p * PAGE as u64, &mut b).unwrap();
    }
    let s = cache.stats_exact();
    assert_eq!(
        (s.lru(Lru::InactiveFile), s.lru(Lru::ActiveFile)),
        (14, 2),
        "pages 3 and 15 were each read again after other pages: both active"
    );
}

/// Reading a page in small consecutive pieces is one access (the kernel's `filemap_read` skips
/// marking a read that starts in the folio the previous one ended in); reading it again after
/// another page is a second access, which activates it.
#[test]
fn a_page_read_in_pieces_is_one_access() {
    let cache = PageCache::new(config(true)).unwrap();
    let data = common::pattern(16 * PAGE, 9);
    let f = cache
        .open(Arc::new(MemStore::from_vec(data.clone())))
        .unwrap();
    let mut b = vec![0u8; PAGE];
    for p in 0..8u64 {
        f.read_exact_at(p * PAGE as u64, &mut b).unwrap();
    }
    assert_eq!(lists(&cache), (8, 0));
    let mut piece = vec![0u8; 256];
    for k in 0..(PAGE / 256) {
        let off = 12 * PAGE + k * 256;
        f.read_exact_at(off as u64, &mut piece).unwrap();
        same(&piece, &data[off..off + 256], "piece bytes");
    }
    assert_eq!(lists(&cache), (9, 0), "page 12 read in pieces: one access");
    f.read_exact_at(7 * PAGE as u64, &mut b).unwrap();
    f.read_exact_at(12 * PAGE as u64, &mut b).unwrap();
    assert_eq!(
        lists(&cache),
        (7, 2),
        "pages 7 and 12 each read a second time, after another page: active"
    );
}
