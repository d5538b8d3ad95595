//! Loom models of the borrow slots (`mem/borrow.rs`): the hazard pointers that let
//! `CachedFile::with_folio` lend a folio's bytes without taking a reference. A borrower names
//! the folio in its slot, fences, and checks the folio's byte sequence and flags against its
//! translation; every party that changes the bytes or reuses the frames fences and scans the
//! slots after moving the sequence or the flags:
//!
//! - a freeze (an in-place write or an eviction) fails when a slot names the folio;
//! - a write fault gives the spaces a copy when a slot names the folio;
//! - the free of a folio a slot names is deferred: the pool frees it at its next look once no
//!   slot names it (here `free_frames`, or an allocation that finds no frame);
//! - an evicted folio is freed from its freeze without that look: the freeze's scan stands for
//!   it.
//!
//! The bytes are modelled as two atomic words written with relaxed stores: a borrower whose
//! check passed must read the bytes it was promised, twice, and the frames must be freed
//! exactly once. Each model also runs against a deliberately broken side
//! (`quire::mem::borrow::broken`) and must fail there.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 CARGO_TARGET_DIR=target/loom cargo test -p quire-cache --release --test loom_borrow -- --test-threads=1`.
#![cfg(loom)]

use std::ptr::NonNull;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use quire::mem::borrow::{broken, Borrow};
use quire::mem::{Folio, FramePool, FRAME_SIZE};
use quire::mm::model;

mod loom_support;
use loom_support::{fails, model};

/// A one-frame pool without order-0 caches: a freed frame is the next one allocated.
fn pool() -> Arc<FramePool> {
    Arc::new(FramePool::with_caches(FRAME_SIZE, 1, 0).unwrap())
}

/// The folio's bytes: two words that are equal whenever nobody is writing.
struct Bytes([AtomicU64; 2]);

impl Bytes {
    fn new(v: u64) -> Arc<Bytes> {
        Arc::new(Bytes([AtomicU64::new(v), AtomicU64::new(v)]))
    }
    fn write(&self, v: u64) {
        self.0[0].store(v, Ordering::Relaxed);
        self.0[1].store(v, Ordering::Relaxed);
    }
    fn read(&self) -> (u64, u64) {
        (
            self.0[0].load(Ordering::Relaxed),
            self.0[1].load(Ordering::Relaxed),
        )
    }
}

/// An up-to-date folio, as the index holds it; returns its one raw reference (the index's).
fn publish(pool: &FramePool) -> usize {
    let f = pool.alloc(0).unwrap();
    let mut g = f.lock();
    g.mark_uptodate();
    g.unlock().into_raw().as_ptr() as usize
}

fn folio<'a>(p: usize) -> &'a Folio {
    // SAFETY: (test) descriptors live as long as the pool, which every thread keeps alive.
    unsafe { &*(p as *const Folio) }
}

fn raw(p: usize) -> NonNull<Folio> {
    NonNull::new(p as *mut Folio).unwrap()
}

/// The borrower of `Mapping::with_folio_translated`, with the translation's sequence `seq`:
/// the folio named in its slot, the check, two reads of the bytes if the check passed, and the
/// end. Returns the two reads if the borrow stood. (The caller asserts on them in the main
/// thread: a panic in a spawned loom thread aborts the process when its destructors reach
/// loom's state during the unwinding.)
fn borrow(f: &Folio, seq: u32, bytes: &Bytes) -> Option<[(u64, u64); 2]> {
    let b = Borrow::begin(f).expect("the thread's slot is free");
    let reads = f.read_seq_begin().is_some_and(|(s, _)| s == seq).then(|| {
        let first = bytes.read();
        thread::yield_now();
        [first, bytes.read()]
    });
    b.end();
    reads
}

/// The borrower's reads, if its borrow stood, must both be the original bytes.
fn check(reads: Option<[(u64, u64); 2]>) {
    if let Some(reads) = reads {
        assert_eq!(
            reads,
            [(1, 1); 2],
            "a standing borrow read bytes that changed under it"
        );
    }
}

/// The borrower's thread; it returns its reads if its borrow stood.
type Borrower = thread::JoinHandle<Option<[(u64, u64); 2]>>;

/// Every model's start: the sides in `which` broken, a one-frame pool whose folio the index
/// holds (bytes 1), and a borrower spawned with the translation made while the index held it.
fn start(which: usize) -> (Arc<FramePool>, usize, Arc<Bytes>, Borrower) {
    broken::set(which);
    let pool = pool();
    let p = publish(&pool);
    let bytes = Bytes::new(1);
    let (seq, _) = folio(p).read_seq_begin().unwrap();
    let borrower = {
        let bytes = bytes.clone();
        thread::spawn(move || borrow(folio(p), seq, &bytes))
    };
    (pool, p, bytes, borrower)
}

/// Model 1: a borrower against a freezer that writes in place (what `Mapping::modify` does when
/// the index's reference is the only one): the freeze must fail while the borrow stands, or the
/// borrower must back off.
fn borrower_against_a_freeze(which: usize) {
    let (pool, p, bytes, borrower) = start(which);
    // The freezer acts for the index's reference (it is the folio guard's here).
    // SAFETY: (test) the index's raw reference, taken back once.
    let mut g = unsafe { pool.ref_from_raw(raw(p)) }.lock();
    // SAFETY: the guard's reference is the only one.
    if let Some(frozen) = unsafe { g.freeze(0) } {
        bytes.write(2);
        drop(frozen);
    }
    let p2 = g.unlock().into_raw().as_ptr() as usize;
    assert_eq!(p, p2);
    check(borrower.join().unwrap());
    assert_eq!(folio(p).ref_count(), 1, "the index's reference survives");
    // SAFETY: (test) the index's raw reference, given back once.
    drop(unsafe { pool.ref_from_raw(raw(p)) });
    assert_eq!(pool.free_frames(), 1, "the frame is free again, once");
}

#[test]
fn a_borrow_against_a_freeze() {
    model(|| borrower_against_a_freeze(0));
}

#[test]
fn broken_borrower_without_its_fence_is_caught_by_the_freeze_model() {
    assert!(fails(|| borrower_against_a_freeze(broken::BORROWER_FENCE)));
}

#[test]
fn broken_freeze_without_its_scan_is_caught() {
    assert!(fails(|| borrower_against_a_freeze(broken::FREEZE_SCAN)));
}

/// Model 2: a borrower against the folio's free (the index's reference, the last, put) and the
/// frame's reuse by a new owner who writes it: the borrower never reads the new owner's bytes,
/// and the frame is freed exactly once — at once, or deferred while the borrower's slot names
/// it and freed by the next look at the pool after the borrow ended.
fn borrower_against_free_and_reuse(which: usize) {
    let (pool, p, bytes, borrower) = start(which);
    // SAFETY: (test) the index's raw reference, the last: this put frees the folio (or defers
    // the free while the borrower's slot names it).
    drop(unsafe { pool.ref_from_raw(raw(p)) });
    // The frame's next owner, if it is free already (the allocation frees a deferred folio
    // whose borrow has ended).
    if let Some(new) = pool.alloc(0) {
        assert_eq!(new.folio() as *const Folio as usize, p, "a one-frame pool");
        bytes.write(2);
        drop(new);
    }
    check(borrower.join().unwrap());
    assert_eq!(
        pool.free_frames(),
        1,
        "the frame is free once both threads are done (not leaked, not freed twice)"
    );
    assert_eq!(pool.deferred_frees(), 0, "no free is left deferred");
    let again = pool.alloc(0).expect("the frame is free");
    assert!(pool.alloc(0).is_none(), "the frame was freed twice");
    drop(again);
}

#[test]
fn a_borrow_against_free_and_reuse() {
    model(|| borrower_against_free_and_reuse(0));
}

#[test]
fn broken_free_without_its_scan_is_caught() {
    assert!(fails(|| borrower_against_free_and_reuse(broken::FREE_SCAN)));
}

/// The model's accounting is live: when deferred folios are never freed, the frame leaks in
/// some execution (so deferral does happen, and the end-of-model count sees it).
#[test]
fn a_deferred_free_never_carried_out_is_caught() {
    assert!(fails(|| borrower_against_free_and_reuse(
        broken::DEFERRED_NEVER_FREED
    )));
}

#[test]
fn broken_borrower_without_its_fence_is_caught_by_the_free_model() {
    assert!(fails(|| borrower_against_free_and_reuse(
        broken::BORROWER_FENCE
    )));
}

/// Model 3: a borrower against an eviction (`Mapping::evict`, then reclaim's batched free):
/// the evictor's own reference and the index's frozen together, the index's given up with its
/// slot, the folio freed from the frozen state — no unfreeze and no look for borrowers at the
/// free ([`quire::mem::FolioGuard::free_frozen`]) — and its frame reused and written. The
/// freeze's scan alone must keep the borrower from reading the new owner's bytes.
fn borrower_against_an_eviction(which: usize) {
    let (pool, p, bytes, borrower) = start(which);
    let f = folio(p);
    // Reclaim's reference (isolation's `try_get`); the index holds the other.
    let mut g = pool.try_get(f).expect("the index holds a reference").lock();
    // SAFETY: the index's raw reference is the freeze's other one; nothing uses it meanwhile.
    let ticket = unsafe { g.freeze(1) }.map(|mut frozen| {
        // SAFETY: (test) the index's slot is emptied: its reference is never used again.
        assert!(unsafe { frozen.release_raw_refs(1) });
        frozen
            .end_for_free()
            .expect("only the guard's reference is left")
    });
    let evicted = ticket.is_some();
    match ticket {
        Some(ticket) => {
            let mut batch = pool.free_batch();
            g.free_frozen(ticket, &mut batch);
            drop(batch);
        }
        None => drop(g),
    }
    if evicted {
        // The frame's next owner (a one-frame pool).
        let new = pool.alloc(0).expect("the evicted frame is free at once");
        assert_eq!(new.folio() as *const Folio as usize, p, "a one-frame pool");
        bytes.write(2);
        drop(new);
    }
    check(borrower.join().unwrap());
    if !evicted {
        // SAFETY: (test) the index's raw reference, given back once.
        drop(unsafe { pool.ref_from_raw(raw(p)) });
    }
    // (The new owner's free may have been deferred while the borrower's slot still named the
    // descriptor after its check failed; the count frees it.)
    assert_eq!(pool.free_frames(), 1, "the frame is free again, once");
    assert_eq!(pool.deferred_frees(), 0, "no free is left deferred");
    let again = pool.alloc(0).expect("the frame is free");
    assert!(pool.alloc(0).is_none(), "the frame was freed twice");
    drop(again);
}

#[test]
fn a_borrow_against_an_eviction() {
    model(|| borrower_against_an_eviction(0));
}

#[test]
fn broken_freeze_without_its_scan_is_caught_by_the_eviction_model() {
    assert!(fails(|| borrower_against_an_eviction(broken::FREEZE_SCAN)));
}

#[test]
fn broken_borrower_without_its_fence_is_caught_by_the_eviction_model() {
    assert!(fails(|| borrower_against_an_eviction(
        broken::BORROWER_FENCE
    )));
}

/// Model 4: a borrower against a write fault (`mm/space.rs`: a pte's mapcount unit, then
/// `writer_sees_readers`; if no reader is seen the sequence is bumped and the space writes
/// through its pte with no further synchronisation; otherwise the spaces get a copy and these
/// bytes are left alone).
fn borrower_against_a_write_fault(which: usize) {
    let (pool, p, bytes, borrower) = start(which);
    let f = folio(p);
    // The fault's own reference (its folio guard's); the index holds the other.
    let held = pool.try_get(f).expect("the index holds a reference");
    model::map(f);
    let copied = model::writer_sees_readers(f, true);
    if !copied {
        f.model_seq_bump();
        bytes.write(2);
    }
    drop(held);
    check(borrower.join().unwrap());
    f.sub_owner_bits(1 << 32);
    // SAFETY: (test) the index's raw reference, given back once.
    drop(unsafe { pool.ref_from_raw(raw(p)) });
    assert_eq!(pool.free_frames(), 1, "the frame is free again, once");
}

#[test]
fn a_borrow_against_a_write_fault() {
    model(|| borrower_against_a_write_fault(0));
}

#[test]
fn broken_write_fault_without_its_scan_is_caught() {
    assert!(fails(|| borrower_against_a_write_fault(
        broken::WRITER_SCAN
    )));
}

#[test]
fn broken_borrower_without_its_fence_is_caught_by_the_write_fault_model() {
    assert!(fails(|| borrower_against_a_write_fault(
        broken::BORROWER_FENCE
    )));
}
