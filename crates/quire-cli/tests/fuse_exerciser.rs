//! A file-system exerciser in the manner of fsx: a seeded random mix of reads, writes, reads and
//! writes through shared mappings, truncations (up and down), `fallocate` (allocate, keep size,
//! punch a hole, zero a range), fsyncs and reopens, on a file that grows to four times quire's
//! budget — applied to a file on a `quire mount` and to a file in a plain directory of the
//! backing file system at once. Every read compares the two (the kernel's file is the model),
//! so does every operation's outcome, and at the end the whole files, again after the mount is
//! unmounted and mounted anew (what was written is in the backing file).
//!
//! `QUIRE_FSX_SEED=N` replays one run; `QUIRE_FSX_OPS=N` sets its length. Skipped (with the
//! reason) without FUSE.

mod common;

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{skip, Mount, Scratch};

/// The file never grows past this: four times the mount's budget.
const MAX_LEN: u64 = 16 << 20;
const BUDGET: &str = "4M";
const PAGE: u64 = 4096;

/// splitmix64: the run's randomness, replayable from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// A length, mostly small, sometimes up to `max`.
    fn len(&mut self, max: u64) -> u64 {
        match self.below(4) {
            0 => 1 + self.below(64),
            1 => 1 + self.below(PAGE * 2),
            _ => 1 + self.below(max),
        }
    }
}

/// The same file on the mount and in the plain directory.
struct Pair {
    quire: File,
    kernel: File,
}

impl Pair {
    fn open(mnt: &Path, plain: &Path) -> Pair {
        let o = |p: &Path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(p.join("fsx"))
                .unwrap()
        };
        Pair {
            quire: o(mnt),
            kernel: o(plain),
        }
    }

    fn len(&self) -> (u64, u64) {
        (
            self.quire.metadata().unwrap().len(),
            self.kernel.metadata().unwrap().len(),
        )
    }
}

/// `errno` of a result, 0 for success: outcomes are compared, not only data.
fn rc<T>(r: std::io::Result<T>) -> i32 {
    r.map_or_else(|e| e.raw_os_error().unwrap_or(-1), |_| 0)
}

/// Reads `[off, off+len)` of `f` through a shared mapping (clamped to `size`).
fn map_read(f: &File, off: u64, len: u64, size: u64) -> Vec<u8> {
    let end = (off + len).min(size);
    if off >= end {
        return Vec::new();
    }
    let start = off & !(PAGE - 1);
    let maplen = (end - start) as usize;
    // SAFETY: a fresh shared read-only mapping of a range inside the file, unmapped below;
    // nothing else refers to it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            maplen,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            start as libc::off_t,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap for reading");
        let s = std::slice::from_raw_parts(p as *const u8, maplen);
        let out = s[(off - start) as usize..].to_vec();
        libc::munmap(p, maplen);
        out
    }
}

/// Writes `data` at `off` of `f` through a shared mapping, then `msync(MS_SYNC)`; the file
/// must already reach `off + data.len()`.
fn map_write(f: &File, off: u64, data: &[u8]) {
    let start = off & !(PAGE - 1);
    let maplen = (off + data.len() as u64 - start) as usize;
    // SAFETY: a fresh shared mapping of a range inside the file (the caller extended it),
    // written within its bounds and unmapped below.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            maplen,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            start as libc::off_t,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap for writing");
        let s = std::slice::from_raw_parts_mut(p as *mut u8, maplen);
        s[(off - start) as usize..].copy_from_slice(data);
        assert_eq!(libc::msync(p, maplen, libc::MS_SYNC), 0, "msync");
        libc::munmap(p, maplen);
    }
}

/// Panics, naming the first differing offset, the seed and the last operations, unless the
/// bytes the mount gave (`a`) are the kernel's (`b`).
#[track_caller]
fn same_bytes(what: &str, off: u64, a: &[u8], b: &[u8], seed: u64, log: &[String]) {
    if a != b {
        let at = a
            .iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(b.len()));
        panic!(
            "{what}: bytes differ from offset {} (seed {seed})\n{}",
            off + at as u64,
            log.join("\n")
        );
    }
}

fn fallocate(f: &File, mode: i32, off: u64, len: u64) -> i32 {
    // SAFETY: fallocate on an open descriptor; no memory is passed.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    }
}

#[test]
fn a_random_mix_on_a_file_larger_than_the_cache_matches_the_backing_file_system() {
    let dir = Scratch::new("fsx");
    for d in ["src", "mnt", "plain"] {
        fs::create_dir(dir.path(d)).unwrap();
    }
    let mut m = match Mount::start(&dir.path("src"), &dir.path("mnt"), BUDGET) {
        Ok(m) => Some(m),
        Err(why) => return skip(&why),
    };
    let seed = std::env::var("QUIRE_FSX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let ops: usize = std::env::var("QUIRE_FSX_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    eprintln!("fsx seed {seed} (QUIRE_FSX_SEED={seed} replays it), {ops} operations");
    let mut rng = Rng(seed);
    let (mnt, plain) = (dir.path("mnt"), dir.path("plain"));
    let mut f = Pair::open(&mnt, &plain);
    let mut log: Vec<String> = Vec::new();
    let mut counts = [0usize; 8];
    let t0 = Instant::now();
    for i in 0..ops {
        // Bounded in time as well as in count (a slow machine runs fewer operations).
        if t0.elapsed() > Duration::from_secs(60) {
            eprintln!("stopped after {i} operations (60 s)");
            break;
        }
        let (size, ksize) = f.len();
        assert_eq!(size, ksize, "lengths after {}: {}", i, log.join("\n"));
        let kind = rng.below(100);
        let off = rng.below(MAX_LEN);
        let what;
        match kind {
            // Read.
            0..=24 => {
                let len = rng.len(1 << 20);
                what = format!("read {off} {len} (size {size})");
                let (mut a, mut b) = (vec![0u8; len as usize], vec![0u8; len as usize]);
                let (ra, rb) = (f.quire.read_at(&mut a, off), f.kernel.read_at(&mut b, off));
                assert_eq!(
                    ra.as_ref().ok(),
                    rb.as_ref().ok(),
                    "{what}: counts ({ra:?}, {rb:?})\n{}",
                    log.join("\n")
                );
                let n = rb.unwrap_or(0);
                same_bytes(&what, off, &a[..n], &b[..n], seed, &log);
                counts[0] += 1;
            }
            // Write (may extend).
            25..=49 => {
                let len = rng.len(1 << 20).min(MAX_LEN - off);
                what = format!("write {off} {len}");
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                let (ra, rb) = (
                    rc(f.quire.write_all_at(&data, off)),
                    rc(f.kernel.write_all_at(&data, off)),
                );
                assert_eq!(ra, rb, "{what}\n{}", log.join("\n"));
                counts[1] += 1;
            }
            // Read through a shared mapping.
            50..=59 => {
                let len = rng.len(1 << 20);
                what = format!("mapread {off} {len} (size {size})");
                if off < size {
                    let (a, b) = (
                        map_read(&f.quire, off, len, size),
                        map_read(&f.kernel, off, len, size),
                    );
                    same_bytes(&what, off, &a, &b, seed, &log);
                }
                counts[2] += 1;
            }
            // Write through a shared mapping (the file extended first where needed, as fsx).
            60..=69 => {
                let len = rng.len(256 << 10).min(MAX_LEN - off);
                what = format!("mapwrite {off} {len} (size {size})");
                if off + len > size {
                    f.quire.set_len(off + len).unwrap();
                    f.kernel.set_len(off + len).unwrap();
                }
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                map_write(&f.quire, off, &data);
                map_write(&f.kernel, off, &data);
                counts[3] += 1;
            }
            // Truncate, down or up.
            70..=79 => {
                let to = if rng.below(2) == 0 {
                    rng.below(size + 1)
                } else {
                    rng.below(MAX_LEN)
                };
                what = format!("truncate {to} (from {size})");
                assert_eq!(rc(f.quire.set_len(to)), rc(f.kernel.set_len(to)), "{what}");
                counts[4] += 1;
            }
            // fallocate.
            80..=89 => {
                let len = rng.len(2 << 20).min(MAX_LEN - off);
                let (name, mode) = match rng.below(5) {
                    0 => ("alloc", 0),
                    1 => ("keep", libc::FALLOC_FL_KEEP_SIZE),
                    2 => (
                        "punch",
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    ),
                    3 => ("zero", libc::FALLOC_FL_ZERO_RANGE),
                    _ => (
                        "zero_keep",
                        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                    ),
                };
                what = format!("fallocate {name} {off} {len} (size {size})");
                let (a, b) = (
                    fallocate(&f.quire, mode, off, len),
                    fallocate(&f.kernel, mode, off, len),
                );
                assert_eq!(a, b, "{what}\n{}", log.join("\n"));
                counts[5] += 1;
            }
            // fsync.
            90..=93 => {
                what = "fsync".to_string();
                f.quire.sync_all().unwrap();
                counts[6] += 1;
            }
            // Close and open again.
            _ => {
                what = "reopen".to_string();
                drop(f);
                f = Pair::open(&mnt, &plain);
                counts[7] += 1;
            }
        }
        log.push(format!("{i}: {what}"));
        if log.len() > 40 {
            log.remove(0);
        }
    }
    let whole = |p: &Path| fs::read(p.join("fsx")).unwrap();
    assert!(
        whole(&mnt) == whole(&plain),
        "the whole files differ (seed {seed})"
    );
    drop(f);
    // Unmounted (everything written back) and mounted anew: the backing file holds it all.
    let st = m.take().unwrap().unmount();
    assert!(st.success(), "the daemon exited with {st}");
    assert!(
        whole(&dir.path("src")) == whole(&plain),
        "the backing file differs after unmount (seed {seed})"
    );
    let m2 = Mount::remount(&dir.path("src"), &mnt, BUDGET);
    assert!(whole(&mnt) == whole(&plain), "after remount (seed {seed})");
    drop(m2);
    let names = [
        "read",
        "write",
        "mapread",
        "mapwrite",
        "truncate",
        "fallocate",
        "fsync",
        "reopen",
    ];
    eprintln!(
        "fsx: {}",
        names
            .iter()
            .zip(counts)
            .map(|(n, c)| format!("{n} {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (n, c) in names.iter().zip(counts) {
        assert!(c > 0, "the mix ran no {n}");
    }
}
