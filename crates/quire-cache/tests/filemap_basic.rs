//! Basic behaviour of the page cache: reads, writes, truncation, fsync, eviction.

mod common;

use quire::filemap::{CacheConfig, PageCache};
use quire::store::{Fault, MemStore};
use std::sync::Arc;

use common::{faulty, pattern};

#[test]
fn reads_what_the_store_holds_and_short_reads_at_the_end() {
    let data = pattern(100_000, 7);
    let cache = PageCache::new(CacheConfig::new(4 << 20)).unwrap();
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    assert_eq!(f.len(), 100_000);
    let mut buf = vec![0u8; 100_000];
    assert_eq!(f.read_at(0, &mut buf).unwrap(), 100_000);
    assert_eq!(buf, data);
    let mut buf = vec![0u8; 5000];
    assert_eq!(f.read_at(98_000, &mut buf).unwrap(), 2000);
    assert_eq!(&buf[..2000], &data[98_000..]);
    assert_eq!(f.read_at(100_000, &mut buf).unwrap(), 0);
    assert_eq!(f.read_at(1 << 40, &mut buf).unwrap(), 0);
    assert!(f.read_at(u64::MAX - 10, &mut buf).is_err());
    let folio = f.read_folio(3).unwrap();
    let off = ((3 - folio.index()) * 4096) as usize;
    assert_eq!(
        &folio.bytes().unwrap()[off..off + 4096],
        &data[3 * 4096..4 * 4096]
    );
    assert!(f.read_folio(25).is_err());
}

#[test]
fn writes_extend_and_survive_fsync_and_a_new_cache() {
    let store = Arc::new(MemStore::new());
    {
        let cache = PageCache::new(CacheConfig::new(4 << 20)).unwrap();
        let f = cache.open(store.clone()).unwrap();
        let a = pattern(10_000, 1);
        assert_eq!(f.write_at(0, &a).unwrap(), 10_000);
        let b = pattern(3000, 2);
        f.write_at(20_000, &b).unwrap();
        assert_eq!(f.len(), 23_000);
        let mut buf = vec![0xffu8; 23_000];
        f.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf[..10_000], &a[..]);
        assert!(buf[10_000..20_000].iter().all(|&x| x == 0));
        assert_eq!(&buf[20_000..], &b[..]);
        f.fsync().unwrap();
    }
    let mut expect = pattern(10_000, 1);
    expect.resize(20_000, 0);
    expect.extend(pattern(3000, 2));
    assert_eq!(store.synced_contents(), expect);
    let cache = PageCache::new(CacheConfig::new(4 << 20)).unwrap();
    let f = cache.open(store.clone()).unwrap();
    let mut buf = vec![0u8; 23_000];
    assert_eq!(f.read_at(0, &mut buf).unwrap(), 23_000);
    assert_eq!(buf, expect);
}

#[test]
fn truncate_drops_and_zeroes() {
    let cache = PageCache::new(CacheConfig::new(4 << 20)).unwrap();
    let f = cache.open(MemStore::new()).unwrap();
    f.write_at(0, &pattern(50_000, 3)).unwrap();
    f.set_len(10_001).unwrap();
    assert_eq!(f.len(), 10_001);
    f.set_len(30_000).unwrap();
    let mut buf = vec![0xffu8; 30_000];
    f.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf[..10_001], &pattern(50_000, 3)[..10_001]);
    assert!(buf[10_001..].iter().all(|&x| x == 0));
    f.fsync().unwrap();
}

#[test]
fn a_small_cache_evicts_and_rereads() {
    let data = pattern(4 << 20, 9);
    let mut cfg = CacheConfig::new(256 << 10);
    cfg.readahead_max = 64 << 10;
    let cache = PageCache::new(cfg).unwrap();
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    let mut buf = vec![0u8; 8192];
    for round in 0..2 {
        for off in (0..data.len()).step_by(8192) {
            f.read_at(off as u64, &mut buf).unwrap();
            assert_eq!(
                &buf[..],
                &data[off..off + 8192],
                "round {round} offset {off}"
            );
        }
    }
    let s = cache.stats_exact();
    assert!(s.cached_frames <= s.frames);
}

#[test]
fn write_errors_reach_every_handle_once() {
    let store = faulty(Vec::new(), 1);
    let cache = PageCache::new(CacheConfig::new(4 << 20)).unwrap();
    let a = cache.open(store.clone()).unwrap();
    let b = a.reopen();
    a.write_at(0, &pattern(8192, 4)).unwrap();
    store.add(Fault::write_error(0..4096));
    assert!(a.fsync().is_err());
    assert!(
        a.fsync().is_ok(),
        "the data was rewritten and the error reported once"
    );
    assert!(b.fsync().is_err(), "the other handle sees it too");
    assert!(b.fsync().is_ok());
    assert_eq!(&store.inner().contents()[..8192], &pattern(8192, 4)[..]);
}
