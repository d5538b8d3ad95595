//! A store changed behind the cache's back (a file cut by another program): reads that find the
//! store shorter than the data it is known to hold end there — a short read, or an
//! `UnexpectedEof` error — and never invent zeros; holes the cache itself made by extending the
//! file still read as zeros.

mod common;

use std::io::ErrorKind;
use std::sync::Arc;

use common::{pattern, quiet_config, same, PAGE};
use quire::filemap::PageCache;
use quire::store::{MemStore, Store};

const MIB: usize = 1 << 20;

#[test]
fn a_store_cut_to_zero_behind_the_cache_reads_as_end_of_file_not_zeros() {
    for align in [1usize, PAGE] {
        let data = pattern(MIB, 7);
        let store = Arc::new(MemStore::from_vec(data.clone()).with_alignment(align));
        let cache = PageCache::new(quiet_config(8 * MIB)).unwrap();
        let f = cache.open(store.clone()).unwrap();
        let mut all = vec![0u8; MIB];
        f.read_exact_at(0, &mut all).unwrap();
        same(&all, &data, "first read");

        // Another program cuts the file; the cache still serves what it holds...
        store.set_len(0).unwrap();
        let mut page = vec![0u8; PAGE];
        f.read_exact_at(5 * PAGE as u64, &mut page).unwrap();
        same(&page, &data[5 * PAGE..6 * PAGE], "cached page");

        // ...but once it is dropped, the store's end is reported, not zeros.
        f.invalidate().unwrap();
        assert_eq!(f.cached_frames(), 0, "align {align}");
        let mut buf = vec![0xaau8; 64 * 1024];
        let e = f.read_exact_at(0, &mut buf).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "align {align}: {e}");
        let e = f.read_at(300 * 1024, &mut buf).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "align {align}: {e}");
        assert!(
            buf.iter().all(|&b| b == 0xaa),
            "align {align}: nothing was copied"
        );
        // Nothing was made up and kept: asking again fails again.
        let e = f.read_exact_at(0, &mut buf).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "align {align}: {e}");
    }
}

#[test]
fn a_store_cut_short_behind_the_cache_gives_a_short_read_of_what_is_there() {
    for align in [1usize, PAGE] {
        let data = pattern(MIB, 9);
        let store = Arc::new(MemStore::from_vec(data.clone()).with_alignment(align));
        let mut cfg = quiet_config(8 * MIB);
        // One page per miss, so the folio boundaries are known.
        cfg.readahead_max = 0;
        cfg.max_folio_order = 0;
        let cache = PageCache::new(cfg).unwrap();
        let f = cache.open(store.clone()).unwrap();
        let cut = 10 * PAGE + 100;
        store.set_len(cut as u64).unwrap();
        let mut buf = vec![0xaau8; 16 * PAGE];
        let n = f.read_at(0, &mut buf).unwrap();
        assert!(
            n <= cut && n >= 10 * PAGE,
            "align {align}: a short read up to the cut, got {n}"
        );
        same(&buf[..n], &data[..n], "the bytes that are there");
        assert!(
            buf[n..].iter().all(|&b| b == 0xaa),
            "align {align}: nothing invented"
        );
        // Reading from inside the lost part fails at once.
        let e = f.read_at(12 * PAGE as u64, &mut buf).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "align {align}");
    }
}

#[test]
fn holes_made_by_extending_writes_still_read_as_zeros() {
    for align in [1usize, PAGE] {
        let store = Arc::new(MemStore::new().with_alignment(align));
        let cache = PageCache::new(quiet_config(8 * MIB)).unwrap();
        let f = cache.open(store.clone()).unwrap();
        let tail = pattern(100, 3);
        f.write_at(MIB as u64, &tail).unwrap();
        // Not written back: the store is empty, the hole below the write is zeros.
        assert_eq!(store.len().unwrap(), 0);
        let mut buf = vec![0xaau8; 8 * PAGE];
        assert_eq!(f.read_at(0, &mut buf).unwrap(), buf.len(), "align {align}");
        assert!(
            buf.iter().all(|&b| b == 0),
            "align {align}: a hole reads zeros"
        );
        // Written back and dropped: the store has the hole, still zeros.
        f.fsync().unwrap();
        f.invalidate().unwrap();
        let mut buf = vec![0xaau8; 8 * PAGE];
        assert_eq!(
            f.read_at(4096, &mut buf).unwrap(),
            buf.len(),
            "align {align}"
        );
        assert!(buf.iter().all(|&b| b == 0), "align {align}");
        let mut got = vec![0u8; 100];
        f.read_exact_at(MIB as u64, &mut got).unwrap();
        same(&got, &tail, "the written tail");
    }
}

#[test]
fn a_store_cut_behind_the_cache_after_a_write_back_is_still_noticed() {
    let store = Arc::new(MemStore::new().with_alignment(PAGE));
    let cache = PageCache::new(quiet_config(8 * MIB)).unwrap();
    let f = cache.open(store.clone()).unwrap();
    let data = pattern(64 * PAGE, 1);
    f.write_at(0, &data).unwrap();
    f.fsync().unwrap();
    store.set_len(PAGE as u64).unwrap();
    f.invalidate().unwrap();
    let mut buf = vec![0u8; 8 * PAGE];
    let e = f.read_exact_at(32 * PAGE as u64, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "{e}");
}
