//! Loom models of the folio reference-count protocol: a speculative `try_get` racing with a
//! remover that freezes, unpublishes and frees (rule 1 of docs/RULES.md), concurrent last puts (exactly
//! one frees), the uptodate hand-over from a filler to readers, and the write-back wait.
#![cfg(loom)]

use std::ptr::NonNull;

use loom::sync::Arc;
use loom::thread;
use quire::mem::{Buddy, Folio, FramePool, FRAME_SIZE};
use quire::sync::loom::{AtomicUsize, Ordering};

mod loom_support;
use loom_support::model;

/// A one-frame pool without order-0 caches (every free goes straight to the buddy lists).
fn pool() -> Arc<FramePool> {
    Arc::new(FramePool::with_caches(FRAME_SIZE, 1, 0).unwrap())
}

/// A published, up-to-date folio whose first byte is `tag`; returns two raw references.
fn publish(pool: &FramePool, tag: u8) -> (usize, usize) {
    let f = pool.alloc(0).unwrap();
    let mut g = f.lock();
    g.bytes_mut().unwrap()[0] = tag;
    g.mark_uptodate();
    let f = g.unlock();
    let a = f.clone().into_raw().as_ptr() as usize;
    let b = f.into_raw().as_ptr() as usize;
    (a, b)
}

fn assert_all_free(pool: &FramePool) {
    let s = pool.stats();
    assert_eq!(s.allocated, 0, "{s:?}");
    assert_eq!(pool.free_blocks(), Buddy::initial_blocks(pool.nr_frames()));
    assert_eq!(pool.folio(0).unwrap().ref_count(), 0);
}

#[test]
fn speculative_get_against_freeze_remove_free() {
    model(|| {
        let pool = pool();
        let (slot_ref, own_ref) = publish(&pool, 7);
        // The index slot holds one raw reference; the remover owns another.
        let slot = Arc::new(AtomicUsize::new(slot_ref));

        let reader = {
            let (pool, slot) = (pool.clone(), slot.clone());
            thread::spawn(move || {
                let p = slot.load(Ordering::Acquire);
                if p == 0 {
                    return;
                }
                // SAFETY: descriptors live as long as the pool.
                let d: &Folio = unsafe { &*(p as *const Folio) };
                if let Some(r) = pool.try_get(d) {
                    // A successful speculative reference is never on a freed folio.
                    assert!(r.is_head());
                    if slot.load(Ordering::Acquire) == p {
                        assert_eq!(r.bytes().expect("published folios are up to date")[0], 7);
                    }
                }
            })
        };

        // The remover.
        // SAFETY: `own_ref` is a raw reference made by `publish` for this thread.
        let own = unsafe { pool.ref_from_raw(NonNull::new(own_ref as *mut Folio).unwrap()) };
        let mut g = own.lock();
        // SAFETY: the only raw reference besides ours is the slot's, which only this thread
        // takes out.
        let removed = match unsafe { g.freeze(1) } {
            Some(mut frozen) => {
                slot.store(0, Ordering::Release);
                // SAFETY: the slot's reference went with the slot entry.
                assert!(unsafe { frozen.release_raw_refs(1) });
                frozen.clear_uptodate();
                true
            }
            None => false, // the reader holds a reference
        };
        drop(g);
        reader.join().unwrap();
        if !removed {
            let p = slot.swap(0, Ordering::AcqRel);
            // SAFETY: the slot's raw reference, given back once.
            drop(unsafe { pool.ref_from_raw(NonNull::new(p as *mut Folio).unwrap()) });
        }
        assert_all_free(&pool);
    });
}

#[test]
fn concurrent_last_puts_free_exactly_once() {
    model(|| {
        let pool = pool();
        let (a, b) = publish(&pool, 1);
        let t = {
            let pool = pool.clone();
            thread::spawn(move || {
                // SAFETY: raw reference `a` belongs to this thread.
                drop(unsafe { pool.ref_from_raw(NonNull::new(a as *mut Folio).unwrap()) });
            })
        };
        // SAFETY: raw reference `b` belongs to this thread.
        drop(unsafe { pool.ref_from_raw(NonNull::new(b as *mut Folio).unwrap()) });
        t.join().unwrap();
        assert_all_free(&pool);
        // And the frame can be allocated again.
        assert!(pool.alloc(0).is_some());
    });
}

#[test]
fn try_get_against_last_put() {
    model(|| {
        let pool = pool();
        let (a, b) = publish(&pool, 3);
        // Drop one of the two references up front: `a` is the last one.
        // SAFETY: raw reference `b` is ours.
        drop(unsafe { pool.ref_from_raw(NonNull::new(b as *mut Folio).unwrap()) });
        let t = {
            let pool = pool.clone();
            thread::spawn(move || {
                // SAFETY: raw reference `a` belongs to this thread.
                drop(unsafe { pool.ref_from_raw(NonNull::new(a as *mut Folio).unwrap()) });
            })
        };
        // A stale pointer (no reference held) tries its luck.
        // SAFETY: descriptors live as long as the pool.
        let d: &Folio = unsafe { &*(a as *const Folio) };
        if let Some(r) = pool.try_get(d) {
            assert!(r.is_head());
            assert_eq!(r.bytes().unwrap()[0], 3);
        }
        t.join().unwrap();
        assert_all_free(&pool);
    });
}

#[test]
fn filler_hands_uptodate_bytes_to_a_locker() {
    model(|| {
        let pool = pool();
        let f = pool.alloc(0).unwrap();
        let other = f.clone().into_raw().as_ptr() as usize;
        let t = {
            let pool = pool.clone();
            thread::spawn(move || {
                // SAFETY: raw reference `other` belongs to this thread.
                let r = unsafe { pool.ref_from_raw(NonNull::new(other as *mut Folio).unwrap()) };
                if let Some(b) = r.bytes() {
                    assert_eq!(b[0], 42);
                }
                let g = r.lock();
                if g.is_uptodate() {
                    assert_eq!(g.bytes()[0], 42);
                }
            })
        };
        let mut g = f.lock();
        g.bytes_mut().unwrap()[0] = 42;
        g.mark_uptodate();
        drop(g);
        t.join().unwrap();
        assert_all_free(&pool);
    });
}

#[test]
fn end_writeback_wakes_the_waiter() {
    model(|| {
        let pool = pool();
        let f = pool.alloc(0).unwrap();
        assert!(!f.start_writeback());
        let other = f.clone().into_raw().as_ptr() as usize;
        let t = {
            let pool = pool.clone();
            thread::spawn(move || {
                // SAFETY: raw reference `other` belongs to this thread.
                let r = unsafe { pool.ref_from_raw(NonNull::new(other as *mut Folio).unwrap()) };
                r.wait_writeback();
                assert!(!r.is_writeback());
            })
        };
        f.end_writeback();
        t.join().unwrap();
        drop(f);
        assert_all_free(&pool);
    });
}
