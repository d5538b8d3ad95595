//! A data-integrity write-back (`fsync`, `sync_range`, `invalidate`) submits the requests it
//! has batched before it sleeps on a folio, as the kernel flushes a task's plug when it
//! schedules. Each batched request holds a share of the mapping's `store_len`, and the folio
//! it waits for may be locked by a writer waiting for that folio's write-back, itself waiting
//! for `store_len` exclusively (the write-back of the page holding the end of the file on an
//! aligned store cuts the store back after writing the page whole): without the unplug, the
//! three waited for each other for ever (seen once in about forty runs of `filemap_model`'s
//! four-thread test on an aligned store).
//!
//! `a_write_back_submits_its_batch_before_it_waits_for_a_folio` builds that cycle step by step
//! (a store that holds one write back until told, a folio lock held by the test) and checks
//! that every party finishes. Two short sleeps let the `fsync` reach its waits; were it
//! slower, the cycle would not form and the test would pass without checking anything, never
//! fail. Without the unplug it failed in 10 runs of 10.

mod common;

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use quire::filemap::PageCache;
use quire::store::{MemStore, Result as StoreResult, Store};

use common::{quiet_config, Watchdog, PAGE};

/// A `MemStore` whose write at `hold_at` waits until released (once), telling when it has
/// begun.
struct HoldOneWrite {
    inner: MemStore,
    hold_at: u64,
    /// (held: a write is waiting, released)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl HoldOneWrite {
    fn wait_held(&self) {
        let mut st = self.state.lock().unwrap();
        while !st.0 {
            st = self.changed.wait(st).unwrap();
        }
    }

    fn release(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

impl Store for HoldOneWrite {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> StoreResult<usize> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> StoreResult<usize> {
        if offset == self.hold_at {
            let mut st = self.state.lock().unwrap();
            if !st.1 {
                st.0 = true;
                self.changed.notify_all();
                while !st.1 {
                    st = self.changed.wait(st).unwrap();
                }
            }
        }
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> StoreResult<()> {
        self.inner.sync()
    }
    fn len(&self) -> StoreResult<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> StoreResult<()> {
        self.inner.set_len(len)
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
}

#[test]
fn a_write_back_submits_its_batch_before_it_waits_for_a_folio() {
    let _w = Watchdog::arm(Duration::from_secs(60), "unplug");
    let mut cfg = quiet_config(1 << 20);
    cfg.max_folio_order = 0;
    let cache = PageCache::new(cfg).unwrap();
    // Pages 0 and 2 (not adjacent: two requests) and page 3, which holds the end of the file
    // (3 pages and 100 bytes), on a store that takes whole pages.
    let len = 3 * PAGE + 100;
    let store = Arc::new(HoldOneWrite {
        inner: MemStore::from_vec(vec![1; len]).with_alignment(PAGE),
        hold_at: 3 * PAGE as u64,
        state: Mutex::new((false, false)),
        changed: Condvar::new(),
    });
    let f = cache.open(store.clone()).unwrap();
    for p in [0, 2, 3] {
        f.write_at((p * PAGE) as u64, &[2; 10]).unwrap();
    }
    let (done, finished) = mpsc::channel::<&'static str>();

    // The data-integrity write-back finds pages 0, 2 and 3 dirty, and waits for page 0's
    // lock, which the test holds.
    let page0 = f.read_folio(0).unwrap().lock();
    let integrity = {
        let (f, done) = (f.reopen(), done.clone());
        std::thread::spawn(move || {
            f.fsync().unwrap();
            done.send("the fsync").unwrap();
        })
    };
    std::thread::sleep(Duration::from_millis(50));

    // Meanwhile page 3 is written back by another call: its write is held (under write-back,
    // with a share of `store_len`; it will then cut the store back, exclusively).
    let end_page = {
        let (f, done) = (f.reopen(), done.clone());
        std::thread::spawn(move || {
            f.sync_range(3 * PAGE as u64, 1).unwrap();
            done.send("the write-back of the last page").unwrap();
        })
    };
    store.wait_held();

    // A writer locks page 3 and waits for its write-back (stable pages).
    let writer = {
        let (f, done) = (f.reopen(), done.clone());
        std::thread::spawn(move || {
            f.write_at(3 * PAGE as u64 + 50, &[3; 10]).unwrap();
            done.send("the writer").unwrap();
        })
    };
    let page3 = f.read_folio(3).unwrap();
    while !page3.folio().is_locked() {
        std::thread::sleep(Duration::from_millis(1));
    }

    // The fsync goes on: page 0, then page 2 (page 0's request is now batched, holding its
    // share), then page 3, whose lock the writer holds.
    drop(page0);
    std::thread::sleep(Duration::from_millis(50));

    // The held write goes on; its cut waits for every share of `store_len`, the fsync's
    // batched request's too.
    store.release();
    let mut left = vec!["the fsync", "the write-back of the last page", "the writer"];
    while !left.is_empty() {
        match finished.recv_timeout(Duration::from_secs(10)) {
            Ok(who) => left.retain(|w| *w != who),
            Err(_) => panic!(
                "{left:?} did not finish: the write-backs and the writer wait for each other"
            ),
        }
    }
    for t in [integrity, end_page, writer] {
        t.join().unwrap();
    }
    drop(page3);
    let mut all = vec![0u8; len];
    assert_eq!(f.read_at(0, &mut all).unwrap(), len);
    f.fsync().unwrap();
    assert_eq!(store.inner.contents(), all);
}
