//! The object cache over an in-memory `object_store` (the unit level; `tests/server.rs` runs
//! the same paths against a real S3 server): round trips, readahead as merged ranged GETs,
//! uploads single and multipart, the consistency rules, conditional writes, truncation.

mod common;

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::ObjectStore;
use quire_object::{BackingConfig, Request};

use common::*;

fn mem() -> Arc<dyn ObjectStore> {
    Arc::new(InMemory::new())
}

#[test]
fn a_written_object_is_uploaded_at_fsync_and_read_back_by_another_cache() {
    let store = mem();
    let c = cache_over(store.clone(), 8 * MIB, BackingConfig::default());
    let data = pattern(3 * MIB + 123, 1);
    let h = c.create("dir/new.bin", false).unwrap();
    h.write_all_at(0, &data).unwrap();
    assert_eq!(
        get(&store, "dir/new.bin"),
        None,
        "nothing is uploaded before fsync"
    );
    h.fsync().unwrap();
    assert_eq!(get(&store, "dir/new.bin").as_deref(), Some(&data[..]));
    let puts = c.backing().stats().requests(Request::Put);
    h.fsync().unwrap();
    assert_eq!(
        c.backing().stats().requests(Request::Put),
        puts,
        "an fsync with nothing new uploads nothing"
    );
    h.close().unwrap();

    let other = cache_over(store.clone(), 8 * MIB, BackingConfig::default());
    let h = other.open("dir/new.bin").unwrap();
    assert_eq!(h.len(), data.len() as u64);
    assert_eq!(read_all(&h, 100_000), data);
}

#[test]
fn sequential_reads_fetch_merged_ranges_and_are_cached() {
    let store = mem();
    let data = pattern(6 * MIB, 2);
    put(&store, "big", &data);
    let cfg = BackingConfig {
        range_size: 256 << 10,
        ..BackingConfig::default()
    };
    let c = cache_over(store.clone(), 16 * MIB, cfg);
    let h = c.open("big").unwrap();
    assert_eq!(read_all(&h, 64 << 10), data);
    let s = c.backing().stats();
    let gets = s.requests(Request::Get);
    assert!(gets > 0);
    assert!(
        gets <= (6 * MIB / (64 << 10)) as u64,
        "{gets} GETs: readahead windows are fetched as merged ranges, not page by page"
    );
    assert!(s.bytes_read >= data.len() as u64);
    // A second pass is served by the cache.
    assert_eq!(read_all(&h, 1 << 20), data);
    assert_eq!(c.backing().stats().requests(Request::Get), gets);
    // A new open of the same version keeps the cached folios (one HEAD, no GET).
    let h2 = c.open("big").unwrap();
    assert_eq!(read_all(&h2, 1 << 20), data);
    assert_eq!(c.backing().stats().requests(Request::Get), gets);
}

#[test]
fn async_reads_go_through_the_backing_runtime() {
    let store = mem();
    let data = pattern(2 * MIB, 3);
    put(&store, "a", &data);
    let c = cache_over(store.clone(), 8 * MIB, BackingConfig::default());
    let h = c.open("a").unwrap();
    let mut buf = vec![0u8; 10_000];
    let n = quire::filemap::block_on(h.read_at_async(MIB as u64 + 7, &mut buf)).unwrap();
    assert_eq!(n, buf.len());
    assert_eq!(&buf[..], &data[MIB + 7..MIB + 7 + 10_000]);
}

#[test]
fn a_large_object_goes_up_as_a_multipart_upload() {
    let store = mem();
    let cfg = BackingConfig {
        single_put_max: MIB as u64,
        part_size: 5 * MIB,
        parts_in_flight: 2,
        ..BackingConfig::default()
    };
    let c = cache_over(store.clone(), 8 * MIB, cfg);
    let data = pattern(13 * MIB + 5, 4);
    let h = c.create("mp", true).unwrap();
    for (i, chunk) in data.chunks(MIB).enumerate() {
        h.write_all_at((i * MIB) as u64, chunk).unwrap();
    }
    h.fsync().unwrap();
    let s = c.backing().stats();
    assert_eq!(s.requests(Request::Part), 3, "13 MiB in 5 MiB parts");
    assert_eq!(s.requests(Request::Put), 0);
    assert_eq!(get(&store, "mp").as_deref(), Some(&data[..]));
}

#[test]
fn an_object_rewritten_in_place_is_uploaded_whole() {
    let store = mem();
    let old = pattern(2 * MIB, 5);
    put(&store, "f", &old);
    // A budget smaller than the object: the unchanged bytes come from the old version.
    let c = cache_over(store.clone(), MIB, BackingConfig::default());
    let h = c.open("f").unwrap();
    h.write_all_at(MIB as u64 + 3, b"patched").unwrap();
    h.fsync().unwrap();
    let mut want = old.clone();
    want[MIB + 3..MIB + 10].copy_from_slice(b"patched");
    assert_eq!(get(&store, "f").as_deref(), Some(&want[..]));
}

#[test]
fn truncation_and_extension_read_zeros_and_upload_them() {
    let store = mem();
    let old = pattern(100_000, 6);
    put(&store, "t", &old);
    let c = cache_over(store.clone(), 4 * MIB, BackingConfig::default());
    let h = c.open("t").unwrap();
    h.set_len(10_000).unwrap();
    h.set_len(50_000).unwrap();
    let got = read_all(&h, 7_000);
    assert_eq!(got.len(), 50_000);
    assert_eq!(&got[..10_000], &old[..10_000]);
    assert!(got[10_000..].iter().all(|&b| b == 0), "old bytes came back");
    h.fsync().unwrap();
    assert_eq!(get(&store, "t").as_deref(), Some(&got[..]));
}

#[test]
fn an_object_replaced_between_opens_is_read_again() {
    let store = mem();
    put(&store, "r", &pattern(300_000, 7));
    let c = cache_over(store.clone(), 4 * MIB, BackingConfig::default());
    let h = c.open("r").unwrap();
    assert_eq!(read_all(&h, 65536), pattern(300_000, 7));
    drop(h);
    let new = pattern(200_000, 8);
    put(&store, "r", &new);
    let h = c.open("r").unwrap();
    assert_eq!(h.len(), 200_000);
    assert_eq!(read_all(&h, 65536), new);
}

#[test]
fn an_object_replaced_under_a_reader_is_estale_never_mixed() {
    let store = mem();
    let old = pattern(2 * MIB, 9);
    put(&store, "s", &old);
    let cfg = BackingConfig::default();
    let c = cache_over(store.clone(), 8 * MIB, cfg);
    let h = c.open("s").unwrap();
    let mut buf = vec![0u8; 4096];
    h.read_exact_at(0, &mut buf).unwrap();
    assert_eq!(&buf[..], &old[..4096]);
    put(&store, "s", &pattern(2 * MIB, 10));
    // Far from what readahead brought in: this read needs the store, which now has another
    // version: ESTALE, not the new bytes.
    let far = 2 * MIB as u64 - 4096;
    let e = h
        .read_exact_at(far, &mut buf)
        .expect_err("a read of a replaced object");
    assert_eq!(errno(&e), libc::ESTALE, "{e}");
    // What was cached is still the old version's, and consistent.
    h.read_exact_at(0, &mut buf).unwrap();
    assert_eq!(&buf[..], &old[..4096]);
    // A new open moves to the new version; the old handle is stale from then on.
    let h2 = c.open("s").unwrap();
    h2.read_exact_at(far, &mut buf).unwrap();
    assert_eq!(&buf[..], &pattern(2 * MIB, 10)[far as usize..]);
    let e = h.read_exact_at(0, &mut buf).expect_err("old handle");
    assert_eq!(errno(&e), libc::ESTALE);
    assert!(c.backing().stats().stale >= 2);
}

#[test]
fn two_creators_of_one_key_do_not_overwrite_each_other() {
    let store = mem();
    let a = cache_over(store.clone(), 4 * MIB, BackingConfig::default());
    let b = cache_over(store.clone(), 4 * MIB, BackingConfig::default());
    let ha = a.create("k", false).unwrap();
    let hb = b.create("k", false).unwrap();
    ha.write_all_at(0, b"from a").unwrap();
    hb.write_all_at(0, b"from b").unwrap();
    ha.fsync().unwrap();
    let e = hb.fsync().expect_err("the second creator");
    assert_eq!(errno(&e), libc::EEXIST, "{e}");
    assert_eq!(get(&store, "k").as_deref(), Some(&b"from a"[..]));
    // b's data is not lost: it is still there to read (and to retry).
    let mut buf = [0u8; 6];
    hb.read_exact_at(0, &mut buf).unwrap();
    assert_eq!(&buf, b"from b");
}

#[test]
fn a_writer_whose_version_was_replaced_is_refused() {
    let store = mem();
    put(&store, "w", b"version one");
    let c = cache_over(store.clone(), 4 * MIB, BackingConfig::default());
    let h = c.open("w").unwrap();
    h.write_all_at(0, b"VERSION").unwrap();
    put(&store, "w", b"version two by someone else");
    let e = h.fsync().expect_err("a stale writer");
    assert_eq!(errno(&e), libc::ESTALE, "{e}");
    assert_eq!(
        get(&store, "w").as_deref(),
        Some(&b"version two by someone else"[..])
    );
}

#[test]
fn missing_objects_and_bad_names_are_clear_errors() {
    let c = cache_over(mem(), MIB, BackingConfig::default());
    let e = c.open("nope").unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT, "{e}");
    let e = c.open("").unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
}

#[test]
fn a_local_directory_backing_round_trips_and_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let backing = quire_object::Backing::connect(&url, BackingConfig::default()).unwrap();
    backing.check().unwrap();
    let c = quire_object::ObjectCache::new(
        quire::PageCache::new(quire::CacheConfig::new(4 * MIB)).unwrap(),
        backing,
        None,
    );
    let h = c.create("sub/x", false).unwrap();
    h.write_all_at(0, b"first").unwrap();
    h.close().unwrap();
    assert_eq!(std::fs::read(dir.path().join("sub/x")).unwrap(), b"first");
    // The local store has no conditional update: the rewrite overwrites.
    let h = c.open("sub/x").unwrap();
    h.write_all_at(0, b"FIRST, again").unwrap();
    h.close().unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("sub/x")).unwrap(),
        b"FIRST, again"
    );
}

fn streaming_config() -> BackingConfig {
    BackingConfig {
        single_put_max: MIB as u64,
        part_size: 5 * MIB,
        parts_in_flight: 4,
        ..BackingConfig::default()
    }
}

/// A large file written from the front through a small cache: its parts go up while it is
/// written (write-behind), and `fsync` sends only the tail and completes the upload.
#[test]
fn a_large_sequential_write_is_uploaded_behind_the_writer() {
    let store = mem();
    let c = cache_over(store.clone(), 8 * MIB, streaming_config());
    let data = pattern(40 * MIB + 123, 40);
    let h = c.create("stream", true).unwrap();
    for (i, chunk) in data.chunks(MIB).enumerate() {
        h.write_all_at((i * MIB) as u64, chunk).unwrap();
    }
    let before = c.backing().stats().requests(Request::Part);
    assert!(
        before >= 2,
        "{before} parts sent before fsync: the write-back of a 40 MiB file through an 8 MiB cache"
    );
    assert_eq!(get(&store, "stream"), None, "nothing visible before fsync");
    h.fsync().unwrap();
    assert_eq!(get(&store, "stream").as_deref(), Some(&data[..]));
    assert_eq!(
        c.backing().stats().requests(Request::Part),
        9,
        "41 MiB in 5 MiB parts"
    );
}

/// A write below what the write-behind upload already sent: the upload starts over at
/// `fsync`, and the object is the file.
#[test]
fn a_write_behind_upload_broken_by_a_rewrite_starts_over() {
    let store = mem();
    let c = cache_over(store.clone(), 8 * MIB, streaming_config());
    let mut data = pattern(30 * MIB, 41);
    let h = c.create("broken", true).unwrap();
    for (i, chunk) in data.chunks(MIB).enumerate() {
        h.write_all_at((i * MIB) as u64, chunk).unwrap();
    }
    assert!(c.backing().stats().requests(Request::Part) >= 1);
    h.write_all_at(100, b"rewritten at the front").unwrap();
    data[100..122].copy_from_slice(b"rewritten at the front");
    h.fsync().unwrap();
    assert_eq!(get(&store, "broken").as_deref(), Some(&data[..]));
}
