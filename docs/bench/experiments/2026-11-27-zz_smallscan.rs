//! Scratch: `scan` with the stream cut into files. A hot file of half a 64 MiB budget is read
//! twice in shuffled order, then read at random (4 KiB) by one thread while another reads
//! 256 MiB once in 1 MiB reads: argv[1] = the number of files the 256 MiB is cut into (1 is
//! the suite's `scan`). Prints the hot set's hit ratio while the stream runs.
use quire::{CacheConfig, FileStore, IoMode, PageCache};
use std::sync::atomic::{AtomicBool, Ordering};

fn make(path: &str, size: u64) {
    if std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) != size {
        let buf = vec![7u8; (size as usize).min(1 << 20)];
        let mut f = std::fs::File::create(path).unwrap();
        let mut left = size;
        while left > 0 {
            let n = (left as usize).min(buf.len());
            std::io::Write::write_all(&mut f, &buf[..n]).unwrap();
            left -= n as u64;
        }
        f.sync_all().unwrap();
    }
}

fn main() {
    let nfiles: u64 = std::env::args().nth(1).unwrap().parse().unwrap();
    // argv[2]: microseconds the hot reader sleeps between reads (0: none).
    let nap: u64 = std::env::args().nth(2).map_or(0, |v| v.parse().unwrap());
    let budget: u64 = 64 << 20;
    let total: u64 = 256 << 20;
    let dir = "/var/tmp/zz_smallscan";
    std::fs::create_dir_all(dir).unwrap();
    let hot_path = format!("{dir}/hot");
    make(&hot_path, budget / 2);
    let each = total / nfiles;
    let paths: Vec<String> = (0..nfiles).map(|i| format!("{dir}/s{nfiles}-{i}")).collect();
    for p in &paths {
        make(p, each);
    }
    let cache = PageCache::new(CacheConfig::new(budget as usize)).unwrap();
    let hot = cache.open(FileStore::open(&hot_path, IoMode::Direct).unwrap()).unwrap();
    let pages = budget / 2 / 4096;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut buf = vec![0u8; 4096];
    for _ in 0..2 {
        let mut order: Vec<u64> = (0..pages).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, (rnd() % (i as u64 + 1)) as usize);
        }
        for p in order {
            hot.read_at(p * 4096, &mut buf).unwrap();
        }
    }
    let done = AtomicBool::new(false);
    let (asked, read) = std::thread::scope(|s| {
        let streamer = s.spawn(|| {
            let mut big = vec![0u8; 1 << 20];
            // The files stay open (a dropped `CachedFile` takes its pages with it; a mount
            // keeps its inodes).
            let mut open = Vec::new();
            for p in &paths {
                open.push(cache.open(FileStore::open(p, IoMode::Direct).unwrap()).unwrap());
                let f = open.last().unwrap();
                let mut off = 0;
                while off < each {
                    off += f.read_at(off, &mut big).unwrap() as u64;
                }
            }
            done.store(true, Ordering::Relaxed);
        });
        let before = hot.store_bytes_read();
        let mut n = 0u64;
        while !done.load(Ordering::Relaxed) {
            hot.read_at((rnd() % pages) * 4096, &mut buf).unwrap();
            n += 4096;
            if nap > 0 {
                std::thread::sleep(std::time::Duration::from_micros(nap));
            }
        }
        streamer.join().unwrap();
        (n, hot.store_bytes_read() - before)
    });
    println!(
        "files {nfiles} of {} KiB, nap {nap} us: hot hit ratio {:.4} ({} hot reads)",
        each >> 10,
        1.0 - read as f64 / asked as f64,
        asked / 4096
    );
}
