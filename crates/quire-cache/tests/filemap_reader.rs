//! `FileReader`: a reader that keeps its read-side critical section across hits must read,
//! fail, count and mark exactly as the handle's own methods do, under writes, cuts, misses and
//! evictions, and concurrently with writers.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use quire::filemap::{PageCache, REPIN_EVERY};
use quire::store::MemStore;
use quire::vmscan::Lru;

use common::{check_no_leak, quiet_config, same, Rng, PAGE};

/// Random reads through a reader (`read_at`, `read_folio`, `with_folio`) and through the handle,
/// with writes and cuts between them, in a cache small enough that reads miss and folios are
/// evicted: both give the same results (lengths, bytes, errors) as a byte model of the file.
#[test]
fn a_reader_reads_what_the_handle_reads() {
    let mut cfg = quiet_config(1 << 20);
    cfg.max_folio_order = 3;
    let cache = PageCache::new(cfg).unwrap();
    let mut rng = Rng(0x5eed_1234);
    let mut model = rng.bytes(600 * 1024);
    let f = cache
        .open(Arc::new(MemStore::from_vec(model.clone())))
        .unwrap();
    let mut reader = f.reader();
    for step in 0..4000 {
        let ctx = format!("step {step}");
        match rng.below(20) {
            0 => {
                let off = rng.below(model.len() + 2 * PAGE);
                let n = rng.range(1, 3 * PAGE);
                let data = rng.bytes(n);
                f.write_at(off as u64, &data).unwrap();
                if model.len() < off + data.len() {
                    model.resize(off + data.len(), 0);
                }
                model[off..off + data.len()].copy_from_slice(&data);
            }
            1 => {
                let len = rng.below(700 * 1024);
                f.set_len(len as u64).unwrap();
                model.resize(len, 0);
            }
            2 => {
                let index = rng.below(model.len() / PAGE + 3) as u64;
                let pages = model.len().div_ceil(PAGE) as u64;
                match reader.read_folio(index) {
                    Ok(r) => {
                        assert!(index < pages, "{ctx}: folio {index} past the end");
                        let at = ((index - r.index()) as usize) * PAGE;
                        let bytes = r.bytes().expect("up to date");
                        let end = model.len().min((index as usize + 1) * PAGE);
                        same(
                            &bytes[at..at + (end - index as usize * PAGE)],
                            &model[index as usize * PAGE..end],
                            &ctx,
                        );
                    }
                    Err(e) => {
                        assert!(index >= pages, "{ctx}: folio {index}: {e}");
                        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{ctx}");
                    }
                }
            }
            3 => {
                // The borrow: a hit through the reader's translation lends the bytes without a
                // reference; it must agree with the model as the reference does.
                let index = rng.below(model.len() / PAGE + 3) as u64;
                let pages = model.len().div_ceil(PAGE) as u64;
                let end = model.len().min((index as usize + 1) * PAGE);
                let got = reader.with_folio(index, |bytes, first| {
                    let at = ((index - first) as usize) * PAGE;
                    bytes[at..at + (end.saturating_sub(index as usize * PAGE))].to_vec()
                });
                match got {
                    Ok(bytes) => {
                        assert!(index < pages, "{ctx}: with_folio {index} past the end");
                        same(&bytes, &model[index as usize * PAGE..end], &ctx);
                    }
                    Err(e) => {
                        assert!(index >= pages, "{ctx}: with_folio {index}: {e}");
                        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{ctx}");
                    }
                }
            }
            _ => {
                // Mostly single pages (the reader's hit path), some across folios and the end.
                let off = rng.below(model.len() + PAGE);
                let len = if rng.below(3) == 0 {
                    rng.below(5 * PAGE)
                } else {
                    PAGE - off % PAGE
                };
                let mut a = vec![0xAA; len];
                let mut b = vec![0x55; len];
                let n = reader.read_at(off as u64, &mut a).unwrap();
                let m = f.read_at(off as u64, &mut b).unwrap();
                let want = model.len().saturating_sub(off).min(len);
                assert_eq!((n, m), (want, want), "{ctx}: read of {len} at {off}");
                if n > 0 {
                    same(&a[..n], &model[off..off + n], &ctx);
                    same(&b[..m], &model[off..off + m], &ctx);
                }
            }
        }
    }
    let mut buf = [0u8; 16];
    assert!(
        reader.read_at(u64::MAX - 8, &mut buf).is_err(),
        "an offset past the largest file is an error, as for the handle"
    );
    drop(reader);
    drop(f);
    check_no_leak(&cache, "after the reader");
}

/// A reader's hits mark folios accessed as the handle's do: a page read twice through a reader,
/// with another read between, is activated; a page read in pieces is one access.
#[test]
fn a_readers_hits_are_marked_like_the_handles() {
    let mut cfg = quiet_config(1 << 20);
    cfg.max_folio_order = 0;
    cfg.readahead_max = 0;
    cfg.io_threads = 0;
    // Activation is the classic lists' (the multi-generational LRU counts uses instead).
    cfg.reclaim = quire::vmscan::ReclaimPolicy::Lru;
    let cache = PageCache::new(cfg).unwrap();
    let data = common::pattern(16 * PAGE, 4);
    let f = cache
        .open(Arc::new(MemStore::from_vec(data.clone())))
        .unwrap();
    let mut reader = f.reader();
    let mut page = vec![0u8; PAGE];
    for p in 0..16u64 {
        reader.read_exact_at(p * PAGE as u64, &mut page).unwrap();
    }
    let lists = |cache: &PageCache| {
        let s = cache.stats_exact();
        (s.lru(Lru::InactiveFile), s.lru(Lru::ActiveFile))
    };
    assert_eq!(lists(&cache), (16, 0));
    let mut piece = [0u8; 512];
    for k in 0..(PAGE / 512) {
        let off = 5 * PAGE + k * 512;
        reader.read_exact_at(off as u64, &mut piece).unwrap();
        same(&piece, &data[off..off + 512], "piece");
    }
    assert_eq!(
        lists(&cache),
        (15, 1),
        "the second access to page 5 activated it"
    );
    reader.read_exact_at(9 * PAGE as u64, &mut page).unwrap();
    drop(reader.read_folio(3).unwrap());
    reader.read_exact_at(9 * PAGE as u64, &mut page).unwrap();
    assert_eq!(
        lists(&cache),
        (13, 3),
        "pages 9 (read_at) and 3 (read_folio) each read a second time: active"
    );
}

/// Two threads read single pages through readers of one handle, far more than `REPIN_EVERY`
/// hits each, while a third rewrites whole pages with a new generation and cuts and regrows the
/// file's tail (so index nodes are freed under the readers): every page read is whole, from one
/// generation, and tagged with its own index; nothing leaks.
#[test]
fn readers_on_two_threads_see_whole_pages_while_a_writer_rewrites_and_cuts() {
    const PAGES: usize = 256;
    let page_of = |index: usize, gen: u8| -> Vec<u8> {
        let mut p = vec![gen; PAGE];
        p[..8].copy_from_slice(&(index as u64).to_le_bytes());
        p
    };
    let mut cfg = quiet_config(2 << 20);
    cfg.max_folio_order = 2;
    let cache = PageCache::new(cfg).unwrap();
    let mut init = Vec::with_capacity(PAGES * PAGE);
    for i in 0..PAGES {
        init.extend_from_slice(&page_of(i, 0));
    }
    let f = cache.open(Arc::new(MemStore::from_vec(init))).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..2u64)
            .map(|t| {
                let (f, stop) = (&f, &stop);
                s.spawn(move || {
                    let mut rng = Rng(0xabc + t);
                    let mut reader = f.reader();
                    let mut buf = vec![0u8; PAGE];
                    let mut hits = 0u64;
                    while !stop.load(Ordering::Relaxed) || hits < 20 * REPIN_EVERY as u64 {
                        let i = rng.below(PAGES);
                        let n = reader.read_at((i * PAGE) as u64, &mut buf).unwrap();
                        if n == 0 {
                            continue; // cut off for the moment
                        }
                        assert_eq!(n, PAGE, "page {i}: a short page");
                        let tag = u64::from_le_bytes(buf[..8].try_into().unwrap());
                        let gen = buf[8];
                        // A regrown tail reads as zeros until rewritten: tag 0, generation 0.
                        if tag != 0 || gen != 0 {
                            assert_eq!(tag, i as u64, "page {i} carries another page's tag");
                        }
                        assert!(
                            buf[8..].iter().all(|&b| b == gen),
                            "page {i}: bytes of two generations"
                        );
                        hits += 1;
                    }
                    hits
                })
            })
            .collect();
        let mut rng = Rng(0x77);
        for round in 1..=300u32 {
            let gen = (round % 250) as u8 + 1;
            if round % 10 == 0 {
                f.set_len((PAGES / 2 * PAGE) as u64).unwrap();
                f.set_len((PAGES * PAGE) as u64).unwrap();
            }
            for _ in 0..8 {
                let i = rng.below(PAGES);
                f.write_at((i * PAGE) as u64, &page_of(i, gen)).unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() >= 20 * REPIN_EVERY as u64);
        }
    });
    drop(f);
    check_no_leak(&cache, "readers and a writer");
}

/// Reference-free hits — `read_at` of a page inside a cached folio, from the handle and through
/// a reader, which copy without taking a reference and keep the copy only if the folio's byte
/// sequence did not move — while a writer rewrites whole pages in place (a freeze: the readers
/// hold no reference to stop it) and reads of a second file evict the first file's folios and
/// reuse their frames, and a zero-copy reader's references make writes replace folios by
/// copies: every copy returned is whole, of one generation, and the page's own, and the
/// writer's own reader (whose translations predate its writes) reads each write back. Bounded
/// in time; with the sequence's check disabled, or without the bump at a removal from the
/// index, it fails within a fraction of a second.
#[test]
fn reference_free_hits_never_keep_a_torn_or_foreign_copy() {
    const PAGES: usize = 64;
    const OTHER_PAGES: usize = 192;
    const OTHER: u64 = 1 << 40;
    let page_of = |tag: u64, gen: u8| -> Vec<u8> {
        let mut p = vec![gen; PAGE];
        p[..8].copy_from_slice(&tag.to_le_bytes());
        p
    };
    let file_of = |pages: usize, tag0: u64| -> Vec<u8> {
        (0..pages)
            .flat_map(|i| page_of(tag0 + i as u64, 0))
            .collect()
    };
    let mut cfg = quiet_config(PAGES * PAGE * 2);
    cfg.max_folio_order = 2;
    let cache = PageCache::new(cfg).unwrap();
    let f = cache
        .open(Arc::new(MemStore::from_vec(file_of(PAGES, 0))))
        .unwrap();
    let other = cache
        .open(Arc::new(MemStore::from_vec(file_of(OTHER_PAGES, OTHER))))
        .unwrap();
    let stop = AtomicBool::new(false);
    let check = |i: usize, buf: &[u8]| {
        let tag = u64::from_le_bytes(buf[..8].try_into().unwrap());
        assert_eq!(tag, i as u64, "page {i} holds another page's bytes");
        assert!(
            buf[8..].iter().all(|&b| b == buf[8]),
            "page {i}: bytes of two generations"
        );
    };
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..2u64)
            .map(|t| {
                let (f, stop, check) = (&f, &stop, &check);
                s.spawn(move || {
                    let mut rng = Rng(0x5eed + t);
                    let mut reader = f.reader();
                    let mut buf = vec![0u8; PAGE];
                    let mut reads = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let i = rng.below(PAGES);
                        let n = if t == 0 {
                            reader.read_at((i * PAGE) as u64, &mut buf).unwrap()
                        } else {
                            f.read_at((i * PAGE) as u64, &mut buf).unwrap()
                        };
                        assert_eq!(n, PAGE);
                        check(i, &buf);
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        let evictor = {
            let (other, stop) = (&other, &stop);
            s.spawn(move || {
                let mut buf = vec![0u8; PAGE];
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(other.read_at((i * PAGE) as u64, &mut buf).unwrap(), PAGE);
                    let tag = u64::from_le_bytes(buf[..8].try_into().unwrap());
                    assert_eq!(tag, OTHER + i as u64);
                    i = (i + 1) % OTHER_PAGES;
                }
            })
        };
        // A zero-copy reader: while it holds a folio, a write replaces the folio by a copy
        // (and readers' translations of the old one must go stale).
        let holder = {
            let (f, stop, check) = (&f, &stop, &check);
            s.spawn(move || {
                let mut rng = Rng(0x401d);
                let mut reader = f.reader();
                while !stop.load(Ordering::Relaxed) {
                    let i = rng.below(PAGES);
                    let r = reader.read_folio(i as u64).unwrap();
                    let at = (i - r.index() as usize) * PAGE;
                    check(i, &r.bytes().unwrap()[at..at + PAGE]);
                    std::thread::yield_now();
                }
            })
        };
        // A failed check below must stop the other threads, or the scope would wait forever.
        struct StopOnDrop<'s>(&'s AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop_on_drop = StopOnDrop(&stop);
        let mut rng = Rng(0x77);
        let start = std::time::Instant::now();
        let mut gen = 0u8;
        // The writer reads its own writes back through a reader of its own, whose translations
        // were made before the writes: a stale one would show the previous generation.
        let mut own = f.reader();
        let mut buf = vec![0u8; PAGE];
        while start.elapsed() < std::time::Duration::from_millis(1500) {
            gen = gen % 250 + 1;
            let i = rng.below(PAGES);
            own.read_exact_at((i * PAGE) as u64, &mut buf).unwrap();
            f.write_at((i * PAGE) as u64, &page_of(i as u64, gen))
                .unwrap();
            own.read_exact_at((i * PAGE) as u64, &mut buf).unwrap();
            check(i, &buf);
            assert_eq!(buf[8], gen, "page {i}: a read after the write missed it");
        }
        drop(own);
        stop.store(true, Ordering::Relaxed);
        holder.join().unwrap();
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        evictor.join().unwrap();
    });
    assert!(
        cache.stats_exact().vmstat.get(quire::stats::Event::PgSteal) > 0,
        "nothing was evicted"
    );
    drop((f, other));
    check_no_leak(&cache, "reference-free hits");
}

/// A file's pages, each filled with a byte naming the file and the page.
fn tagged(file: usize, pages: usize) -> Vec<u8> {
    let mut v = vec![0u8; pages * PAGE];
    for (p, page) in v.chunks_mut(PAGE).enumerate() {
        page.fill((file * 31 + p * 7) as u8 | 1);
    }
    v
}

/// The handles' hits go through the thread's own translations, keyed by the file: with more
/// files than slots (so files share slots), in two caches open at once, and after a cache is
/// dropped and another made in its place, every read on the thread returns its own file's
/// bytes — through `read_at` and through `read_folio`.
#[test]
fn a_threads_translations_never_serve_another_file_or_cache() {
    const FILES: usize = 300;
    const PAGES: usize = 16;
    let mut rng = Rng(0x007a_b1e5);
    let mut buf = vec![0u8; PAGE];
    let mut check = |files: &[quire::filemap::CachedFile], base: usize, rng: &mut Rng| {
        for _ in 0..20_000 {
            let i = rng.below(files.len());
            let p = rng.below(PAGES);
            let want = ((base + i) * 31 + p * 7) as u8 | 1;
            if rng.below(2) == 0 {
                let n = rng.range(1, PAGE);
                files[i]
                    .read_exact_at((p * PAGE) as u64, &mut buf[..n])
                    .unwrap();
                assert!(
                    buf[..n].iter().all(|&b| b == want),
                    "file {} page {p}: read_at gave another file's bytes",
                    base + i
                );
            } else {
                let f = files[i].read_folio(p as u64).unwrap();
                let at = (p - f.index() as usize) * PAGE;
                let bytes = f.bytes().unwrap();
                assert!(
                    bytes[at..at + PAGE].iter().all(|&b| b == want),
                    "file {} page {p}: read_folio gave another file's bytes",
                    base + i
                );
            }
        }
    };
    let open = |cache: &PageCache, base: usize| -> Vec<quire::filemap::CachedFile> {
        (0..FILES)
            .map(|i| {
                cache
                    .open(Arc::new(MemStore::from_vec(tagged(base + i, PAGES))))
                    .unwrap()
            })
            .collect()
    };
    let size = 2 * FILES * PAGES * PAGE;
    let a = PageCache::new(quiet_config(size)).unwrap();
    let b = PageCache::new(quiet_config(size)).unwrap();
    let fa = open(&a, 0);
    let fb = open(&b, FILES);
    check(&fa, 0, &mut rng);
    check(&fb, FILES, &mut rng);
    drop(fa);
    drop(a);
    // A new cache, perhaps at the old one's addresses, and new files: the thread's slots still
    // hold translations of the dropped files, which must never match.
    let c = PageCache::new(quiet_config(size)).unwrap();
    let fc = open(&c, 2 * FILES);
    check(&fc, 2 * FILES, &mut rng);
    check(&fb, FILES, &mut rng);
}
