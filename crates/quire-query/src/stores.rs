//! The stores DataFusion reads through: the plain S3 client (object_store 0.13, DataFusion
//! 55's), the same wrapped by quire's cache, and [`CachingRegistry`], which caches every store
//! of a DataFusion `ObjectStoreRegistry`.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context as _;
use datafusion::execution::object_store::ObjectStoreRegistry;
use object_store::aws::AmazonS3Builder;
use object_store::ObjectStore;
use parking_lot::Mutex;
use quire::{CacheConfig, PageCache};
use quire_object::compat013::{As013, As014};
use quire_object::{CachedStore, CachedStoreConfig, DiskTier};
use url::Url;

use crate::net::{ACCESS_KEY, BUCKET, SECRET_KEY};

/// The bucket as a URL, as DataFusion registers stores and names tables: `s3://bench`.
pub fn bucket_url() -> Url {
    Url::parse(&format!("s3://{BUCKET}")).expect("a valid URL")
}

/// object_store 0.13's S3 client for the bucket at `endpoint` (the proxy), path-style, plain
/// HTTP, the server's credentials.
pub fn direct(endpoint: &str) -> anyhow::Result<Arc<dyn ObjectStore>> {
    Ok(Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_bucket_name(BUCKET)
            .with_access_key_id(ACCESS_KEY)
            .with_secret_access_key(SECRET_KEY)
            .with_region("us-east-1")
            .with_allow_http(true)
            .build()?,
    ))
}

/// What the quire-cached store is given: its memory, and its disk tier.
#[derive(Clone, Debug)]
pub struct CacheBudget {
    /// quire's memory, in bytes: its page cache's frames, their descriptors and the disk tier's
    /// queue of offers (`quire_object::budget::frame_pool_within`).
    pub memory: u64,
    /// The disk tier's directory and size in bytes; `None`: no tier.
    pub tier: Option<(std::path::PathBuf, u64)>,
}

/// The name the disk tier knows the bucket's objects by, the same in every process.
pub const TIER_NAME: &str = "s3://bench";

/// `inner` (a 0.13 store, as DataFusion takes it) behind quire's cache, as a 0.13 store again:
/// what the variant `quire-store` registers. The `CachedStore` itself comes back too, for its
/// counters.
///
/// The cache is a `PageCache` of `budget.memory` with quire-object's readahead for object
/// storage, and a `DiskTier` under it where `budget.tier` names one; `inner` is seen as a 0.14
/// store through `As014`, the cached store as a 0.13 one through `As013`.
pub fn cached_with_handle(
    inner: Arc<dyn ObjectStore>,
    budget: &CacheBudget,
) -> anyhow::Result<(Arc<dyn ObjectStore>, Arc<CachedStore>)> {
    // The budget pays for what grows with the cache: the frames get what their descriptors and
    // the disk tier's queue leave of it.
    let frames = quire_object::budget::frame_pool_within(budget.memory, budget.tier.is_some())
        .with_context(|| format!("a budget of {} bytes leaves no frames", budget.memory))?;
    let mut config = CacheConfig::new(frames);
    config.readahead_max = quire_object::READAHEAD_MAX;
    let cache = PageCache::new(config)?;
    let inner: Arc<dyn object_store_014::ObjectStore> = Arc::new(As014::new(inner));
    let config = CachedStoreConfig {
        name: Some(TIER_NAME.into()),
        ..CachedStoreConfig::default()
    };
    let store = Arc::new(match &budget.tier {
        Some((dir, size)) => {
            CachedStore::with_tier(inner, cache, config, DiskTier::open(dir, *size)?)?
        }
        None => CachedStore::with_config(inner, cache, config)?,
    });
    let as014: Arc<dyn object_store_014::ObjectStore> = store.clone();
    Ok((Arc::new(As013::new(as014)), store))
}

/// [`cached_with_handle`] without the handle.
pub fn cached(
    inner: Arc<dyn ObjectStore>,
    budget: &CacheBudget,
) -> anyhow::Result<Arc<dyn ObjectStore>> {
    Ok(cached_with_handle(inner, budget)?.0)
}

/// Turns each store into the one to use in its place (for [`CachingRegistry`]): given the
/// store's URL, so that it can leave some (the local file system) as they are.
pub type Wrap = dyn Fn(&Url, Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> + Send + Sync;

/// A DataFusion [`ObjectStoreRegistry`] whose every store is wrapped (by quire's cache, in
/// this crate's uses) — stores registered with it and those the inner registry makes on its
/// own alike — so that one line caches every table of a session:
///
/// ```no_run
/// # use std::sync::Arc;
/// # use datafusion::execution::object_store::DefaultObjectStoreRegistry;
/// # use datafusion::execution::runtime_env::RuntimeEnvBuilder;
/// # use quire_query::stores::CachingRegistry;
/// # let wrap = |_: &url::Url, s| s;
/// let registry = CachingRegistry::new(Arc::new(DefaultObjectStoreRegistry::new()), wrap);
/// let runtime = RuntimeEnvBuilder::new().with_object_store_registry(Arc::new(registry)).build_arc();
/// ```
///
/// Each store is wrapped once: the wrapped store is kept beside the inner one and handed out
/// for as long as the inner registry hands out that same store.
pub struct CachingRegistry {
    inner: Arc<dyn ObjectStoreRegistry>,
    wrap: Box<Wrap>,
    /// The wrapped store of each inner store, by the inner store's address (kept alive by
    /// the entry, so that the address is not reused).
    wrapped: Mutex<HashMap<usize, Entry>>,
}

/// An inner store and its wrapped store.
type Entry = (Arc<dyn ObjectStore>, Arc<dyn ObjectStore>);

impl std::fmt::Debug for CachingRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachingRegistry")
            .field("inner", &self.inner)
            .field("wrapped", &self.wrapped.lock().len())
            .finish()
    }
}

impl CachingRegistry {
    /// Wraps every store of `inner` with `wrap`.
    pub fn new(
        inner: Arc<dyn ObjectStoreRegistry>,
        wrap: impl Fn(&Url, Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> + Send + Sync + 'static,
    ) -> CachingRegistry {
        CachingRegistry {
            inner,
            wrap: Box::new(wrap),
            wrapped: Mutex::new(HashMap::new()),
        }
    }

    fn key(store: &Arc<dyn ObjectStore>) -> usize {
        Arc::as_ptr(store).cast::<()>() as usize
    }

    /// The wrapped store of `store` (the inner registry's for `url`), made on first use.
    fn wrapped(&self, url: &Url, store: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        let mut map = self.wrapped.lock();
        let entry = map
            .entry(Self::key(&store))
            .or_insert_with(|| (Arc::clone(&store), (self.wrap)(url, store)));
        Arc::clone(&entry.1)
    }
}

impl ObjectStoreRegistry for CachingRegistry {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        let new = Self::key(&store);
        let old = self.inner.register_store(url, store)?;
        let key = Self::key(&old);
        // The store registered again keeps its wrapped store (and what that cached); a store
        // replaced by another: its wrapped one is dropped with it.
        let wrapped = if key == new {
            self.wrapped.lock().get(&key).map(|(_, w)| Arc::clone(w))
        } else {
            self.wrapped.lock().remove(&key).map(|(_, w)| w)
        };
        Some(wrapped.unwrap_or(old))
    }

    fn deregister_store(&self, url: &Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
        let old = self.inner.deregister_store(url)?;
        Ok(match self.wrapped.lock().remove(&Self::key(&old)) {
            Some((_, w)) => w,
            None => old,
        })
    }

    fn get_store(&self, url: &Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
        let store = self.inner.get_store(url)?;
        Ok(self.wrapped(url, store))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use datafusion::execution::object_store::DefaultObjectStoreRegistry;
    use object_store::memory::InMemory;

    use super::*;

    /// A registry whose wrapper counts its calls and wraps in a new `InMemory`-backed marker
    /// (`PrefixStore`), so that a wrapped store is told from its inner one by address.
    fn registry(calls: Arc<AtomicUsize>) -> CachingRegistry {
        CachingRegistry::new(
            Arc::new(DefaultObjectStoreRegistry::new()),
            move |url, store| {
                if url.scheme() == "file" {
                    return store;
                }
                calls.fetch_add(1, Ordering::SeqCst);
                Arc::new(object_store::prefix::PrefixStore::new(store, "wrapped"))
            },
        )
    }

    #[test]
    fn every_store_is_wrapped_once() {
        let calls = Arc::new(AtomicUsize::new(0));
        let r = registry(Arc::clone(&calls));
        let url = bucket_url();
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        assert!(r.register_store(&url, Arc::clone(&inner)).is_none());
        let a = r.get_store(&url).unwrap();
        let b = r.get_store(&url).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "the same wrapped store each time");
        assert!(
            !Arc::ptr_eq(&a, &inner),
            "the store handed out is the wrapped one"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // The local file system (the inner registry's own) is left as it is by this wrapper.
        let file = Url::parse("file:///").unwrap();
        let f = r.get_store(&file).unwrap();
        assert!(Arc::ptr_eq(&f, &r.get_store(&file).unwrap()));
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        // The same store registered again: still the same wrapped one.
        let again = r.register_store(&url, Arc::clone(&inner)).unwrap();
        assert!(Arc::ptr_eq(&again, &a));
        assert!(Arc::ptr_eq(&r.get_store(&url).unwrap(), &a));
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        // A replaced store: the old wrapped one comes back, the new one is wrapped anew.
        let newer: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let old = r.register_store(&url, newer).unwrap();
        assert!(Arc::ptr_eq(&old, &a));
        let c = r.get_store(&url).unwrap();
        assert!(!Arc::ptr_eq(&c, &a));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        let gone = r.deregister_store(&url).unwrap();
        assert!(Arc::ptr_eq(&gone, &c));
        assert!(r.get_store(&url).is_err());
    }
}
