//! The review's scenario for the rule of the dirty test on the last unmap, step by step (see
//! the [module documentation](super)): a page swapped in and written in place keeps the write
//! only in its frame's hardware dirty bit; a forked child mlocks it; reclaim unmaps the parent
//! and fails on the child; the child exits; reclaim runs again; the parent must read its own
//! bytes back through swap.
//!
//! It passes with the rule (`SkipDeadAnon`) and with the "before" (`Always`), under both dirty
//! bits, and the rule weakened to "anonymous" alone (`SkipAllAnon`, a variant that exists only
//! in these tests, since it loses writes) is shown to lose the write. The exit that tests
//! nothing is `tests/mm_review.rs`.

use std::time::Duration;

use super::{AnonConfig, AnonMemory, DirtyTest, PageState};
use crate::filemap::{CacheConfig, PageCache};
use crate::mem::{DirtyBitKind, DirtyBitMode};
use crate::store::MemStore;

/// A cache that writes back only when asked, so that the scenario's steps are the only I/O.
fn quiet_config(capacity: usize) -> CacheConfig {
    let mut cfg = CacheConfig::new(capacity);
    cfg.dirty_background = capacity;
    cfg.dirty_limit = capacity;
    cfg.dirty_expire = Duration::from_secs(3600);
    cfg.flush_interval = Duration::from_secs(3600);
    cfg
}

const FIRST: &[u8] = b"first bytes, written before the page went to swap";
const SECOND: &[u8] = b"SECOND bytes, written in place after the swap-in!";

/// Runs the scenario; returns what the parent reads back at the end, and the dirty bit used.
fn scenario(rule: DirtyTest, bit: DirtyBitMode) -> (Vec<u8>, DirtyBitKind) {
    let cache = PageCache::new(quiet_config(4 << 20)).unwrap();
    let mut config = AnonConfig::new().with_swap(MemStore::new(), 256);
    config.dirty_test = rule;
    config.dirty_bit = bit;
    let anon = AnonMemory::new(&cache, config).unwrap();
    let p1 = anon.new_space(4).unwrap();

    // A page whose only copy in swap is current, then written in place: the write is recorded
    // by the frame's dirty bit alone.
    p1.write(0, FIRST).unwrap();
    assert_eq!(p1.pageout(0..1).unwrap(), 1, "the page went to swap");
    assert_eq!(p1.page_state(0).unwrap(), PageState::Swapped);
    p1.write(0, SECOND).unwrap();
    assert_eq!(
        p1.page_state(0).unwrap(),
        PageState::Present { writable: true }
    );
    let s = anon.stats();
    assert_eq!(s.swap_cache_folios, 1, "the page kept its swap copy");

    // p1 forks p2; p2 mlocks the page.
    let p2 = p1.fork().unwrap();
    p2.mlock(0..1).unwrap();

    // Reclaim unmaps p1's pte and fails on p2's.
    assert_eq!(p1.pageout(0..1).unwrap(), 0, "p2 holds the page locked");
    assert_eq!(p1.page_state(0).unwrap(), PageState::Swapped);
    assert_eq!(
        p2.page_state(0).unwrap(),
        PageState::Present { writable: false }
    );

    // p2 exits: the page's last mapping goes.
    drop(p2);

    // Reclaim runs again and frees the page (written to swap first if it knows it is dirty).
    cache.shrink(1 << 20);
    let s = anon.stats();
    assert_eq!(s.swap_cache_folios, 0, "reclaim freed the page");
    assert_eq!(p1.page_state(0).unwrap(), PageState::Swapped);

    let mut back = vec![0; SECOND.len()];
    p1.read(0, &mut back).unwrap();
    (back, s.dirty_bit)
}

#[test]
fn the_rule_keeps_the_write() {
    for bit in [DirtyBitMode::Auto, DirtyBitMode::Software] {
        let (back, kind) = scenario(DirtyTest::SkipDeadAnon, bit);
        assert_eq!(back, SECOND, "SkipDeadAnon, {kind:?} dirty bit");
    }
}

#[cfg(feature = "bench-internals")]
#[test]
fn the_before_keeps_the_write() {
    for bit in [DirtyBitMode::Auto, DirtyBitMode::Software] {
        let (back, kind) = scenario(DirtyTest::Always, bit);
        assert_eq!(back, SECOND, "Always, {kind:?} dirty bit");
    }
}

/// The check that the scenario can fail: without the swap-cache condition, the exit skips the
/// test, reclaim frees a page it thinks clean, and the parent reads the stale swap copy.
#[test]
fn the_rule_without_its_swap_cache_condition_loses_the_write() {
    for bit in [DirtyBitMode::Auto, DirtyBitMode::Software] {
        let (back, kind) = scenario(DirtyTest::SkipAllAnon, bit);
        assert_eq!(
            back, FIRST,
            "SkipAllAnon, {kind:?} dirty bit: the write should have been lost"
        );
    }
}
