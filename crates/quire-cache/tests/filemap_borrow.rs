//! `CachedFile::with_folio`: a hit lends the folio's bytes to the closure without taking a
//! reference (the borrow slots of `mem/borrow.rs`). The bytes the closure sees must stay the
//! ones it started with while other threads write the page in place, evict or truncate it; a
//! closure may write, borrow again or panic; and every frame comes back once the borrows end.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use quire::filemap::{CachedFile, PageCache};
use quire::stats::Snapshot;
use quire::store::MemStore;

use common::{check_no_leak, pattern, quiet_config, same, Watchdog, PAGE};

/// A cache of `capacity` bytes with base-page folios only (one page, one folio, one frame) and
/// no readahead beyond what a read asks for: the tests count a folio's references, and a
/// readahead job holds one on each folio it reads (see [`settle`]).
fn cache(capacity: usize) -> PageCache {
    let mut cfg = quiet_config(capacity);
    cfg.max_folio_order = 0;
    cfg.readahead_max = 0;
    PageCache::new(cfg).unwrap()
}

/// Page `index` within the bytes of the folio that starts at page `first`.
fn page(bytes: &[u8], first: u64, index: u64) -> &[u8] {
    let at = (index - first) as usize * PAGE;
    &bytes[at..at + PAGE]
}

/// The count of page `index`'s folio as seen from inside a `with_folio` of it, through a
/// reference of its own: 2 (the index's and this one) when the outer call borrowed, 3 when it
/// took a reference.
fn count_inside(f: &CachedFile, index: u64) -> u32 {
    f.with_folio(index, |_, _| f.read_folio(index).unwrap().ref_count())
        .unwrap()
}

/// Whether a `with_folio` of page `index` borrows (takes no reference), after calls that leave
/// the thread a translation of it (a miss leaves none; the hit after it does).
fn borrows(f: &CachedFile, index: u64) -> bool {
    f.with_folio(index, |_, _| ()).unwrap();
    f.with_folio(index, |_, _| ()).unwrap();
    match count_inside(f, index) {
        2 => true,
        3 => false,
        n => panic!("page {index}: unexpected count {n} inside with_folio"),
    }
}

/// Waits (2 s at most) until nothing but the index holds pages `pages` of `f`. A read of
/// several pages reads the first itself and hands the rest to an I/O thread, whose job unlocks
/// each folio before it drops its reference: on a loaded machine the reader can be woken and
/// go on while the job still holds one.
fn settle(f: &CachedFile, pages: std::ops::Range<u64>) {
    let start = Instant::now();
    for index in pages {
        // The index's reference and the one `read_folio` returns.
        while f.read_folio(index).unwrap().ref_count() != 2 {
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "page {index}: a reference is still held 2 s after the read"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Frames handed out by the pool and not cached by any file (a borrowed folio whose free is
/// deferred while the borrow lasts, a reference held past the folio's removal). Reading the
/// cache's counts frees the deferred folios whose borrows have ended.
fn uncached_frames(cache: &PageCache) -> usize {
    let s = cache.stats_exact();
    s.frames - s.free_frames - s.cached_frames
}

/// Whether [`uncached_frames`] is `n` within 2 s: a background thread (a readahead job) may
/// hold a folio for a moment, but a frame kept or freed wrongly stays so.
fn settles_to(cache: &PageCache, n: usize) -> bool {
    let start = Instant::now();
    while uncached_frames(cache) != n {
        if start.elapsed() > Duration::from_secs(2) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Asserts [`settles_to`].
#[track_caller]
fn expect_uncached(cache: &PageCache, n: usize, what: &str) {
    assert!(
        settles_to(cache, n),
        "{what}: {} frames neither cached nor free, not {n}",
        uncached_frames(cache)
    );
}

#[test]
fn a_hit_borrows_and_the_referenced_path_agrees() {
    let data = pattern(8 * PAGE, 3);
    let cache = cache(1 << 20);
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    for index in 0..8u64 {
        let first_call = f
            .with_folio(index, |b, first| page(b, first, index).to_vec())
            .unwrap();
        let i = index as usize;
        same(&first_call, &data[i * PAGE..(i + 1) * PAGE], "first call");
        assert!(borrows(&f, index), "page {index}: a repeated hit borrows");
        let hit = f
            .with_folio(index, |b, first| page(b, first, index).to_vec())
            .unwrap();
        same(&hit, &data[i * PAGE..(i + 1) * PAGE], "borrowed");
    }
    drop(f);
    check_no_leak(&cache, "after borrows");
}

/// A borrower reads whole pages twice per closure while one thread rewrites the same pages in
/// place (each write one generation, every byte of the page the same) and another evicts them:
/// the two snapshots of a closure must be equal and each a single generation.
#[test]
fn borrowed_bytes_stay_stable_under_writes_and_eviction() {
    stability(false);
}

/// [`borrowed_bytes_stay_stable_under_writes_and_eviction`] with the borrows made by a
/// `FileReader` (its own translations).
#[test]
fn a_reader_s_borrowed_bytes_stay_stable_under_writes_and_eviction() {
    stability(true);
}

fn stability(via_reader: bool) {
    const PAGES: u64 = 4;
    let _dog = Watchdog::arm(Duration::from_secs(30), "stability");
    let cache = cache(1 << 20);
    let f = Arc::new(
        cache
            .open(MemStore::from_vec(vec![0; PAGES as usize * PAGE]))
            .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let evictions = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(3));
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            start.wait();
            let mut gen = 0u8;
            while !stop.load(Ordering::Relaxed) {
                for index in 0..PAGES {
                    gen = gen % 250 + 1;
                    f.write_all_at(index * PAGE as u64, &[gen; PAGE]).unwrap();
                    writes.fetch_add(1, Ordering::Relaxed);
                    // A pause: the borrower's translation is fresh again for a while (each
                    // write moves the folio's sequence, and a stale translation takes the
                    // referenced path), so that writes land in the middle of borrows.
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(20) {
                        std::hint::spin_loop();
                    }
                }
            }
        });
        let evictor = s.spawn(|| {
            start.wait();
            while !stop.load(Ordering::Relaxed) {
                f.invalidate().unwrap();
                evictions.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(50));
            }
        });
        start.wait();
        let mut reader = via_reader.then(|| f.reader());
        let began = Instant::now();
        let mut closures = 0u64;
        let mut generations = std::collections::HashSet::new();
        while began.elapsed() < Duration::from_millis(1500) {
            // Several closures in a row on each page: a closure after a fallback (which
            // refreshes the thread's translation) borrows until the page's next write.
            for index in (0..PAGES).flat_map(|i| std::iter::repeat_n(i, 8)) {
                let twice = |bytes: &[u8], first: u64| {
                    let p = page(bytes, first, index);
                    let a = p.to_vec();
                    // Some work between the two reads, touching the bytes throughout.
                    let mut sum = 0u64;
                    for _ in 0..4 {
                        sum = p
                            .iter()
                            .fold(sum, |s, &x| s.wrapping_mul(31) ^ u64::from(x));
                        std::hint::black_box(sum);
                    }
                    (a, p.to_vec())
                };
                let (a, b) = match reader.as_mut() {
                    Some(r) => r.with_folio(index, twice),
                    None => f.with_folio(index, twice),
                }
                .unwrap();
                closures += 1;
                assert!(
                    a == b,
                    "page {index}: borrowed bytes changed inside the closure \
                     (first byte {} then {})",
                    a[0],
                    b[0]
                );
                assert!(
                    a.iter().all(|&x| x == a[0]),
                    "page {index}: a borrowed page mixes generations ({} and {})",
                    a[0],
                    a.iter().find(|&&x| x != a[0]).unwrap()
                );
                generations.insert(a[0]);
            }
        }
        drop(reader);
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        evictor.join().unwrap();
        eprintln!(
            "{closures} closures, {} writes, {} evictions, {} generations seen",
            writes.load(Ordering::Relaxed),
            evictions.load(Ordering::Relaxed),
            generations.len()
        );
        assert!(generations.len() > 2, "the borrower saw the writes");
    });
    drop(Arc::into_inner(f).unwrap());
    check_no_leak(&cache, "after the stability run");
}

/// A closure that writes the page it borrows: no deadlock, its bytes stay the old ones (the
/// write goes to a copy), and reads after it see the new bytes; the old folio is freed as the
/// borrow ends.
#[test]
fn a_closure_that_writes_its_own_page() {
    let _dog = Watchdog::arm(Duration::from_secs(10), "self-write");
    let data = pattern(4 * PAGE, 9);
    let cache = cache(1 << 20);
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    assert!(borrows(&f, 1));
    let (before, during) = f
        .with_folio(1, |bytes, first| {
            let before = page(bytes, first, 1).to_vec();
            f.write_all_at(PAGE as u64, &[0x5a; PAGE]).unwrap();
            // The old folio is out of the index and its last reference gone: its free waits
            // for this borrow.
            expect_uncached(
                &cache,
                1,
                "the borrowed folio's frame is kept until the borrow ends",
            );
            let mut fresh = vec![0; PAGE];
            f.read_exact_at(PAGE as u64, &mut fresh).unwrap();
            assert_eq!(fresh, [0x5a; PAGE], "a read inside sees the write");
            (before, page(bytes, first, 1).to_vec())
        })
        .unwrap();
    same(&before, &data[PAGE..2 * PAGE], "borrowed before the write");
    same(&during, &before, "borrowed after the closure's write");
    expect_uncached(&cache, 0, "the old folio freed at the end");
    let mut after = vec![0; PAGE];
    f.read_exact_at(PAGE as u64, &mut after).unwrap();
    assert_eq!(after, [0x5a; PAGE]);
    let borrowed = f
        .with_folio(1, |bytes, first| page(bytes, first, 1).to_vec())
        .unwrap();
    assert_eq!(borrowed, [0x5a; PAGE], "a later borrow sees the new bytes");
    assert!(borrows(&f, 1), "the new folio is borrowed too");
    drop(f);
    check_no_leak(&cache, "after a self-write");
}

/// A `with_folio` inside a `with_folio` (the thread's slot is taken: a reference instead) gives
/// the right bytes, of the same page and of another.
#[test]
fn a_nested_with_folio_takes_a_reference() {
    let data = pattern(4 * PAGE, 21);
    let cache = cache(1 << 20);
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    assert!(borrows(&f, 2));
    assert!(borrows(&f, 3));
    f.with_folio(2, |bytes, first| {
        let outer = page(bytes, first, 2).to_vec();
        let (inner, count) = f
            .with_folio(2, |b, first| {
                (
                    page(b, first, 2).to_vec(),
                    f.read_folio(2).unwrap().ref_count(),
                )
            })
            .unwrap();
        same(&inner, &outer, "nested, same page");
        assert_eq!(count, 3, "the nested call holds a reference");
        let other = f
            .with_folio(3, |b, first| page(b, first, 3).to_vec())
            .unwrap();
        same(&other, &data[3 * PAGE..4 * PAGE], "nested, another page");
        same(&outer, &data[2 * PAGE..3 * PAGE], "outer");
    })
    .unwrap();
    assert!(borrows(&f, 2), "the slot is free again");
    drop(f);
    check_no_leak(&cache, "after nesting");
}

/// `FileReader::with_folio`: the first call on a cached folio takes a reference (a walk that
/// leaves the reader a translation), the next borrows; the bytes are the handle's; a
/// reader's borrow inside a handle's (and the other way round) takes a reference; the hits reach
/// the counters when the reader is dropped.
#[test]
fn a_reader_borrows_as_the_handle_does() {
    let data = pattern(8 * PAGE, 71);
    let cache = cache(1 << 20);
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    let mut all = vec![0; data.len()];
    f.read_exact_at(0, &mut all).unwrap();
    settle(&f, 0..8);
    let before = Snapshot::take();
    let mut r = f.reader();
    for index in 0..8u64 {
        let i = index as usize;
        // Base-page folios share the reader's slot (one per 512 pages): each page's first call
        // finds the previous page's translation there.
        for call in 0..3 {
            let (got, count) = r
                .with_folio(index, |b, first| {
                    (
                        page(b, first, index).to_vec(),
                        f.read_folio(index).unwrap().ref_count(),
                    )
                })
                .unwrap();
            same(
                &got,
                &data[i * PAGE..(i + 1) * PAGE],
                "a reader's with_folio",
            );
            let want = if call == 0 { 3 } else { 2 };
            assert_eq!(count, want, "page {index}, call {call}: the count inside");
        }
    }
    drop(r);
    let hits = Snapshot::take().since(&before).vmstat().page_cache_hits;
    assert!(hits >= 16, "the reader's 16 hits counted ({hits})");

    let mut r = f.reader();
    r.with_folio(2, |_, _| ()).unwrap();
    assert!(borrows(&f, 2));
    let nested = f
        .with_folio(2, |_, _| {
            r.with_folio(2, |_, _| f.read_folio(2).unwrap().ref_count())
                .unwrap()
        })
        .unwrap();
    assert_eq!(
        nested, 3,
        "a reader's call inside a handle's borrow holds a reference"
    );
    let nested = r
        .with_folio(2, |_, _| {
            f.with_folio(2, |_, _| f.read_folio(2).unwrap().ref_count())
        })
        .unwrap()
        .unwrap();
    assert_eq!(
        nested, 3,
        "a handle's call inside a reader's borrow holds a reference"
    );
    assert!(borrows(&f, 2), "the slot is free again");
    drop(r);
    drop(f);
    check_no_leak(&cache, "after a reader's borrows");
}

/// The borrowed page is cut off by another thread's `set_len` while the closure runs: the
/// closure's bytes stay intact, its frame is not reused until the borrow ends, and then it is
/// freed.
#[test]
fn truncating_a_borrowed_page() {
    let _dog = Watchdog::arm(Duration::from_secs(10), "truncation");
    let data = pattern(8 * PAGE, 33);
    let cache = cache(1 << 20);
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    for index in 0..8 {
        f.with_folio(index, |_, _| ()).unwrap();
    }
    assert!(borrows(&f, 5));
    expect_uncached(&cache, 0, "all cached or free");
    f.with_folio(5, |bytes, first| {
        let before = page(bytes, first, 5).to_vec();
        std::thread::scope(|s| {
            s.spawn(|| f.set_len(2 * PAGE as u64 + 100).unwrap())
                .join()
                .unwrap();
        });
        assert_eq!(f.len(), 2 * PAGE as u64 + 100);
        assert!(f.cached_frames() <= 3, "pages 3.. are out of the index");
        expect_uncached(
            &cache,
            1,
            "the borrowed frame is neither cached nor free while borrowed",
        );
        // Reuse the freed frames meanwhile: a new file fills the cache's free frames.
        let g = cache
            .open(MemStore::from_vec(vec![0xee; 16 * PAGE]))
            .unwrap();
        let mut buf = vec![0; 16 * PAGE];
        g.read_exact_at(0, &mut buf).unwrap();
        let after = page(bytes, first, 5).to_vec();
        same(
            &before,
            &data[5 * PAGE..6 * PAGE],
            "borrowed before the cut",
        );
        same(&after, &before, "borrowed after the cut");
    })
    .unwrap();
    expect_uncached(&cache, 0, "the cut folio freed at the end");
    let err = f.with_folio(5, |_, _| ()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    // The page holding the new end: its tail is zero, its head the old bytes.
    let tail = f
        .with_folio(2, |bytes, first| page(bytes, first, 2).to_vec())
        .unwrap();
    same(&tail[..100], &data[2 * PAGE..2 * PAGE + 100], "kept head");
    assert!(tail[100..].iter().all(|&b| b == 0), "zeroed tail");
    drop(f);
    check_no_leak(&cache, "after a truncation under a borrow");
}

/// Past the end of the file `with_folio` fails as `read_folio` does — also through a thread
/// translation made while the page was inside the file.
#[test]
fn past_the_end_fails_as_read_folio_does() {
    let data = pattern(3 * PAGE + 10, 4);
    let cache = cache(1 << 20);
    let f = cache.open(MemStore::from_vec(data)).unwrap();
    for index in [4u64, 5, 1 << 30] {
        let want = f.read_folio(index).unwrap_err();
        let got = f.with_folio(index, |_, _| unreachable!()).unwrap_err();
        assert_eq!(got.kind(), want.kind(), "page {index}");
        assert_eq!(
            got.kind(),
            std::io::ErrorKind::UnexpectedEof,
            "page {index}"
        );
        assert_eq!(got.to_string(), want.to_string(), "page {index}");
    }
    // Page 3 holds the last 10 bytes, then zeros.
    let last = f
        .with_folio(3, |bytes, first| page(bytes, first, 3).to_vec())
        .unwrap();
    assert!(last[10..].iter().all(|&b| b == 0));
    assert!(borrows(&f, 3));
    f.set_len(3 * PAGE as u64).unwrap();
    let want = f.read_folio(3).unwrap_err();
    let got = f.with_folio(3, |_, _| unreachable!()).unwrap_err();
    assert_eq!(got.kind(), want.kind(), "a cut page, translated before");
    assert_eq!(got.to_string(), want.to_string());
    drop(f);
    check_no_leak(&cache, "after reads past the end");
}

/// A closure that panics ends its borrow: the thread borrows again afterwards (its slot was
/// emptied), and a free deferred for the borrow (its page rewritten before the panic) is carried
/// out once the unwinding ended it, once.
#[test]
fn a_panicking_closure_empties_its_slot() {
    let data = pattern(4 * PAGE, 17);
    let cache = cache(1 << 20);
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    assert!(borrows(&f, 0));
    let r = catch_unwind(AssertUnwindSafe(|| {
        f.with_folio(0, |_, _| panic!("in the closure")).unwrap()
    }));
    assert!(r.is_err());
    assert!(borrows(&f, 0), "the slot is free again after a panic");
    same(
        &f.with_folio(0, |b, first| page(b, first, 0).to_vec())
            .unwrap(),
        &data[..PAGE],
        "after a panic",
    );
    expect_uncached(&cache, 0, "a panic freed nothing");

    // A panic with a deferred free pending.
    let kept = std::cell::Cell::new(false);
    let r = catch_unwind(AssertUnwindSafe(|| {
        f.with_folio(0, |_, _| {
            f.write_all_at(0, &[1; PAGE]).unwrap();
            kept.set(settles_to(&cache, 1));
            panic!("after a write");
        })
        .unwrap()
    }));
    assert!(r.is_err());
    assert!(kept.get(), "the rewritten folio waited for the borrow");
    expect_uncached(&cache, 0, "the deferred free was carried out");
    assert!(borrows(&f, 0), "the slot is free again");
    assert_eq!(
        f.with_folio(0, |b, first| page(b, first, 0).to_vec())
            .unwrap(),
        [1; PAGE]
    );
    drop(f);
    check_no_leak(&cache, "after panics");
}

/// Borrowing threads come and go (each takes a slot, from those given back by threads that
/// exited, or a new one): each borrows, reads the right bytes, and no frame leaks.
#[test]
fn many_short_lived_borrowing_threads() {
    let data = pattern(16 * PAGE, 50);
    let cache = cache(1 << 20);
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    for round in 0..8u8 {
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let f = &f;
                s.spawn(move || {
                    let index = t * 4 + u64::from(round % 4);
                    assert!(borrows(f, index), "page {index}: a new thread borrows");
                    let want = f.read_folio(index).unwrap().bytes().unwrap()[..PAGE].to_vec();
                    let got = f
                        .with_folio(index, |bytes, first| page(bytes, first, index).to_vec())
                        .unwrap();
                    same(&got, &want, "a short-lived thread's borrow");
                });
            }
        });
        f.invalidate().unwrap();
    }
    drop(f);
    check_no_leak(&cache, "after short-lived borrowers");
}

/// A page cut off and the file grown again reads as zeros through `with_folio`, even for a
/// thread that kept a translation of the old folio, which a reference elsewhere keeps alive
/// (its removal from the index moved its sequence).
#[test]
fn a_cut_and_regrown_page_reads_zeros() {
    let data = pattern(8 * PAGE, 61);
    let cache = cache(1 << 20);
    let f = cache.open(MemStore::from_vec(data.clone())).unwrap();
    assert!(borrows(&f, 5));
    let held = f.read_folio(5).unwrap();
    f.set_len(2 * PAGE as u64).unwrap();
    f.set_len(8 * PAGE as u64).unwrap();
    let now = f
        .with_folio(5, |bytes, first| page(bytes, first, 5).to_vec())
        .unwrap();
    assert!(now.iter().all(|&b| b == 0), "a regrown page reads as zeros");
    same(
        &held.bytes().unwrap()[..PAGE],
        &data[5 * PAGE..6 * PAGE],
        "the reference keeps the old bytes",
    );
    drop(held);
    expect_uncached(&cache, 0, "the old folio freed with its reference");
    drop(f);
    check_no_leak(&cache, "after a cut and a regrowth");
}
