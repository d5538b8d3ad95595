//! Loom models of the multi-generational LRU (`vmscan/lru_gen.rs`) where it races readers:
//! access marking is lock-free (`REFERENCED`, then the refs bits, each one read-modify-write of
//! the flag word), while the eviction scan and the loop protection's admission test change the
//! same word under the LRU lock (the generation bits, a count started over, `REFERENCED`
//! cleared). Whatever the interleaving, every folio must stay on the list its flags name — a
//! generation move must never be undone by a reader — and an access made after the scan looked
//! must be seen by the next look. Each model is checked against a deliberately broken marker
//! that updates the word with a load and a store.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use quire::mem::{FramePool, FRAME_SIZE};
use quire::vmscan::model::Model;

mod loom_support;
use loom_support::model;

fn pool() -> Arc<FramePool> {
    Arc::new(FramePool::with_caches(2 * FRAME_SIZE, 1, 0).unwrap())
}

/// A reader marks a folio accessed (its refs go up) while the eviction scan protects it (moves
/// it a generation up): the folio ends on the list its generation bits name.
fn access_racing_protection(broken: bool) {
    model(move || {
        let pool = pool();
        let vm = Arc::new(Model::new_multigen(2, false));
        let f = pool.alloc(0).unwrap();
        f.set_mapping(7);
        f.set_referenced();
        vm.lru_add(&pool, &f);
        vm.drain_all(&pool);
        let before = Model::gen_bits(&f);
        assert_ne!(before, 0, "on a generation list");
        let raw = f.clone().into_raw().as_ptr() as usize;
        let reader = {
            let (pool, vm) = (pool.clone(), vm.clone());
            thread::spawn(move || {
                // SAFETY: the test holds a reference; descriptors live as long as the pool.
                let folio = unsafe { &*(raw as *const quire::mem::Folio) };
                if broken {
                    folio.broken_inc_refs();
                } else {
                    vm.mark_accessed(&pool, folio);
                }
            })
        };
        assert!(vm.protect_oldest(&pool));
        reader.join().unwrap();
        vm.check(&pool).unwrap();
        assert_ne!(Model::gen_bits(&f), before, "moved a generation up");
        vm.remove(&pool, &f);
        // SAFETY: the reference made for the reader above.
        drop(unsafe { pool.ref_from_raw(std::ptr::NonNull::new(raw as *mut _).unwrap()) });
    });
}

#[test]
fn access_marking_racing_a_generation_move_keeps_the_lists_consistent() {
    access_racing_protection(false);
}

#[test]
#[should_panic]
fn broken_access_marking_undoes_a_generation_move() {
    access_racing_protection(true);
}

/// A reader uses the oldest resident while the admission test looks at it: if the test found
/// it idle (the candidate is let in), the use is still there afterwards; if the test found it
/// used (and cleared the mark), the use happened before the test. Either way the next test
/// sees any use made after the last one looked.
fn access_racing_admission(broken: bool) {
    model(move || {
        let pool = pool();
        let vm = Arc::new(Model::new_multigen(2, false));
        let resident = pool.alloc(0).unwrap();
        resident.set_mapping(7);
        vm.lru_add(&pool, &resident);
        vm.drain_all(&pool);
        // Added without a use yet (as readahead adds); the admission test's candidate is a
        // recent refault being added (the test is the same with loop protection on; off, the
        // resident goes to a generation list rather than probation in this tiny pool).
        let candidate = pool.alloc(0).unwrap();
        candidate.set_mapping(7);
        let raw = resident.clone().into_raw().as_ptr() as usize;
        let reader = {
            let (pool, vm) = (pool.clone(), vm.clone());
            thread::spawn(move || {
                // SAFETY: the test holds a reference; descriptors live as long as the pool.
                let folio = unsafe { &*(raw as *const quire::mem::Folio) };
                if broken {
                    // A marker that writes back a stale word: may clear REFERENCED set by
                    // nobody, or restore one the test cleared.
                    let w = folio.flags();
                    thread::yield_now();
                    folio.broken_store_flags(w | quire::mem::folio::REFERENCED);
                } else {
                    vm.mark_accessed(&pool, folio);
                }
            })
        };
        let rejected = vm.admission_test(&pool, &candidate);
        reader.join().unwrap();
        vm.check(&pool).unwrap();
        let used_after = resident.is_referenced();
        // The reader's one use is seen exactly once: either the test found it (and cleared
        // it) or it is still there for the next test.
        assert!(
            rejected != used_after,
            "the reader's use was seen by the test: {rejected}; is still marked: {used_after} \
             (exactly one must hold)"
        );
        vm.remove(&pool, &resident);
        // SAFETY: the reference made for the reader above.
        drop(unsafe { pool.ref_from_raw(std::ptr::NonNull::new(raw as *mut _).unwrap()) });
    });
}

#[test]
fn a_use_racing_the_admission_test_is_seen_exactly_once() {
    access_racing_admission(false);
}

#[test]
#[should_panic]
fn a_stale_flag_store_loses_or_doubles_the_use() {
    access_racing_admission(true);
}
