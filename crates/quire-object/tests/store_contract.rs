//! `CachedStore` over `object_store::memory::InMemory`: the cases found wrong, each kept.

mod common;

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _};
use quire::{CacheConfig, PageCache};
use quire_object::{CachedStore, CachedStoreConfig};

use common::*;

fn store(inner: &Arc<dyn ObjectStore>, budget: usize, config: CachedStoreConfig) -> CachedStore {
    CachedStore::with_config(
        inner.clone(),
        PageCache::new(CacheConfig::new(budget)).unwrap(),
        config,
    )
    .unwrap()
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
