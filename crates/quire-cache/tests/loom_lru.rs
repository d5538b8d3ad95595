//! Loom models of the LRU batch protocol (`vmscan/swap.rs`): batch entries hold no reference,
//! so a folio may be removed by its owner, or freed and reused, while an entry for it waits. The
//! rules — a drain links only a folio that is `LRU_PENDING` and owned, under the LRU lock; whoever
//! clears a folio's owner then unlinks it under that lock — must keep every list consistent and
//! never leave a removed folio on one, whatever the interleaving.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use quire::mem::{FramePool, FRAME_SIZE};
use quire::vmscan::model::Model;
use quire::vmscan::Lru;

mod loom_support;
use loom_support::model;

fn pool() -> Arc<FramePool> {
    Arc::new(FramePool::with_caches(2 * FRAME_SIZE, 1, 0).unwrap())
}

/// An owner removes a folio while the batch that would add it is being drained: it ends up on
/// no list, and the lists stay consistent.
#[test]
fn removal_racing_the_add_drain_leaves_nothing_listed() {
    model(|| {
        let pool = pool();
        let vm = Arc::new(Model::new(2));
        let f = pool.alloc(0).unwrap();
        f.set_mapping(7);
        vm.lru_add(&pool, &f);
        let raw = f.clone().into_raw().as_ptr() as usize;
        let remover = {
            let (pool, vm) = (pool.clone(), vm.clone());
            thread::spawn(move || {
                // SAFETY: the test holds a reference; descriptors live as long as the pool.
                let folio = unsafe { &*(raw as *const quire::mem::Folio) };
                vm.remove(&pool, folio);
            })
        };
        vm.drain_all(&pool);
        remover.join().unwrap();
        assert!(!f.is_lru(), "a removed folio was left on a list");
        vm.check(&pool).unwrap();
        // SAFETY: the reference made for the remover above.
        drop(unsafe { pool.ref_from_raw(std::ptr::NonNull::new(raw as *mut _).unwrap()) });
    });
}

/// A stale add entry (left from an earlier life of the descriptor) is drained while reclaim has
/// the folio isolated and changes its list flags: the stale entry must not link it, and the
/// lists stay consistent with the flags.
#[test]
fn stale_add_entry_never_links_an_isolated_folio() {
    model(|| {
        let pool = pool();
        let vm = Arc::new(Model::new(2));
        let f = pool.alloc(0).unwrap();
        f.set_mapping(7);
        vm.lru_add(&pool, &f);
        vm.drain_all(&pool);
        assert!(f.is_lru());
        vm.queue_stale_add(&pool, &f);
        let reclaim = {
            let (pool, vm) = (pool.clone(), vm.clone());
            thread::spawn(move || {
                let g = vm
                    .isolate(&pool, Lru::InactiveFile)
                    .expect("on the inactive list");
                // Reclaim parks it on the active list (as a dirty folio at the tail).
                g.set_active();
                vm.putback(&pool, g);
            })
        };
        vm.drain_all(&pool);
        reclaim.join().unwrap();
        vm.check(&pool).unwrap();
        assert!(f.is_lru() && f.is_active(), "put back on the active list");
        vm.remove(&pool, &f);
        assert!(!f.is_lru());
        vm.check(&pool).unwrap();
    });
}
