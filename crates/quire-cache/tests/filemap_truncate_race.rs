//! Truncation racing write-back: once `set_len` has cut a file, no write-back may leave the
//! store longer than the file (a new cache would read the old, longer length, and bytes past
//! the cut would come back as file data).
//!
//! A write-back (`flush`, `fsync`, the flusher) first extends a store shorter than the file up
//! to its last dirty page (`grow_store_for`). It must read the file's length for that under
//! `store_len`, held exclusively, not before: `set_len` publishes the new length, drops the
//! folios past it and cuts the store under `store_len`, so a length read before the cut and
//! used after it undoes the cut (the store grows back to the old length). That is the race
//! the model test (`filemap_model.rs`) met about once in ten runs when reclaim's timing
//! changed, through the flusher.
//!
//! Each round extends the file past the store with dirty pages, then cuts it while another
//! thread writes it back; a third thread keeps slow write-backs of the first page in flight, so
//! that the write-back and the cut both wait for `store_len` and take it in either order.
//! Without the fix, each test fails within its first thousand rounds (well under a second).
//!
//! - `a_write_back_never_extends_the_store_past_a_cut`: cuts at page boundaries.
//! - `a_cut_inside_a_dirty_page_is_not_undone_by_write_back`: cuts inside a dirty page, whose
//!   folio the write-back may be writing as the cut comes (`set_len` waits for that
//!   write-back before it cuts the store).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quire::filemap::{CacheConfig, PageCache};
use quire::store::{MemStore, Result as StoreResult, Store};

use common::{quiet_config, read_all, Rng, StopOnDrop, Watchdog, PAGE};

/// A `MemStore` whose writes at offset 0 take a while: a write-back of the first page holds
/// its share of `store_len` long enough for others to queue behind it.
struct SlowFirstPage(MemStore);

impl Store for SlowFirstPage {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> StoreResult<usize> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> StoreResult<usize> {
        if offset == 0 {
            std::thread::sleep(Duration::from_micros(30));
        }
        self.0.write_at(offset, buf)
    }
    fn sync(&self) -> StoreResult<()> {
        self.0.sync()
    }
    fn len(&self) -> StoreResult<u64> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> StoreResult<()> {
        self.0.set_len(len)
    }
}

/// Rounds of: extend the file past the store with dirty pages, then cut it while another
/// thread writes it back; after both, the store must be no longer than the file. `cut` picks
/// the new length from the round's generator.
fn race_cut_against_write_back(what: &'static str, pages: usize, cut: fn(&mut Rng) -> u64) {
    let _w = Watchdog::arm(Duration::from_secs(120), what);
    let mut cfg = quiet_config(4 << 20);
    cfg.io_threads = 2;
    cfg.max_folio_order = 0;
    let cache = PageCache::new(cfg).unwrap();
    let store = Arc::new(SlowFirstPage(MemStore::from_vec(vec![7; PAGE])));
    let f = cache.open(store.clone()).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (g, stop) = (f.reopen(), &stop);
        // Slow write-backs of the first page, always inside the file: their shares of
        // `store_len` keep the others waiting for it.
        s.spawn(move || {
            let _stop = StopOnDrop(stop);
            let mut n = 0u8;
            while !stop.load(Ordering::Relaxed) {
                n = n.wrapping_add(1);
                g.write_at(0, &[n; 64]).unwrap();
                g.flush().unwrap();
            }
        });
        let _stop = StopOnDrop(stop);
        let mut rng = Rng(0x7275_6e63);
        let start = Instant::now();
        let mut rounds = 0u32;
        while start.elapsed() < Duration::from_secs(2) {
            rounds += 1;
            // The store ends at the first page; the file goes on with dirty pages.
            f.set_len(PAGE as u64).unwrap();
            for p in 1..pages {
                f.write_at((p * PAGE) as u64, &[rounds as u8 | 1; 100])
                    .unwrap();
            }
            let len = cut(&mut rng);
            let spin = rng.below(4000);
            std::thread::scope(|s| {
                s.spawn(|| f.flush().unwrap());
                // The cut comes 0 to ~20 µs after the write-back's thread is spawned.
                for _ in 0..spin {
                    std::hint::spin_loop();
                }
                f.set_len(len).unwrap();
            });
            let stored = store.len().unwrap();
            assert!(
                stored <= len,
                "{what}, round {rounds}: the file was cut to {len} bytes and the write-back \
                 racing the cut has returned, but the store holds {stored}"
            );
        }
    });
    // What a new cache sees is what the file was left at.
    let model_len = f.len();
    f.fsync().unwrap();
    drop(f);
    let cache = PageCache::new(CacheConfig::new(1 << 20)).unwrap();
    let again = cache.open(store).unwrap();
    assert_eq!(
        again.len(),
        model_len,
        "{what}: the length through a new cache"
    );
    assert_eq!(read_all(&again).len() as u64, model_len);
}

#[test]
fn a_write_back_never_extends_the_store_past_a_cut() {
    race_cut_against_write_back("a cut at a page boundary", 16, |rng| {
        (1 + rng.below(8) as u64) * PAGE as u64
    });
}

#[test]
fn a_cut_inside_a_dirty_page_is_not_undone_by_write_back() {
    race_cut_against_write_back("a cut inside a dirty page", 4, |rng| {
        (PAGE + 1 + rng.below(3 * PAGE - 2)) as u64
    });
}
