//! File mappings (`Space::map_file`): the file's bytes through a space, writes reaching the
//! store through write-back (`folio_mkclean`) and unmap (the dirty-bit transfer), truncation
//! and `write_at` reaching the spaces, fork, mlock, reclaim of mapped pages, bad input, and
//! threads sharing counters in a mapped file under memory pressure.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{pattern, Rng};
use quire::filemap::{CachedFile, PageCache};
use quire::mem::dirtybit::DirtyBitMode;
use quire::mm::{AnonConfig, AnonMemory, MmError, PageState};
use quire::stats::Event;
use quire::store::MemStore;
use quire::vmscan::Lru;

const PAGE: u64 = 4096;

fn setup(budget: usize, mode: DirtyBitMode) -> (PageCache, AnonMemory) {
    let mut cfg = common::quiet_config(budget);
    cfg.alloc_timeout = Duration::from_millis(500);
    let cache = PageCache::new(cfg).unwrap();
    let mut ac = AnonConfig::new();
    ac.dirty_bit = mode;
    let anon = AnonMemory::new(&cache, ac).unwrap();
    (cache, anon)
}

fn file_with(cache: &PageCache, data: Vec<u8>) -> (CachedFile, Arc<MemStore>) {
    let store = Arc::new(MemStore::from_vec(data));
    (cache.open(store.clone()).unwrap(), store)
}

fn read_space(space: &quire::mm::Space, addr: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    space.read(addr, &mut buf).unwrap();
    buf
}

#[test]
fn a_read_only_mapping_shows_the_file_and_refuses_writes() {
    let (cache, anon) = setup(4 << 20, DirtyBitMode::Auto);
    let data = pattern(10 * PAGE as usize, 7);
    let (file, store) = file_with(&cache, data.clone());
    let space = anon.new_space(32).unwrap();
    space.map_file(&file, 2..8, 20, false).unwrap();
    assert_eq!(file.mappings(), 1);
    assert_eq!(
        read_space(&space, 20 * PAGE, 6 * PAGE as usize),
        data[2 * PAGE as usize..8 * PAGE as usize]
    );
    assert_eq!(
        space.page_state(21).unwrap(),
        PageState::Present { writable: false }
    );
    assert!(matches!(
        space.write(21 * PAGE, b"no"),
        Err(MmError::ReadOnly { page: 21 })
    ));
    assert!(matches!(
        space.with_page(21, |_| ()),
        Err(MmError::SharedPage { page: 21 })
    ));
    // Pages outside the mapping are anonymous as before.
    space.write(0, b"anon").unwrap();
    assert_eq!(space.with_page(0, |b| b[..4].to_vec()).unwrap(), b"anon");
    drop(space);
    assert_eq!(file.mappings(), 0, "exit takes the mapping out of the file");
    assert_eq!(file.flush().map(|_| store.contents()).unwrap(), data);
    drop(file);
    common::check_no_leak(&cache, "read-only mapping");
}

fn writes_reach_the_store(mode: DirtyBitMode) {
    let (cache, anon) = setup(4 << 20, mode);
    let data = pattern(8 * PAGE as usize, 1);
    let (file, store) = file_with(&cache, data.clone());
    let space = anon.new_space(8).unwrap();
    space.map_file(&file, 0..8, 0, true).unwrap();
    let before = cache.stats_exact();

    space.write(3 * PAGE + 100, b"first").unwrap();
    assert_eq!(
        space.page_state(3).unwrap(),
        PageState::Present { writable: true }
    );
    assert_eq!(
        cache.stats_exact().dirty_frames,
        1,
        "the write fault dirtied the folio"
    );
    let mut via_cache = vec![0; 5];
    file.read_exact_at(3 * PAGE + 100, &mut via_cache).unwrap();
    assert_eq!(
        via_cache, b"first",
        "one page cache: read_at sees the mapping's write"
    );

    file.fsync().unwrap();
    assert_eq!(&store.synced_contents()[3 * 4096 + 100..][..5], b"first");
    assert_eq!(cache.stats_exact().dirty_frames, 0);
    assert_eq!(
        space.page_state(3).unwrap(),
        PageState::Present { writable: false },
        "write-back write-protected the pte (folio_mkclean)"
    );
    let mid = cache.stats_exact();
    assert!(
        mid.vmstat.get(Event::DirtyTests) > before.vmstat.get(Event::DirtyTests),
        "folio_mkclean tested the frame's dirty bit"
    );

    // A write after write-back faults and dirties the folio again.
    space.write(3 * PAGE + 100, b"again").unwrap();
    assert_eq!(
        cache.stats_exact().dirty_frames,
        1,
        "the next write re-dirtied it"
    );
    file.fsync().unwrap();
    assert_eq!(&store.synced_contents()[3 * 4096 + 100..][..5], b"again");

    // Shared memory access: atomic words.
    space
        .with_shared_page(5, true, |p| {
            p.store_u64(8, 0x1122_3344_5566_7788).unwrap();
            assert_eq!(p.fetch_add_u64(8, 1).unwrap(), 0x1122_3344_5566_7788);
            assert_eq!(p.load_u64(8).unwrap(), 0x1122_3344_5566_7789);
        })
        .unwrap();
    drop(space);
    file.fsync().unwrap();
    assert_eq!(
        &store.synced_contents()[5 * 4096 + 8..][..8],
        &0x1122_3344_5566_7789u64.to_ne_bytes()
    );
    let mut want = data;
    want[3 * 4096 + 100..][..5].copy_from_slice(b"again");
    want[5 * 4096 + 8..][..8].copy_from_slice(&0x1122_3344_5566_7789u64.to_ne_bytes());
    assert_eq!(store.contents(), want, "nothing else changed");
    drop(file);
    common::check_no_leak(&cache, "writable mapping");
}

#[test]
fn writes_through_a_mapping_reach_the_store_hardware_bit() {
    writes_reach_the_store(DirtyBitMode::Auto);
}

#[test]
fn writes_through_a_mapping_reach_the_store_software_bit() {
    writes_reach_the_store(DirtyBitMode::Software);
}

#[test]
fn the_last_unmap_tests_the_dirty_bit_of_file_folios() {
    let (cache, anon) = setup(4 << 20, DirtyBitMode::Auto);
    let (file, store) = file_with(&cache, vec![0; 4 * PAGE as usize]);
    let a = anon.new_space(4).unwrap();
    let b = anon.new_space(4).unwrap();
    a.map_file(&file, 0..4, 0, true).unwrap();
    b.map_file(&file, 0..4, 0, false).unwrap();
    a.write(PAGE, b"from a").unwrap();
    assert_eq!(read_space(&b, PAGE, 6), b"from a", "both map one folio");
    let t0 = anon.stats().get(Event::DirtyTests);
    let x0 = anon.stats().get(Event::DirtyTransfers);
    a.munmap(0..4).unwrap();
    assert_eq!(
        anon.stats().get(Event::DirtyTests),
        t0,
        "b still maps the folio: not the last unmap"
    );
    drop(b);
    let s = anon.stats();
    assert_eq!(
        s.get(Event::DirtyTests) - t0,
        1,
        "the last unmap of the written folio tested it (file folios are always tested)"
    );
    assert_eq!(
        s.get(Event::DirtyTransfers) - x0,
        1,
        "and found the write a recorded (the bit was cleared when the folio was first mapped)"
    );
    assert_eq!(file.mappings(), 0);
    drop(file);
    assert_eq!(
        &store.contents()[4096..][..6],
        b"from a",
        "close wrote it back"
    );
    drop(a);
    common::check_no_leak(&cache, "last unmap");
}

#[test]
fn write_at_and_truncation_reach_the_spaces() {
    let (cache, anon) = setup(4 << 20, DirtyBitMode::Auto);
    let data = pattern(6 * PAGE as usize, 9);
    let (file, _store) = file_with(&cache, data.clone());
    let space = anon.new_space(6).unwrap();
    space.map_file(&file, 0..6, 0, true).unwrap();
    space.write(PAGE, b"mapped").unwrap();
    // A write through the file to a mapped page: the space sees it (it faults again).
    file.write_at(PAGE + 2, b"FILE").unwrap();
    assert_eq!(read_space(&space, PAGE, 6), b"maFILE");
    let mut got = vec![0; 6];
    file.read_exact_at(PAGE, &mut got).unwrap();
    assert_eq!(got, b"maFILE");

    // Truncation: pages past the new end go from the space; touching them is past EOF.
    space.write(4 * PAGE, b"doomed").unwrap();
    file.set_len(2 * PAGE + 10).unwrap();
    assert_eq!(space.page_state(4).unwrap(), PageState::None);
    assert!(matches!(
        space.read(4 * PAGE, &mut [0; 1]),
        Err(MmError::PastEof {
            page: 4,
            file_pages: 3
        })
    ));
    // The page holding the new end reads zeros past it.
    let tail = read_space(&space, 2 * PAGE, PAGE as usize);
    assert_eq!(tail[..10], data[2 * PAGE as usize..][..10]);
    assert!(tail[10..].iter().all(|&b| b == 0));
    // Growing the file again: the pages come back (as zeros) through the same mapping.
    file.set_len(6 * PAGE).unwrap();
    assert_eq!(read_space(&space, 4 * PAGE, 6), vec![0; 6]);
    drop(space);
    drop(file);
    common::check_no_leak(&cache, "truncation");
}

#[test]
fn writes_past_the_end_never_become_file_data() {
    let (cache, anon) = setup(4 << 20, DirtyBitMode::Auto);
    for grow_by_write in [false, true] {
        let (file, store) = file_with(&cache, vec![7; PAGE as usize + 10]);
        let space = anon.new_space(2).unwrap();
        space.map_file(&file, 0..2, 0, true).unwrap();
        // The mapping covers the whole last page: a write past the end lands in the cache.
        space.write(PAGE + 100, b"beyond").unwrap();
        assert_eq!(read_space(&space, PAGE + 100, 6), b"beyond");
        file.fsync().unwrap();
        assert_eq!(
            store.contents().len(),
            PAGE as usize + 10,
            "not written to the store"
        );
        if grow_by_write {
            file.write_at(PAGE + 200, b"end").unwrap();
        } else {
            file.set_len(2 * PAGE).unwrap();
        }
        let mut got = vec![0xff; 6];
        file.read_exact_at(PAGE + 100, &mut got).unwrap();
        assert_eq!(
            got, [0; 6],
            "the grown file reads zeros there (grown by write: {grow_by_write})"
        );
        assert_eq!(
            read_space(&space, PAGE + 100, 6),
            [0; 6],
            "and so does the space"
        );
        let mut kept = [0; 10];
        file.read_exact_at(PAGE, &mut kept).unwrap();
        assert_eq!(kept, [7; 10], "the file's own bytes stay");
        drop(space);
        drop(file);
    }
    common::check_no_leak(&cache, "writes past the end");
}

#[test]
fn a_zero_copy_reader_keeps_its_bytes_while_a_space_writes() {
    let (cache, anon) = setup(4 << 20, DirtyBitMode::Auto);
    let data = pattern(2 * PAGE as usize, 5);
    let (file, store) = file_with(&cache, data.clone());
    let space = anon.new_space(2).unwrap();
    space.map_file(&file, 0..2, 0, true).unwrap();
    space.write(0, b"before").unwrap();
    let held = file.read_folio(0).unwrap();
    assert_eq!(
        space.page_state(0).unwrap(),
        PageState::Present { writable: false },
        "the zero-copy lookup write-protected the space's pte"
    );
    let seen = held.bytes().unwrap()[..PAGE as usize].to_vec();
    assert_eq!(&seen[..6], b"before");
    space.write(0, b"after!").unwrap();
    assert_eq!(
        held.bytes().unwrap()[..PAGE as usize],
        seen[..],
        "the reader's bytes did not change"
    );
    assert_eq!(read_space(&space, 0, 6), b"after!");
    let mut now = [0; 6];
    file.read_exact_at(0, &mut now).unwrap();
    assert_eq!(
        &now, b"after!",
        "the space wrote a copy that took the folio's place"
    );
    drop(held);
    drop(space);
    file.fsync().unwrap();
    assert_eq!(&store.synced_contents()[..6], b"after!");
    drop(file);
    common::check_no_leak(&cache, "zero-copy reader");
}

#[test]
fn an_owned_zero_copy_reader_keeps_its_bytes_while_a_space_writes() {
    let (cache, anon) = setup(4 << 20, DirtyBitMode::Auto);
    let data = pattern(2 * PAGE as usize, 9);
    let (file, store) = file_with(&cache, data.clone());
    let space = anon.new_space(2).unwrap();
    space.map_file(&file, 0..2, 0, true).unwrap();
    space.write(PAGE, b"before").unwrap();
    let held = file.read_folio_owned(1).unwrap();
    assert_eq!(
        space.page_state(1).unwrap(),
        PageState::Present { writable: false },
        "the owned lookup write-protected the space's pte, as read_folio does"
    );
    let at = held.offset_of(1).unwrap();
    let seen = held[at..at + PAGE as usize].to_vec();
    assert_eq!(&seen[..6], b"before");
    // The reference moves to another thread, which reads it while the space writes.
    let reader = std::thread::spawn(move || {
        let mut same = true;
        for _ in 0..1000 {
            same &= held[at..at + PAGE as usize] == seen[..];
        }
        (same, held)
    });
    for i in 0..100u8 {
        space.write(PAGE, &[i; 6]).unwrap();
    }
    let (same, held) = reader.join().unwrap();
    assert!(same, "the owned reader's bytes did not change");
    assert_eq!(read_space(&space, PAGE, 6), [99; 6]);
    drop(space);
    file.fsync().unwrap();
    assert_eq!(&store.synced_contents()[PAGE as usize..][..6], &[99; 6]);
    drop(file);
    assert_eq!(
        &held[at..at + 6],
        b"before",
        "still there after the file closed"
    );
    drop(held);
    common::check_no_leak(&cache, "owned zero-copy reader");
}

#[test]
fn fork_shares_the_file_mapping() {
    let (cache, anon) = setup(4 << 20, DirtyBitMode::Auto);
    let (file, store) = file_with(&cache, vec![0; 4 * PAGE as usize]);
    let parent = anon.new_space(8).unwrap();
    parent.map_file(&file, 0..4, 4, true).unwrap();
    parent.write(0, b"private").unwrap();
    parent.write(4 * PAGE, b"shared").unwrap();
    let child = parent.fork().unwrap();
    assert_eq!(file.mappings(), 2);
    assert_eq!(
        child.page_state(4).unwrap(),
        PageState::None,
        "faulted in lazily"
    );
    child.write(4 * PAGE + 6, b"+child").unwrap();
    child.write(0, b"PRIVATE").unwrap();
    assert_eq!(read_space(&parent, 4 * PAGE, 12), b"shared+child");
    assert_eq!(
        read_space(&parent, 0, 7),
        b"private",
        "anonymous pages are copied on write"
    );
    drop(parent);
    drop(child);
    file.fsync().unwrap();
    assert_eq!(&store.synced_contents()[..12], b"shared+child");
    drop(file);
    common::check_no_leak(&cache, "fork");
}

#[test]
fn a_partial_munmap_keeps_the_rest_of_the_mapping() {
    let (cache, anon) = setup(4 << 20, DirtyBitMode::Auto);
    let data = pattern(8 * PAGE as usize, 4);
    let (file, _store) = file_with(&cache, data.clone());
    let space = anon.new_space(16).unwrap();
    space.map_file(&file, 0..8, 4, true).unwrap();
    space.write(6 * PAGE, b"x").unwrap();
    space.munmap(6..8).unwrap();
    assert_eq!(file.mappings(), 2, "split in two");
    assert_eq!(
        read_space(&space, 6 * PAGE, 1),
        [0],
        "unmapped: anonymous zeros"
    );
    assert_eq!(read_space(&space, 5 * PAGE, 4), data[4096..][..4]);
    assert_eq!(read_space(&space, 8 * PAGE, 4), data[4 * 4096..][..4]);
    let mut got = [0];
    file.read_exact_at(2 * PAGE, &mut got).unwrap();
    assert_eq!(got, *b"x", "the unmapped page's write stayed in the file");
    // A new mapping may go in the hole; one overlapping the rest may not.
    assert!(matches!(
        space.map_file(&file, 0..3, 5, false),
        Err(MmError::Overlap { page: 5 })
    ));
    space.map_file(&file, 0..2, 6, false).unwrap();
    assert_eq!(read_space(&space, 6 * PAGE, 4), data[..4]);
    drop(space);
    assert_eq!(file.mappings(), 0);
    drop(file);
    common::check_no_leak(&cache, "partial munmap");
}

#[test]
fn bad_input_gets_clear_errors() {
    let (cache, anon) = setup(4 << 20, DirtyBitMode::Auto);
    let (file, _store) = file_with(&cache, vec![1; 3 * PAGE as usize + 1]);
    let space = anon.new_space(8).unwrap();
    assert!(matches!(
        space.map_file(&file, 0..5, 0, true),
        Err(MmError::PastEof {
            page: 4,
            file_pages: 4
        })
    ));
    assert!(matches!(
        space.map_file(&file, 0..4, 6, true),
        Err(MmError::OutOfRange { .. })
    ));
    assert!(matches!(
        space.map_file(&file, 2..2, 0, true),
        Err(MmError::EmptyRange { start: 2, end: 2 })
    ));
    let other = PageCache::new(common::quiet_config(1 << 20)).unwrap();
    let (foreign, _) = file_with(&other, vec![0; 4096]);
    assert!(matches!(
        space.map_file(&foreign, 0..1, 0, true),
        Err(MmError::OtherCache)
    ));
    drop(foreign);
    space.map_file(&file, 0..4, 0, true).unwrap();
    space
        .with_shared_page(1, false, |p| {
            assert!(matches!(p.write(0, b"x"), Err(MmError::NotWritable)));
            assert!(matches!(
                p.read(4090, &mut [0; 7]),
                Err(MmError::BadOffset { .. })
            ));
            assert!(matches!(p.load_u64(3), Err(MmError::BadOffset { .. })));
            assert!(matches!(p.load_u64(4096), Err(MmError::BadOffset { .. })));
        })
        .unwrap();
    // The last page holds one byte of the file; the rest of it reads as zeros.
    assert_eq!(read_space(&space, 3 * PAGE, 2), [1, 0]);
    assert_eq!(file.mappings(), 1, "nothing was added by the failed calls");
    drop(space);
    drop(file);
    common::check_no_leak(&cache, "bad input");
}

#[test]
fn mlocked_file_pages_stay_and_the_rest_is_reclaimed() {
    // 1 MiB budget, a 4 MiB file: the mapping cannot hold all of it.
    let (cache, anon) = setup(1 << 20, DirtyBitMode::Auto);
    let pages = 1024u64;
    let (file, store) = file_with(&cache, vec![0; (pages * PAGE) as usize]);
    let space = anon.new_space(pages).unwrap();
    space.map_file(&file, 0..pages, 0, true).unwrap();
    space.mlock(0..8).unwrap();
    assert_eq!(anon.stats().vmstat.get(Event::DirtyTests), 0);
    for p in 0..pages {
        space.write(p * PAGE + 8, &p.to_le_bytes()).unwrap();
    }
    let s = cache.stats_exact();
    assert!(
        s.lru(Lru::Unevictable) >= 8,
        "mlocked folios are unevictable"
    );
    for p in 0..8 {
        assert!(
            matches!(space.page_state(p).unwrap(), PageState::Present { .. }),
            "locked page {p} stayed mapped"
        );
    }
    assert!(
        s.vmstat.get(Event::PgSteal) > 0,
        "reclaim unmapped and freed mapped pages"
    );
    for p in 0..pages {
        assert_eq!(
            read_space(&space, p * PAGE + 8, 8),
            p.to_le_bytes(),
            "page {p}"
        );
    }
    drop(space);
    file.fsync().unwrap();
    let img = store.synced_contents();
    for p in 0..pages as usize {
        assert_eq!(
            img[p * 4096 + 8..][..8],
            (p as u64).to_le_bytes(),
            "page {p}"
        );
    }
    drop(file);
    common::check_no_leak(&cache, "mapped pages under pressure");
}

/// Threads of several spaces (forked from one another) add to counters in a file they all map
/// writable, on a budget smaller than the file, while another thread fsyncs and writes through
/// the file: no increment is lost, and the store ends with every one.
fn shared_counters(mode: DirtyBitMode) {
    let _dog = common::Watchdog::arm(Duration::from_secs(60), "shared counters");
    let (cache, anon) = setup(1 << 20, mode);
    let pages = 384u64; // 1.5 MiB of file on a 1 MiB budget
    let (file, store) = file_with(&cache, vec![0; (pages * PAGE) as usize]);
    let root = anon.new_space(pages).unwrap();
    root.map_file(&file, 0..pages, 0, true).unwrap();
    let spaces: Vec<_> = (0..3).map(|_| root.fork().unwrap()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_millis(1500);
    let shared = &file;
    std::thread::scope(|s| {
        for (t, space) in spaces.iter().enumerate() {
            let total = total.clone();
            s.spawn(move || {
                let mut rng = Rng(t as u64 + 11);
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let page = rng.below(pages as usize) as u64;
                    // Word 0 of each page is left to the file writer below.
                    let word = 8 * (1 + rng.below(511));
                    space
                        .with_shared_page(page, true, |p| p.fetch_add_u64(word, 1).unwrap())
                        .unwrap();
                    n += 1;
                    if rng.below(500) == 0 {
                        space.munmap(page..page + 1).unwrap();
                        let _ = space.map_file(shared, page..page + 1, page, true);
                    }
                }
                total.fetch_add(n, Ordering::Relaxed);
            });
        }
        let stop2 = stop.clone();
        s.spawn(move || {
            let mut rng = Rng(99);
            while !stop2.load(Ordering::Relaxed) {
                shared.fsync().unwrap();
                let page = rng.below(pages as usize) as u64;
                shared.write_at(page * PAGE, &[0xee; 8]).unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
    });
    drop(spaces);
    drop(root);
    file.fsync().unwrap();
    let img = store.synced_contents();
    let mut sum = 0u64;
    for p in 0..pages as usize {
        for w in 1..512 {
            sum += u64::from_ne_bytes(img[p * 4096 + w * 8..][..8].try_into().unwrap());
        }
    }
    let done = total.load(Ordering::Relaxed);
    assert!(done > 1000, "the threads got work done ({done})");
    assert_eq!(sum, done, "every increment reached the store");
    assert!(
        cache.stats_exact().vmstat.get(Event::PgSteal) > 0,
        "reclaim took mapped pages"
    );
    drop(file);
    common::check_no_leak(&cache, "shared counters");
}

#[test]
fn shared_counters_in_a_mapped_file_lose_nothing_hardware_bit() {
    shared_counters(DirtyBitMode::Auto);
}

#[test]
fn shared_counters_in_a_mapped_file_lose_nothing_software_bit() {
    shared_counters(DirtyBitMode::Software);
}
