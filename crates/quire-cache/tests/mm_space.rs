//! Spaces of anonymous memory: fork and copy-on-write, swap under memory pressure, mlock,
//! mprotect, munmap, and bad input (clear errors, nothing lost).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{pattern, Rng};
use quire::filemap::PageCache;
use quire::mm::{AnonConfig, AnonMemory, MmError, PageState};
use quire::stats::Event;
use quire::store::{Fault, FaultyStore, MemStore};
use quire::vmscan::Lru;

const PAGE: u64 = 4096;

fn setup(budget: usize, slots: u64) -> (PageCache, AnonMemory) {
    let mut cfg = common::quiet_config(budget);
    cfg.alloc_timeout = Duration::from_millis(300);
    let cache = PageCache::new(cfg).unwrap();
    let anon =
        AnonMemory::new(&cache, AnonConfig::new().with_swap(MemStore::new(), slots)).unwrap();
    (cache, anon)
}

fn page_bytes(space: &quire::mm::Space, page: u64) -> Vec<u8> {
    space.with_page(page, |b| b.to_vec()).unwrap()
}

/// Everything is given back once the spaces are gone.
#[track_caller]
fn check_empty(cache: &PageCache, anon: &AnonMemory) {
    common::check_anon_empty(cache, anon, "anonymous memory");
}

#[test]
fn fork_shares_pages_until_one_side_writes() {
    let (cache, anon) = setup(8 << 20, 64);
    let parent = anon.new_space(16).unwrap();
    let data = pattern(16 * PAGE as usize, 3);
    parent.write(0, &data).unwrap();
    let child = parent.fork().unwrap();
    for p in 0..16 {
        assert_eq!(
            parent.page_state(p).unwrap(),
            PageState::Present { writable: false }
        );
        assert_eq!(
            child.page_state(p).unwrap(),
            PageState::Present { writable: false }
        );
    }
    let s0 = anon.stats();
    assert_eq!(s0.anon_frames, 16, "fork copies nothing");

    child.write(3 * PAGE, b"child").unwrap();
    parent.write(5 * PAGE, b"parent").unwrap();
    let s1 = anon.stats();
    assert_eq!(s1.get(Event::CowCopies) - s0.get(Event::CowCopies), 2);
    assert_eq!(s1.anon_frames, 18);
    assert_eq!(&page_bytes(&child, 3)[..5], b"child");
    assert_eq!(
        page_bytes(&parent, 3),
        data[3 * 4096..4 * 4096],
        "the parent keeps its page"
    );
    assert_eq!(&page_bytes(&parent, 5)[..6], b"parent");
    assert_eq!(
        page_bytes(&child, 5),
        data[5 * 4096..6 * 4096],
        "the child keeps its page"
    );

    // Once the child is gone the parent is the only mapper again: writes reuse in place.
    drop(child);
    let s2 = anon.stats();
    assert_eq!(s2.anon_frames, 16, "the child's copy died with it");
    parent.write(7 * PAGE, b"reused").unwrap();
    let s3 = anon.stats();
    assert_eq!(s3.get(Event::CowReuses) - s2.get(Event::CowReuses), 1);
    assert_eq!(s3.get(Event::CowCopies), s2.get(Event::CowCopies));
    assert_eq!(s3.anon_frames, 16);
    drop(parent);
    check_empty(&cache, &anon);
}

#[test]
fn pages_beyond_the_budget_go_to_swap_and_come_back() {
    // 2 MiB of frames, 8 MiB of anonymous memory.
    let (cache, anon) = setup(2 << 20, 4096);
    let space = anon.new_space(2048).unwrap();
    for p in 0..2048u64 {
        space
            .write(p * PAGE, &pattern(PAGE as usize, p as u8))
            .unwrap();
    }
    let mid = anon.stats();
    assert!(
        mid.get(Event::Swapouts) >= 1024,
        "pages went to swap: {mid:?}"
    );
    assert!(mid.anon_frames <= 512, "within the budget");
    for p in (0..2048u64).rev() {
        assert_eq!(
            page_bytes(&space, p),
            pattern(PAGE as usize, p as u8),
            "page {p}"
        );
    }
    let end = anon.stats();
    assert!(
        end.get(Event::Swapins) >= 1024,
        "pages came back from swap: {end:?}"
    );
    cache.check_lru().unwrap();
    drop(space);
    check_empty(&cache, &anon);
}

#[test]
fn forked_pages_in_swap_are_shared_and_copied_on_write() {
    let (cache, anon) = setup(4 << 20, 256);
    let parent = anon.new_space(8).unwrap();
    parent.write(0, &pattern(8 * PAGE as usize, 9)).unwrap();
    assert_eq!(parent.pageout(0..8).unwrap(), 8);
    let child = parent.fork().unwrap();
    assert_eq!(anon.stats().swap_used, 8);
    // The child reads page 0 in; the parent's entry finds the same folio in the swap cache.
    assert_eq!(page_bytes(&child, 0), pattern(8 * PAGE as usize, 9)[..4096]);
    let before = anon.stats();
    assert_eq!(
        page_bytes(&parent, 0),
        pattern(8 * PAGE as usize, 9)[..4096]
    );
    assert_eq!(
        anon.stats().get(Event::Swapins),
        before.get(Event::Swapins),
        "one swap-in for both"
    );
    parent.write(0, b"mine").unwrap();
    assert_eq!(&page_bytes(&parent, 0)[..4], b"mine");
    assert_eq!(page_bytes(&child, 0), pattern(8 * PAGE as usize, 9)[..4096]);
    drop(parent);
    drop(child);
    check_empty(&cache, &anon);
}

#[test]
fn mlocked_pages_stay_in_memory_under_pressure() {
    let (cache, anon) = setup(2 << 20, 4096);
    let locked = anon.new_space(128).unwrap();
    locked.write(0, &pattern(128 * PAGE as usize, 1)).unwrap();
    locked.mlock(0..128).unwrap();
    assert_eq!(cache.stats_exact().lru(Lru::Unevictable), 128);
    let other = anon.new_space(1024).unwrap();
    for p in 0..1024u64 {
        other.write(p * PAGE, &[p as u8; 64]).unwrap();
    }
    for p in 0..128 {
        assert!(
            matches!(locked.page_state(p).unwrap(), PageState::Present { .. }),
            "page {p}"
        );
    }
    assert_eq!(
        locked.pageout(0..128).unwrap(),
        0,
        "reclaim never unmaps a locked page"
    );
    locked.munlock(0..128).unwrap();
    assert_eq!(cache.stats_exact().lru(Lru::Unevictable), 0);
    assert_eq!(locked.pageout(0..128).unwrap(), 128);
    let mut back = vec![0; 128 * PAGE as usize];
    locked.read(0, &mut back).unwrap();
    common::same(
        &back,
        &pattern(128 * PAGE as usize, 1),
        "unlocked pages back from swap",
    );
    drop((locked, other));
    check_empty(&cache, &anon);
}

#[test]
fn bad_input_gets_clear_errors_and_loses_nothing() {
    let (cache, anon) = setup(1 << 20, 16);
    let space = anon.new_space(4).unwrap();
    space.write(0, b"kept").unwrap();
    assert!(matches!(
        space.write(4 * PAGE - 2, b"abc"),
        Err(MmError::OutOfRange { page: 4, pages: 4 })
    ));
    assert!(matches!(
        space.read(u64::MAX, &mut [0; 2]),
        Err(MmError::OutOfRange { .. })
    ));
    assert!(matches!(
        space.with_page(4, |_| ()),
        Err(MmError::OutOfRange { .. })
    ));
    assert!(matches!(
        space.munmap(2..5),
        Err(MmError::OutOfRange { .. })
    ));
    assert!(matches!(space.mlock(3..9), Err(MmError::OutOfRange { .. })));
    assert!(matches!(anon.new_space(0), Err(MmError::OutOfRange { .. })));

    space.mprotect(0..1, false).unwrap();
    assert!(matches!(
        space.write(0, b"lost"),
        Err(MmError::ReadOnly { page: 0 })
    ));
    assert!(matches!(
        space.with_page_mut(0, |_| ()),
        Err(MmError::ReadOnly { page: 0 })
    ));
    let mut b = [0; 4];
    space.read(0, &mut b).unwrap();
    assert_eq!(&b, b"kept");
    space.mprotect(0..1, true).unwrap();
    space.write(0, b"next").unwrap();

    // munmap: the pages read as zeros again.
    space.munmap(0..1).unwrap();
    assert_eq!(space.page_state(0).unwrap(), PageState::None);
    assert!(page_bytes(&space, 0).iter().all(|&x| x == 0));

    // A second anonymous memory on the same cache is refused.
    assert!(matches!(
        AnonMemory::new(&cache, AnonConfig::new()),
        Err(MmError::AlreadyAttached)
    ));
    drop(space);
    check_empty(&cache, &anon);
}

#[test]
fn swap_full_reports_no_memory_and_keeps_every_page() {
    // 1 MiB of frames (256), 64 slots: 400 pages cannot all be kept.
    let (cache, anon) = setup(1 << 20, 64);
    let space = anon.new_space(400).unwrap();
    let mut written = 0;
    let err = loop {
        match space.write(written * PAGE, &[written as u8 ^ 0x5a; 32]) {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 400, "memory and swap cannot hold 400 pages");
    };
    assert!(matches!(err, MmError::NoMemory { .. }), "{err}");
    let s = anon.stats();
    assert_eq!(s.swap_used, s.swap_slots, "swap is full");
    // Give memory back by dropping the 64 pages written last that are in memory; every other
    // page, in memory or in swap, still holds its bytes.
    let mut dropped = Vec::new();
    for p in (0..written).rev() {
        if dropped.len() < 64 && matches!(space.page_state(p).unwrap(), PageState::Present { .. }) {
            space.munmap(p..p + 1).unwrap();
            dropped.push(p);
        }
    }
    for p in (0..written).filter(|p| !dropped.contains(p)) {
        let got = page_bytes(&space, p);
        assert_eq!(&got[..32], &[p as u8 ^ 0x5a; 32], "page {p}");
    }
    drop(space);
    check_empty(&cache, &anon);
}

#[test]
fn a_swap_in_error_leaves_the_page_in_swap() {
    let mut cfg = common::quiet_config(2 << 20);
    cfg.alloc_timeout = Duration::from_millis(300);
    let cache = PageCache::new(cfg).unwrap();
    let store = Arc::new(FaultyStore::new(MemStore::new()));
    let anon = AnonMemory::new(&cache, AnonConfig::new().with_swap(store.clone(), 32)).unwrap();
    let space = anon.new_space(2).unwrap();
    space.write(0, b"precious").unwrap();
    assert_eq!(space.pageout(0..1).unwrap(), 1);
    let id = store.add(Fault::read_error(0..32 * PAGE).persistent());
    assert!(matches!(
        space.read(0, &mut [0; 8]),
        Err(MmError::SwapIn { page: 0, .. })
    ));
    assert_eq!(space.page_state(0).unwrap(), PageState::Swapped);
    store.remove(id);
    let mut b = [0; 8];
    space.read(0, &mut b).unwrap();
    assert_eq!(&b, b"precious");

    // A write error on swap-out keeps the page in memory, dirty.
    space.write(PAGE, b"also kept").unwrap();
    let id = store.add(Fault::write_error(0..32 * PAGE).persistent());
    assert_eq!(space.pageout(1..2).unwrap(), 0);
    store.remove(id);
    let mut b = [0; 9];
    space.read(PAGE, &mut b).unwrap();
    assert_eq!(&b, b"also kept");
    assert_eq!(space.pageout(1..2).unwrap(), 1);
    space.read(PAGE, &mut b).unwrap();
    assert_eq!(&b, b"also kept");
    drop(space);
    check_empty(&cache, &anon);
}

#[test]
fn a_random_walk_of_one_family_matches_a_model() {
    let (cache, anon) = setup(1 << 20, 2048);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let pages = 64u64;
    let mut spaces = vec![(
        anon.new_space(pages).unwrap(),
        vec![0u8; (pages * PAGE) as usize],
    )];
    for step in 0..3000 {
        let k = rng.below(spaces.len());
        let op = rng.below(100);
        let p = rng.below(pages as usize) as u64;
        let n = spaces.len();
        let (space, model) = &mut spaces[k];
        match op {
            0..=44 => {
                let off = rng.below(PAGE as usize - 16);
                let bytes = rng.bytes(16);
                let at = (p * PAGE) as usize + off;
                space.write(at as u64, &bytes).unwrap();
                model[at..at + 16].copy_from_slice(&bytes);
            }
            45..=74 => {
                let got = page_bytes(space, p);
                common::same(
                    &got,
                    &model[(p * PAGE) as usize..((p + 1) * PAGE) as usize],
                    &format!("step {step}, page {p}"),
                );
            }
            75..=79 if n < 6 => {
                let child = spaces[k].0.fork().unwrap();
                let m = spaces[k].1.clone();
                spaces.push((child, m));
            }
            80..=84 => {
                space.pageout(p..(p + 8).min(pages)).unwrap();
            }
            85..=87 => {
                space.mlock(p..p + 1).unwrap();
            }
            88..=90 => {
                space.munlock(p..p + 1).unwrap();
            }
            91..=93 => {
                space.munmap(p..p + 1).unwrap();
                model[(p * PAGE) as usize..((p + 1) * PAGE) as usize].fill(0);
            }
            94..=96 if n > 1 => {
                spaces.swap_remove(k);
            }
            _ => {
                cache.shrink(64);
            }
        }
    }
    for (space, model) in &spaces {
        let mut all = vec![0; model.len()];
        space.read(0, &mut all).unwrap();
        common::same(&all, model, "the end");
    }
    cache.check_lru().unwrap();
    drop(spaces);
    check_empty(&cache, &anon);
}
