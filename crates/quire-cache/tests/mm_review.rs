//! The benefit of the rule for the dirty test on the last unmap (see `quire::mm`): dead
//! anonymous memory exits without a test. The review's scenario, which shows that the rule keeps
//! a write its weakened form loses, is a unit test of `mm` (`src/mm/tests.rs`): the weakened
//! rule loses data, so it exists only there.

mod common;

use quire::filemap::PageCache;
use quire::mm::{AnonConfig, AnonMemory, DirtyTest};
use quire::stats::Event;
use quire::store::MemStore;

/// The benefit of the rule: a space of dirty anonymous pages, none in swap, exits with no
/// dirty test at all; the before tests every page.
#[test]
fn exit_of_dead_anonymous_memory_tests_nothing() {
    for (rule, want) in [(DirtyTest::SkipDeadAnon, 0), (DirtyTest::Always, 64)] {
        let cache = PageCache::new(common::quiet_config(4 << 20)).unwrap();
        let mut config = AnonConfig::new().with_swap(MemStore::new(), 256);
        config.dirty_test = rule;
        let anon = AnonMemory::new(&cache, config).unwrap();
        let space = anon.new_space(64).unwrap();
        for p in 0..64u64 {
            space.write(p * 4096, &[p as u8; 100]).unwrap();
        }
        let before = anon.stats();
        assert_eq!(before.anon_frames, 64);
        drop(space);
        let after = anon.stats();
        assert_eq!(
            after.get(Event::DirtyTests) - before.get(Event::DirtyTests),
            want,
            "{rule:?}"
        );
        assert_eq!(after.anon_frames, 0);
        assert_eq!(after.spaces, 0);
        drop(anon);
        common::check_no_leak(&cache, &format!("{rule:?}"));
    }
}
