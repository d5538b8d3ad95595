//! A connection to one bucket (or container, or prefix of one): the `object_store` client, the
//! runtime its requests run on, the counters, and the translation of its errors into the
//! store errors (and so errnos) the page cache and a file system report.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::list::PaginatedListStore;
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use quire::store::{Op, StoreError};

use crate::counters::Counters;
use crate::ObjectError;

/// How a backing talks to its object store.
#[derive(Clone, Debug)]
pub struct BackingConfig {
    /// Requests are retried with exponential backoff up to this many times...
    pub max_retries: usize,
    /// ...and for no longer than this in all.
    pub retry_timeout: Duration,
    /// The first backoff; it doubles (with jitter) up to 2 s.
    pub first_backoff: Duration,
    /// The largest ranged GET: a readahead window is fetched as ranges of at most this many
    /// bytes, all in flight at once.
    pub range_size: usize,
    /// Objects up to this size are uploaded with one PUT; larger ones as a multipart upload.
    pub single_put_max: u64,
    /// The size of a multipart upload's parts (S3 wants at least 5 MiB but for the last).
    pub part_size: usize,
    /// Parts uploaded at once, by all the backing's files together: upload buffers never hold
    /// more than `parts_in_flight` × `part_size` bytes ([`BackingConfig::upload_bound`]).
    pub parts_in_flight: usize,
    /// Uploads are conditional (`If-Match` on the version an object was read at, create-only
    /// for a new one), so two writers don't silently overwrite each other. Turn off for
    /// servers that refuse conditional writes; an upload then overwrites whatever is there.
    pub conditional_writes: bool,
    /// Runtime threads that drive requests.
    pub runtime_threads: usize,
    /// `object_store` configuration keys and values applied over the environment's (for S3:
    /// `aws_endpoint`, `aws_access_key_id`, `aws_secret_access_key`, `aws_region`,
    /// `aws_allow_http`, …; for GCS `google_*`, for Azure `azure_*`).
    pub options: Vec<(String, String)>,
}

impl Default for BackingConfig {
    fn default() -> BackingConfig {
        BackingConfig {
            max_retries: 10,
            retry_timeout: Duration::from_secs(60),
            first_backoff: Duration::from_millis(50),
            range_size: 1 << 20,
            single_put_max: 16 << 20,
            part_size: 8 << 20,
            parts_in_flight: 4,
            conditional_writes: true,
            runtime_threads: 2,
            options: Vec::new(),
        }
    }
}

impl BackingConfig {
    /// The most bytes of upload buffers the backing holds at once, its files together: parts
    /// read from staging and being sent, a single PUT's body (a body larger than this waits
    /// until no other upload holds any).
    pub fn upload_bound(&self) -> u64 {
        (self.parts_in_flight.max(1) * self.part_size.max(5 << 20)) as u64
    }
}

/// Room taken in the backing's upload budget: `bytes` of upload buffers, given back when
/// dropped.
pub(crate) struct UploadRoom {
    _permit: tokio::sync::OwnedSemaphorePermit,
    counters: Arc<Counters>,
    bytes: u64,
}

impl Drop for UploadRoom {
    fn drop(&mut self) {
        self.counters.upload_freed(self.bytes);
    }
}

/// The upload budget counts in pages.
const ROOM_UNIT: u64 = 4096;

/// What a backing's files share.
pub(crate) struct BackingInner {
    pub(crate) store: Arc<dyn ObjectStore>,
    /// The same store's paginated listing, where it has one (S3, GCS): "is there anything
    /// under this prefix" is then one key's listing, not a page of a thousand.
    #[cfg_attr(not(feature = "fuse"), allow(dead_code))]
    pub(crate) pager: Option<Arc<dyn PaginatedListStore>>,
    /// Where object keys start (a URL's path: `s3://bucket/some/prefix` → `some/prefix`).
    pub(crate) prefix: Path,
    pub(crate) runtime: Runtime,
    pub(crate) counters: Arc<Counters>,
    pub(crate) config: BackingConfig,
    pub(crate) url: String,
    /// The upload budget, [`BackingConfig::upload_bound`] in pages.
    uploads: Arc<tokio::sync::Semaphore>,
}

/// The backing's runtime, shut down without waiting when dropped: the last reference to a
/// backing may go in an async context (a `CachedStore` dropped in a caller's task) or on one of
/// the runtime's own threads (a task holding a file), where dropping a runtime the blocking way
/// panics. What it still runs then are requests nobody waits for.
pub(crate) struct Runtime(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for Runtime {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("taken only when dropped")
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// A bucket (or prefix of one) that quire caches objects of.
#[derive(Clone)]
pub struct Backing {
    pub(crate) inner: Arc<BackingInner>,
}

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backing")
            .field("url", &self.inner.url)
            .field("store", &self.inner.store.to_string())
            .finish()
    }
}

/// Counts every HTTP request a client sends (retries included) and those that failed.
#[derive(Debug)]
struct CountingConnector {
    counters: Arc<Counters>,
}

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Counting {
            inner,
            counters: self.counters.clone(),
        }))
    }
}

#[derive(Debug)]
struct Counting {
    inner: HttpClient,
    counters: Arc<Counters>,
}

impl HttpService for Counting {
    fn call<'a, 'b>(
        &'a self,
        req: HttpRequest,
    ) -> Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let r = self.inner.execute(req).await;
            let failed = match &r {
                Ok(resp) => resp.status().is_server_error() || resp.status().as_u16() == 429,
                Err(_) => true,
            };
            self.counters.http_attempt(failed);
            r
        })
    }
}

impl Backing {
    /// Connects to `url`: `s3://BUCKET[/PREFIX]`, `gs://…`, `az://CONTAINER[/PREFIX]`,
    /// `memory:///` (an in-memory store, for tests), `file:///DIR` (a local directory).
    /// Credentials, region and endpoint come from the environment, as the clouds' own tools
    /// read them (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
    /// `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_*`, …).
    /// Nothing is asked of the server yet: [`Backing::check`] does that.
    pub fn connect(url: &str, config: BackingConfig) -> Result<Backing, ObjectError> {
        let bad = |why: &str| ObjectError::Url {
            url: url.to_string(),
            why: why.to_string(),
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let counters = Arc::new(Counters::default());
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: config.first_backoff,
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: config.max_retries,
            retry_timeout: config.retry_timeout,
        };
        let connector = || CountingConnector {
            counters: counters.clone(),
        };
        let bucket_url = format!("{scheme}://{bucket}");
        let build_err = |e: object_store::Error| ObjectError::Connect {
            url: url.to_string(),
            source: Box::new(e),
        };
        let mut pager: Option<Arc<dyn PaginatedListStore>> = None;
        let store: Arc<dyn ObjectStore> = match scheme {
            "s3" | "s3a" => {
                if bucket.is_empty() {
                    return Err(bad("no bucket"));
                }
                let mut b = object_store::aws::AmazonS3Builder::from_env()
                    .with_url(bucket_url)
                    .with_retry(retry)
                    .with_http_connector(connector());
                // `AWS_ALLOW_HTTP` is read by from_env; an endpoint given as http:// means
                // plain HTTP was asked for (a local server).
                let endpoint = config
                    .options
                    .iter()
                    .find(|(k, _)| k.contains("endpoint"))
                    .map(|(_, v)| v.clone())
                    .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
                    .or_else(|| std::env::var("AWS_ENDPOINT").ok());
                if endpoint.is_some_and(|e| e.starts_with("http://")) {
                    b = b.with_allow_http(true);
                }
                for (k, v) in &config.options {
                    let key = k.parse().map_err(build_err)?;
                    b = b.with_config(key, v);
                }
                if config.conditional_writes {
                    b = b.with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch);
                }
                let s3 = Arc::new(b.build().map_err(build_err)?);
                pager = Some(s3.clone());
                s3
            }
            "gs" => {
                if bucket.is_empty() {
                    return Err(bad("no bucket"));
                }
                let mut b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(bucket_url)
                    .with_retry(retry)
                    .with_http_connector(connector());
                for (k, v) in &config.options {
                    b = b.with_config(k.parse().map_err(build_err)?, v);
                }
                let gcs = Arc::new(b.build().map_err(build_err)?);
                pager = Some(gcs.clone());
                gcs
            }
            "az" | "azure" | "abfs" | "abfss" => {
                if bucket.is_empty() {
                    return Err(bad("no container"));
                }
                let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(bucket_url)
                    .with_retry(retry)
                    .with_http_connector(connector());
                for (k, v) in &config.options {
                    b = b.with_config(k.parse().map_err(build_err)?, v);
                }
                Arc::new(b.build().map_err(build_err)?)
            }
            "memory" => Arc::new(object_store::memory::InMemory::new()),
            "file" => {
                let dir = format!("/{}", rest.trim_start_matches('/'));
                return Backing::build(
                    Arc::new(
                        object_store::local::LocalFileSystem::new_with_prefix(&dir)
                            .map_err(build_err)?,
                    ),
                    None,
                    "",
                    url,
                    config,
                    counters,
                );
            }
            _ => return Err(bad("unknown scheme (s3, gs, az, memory, file)")),
        };
        Backing::build(store, pager, prefix, url, config, counters)
    }

    /// A backing over a store made by the caller (any `object_store` implementation), keys
    /// starting at `prefix`.
    pub fn with_store(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        url: &str,
        config: BackingConfig,
    ) -> Result<Backing, ObjectError> {
        Backing::build(store, None, prefix, url, config, Arc::default())
    }

    fn build(
        store: Arc<dyn ObjectStore>,
        pager: Option<Arc<dyn PaginatedListStore>>,
        prefix: &str,
        url: &str,
        config: BackingConfig,
        counters: Arc<Counters>,
    ) -> Result<Backing, ObjectError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.runtime_threads.max(1))
            .thread_name("quire-object")
            .enable_all()
            .build()
            .map_err(ObjectError::Runtime)?;
        let prefix = Path::parse(prefix.trim_matches('/')).map_err(|e| ObjectError::Url {
            url: url.to_string(),
            why: e.to_string(),
        })?;
        let uploads = Arc::new(tokio::sync::Semaphore::new(
            config.upload_bound().div_ceil(ROOM_UNIT) as usize,
        ));
        Ok(Backing {
            inner: Arc::new(BackingInner {
                store,
                pager,
                prefix,
                runtime: Runtime(Some(runtime)),
                counters,
                config,
                url: url.to_string(),
                uploads,
            }),
        })
    }

    /// Checks that the bucket can be reached with these credentials: one listing request.
    /// A wrong credential, a missing bucket or an unreachable endpoint is an error here, with
    /// the server's reason.
    pub fn check(&self) -> Result<(), ObjectError> {
        let inner = self.inner.clone();
        self.block_on(async move {
            let _ = inner.store.list_with_delimiter(Some(&inner.prefix)).await?;
            Ok::<_, object_store::Error>(())
        })
        .map_err(|e| ObjectError::Connect {
            url: self.inner.url.clone(),
            source: Box::new(e),
        })
    }

    /// The URL it was made from.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The underlying store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.store
    }

    /// The key of `name` (a path relative to the backing's prefix).
    pub fn key(&self, name: &str) -> Result<Path, ObjectError> {
        self.inner.key(name)
    }

    /// The backing's counters.
    pub fn stats(&self) -> crate::ObjectStats {
        self.inner.counters.snapshot()
    }

    /// Runs `fut` on the backing's runtime and waits for it, from any thread (a runtime's
    /// worker included: it does not nest runtimes).
    pub fn block_on<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.block_on(fut)
    }

    /// The runtime the backing's requests run on.
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.inner.runtime
    }

    /// The configuration.
    pub fn config(&self) -> &BackingConfig {
        &self.inner.config
    }
}

impl BackingInner {
    /// Pages of the upload budget that `bytes` of buffers take (all of it at most).
    fn room_units(&self, bytes: u64) -> u32 {
        let all = self.config.upload_bound().div_ceil(ROOM_UNIT);
        bytes.div_ceil(ROOM_UNIT).clamp(1, all) as u32
    }

    fn room(&self, permit: tokio::sync::OwnedSemaphorePermit, bytes: u64) -> UploadRoom {
        self.counters.upload_held(bytes);
        UploadRoom {
            _permit: permit,
            counters: self.counters.clone(),
            bytes,
        }
    }

    /// Waits for room for `bytes` of upload buffers.
    pub(crate) async fn upload_room(&self, bytes: u64) -> UploadRoom {
        let permit = self
            .uploads
            .clone()
            .acquire_many_owned(self.room_units(bytes))
            .await
            .expect("the upload budget is never closed");
        self.room(permit, bytes)
    }

    /// Room for `bytes` of upload buffers if there is some now.
    pub(crate) fn try_upload_room(&self, bytes: u64) -> Option<UploadRoom> {
        let permit = self
            .uploads
            .clone()
            .try_acquire_many_owned(self.room_units(bytes))
            .ok()?;
        Some(self.room(permit, bytes))
    }

    pub(crate) fn key(&self, name: &str) -> Result<Path, ObjectError> {
        let name = name.trim_matches('/');
        let bad = |why: String| ObjectError::Key {
            key: name.to_string(),
            why,
        };
        if name.is_empty() {
            return Err(bad("empty".into()));
        }
        let rel = Path::parse(name).map_err(|e| bad(e.to_string()))?;
        Ok(self.prefix.parts().chain(rel.parts()).collect())
    }

    pub(crate) fn block_on<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = self.runtime.spawn(fut);
        match futures::executor::block_on(handle) {
            Ok(v) => v,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

/// The errno an object store error stands for.
pub fn errno_of(e: &object_store::Error) -> i32 {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => libc::ENOENT,
        E::AlreadyExists { .. } => libc::EEXIST,
        // The object is not the version this reader or writer started from.
        E::Precondition { .. } | E::NotModified { .. } => libc::ESTALE,
        E::NotSupported { .. } | E::NotImplemented { .. } => libc::EOPNOTSUPP,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => libc::EACCES,
        E::InvalidPath { .. } => libc::EINVAL,
        _ => libc::EIO,
    }
}

/// `e` as a store error of `op` at `offset`.
pub(crate) fn store_error(op: Op, offset: u64, e: &object_store::Error) -> StoreError {
    let errno = errno_of(e);
    StoreError::Io {
        op,
        offset,
        kind: std::io::Error::from_raw_os_error(errno).kind(),
        errno: Some(errno),
    }
}

/// A store error with `errno`.
pub(crate) fn errno_error(op: Op, offset: u64, errno: i32) -> StoreError {
    StoreError::Io {
        op,
        offset,
        kind: std::io::Error::from_raw_os_error(errno).kind(),
        errno: Some(errno),
    }
}
