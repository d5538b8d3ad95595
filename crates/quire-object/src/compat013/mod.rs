//! object_store 0.13 and 0.14 together (feature `object-store-013`): a store of either version
//! seen through the other's `ObjectStore` trait.
//!
//! This crate, SlateDB and arrow-rs parquet 60 are on object_store 0.14; DataFusion 55 is on
//! 0.13. The trait has the same methods in both, but a `dyn ObjectStore` of one version is not
//! one of the other. Two adapters bridge them, each implementing the whole trait of one version
//! by calling the same method of a store of the other:
//!
//! - [`As014`] wraps a 0.13 store for a 0.14 user: a store DataFusion made (or any 0.13
//!   implementation) given to [`Backing::with_store`](crate::Backing::with_store), and so
//!   cached by quire.
//! - [`As013`] wraps a 0.14 store for a 0.13 user: quire-object's [`CachedStore`] (or any 0.14
//!   implementation) given to DataFusion's `register_object_store`; [`cached`] does both in
//!   one call.
//!
//! Every method is delegated, the provided ones too (`get_ranges`, `list_with_offset`,
//! `rename_opts`): a store's own version of them (one GET of several ranges, a listing that
//! starts at the offset on the server, a server-side rename) is what runs. A multipart upload
//! is wrapped the same way. Payloads and the bytes read are the same `Bytes`, not copied.
//!
//! Every value crosses exactly — paths, options (ranges, conditions, versions, `head`, put
//! modes with the version to update, tags, every attribute kind, extensions), metadata,
//! listings, and each error variant to its counterpart with its source — except:
//!
//! - the `extensions` 0.14's results carry (`PutResult`, `ListResult`, `GetResult`): 0.13 has
//!   no such field, so a 0.13 caller does not see them, and a 0.14 caller of a 0.13 store gets
//!   them empty;
//! - a local file store's answer to a GET (`GetResultPayload::File`) arrives as a `Stream`
//!   reading the same range of the same file;
//! - an error variant the other version lacks (0.14's `JoinError`, in 0.13 only with its
//!   `tokio` feature) arrives as `Generic`, the original error its source.
//!
//! # Cached, for DataFusion
//!
//! [`cached`] is the one line for a 0.13 user: a 0.13 store behind a [`CachedStore`], as a 0.13
//! store. Per-call [`CacheHint`](crate::CacheHint)s go in the 0.13 options' `extensions` as
//! they would in 0.14's (the extensions cross unchanged). For the cache's
//! [`stats`](CachedStore::stats), build the three layers yourself and keep the `CachedStore`
//! (a clone shares its state):
//!
//! ```
//! # use std::sync::Arc;
//! # use quire::{CacheConfig, PageCache};
//! # use quire_object::compat013::{As013, As014};
//! # use quire_object::CachedStore;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let from_datafusion: Arc<dyn object_store_013::ObjectStore> =
//! #     Arc::new(object_store_013::memory::InMemory::new());
//! let cache = PageCache::new(CacheConfig::new(256 << 20))?;
//! let store = CachedStore::new(Arc::new(As014::new(from_datafusion)), cache)?;
//! let for_datafusion: Arc<dyn object_store_013::ObjectStore> =
//!     Arc::new(As013::new(Arc::new(store.clone())));
//! // … register `for_datafusion`, run queries …
//! println!("{}", store.stats());
//! # Ok(())
//! # }
//! ```
//!
//! Wrapping twice (`As013` over `As014` over a store) is correct, and costs a conversion per
//! value each time; unwrap rather than wrap where you can ([`As013::into_inner`]).
//!
//! ```
//! use std::sync::Arc;
//!
//! use quire::{CacheConfig, PageCache};
//! use quire_object::compat013::{As013, As014};
//! use quire_object::{Backing, BackingConfig, ObjectCache};
//! // This crate names object_store 0.13 `object_store_013`; in a DataFusion program it is the
//! // `object_store` that DataFusion's `ObjectStore` comes from.
//! use object_store_013::ObjectStoreExt as _;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A 0.13 store (one DataFusion made, say), cached by quire.
//! let store_013: Arc<dyn object_store_013::ObjectStore> =
//!     Arc::new(object_store_013::memory::InMemory::new());
//! let backing = Backing::with_store(
//!     Arc::new(As014::new(store_013.clone())),
//!     "",
//!     "memory://",
//!     BackingConfig::default(),
//! )?;
//! let cache = ObjectCache::new(PageCache::new(CacheConfig::new(64 << 20))?, backing, None);
//! let file = cache.create("tables/t.parquet", false)?;
//! file.write_all_at(0, b"PAR1")?;
//! file.close()?; // uploads through the adapter
//! let key = object_store_013::path::Path::from("tables/t.parquet");
//! let read = futures::executor::block_on(store_013.get(&key))?;
//! assert_eq!(&futures::executor::block_on(read.bytes())?[..], b"PAR1");
//!
//! // A 0.14 store (quire-object's, any other) for DataFusion 55:
//! // `ctx.register_object_store(&url, for_datafusion)`.
//! let store_014: Arc<dyn object_store::ObjectStore> =
//!     Arc::new(object_store::memory::InMemory::new());
//! let for_datafusion: Arc<dyn object_store_013::ObjectStore> = Arc::new(As013::new(store_014));
//! futures::executor::block_on(for_datafusion.put(&key, "PAR1".into()))?;
//! let meta = futures::executor::block_on(for_datafusion.head(&key))?;
//! assert_eq!(meta.size, 4);
//! # Ok(())
//! # }
//! ```

mod adapter;
mod convert;

use std::sync::Arc;

use quire::PageCache;

pub use adapter::as013::As013;
pub use adapter::as014::As014;

use crate::{CachedStore, CachedStoreConfig, DiskTier, ObjectError};

/// `inner`, a store of object_store 0.13, behind quire's cache ([`CachedStore`] with its
/// default configuration), as a 0.13 store: what DataFusion 55's `register_object_store` takes.
///
/// ```
/// # use std::sync::Arc;
/// # use quire::{CacheConfig, PageCache};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let s3: Arc<dyn object_store_013::ObjectStore> =
/// #     Arc::new(object_store_013::memory::InMemory::new());
/// let cache = PageCache::new(CacheConfig::new(256 << 20))?;
/// let store = Arc::new(quire_object::compat013::cached(s3, cache)?);
/// // ctx.register_object_store(&url, store);
/// # Ok(())
/// # }
/// ```
pub fn cached(
    inner: Arc<dyn object_store_013::ObjectStore>,
    cache: PageCache,
) -> Result<As013, ObjectError> {
    cached_with(inner, cache, CachedStoreConfig::default(), None)
}

/// As [`cached`], configured, with a disk tier under the memory cache if `tier` is given
/// ([`CachedStore::with_tier`]).
pub fn cached_with(
    inner: Arc<dyn object_store_013::ObjectStore>,
    cache: PageCache,
    config: CachedStoreConfig,
    tier: Option<DiskTier>,
) -> Result<As013, ObjectError> {
    let inner: Arc<dyn object_store::ObjectStore> = Arc::new(As014::new(inner));
    let store = match tier {
        Some(tier) => CachedStore::with_tier(inner, cache, config, tier)?,
        None => CachedStore::with_config(inner, cache, config)?,
    };
    Ok(As013::new(Arc::new(store)))
}
