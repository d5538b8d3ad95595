//! The S3-protocol test server: `s3s-fs` behind a wrapper that fixes what
//! the stock server gets wrong for our use (see README.md).

use std::hash::{Hash, Hasher};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use base64::Engine as _;
use futures::StreamExt as _;
use hyper_util::rt::TokioIo;
use s3s::auth::SimpleAuth;
use s3s::crypto::{Checksum as _, Md5};
use s3s::dto::*;
use s3s::service::S3ServiceBuilder;
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};
use s3s_fs::FileSystem;
use tokio::net::TcpListener;
use tokio::sync::RwLock;
use tokio::task::JoinHandle;

/// Default access key accepted by the server.
pub const DEFAULT_ACCESS_KEY: &str = "quire";
/// Default secret key accepted by the server.
pub const DEFAULT_SECRET_KEY: &str = "quire-secret";

const LOCK_STRIPES: usize = 1024;

/// Options for [`start`].
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Directory served; every top-level directory is a bucket.
    pub root: PathBuf,
    /// Address to listen on (port 0 picks a free port).
    pub addr: SocketAddr,
    /// Access key id clients must sign with.
    pub access_key: String,
    /// Secret key clients must sign with.
    pub secret_key: String,
    /// Buckets to create (as directories) before serving.
    pub buckets: Vec<String>,
}

impl ServerOptions {
    /// Options serving `root` on `127.0.0.1:0` with the default credentials.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            access_key: DEFAULT_ACCESS_KEY.to_owned(),
            secret_key: DEFAULT_SECRET_KEY.to_owned(),
            buckets: Vec::new(),
        }
    }
}

/// A running server; it stops when dropped.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Server {
    /// The address the server accepts connections on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serve until the task fails (it does not, short of a panic).
    pub async fn wait(mut self) -> anyhow::Result<()> {
        (&mut self.task).await.context("server task failed")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Bind the listener and start serving in a background task. Once this
/// returns, the server accepts connections.
pub async fn start(opts: ServerOptions) -> anyhow::Result<Server> {
    std::fs::create_dir_all(&opts.root)
        .with_context(|| format!("cannot create root directory {}", opts.root.display()))?;
    for bucket in &opts.buckets {
        if !s3s::path::check_bucket_name(bucket) {
            anyhow::bail!("invalid bucket name {bucket:?}");
        }
        let dir = opts.root.join(bucket);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create bucket directory {}", dir.display()))?;
    }
    let fs = QuireFs::new(&opts.root)?;
    let mut builder = S3ServiceBuilder::new(fs);
    builder.set_auth(SimpleAuth::from_single(
        opts.access_key.clone(),
        opts.secret_key.clone(),
    ));
    let service = builder.build();

    let listener = TcpListener::bind(opts.addr)
        .await
        .with_context(|| format!("cannot listen on {}", opts.addr))?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let (socket, _) = match listener.accept().await {
                Ok(conn) => conn,
                Err(err) => {
                    tracing::warn!("accept failed: {err}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            // Fix 1: without this a small response waits for the peer's
            // delayed ACK (Nagle), i.e. tens of milliseconds per request.
            if let Err(err) = socket.set_nodelay(true) {
                tracing::warn!("set_nodelay failed: {err}");
            }
            let service = service.clone();
            tokio::spawn(async move {
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), service);
                if let Err(err) = conn.await {
                    tracing::debug!("connection error: {err}");
                }
            });
        }
    });
    Ok(Server { addr, task })
}

/// `s3s_fs::FileSystem` with the fixes described in README.md:
/// directories are never objects (404, not 500), conditional writes are
/// checked and committed under a per-key lock, GET/HEAD honour
/// `If-Match`/`If-None-Match`/`If-(Un)Modified-Since`, deletes clean up.
struct QuireFs {
    inner: FileSystem,
    root: PathBuf,
    locks: Arc<Vec<RwLock<()>>>,
}

/// What is on disk at an object's path.
enum Entry {
    Missing,
    File,
    Dir,
}

fn stat(path: &Path) -> S3Result<Entry> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(Entry::Dir),
        Ok(_) => Ok(Entry::File),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Entry::Missing),
        // A path component is a file ("a" exists, asked for "a/b").
        Err(e) if e.raw_os_error() == Some(20 /* ENOTDIR */) => Ok(Entry::Missing),
        Err(e) => Err(s3_error!(e, InternalError)),
    }
}

/// Whether `key` maps to a unique file path (no empty, `.` or `..`
/// segments, no leading or trailing `/`).
fn key_is_representable(key: &str) -> bool {
    !key.is_empty()
        && !key.contains('\0')
        && key
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

fn etag_matches(cond: &ETagCondition, current: &ETag) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == current.value(),
    }
}

fn unix_secs(ts: &Timestamp) -> i64 {
    time::OffsetDateTime::from(ts.clone()).unix_timestamp()
}

/// RFC 9110 §13.2.2 evaluation for GET/HEAD against the version that is
/// about to be returned.
fn check_read_conditions(
    etag: Option<&ETag>,
    last_modified: Option<&Timestamp>,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<()> {
    if let Some(cond) = if_match {
        if !etag.is_some_and(|e| etag_matches(cond, e)) {
            return Err(s3_error!(
                PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold"
            ));
        }
    } else if let (Some(since), Some(lm)) = (if_unmodified_since, last_modified) {
        if unix_secs(lm) > unix_secs(since) {
            return Err(s3_error!(
                PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold"
            ));
        }
    }
    if let Some(cond) = if_none_match {
        if etag.is_some_and(|e| etag_matches(cond, e)) {
            return Err(s3_error!(NotModified));
        }
    } else if let (Some(since), Some(lm)) = (if_modified_since, last_modified) {
        if unix_secs(lm) <= unix_secs(since) {
            return Err(s3_error!(NotModified));
        }
    }
    Ok(())
}

fn precondition_failed() -> s3s::S3Error {
    s3_error!(
        PreconditionFailed,
        "At least one of the pre-conditions you specified did not hold"
    )
}

fn fs_conflict(key: &str) -> s3s::S3Error {
    s3_error!(
        InvalidArgument,
        "key {key:?} conflicts with an existing key: this file-system backed test server \
         cannot store both \"a/b\" and \"a/b/...\""
    )
}

impl QuireFs {
    fn new(root: &Path) -> anyhow::Result<Self> {
        let inner = FileSystem::new(root)
            .map_err(|e| anyhow::anyhow!("cannot serve {}: {e:?}", root.display()))?;
        let root = root
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", root.display()))?;
        let locks = (0..LOCK_STRIPES).map(|_| RwLock::new(())).collect();
        Ok(Self {
            inner,
            root,
            locks: Arc::new(locks),
        })
    }

    fn lock(&self, bucket: &str, key: &str) -> &RwLock<()> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (bucket, key).hash(&mut h);
        &self.locks[(h.finish() as usize) % LOCK_STRIPES]
    }

    fn bucket_path(&self, bucket: &str) -> PathBuf {
        self.root.join(bucket)
    }

    fn object_path(&self, bucket: &str, key: &str) -> PathBuf {
        self.root.join(bucket).join(key)
    }

    fn sidecar_path(&self, bucket: &str, key: &str, suffix: &str) -> PathBuf {
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        self.root.join(format!(
            ".bucket-{}.object-{}.{suffix}",
            enc(bucket),
            enc(key)
        ))
    }

    fn check_bucket(&self, bucket: &str) -> S3Result<()> {
        match stat(&self.bucket_path(bucket))? {
            Entry::Dir => Ok(()),
            _ => Err(s3_error!(NoSuchBucket)),
        }
    }

    /// NoSuchKey (or NoSuchBucket) unless `key` is a regular file.
    fn check_object_file(&self, bucket: &str, key: &str) -> S3Result<()> {
        if !key_is_representable(key) {
            self.check_bucket(bucket)?;
            return Err(s3_error!(NoSuchKey));
        }
        match stat(&self.object_path(bucket, key))? {
            Entry::File => Ok(()),
            Entry::Missing | Entry::Dir => {
                self.check_bucket(bucket)?;
                Err(s3_error!(NoSuchKey))
            }
        }
    }

    /// Checks that `key` can be written as a file. An empty directory left
    /// at the key's path is removed. Returns whether the object exists.
    async fn prepare_write(&self, bucket: &str, key: &str) -> S3Result<bool> {
        self.check_bucket(bucket)?;
        if !key_is_representable(key) {
            return Err(s3_error!(
                InvalidArgument,
                "key {key:?} cannot be stored by this file-system backed test server \
                 (empty, '.' or '..' path segments, or a leading/trailing '/')"
            ));
        }
        let sidecar = self.sidecar_path(bucket, key, "metadata.json");
        if sidecar.file_name().map_or(0, |n| n.len()) > 255 || key.split('/').any(|s| s.len() > 255)
        {
            return Err(s3_error!(
                KeyTooLongError,
                "key {key:?} is too long for this file-system backed test server \
                 (bucket + key up to about 160 bytes)"
            ));
        }
        let bucket_dir = self.bucket_path(bucket);
        let path = self.object_path(bucket, key);
        // Every ancestor inside the bucket must be a directory (or missing).
        let mut anc = path.parent();
        while let Some(dir) = anc {
            if dir == bucket_dir {
                break;
            }
            if let Entry::File = stat(dir)? {
                return Err(fs_conflict(key));
            }
            anc = dir.parent();
        }
        match stat(&path)? {
            Entry::File => Ok(true),
            Entry::Missing => Ok(false),
            Entry::Dir => {
                // Leftover empty directories from deleted children are removed.
                match tokio::fs::remove_dir(&path).await {
                    Ok(()) => Ok(false),
                    Err(_) => Err(fs_conflict(key)),
                }
            }
        }
    }

    /// ETag of the stored object (the one s3s-fs reports), caller holds the lock.
    async fn current_etag(&self, bucket: &str, key: &str) -> S3Result<ETag> {
        let info_path = self.sidecar_path(bucket, key, "internal.json");
        if let Ok(bytes) = tokio::fs::read(&info_path).await {
            if let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(&bytes) {
                if let Some(serde_json::Value::String(e)) = map.get("e_tag") {
                    return Ok(ETag::Strong(e.clone()));
                }
            }
        }
        let path = self.object_path(bucket, key);
        let data = tokio::fs::read(&path)
            .await
            .map_err(|e| s3_error!(e, InternalError))?;
        let mut md5 = Md5::new();
        md5.update(&data);
        let digest = md5.finalize();
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        Ok(ETag::Strong(hex))
    }

    /// Evaluate `If-None-Match`/`If-Match` of a write, caller holds the
    /// key's write lock so check and commit are atomic.
    async fn check_write_conditions(
        &self,
        bucket: &str,
        key: &str,
        exists: bool,
        if_match: Option<&ETagCondition>,
        if_none_match: Option<&ETagCondition>,
    ) -> S3Result<()> {
        if let Some(cond) = if_none_match {
            if exists {
                match cond {
                    ETagCondition::Any => return Err(precondition_failed()),
                    ETagCondition::ETag(_) => {
                        let cur = self.current_etag(bucket, key).await?;
                        if etag_matches(cond, &cur) {
                            return Err(precondition_failed());
                        }
                    }
                }
            }
        }
        if let Some(cond) = if_match {
            if !exists {
                // What AWS S3 answers; object_store maps it to Precondition.
                return Err(s3_error!(NoSuchKey));
            }
            if let ETagCondition::ETag(_) = cond {
                let cur = self.current_etag(bucket, key).await?;
                if !etag_matches(cond, &cur) {
                    return Err(precondition_failed());
                }
            }
        }
        Ok(())
    }

    /// Remove the object file, its side-car files and the directories that
    /// become empty. Missing objects are fine (S3 deletes are idempotent).
    async fn remove_object(&self, bucket: &str, key: &str) -> S3Result<()> {
        if !key_is_representable(key) {
            return Ok(());
        }
        let path = self.object_path(bucket, key);
        match stat(&path)? {
            Entry::File => {}
            Entry::Missing | Entry::Dir => return Ok(()),
        }
        match tokio::fs::remove_file(&path).await {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(s3_error!(e, InternalError)),
        }
        for suffix in ["internal.json", "metadata.json"] {
            let _ = tokio::fs::remove_file(self.sidecar_path(bucket, key, suffix)).await;
        }
        let bucket_dir = self.bucket_path(bucket);
        let mut anc = path.parent();
        while let Some(dir) = anc {
            if dir == bucket_dir || tokio::fs::remove_dir(dir).await.is_err() {
                break;
            }
            anc = dir.parent();
        }
        Ok(())
    }

    /// s3s-fs lists objects without ETags; S3 lists them.
    async fn fill_etags(&self, bucket: &str, objects: &mut [Object]) {
        for obj in objects {
            if obj.e_tag.is_none() {
                if let Some(key) = obj.key.as_deref() {
                    obj.e_tag = self.current_etag(bucket, key).await.ok();
                }
            }
        }
    }

    /// Keep only the ETag in the internal-info side-car (s3s-fs keeps stale
    /// checksums of a previous version after a multipart completion).
    async fn reset_internal_info(&self, bucket: &str, key: &str, etag: &str) -> S3Result<()> {
        let path = self.sidecar_path(bucket, key, "internal.json");
        let body = serde_json::json!({ "e_tag": etag }).to_string();
        let tmp = path.with_extension("json.quire-tmp");
        tokio::fs::write(&tmp, body)
            .await
            .map_err(|e| s3_error!(e, InternalError))?;
        tokio::fs::rename(&tmp, &path)
            .await
            .map_err(|e| s3_error!(e, InternalError))?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl S3 for QuireFs {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        self.inner.create_bucket(req).await
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        self.inner.delete_bucket(req).await
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.inner.head_bucket(req).await
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.inner.get_bucket_location(req).await
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        self.inner.list_buckets(req).await
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let bucket = req.input.bucket.clone();
        let mut resp = self.inner.list_objects(req).await?;
        if let Some(objects) = resp.output.contents.as_mut() {
            self.fill_etags(&bucket, objects).await;
        }
        Ok(resp)
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let bucket = req.input.bucket.clone();
        let mut resp = self.inner.list_objects_v2(req).await?;
        if let Some(objects) = resp.output.contents.as_mut() {
            self.fill_etags(&bucket, objects).await;
        }
        Ok(resp)
    }

    async fn get_object(
        &self,
        mut req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let if_match = req.input.if_match.take();
        let if_none_match = req.input.if_none_match.take();
        let if_modified_since = req.input.if_modified_since.take();
        let if_unmodified_since = req.input.if_unmodified_since.take();
        // The read lock makes (content, ETag) consistent: s3s-fs opens the
        // file and reads the ETag side-car while no writer can commit. The
        // body is streamed from the opened file after the lock is released.
        let _guard = self.lock(&bucket, &key).read().await;
        self.check_object_file(&bucket, &key)?;
        let resp = self.inner.get_object(req).await?;
        check_read_conditions(
            resp.output.e_tag.as_ref(),
            resp.output.last_modified.as_ref(),
            if_match.as_ref(),
            if_none_match.as_ref(),
            if_modified_since.as_ref(),
            if_unmodified_since.as_ref(),
        )?;
        Ok(resp)
    }

    async fn head_object(
        &self,
        mut req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let if_match = req.input.if_match.take();
        let if_none_match = req.input.if_none_match.take();
        let if_modified_since = req.input.if_modified_since.take();
        let if_unmodified_since = req.input.if_unmodified_since.take();
        let _guard = self.lock(&bucket, &key).read().await;
        // Fix 2: a key that is a directory on disk ("a/b" while "a/b/c"
        // exists) is 404 NoSuchKey, not a 500 from reading a directory.
        self.check_object_file(&bucket, &key)?;
        let resp = self.inner.head_object(req).await?;
        check_read_conditions(
            resp.output.e_tag.as_ref(),
            resp.output.last_modified.as_ref(),
            if_match.as_ref(),
            if_none_match.as_ref(),
            if_modified_since.as_ref(),
            if_unmodified_since.as_ref(),
        )?;
        Ok(resp)
    }

    async fn put_object(
        &self,
        mut req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let if_match = req.input.if_match.take();
        let if_none_match = req.input.if_none_match.take();
        // Fix 3: check and write under the key's write lock, so of two racing
        // create-only puts exactly one succeeds.
        let _guard = self.lock(&bucket, &key).write().await;
        let checked = match self.prepare_write(&bucket, &key).await {
            Ok(exists) => {
                self.check_write_conditions(
                    &bucket,
                    &key,
                    exists,
                    if_match.as_ref(),
                    if_none_match.as_ref(),
                )
                .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            // Read the body the client is still sending before answering: an HTTP/1.1 answer
            // sent mid-body, and the connection closed behind it, reaches the client as a
            // broken pipe on its write rather than as the error (412 for a create-only put
            // that lost its race).
            if let Some(mut body) = req.input.body.take() {
                while let Some(Ok(_)) = body.next().await {}
            }
            return Err(e);
        }
        self.inner.put_object(req).await
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        if let CopySource::Bucket {
            bucket: src_bucket,
            key: src_key,
            ..
        } = &req.input.copy_source
        {
            self.check_object_file(src_bucket, src_key)?;
        }
        let _guard = self.lock(&bucket, &key).write().await;
        self.prepare_write(&bucket, &key).await?;
        self.inner.copy_object(req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let (bucket, key) = (&req.input.bucket, &req.input.key);
        self.check_bucket(bucket)?;
        let _guard = self.lock(bucket, key).write().await;
        self.remove_object(bucket, key).await?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let input = req.input;
        self.check_bucket(&input.bucket)?;
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for object in input.delete.objects {
            let _guard = self.lock(&input.bucket, &object.key).write().await;
            match self.remove_object(&input.bucket, &object.key).await {
                Ok(()) => deleted.push(DeletedObject {
                    key: Some(object.key),
                    version_id: object.version_id,
                    ..Default::default()
                }),
                Err(err) => errors.push(Error {
                    code: Some(err.code().as_str().to_owned()),
                    key: Some(object.key),
                    message: err.message().map(str::to_owned),
                    version_id: object.version_id,
                }),
            }
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: (!quiet).then_some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.check_bucket(&req.input.bucket)?;
        if !key_is_representable(&req.input.key) {
            return Err(s3_error!(
                InvalidArgument,
                "key {:?} cannot be stored by this file-system backed test server",
                req.input.key
            ));
        }
        self.inner.create_multipart_upload(req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        self.inner.upload_part(req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        if let CopySource::Bucket { bucket, key, .. } = &req.input.copy_source {
            self.check_object_file(bucket, key)?;
        }
        self.inner.upload_part_copy(req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        self.inner.list_parts(req).await
    }

    async fn complete_multipart_upload(
        &self,
        mut req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let if_match = req.input.if_match.take();
        let if_none_match = req.input.if_none_match.take();
        let _guard = self.lock(&bucket, &key).write().await;
        let exists = self.prepare_write(&bucket, &key).await?;
        self.check_write_conditions(
            &bucket,
            &key,
            exists,
            if_match.as_ref(),
            if_none_match.as_ref(),
        )
        .await?;
        let mut resp = self.inner.complete_multipart_upload(req).await?;
        // s3s-fs returns the result as a deferred future; resolve it here so
        // the side-car is rewritten while the lock is still held.
        if let Some(fut) = resp.output.future.take() {
            resp.output = fut.await?;
        }
        if let Some(etag) = &resp.output.e_tag {
            self.reset_internal_info(&bucket, &key, etag.value())
                .await?;
        }
        Ok(resp)
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.inner.abort_multipart_upload(req).await
    }
}
