//! `CachedStore` over an in-memory store: the basic paths, byte for byte against the inner store.

mod common;

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt as _, PutPayload};
use quire::{CacheConfig, PageCache};
use quire_object::CachedStore;

use common::*;

#[test]
fn reads_match_the_inner_store_and_second_reads_send_nothing() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let data = pattern(3 * MIB + 777, 5);
    put(&inner, "a/b.bin", &data);
    let store = CachedStore::new(
        inner.clone(),
        PageCache::new(CacheConfig::new(16 * MIB)).unwrap(),
    )
    .unwrap();
    let rt = rt();
    let p = Path::from("a/b.bin");
    rt.block_on(async {
        let all = store.get(&p).await.unwrap().bytes().await.unwrap();
        assert_eq!(&all[..], &data[..]);
        let gets = store.stats().get_requests;
        for r in [
            GetRange::Bounded(10..100_000),
            GetRange::Offset(2 * MIB as u64),
            GetRange::Suffix(5000),
        ] {
            let opts = GetOptions {
                range: Some(r.clone()),
                ..Default::default()
            };
            let a = store.get_opts(&p, opts.clone()).await.unwrap();
            let b = inner.get_opts(&p, opts).await.unwrap();
            assert_eq!(a.range, b.range);
            assert_eq!(a.bytes().await.unwrap(), b.bytes().await.unwrap());
        }
        let rs = [0..10, 5..MIB as u64, 3 * MIB as u64..3 * MIB as u64 + 777];
        let a = store.get_ranges(&p, &rs).await.unwrap();
        let b = inner.get_ranges(&p, &rs).await.unwrap();
        assert_eq!(a, b);
        assert_eq!(
            store.stats().get_requests,
            gets,
            "all cached: {}",
            store.stats()
        );
        // Write-through: the new version is read without a GET.
        let new = pattern(100_000, 9);
        store.put(&p, PutPayload::from(new.clone())).await.unwrap();
        let g = store.stats().get_requests;
        let got = store.get(&p).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], &new[..]);
        assert_eq!(store.stats().get_requests, g, "{}", store.stats());
        store.delete(&p).await.unwrap();
        assert!(matches!(
            store.get(&p).await,
            Err(object_store::Error::NotFound { .. })
        ));
    });
}

#[test]
fn the_metadata_kept_is_bounded_and_reads_stay_right() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    for i in 0..40 {
        put(&inner, &format!("o{i}"), &pattern(5000 + i, i as u64));
    }
    let config = quire_object::CachedStoreConfig {
        max_objects: 8,
        ..Default::default()
    };
    let store = CachedStore::with_config(
        inner.clone(),
        PageCache::new(CacheConfig::new(MIB)).unwrap(),
        config,
    )
    .unwrap();
    rt().block_on(async {
        for round in 0..2 {
            for i in 0..40 {
                let p = Path::from(format!("o{i}"));
                let got = store.get(&p).await.unwrap().bytes().await.unwrap();
                assert_eq!(
                    &got[..],
                    &pattern(5000 + i, i as u64)[..],
                    "round {round} o{i}"
                );
                assert!(store.stats().objects <= 8, "{}", store.stats());
            }
        }
    });
}
