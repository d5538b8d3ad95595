//! Scratch: two readers streaming 320 MiB each through a 64 MiB cache; argv: order, wrap(0/1).
use quire::store::{Result, Store};
use quire::{CacheConfig, FileStore, IoMode, PageCache};
use std::time::Instant;
struct Wrap(FileStore);
impl Store for Wrap {
    fn read_at(&self, o: u64, b: &mut [u8]) -> Result<usize> {
        self.0.read_at(o, b)
    }
    fn write_at(&self, o: u64, b: &[u8]) -> Result<usize> {
        self.0.write_at(o, b)
    }
    fn sync(&self) -> Result<()> {
        self.0.sync()
    }
    fn len(&self) -> Result<u64> {
        self.0.len()
    }
    fn set_len(&self, l: u64) -> Result<()> {
        self.0.set_len(l)
    }
    fn alignment(&self) -> usize {
        self.0.alignment()
    }
}
fn main() {
    let order: u32 = std::env::args().nth(1).unwrap().parse().unwrap();
    let wrap: bool = std::env::args().nth(2).unwrap() == "1";
    let size: u64 = 320 << 20;
    let paths = ["/var/tmp/zz_stream0.dat", "/var/tmp/zz_stream1.dat"];
    for path in paths {
        if std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) != size {
            let buf = vec![7u8; 1 << 20];
            let mut f = std::fs::File::create(path).unwrap();
            for _ in 0..320 {
                std::io::Write::write_all(&mut f, &buf).unwrap();
            }
            f.sync_all().unwrap();
        }
    }
    for _ in 0..2 {
        let mut cfg = CacheConfig::new(64 << 20);
        cfg.max_folio_order = order;
        let cache = PageCache::new(cfg).unwrap();
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for path in paths {
                let fs = FileStore::open(path, IoMode::Direct).unwrap();
                let f = if wrap {
                    cache.open(Wrap(fs)).unwrap()
                } else {
                    cache.open(fs).unwrap()
                };
                s.spawn(move || {
                    let mut buf = vec![0u8; 1 << 20];
                    let mut off = 0;
                    while off < size {
                        off += f.read_at(off, &mut buf).unwrap() as u64;
                    }
                });
            }
        });
        let s = t0.elapsed().as_secs_f64();
        let st = cache.stats();
        println!("order {order} wrap {wrap}: {:.0} MiB/s, requests {} mean depth {:.2}, direct reclaims {}", 2.0 * size as f64 / s / (1<<20) as f64, st.io.submitted, st.io.mean_depth(), st.vmstat.get(quire::stats::Event::DirectReclaims));
    }
}
