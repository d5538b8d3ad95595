//! Several threads fork, write, read, mlock, munmap, page out and exit spaces at once on a small
//! budget (2 MiB, so that background and direct reclaim swap all the time), each checking every read
//! against a model of its spaces' bytes; the threads' first spaces are forks of one parent, so
//! their folios are shared across threads until written. At the end: every space's bytes match
//! its model, and once the spaces are gone no frame, folio or swap slot is left.

mod common;

use std::time::{Duration, Instant};

use common::{pattern, Rng};
use quire::filemap::PageCache;
use quire::mm::{AnonConfig, AnonMemory, Space};
use quire::stats::Event;
use quire::store::MemStore;

const PAGE: usize = 4096;
const PAGES: u64 = 96;
const THREADS: usize = 3;

fn run(seed: u64, mut spaces: Vec<(Space, Vec<u8>)>, deadline: Instant) -> Vec<(Space, Vec<u8>)> {
    let mut rng = Rng(seed);
    let mut step = 0u64;
    while Instant::now() < deadline {
        step += 1;
        let n = spaces.len();
        let k = rng.below(n);
        let p = rng.below(PAGES as usize) as u64;
        let op = rng.below(100);
        let (space, model) = &mut spaces[k];
        let page = p as usize * PAGE..(p as usize + 1) * PAGE;
        match op {
            0..=39 => {
                let off = rng.below(PAGE - 24);
                let bytes = rng.bytes(24);
                let at = page.start + off;
                space.write(at as u64, &bytes).unwrap();
                model[at..at + 24].copy_from_slice(&bytes);
            }
            40..=69 => {
                let got = space.with_page(p, |b| b.to_vec()).unwrap();
                common::same(
                    &got,
                    &model[page],
                    &format!("seed {seed:#x}, step {step}, space {k}, page {p}"),
                );
            }
            70..=73 if n < 5 => {
                let child = spaces[k].0.fork().unwrap();
                let m = spaces[k].1.clone();
                spaces.push((child, m));
            }
            74..=80 => {
                space.pageout(p..(p + 16).min(PAGES)).unwrap();
            }
            81..=84 => space.mlock(p..(p + 2).min(PAGES)).unwrap(),
            85..=89 => space.munlock(p..(p + 8).min(PAGES)).unwrap(),
            90..=93 => {
                space.munmap(p..p + 1).unwrap();
                model[page].fill(0);
            }
            94..=96 if n > 1 => {
                spaces.swap_remove(k);
            }
            _ => {}
        }
    }
    spaces
}

#[test]
fn threads_forking_writing_and_swapping_agree_with_their_models() {
    let _watchdog = common::Watchdog::arm(Duration::from_secs(60), "mm stress");
    // 2 MiB (512 frames) against up to 15 spaces of 96 pages: reclaim swaps all the time, and
    // the pages held locked (about a sixth of each space at equilibrium) leave room to fault.
    let mut cfg = common::quiet_config(2 << 20);
    cfg.alloc_timeout = Duration::from_secs(5);
    let cache = PageCache::new(cfg).unwrap();
    let anon = AnonMemory::new(&cache, AnonConfig::new().with_swap(MemStore::new(), 8192)).unwrap();
    let parent = anon.new_space(PAGES).unwrap();
    let base = pattern(PAGES as usize * PAGE, 77);
    parent.write(0, &base).unwrap();
    let firsts: Vec<Space> = (0..THREADS).map(|_| parent.fork().unwrap()).collect();
    drop(parent);
    let deadline = Instant::now() + Duration::from_secs(3);
    let before = anon.stats();
    let ends: Vec<Vec<(Space, Vec<u8>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = firsts
            .into_iter()
            .enumerate()
            .map(|(t, first)| {
                let model = base.clone();
                s.spawn(move || {
                    run(
                        0x1234_5678 + t as u64 * 0x9e37,
                        vec![(first, model)],
                        deadline,
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let after = anon.stats();
    for (t, spaces) in ends.iter().enumerate() {
        for (k, (space, model)) in spaces.iter().enumerate() {
            let mut all = vec![0; model.len()];
            space.read(0, &mut all).unwrap();
            common::same(&all, model, &format!("thread {t}, space {k} at the end"));
        }
    }
    eprintln!(
        "swapouts {}, swapins {}, cow copies {}, reuses {}, dirty tests {}",
        after.get(Event::Swapouts) - before.get(Event::Swapouts),
        after.get(Event::Swapins) - before.get(Event::Swapins),
        after.get(Event::CowCopies) - before.get(Event::CowCopies),
        after.get(Event::CowReuses) - before.get(Event::CowReuses),
        after.get(Event::DirtyTests) - before.get(Event::DirtyTests),
    );
    assert!(
        after.get(Event::Swapouts) > before.get(Event::Swapouts),
        "the budget made them swap"
    );
    cache.check_lru().unwrap();
    drop(ends);
    common::check_anon_empty(&cache, &anon, "mm stress");
}
