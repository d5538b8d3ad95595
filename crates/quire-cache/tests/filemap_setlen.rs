//! A truncation whose store-side cut fails: the error reaches the caller, and the bytes past the
//! new end never come back as file data, even when the file grows again.

use std::sync::Arc;

use quire::filemap::{CacheConfig, FilemapError, PageCache};
use quire::store::{Fault, FaultyStore, MemStore, Op, Store, StoreError};

const PAGE: usize = 4096;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) | 1)
        .collect()
}

#[test]
fn a_failed_store_cut_is_reported_and_never_resurrects_old_bytes() {
    for align in [1usize, PAGE] {
        let data = pattern(10 * PAGE, 3);
        let store = Arc::new(FaultyStore::new(
            MemStore::from_vec(data.clone()).with_alignment(align),
        ));
        let cache = PageCache::new(CacheConfig::new(1 << 20)).unwrap();
        let f = cache.open(store.clone()).unwrap();
        // Cache part of the file, so both cached and uncached pages lie past the cut.
        let mut b = vec![0u8; 3 * PAGE];
        f.read_at(2 * PAGE as u64, &mut b).unwrap();

        let cut = 3 * PAGE as u64 + 100;
        let id = store.add(Fault::set_len_error());
        match f.set_len(cut) {
            Err(FilemapError::Store(StoreError::Io { op: Op::SetLen, .. })) => {}
            other => panic!("align {align}: expected the store's set_len error, got {other:?}"),
        }
        assert_eq!(store.fired(id), 1);
        // The cache took the cut; the store still holds the old bytes past it.
        assert_eq!(f.len(), cut);
        assert_eq!(store.len().unwrap(), data.len() as u64);
        let mut all = vec![0xeeu8; data.len()];
        assert_eq!(f.read_at(0, &mut all).unwrap(), cut as usize);
        assert_eq!(&all[..cut as usize], &data[..cut as usize]);

        // Growing again must read zeros past the cut, in the cache and in the store.
        f.set_len(data.len() as u64).unwrap();
        let mut all = vec![0xeeu8; data.len()];
        assert_eq!(f.read_at(0, &mut all).unwrap(), data.len());
        assert_eq!(&all[..cut as usize], &data[..cut as usize], "align {align}");
        assert!(
            all[cut as usize..].iter().all(|&x| x == 0),
            "align {align}: old bytes came back after the failed cut"
        );
        f.fsync().unwrap();
        let on_store = store.inner().synced_contents();
        assert_eq!(on_store.len(), data.len());
        assert_eq!(&on_store[..cut as usize], &data[..cut as usize]);
        assert!(
            on_store[cut as usize..].iter().all(|&x| x == 0),
            "align {align}"
        );
    }
}

#[test]
fn a_shrink_zeroes_the_tail_of_the_new_last_page() {
    let data = pattern(4 * PAGE, 5);
    let store = Arc::new(MemStore::from_vec(data.clone()));
    let cache = PageCache::new(CacheConfig::new(1 << 20)).unwrap();
    let f = cache.open(store.clone()).unwrap();
    let mut all = vec![0u8; data.len()];
    f.read_at(0, &mut all).unwrap();
    // A zero-copy reader holds the page that will carry the new end: it keeps its bytes, and
    // the file reads zeros past the end once it grows again.
    let held = f.read_folio(1).unwrap();
    let before = held.bytes().unwrap().to_vec();
    f.set_len(PAGE as u64 + 10).unwrap();
    assert_eq!(
        held.bytes().unwrap(),
        &before[..],
        "a reader's bytes never change"
    );
    drop(held);
    f.set_len(2 * PAGE as u64).unwrap();
    let mut b = vec![0xeeu8; 2 * PAGE];
    assert_eq!(f.read_at(0, &mut b).unwrap(), 2 * PAGE);
    assert_eq!(&b[..PAGE + 10], &data[..PAGE + 10]);
    assert!(b[PAGE + 10..].iter().all(|&x| x == 0));
}
