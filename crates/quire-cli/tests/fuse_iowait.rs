//! An idle mount is not waiting for I/O. Its threads wait on io_uring rings that always have
//! commands in flight (the FUSE channel's fetch commands, the I/O engine's doorbell), and the
//! kernel counts a task waiting on such a ring as waiting for I/O unless the wait says
//! otherwise (`IORING_ENTER_NO_IOWAIT`, Linux 6.15). Counted, a mount at rest shows every CPU in
//! `wa` and the system under I/O pressure (`/proc/pressure/io`), which container managers act
//! on. The measure is the machine's own (`/proc/stat`), so this is the only test of its binary
//! (test binaries run one at a time).

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::{skip, Mount, Scratch};

/// The machine's CPU time in I/O wait so far, in clock ticks (`/proc/stat`'s first line).
fn iowait_ticks() -> u64 {
    let stat = fs::read_to_string("/proc/stat").unwrap();
    let cpu = stat.lines().next().unwrap();
    // cpu user nice system idle iowait …
    cpu.split_whitespace().nth(5).unwrap().parse().unwrap()
}

/// Whether the running kernel is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

#[test]
fn an_idle_mount_is_not_waiting_for_io() {
    if !kernel_at_least(6, 15) {
        return skip("the kernel is older than 6.15 (no IORING_ENTER_NO_IOWAIT)");
    }
    let dir = Scratch::new("iowait");
    let (src, mnt) = (dir.path("src"), dir.path("mnt"));
    fs::create_dir(&src).unwrap();
    fs::create_dir(&mnt).unwrap();
    let m = match Mount::start(&src, &mnt, "32M") {
        Ok(m) => m,
        Err(why) => return skip(&why),
    };
    // Some traffic first, so that every ring has served and is armed again.
    let data: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.path("f"), &data).unwrap();
    assert_eq!(fs::read(m.path("f")).unwrap(), data);
    // The machine's dirty data written out first (earlier tests', this one's backing file), so
    // that the kernel's own write-back does not wait on the device during the measure.
    // SAFETY: `sync` takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: sysconf reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let (t0, before) = (Instant::now(), iowait_ticks());
    std::thread::sleep(Duration::from_secs(2));
    let waited = (iowait_ticks() - before) as f64 / hz;
    let elapsed = t0.elapsed().as_secs_f64();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(m.unmount().success());
    // At rest, with the waits counted, every CPU's idle time is I/O wait: about
    // `cpus * elapsed`. A quarter of one CPU leaves room for the machine's own writeback.
    assert!(
        waited < 0.25 * elapsed,
        "the machine spent {waited:.2} CPU-seconds of {elapsed:.2} s x {cpus} CPUs in I/O wait \
         with only an idle mount"
    );
}
