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
