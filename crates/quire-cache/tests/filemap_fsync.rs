//! `fsync` against a flusher that never rests: every byte written before an `fsync` must be in
//! the store's synced image when it returns, also when the flusher took the folio for write-back
//! just as `fsync` looked for dirty folios (a write-back `fsync` neither writes nor waits for is
//! data a crash loses).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quire::filemap::{CacheConfig, PageCache};
use quire::store::MemStore;

use common::{Rng, StopOnDrop, Watchdog, PAGE};

const PAGES: usize = 8;

#[test]
fn fsync_returns_only_after_every_earlier_write_is_synced() {
    let _w = Watchdog::arm(Duration::from_secs(60), "fsync race");
    let mut cfg = CacheConfig::new(1 << 20);
    // The flusher writes whatever is dirty every millisecond.
    cfg.dirty_background = 0;
    cfg.dirty_expire = Duration::ZERO;
    cfg.flush_interval = Duration::from_millis(1);
    let cache = PageCache::new(cfg).unwrap();
    let store = Arc::new(MemStore::from_vec(vec![0; PAGES * PAGE]));
    let f = cache.open(store.clone()).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // A second writer keeps the flusher busy on other pages of the file.
        let (g, stop) = (f.reopen(), &stop);
        s.spawn(move || {
            let mut rng = Rng(3);
            while !stop.load(Ordering::Relaxed) {
                let page = PAGES / 2 + rng.below(PAGES / 2);
                g.write_at((page * PAGE) as u64, &[rng.below(256) as u8; 64])
                    .unwrap();
            }
        });
        // Spinning threads, so that the flusher is sometimes preempted in the middle of taking a
        // folio for write-back (these machines have two cores).
        for _ in 0..2 {
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let _stop = StopOnDrop(stop);
        let mut rng = Rng(5);
        let start = Instant::now();
        let mut rounds = 0u32;
        while rounds < 2_000 || start.elapsed() < Duration::from_secs(3) {
            rounds += 1;
            let page = rng.below(PAGES / 2);
            let byte = (rounds % 251) as u8 + 1;
            f.write_at((page * PAGE + 100) as u64, &[byte]).unwrap();
            // Give the flusher a moment to pick the folio up, sometimes.
            if rounds.is_multiple_of(3) {
                std::thread::sleep(Duration::from_micros(rng.below(1500) as u64));
            }
            f.fsync().unwrap();
            let synced = store.synced_contents();
            assert_eq!(
                synced[page * PAGE + 100],
                byte,
                "round {rounds}: the write to page {page} is not in the synced image after fsync"
            );
            if start.elapsed() > Duration::from_secs(20) {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
}
