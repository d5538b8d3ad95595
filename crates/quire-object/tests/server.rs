//! The object cache against a real S3-protocol server (the project's `quire-s3-server`, on
//! 127.0.0.1), directly and through the fault-injecting proxy: round trips, multipart,
//! consistency, 503s retried, a truncated body is `EIO`, the server stopped in the middle of a
//! multipart upload and restarted, a PUT or a completion whose answer is lost, a wrong credential.

mod common;
mod s3;

use std::time::Duration;

use quire::{CacheConfig, PageCache};
use quire_object::{Backing, BackingConfig, ObjectCache, Request};

use common::*;
use s3::{Proxy, Server, BUCKET, SECRET};

fn config(endpoint: &str) -> BackingConfig {
    BackingConfig {
        options: s3::options(endpoint, SECRET),
        first_backoff: Duration::from_millis(20),
        retry_timeout: Duration::from_secs(5),
        ..BackingConfig::default()
    }
}

fn cache(cfg: BackingConfig, budget: usize) -> ObjectCache {
    let backing = Backing::connect(&format!("s3://{BUCKET}"), cfg).unwrap();
    backing.check().unwrap();
    ObjectCache::new(
        PageCache::new(CacheConfig::new(budget)).unwrap(),
        backing,
        None,
    )
}

#[test]
fn round_trip_single_put_and_multipart() {
    let Some(server) = Server::start() else {
        return;
    };
    let c = cache(
        BackingConfig {
            single_put_max: 4 * MIB as u64,
            part_size: 5 * MIB,
            ..config(&server.endpoint())
        },
        8 * MIB,
    );
    let small = pattern(MIB + 5, 1);
    let big = pattern(12 * MIB + 7, 2);
    let h = c.create("dir/small", false).unwrap();
    h.write_all_at(0, &small).unwrap();
    h.close().unwrap();
    let h = c.create("dir/big", false).unwrap();
    h.write_all_at(0, &big).unwrap();
    h.close().unwrap();
    // The server keeps objects as plain files.
    assert_eq!(
        std::fs::read(server.object_path("dir/small")).unwrap(),
        small
    );
    assert_eq!(std::fs::read(server.object_path("dir/big")).unwrap(), big);
    let s = c.backing().stats();
    assert_eq!(s.requests(Request::Part), 3);
    assert_eq!(s.errors, 0, "{s}");

    let other = cache(config(&server.endpoint()), 4 * MIB);
    assert_eq!(read_all(&other.open("dir/big").unwrap(), 300_000), big);
    assert_eq!(read_all(&other.open("dir/small").unwrap(), 4096), small);
    let s = other.backing().stats();
    assert!(
        s.max_in_flight > 1,
        "readahead keeps several GETs in flight: {s}"
    );
}

#[test]
fn replaced_objects_are_reread_or_estale() {
    let Some(server) = Server::start() else {
        return;
    };
    let c = cache(config(&server.endpoint()), 8 * MIB);
    let writer = cache(config(&server.endpoint()), MIB);
    let h = writer.create("obj", true).unwrap();
    h.write_all_at(0, &pattern(2 * MIB, 3)).unwrap();
    h.close().unwrap();

    let r = c.open("obj").unwrap();
    let mut buf = vec![0u8; 4096];
    r.read_exact_at(0, &mut buf).unwrap();
    assert_eq!(&buf[..], &pattern(2 * MIB, 3)[..4096]);

    let h = writer.create("obj", true).unwrap();
    h.write_all_at(0, &pattern(2 * MIB, 4)).unwrap();
    h.close().unwrap();

    let far = 2 * MIB as u64 - 4096;
    let e = r
        .read_exact_at(far, &mut buf)
        .expect_err("replaced under the reader");
    assert_eq!(errno(&e), libc::ESTALE, "{e}");
    let r2 = c.open("obj").unwrap();
    assert_eq!(read_all(&r2, 65536), pattern(2 * MIB, 4));
}

#[test]
fn server_errors_are_retried_and_a_truncated_body_is_eio() {
    let Some(server) = Server::start() else {
        return;
    };
    let Some(proxy) = Proxy::start(server.port, 0) else {
        return;
    };
    let writer = cache(config(&server.endpoint()), MIB);
    let data = pattern(3 * MIB, 5);
    let h = writer.create("f", true).unwrap();
    h.write_all_at(0, &data).unwrap();
    h.close().unwrap();

    let c = cache(config(&proxy.endpoint()), 8 * MIB);
    let h = c.open("f").unwrap();
    proxy.fault("503", 3);
    let mut buf = vec![0u8; 8192];
    h.read_exact_at(0, &mut buf).unwrap();
    assert_eq!(&buf[..], &data[..8192]);
    let s = c.backing().stats();
    assert!(s.http_failed >= 3 && s.retries() >= 3, "{s}");

    // A body cut short: an error to the reader, never short data taken for the file's end.
    proxy.fault("truncate", 1000);
    let at = 2 * MIB as u64 + 4096;
    let e = h
        .read_exact_at(at, &mut buf)
        .expect_err("every body is cut");
    assert_eq!(errno(&e), libc::EIO, "{e}");
    proxy.fault("none", 0);
    h.read_exact_at(at, &mut buf).unwrap();
    assert_eq!(&buf[..], &data[at as usize..at as usize + 8192]);
}

#[test]
fn an_upload_cut_by_a_server_restart_is_reported_and_retried() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let c = cache(
        BackingConfig {
            single_put_max: MIB as u64,
            part_size: 5 * MIB,
            parts_in_flight: 1,
            retry_timeout: Duration::from_secs(2),
            max_retries: 3,
            ..config(&server.endpoint())
        },
        64 * MIB,
    );
    let data = pattern(30 * MIB, 6);
    let h = c.create("up", true).unwrap();
    h.write_all_at(0, &data).unwrap();
    // Stop the server once the upload has sent a part.
    let stats = c.backing().clone();
    let killer = std::thread::spawn(move || {
        let start = std::time::Instant::now();
        while stats.stats().requests(Request::Part) < 1 {
            assert!(start.elapsed() < Duration::from_secs(30));
            std::thread::sleep(Duration::from_millis(1));
        }
        server.stop();
        server
    });
    let e = h.fsync().expect_err("the server went away mid-upload");
    let mut server = killer.join().unwrap();
    eprintln!("fsync while the server was down: {e}");
    assert!(!server.object_path("up").exists(), "no half-written object");
    // Nothing acknowledged is lost: the data is still the file's...
    let mut buf = vec![0u8; 4096];
    h.read_exact_at(29 * MIB as u64, &mut buf).unwrap();
    assert_eq!(&buf[..], &data[29 * MIB..29 * MIB + 4096]);
    // ...and the next fsync, with the server back, uploads it.
    server.restart();
    h.fsync().unwrap();
    assert_eq!(std::fs::read(server.object_path("up")).unwrap(), data);
}

#[test]
fn a_multipart_completion_whose_answer_is_lost_is_confirmed_not_failed() {
    let Some(server) = Server::start() else {
        return;
    };
    let Some(proxy) = Proxy::start(server.port, 0) else {
        return;
    };
    let c = cache(
        BackingConfig {
            single_put_max: MIB as u64,
            part_size: 5 * MIB,
            ..config(&proxy.endpoint())
        },
        16 * MIB,
    );
    for (i, key) in ["new", "new"].into_iter().enumerate() {
        // The first pass creates the object, the second replaces it.
        let data = pattern(12 * MIB + 3, 20 + i as u64);
        let h = c.create(key, true).unwrap();
        h.write_all_at(0, &data).unwrap();
        // The server completes the upload, its answer never arrives, the client asks again
        // and the server no longer knows the upload: the object is whole, so fsync succeeds.
        proxy.fault_on("lost", 1, "&method=POST&query=uploadId");
        h.fsync().unwrap();
        h.close().unwrap();
        assert_eq!(std::fs::read(server.object_path(key)).unwrap(), data);
        let s = c.backing().stats();
        assert_eq!(s.requests(Request::Part), 3 * (i as u64 + 1), "{s}");
        assert_eq!(s.uploads_confirmed, i as u64 + 1, "{s}");
    }
    // A completion that really failed still fails: the upload is gone before it completes.
    let data = pattern(12 * MIB, 30);
    let h = c.create("gone", true).unwrap();
    h.write_all_at(0, &data).unwrap();
    proxy.fault_on("reset", 1000, "&method=POST&query=uploadId");
    let e = h.fsync().expect_err("no completion got through");
    eprintln!("fsync with every completion cut: {e}");
    assert!(!server.object_path("gone").exists());
    assert_eq!(c.backing().stats().uploads_confirmed, 2);
    proxy.fault("none", 0);
    h.fsync().unwrap();
    assert_eq!(std::fs::read(server.object_path("gone")).unwrap(), data);
}

#[test]
fn a_put_whose_answer_is_lost_is_confirmed_not_failed() {
    let Some(server) = Server::start() else {
        return;
    };
    let Some(proxy) = Proxy::start(server.port, 0) else {
        return;
    };
    let c = cache(config(&proxy.endpoint()), 16 * MIB);
    for i in 0..2u64 {
        // Created, then replaced: each PUT conditional (create-only, then If-Match).
        let data = pattern(MIB + 11, 40 + i);
        let h = c.create("small", true).unwrap();
        h.write_all_at(0, &data).unwrap();
        proxy.fault_on("lost", 1, "&method=PUT");
        h.fsync().unwrap();
        h.close().unwrap();
        assert_eq!(std::fs::read(server.object_path("small")).unwrap(), data);
        assert_eq!(c.backing().stats().uploads_confirmed, i + 1);
    }
    // Another writer's object in between is not taken for ours: the create fails.
    let h = c.create("taken", true).unwrap();
    h.write_all_at(0, &pattern(MIB, 50)).unwrap();
    let other = cache(config(&server.endpoint()), MIB);
    let o = other.create("taken", true).unwrap();
    o.write_all_at(0, &pattern(MIB, 51)).unwrap();
    o.close().unwrap();
    let e = h.fsync().expect_err("another writer created it first");
    assert_eq!(errno(&e), libc::EEXIST, "{e}");
    assert_eq!(
        std::fs::read(server.object_path("taken")).unwrap(),
        pattern(MIB, 51)
    );
    assert_eq!(c.backing().stats().uploads_confirmed, 2);
}

#[test]
fn a_wrong_credential_is_a_clear_error_at_check() {
    let Some(server) = Server::start() else {
        return;
    };
    let cfg = BackingConfig {
        options: s3::options(&server.endpoint(), "not-the-secret"),
        retry_timeout: Duration::from_secs(2),
        ..BackingConfig::default()
    };
    let b = Backing::connect(&format!("s3://{BUCKET}"), cfg).unwrap();
    let e = b.check().expect_err("wrong secret");
    let msg = e.to_string();
    assert!(msg.contains("s3://bucket"), "{msg}");
    let cfg = config(&server.endpoint());
    let b = Backing::connect("s3://no-such-bucket", cfg).unwrap();
    assert!(b.check().is_err());
}
