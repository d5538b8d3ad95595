//! `CachedStore` over `object_store::memory::InMemory`: the cases found wrong, each kept.

mod common;

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use quire::{CacheConfig, PageCache};
use quire_object::{CachedStore, CachedStoreConfig, DiskTier};

use common::*;

const KIB: usize = 1 << 10;

/// An error's variant, as the contract names it.
fn kind(e: &object_store::Error) -> &'static str {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => "NotFound",
        E::Precondition { .. } => "Precondition",
        _ => "other",
    }
}

fn store(inner: &Arc<dyn ObjectStore>, budget: usize, config: CachedStoreConfig) -> CachedStore {
    CachedStore::with_config(
        inner.clone(),
        PageCache::new(CacheConfig::new(budget)).unwrap(),
        config,
    )
    .unwrap()
}

/// Puts `data` at `key` on `store` directly (behind the cache's back, if it has one).
async fn aput(store: &Arc<dyn ObjectStore>, key: &str, data: &[u8]) {
    store
        .put(&Path::from(key), PutPayload::from(data.to_vec()))
        .await
        .unwrap();
}

/// A store dropped inside an async context — a task of the caller's runtime, as an engine
/// holding an `Arc<dyn ObjectStore>` drops it — does not panic (its own runtime shuts down
/// without blocking).
#[test]
fn the_store_can_be_dropped_inside_a_runtime() {
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    put(&a, "obj", &pattern(100_000, 50));
    let p = Path::from("obj");
    rt().block_on(async {
        let s = store(&a, MIB, CachedStoreConfig::default());
        s.get(&p).await.unwrap().bytes().await.unwrap();
        drop(s);
    });
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let a2 = a.clone();
    multi
        .block_on(async move {
            tokio::spawn(async move {
                let s: Arc<dyn ObjectStore> =
                    Arc::new(store(&a2, MIB, CachedStoreConfig::default()));
                s.get(&Path::from("obj"))
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap();
            })
            .await
        })
        .expect("the task dropping the store");
}

/// A disk tier kept across a restart: a new store over the same directory reads what the
/// first one read with no GETs, only the metadata requests.
#[test]
fn the_disk_tier_serves_a_new_store_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let objs: Vec<(Path, Vec<u8>)> = (0..3)
        .map(|i| {
            let d = pattern(3 * MIB + 1000 * i, 30 + i as u64);
            put(&a, &format!("t/{i}"), &d);
            (Path::from(format!("t/{i}")), d)
        })
        .collect();
    let open = || {
        let tier = DiskTier::open(dir.path(), 64 * MIB as u64).unwrap();
        let s = CachedStore::with_tier(
            a.clone(),
            PageCache::new(CacheConfig::new(2 * MIB)).unwrap(),
            CachedStoreConfig::default(),
            tier.clone(),
        )
        .unwrap();
        (s, tier)
    };
    rt().block_on(async {
        let (s, tier) = open();
        for (p, d) in &objs {
            assert_eq!(&s.get(p).await.unwrap().bytes().await.unwrap()[..], &d[..]);
        }
        assert!(s.stats().get_requests > 0);
        tier.drain();
        drop(s);
        drop(tier);

        let (s, tier) = open();
        for (p, d) in &objs {
            assert_eq!(&s.get(p).await.unwrap().bytes().await.unwrap()[..], &d[..]);
            let rs = s
                .get_ranges(p, &[5..10, 2 * MIB as u64..2 * MIB as u64 + 4096])
                .await
                .unwrap();
            assert_eq!(&rs[1][..], &d[2 * MIB..2 * MIB + 4096]);
        }
        let st = s.stats();
        let t = tier.stats();
        assert_eq!(t.corrupt, 0, "{t:?}");
        assert_eq!(st.get_requests, 0, "after a restart: {st}; {t:?}");
        assert_eq!(st.meta_requests, objs.len() as u64, "{st}");
    });
}

/// A whole-object get whose first chunk is cached and whose later chunks miss, after the
/// object was replaced behind the store's back: never the old version's bytes followed by the
/// new one's; and the refused GET moves the store to the new version, so that the next get
/// gives it whole (not the same error again, forever).
#[test]
fn a_replaced_object_is_never_served_as_a_mix() {
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let old = pattern(MIB, 3);
    let new = pattern(MIB, 4);
    put(&a, "obj", &old);
    let mut cc = CacheConfig::new(8 * MIB);
    // No readahead: only what is read is cached.
    cc.readahead_max = 0;
    let s = CachedStore::with_config(
        a.clone(),
        PageCache::new(cc).unwrap(),
        CachedStoreConfig {
            chunk: 64 * KIB,
            ..CachedStoreConfig::default()
        },
    )
    .unwrap();
    let p = Path::from("obj");
    rt().block_on(async {
        // The first chunk cached, of the old version.
        s.get_range(&p, 0..64 * KIB as u64).await.unwrap();
        aput(&a, "obj", &new).await;
        // Its first chunk is served from the cache before the miss finds the object replaced:
        // an error, or one version whole.
        match s.get(&p).await.unwrap().bytes().await {
            Ok(b) => assert!(
                b[..] == old[..] || b[..] == new[..],
                "a get of a replaced object gave bytes of neither version whole"
            ),
            Err(e) => assert_eq!(kind(&e), "Precondition", "{e}"),
        }
        // Whatever that gave, the next get gives the new version whole.
        let r = s.get(&p).await.unwrap();
        assert_eq!(r.meta.e_tag, a.head(&p).await.unwrap().e_tag);
        let b = r.bytes().await.expect("the get after the refused GET");
        assert!(b[..] == new[..], "the new version");
    });
}

/// A second read of cached bytes sends nothing; heads are answered from the cached metadata.
#[test]
fn cached_reads_and_heads_send_no_request() {
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let data = pattern(2 * MIB + 123, 10);
    put(&a, "obj", &data);
    let s = store(&a, 16 * MIB, CachedStoreConfig::default());
    let p = Path::from("obj");
    rt().block_on(async {
        let b = s.get(&p).await.unwrap().bytes().await.unwrap();
        assert!(b[..] == data[..]);
        let first = s.stats();
        assert_eq!(
            (first.reads, first.misses, first.hits),
            (1, 1, 0),
            "{first}"
        );
        assert_eq!(first.meta_requests, 1);
        assert!(first.get_requests >= 1);
        assert_eq!(first.bytes_fetched, data.len() as u64, "{first}");
        for _ in 0..3 {
            let b = s.get_range(&p, 100..1_500_000).await.unwrap();
            assert_eq!(&b[..], &data[100..1_500_000]);
            let m = s.head(&p).await.unwrap();
            assert_eq!(m.size, data.len() as u64);
        }
        let rs = s.get_ranges(&p, &[200..300, 1000..900_000]).await.unwrap();
        assert_eq!(&rs[1][..], &data[1000..900_000]);
        let now = s.stats();
        assert_eq!(now.get_requests, first.get_requests, "{now}");
        assert_eq!(now.bytes_fetched, first.bytes_fetched, "{now}");
        assert_eq!(now.meta_requests, 1, "{now}");
        assert_eq!((now.reads, now.hits, now.heads), (5, 4, 3), "{now}");
        assert_eq!(now.heads_cached, 3, "{now}");
        assert_eq!(now.requests_saved(), 4 + 3, "{now}");
        // A head of an object not seen yet is a request, not one saved.
        aput(&a, "other", &data[..10]).await;
        assert_eq!(s.head(&Path::from("other")).await.unwrap().size, 10);
        let last = s.stats();
        assert_eq!((last.heads, last.heads_cached), (4, 3), "{last}");
        assert_eq!(last.requests_saved(), 4 + 3, "{last}");
    });
}
