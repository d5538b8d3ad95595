//! The disk tier under the memory cache: evicted clean folios are kept and read back instead
//! of refetched, a corrupted block is refetched (never wrong data), a restart finds the tier
//! again, its size bound holds.

mod common;

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::ObjectStore;
use quire::{CacheConfig, PageCache};
use quire_object::{Backing, BackingConfig, DiskTier, ObjectCache, Request};

use common::*;

fn cache_with_tier(store: Arc<dyn ObjectStore>, budget: usize, tier: DiskTier) -> ObjectCache {
    cache_with_tier_config(store, CacheConfig::new(budget), tier)
}

fn cache_with_tier_config(
    store: Arc<dyn ObjectStore>,
    config: CacheConfig,
    tier: DiskTier,
) -> ObjectCache {
    let backing =
        Backing::with_store(store, "", "mem://tier-test", BackingConfig::default()).unwrap();
    ObjectCache::new(PageCache::new(config).unwrap(), backing, None).with_tier(tier)
}

/// The bytes the tier's files take on disk (allocated blocks).
fn disk_usage(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for d in std::fs::read_dir(dir).unwrap().flatten() {
        if d.path().is_dir() {
            total += disk_usage(&d.path());
        } else {
            total += d.metadata().unwrap().blocks() * 512;
        }
    }
    total
}

#[test]
fn evicted_folios_are_read_back_from_disk_and_found_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let data = pattern(8 * MIB, 21);
    put(&store, "obj", &data);
    let tier = DiskTier::open(dir.path(), 64 * MIB as u64).unwrap();
    let c = cache_with_tier(store.clone(), MIB, tier.clone());
    let h = c.open("obj").unwrap();
    assert_eq!(read_all(&h, 128 << 10), data);
    tier.drain();
    let first = tier.stats();
    assert!(
        first.puts as usize >= (6 * MIB) / 4096,
        "an 8 MiB object through a 1 MiB cache: {first:?}"
    );
    let gets = c.backing().stats().requests(Request::Get);
    assert_eq!(read_all(&h, 128 << 10), data);
    let second = tier.stats();
    assert!(second.hits as usize >= (6 * MIB) / 4096, "{second:?}");
    let more = c.backing().stats().requests(Request::Get) - gets;
    assert!(more < gets / 2, "second pass: {more} GETs after {gets}");
    drop(h);
    drop(c);
    drop(tier);

    // A restart: a new cache and tier over the same directory.
    let tier = DiskTier::open(dir.path(), 64 * MIB as u64).unwrap();
    assert!(tier.stats().bytes >= 6 * MIB as u64, "{:?}", tier.stats());
    let c = cache_with_tier(store.clone(), MIB, tier.clone());
    let h = c.open("obj").unwrap();
    assert_eq!(read_all(&h, 128 << 10), data);
    let s = c.backing().stats();
    assert!(
        s.bytes_read < 3 * MIB as u64,
        "a warm restart fetched {} bytes of 8 MiB",
        s.bytes_read
    );
}

#[test]
fn a_corrupted_block_is_refetched_not_returned() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let data = pattern(4 * MIB, 22);
    put(&store, "obj", &data);
    let tier = DiskTier::open(dir.path(), 64 * MIB as u64).unwrap();
    let c = cache_with_tier(store.clone(), MIB, tier.clone());
    let h = c.open("obj").unwrap();
    assert_eq!(read_all(&h, 128 << 10), data);
    tier.drain();
    // Flip bytes in every page of the first chunk on disk.
    let tag = h.version().unwrap().e_tag.unwrap();
    let path = tier.chunk_path("mem://tier-test", "obj", &tag, 0);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    for page in 0..256u64 {
        f.write_all_at(b"garbage", 4096 + page * 4096 + 100)
            .unwrap();
    }
    drop(f);
    // The memory cache must let go of the first MiB, then read it again.
    c.page_cache().shrink(usize::MAX);
    let mut buf = vec![0u8; MIB];
    h.read_exact_at(0, &mut buf).unwrap();
    assert_eq!(buf, &data[..MIB], "wrong data from a corrupted tier");
    assert!(tier.stats().corrupt > 0, "{:?}", tier.stats());
}

#[test]
fn the_size_bound_holds() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let data = pattern(12 * MIB, 23);
    put(&store, "obj", &data);
    let limit = 3 * MIB as u64;
    let tier = DiskTier::open(dir.path(), limit).unwrap();
    let c = cache_with_tier(store.clone(), MIB, tier.clone());
    let h = c.open("obj").unwrap();
    assert_eq!(read_all(&h, 128 << 10), data);
    assert_eq!(read_all(&h, 128 << 10), data);
    tier.drain();
    let s = tier.stats();
    assert!(s.bytes <= limit, "{s:?}");
    assert!(s.evicted_chunks > 0, "{s:?}");
    let used = disk_usage(dir.path());
    assert!(
        used <= limit + MIB as u64,
        "{used} bytes on disk for a {limit} bound"
    );
    // A smaller bound at the next start deletes the excess.
    drop(h);
    drop(c);
    drop(tier);
    let tier = DiskTier::open(dir.path(), MIB as u64).unwrap();
    assert!(tier.stats().bytes <= MIB as u64);
    assert!(disk_usage(dir.path()) <= 2 * MIB as u64);
}

#[test]
fn written_data_is_not_kept_under_the_old_version() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let old = pattern(4 * MIB, 24);
    put(&store, "obj", &old);
    let tier = DiskTier::open(dir.path(), 64 * MIB as u64).unwrap();
    let c = cache_with_tier(store.clone(), MIB, tier.clone());
    let h = c.open("obj").unwrap();
    let new = pattern(4 * MIB, 25);
    h.write_all_at(0, &new).unwrap();
    // Dirty, then written back to staging, then evicted: none of it may go to the tier as the
    // old version's bytes.
    c.page_cache().shrink(usize::MAX);
    assert_eq!(read_all(&h, 128 << 10), new);
    h.fsync().unwrap();
    c.page_cache().shrink(usize::MAX);
    assert_eq!(read_all(&h, 128 << 10), new);
    tier.drain();
    // Another cache reading the old version through the same tier would have seen new bytes
    // had they been kept under the old tag; read the new version instead and compare.
    let c2 = cache_with_tier(store.clone(), MIB, tier.clone());
    let h2 = c2.open("obj").unwrap();
    assert_eq!(read_all(&h2, 128 << 10), new);
    assert_eq!(get(&store, "obj").as_deref(), Some(&new[..]));
}

/// A random reader's miss brings its whole tier chunk to disk (one larger GET): another page
/// of the same chunk is then read from the tier, not the network.
#[test]
fn a_miss_fills_its_chunk_in_the_tier() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let data = pattern(8 * MIB, 26);
    put(&store, "obj", &data);
    let tier = DiskTier::open(dir.path(), 64 * MIB as u64).unwrap();
    let mut cfg = CacheConfig::new(4 * MIB);
    cfg.readahead_max = 0;
    let c = cache_with_tier_config(store.clone(), cfg, tier.clone());
    let h = c.open("obj").unwrap();
    let mut buf = vec![0u8; 4096];
    let at = 5 * MIB + 3 * 4096;
    h.read_exact_at(at as u64, &mut buf).unwrap();
    assert_eq!(buf, &data[at..at + 4096]);
    tier.drain();
    assert!(tier.stats().puts >= 256, "{:?}", tier.stats());
    let gets = c.backing().stats().requests(Request::Get);
    // Another page of the same chunk, not in memory: from the tier.
    let other = 5 * MIB + 200 * 4096;
    h.read_exact_at(other as u64, &mut buf).unwrap();
    assert_eq!(buf, &data[other..other + 4096]);
    assert_eq!(c.backing().stats().requests(Request::Get), gets);
    assert!(tier.stats().hits >= 1);
}

/// A page read from the tier and evicted again is not written to it a second time: a version's
/// bytes never change.
#[test]
fn pages_the_tier_holds_are_not_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let data = pattern(8 * MIB, 22);
    put(&store, "obj", &data);
    let tier = DiskTier::open(dir.path(), 64 * MIB as u64).unwrap();
    let c = cache_with_tier(store.clone(), MIB, tier.clone());
    let h = c.open("obj").unwrap();
    assert_eq!(read_all(&h, 128 << 10), data);
    tier.drain();
    let first = tier.stats();
    for _ in 0..3 {
        assert_eq!(read_all(&h, 128 << 10), data);
    }
    tier.drain();
    let after = tier.stats();
    // Offers dropped in the first pass (the writer behind) may be written now; nothing else.
    assert!(
        after.puts - first.puts <= first.dropped,
        "pages written again: {first:?} then {after:?}"
    );
    assert!(after.held >= (3 * 6 * MIB / 4096) as u64, "{after:?}");
}

#[test]
fn the_queue_of_offers_is_bounded_by_the_cache_it_serves() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let data = pattern(8 * MIB, 29);
    put(&store, "obj", &data);
    let tier = DiskTier::open(dir.path(), 64 * MIB as u64).unwrap();
    assert_eq!(tier.stats().queue_bound, quire_object::tier::QUEUED_MAX);
    // Under a 4 MiB cache: a 16th of it, raised to the 1 MiB floor.
    let c = cache_with_tier(store.clone(), 4 * MIB, tier.clone());
    let bound = tier.stats().queue_bound;
    assert_eq!(bound, MIB as u64);
    assert_eq!(c.memory().tier_queue_bound, bound);
    let h = c.open("obj").unwrap();
    assert_eq!(read_all(&h, 128 << 10), data);
    tier.drain();
    let s = tier.stats();
    // Folios of up to 2 MiB are offered whole: one larger than the bound goes in only alone.
    assert!(s.queued_max <= bound.max(2 * MIB as u64), "{s:?}");
    assert!(s.puts + s.dropped > 0, "{s:?}");
    // Under a large cache the queue keeps its most.
    let big = cache_with_tier(store, 1 << 30, tier.clone());
    assert_eq!(
        big.memory().tier_queue_bound,
        quire_object::tier::QUEUED_MAX
    );
}

#[test]
fn reads_from_the_tier_at_any_offset_and_an_object_s_short_last_page_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    // Not a whole number of pages: the last page is short.
    let data = pattern(3 * MIB + 1234, 31);
    put(&store, "obj", &data);
    let tier = DiskTier::open(dir.path(), 64 * MIB as u64).unwrap();
    let c = cache_with_tier(store.clone(), MIB, tier.clone());
    let h = c.open("obj").unwrap();
    assert_eq!(read_all(&h, 128 << 10), data);
    tier.drain();
    c.page_cache().shrink(usize::MAX);
    let gets = c.backing().stats().requests(Request::Get);
    let hits = tier.stats().hits;
    // Reads that start and end off page boundaries, one across the object's end.
    let len = data.len() as u64;
    for (off, n) in [
        (1000u64, 5000usize),
        (MIB as u64 - 7, 70_000),
        (2 * MIB as u64 + 4096, 8192),
        (len - 3000, 3000),
        (len - 1234, 1234),
        (0, 4096),
    ] {
        c.page_cache().shrink(usize::MAX);
        let mut buf = vec![0u8; n];
        h.read_exact_at(off, &mut buf).unwrap();
        assert_eq!(
            buf,
            &data[off as usize..off as usize + n],
            "{n} bytes at {off}"
        );
    }
    assert!(tier.stats().hits > hits, "{:?}", tier.stats());
    assert_eq!(
        c.backing().stats().requests(Request::Get),
        gets,
        "every read was served by the tier"
    );
}
