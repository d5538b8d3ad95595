//! Scratch: two readers, each streaming its own file 5x a 64 MiB budget once in 1 MiB reads
//! (O_DIRECT), as `evict`'s readonce; max folio order from argv.
use std::time::Instant;
use quire::{CacheConfig, FileStore, IoMode, PageCache};
fn main() {
    let order: u32 = std::env::args().nth(1).unwrap().parse().unwrap();
    let size: u64 = 320 << 20;
    let paths = ["/var/tmp/zz_stream0.dat", "/var/tmp/zz_stream1.dat"];
    for path in paths {
        if std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) != size {
            let buf = vec![7u8; 1 << 20];
            let mut f = std::fs::File::create(path).unwrap();
            for _ in 0..320 { std::io::Write::write_all(&mut f, &buf).unwrap(); }
            f.sync_all().unwrap();
        }
    }
    for _ in 0..3 {
        let mut cfg = CacheConfig::new(64 << 20);
        cfg.max_folio_order = order;
        let cache = PageCache::new(cfg).unwrap();
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for path in paths {
                let f = cache.open(FileStore::open(path, IoMode::Direct).unwrap()).unwrap();
                s.spawn(move || {
                    let mut buf = vec![0u8; 1 << 20];
                    let mut off = 0;
                    while off < size { off += f.read_at(off, &mut buf).unwrap() as u64; }
                });
            }
        });
        let s = t0.elapsed().as_secs_f64();
        let st = cache.stats();
        println!("order {order}: {:.0} MiB/s, requests {} mean depth {:.2}, direct reclaims {}", 2.0 * size as f64 / s / (1<<20) as f64, st.io.submitted, st.io.mean_depth(), st.vmstat.get(quire::stats::Event::DirectReclaims));
    }
}
