//! Loom models of the byte sequence (`mem/folio.rs`, "The byte sequence"): the protocol that
//! lets a page-cache hit copy bytes out of a folio without taking a reference
//! (`Mapping::read_at_hit`). A reader takes the sequence and the flags, checks the slot it came
//! from, copies, and keeps the copy only if the sequence did not move. Three writers may
//! change the bytes under it:
//!
//! - an in-place write under a freeze (`try_freeze` … `unfreeze`);
//! - the folio's free and the frames' reuse by a new owner (`reset_freed`, `FramePool::alloc`);
//! - a space that gets a writable pte and writes through it with no further synchronisation
//!   (the mapcount goes up, then `seq_bump`).
//!
//! The bytes are modelled as two atomic words written with relaxed stores (the real copy is a
//! raw `memcpy`): a copy the reader keeps must never mix old and new words, nor hold a new
//! owner's bytes. Each model also runs against a deliberately broken variant of one side and
//! must fail there: a model that passes a broken protocol proves nothing.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p quire-cache --release --test loom_seq`.
#![cfg(loom)]

use std::ptr::NonNull;

use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
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
}

/// An up-to-date folio published in `slot`; returns one raw reference (the slot's).
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

/// The reader of `read_at_hit`: `Some` copy if it kept one.
fn read(
    f: &Folio,
    slot: &AtomicUsize,
    bytes: &Bytes,
    retry: fn(&Folio, u32) -> bool,
) -> Option<(u64, u64)> {
    let (seq, _flags) = f.read_seq_begin()?;
    if slot.load(Ordering::Acquire) != f as *const Folio as usize {
        return None;
    }
    let copy = (
        bytes.0[0].load(Ordering::Relaxed),
        bytes.0[1].load(Ordering::Relaxed),
    );
    if retry(f, seq) {
        return None;
    }
    Some(copy)
}

fn retry(f: &Folio, seq: u32) -> bool {
    f.read_seq_retry(seq)
}

fn retry_unfenced(f: &Folio, seq: u32) -> bool {
    f.broken_read_seq_retry_unfenced(seq)
}

/// An in-place write under a freeze (what `Mapping::modify` does when it holds the only
/// reference) against a reader.
fn write_in_place(freeze: unsafe fn(&Folio, u32) -> bool, retry: fn(&Folio, u32) -> bool) {
    let pool = pool();
    let p = publish(&pool);
    let slot = Arc::new(AtomicUsize::new(p));
    let bytes = Bytes::new(1);
    let writer = {
        let (pool, bytes) = (pool.clone(), bytes.clone());
        thread::spawn(move || {
            let _keep = &pool;
            let f = folio(p);
            // SAFETY: (test) the slot's reference is the only one, and this thread acts for
            // its holder (nobody else uses it until the unfreeze).
            if unsafe { freeze(f, 1) } {
                bytes.write(2);
                // SAFETY: (test) frozen just above with that one reference.
                unsafe { f.unfreeze(1) };
            }
        })
    };
    if let Some((a, b)) = read(folio(p), &slot, &bytes, retry) {
        assert_eq!(
            a, b,
            "a kept copy mixes bytes from before and after an in-place write"
        );
    }
    writer.join().unwrap();
    // SAFETY: (test) the slot's raw reference, given back once.
    drop(unsafe { pool.ref_from_raw(NonNull::new(p as *mut Folio).unwrap()) });
}

#[test]
fn reader_against_an_in_place_write() {
    model(|| write_in_place(Folio::try_freeze, retry));
}

#[test]
fn broken_freeze_without_its_fence_is_caught() {
    // No borrowers here: the freeze's scan of the borrow slots (`mem/borrow.rs`, modelled in
    // `loom_borrow.rs`) is skipped, or its `fence(SeqCst)` would stand in for the missing fence.
    assert!(fails(|| {
        quire::mem::borrow::broken::set(quire::mem::borrow::broken::FREEZE_SCAN);
        write_in_place(Folio::broken_try_freeze_unfenced, retry)
    }));
}

#[test]
fn broken_retry_without_its_fence_is_caught() {
    assert!(fails(|| write_in_place(Folio::try_freeze, retry_unfenced)));
}

/// The folio leaves the index and is freed; the frame goes to a new owner, who writes it —
/// against a reader that found the folio in the slot.
fn free_and_reuse(alloc: for<'p> fn(&'p FramePool) -> Option<quire::mem::FolioRef<'p>>) {
    let pool = pool();
    let p = publish(&pool);
    let slot = Arc::new(AtomicUsize::new(p));
    let bytes = Bytes::new(1);
    let evictor = {
        let (pool, slot, bytes) = (pool.clone(), slot.clone(), bytes.clone());
        thread::spawn(move || {
            slot.store(0, Ordering::Release);
            // SAFETY: (test) the slot's raw reference, taken out with the slot entry: the
            // last put, which frees the folio.
            drop(unsafe { pool.ref_from_raw(NonNull::new(p as *mut Folio).unwrap()) });
            let new = alloc(&pool).expect("the frame just freed");
            bytes.write(2);
            drop(new);
        })
    };
    if let Some(copy) = read(folio(p), &slot, &bytes, retry) {
        assert_eq!(
            copy,
            (1, 1),
            "a kept copy holds bytes of the frame's next owner"
        );
    }
    evictor.join().unwrap();
}

#[test]
fn reader_against_free_and_reuse() {
    model(|| free_and_reuse(|pool| pool.alloc(0)));
}

#[test]
fn broken_alloc_without_its_fence_is_caught() {
    // As above: the free's scan for borrowers (and its `fence(SeqCst)`) is skipped.
    assert!(fails(|| {
        quire::mem::borrow::broken::set(quire::mem::borrow::broken::FREE_SCAN);
        free_and_reuse(|pool| pool.broken_alloc_unfenced(0))
    }));
}

/// A space maps the folio writable (mapcount up, then the bump) and writes through its pte
/// with no further synchronisation, against a reader.
fn write_fault(bump: fn(&Folio)) {
    let pool = pool();
    let p = publish(&pool);
    let slot = Arc::new(AtomicUsize::new(p));
    let bytes = Bytes::new(1);
    let space = {
        let (pool, bytes) = (pool.clone(), bytes.clone());
        thread::spawn(move || {
            let _keep = &pool;
            let f = folio(p);
            model::map(f);
            bump(f);
            bytes.write(2);
        })
    };
    if let Some((a, b)) = read(folio(p), &slot, &bytes, retry) {
        assert_eq!(
            a, b,
            "a kept copy mixes bytes from before and after a space's write"
        );
    }
    space.join().unwrap();
    folio(p).sub_owner_bits(1 << 32);
    // SAFETY: (test) the slot's raw reference, given back once.
    drop(unsafe { pool.ref_from_raw(NonNull::new(p as *mut Folio).unwrap()) });
}

#[test]
fn reader_against_a_write_fault() {
    model(|| write_fault(|f| f.model_seq_bump()));
}

#[test]
fn broken_relaxed_bump_is_caught() {
    assert!(fails(|| write_fault(|f| f.broken_seq_bump_relaxed())));
}

#[test]
fn broken_missing_bump_is_caught() {
    assert!(fails(|| write_fault(|_| {})));
}

/// A reader's translation (`filemap/mapping.rs`: the folio and the sequence it read before it
/// saw the folio in the slot) against the folio's removal from the index by a writer (a
/// replacement by a copy, a truncation): once the reader knows the writer is done, a read
/// through the translation must not return the folio's bytes.
fn translation_against_removal(remove: fn(&Folio)) {
    let pool = pool();
    let p = publish(&pool);
    let slot = Arc::new(AtomicUsize::new(p));
    let bytes = Bytes::new(1);
    // The translation, made while the slot held the folio.
    let (seq, _) = folio(p).read_seq_begin().unwrap();
    assert_eq!(slot.load(Ordering::Acquire), p);
    let done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (pool, slot, done) = (pool.clone(), slot.clone(), done.clone());
        thread::spawn(move || {
            let _keep = &pool;
            slot.store(0, Ordering::Release);
            remove(folio(p));
            done.store(true, Ordering::Release);
        })
    };
    let after = done.load(Ordering::Acquire);
    let f = folio(p);
    let kept = f
        .read_seq_begin()
        .filter(|&(s, _)| s == seq)
        .and_then(|(s, _)| {
            let copy = (
                bytes.0[0].load(Ordering::Relaxed),
                bytes.0[1].load(Ordering::Relaxed),
            );
            (!f.read_seq_retry(s)).then_some(copy)
        });
    assert!(
        !(after && kept.is_some()),
        "a read through a translation found a folio its index no longer holds"
    );
    writer.join().unwrap();
    // SAFETY: (test) the slot's raw reference, given back once.
    drop(unsafe { pool.ref_from_raw(NonNull::new(p as *mut Folio).unwrap()) });
}

#[test]
fn translation_against_a_removal() {
    model(|| translation_against_removal(|f| f.model_seq_bump()));
}

#[test]
fn broken_removal_without_a_bump_is_caught() {
    assert!(fails(|| translation_against_removal(|_| {})));
}
