use super::*;

#[test]
fn descriptor_is_one_cache_line() {
    assert_eq!(std::mem::size_of::<Folio>(), 64);
    assert_eq!(std::mem::align_of::<Folio>(), 64);
}

#[test]
fn flag_bits_are_distinct() {
    let bits = [
        LOCKED, WAITERS, UPTODATE, DIRTY, WRITEBACK, ERROR, REFERENCED, ACTIVE, WORKINGSET, LRU,
        ANON, SWAPCACHE, READAHEAD, HEAD,
    ];
    let mut all = 0u64;
    for b in bits {
        assert_eq!(b.count_ones(), 1);
        assert_eq!(all & b, 0);
        all |= b;
    }
    assert_eq!(all & ORDER_MASK, 0);
    assert_eq!(all & OWNER_BITS, 0);
    assert_eq!(ORDER_MASK & OWNER_BITS, 0);
    assert!(u64::from(crate::mem::buddy::MAX_ORDER) <= ORDER_MASK >> ORDER_SHIFT);
}

#[test]
fn try_get_fails_at_zero_and_freeze_blocks_it() {
    let f = Folio::new();
    assert!(!f.try_get());
    f.init_allocated(0);
    assert!(f.try_get());
    assert_eq!(f.ref_count(), 2);
    // SAFETY: this test owns both references and unfreezes below.
    unsafe {
        assert!(!f.try_freeze(1));
        assert!(f.try_freeze(2));
    }
    assert!(!f.try_get());
    // SAFETY: frozen above; two references exist.
    unsafe { f.unfreeze(2) };
    assert!(f.try_get());
    assert!(!f.put());
    assert!(!f.put());
    assert!(f.put());
    assert_eq!(f.reset_freed(), 0);
}

#[test]
fn a_folio_freed_from_its_freeze_leaves_the_frame_free_once_with_an_even_sequence() {
    let pool = FramePool::with_caches(4 * FRAME_SIZE, 1, 2).unwrap();
    let f = pool.alloc(0).unwrap();
    let p = f.folio() as *const Folio;
    let mut g = f.lock();
    g.mark_uptodate();
    // A reference-free reader's start before the eviction.
    let (before, _) = g.read_seq_begin().unwrap();
    // SAFETY: the guard's reference is the only one.
    let frozen = unsafe { g.freeze(0) }.unwrap();
    let ticket = frozen.end_for_free().unwrap();
    let mut batch = pool.free_batch();
    g.free_frozen(ticket, &mut batch);
    assert_eq!(batch.len(), 1);
    assert_eq!(pool.free_frames(), 3, "held by the batch until it frees");
    drop(batch);
    assert_eq!(pool.free_frames(), 4, "freed once");
    // The frame's next folio starts from an even sequence, so a reference-free read of it
    // stands, and a freeze of it makes the sequence odd (a reader's copy is thrown away).
    let again = pool.alloc(0).unwrap();
    assert!(
        std::ptr::eq(again.folio(), p),
        "the cache hands the frame out again"
    );
    let mut g = again.lock();
    g.mark_uptodate();
    let (seq, _) = g.read_seq_begin().expect("an even sequence");
    assert!(
        g.read_seq_retry(before),
        "a copy begun before the eviction is thrown away"
    );
    // SAFETY: the guard's reference is the only one.
    let frozen = unsafe { g.freeze(0) }.unwrap();
    assert!(
        frozen.folio().read_seq_begin().is_none(),
        "odd while frozen"
    );
    assert!(
        frozen.folio().read_seq_retry(seq),
        "a copy begun before is thrown away"
    );
    drop(frozen);
}

#[test]
fn a_freeze_that_other_references_outlive_is_not_ended_for_a_free() {
    let pool = FramePool::with_caches(FRAME_SIZE, 1, 0).unwrap();
    let f = pool.alloc(0).unwrap();
    let other = f.clone();
    let mut g = f.lock();
    // SAFETY: `other` is the one other reference, unused during the freeze.
    let frozen = unsafe { g.freeze(1) }.unwrap();
    let Err(frozen) = frozen.end_for_free() else {
        panic!("ended for a free while another reference remains");
    };
    assert_eq!(frozen.restore_count(), 2);
    drop(frozen);
    drop(g);
    assert_eq!(pool.free_frames(), 0);
    drop(other);
    assert_eq!(pool.free_frames(), 1);
}
