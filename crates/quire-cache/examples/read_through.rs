//! A read-through cache of a large file on a small memory budget.
//!
//! Makes a 64 MiB file in a temporary directory, opens it through a page cache of 8 MiB, and
//! reads 4 KiB records at random, nine reads in ten from a hot eighth of the file, the rest
//! from anywhere — a skewed workload like a database's index and table pages. Every record is
//! checked against what was written. Then it prints the hit ratio, what the cache holds and
//! the counters of the run, `/proc/vmstat` style.
//!
//! `cargo run --release -p quire-cache --example read_through`
//!
//! The file is opened with `IoMode::PreferDirect` so that misses really go to the disk (or
//! tmpfs, which refuses `O_DIRECT`: then the kernel's copy sits behind quire's).

use std::io::Write as _;
use std::time::Instant;

use quire::stats::Snapshot;
use quire::{CacheConfig, FileStore, IoMode, PageCache};

const FILE_SIZE: u64 = 64 << 20;
const BUDGET: usize = 8 << 20;
const RECORD: usize = 4096;
const READS: usize = 100_000;

/// The content of the record at `index`: its index, then a pattern derived from it.
fn record(index: u64, buf: &mut [u8]) {
    buf[..8].copy_from_slice(&index.to_le_bytes());
    for (i, b) in buf[8..].iter_mut().enumerate() {
        *b = (index as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
}

/// xorshift64*: a small deterministic generator.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The data: a file written with plain std::fs, as another program would have left it.
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("table.dat");
    let records = FILE_SIZE / RECORD as u64;
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let mut buf = vec![0u8; RECORD];
        for i in 0..records {
            record(i, &mut buf);
            out.write_all(&buf)?;
        }
        out.into_inner()?.sync_all()?;
    }

    // The cache: 8 MiB for a 64 MiB file.
    let cache = PageCache::new(CacheConfig::new(BUDGET))?;
    let file = cache.open(FileStore::open(&path, IoMode::PreferDirect)?)?;
    println!(
        "file {} MiB, budget {} MiB, {READS} random reads of {RECORD} bytes (90% on the hottest 8 MiB)",
        file.len() >> 20,
        BUDGET >> 20,
    );

    let hot = records / 8;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut buf = vec![0u8; RECORD];
    let mut want = vec![0u8; RECORD];
    let before = Snapshot::take();
    let start = Instant::now();
    for _ in 0..READS {
        let index = if rng.below(10) < 9 {
            rng.below(hot)
        } else {
            rng.below(records)
        };
        file.read_exact_at(index * RECORD as u64, &mut buf)?;
        record(index, &mut want);
        if buf != want {
            return Err(format!("record {index} came back wrong").into());
        }
    }
    let took = start.elapsed();
    let run = Snapshot::take().since(&before).vmstat();

    // Each read covers one page: a read is a hit unless its page had to come from the store
    // (`page_cache_misses`). The lookup that follows a miss's read finds the page and counts
    // in `page_cache_hits` too, so hits alone overstate the ratio.
    let misses = run.page_cache_misses.min(READS as u64);
    println!(
        "{READS} reads in {:.2} s ({:.0} reads/s), all checked",
        took.as_secs_f64(),
        READS as f64 / took.as_secs_f64()
    );
    println!(
        "hit ratio {:.1}%: {} of {READS} reads went to the file ({} folios read ahead)",
        100.0 * (READS as u64 - misses) as f64 / READS as f64,
        misses,
        run.readahead
    );

    let stats = cache.stats();
    println!(
        "\nthe cache now: {} of {} frames hold the file, {} free",
        stats.cached_frames, stats.frames, stats.free_frames
    );
    println!("\ncounters of the run that moved (/proc/vmstat style):");
    for (name, value) in run.iter().filter(|(_, v)| *v != 0) {
        println!("  {name} {value}");
    }
    if stats.cached_frames > stats.frames {
        return Err("the cache went over its budget".into());
    }
    Ok(())
}
