//! Folios and the frame pool: references, freeze, the lock and its guard, write-back waits, the
//! rules for lending bytes, and a stress run of lock-free lookups racing with removal, in-place
//! rewrites and reuse (rule 1 of docs/RULES.md: re-check after a speculative reference).
#![cfg(not(loom))]

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use quire::mem::folio::{DIRTY, HEAD, UPTODATE};
use quire::mem::{Folio, FramePool, PoolError, FRAME_SIZE, MAX_ORDER};
use quire::sync::bitwait::Cancel;

fn pool(frames: usize) -> FramePool {
    FramePool::new(frames * FRAME_SIZE).unwrap()
}

#[test]
fn capacity_errors_are_typed() {
    assert!(matches!(FramePool::new(0), Err(PoolError::Empty)));
    let e = FramePool::new(FRAME_SIZE + 1).unwrap_err();
    assert!(matches!(e, PoolError::NotFrameMultiple(4097)));
    assert!(e.to_string().contains("4097"));
}

#[test]
fn last_put_returns_frames_and_capacity_is_exact() {
    let p = pool(600);
    assert_eq!(p.free_frames(), 600);
    let a = p.alloc(MAX_ORDER).unwrap();
    assert_eq!(a.size(), 2 << 20);
    assert_eq!(a.nr_frames(), 512);
    let b = a.clone();
    assert_eq!(a.ref_count(), 2);
    drop(a);
    assert_eq!(p.stats().allocated, 512);
    drop(b);
    assert_eq!(p.stats().allocated, 0);
    // All 600 frames, one by one, then nothing more.
    let all: Vec<_> = std::iter::from_fn(|| p.alloc(0)).collect();
    assert_eq!(all.len(), 600);
    assert!(p.alloc(0).is_none());
    let mut pfns: Vec<_> = all.iter().map(|r| r.pfn()).collect();
    pfns.sort_unstable();
    pfns.dedup();
    assert_eq!(pfns.len(), 600);
    drop(all);
    p.drain();
    assert_eq!(p.free_blocks(), quire::mem::Buddy::initial_blocks(600));
    assert!(p.alloc(MAX_ORDER + 1).is_none());
}

#[test]
fn fresh_folio_state() {
    let p = pool(16);
    let f = p.alloc(2).unwrap();
    assert_eq!(f.order(), 2);
    assert!(f.is_head());
    assert_eq!(f.flags() & !(HEAD | (2 << 16)), 0);
    assert_eq!(f.mapping(), 0);
    assert_eq!(f.index(), 0);
    assert_eq!(f.ref_count(), 1);
    assert_eq!(f.pfn() % 4, 0);
    assert_eq!(f.as_ptr() as usize % (4 * FRAME_SIZE), 0);
    assert!(f.bytes().is_none());
    // Tails have a zero count, so speculative references on them fail.
    for pfn in f.pfn() + 1..f.pfn() + 4 {
        let tail = p.folio(pfn).unwrap();
        assert_eq!(tail.ref_count(), 0);
        assert!(p.try_get(tail).is_none());
    }
}

#[test]
fn alloc_zeroed_clears_reused_frames() {
    let p = FramePool::with_caches(4 * FRAME_SIZE, 1, 0).unwrap();
    let mut g = p.alloc(2).unwrap().lock();
    g.bytes_mut().unwrap().fill(0xee);
    drop(g);
    let f = p.alloc_zeroed(2).unwrap();
    let g = f.lock();
    assert!(g.bytes().iter().all(|&b| b == 0));
}

#[test]
fn try_get_and_raw_references() {
    let p = pool(8);
    let other = pool(8);
    let f = p.alloc(0).unwrap();
    let desc: &Folio = &f;
    assert!(
        other.try_get(desc).is_none(),
        "not a descriptor of that pool"
    );
    let r = p.try_get(desc).unwrap();
    assert_eq!(f.ref_count(), 2);
    let raw: NonNull<Folio> = r.into_raw();
    assert_eq!(f.ref_count(), 2, "into_raw keeps the reference");
    // SAFETY: `raw` is the raw reference made just above, given back once.
    let back = unsafe { p.ref_from_raw(raw) };
    drop(back);
    assert_eq!(f.ref_count(), 1);
    let pfn = f.pfn();
    drop(f);
    // Free now: the descriptor lives on, but no reference can be taken.
    let d = p.folio(pfn).unwrap();
    assert!(!d.try_get());
    assert!(p.try_get(d).is_none());
    assert!(!d.is_head());
}

#[test]
fn bytes_are_lent_only_when_uptodate_and_written_only_under_the_lock() {
    let p = pool(8);
    let f = p.alloc(0).unwrap();
    let reader = f.clone();
    assert!(reader.bytes().is_none());
    let mut g = f.lock();
    g.bytes_mut().unwrap().fill(1);
    assert!(!g.mark_uptodate());
    assert!(g.bytes_mut().is_none(), "up to date: writes need a freeze");
    let f = g.unlock();
    assert_eq!(reader.bytes().unwrap(), &[1u8; FRAME_SIZE][..]);

    // A freeze fails while another reference exists...
    let mut g = f.lock();
    // SAFETY: no raw references exist; the freeze owns only the guard's reference.
    assert!(unsafe { g.freeze(0) }.is_none());
    drop(reader);
    {
        // SAFETY: as above.
        let mut frozen = unsafe { g.freeze(0) }.unwrap();
        assert_eq!(frozen.folio().ref_count(), 0);
        assert!(
            p.try_get(frozen.folio()).is_none(),
            "frozen: no new reference"
        );
        frozen.bytes_mut().fill(2);
        assert_eq!(frozen.restore_count(), 1);
    }
    assert_eq!(g.ref_count(), 1);
    let f = g.unlock();
    assert_eq!(f.bytes().unwrap()[FRAME_SIZE - 1], 2);
}

#[test]
fn removal_releases_the_index_reference() {
    let p = pool(8);
    let f = p.alloc(0).unwrap();
    f.set_mapping(7);
    f.set_index(42);
    let slot = AtomicPtr::new(f.clone().into_raw().as_ptr());
    assert_eq!(f.ref_count(), 2);
    let mut g = f.lock();
    {
        // SAFETY: the only other reference is the raw one in `slot`, which we own here and take
        // out of the slot before anybody could use it.
        let mut frozen = unsafe { g.freeze(1) }.unwrap();
        slot.store(std::ptr::null_mut(), Ordering::Release);
        // SAFETY: the slot's reference is gone with the slot entry.
        assert!(!unsafe { frozen.release_raw_refs(2) });
        // SAFETY: the slot held the one raw reference and was emptied above; nobody uses it.
        assert!(unsafe { frozen.release_raw_refs(1) });
        frozen.clear_uptodate();
    }
    assert_eq!(g.ref_count(), 1);
    assert_eq!(p.stats().allocated, 1);
    drop(g);
    assert_eq!(p.stats().allocated, 0);
}

#[test]
fn lock_excludes_and_waits() {
    let p = pool(8);
    let f = p.alloc(0).unwrap();
    let other = f.clone();
    let g = f.lock();
    let other = other.try_lock().unwrap_err();
    let released = AtomicBool::new(false);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            other.wait_locked();
            assert!(released.load(Ordering::SeqCst), "woke while still locked");
            let g2 = other.lock();
            assert!(g2.is_locked());
        });
        std::thread::sleep(Duration::from_millis(50));
        released.store(true, Ordering::SeqCst);
        drop(g);
        waiter.join().unwrap();
    });
    assert_eq!(p.stats().allocated, 0);
}

#[test]
fn lock_cancellable_gives_the_reference_back() {
    let p = pool(8);
    let f = p.alloc(0).unwrap();
    let other = f.clone();
    let _g = f.lock();
    let cancel = Cancel::with_deadline(Instant::now() + Duration::from_millis(20));
    let (back, err) = other.lock_cancellable(&cancel).unwrap_err();
    assert_eq!(err, quire::sync::bitwait::WaitError::TimedOut);
    assert_eq!(back.ref_count(), 2);
}

#[test]
fn locked_folio_handed_to_an_io_thread() {
    let p = pool(8);
    let f = p.alloc(0).unwrap();
    let reader = f.clone();
    let (raw, policy) = f.lock().into_raw();
    let raw = raw.as_ptr() as usize;
    std::thread::scope(|s| {
        let p = &p;
        s.spawn(move || {
            // SAFETY: the lock and reference from `into_raw` above, taken back once.
            let mut g =
                unsafe { p.guard_from_raw(NonNull::new(raw as *mut Folio).unwrap(), policy) };
            std::thread::sleep(Duration::from_millis(20));
            g.bytes_mut().unwrap().fill(0x5a);
            g.mark_uptodate();
        });
        // Waits for the I/O thread's unlock, then sees its bytes.
        let g = reader.lock();
        assert!(g.is_uptodate());
        assert!(g.bytes().iter().all(|&b| b == 0x5a));
    });
    assert_eq!(p.stats().allocated, 0);
}

#[test]
fn writeback_wait_and_end() {
    let p = pool(8);
    let f = p.alloc(0).unwrap();
    f.set_dirty();
    assert!(f.flags() & DIRTY != 0);
    let g = f.lock();
    assert!(g.clear_dirty());
    assert!(!g.start_writeback());
    assert!(g.start_writeback(), "already set");
    let f = g.unlock();
    let ended = AtomicBool::new(false);
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            f.wait_writeback();
            assert!(ended.load(Ordering::SeqCst));
            assert!(!f.is_writeback());
        });
        std::thread::sleep(Duration::from_millis(30));
        ended.store(true, Ordering::SeqCst);
        f.end_writeback();
        w.join().unwrap();
    });
    let c = Cancel::new();
    f.wait_writeback_cancellable(&c).unwrap();
}

#[test]
fn flag_setters_report_previous_state() {
    let p = pool(8);
    let f = p.alloc(0).unwrap();
    assert!(!f.set_referenced());
    assert!(f.set_referenced());
    assert!(f.is_referenced());
    assert!(f.clear_referenced());
    assert!(!f.clear_referenced());
    assert!(!f.set_lru() && f.is_lru() && f.clear_lru());
    let before = f.set_owner_bits(1 << 40 | UPTODATE);
    assert_eq!(before & (1 << 40), 0);
    assert!(!f.is_uptodate(), "owner bits cannot touch UPTODATE");
    assert!(f.flags() & (1 << 40) != 0);
    f.clear_owner_bits(1 << 40);
    assert_eq!(f.flags() & (1 << 40), 0);
}

/// A miniature page cache index: slots hold raw references to folios whose every byte equals
/// the folio's private word. Readers look up without locks (try_get + re-check) and check the
/// bytes; a writer replaces folios (freeze, remove, free, allocate, publish) and rewrites them
/// in place under a freeze. Afterwards nothing is leaked.
#[test]
fn stress_lockless_lookup_against_replace_and_rewrite() {
    const SLOTS: usize = 8;
    let p = FramePool::with_caches(32 * FRAME_SIZE, 2, 4).unwrap();
    let slots: Vec<AtomicPtr<Folio>> = (0..SLOTS)
        .map(|_| AtomicPtr::new(std::ptr::null_mut()))
        .collect();
    let publish = |tag: usize, slot: &AtomicPtr<Folio>| {
        let f = p.alloc(0).expect("pool sized for the slots");
        let mut g = f.lock();
        g.bytes_mut().unwrap().fill(tag as u8);
        g.set_private(tag);
        g.mark_uptodate();
        let f = g.unlock();
        slot.store(f.into_raw().as_ptr(), Ordering::Release);
    };
    for (i, s) in slots.iter().enumerate() {
        publish(i, s);
    }
    let stop = AtomicBool::new(false);
    let hits = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_millis(300);
    std::thread::scope(|s| {
        for r in 0..2 {
            let (p, slots, stop, hits) = (&p, &slots, &stop, &hits);
            s.spawn(move || {
                let mut i = r;
                while !stop.load(Ordering::Relaxed) {
                    i = (i + 1) % SLOTS;
                    let ptr = slots[i].load(Ordering::Acquire);
                    let Some(d) = NonNull::new(ptr) else { continue };
                    // SAFETY: descriptors live as long as the pool (rule 1 of docs/RULES.md).
                    let Some(f) = p.try_get(unsafe { d.as_ref() }) else {
                        continue;
                    };
                    if slots[i].load(Ordering::Acquire) != ptr {
                        continue; // freed and reused under us: drop and retry
                    }
                    let tag = f.private() as u8;
                    let b = f.bytes().expect("published folios are up to date");
                    assert!(b.iter().all(|&x| x == tag), "torn or foreign bytes");
                    hits.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // The writer.
        let mut tag = SLOTS;
        let mut n = 0u64;
        while Instant::now() < deadline {
            n += 1;
            let slot = &slots[(n as usize * 7) % SLOTS];
            let ptr = NonNull::new(slot.load(Ordering::Acquire)).unwrap();
            // SAFETY: the slot holds a raw reference; take a second one for ourselves.
            let own = p.try_get(unsafe { ptr.as_ref() }).unwrap();
            let mut g = own.lock();
            tag += 1;
            // SAFETY: the one raw reference is the slot's, which only this thread changes.
            let replaced = match unsafe { g.freeze(1) } {
                Some(mut frozen) if n.is_multiple_of(2) => {
                    // Rewrite in place.
                    frozen.bytes_mut().fill(tag as u8);
                    frozen.folio().set_private(tag);
                    false
                }
                Some(mut frozen) => {
                    // Remove: the count goes back to the guard's reference alone.
                    slot.store(std::ptr::null_mut(), Ordering::Release);
                    // SAFETY: the slot's reference went with the slot entry.
                    assert!(unsafe { frozen.release_raw_refs(1) });
                    frozen.clear_uptodate();
                    true
                }
                None => false, // a reader holds it: try another slot
            };
            drop(g);
            if replaced {
                publish(tag, slot);
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(hits.load(Ordering::Relaxed) > 0);
    for s in &slots {
        let ptr = NonNull::new(s.swap(std::ptr::null_mut(), Ordering::AcqRel)).unwrap();
        // SAFETY: the slot's raw reference, given back once.
        drop(unsafe { p.ref_from_raw(ptr) });
    }
    let st = p.stats();
    assert_eq!(st.allocated, 0, "{st:?}");
    assert_eq!(st.free + st.cached, 32);
}
