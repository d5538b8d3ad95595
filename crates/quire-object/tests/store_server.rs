//! `CachedStore` in front of the project's S3 server (`quire-s3-server`), through the delaying,
//! fault-injecting `quire-s3-proxy`: answers byte for byte as the server's, requests saved (the
//! proxy counts what reaches it), misses in flight together and one GET per block however many
//! callers miss it, faults never giving wrong bytes nor poisoning the cache, gets dropped
//! mid-way, an object replaced behind the store's back, write-through, the disk tier across a
//! restart.

mod common;
mod s3;

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path;
use object_store::{
    BackoffConfig, GetOptions, GetRange, ObjectStore, ObjectStoreExt as _, PutPayload, RetryConfig,
};
use quire::{CacheConfig, PageCache};
use quire_object::{CachedStore, CachedStoreConfig, DiskTier, Request, WritePolicy};

use common::*;
use s3::{Proxy, Server, BUCKET, SECRET};

/// A plain S3 client of the server (or proxy) at `endpoint`, retrying quickly.
fn s3_store(endpoint: &str) -> Arc<dyn ObjectStore> {
    let mut b = AmazonS3Builder::new()
        .with_bucket_name(BUCKET)
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(10),
                max_backoff: Duration::from_millis(100),
                base: 2.0,
            },
            max_retries: 3,
            retry_timeout: Duration::from_secs(5),
        })
        .with_conditional_put(S3ConditionalPut::ETagMatch);
    for (k, v) in s3::options(endpoint, SECRET) {
        b = b.with_config(k.parse().unwrap(), v);
    }
    Arc::new(b.build().unwrap())
}

/// A runtime for the test's own calls; the store's misses run on its own.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn cached(inner: &Arc<dyn ObjectStore>, budget: usize, config: CachedStoreConfig) -> CachedStore {
    CachedStore::with_config(
        inner.clone(),
        PageCache::new(CacheConfig::new(budget)).unwrap(),
        config,
    )
    .unwrap()
}

/// The proxy's control endpoint.
fn control(proxy: &Proxy, method: &str, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", proxy.control)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 2"), "control answered {out}");
    out
}

/// Requests that reached the proxy since its counters were last reset, by method.
fn by_method(proxy: &Proxy) -> BTreeMap<String, u64> {
    let body = control(proxy, "GET", "/stats");
    let at = body
        .find("\"by_method\":{")
        .expect("by_method in the stats")
        + 13;
    let inner = &body[at..at + body[at..].find('}').unwrap()];
    inner
        .split(',')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once(':').unwrap();
            (k.trim_matches('"').to_string(), v.trim().parse().unwrap())
        })
        .collect()
}

fn count(proxy: &Proxy, method: &str) -> u64 {
    by_method(proxy).get(method).copied().unwrap_or(0)
}

fn reset(proxy: &Proxy) {
    control(proxy, "POST", "/stats/reset");
}

fn set_delay(proxy: &Proxy, ms: u64) {
    control(proxy, "POST", &format!("/config?delay_ms={ms}"));
}

fn kind(e: &object_store::Error) -> &'static str {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => "NotFound",
        E::AlreadyExists { .. } => "AlreadyExists",
        E::Precondition { .. } => "Precondition",
        E::NotModified { .. } => "NotModified",
        E::Generic { .. } => "Generic",
        _ => "other",
    }
}

/// The server and the proxy in front of it, or `None` (skipped) without the binaries.
fn start(delay_ms: u64) -> Option<(Server, Proxy)> {
    let server = Server::start()?;
    let proxy = Proxy::start(server.port, delay_ms)?;
    Some((server, proxy))
}

async fn whole(s: &dyn ObjectStore, p: &Path) -> object_store::Result<Bytes> {
    s.get(p).await?.bytes().await
}

#[test]
fn reads_match_the_server_and_cached_bytes_send_no_request() {
    let Some((server, proxy)) = start(0) else {
        return;
    };
    let direct = s3_store(&server.endpoint());
    let via = s3_store(&proxy.endpoint());
    let rt = runtime();
    let objects = [
        ("o/big", pattern(5 * MIB + 333, 1)),
        ("o/small", pattern(1000, 2)),
        ("o/empty", Vec::new()),
    ];
    rt.block_on(async {
        for (k, d) in &objects {
            direct
                .put(&Path::from(*k), PutPayload::from(d.clone()))
                .await
                .unwrap();
        }
        let s = cached(
            &via,
            16 * MIB,
            CachedStoreConfig {
                chunk: 300_000,
                ..CachedStoreConfig::default()
            },
        );
        let ranges = |size: u64| {
            vec![
                None,
                Some(GetRange::Bounded(0..1)),
                Some(GetRange::Bounded(10..size / 2 + 7)),
                Some(GetRange::Bounded(size.saturating_sub(5)..size + 100)),
                Some(GetRange::Bounded(size..size + 10)),
                Some(GetRange::Offset(size / 3)),
                Some(GetRange::Offset(size + 1)),
                Some(GetRange::Suffix(100)),
                Some(GetRange::Suffix(size + 1000)),
            ]
        };
        for pass in 0..2 {
            if pass == 1 {
                reset(&proxy);
            }
            for (k, d) in &objects {
                let p = Path::from(*k);
                for r in ranges(d.len() as u64) {
                    let what = format!("{k} {r:?}");
                    let opts = GetOptions {
                        range: r.clone(),
                        ..Default::default()
                    };
                    let x = s.get_opts(&p, opts.clone()).await;
                    // What the contract says, worked out here.
                    let want = r
                        .as_ref()
                        .map_or(Ok(0..d.len() as u64), |r| r.as_range(d.len() as u64));
                    match (&x, &want) {
                        (Ok(x), Ok(w)) => assert_eq!(&x.range, w, "{what}"),
                        (Err(e), Err(_)) => assert_eq!(kind(e), "Generic", "{what}: {e}"),
                        _ => panic!("{what}: cached {:?}, wanted {want:?}", x.as_ref().err()),
                    }
                    // The server answers 500 to a suffix longer than the object (S3 gives the
                    // whole object): compared with the contract above only.
                    if matches!(r, Some(GetRange::Suffix(n)) if n > d.len() as u64) {
                        let b = x.unwrap().bytes().await.unwrap();
                        assert!(b[..] == d[..], "{what}");
                        continue;
                    }
                    let y = direct.get_opts(&p, opts).await;
                    match (x, y) {
                        (Ok(x), Ok(y)) => {
                            assert_eq!(x.range, y.range, "{what}");
                            assert_eq!(x.meta.size, y.meta.size, "{what}");
                            assert_eq!(x.meta.e_tag, y.meta.e_tag, "{what}");
                            assert_eq!(
                                x.bytes().await.unwrap(),
                                y.bytes().await.unwrap(),
                                "{what}"
                            );
                        }
                        (Err(x), Err(y)) => assert_eq!(kind(&x), kind(&y), "{what}: {x} / {y}"),
                        (x, y) => panic!("{what}: cached {:?}, server {:?}", x.err(), y.err()),
                    }
                }
                if !d.is_empty() {
                    let n = d.len() as u64;
                    let rs = [n - 1..n, 0..n.min(10), n / 2..n, 0..n / 3 + 1];
                    let x = s.get_ranges(&p, &rs).await.unwrap();
                    let y = direct.get_ranges(&p, &rs).await.unwrap();
                    assert_eq!(x, y, "{k}");
                }
                let m = s.head(&p).await.unwrap();
                assert_eq!(m, direct.head(&p).await.unwrap());
            }
        }
        // The second pass: everything from the cache.
        let st = by_method(&proxy);
        assert_eq!(
            st.get("GET").copied().unwrap_or(0) + st.get("HEAD").copied().unwrap_or(0),
            0,
            "the second pass reached the server: {st:?}; {}",
            s.stats()
        );
        assert!(s.stats().requests_saved() > 0);

        // Write-through: the put's bytes are read back with no GET (its ETag is the one the
        // server's HEAD reports).
        let p = Path::from("o/written");
        let d = pattern(2 * MIB + 5, 3);
        s.put(&p, PutPayload::from(d.clone())).await.unwrap();
        assert_eq!(s.stats().written_through, 1);
        reset(&proxy);
        assert_eq!(&whole(&s, &p).await.unwrap()[..], &d[..]);
        assert_eq!(
            count(&proxy, "GET"),
            0,
            "{:?}; {}",
            by_method(&proxy),
            s.stats()
        );

        // Copies, renames and deletes through the store: never the old cached bytes.
        let (a, b) = (Path::from("o/small"), Path::from("o/written"));
        s.copy(&a, &b).await.unwrap();
        assert_eq!(&whole(&s, &b).await.unwrap()[..], &objects[1].1[..]);
        s.rename(&b, &Path::from("o/moved")).await.unwrap();
        assert_eq!(kind(&whole(&s, &b).await.unwrap_err()), "NotFound");
        assert_eq!(
            &whole(&s, &Path::from("o/moved")).await.unwrap()[..],
            &objects[1].1[..]
        );
        s.delete(&a).await.unwrap();
        assert_eq!(kind(&whole(&s, &a).await.unwrap_err()), "NotFound");
    });
}

/// `get_ranges` with some ranges cached: GETs only for the missing blocks, all in flight at
/// once.
#[test]
fn get_ranges_fetches_only_missing_blocks_together() {
    let Some((server, proxy)) = start(0) else {
        return;
    };
    let direct = s3_store(&server.endpoint());
    let via = s3_store(&proxy.endpoint());
    let rt = runtime();
    let data = pattern(8 * MIB, 4);
    let m = MIB as u64;
    rt.block_on(async {
        let p = Path::from("r");
        direct.put(&p, data.clone().into()).await.unwrap();
        let mut cc = CacheConfig::new(64 * MIB);
        // No readahead: a read fetches what it asks for, so GETs can be counted.
        cc.readahead_max = 0;
        let s = CachedStore::with_config(
            via.clone(),
            PageCache::new(cc).unwrap(),
            CachedStoreConfig {
                coalesce: 0,
                ..CachedStoreConfig::default()
            },
        )
        .unwrap();
        for b in [0, 2, 4, 6] {
            s.get_range(&p, b * m..(b + 1) * m).await.unwrap();
        }
        let before = s.stats();
        set_delay(&proxy, 200);
        reset(&proxy);
        // Unsorted, overlapping, adjacent, far apart; blocks 1, 3, 5, 7 missing.
        let rs = [
            7 * m + 5..8 * m,
            0..10,
            m..2 * m,
            5..m,
            3 * m..3 * m + 4096,
            3 * m + 4096..4 * m,
            5 * m..6 * m,
            6 * m + 1..6 * m + 2,
            7 * m..7 * m + 100,
        ];
        let t = Instant::now();
        let got = s.get_ranges(&p, &rs).await.unwrap();
        let took = t.elapsed();
        for (r, g) in rs.iter().zip(&got) {
            assert_eq!(&g[..], &data[r.start as usize..r.end as usize], "{r:?}");
        }
        let after = s.stats();
        let gets = after.get_requests - before.get_requests;
        assert_eq!(count(&proxy, "GET"), gets);
        assert_eq!(gets, 4, "one GET per missing block: {after}");
        assert_eq!(after.bytes_fetched - before.bytes_fetched, 4 * m, "{after}");
        // Four GETs of 200 ms each, together: well under the 800 ms one at a time takes.
        assert!(took < Duration::from_millis(700), "took {took:?}");
        let o = s.object_cache().backing().stats();
        assert!(o.max_in_flight >= 4, "{o}");
    });
}

/// Many concurrent gets of the same uncached block: one GET.
#[test]
fn concurrent_misses_of_one_block_send_one_get() {
    let Some((server, proxy)) = start(0) else {
        return;
    };
    let direct = s3_store(&server.endpoint());
    let via = s3_store(&proxy.endpoint());
    let rt = runtime();
    let data = pattern(MIB, 5);
    rt.block_on(async {
        let p = Path::from("c");
        direct.put(&p, data.clone().into()).await.unwrap();
        let mut cc = CacheConfig::new(16 * MIB);
        // No readahead: the GETs are those of the bytes read.
        cc.readahead_max = 0;
        let s = CachedStore::with_config(
            via.clone(),
            PageCache::new(cc).unwrap(),
            CachedStoreConfig::default(),
        )
        .unwrap();
        s.head(&p).await.unwrap();
        set_delay(&proxy, 200);
        // The same small range (one page: one folio, one GET); the same larger range; ranges
        // overlapping one another. A larger range's pages may go out as more than one GET
        // when readers race to insert them, but never a page twice.
        for (round, step, len) in [(0u64, 0u64, 3000u64), (1, 0, 50_000), (2, 1000, 50_000)] {
            reset(&proxy);
            let before = s.stats();
            let base = round * 200_000;
            let tasks: Vec<_> = (0..16u64)
                .map(|i| {
                    let (s, p) = (s.clone(), p.clone());
                    tokio::spawn(async move {
                        let r = base + i * step + 100..base + i * step + 100 + len;
                        (r.clone(), s.get_range(&p, r).await.unwrap())
                    })
                })
                .collect();
            for t in tasks {
                let (r, b) = t.await.unwrap();
                assert_eq!(&b[..], &data[r.start as usize..r.end as usize]);
            }
            let now = s.stats();
            let gets = now.get_requests - before.get_requests;
            assert_eq!(count(&proxy, "GET"), gets, "{now}");
            let fetched = now.bytes_fetched - before.bytes_fetched;
            if len < 4096 {
                assert_eq!(gets, 1, "sixteen reads of one page: {now}");
            }
            // No byte fetched twice: the pages the reads cover, once.
            let span = (base + 15 * step + 100 + len).div_ceil(4096) * 4096 - base / 4096 * 4096;
            assert!(fetched <= span, "{fetched} bytes fetched for {span}: {now}");
        }
    });
}

/// Each kind of fault the proxy injects, once and on every request: a read gives an error or
/// the right bytes, never wrong ones; once the fault is gone, the right bytes (the cache was not
/// poisoned).
#[test]
fn faults_give_errors_or_right_bytes_and_leave_no_trace() {
    let Some((server, proxy)) = start(0) else {
        return;
    };
    let direct = s3_store(&server.endpoint());
    let via = s3_store(&proxy.endpoint());
    let rt = runtime();
    let data = pattern(4 * MIB + 77, 6);
    let p = Path::from("f");
    rt.block_on(async {
        direct.put(&p, data.clone().into()).await.unwrap();
        for mode in ["503", "truncate", "reset"] {
            for n in [1, 2, 1000] {
                // A store whose metadata is cached, and one whose first request is faulted.
                for warm in [true, false] {
                    let s = cached(
                        &via,
                        16 * MIB,
                        CachedStoreConfig {
                            chunk: 256 << 10,
                            ..CachedStoreConfig::default()
                        },
                    );
                    if warm {
                        s.get_range(&p, 0..1000).await.unwrap();
                    }
                    control(&proxy, "POST", &format!("/fault?mode={mode}&count={n}"));
                    let what = format!("{mode} x{n} warm {warm}");
                    let mut errors = 0;
                    match whole(&s, &p).await {
                        Ok(b) => assert!(b[..] == data[..], "{what}: wrong bytes"),
                        Err(_) => errors += 1,
                    }
                    let r = 3 * MIB as u64 + 5..4 * MIB as u64;
                    match s.get_range(&p, r.clone()).await {
                        Ok(b) => assert!(b[..] == data[r.start as usize..r.end as usize], "{what}"),
                        Err(_) => errors += 1,
                    }
                    let rs = [100..200, 2 * MIB as u64..2 * MIB as u64 + 70_000];
                    match s.get_ranges(&p, &rs).await {
                        Ok(b) => {
                            assert!(b[0][..] == data[100..200], "{what}");
                            assert!(b[1][..] == data[2 * MIB..2 * MIB + 70_000], "{what}");
                        }
                        Err(_) => errors += 1,
                    }
                    if n == 1000 {
                        assert!(errors > 0, "{what}: every request faulted, yet no error");
                    }
                    control(&proxy, "POST", "/fault?mode=none&count=0");
                    assert!(
                        whole(&s, &p).await.unwrap()[..] == data[..],
                        "{what}: after"
                    );
                    let b = s.get_range(&p, r.clone()).await.unwrap();
                    assert!(
                        b[..] == data[r.start as usize..r.end as usize],
                        "{what}: after"
                    );
                    let st = s.stats();
                    assert_eq!(st.reads, st.hits + st.misses, "{st}");
                }
            }
        }
    });
}

/// A get dropped while its GET is in flight (the proxy delays it), then the same read and
/// others: the right bytes, no hang, the counters consistent.
#[test]
fn gets_dropped_mid_way_leave_the_cache_consistent() {
    let Some((server, proxy)) = start(0) else {
        return;
    };
    let direct = s3_store(&server.endpoint());
    let via = s3_store(&proxy.endpoint());
    let rt = runtime();
    let data = pattern(6 * MIB, 7);
    let p = Path::from("x");
    rt.block_on(async {
        direct.put(&p, data.clone().into()).await.unwrap();
        let s = cached(
            &via,
            16 * MIB,
            CachedStoreConfig {
                chunk: 256 << 10,
                ..CachedStoreConfig::default()
            },
        );
        set_delay(&proxy, 300);
        let short = Duration::from_millis(60);
        // Dropped in the metadata request (nothing cached yet)...
        assert!(tokio::time::timeout(short, s.get_range(&p, 0..1000))
            .await
            .is_err());
        // ...in a miss...
        assert!(
            tokio::time::timeout(short, s.get_range(&p, MIB as u64..2 * MIB as u64))
                .await
                .is_err()
        );
        // ...while a whole get's stream is being read...
        let slow = async {
            let r = s.get(&p).await?;
            r.bytes().await
        };
        assert!(tokio::time::timeout(Duration::from_millis(500), slow)
            .await
            .is_err());
        // ...and in get_ranges.
        let rs = [10..20, 4 * MIB as u64..5 * MIB as u64];
        assert!(tokio::time::timeout(short, s.get_ranges(&p, &rs))
            .await
            .is_err());

        set_delay(&proxy, 20);
        let t = Instant::now();
        let check = |r: std::ops::Range<u64>, b: Bytes| {
            assert!(b[..] == data[r.start as usize..r.end as usize], "{r:?}");
        };
        check(0..1000, s.get_range(&p, 0..1000).await.unwrap());
        check(
            MIB as u64..2 * MIB as u64,
            s.get_range(&p, MIB as u64..2 * MIB as u64).await.unwrap(),
        );
        let got = s.get_ranges(&p, &rs).await.unwrap();
        check(rs[1].clone(), got[1].clone());
        check(0..data.len() as u64, whole(&s, &p).await.unwrap());
        // Others at once.
        let tasks: Vec<_> = (0..8u64)
            .map(|i| {
                let (s, p) = (s.clone(), p.clone());
                tokio::spawn(async move {
                    let r = i * 700_000..i * 700_000 + 300_000;
                    (r.clone(), s.get_range(&p, r).await.unwrap())
                })
            })
            .collect();
        for t in tasks {
            let (r, b) = t.await.unwrap();
            check(r, b);
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());

        // The dropped requests end; the counters add up.
        let o = s.object_cache().backing();
        let t = Instant::now();
        while o.stats().in_flight != 0 {
            assert!(t.elapsed() < Duration::from_secs(5), "{}", o.stats());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let st = s.stats();
        assert_eq!(st.reads, st.hits + st.misses, "{st}");
        // Every byte was fetched at most once: the dropped reads' GETs filled the cache.
        assert!(st.bytes_fetched <= data.len() as u64, "{st}");
        let o = o.stats();
        assert_eq!(o.errors, 0, "{o}");
    });
}

/// Replaced behind the store's back on the server: the read that misses gives the new
/// version whole (the GET pinned to the old ETag is refused, the read retried once).
#[test]
fn an_object_replaced_on_the_server_is_reread_whole() {
    let Some((server, proxy)) = start(0) else {
        return;
    };
    let direct = s3_store(&server.endpoint());
    let via = s3_store(&proxy.endpoint());
    let rt = runtime();
    let old = pattern(3 * MIB, 8);
    let new = pattern(2 * MIB + 9, 9);
    let p = Path::from("rep");
    rt.block_on(async {
        direct.put(&p, old.clone().into()).await.unwrap();
        let s = cached(&via, 16 * MIB, CachedStoreConfig::default());
        let b = s.get_range(&p, 0..4096).await.unwrap();
        assert_eq!(&b[..], &old[..4096]);
        direct.put(&p, new.clone().into()).await.unwrap();
        // Cached: the old bytes (immutable objects).
        assert_eq!(&s.get_range(&p, 0..4096).await.unwrap()[..], &old[..4096]);
        let r = MIB as u64..2 * MIB as u64;
        let b = s.get_range(&p, r.clone()).await.unwrap();
        assert!(b[..] == new[MIB..2 * MIB], "the new version's bytes");
        assert_eq!(s.stats().replaced, 1, "{}", s.stats());
        let all = s.get(&p).await.unwrap();
        assert_eq!(all.meta.size, new.len() as u64);
        assert!(all.bytes().await.unwrap()[..] == new[..]);
    });
}

/// Write-through with `WritePolicy::Invalidate` reads the put fresh; a put larger than
/// `write_through_max` is not cached; a multipart upload's object is read fresh after it
/// completes.
#[test]
fn write_policies_on_the_server() {
    let Some((_server, proxy)) = start(0) else {
        return;
    };
    let via = s3_store(&proxy.endpoint());
    let rt = runtime();
    rt.block_on(async {
        let inv = cached(
            &via,
            16 * MIB,
            CachedStoreConfig {
                write: WritePolicy::Invalidate,
                ..CachedStoreConfig::default()
            },
        );
        let p = Path::from("w1");
        let d = pattern(MIB, 10);
        inv.put(&p, d.clone().into()).await.unwrap();
        reset(&proxy);
        assert_eq!(&whole(&inv, &p).await.unwrap()[..], &d[..]);
        assert!(count(&proxy, "GET") >= 1, "{:?}", by_method(&proxy));

        let thr = cached(
            &via,
            16 * MIB,
            CachedStoreConfig {
                write_through_max: 512 << 10,
                ..CachedStoreConfig::default()
            },
        );
        let small = pattern(500 << 10, 11);
        let big = pattern(600 << 10, 12);
        thr.put(&Path::from("w2"), small.clone().into())
            .await
            .unwrap();
        thr.put(&Path::from("w3"), big.clone().into())
            .await
            .unwrap();
        assert_eq!(thr.stats().written_through, 1);
        reset(&proxy);
        assert_eq!(
            &whole(&thr, &Path::from("w2")).await.unwrap()[..],
            &small[..]
        );
        assert_eq!(count(&proxy, "GET"), 0, "{:?}", by_method(&proxy));
        assert_eq!(&whole(&thr, &Path::from("w3")).await.unwrap()[..], &big[..]);
        assert!(count(&proxy, "GET") >= 1, "{:?}", by_method(&proxy));

        // Multipart: the version cached before is not what is read after complete.
        let m = Path::from("w2");
        let parts = [pattern(5 * MIB, 13), pattern(100_000, 14)];
        let mut u = thr.put_multipart(&m).await.unwrap();
        for d in &parts {
            u.put_part(d.clone().into()).await.unwrap();
        }
        u.complete().await.unwrap();
        assert!(whole(&thr, &m).await.unwrap()[..] == parts.concat()[..]);
    });
}

/// The disk tier across a restart on the server: the new store sends only its metadata
/// requests.
#[test]
fn the_disk_tier_spares_a_restarted_store_its_gets() {
    let Some((server, proxy)) = start(0) else {
        return;
    };
    let direct = s3_store(&server.endpoint());
    let via = s3_store(&proxy.endpoint());
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let objs: Vec<(Path, Vec<u8>)> = (0..3u64)
        .map(|i| {
            (
                Path::from(format!("t/{i}")),
                pattern(2 * MIB + 500 * i as usize, 40 + i),
            )
        })
        .collect();
    let open = || {
        let tier = DiskTier::open(dir.path(), 64 * MIB as u64).unwrap();
        let s = CachedStore::with_tier(
            via.clone(),
            PageCache::new(CacheConfig::new(2 * MIB)).unwrap(),
            CachedStoreConfig {
                name: Some("s3://bucket".into()),
                ..CachedStoreConfig::default()
            },
            tier.clone(),
        )
        .unwrap();
        (s, tier)
    };
    rt.block_on(async {
        for (p, d) in &objs {
            direct.put(p, d.clone().into()).await.unwrap();
        }
        let (s, tier) = open();
        for (p, d) in &objs {
            assert!(whole(&s, p).await.unwrap()[..] == d[..]);
        }
        tier.drain();
        drop(s);
        drop(tier);

        reset(&proxy);
        let (s, _tier) = open();
        for (p, d) in &objs {
            assert!(whole(&s, p).await.unwrap()[..] == d[..]);
        }
        let st = by_method(&proxy);
        assert_eq!(st.get("GET"), None, "{st:?}; {}", s.stats());
        assert_eq!(st.get("HEAD").copied(), Some(objs.len() as u64), "{st:?}");
        assert_eq!(s.object_cache().backing().stats().requests(Request::Get), 0);
    });
}
