//! Loom models of the reverse map's flag-word protocol (`mm/rmap.rs`): the decisions that a
//! pte going away, a first pte of a file folio and reclaim's `add_to_swap` take from one
//! read-modify-write each of the folio's flag word, with no lock in common (a zap holds only its
//! page-table lock, reclaim and faults the folio lock).
//!
//! - A write recorded by the frame's dirty bit before the last pte went reaches `DIRTY`, even
//!   when a first mapping comes between that unmap and its test (`RMAP_TESTING`).
//! - The last unmap of an anonymous folio and reclaim adding it to the swap cache agree on its
//!   fate: either the unmap saw `SWAPCACHE` (and tested the bit) or reclaim saw the mapcount at
//!   zero (and treats the content as dead) — never neither.
//!
//! Each model is run against a deliberately broken variant of the protocol too, and must fail
//! there: a model that passes a broken protocol proves nothing.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p quire-cache --release --test loom_mm`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use quire::mem::{FramePool, FRAME_SIZE};
use quire::mm::model;

mod loom_support;
use loom_support::{fails, model};

fn pool() -> Arc<FramePool> {
    Arc::new(FramePool::with_caches(FRAME_SIZE, 1, 0).unwrap())
}

/// A space wrote a file folio (the frame's bit is set) and unmaps it — the last pte — while
/// another space maps it for the first time (which clears the bit when it may).
fn first_map_racing_the_last_unmap(first_map: fn(&quire::mem::Folio) -> bool) {
    let pool = pool();
    let r = pool.alloc(0).unwrap();
    let f = r.folio();
    model::map(f);
    let hw = Arc::new(AtomicBool::new(true));
    let ptr = f as *const quire::mem::Folio as usize;
    let (p1, h1) = (pool.clone(), hw.clone());
    let unmapper = thread::spawn(move || {
        let _keep = &p1;
        // SAFETY: the folio outlives the threads (main holds its reference).
        let f = unsafe { &*(ptr as *const quire::mem::Folio) };
        let (last, _) = model::unmap(f);
        if last {
            if h1.swap(false, Ordering::AcqRel) {
                f.set_dirty();
            }
            model::end_test(f);
        }
    });
    let (p2, h2) = (pool.clone(), hw.clone());
    let mapper = thread::spawn(move || {
        let _keep = &p2;
        // SAFETY: as above.
        let f = unsafe { &*(ptr as *const quire::mem::Folio) };
        if first_map(f) {
            h2.store(false, Ordering::Release);
        }
    });
    unmapper.join().unwrap();
    mapper.join().unwrap();
    assert!(
        f.is_dirty() || hw.load(Ordering::Acquire),
        "the write recorded before the last unmap was lost"
    );
    drop(r);
}

#[test]
fn a_first_mapping_never_clears_a_bit_the_last_unmap_is_to_test() {
    model(|| first_map_racing_the_last_unmap(model::first_map));
}

#[test]
fn the_model_catches_a_first_mapping_that_ignores_the_test() {
    assert!(fails(|| first_map_racing_the_last_unmap(
        model::first_map_ignoring_test
    )));
}

/// An anonymous folio's last pte goes while reclaim adds the folio to the swap cache.
fn add_to_swap_racing_the_last_unmap(add_to_swap: fn(&quire::mem::Folio) -> u8) {
    let pool = pool();
    let r = pool.alloc(0).unwrap();
    let f = r.folio();
    model::map(f);
    let ptr = f as *const quire::mem::Folio as usize;
    let tested = Arc::new(AtomicBool::new(false));
    let (p1, t1) = (pool.clone(), tested.clone());
    let unmapper = thread::spawn(move || {
        let _keep = &p1;
        // SAFETY: the folio outlives the threads (main holds its reference).
        let f = unsafe { &*(ptr as *const quire::mem::Folio) };
        let (last, in_swap_cache) = model::unmap(f);
        assert!(last);
        // The dirty-state transfer on unmap: test an anonymous folio only if it is in the swap cache;
        // otherwise its content is dead and this unmap ends its life.
        t1.store(in_swap_cache, Ordering::Release);
        model::end_test(f);
    });
    let p2 = pool.clone();
    let reclaim = thread::spawn(move || {
        let _keep = &p2;
        // SAFETY: as above.
        let f = unsafe { &*(ptr as *const quire::mem::Folio) };
        add_to_swap(f)
    });
    unmapper.join().unwrap();
    let fate = reclaim.join().unwrap();
    let tested = tested.load(Ordering::Acquire);
    let deaths = usize::from(!tested) + usize::from(fate == 2);
    if fate == 0 {
        assert!(
            tested,
            "reclaim went on with the folio, whose last unmap skipped the dirty-bit test"
        );
    } else {
        assert_eq!(deaths, 1, "a dead folio's life is ended exactly once");
    }
    drop(r);
}

#[test]
fn the_last_unmap_and_add_to_swap_agree_on_the_fate() {
    model(|| add_to_swap_racing_the_last_unmap(model::add_to_swap));
}

#[test]
fn the_model_catches_add_to_swap_reading_the_mapcount_first() {
    assert!(fails(|| add_to_swap_racing_the_last_unmap(
        model::add_to_swap_checking_first
    )));
}

#[test]
fn the_model_catches_a_dead_folio_nobody_ends() {
    assert!(fails(|| add_to_swap_racing_the_last_unmap(
        model::add_to_swap_without_handoff
    )));
}

/// A zero-copy reader takes a reference and checks for mappings while a write fault takes its
/// mapcount unit and checks for readers: at least one of them sees the other (the reader then
/// write-protects the ptes; the writer gives the spaces a copy), never neither — else the
/// reader would borrow bytes a space writes.
fn reader_racing_a_write_fault(writer: fn(&quire::mem::Folio) -> bool) {
    let pool = pool();
    let r = pool.alloc(0).unwrap();
    let ptr = r.folio() as *const quire::mem::Folio as usize;
    let p1 = pool.clone();
    let reader = thread::spawn(move || {
        // SAFETY: the folio outlives the threads (main holds its reference).
        let f = unsafe { &*(ptr as *const quire::mem::Folio) };
        // The reader keeps its reference (its borrow of the bytes) past the fault's decision:
        // main puts it back after both threads end.
        let _ = p1.try_get(f).expect("main holds a reference").into_raw();
        model::reader_sees_mapping(f)
    });
    let p2 = pool.clone();
    let fault = thread::spawn(move || {
        // SAFETY: as above.
        let f = unsafe { &*(ptr as *const quire::mem::Folio) };
        // The fault's own reference (its folio guard's).
        let held = p2.try_get(f).expect("main holds a reference");
        let saw = writer(f);
        drop(held);
        saw
    });
    let reader_saw_mapping = reader.join().unwrap();
    let writer_saw_reader = fault.join().unwrap();
    // SAFETY: the reader's raw reference, given back once.
    drop(unsafe { pool.ref_from_raw(std::ptr::NonNull::from(r.folio())) });
    assert!(
        reader_saw_mapping || writer_saw_reader,
        "a reader borrowed bytes that a writable pte can change"
    );
    drop(r);
}

/// The fault: a new pte's unit first, then the check. `main`'s reference stands for the index's.
fn write_fault(f: &quire::mem::Folio) -> bool {
    model::map(f);
    model::writer_sees_readers(f, true)
}

#[test]
fn a_zero_copy_reader_and_a_write_fault_see_each_other() {
    model(|| reader_racing_a_write_fault(write_fault));
}

#[test]
fn the_model_catches_a_write_fault_reading_the_count_with_a_plain_load() {
    assert!(fails(|| reader_racing_a_write_fault(
        model::writer_with_a_plain_load
    )));
}

#[test]
fn the_model_catches_a_write_fault_that_checks_before_counting() {
    assert!(fails(|| reader_racing_a_write_fault(
        model::writer_checking_before_counting
    )));
}
