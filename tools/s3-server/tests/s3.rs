//! The server and proxy, driven by the `object_store` S3 client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path;
use object_store::{
    BackoffConfig, Error, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, RetryConfig, UpdateVersion,
};
use quire_s3_tools::proxy::{self, Proxy, ProxyOptions};
use quire_s3_tools::server::{self, Server, ServerOptions};
use s3s::crypto::{Checksum as _, Md5};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const BUCKET: &str = "test";

async fn start_server() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = ServerOptions::new(dir.path());
    opts.buckets.push(BUCKET.to_owned());
    let server = server::start(opts).await.expect("start server");
    (dir, server)
}

fn retry(max_retries: usize) -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(50),
            base: 2.0,
        },
        max_retries,
        retry_timeout: Duration::from_secs(10),
    }
}

fn client_with(endpoint: &str, secret: &str, max_retries: usize) -> AmazonS3 {
    AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .with_region("us-east-1")
        .with_bucket_name(BUCKET)
        .with_access_key_id(server::DEFAULT_ACCESS_KEY)
        .with_secret_access_key(secret)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .with_retry(retry(max_retries))
        .build()
        .expect("build S3 client")
}

fn client(endpoint: &str) -> AmazonS3 {
    client_with(endpoint, server::DEFAULT_SECRET_KEY, 3)
}

fn md5_hex(data: &[u8]) -> String {
    let mut h = Md5::new();
    h.update(data);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_range_etag_and_read_conditions() {
    let (_dir, server) = start_server().await;
    let s3 = client(&server.endpoint());
    let path = Path::from("data/obj.bin");
    let data = pattern(100_000, 1);

    let put = s3.put(&path, data.clone().into()).await.unwrap();
    let etag = put.e_tag.clone().unwrap();
    assert_eq!(etag.trim_matches('"'), md5_hex(&data), "ETag is the MD5");

    let got = s3.get(&path).await.unwrap();
    assert_eq!(got.meta.e_tag.as_deref(), Some(etag.as_str()));
    assert_eq!(got.bytes().await.unwrap().as_ref(), &data[..]);

    let range = s3.get_range(&path, 4096..8192).await.unwrap();
    assert_eq!(range.as_ref(), &data[4096..8192]);
    let opts = GetOptions {
        range: Some(GetRange::Suffix(10)),
        ..Default::default()
    };
    let tail = s3
        .get_opts(&path, opts)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(tail.as_ref(), &data[data.len() - 10..]);

    let head = s3.head(&path).await.unwrap();
    assert_eq!(head.size, data.len() as u64);
    assert_eq!(head.e_tag.as_deref(), Some(etag.as_str()));

    // If-Match
    let opts = GetOptions {
        if_match: Some("\"0123456789abcdef0123456789abcdef\"".into()),
        range: Some(GetRange::Bounded(0..4096)),
        ..Default::default()
    };
    let err = s3.get_opts(&path, opts).await.unwrap_err();
    assert!(matches!(err, Error::Precondition { .. }), "{err:?}");
    let opts = GetOptions {
        if_match: Some(etag.clone()),
        range: Some(GetRange::Bounded(0..4096)),
        ..Default::default()
    };
    let ok = s3
        .get_opts(&path, opts)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(ok.as_ref(), &data[..4096]);
    let opts = GetOptions {
        if_match: Some("\"0123456789abcdef0123456789abcdef\"".into()),
        head: true,
        ..Default::default()
    };
    let err = s3.get_opts(&path, opts).await.unwrap_err();
    assert!(matches!(err, Error::Precondition { .. }), "{err:?}");
    // If-None-Match
    let opts = GetOptions {
        if_none_match: Some(etag.clone()),
        ..Default::default()
    };
    let err = s3.get_opts(&path, opts).await.unwrap_err();
    assert!(matches!(err, Error::NotModified { .. }), "{err:?}");

    // New content, new ETag.
    let data2 = pattern(100_000, 2);
    let put2 = s3.put(&path, data2.clone().into()).await.unwrap();
    assert_ne!(put2.e_tag, put.e_tag);
    assert_eq!(put2.e_tag.unwrap().trim_matches('"'), md5_hex(&data2));
    let opts = GetOptions {
        if_match: Some(etag),
        ..Default::default()
    };
    let err = s3.get_opts(&path, opts).await.unwrap_err();
    assert!(matches!(err, Error::Precondition { .. }), "{err:?}");

    let err = s3.get(&Path::from("data/missing")).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_key_is_not_found_fast() {
    let (_dir, server) = start_server().await;
    let s3 = client_with(&server.endpoint(), server::DEFAULT_SECRET_KEY, 10);
    s3.put(&Path::from("a/b/c"), PutPayload::from_static(b"x"))
        .await
        .unwrap();
    let start = Instant::now();
    for key in ["a/b", "a"] {
        let err = s3.head(&Path::from(key)).await.unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{key}: {err:?}");
        let err = s3.get(&Path::from(key)).await.unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{key}: {err:?}");
    }
    // A 500 would have been retried 10 times with backoff.
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    // Deleting a "directory" key is a no-op, like deleting a missing key.
    s3.delete(&Path::from("a/b")).await.unwrap();
    assert_eq!(
        s3.get(&Path::from("a/b/c"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .as_ref(),
        b"x"
    );
    // The file system cannot hold "a/b" as a file and a directory: a clear,
    // non-retried 4xx error.
    let start = Instant::now();
    let err = s3
        .put(&Path::from("a/b"), PutPayload::from_static(b"y"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("conflicts"), "{err}");
    assert!(start.elapsed() < Duration::from_millis(500));
    // Once the child is gone, its empty directories are gone too.
    s3.delete(&Path::from("a/b/c")).await.unwrap();
    s3.put(&Path::from("a/b"), PutPayload::from_static(b"y"))
        .await
        .unwrap();
    assert_eq!(
        s3.get(&Path::from("a/b"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .as_ref(),
        b"y"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrepresentable_keys_are_clear_errors() {
    let (_dir, server) = start_server().await;
    let s3 = client_with(&server.endpoint(), server::DEFAULT_SECRET_KEY, 10);
    let start = Instant::now();
    let long = Path::from("k".repeat(200));
    let err = s3
        .put(&long, PutPayload::from_static(b"x"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("KeyTooLong"), "{err}");
    let err = s3.head(&long).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert!(start.elapsed() < Duration::from_millis(500));
    let ok = Path::from("k".repeat(150));
    s3.put(&ok, PutPayload::from_static(b"x")).await.unwrap();
    assert_eq!(s3.head(&ok).await.unwrap().size, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_create_only_puts_one_wins() {
    let (_dir, server) = start_server().await;
    let s3 = Arc::new(client(&server.endpoint()));
    for round in 0..5 {
        let path = Path::from(format!("race/{round}"));
        let tasks: Vec<_> = (0..8u8)
            .map(|i| {
                let s3 = s3.clone();
                let path = path.clone();
                tokio::spawn(async move {
                    let opts = PutOptions {
                        mode: PutMode::Create,
                        ..Default::default()
                    };
                    let res = s3.put_opts(&path, pattern(64 * 1024, i).into(), opts).await;
                    (i, res)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for t in tasks {
            let (i, res) = t.await.unwrap();
            match res {
                Ok(_) => winners.push(i),
                Err(Error::AlreadyExists { .. }) => {}
                Err(e) => panic!("unexpected error: {e:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let got = s3.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(got.as_ref(), &pattern(64 * 1024, winners[0])[..]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_update() {
    let (_dir, server) = start_server().await;
    let s3 = client(&server.endpoint());
    let path = Path::from("cas");
    let e1 = s3
        .put(&path, PutPayload::from_static(b"one"))
        .await
        .unwrap()
        .e_tag;
    let update = |e_tag: Option<String>| PutOptions {
        mode: PutMode::Update(UpdateVersion {
            e_tag,
            version: None,
        }),
        ..Default::default()
    };
    let e2 = s3
        .put_opts(&path, PutPayload::from_static(b"two"), update(e1.clone()))
        .await
        .unwrap()
        .e_tag;
    assert_ne!(e1, e2);
    let err = s3
        .put_opts(&path, PutPayload::from_static(b"three"), update(e1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Precondition { .. }), "{err:?}");
    let got = s3.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(got.as_ref(), b"two");
    let err = s3
        .put_opts(
            &Path::from("absent"),
            PutPayload::from_static(b"x"),
            update(e2),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Precondition { .. }), "{err:?}");

    // Concurrent compare-and-swap from the same version: one wins.
    let s3 = Arc::new(s3);
    let base = s3.head(&path).await.unwrap().e_tag;
    let tasks: Vec<_> = (0..8u8)
        .map(|i| {
            let (s3, path, base) = (s3.clone(), path.clone(), base.clone());
            tokio::spawn(async move { s3.put_opts(&path, vec![i; 100].into(), update(base)).await })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(Error::Precondition { .. }) => {}
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!(ok, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_upload_copy_list_delete() {
    let (_dir, server) = start_server().await;
    let s3 = client(&server.endpoint());
    let path = Path::from("big/object");
    let part = 5 * 1024 * 1024;
    let data = pattern(4 * part, 7);
    let mut upload = s3.put_multipart(&path).await.unwrap();
    for chunk in data.chunks(part) {
        upload.put_part(chunk.to_vec().into()).await.unwrap();
    }
    let res = upload.complete().await.unwrap();
    let etag = res.e_tag.unwrap();
    assert!(etag.trim_matches('"').ends_with("-4"), "{etag}");
    let got = s3.get(&path).await.unwrap();
    assert_eq!(got.meta.e_tag.as_deref(), Some(etag.as_str()));
    assert_eq!(got.bytes().await.unwrap().as_ref(), &data[..]);
    let r = s3
        .get_range(&path, part as u64 - 10..part as u64 + 10)
        .await
        .unwrap();
    assert_eq!(r.as_ref(), &data[part - 10..part + 10]);

    // Aborted uploads leave nothing behind.
    let mut upload = s3.put_multipart(&Path::from("big/aborted")).await.unwrap();
    upload.put_part(vec![1u8; 1000].into()).await.unwrap();
    upload.abort().await.unwrap();
    let err = s3.head(&Path::from("big/aborted")).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");

    // copy
    s3.copy(&path, &Path::from("big/copy")).await.unwrap();
    let got = s3.get(&Path::from("big/copy")).await.unwrap();
    assert_eq!(got.bytes().await.unwrap().len(), data.len());

    // list
    for key in [
        "dir/a",
        "dir/b",
        "dir/sub/c",
        "dir/sub/d/e",
        "dirx",
        "other",
    ] {
        s3.put(&Path::from(key), PutPayload::from_static(b"z"))
            .await
            .unwrap();
    }
    let res = s3
        .list_with_delimiter(Some(&Path::from("dir")))
        .await
        .unwrap();
    let objects: Vec<_> = res.objects.iter().map(|o| o.location.to_string()).collect();
    let prefixes: Vec<_> = res.common_prefixes.iter().map(|p| p.to_string()).collect();
    assert_eq!(objects, ["dir/a", "dir/b"]);
    assert_eq!(prefixes, ["dir/sub"]);
    let res = s3.list_with_delimiter(None).await.unwrap();
    let objects: Vec<_> = res.objects.iter().map(|o| o.location.to_string()).collect();
    let prefixes: Vec<_> = res.common_prefixes.iter().map(|p| p.to_string()).collect();
    assert_eq!(objects, ["dirx", "other"]);
    let z_etag = format!("\"{}\"", md5_hex(b"z"));
    assert!(res
        .objects
        .iter()
        .all(|o| o.e_tag.as_deref() == Some(z_etag.as_str())));
    assert_eq!(prefixes, ["big", "dir"]);
    use futures::TryStreamExt as _;
    let mut all: Vec<_> = s3
        .list(Some(&Path::from("dir")))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    all.sort();
    assert_eq!(all, ["dir/a", "dir/b", "dir/sub/c", "dir/sub/d/e"]);

    // delete
    s3.delete(&Path::from("dir/sub/d/e")).await.unwrap();
    s3.delete(&Path::from("dir/sub/d/e")).await.unwrap();
    let err = s3.head(&Path::from("dir/sub/d/e")).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    let res = s3
        .list_with_delimiter(Some(&Path::from("dir/sub")))
        .await
        .unwrap();
    assert_eq!(res.objects.len(), 1);
    assert!(res.common_prefixes.is_empty(), "{:?}", res.common_prefixes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_rejected() {
    let (_dir, server) = start_server().await;
    let bad = client_with(&server.endpoint(), "not-the-secret", 5);
    let start = Instant::now();
    let err = bad
        .put(&Path::from("x"), PutPayload::from_static(b"x"))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("403") || msg.contains("SignatureDoesNotMatch"),
        "{msg}"
    );
    let err = bad.get(&Path::from("x")).await.unwrap_err();
    assert!(err.to_string().contains("SignatureDoesNotMatch"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(1));
}

// ---------- proxy ----------

async fn start_proxy(upstream: SocketAddr) -> Proxy {
    proxy::start(ProxyOptions::new(upstream))
        .await
        .expect("start proxy")
}

/// One request to the proxy's control endpoint; returns (status, body).
async fn control(addr: SocketAddr, method: &str, target: &str) -> (u16, serde_json::Value) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut buf = String::new();
    stream.read_to_string(&mut buf).await.unwrap();
    let status = buf[9..12].parse().unwrap();
    let body = buf.split_once("\r\n\r\n").unwrap().1;
    (status, serde_json::from_str(body).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_faults() {
    let (_dir, server) = start_server().await;
    let proxy = start_proxy(server.addr()).await;
    let ctl = proxy.control_addr();
    let s3 = client_with(&proxy.endpoint(), server::DEFAULT_SECRET_KEY, 5);
    let path = Path::from("f/obj");
    let data = pattern(256 * 1024, 3);
    s3.put(&path, data.clone().into()).await.unwrap();

    // 503 SlowDown three times: the client's retries get through.
    let (status, _) = control(ctl, "POST", "/fault?mode=503&count=3").await;
    assert_eq!(status, 200);
    let got = s3.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(got.as_ref(), &data[..]);
    let (_, stats) = control(ctl, "GET", "/stats").await;
    assert_eq!(stats["faults_injected"]["503"], 3, "{stats}");
    assert_eq!(stats["fault"]["mode"], "none", "{stats}");

    // Without retries, the 503 is an error.
    let no_retry = client_with(&proxy.endpoint(), server::DEFAULT_SECRET_KEY, 0);
    control(ctl, "POST", "/fault?mode=503&count=1").await;
    let err = no_retry.head(&path).await.unwrap_err();
    assert!(err.to_string().contains("503"), "{err}");

    // Truncated body: an error, never silently short data.
    control(ctl, "POST", "/fault?mode=truncate&count=1&method=GET").await;
    match no_retry.get(&path).await {
        Err(_) => {}
        Ok(r) => {
            let res = r.bytes().await;
            assert!(
                res.is_err(),
                "truncated body read as {} bytes",
                res.unwrap().len()
            );
        }
    }
    // With retries the client recovers the full, correct data.
    control(ctl, "POST", "/fault?mode=truncate&count=1&method=GET").await;
    if let Ok(r) = s3.get(&path).await {
        if let Ok(b) = r.bytes().await {
            assert_eq!(b.as_ref(), &data[..]);
        }
    }
    let (_, stats) = control(ctl, "GET", "/stats").await;
    assert_eq!(stats["faults_injected"]["truncate"], 2, "{stats}");

    // Connection reset without an answer.
    control(ctl, "POST", "/fault?mode=reset&count=1").await;
    assert!(no_retry.head(&path).await.is_err());
    control(ctl, "POST", "/fault?mode=reset&count=1").await;
    assert_eq!(s3.head(&path).await.unwrap().size, data.len() as u64);
    let (_, stats) = control(ctl, "GET", "/stats").await;
    assert_eq!(stats["faults_injected"]["reset"], 2, "{stats}");
    assert!(stats["by_method"]["GET"].as_u64().unwrap() >= 5, "{stats}");

    // A lost answer: the server acts, the client hears nothing.
    let lost = Path::from("f/lost");
    control(ctl, "POST", "/fault?mode=lost&count=1&method=PUT").await;
    assert!(no_retry.put(&lost, data.clone().into()).await.is_err());
    let got = s3.get(&lost).await.unwrap().bytes().await.unwrap();
    assert_eq!(got.as_ref(), &data[..]);
    // A fault for requests whose query names `uploadId` spares the others.
    control(ctl, "POST", "/fault?mode=reset&count=1&query=uploadId").await;
    no_retry.head(&path).await.unwrap();
    let (_, stats) = control(ctl, "GET", "/stats").await;
    assert_eq!(stats["faults_injected"]["lost"], 1, "{stats}");
    assert_eq!(stats["fault"]["remaining"], 1, "{stats}");
    assert_eq!(stats["fault"]["query"], "uploadId", "{stats}");

    // Clearing, bad input.
    control(ctl, "POST", "/fault?mode=503&count=100").await;
    let (_, stats) = control(ctl, "POST", "/fault?mode=none").await;
    assert_eq!(stats["fault"]["mode"], "none");
    s3.head(&path).await.unwrap();
    let (status, _) = control(ctl, "POST", "/fault?mode=bogus").await;
    assert_eq!(status, 400);
    let (status, _) = control(ctl, "GET", "/nope").await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_delay_and_bandwidth() {
    let (_dir, server) = start_server().await;
    let mut opts = ProxyOptions::new(server.addr());
    opts.delay = Duration::from_millis(30);
    let proxy = proxy::start(opts).await.unwrap();
    let ctl = proxy.control_addr();
    let s3 = client(&proxy.endpoint());
    let path = Path::from("slow");
    let data = pattern(2 * 1024 * 1024, 9);
    s3.put(&path, data.clone().into()).await.unwrap();

    for _ in 0..3 {
        let start = Instant::now();
        s3.head(&path).await.unwrap();
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(30), "{took:?}");
        assert!(took < Duration::from_millis(500), "{took:?}");
    }

    // 80 Mbit/s = 10 MB/s: 2 MiB take about 0.2 s.
    let (status, _) = control(ctl, "POST", "/config?delay_ms=0&bandwidth_mbps=80").await;
    assert_eq!(status, 200);
    let start = Instant::now();
    let got = s3.get(&path).await.unwrap().bytes().await.unwrap();
    let took = start.elapsed();
    assert_eq!(got.as_ref(), &data[..]);
    assert!(took >= Duration::from_millis(150), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");

    // The cap is shared: two concurrent 1 MiB ranges also take about 0.2 s.
    let start = Instant::now();
    let (a, b) = tokio::join!(
        s3.get_range(&path, 0..1024 * 1024),
        s3.get_range(&path, 1024 * 1024..2 * 1024 * 1024)
    );
    let took = start.elapsed();
    assert_eq!(a.unwrap().len() + b.unwrap().len(), data.len());
    assert!(took >= Duration::from_millis(150), "{took:?}");
}

async fn median_ranged_get(s3: &AmazonS3, path: &Path, size: u64, n: usize) -> Duration {
    let total = s3.head(path).await.unwrap().size;
    let mut times = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let off = (i * 4096 * 7) % (total - size);
        let start = Instant::now();
        let b = s3.get_range(path, off..off + size).await.unwrap();
        times.push(start.elapsed());
        assert_eq!(b.len() as u64, size);
    }
    times.sort();
    times[n / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranged_get_latency_direct() {
    // With Nagle's algorithm on, a response written in more than one piece
    // waits for the client's delayed ACK: tens of ms per request.
    let (_dir, server) = start_server().await;
    let s3 = client(&server.endpoint());
    let path = Path::from("lat");
    s3.put(&path, pattern(1 << 20, 5).into()).await.unwrap();
    let n: usize = std::env::var("QUIRE_S3_LATENCY_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    for size in [4096u64, 64 * 1024] {
        let median = median_ranged_get(&s3, &path, size, n).await;
        println!("{size}-byte ranged GET, median over {n}: {median:?}");
        assert!(
            median < Duration::from_millis(8),
            "{size}: median {median:?}"
        );
    }
}

// ---------- the binaries ----------

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_port(file: &std::path::Path) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = std::fs::read_to_string(file) {
            if let Ok(p) = s.trim().parse() {
                return p;
            }
        }
        assert!(Instant::now() < deadline, "no port file {}", file.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binaries_end_to_end() {
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let port_file = dir.path().join("server.port");
    let mut server = Child(
        Command::new(env!("CARGO_BIN_EXE_quire-s3-server"))
            .arg("--root")
            .arg(&root)
            .args(["--bucket", BUCKET, "--port-file"])
            .arg(&port_file)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let port = wait_for_port(&port_file);
    let mut line = String::new();
    std::io::BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), format!("listening on 127.0.0.1:{port}"));

    let proxy_port_file = dir.path().join("proxy.port");
    let control_port_file = dir.path().join("control.port");
    let _proxy = Child(
        Command::new(env!("CARGO_BIN_EXE_quire-s3-proxy"))
            .args([
                "--upstream",
                &format!("127.0.0.1:{port}"),
                "--delay-ms",
                "1",
            ])
            .args(["--bandwidth-mbps", "800", "--port-file"])
            .arg(&proxy_port_file)
            .arg("--control-port-file")
            .arg(&control_port_file)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let proxy_port = wait_for_port(&proxy_port_file);
    let control_port = wait_for_port(&control_port_file);

    let direct = client(&format!("http://127.0.0.1:{port}"));
    direct
        .put(&Path::from("k"), PutPayload::from_static(b"hello"))
        .await
        .unwrap();
    assert!(root.join(BUCKET).join("k").is_file());
    let via = client(&format!("http://127.0.0.1:{proxy_port}"));
    let got = via
        .get(&Path::from("k"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(got.as_ref(), b"hello");
    let (_, stats) = control(
        SocketAddr::from(([127, 0, 0, 1], control_port)),
        "GET",
        "/stats",
    )
    .await;
    assert_eq!(stats["by_method"]["GET"], 1, "{stats}");

    // Bad flags are a clear error, not a panic.
    let out = Command::new(env!("CARGO_BIN_EXE_quire-s3-proxy"))
        .args(["--upstream", "127.0.0.1:1", "--delay-ms=-5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("delay"), "{err}");
}
