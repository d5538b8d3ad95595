//! A profiling aid, not a benchmark: one thread reading random pages of a fully cached file in
//! a tight loop, for `perf record` to look at the hit path alone (`quire bench read` interleaves
//! its variants in one process). Prints hits per second as a sanity check only; figures for the
//! record come from `quire bench`.
//!
//! `cargo run --release -p quire-cache --example hot_hits -- MODE [MiB] [seconds]`: `ref` takes a
//! zero-copy reference with `read_folio` and reads 64 bytes of the page, `read` copies the page
//! with `read_at`, `reader-ref` and `reader-read` do the same through a `FileReader`, `read64` and
//! `reader-read64` copy 64 bytes of the page with `read_at` (no reference taken on a hit), `with`
//! reads 64 bytes of the page inside `with_folio` (a borrow without a reference); `bare` reads 64 bytes of a random page of a plain buffer of the same size
//! (what a mapped file's hit costs, less its TLB), and `bare-atomics` does the same with an
//! atomic increment before and a decrement after each read, on one of 128 counters (a reference
//! get and put on a large folio, without the lookup). The data is `MiB` large (256 by default:
//! beyond the last-level cache; 8 keeps it in cache, leaving the software's own cost).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use quire::filemap::{CacheConfig, PageCache};
use quire::store::MemStore;

const PAGE: usize = 4096;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "ref".into());
    let mib: usize = args.next().map_or(256, |a| a.parse().expect("MiB"));
    let secs: f64 = args.next().map_or(4.0, |a| a.parse().expect("seconds"));
    let size = mib << 20;
    if mode.starts_with("bare") {
        bare(&mode, size, secs);
        return;
    }
    let modes = [
        "ref",
        "read",
        "reader-ref",
        "reader-read",
        "read64",
        "reader-read64",
        "with",
    ];
    assert!(
        modes.contains(&mode.as_str()),
        "mode is one of {modes:?}, bare or bare-atomics"
    );
    let cache = PageCache::new(CacheConfig::new(2 * size)).expect("cache");
    let f = cache
        .open(Arc::new(MemStore::from_vec(vec![7u8; size])))
        .expect("open");
    // Read whole once: readahead lands it in large folios, as a warmed file is.
    let mut chunk = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < size {
        off += f.read_at(off as u64, &mut chunk).expect("warm-up read");
    }
    let pages = (size / PAGE) as u64;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut page = [0u8; PAGE];
    let buf = if mode.ends_with("64") {
        &mut page[..64]
    } else {
        &mut page[..]
    };
    let mut reader = f.reader();
    // The mode as a number, so that the loop compares no strings.
    let m = modes.iter().position(|&x| x == mode).expect("a known mode");
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        for _ in 0..1024 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let idx = x % pages;
            match m {
                0 | 2 => {
                    let r = if m == 0 {
                        f.read_folio(idx)
                    } else {
                        reader.read_folio(idx)
                    }
                    .expect("hit");
                    let at = ((idx - r.index()) as usize) * PAGE;
                    let bytes = r.bytes().expect("up to date");
                    let mut head = [0u8; 64];
                    head.copy_from_slice(&bytes[at..at + 64]);
                    black_box(&head);
                }
                6 => {
                    f.with_folio(idx, |bytes, first| {
                        let at = ((idx - first) as usize) * PAGE;
                        let mut head = [0u8; 64];
                        head.copy_from_slice(&bytes[at..at + 64]);
                        black_box(&head);
                    })
                    .expect("hit");
                }
                1 | 4 => {
                    f.read_at(idx * PAGE as u64, buf).expect("hit");
                    black_box(&buf);
                }
                _ => {
                    reader.read_at(idx * PAGE as u64, buf).expect("hit");
                    black_box(&buf);
                }
            }
        }
        n += 1024;
    }
    let s = t0.elapsed().as_secs_f64();
    println!("{mode}, {mib} MiB: {:.1} ns per hit", s * 1e9 / n as f64);
}

/// The `bare` and `bare-atomics` modes.
fn bare(mode: &str, size: usize, secs: f64) {
    let data = vec![7u8; size];
    let counters: Vec<AtomicU64> = (0..128).map(|_| AtomicU64::new(1)).collect();
    let atomics = mode == "bare-atomics";
    let pages = (size / PAGE) as u64;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        for _ in 0..1024 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let idx = (x % pages) as usize;
            let c = &counters[idx % counters.len()];
            if atomics {
                c.fetch_add(1, Ordering::Acquire);
            }
            let mut head = [0u8; 64];
            head.copy_from_slice(&data[idx * PAGE..idx * PAGE + 64]);
            black_box(&head);
            if atomics {
                c.fetch_sub(1, Ordering::Release);
            }
        }
        n += 1024;
    }
    let s = t0.elapsed().as_secs_f64();
    println!(
        "{mode}, {} MiB: {:.1} ns per read",
        size >> 20,
        s * 1e9 / n as f64
    );
}
