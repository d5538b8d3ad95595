//! [`CachedStore`]: an [`ObjectStore`] that wraps any other and serves its reads from quire's
//! page cache — the form a query engine takes (DataFusion, arrow-rs `parquet`, delta-rs, lance,
//! SlateDB all read through an `Arc<dyn ObjectStore>`).
//!
//! # What it does with each call
//!
//! | call | what happens |
//! |---|---|
//! | `get_opts`, `get_range`, `head` | the object's metadata from the cache (one HEAD the first time, again after the TTL if one is set); the preconditions checked against it; the bytes from the cache, misses as block-aligned ranged GETs pinned to the ETag (`If-Match`), in flight together, one per block however many callers miss it |
//! | `get_ranges` | ranges close together read as one span; every span read at once; cached bytes cost no request |
//! | `put_opts` | to the inner store; then the cache holds the new version's bytes (write-through, [`WritePolicy`]) or forgets the object |
//! | `put_multipart_opts` | to the inner store; the object is forgotten when the upload completes |
//! | `delete_stream`, `copy_opts`, `rename_opts` | to the inner store; each object written or removed is forgotten |
//! | `list`, `list_with_offset`, `list_with_delimiter` | to the inner store |
//!
//! # Consistency
//!
//! Objects are taken as immutable, as data lakes write them (a new file per change): after the
//! first read of an object its metadata is kept and no request checks it again. Set
//! [`CachedStoreConfig::ttl`] to revalidate it (one HEAD) when it is older than that; a changed
//! ETag drops the cached bytes of the old version. Writes made through this store are seen by
//! its next read at once. An object replaced behind the store's back is noticed at the first
//! miss (the GET pinned to the old ETag is refused): the read is retried once on the new
//! version, so a caller never gets bytes of two versions in one answer. A get whose stream has
//! begun can't change versions: a later chunk's miss ends it with `Precondition`, and the next
//! read is of the new version.
//!
//! Per call, [`CacheHint`] in the options' `extensions` sends a read straight to the inner
//! store or revalidates it now.
//!
//! # Errors
//!
//! The inner store's errors are returned as they are where the call goes to it (metadata,
//! writes, listings). A failed miss comes back through the page cache as an errno and is
//! returned as the matching `object_store` error: `NotFound`, `Precondition` (the object
//! changed), `PermissionDenied`, or `Generic` with the cache's error as its source. Never
//! wrong bytes: a read that can't be served whole fails.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload,
    PutResult, RenameOptions, UploadPart,
};
use parking_lot::Mutex;
use quire::filemap::{FilemapError, PageCache};

use crate::backing::{Backing, BackingConfig};
use crate::cache::{ObjectCache, ObjectHandle};
use crate::counters::Request;
use crate::file::{Prefill, Version};
use crate::tier::DiskTier;
use crate::ObjectError;

type Result<T, E = object_store::Error> = std::result::Result<T, E>;

const STORE: &str = "quire";

/// A per-call hint, put in the options' `extensions` (`GetOptions::extensions`,
/// `PutOptions::extensions`, …).
///
/// ```
/// # use object_store::GetOptions;
/// # use quire_object::CacheHint;
/// let mut opts = GetOptions::default();
/// opts.extensions.insert(CacheHint::Bypass);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheHint {
    /// Straight to the inner store; the cache is neither read nor filled (a one-off scan that
    /// should not push out what is cached, or a read that must see the store now).
    Bypass,
    /// Check the object's version now (one HEAD) whatever the TTL, then read through the cache.
    Revalidate,
}

/// What a put does to the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WritePolicy {
    /// The new version's bytes go into the cache (up to
    /// [`CachedStoreConfig::write_through_max`]; a larger object is forgotten instead).
    #[default]
    Through,
    /// The object is forgotten; the next read fetches it.
    Invalidate,
}

/// How a [`CachedStore`] behaves.
#[derive(Clone, Debug)]
pub struct CachedStoreConfig {
    /// Revalidate an object's metadata (one HEAD) when it is older than this. `None`: objects
    /// are immutable, never revalidated (a data lake's files).
    pub ttl: Option<Duration>,
    /// What a put does to the cache.
    pub write: WritePolicy,
    /// The largest object a put writes through (a larger one would push out more than it
    /// brings); default 64 MiB.
    pub write_through_max: u64,
    /// A get's bytes come as chunks of this many bytes (default 1 MiB).
    pub chunk: usize,
    /// `get_ranges`: ranges less than this apart are read as one span (default 1 MiB, as
    /// `object_store`'s own coalescing).
    pub coalesce: u64,
    /// How misses reach the inner store: the largest ranged GET, retries, runtime threads.
    pub backing: BackingConfig,
    /// The most objects whose metadata is kept (default 65 536; each costs a few hundred bytes,
    /// and an object with cached bytes also its cache file's index). Past it, the objects with
    /// nothing cached are forgotten first, then others until half are left.
    pub max_objects: usize,
    /// Where the disk tier finds this store's objects again after a restart: a name for the
    /// store that stays the same across processes (default: the inner store's `Display`, such
    /// as `AmazonS3(bucket)`).
    pub name: Option<String>,
}

impl Default for CachedStoreConfig {
    fn default() -> CachedStoreConfig {
        CachedStoreConfig {
            ttl: None,
            write: WritePolicy::Through,
            write_through_max: 64 << 20,
            chunk: 1 << 20,
            coalesce: object_store::OBJECT_STORE_COALESCE_DEFAULT,
            backing: BackingConfig::default(),
            max_objects: 1 << 16,
            name: None,
        }
    }
}

/// What a [`CachedStore`] has done; see [`CachedStore::stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CachedStoreStats {
    /// Reads served through the cache (`get_opts` without `head`, and `get_ranges` calls).
    pub reads: u64,
    /// Of those, the reads whose bytes were all cached: no request went out for them.
    pub hits: u64,
    /// The reads that needed the inner store.
    pub misses: u64,
    /// `head` calls (and `get_opts` with `head`), all answered from the cached metadata
    /// after the first.
    pub heads: u64,
    /// Of those, the heads answered from the cached metadata: no request went out for them.
    pub heads_cached: u64,
    /// Metadata requests sent: an object's first read, revalidations.
    pub meta_requests: u64,
    /// Calls sent straight to the inner store ([`CacheHint::Bypass`], or a read of a version
    /// other than the cached one).
    pub bypassed: u64,
    /// Bytes returned by reads.
    pub bytes_served: u64,
    /// Bytes fetched from the inner store for misses.
    pub bytes_fetched: u64,
    /// Ranged GETs sent for misses.
    pub get_requests: u64,
    /// Puts whose bytes went into the cache.
    pub written_through: u64,
    /// Objects forgotten because of a write, copy, rename or delete through this store.
    pub invalidated: u64,
    /// Reads retried because the object was replaced behind the store's back.
    pub replaced: u64,
    /// Objects whose metadata is kept now (at most [`CachedStoreConfig::max_objects`]).
    pub objects: u64,
}

impl CachedStoreStats {
    /// Requests the inner store did not get: reads answered from the cache with no request,
    /// plus heads answered from the cached metadata.
    pub fn requests_saved(&self) -> u64 {
        self.hits + self.heads_cached
    }
}

impl fmt::Display for CachedStoreStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reads {} (hits {}, misses {}), heads {} ({} cached), metadata requests {}, \
             bypassed {}, bytes served {}, bytes fetched {} in {} GETs, written through {}, \
             invalidated {}, replaced {}, objects {}",
            self.reads,
            self.hits,
            self.misses,
            self.heads,
            self.heads_cached,
            self.meta_requests,
            self.bypassed,
            self.bytes_served,
            self.bytes_fetched,
            self.get_requests,
            self.written_through,
            self.invalidated,
            self.replaced,
            self.objects
        )
    }
}

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    heads: AtomicU64,
    heads_cached: AtomicU64,
    meta_requests: AtomicU64,
    bypassed: AtomicU64,
    bytes_served: AtomicU64,
    written_through: AtomicU64,
    invalidated: AtomicU64,
    replaced: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// An object's metadata as last seen.
#[derive(Clone)]
struct Meta {
    meta: ObjectMeta,
    attributes: Attributes,
    checked: Instant,
}

impl Meta {
    fn version(&self) -> Version {
        Version::of(&self.meta)
    }
}

struct Shared {
    inner: Arc<dyn ObjectStore>,
    cache: ObjectCache,
    metas: Mutex<HashMap<Path, Meta>>,
    config: CachedStoreConfig,
    counters: Counters,
}

/// An [`ObjectStore`] that wraps `inner` and serves reads from quire's page cache (and its disk
/// tier, if given one); see the [module docs](self) for what each call does.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use object_store::{ObjectStore, ObjectStoreExt as _};
/// # use quire::{CacheConfig, PageCache};
/// # use quire_object::CachedStore;
/// # async fn f(s3: Arc<dyn ObjectStore>) -> Result<(), Box<dyn std::error::Error>> {
/// let cache = PageCache::new(CacheConfig::new(256 << 20))?;
/// let store: Arc<dyn ObjectStore> = Arc::new(CachedStore::new(s3, cache)?);
/// let footer = store.get_range(&"data/part-0.parquet".into(), 1000..1008).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CachedStore {
    shared: Arc<Shared>,
}

impl fmt::Debug for CachedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedStore")
            .field("inner", &self.shared.inner.to_string())
            .field("objects", &self.shared.metas.lock().len())
            .finish()
    }
}

impl fmt::Display for CachedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CachedStore({})", self.shared.inner)
    }
}

impl CachedStore {
    /// `inner` behind a cache of `cache`'s budget, with the default configuration (immutable
    /// objects, write-through).
    pub fn new(inner: Arc<dyn ObjectStore>, cache: PageCache) -> Result<CachedStore, ObjectError> {
        CachedStore::with_config(inner, cache, CachedStoreConfig::default())
    }

    /// `inner` behind a cache of `cache`'s budget, configured.
    pub fn with_config(
        inner: Arc<dyn ObjectStore>,
        cache: PageCache,
        config: CachedStoreConfig,
    ) -> Result<CachedStore, ObjectError> {
        CachedStore::build(inner, cache, config, None)
    }

    /// As [`with_config`](Self::with_config), with `tier` under the memory cache: clean bytes
    /// evicted from memory go there, and misses look there before the network — also in the
    /// next process that opens the tier's directory.
    pub fn with_tier(
        inner: Arc<dyn ObjectStore>,
        cache: PageCache,
        config: CachedStoreConfig,
        tier: DiskTier,
    ) -> Result<CachedStore, ObjectError> {
        CachedStore::build(inner, cache, config, Some(tier))
    }

    fn build(
        inner: Arc<dyn ObjectStore>,
        cache: PageCache,
        config: CachedStoreConfig,
        tier: Option<DiskTier>,
    ) -> Result<CachedStore, ObjectError> {
        let name = config.name.clone().unwrap_or_else(|| inner.to_string());
        let backing = Backing::with_store(inner.clone(), "", &name, config.backing.clone())?;
        let mut objects = ObjectCache::new(cache, backing, None);
        if let Some(t) = tier {
            objects = objects.with_tier(t);
        }
        Ok(CachedStore {
            shared: Arc::new(Shared {
                inner,
                cache: objects,
                metas: Mutex::new(HashMap::new()),
                config,
                counters: Counters::default(),
            }),
        })
    }

    /// The store it wraps.
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.shared.inner
    }

    /// The object cache under it (its page cache, disk tier and request counters).
    pub fn object_cache(&self) -> &ObjectCache {
        &self.shared.cache
    }

    /// What it has done so far.
    pub fn stats(&self) -> CachedStoreStats {
        let c = &self.shared.counters;
        let o = self.shared.cache.backing().stats();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CachedStoreStats {
            reads: get(&c.reads),
            hits: get(&c.hits),
            misses: get(&c.misses),
            heads: get(&c.heads),
            heads_cached: get(&c.heads_cached),
            meta_requests: get(&c.meta_requests),
            bypassed: get(&c.bypassed),
            bytes_served: get(&c.bytes_served),
            bytes_fetched: o.bytes_read,
            get_requests: o.requests(Request::Get),
            written_through: get(&c.written_through),
            invalidated: get(&c.invalidated),
            replaced: get(&c.replaced),
            objects: self.shared.metas.lock().len() as u64,
        }
    }

    /// Forgets `location`'s metadata and cached bytes (what a write, copy, rename or delete
    /// through this store does by itself).
    pub fn invalidate(&self, location: &Path) {
        self.shared.forget(location);
    }
}

fn hint(ext: &object_store::Extensions) -> Option<CacheHint> {
    ext.get::<CacheHint>().copied()
}

fn generic(source: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: Box::new(source),
    }
}

/// A read's error from the page cache as the `object_store` error it stands for.
fn read_error(path: &Path, e: FilemapError) -> object_store::Error {
    use object_store::Error as E;
    let path = path.to_string();
    let source = Box::new(e);
    match crate::filemap_errno(&source) {
        libc::ENOENT => E::NotFound { path, source },
        libc::ESTALE => E::Precondition { path, source },
        libc::EACCES => E::PermissionDenied { path, source },
        _ => E::Generic {
            store: STORE,
            source,
        },
    }
}

/// Whether a read failed because the object is no longer the version it was pinned to.
fn is_replaced(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::Precondition { .. })
}

impl Shared {
    fn forget(&self, location: &Path) {
        self.metas.lock().remove(location);
        self.cache.drop_key(location);
        bump(&self.counters.invalidated, 1);
    }

    /// Keeps the metadata (and cache files) of at most half of `max_objects`: the objects
    /// with nothing cached go first.
    fn shrink(&self) {
        self.cache.sweep_idle();
        let keep = (self.config.max_objects / 2).max(1);
        let mut metas = self.metas.lock();
        metas.retain(|k, _| self.cache.has_key(k));
        if metas.len() > keep {
            let extra: Vec<Path> = metas.keys().skip(keep).cloned().collect();
            for k in extra {
                metas.remove(&k);
                self.cache.drop_key(&k);
            }
        }
    }

    /// `location`'s metadata if it is cached and not older than the TTL.
    fn known(&self, location: &Path) -> Option<Meta> {
        let metas = self.metas.lock();
        let m = metas.get(location)?;
        let stale = self.config.ttl.is_some_and(|t| m.checked.elapsed() > t);
        (!stale).then(|| m.clone())
    }

    /// `location`'s metadata: cached, or by one request (`fresh`: always by request).
    async fn meta(&self, location: &Path, fresh: bool) -> Result<Meta> {
        if !fresh {
            if let Some(m) = self.known(location) {
                return Ok(m);
            }
        }
        bump(&self.counters.meta_requests, 1);
        let inner = self.inner.clone();
        let backing = self.cache.backing().clone();
        let counters = backing.inner.counters.clone();
        let loc = location.clone();
        // On the backing's runtime: the inner store's client may need a tokio runtime, and the
        // caller's executor may be any.
        let r = backing
            .runtime()
            .spawn(async move {
                let req = counters.start(Request::Head);
                let opts = GetOptions {
                    head: true,
                    ..Default::default()
                };
                let r = inner.get_opts(&loc, opts).await;
                if matches!(r, Ok(_) | Err(object_store::Error::NotFound { .. })) {
                    req.ok();
                }
                r
            })
            .await
            .map_err(generic)?;
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                if matches!(e, object_store::Error::NotFound { .. }) {
                    self.metas.lock().remove(location);
                }
                return Err(e);
            }
        };
        let m = Meta {
            meta: r.meta,
            attributes: r.attributes,
            checked: Instant::now(),
        };
        let over = {
            let mut metas = self.metas.lock();
            metas.insert(location.clone(), m.clone());
            metas.len() > self.config.max_objects.max(1)
        };
        if over {
            self.shrink();
        }
        Ok(m)
    }

    fn open(&self, location: &Path, m: &Meta) -> Result<ObjectHandle> {
        self.cache
            .open_version(location.clone(), m.version())
            .map_err(|e| object_error(location, e))
    }

    /// After a read found the object replaced: its metadata again, by request.
    async fn reload(&self, location: &Path) -> Result<Meta> {
        bump(&self.counters.replaced, 1);
        self.metas.lock().remove(location);
        self.meta(location, true).await
    }

    async fn get(self: &Arc<Self>, location: &Path, options: GetOptions) -> Result<GetResult> {
        let h = hint(&options.extensions);
        let known = match h {
            Some(CacheHint::Revalidate) => None,
            _ => self.known(location),
        };
        let cached = known.is_some();
        let mut m = match known {
            Some(m) => m,
            None => self.meta(location, true).await?,
        };
        if options
            .version
            .as_ref()
            .is_some_and(|v| m.meta.version.as_ref() != Some(v))
        {
            // Another version than the cached one: only the inner store has it.
            bump(&self.counters.bypassed, 1);
            return self.inner.get_opts(location, options).await;
        }
        let mut retried = false;
        loop {
            options.check_preconditions(&m.meta)?;
            let range = match &options.range {
                Some(r) => r.as_range(m.meta.size).map_err(generic)?,
                None => 0..m.meta.size,
            };
            if options.head {
                bump(&self.counters.heads, 1);
                if cached {
                    bump(&self.counters.heads_cached, 1);
                }
                return Ok(GetResult {
                    payload: GetResultPayload::Stream(stream::empty().boxed()),
                    meta: m.meta,
                    range,
                    attributes: m.attributes,
                    extensions: Default::default(),
                });
            }
            let handle = Arc::new(self.open(location, &m)?);
            if !retried {
                // One call, one read: a retry on a replaced object is not another.
                self.count_read(&handle, std::slice::from_ref(&range));
            }
            // The first chunk is read before answering, so that an object gone or replaced
            // behind the store's back is this call's error (and a replaced one is retried).
            let first_end = range.end.min(range.start + self.config.chunk as u64);
            match read_span(&handle, range.start..first_end).await {
                Ok(first) => {
                    bump(&self.counters.bytes_served, first.len() as u64);
                    let rest = self.clone().chunks(handle, location, first_end..range.end);
                    let payload = stream::once(async move { Ok(first) })
                        .filter(|b: &Result<Bytes>| {
                            std::future::ready(b.as_ref().map_or(true, |b| !b.is_empty()))
                        })
                        .chain(rest)
                        .boxed();
                    return Ok(GetResult {
                        payload: GetResultPayload::Stream(payload),
                        meta: m.meta,
                        range,
                        attributes: m.attributes,
                        extensions: Default::default(),
                    });
                }
                Err(e) => {
                    let e = read_error(location, e);
                    if is_replaced(&e) && !retried {
                        retried = true;
                        m = self.reload(location).await?;
                        continue;
                    }
                    if matches!(e, object_store::Error::NotFound { .. }) {
                        self.forget(location);
                    }
                    return Err(e);
                }
            }
        }
    }

    /// The rest of a get's bytes, `chunk` at a time, read as the consumer pulls them.
    fn chunks(
        self: Arc<Self>,
        handle: Arc<ObjectHandle>,
        location: &Path,
        range: Range<u64>,
    ) -> BoxStream<'static, Result<Bytes>> {
        let location = location.clone();
        let chunk = self.config.chunk.max(1) as u64;
        stream::try_unfold(range.start, move |at| {
            let (handle, shared, location) = (handle.clone(), self.clone(), location.clone());
            let end = range.end;
            async move {
                if at >= end {
                    return Ok(None);
                }
                let to = end.min(at + chunk);
                let b = read_span(&handle, at..to).await.map_err(|e| {
                    let e = read_error(&location, e);
                    // Replaced or removed behind the store's back after the first chunk went
                    // out: this answer can't change versions, but the next read must not
                    // find the old metadata again (it would fail here again).
                    if is_replaced(&e) || matches!(e, object_store::Error::NotFound { .. }) {
                        shared.metas.lock().remove(&location);
                    }
                    e
                })?;
                bump(&shared.counters.bytes_served, b.len() as u64);
                Ok(Some((b, to)))
            }
        })
        .boxed()
    }

    fn count_read(&self, handle: &ObjectHandle, ranges: &[Range<u64>]) {
        let c = &self.counters;
        bump(&c.reads, 1);
        let cached = ranges.iter().all(|r| {
            handle
                .cached_file()
                .is_cached(r.start, (r.end - r.start) as usize)
        });
        bump(if cached { &c.hits } else { &c.misses }, 1);
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        if ranges.is_empty() {
            return Ok(Vec::new());
        }
        let mut m = self.meta(location, false).await?;
        let mut retried = false;
        loop {
            let len = m.meta.size;
            let asked = ranges
                .iter()
                .map(|r| GetRange::Bounded(r.clone()).as_range(len).map_err(generic))
                .collect::<Result<Vec<_>>>()?;
            let handle = self.open(location, &m)?;
            if !retried {
                self.count_read(&handle, &asked);
            }
            let spans = coalesce(&asked, self.config.coalesce);
            let reads = spans.iter().map(|s| read_span(&handle, s.clone()));
            match futures::future::try_join_all(reads).await {
                Ok(data) => {
                    let out: Vec<Bytes> = asked
                        .iter()
                        .map(|r| {
                            let i = spans.partition_point(|s| s.end < r.end);
                            let s = &spans[i];
                            data[i].slice((r.start - s.start) as usize..(r.end - s.start) as usize)
                        })
                        .collect();
                    let n: u64 = asked.iter().map(|r| r.end - r.start).sum();
                    bump(&self.counters.bytes_served, n);
                    return Ok(out);
                }
                Err(e) => {
                    let e = read_error(location, e);
                    if is_replaced(&e) && !retried {
                        retried = true;
                        m = self.reload(location).await?;
                        continue;
                    }
                    if matches!(e, object_store::Error::NotFound { .. }) {
                        self.forget(location);
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Puts `payload`, the bytes of `location` at `version`, into the cache.
    async fn fill(&self, location: &Path, version: Version, payload: PutPayload) -> Result<()> {
        let Some(e_tag) = version.e_tag.clone() else {
            return Ok(());
        };
        let size = version.size;
        let handle = self
            .cache
            .open_version(location.clone(), version)
            .map_err(|e| object_error(location, e))?;
        handle
            .object()
            .set_prefill(Some(Prefill { e_tag, payload }));
        let step = self.config.chunk.max(4096) as u64;
        let mut buf = vec![0u8; step as usize];
        let mut at = 0;
        let mut r = Ok(());
        while at < size {
            let n = step.min(size - at) as usize;
            if let Err(e) = read_full(&handle, at, &mut buf[..n]).await {
                r = Err(read_error(location, e));
                break;
            }
            at += n as u64;
        }
        handle.object().set_prefill(None);
        r
    }
}

fn object_error(location: &Path, e: ObjectError) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: format!("{location}: {e}").into(),
    }
}

/// Reads exactly `buf.len()` bytes at `at` through `handle`.
async fn read_full(
    handle: &ObjectHandle,
    mut at: u64,
    mut buf: &mut [u8],
) -> Result<(), FilemapError> {
    while !buf.is_empty() {
        let n = handle.read_at_async(at, buf).await?;
        if n == 0 {
            return Err(FilemapError::Store(crate::backing::errno_error(
                quire::store::Op::Read,
                at,
                libc::EIO,
            )));
        }
        at += n as u64;
        buf = &mut buf[n..];
    }
    Ok(())
}

async fn read_span(handle: &ObjectHandle, span: Range<u64>) -> Result<Bytes, FilemapError> {
    let mut buf = vec![0u8; (span.end - span.start) as usize];
    read_full(handle, span.start, &mut buf).await?;
    Ok(Bytes::from(buf))
}

/// `ranges` as spans to read: sorted, each range inside one span, ranges less than `gap` apart
/// (or overlapping) in the same span.
fn coalesce(ranges: &[Range<u64>], gap: u64) -> Vec<Range<u64>> {
    let mut sorted: Vec<Range<u64>> = ranges.iter().filter(|r| r.start < r.end).cloned().collect();
    sorted.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::new();
    for r in sorted {
        match out.last_mut() {
            Some(last) if r.start <= last.end.saturating_add(gap) => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    if out.is_empty() {
        // Only empty ranges: one empty span serves them all.
        out.push(0..0);
    }
    out
}

/// A multipart upload through the store: the object is forgotten when it completes.
#[derive(Debug)]
struct Upload {
    upload: Box<dyn MultipartUpload>,
    shared: Arc<Shared>,
    location: Path,
}

#[async_trait]
impl MultipartUpload for Upload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.upload.put_part(data)
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let r = self.upload.complete().await;
        self.shared.forget(&self.location);
        r
    }

    async fn abort(&mut self) -> Result<()> {
        self.upload.abort().await
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CachedStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for CachedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let s = &self.shared;
        if hint(&opts.extensions) == Some(CacheHint::Bypass) {
            bump(&s.counters.bypassed, 1);
            let r = s.inner.put_opts(location, payload, opts).await;
            // The cache is not filled, but what it held of the object is no longer it.
            s.forget(location);
            return r;
        }
        let size = payload.content_length() as u64;
        let kept = payload.clone();
        let r = s.inner.put_opts(location, payload, opts).await;
        // Whatever the outcome, what was cached of the object may no longer be it.
        s.forget(location);
        let res = r?;
        if s.config.write == WritePolicy::Through && size <= s.config.write_through_max {
            let version = Version {
                e_tag: res.e_tag.clone(),
                version: res.version.clone(),
                size,
            };
            // A fill that fails leaves the object uncached, nothing worse: the put succeeded.
            if version.e_tag.is_some() && s.fill(location, version, kept).await.is_ok() {
                bump(&s.counters.written_through, 1);
            }
        }
        Ok(res)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let upload = self.shared.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(Upload {
            upload,
            shared: self.shared.clone(),
            location: location.clone(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let s = &self.shared;
        if hint(&options.extensions) == Some(CacheHint::Bypass) {
            bump(&s.counters.bypassed, 1);
            return s.inner.get_opts(location, options).await;
        }
        s.get(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.shared.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let shared = self.shared.clone();
        self.shared
            .inner
            .delete_stream(locations)
            .map(move |r| {
                if let Ok(p) = &r {
                    shared.forget(p);
                }
                r
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.shared.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.shared.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.shared.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let r = self.shared.inner.copy_opts(from, to, options).await;
        self.shared.forget(to);
        r
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        let r = self.shared.inner.rename_opts(from, to, options).await;
        self.shared.forget(from);
        self.shared.forget(to);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::coalesce;
    use proptest::prelude::*;

    proptest! {
        /// Every range lies inside exactly the span found for it, spans are sorted and apart by
        /// more than the gap.
        #[test]
        fn coalesced_spans_cover_each_range(
            ranges in proptest::collection::vec((0u64..10_000, 0u64..500), 1..20),
            gap in 0u64..300,
        ) {
            let ranges: Vec<_> = ranges.into_iter().map(|(s, l)| s..s + l).collect();
            let spans = coalesce(&ranges, gap);
            for w in spans.windows(2) {
                prop_assert!(w[0].end + gap < w[1].start);
            }
            for r in ranges.iter().filter(|r| r.start < r.end) {
                let i = spans.partition_point(|s| s.end < r.end);
                prop_assert!(spans[i].start <= r.start && r.end <= spans[i].end, "{r:?} in {spans:?}");
            }
        }
    }
}
