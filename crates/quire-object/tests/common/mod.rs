#![allow(dead_code)]

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use quire::{CacheConfig, PageCache};
use quire_object::{Backing, BackingConfig, ObjectCache};

pub const MIB: usize = 1 << 20;

/// Bytes that differ at every offset and between seeds.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A cache of `budget` bytes in front of `store`.
pub fn cache_over(store: Arc<dyn ObjectStore>, budget: usize, cfg: BackingConfig) -> ObjectCache {
    let backing = Backing::with_store(store, "", "test://", cfg).unwrap();
    let c = CacheConfig::new(budget);
    ObjectCache::new(PageCache::new(c).unwrap(), backing, None)
}

/// Puts `data` at `key` behind the cache's back.
pub fn put(store: &Arc<dyn ObjectStore>, key: &str, data: &[u8]) {
    let store = store.clone();
    let key = Path::from(key);
    let data = data.to_vec();
    rt().block_on(async move { store.put(&key, PutPayload::from(data)).await })
        .unwrap();
}

/// The object at `key` as the store has it.
pub fn get(store: &Arc<dyn ObjectStore>, key: &str) -> Option<Vec<u8>> {
    let store = store.clone();
    let key = Path::from(key);
    rt().block_on(async move {
        match store.get(&key).await {
            Ok(r) => Some(r.bytes().await.unwrap().to_vec()),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("get {key}: {e}"),
        }
    })
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Reads the whole handle in `chunk`-byte reads.
pub fn read_all(h: &quire_object::ObjectHandle, chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; chunk];
    loop {
        let n = h.read_at(out.len() as u64, &mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

pub fn errno(e: &quire::FilemapError) -> i32 {
    quire_object::filemap_errno(e)
}
