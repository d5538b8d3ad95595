//! The FUSE channel a mount gets: FUSE over io_uring where the kernel offers it (every request
//! but FORGET then comes through the rings, counted by `quire stat`), the classic `/dev/fuse`
//! channel when asked for, and the reason shown either way. With `QUIRE_REQUIRE_FUSE_URING=1`
//! (set once by `.ci/run`) a machine without FUSE over io_uring fails here rather than skips.

mod common;

use std::fs;
use std::process::Command;

use common::{skip, Mount, Scratch, QUIRE};

fn stat(mnt: &std::path::Path) -> String {
    let out = Command::new(QUIRE).arg("stat").arg(mnt).output().unwrap();
    assert!(out.status.success(), "quire stat: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn counter(stat: &str, name: &str) -> u64 {
    stat.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in quire stat:\n{stat}"))
        .trim()
        .parse()
        .unwrap()
}

fn channel_line(stat: &str) -> &str {
    stat.lines()
        .find_map(|l| l.strip_prefix("fuse_channel "))
        .unwrap_or_else(|| panic!("no fuse_channel in quire stat:\n{stat}"))
}

/// Whether the kernel offers FUSE over io_uring now (its module switch on).
fn kernel_offers_uring() -> Result<(), String> {
    match fs::read_to_string("/sys/module/fuse/parameters/enable_uring") {
        Ok(v) if v.trim() == "Y" => Ok(()),
        Ok(_) => Err("/sys/module/fuse/parameters/enable_uring is off".into()),
        Err(_) => Err("this kernel has no FUSE over io_uring".into()),
    }
}

fn required() -> bool {
    std::env::var("QUIRE_REQUIRE_FUSE_URING").is_ok_and(|v| v == "1")
}

/// Writes, reads back, lists and renames through the mount; the bytes must be right.
fn exercise(m: &Mount) {
    let data: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    fs::write(m.path("f"), &data).unwrap();
    assert_eq!(fs::read(m.path("f")).unwrap(), data);
    fs::create_dir(m.path("d")).unwrap();
    fs::rename(m.path("f"), m.path("d/g")).unwrap();
    let names: Vec<_> = fs::read_dir(m.path("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["g"]);
    assert_eq!(
        fs::metadata(m.path("d/g")).unwrap().len(),
        data.len() as u64
    );
}

#[test]
fn requests_come_through_the_rings_where_the_kernel_offers_them() {
    if let Err(why) = kernel_offers_uring() {
        assert!(!required(), "QUIRE_REQUIRE_FUSE_URING=1 but {why}");
        return skip(&why);
    }
    let dir = Scratch::new("channel-uring");
    fs::create_dir(dir.path("src")).unwrap();
    fs::create_dir(dir.path("mnt")).unwrap();
    let m = match Mount::start_with(
        &dir.path("src"),
        &dir.path("mnt"),
        "32M",
        &["--channel", "auto"],
    ) {
        Ok(m) => m,
        Err(why) => return skip(&why),
    };
    let before = counter(&stat(&m.mnt), "fuse_ring_requests");
    exercise(&m);
    let s = stat(&m.mnt);
    assert_eq!(counter(&s, "fuse_uring"), 1, "{s}");
    assert!(channel_line(&s).starts_with("io_uring"), "{s}");
    assert!(counter(&s, "fuse_ring_buffer_bytes") > 0);
    let served = counter(&s, "fuse_ring_requests") - before;
    // 3 MB written and read in at most 1 MiB requests, the lookups, the rename, the listing.
    assert!(
        served >= 8,
        "only {served} requests came through the rings:\n{s}"
    );
    let st = m.unmount();
    assert!(st.success(), "the daemon exited with {st}");
    assert_eq!(fs::read(dir.path("src/d/g")).unwrap().len(), 3_000_000);
}

#[test]
fn the_classic_channel_is_used_when_asked_for_and_says_so() {
    let dir = Scratch::new("channel-classic");
    fs::create_dir(dir.path("src")).unwrap();
    fs::create_dir(dir.path("mnt")).unwrap();
    let m = match Mount::start_with(
        &dir.path("src"),
        &dir.path("mnt"),
        "32M",
        &["--channel", "classic"],
    ) {
        Ok(m) => m,
        Err(why) => return skip(&why),
    };
    exercise(&m);
    let s = stat(&m.mnt);
    assert_eq!(counter(&s, "fuse_uring"), 0, "{s}");
    assert!(channel_line(&s).contains("asked for"), "{s}");
    assert_eq!(counter(&s, "fuse_ring_requests"), 0);
    assert!(m.unmount().success());
}

#[test]
fn an_unknown_channel_is_refused_before_anything_is_mounted() {
    let dir = Scratch::new("channel-bad");
    fs::create_dir(dir.path("src")).unwrap();
    fs::create_dir(dir.path("mnt")).unwrap();
    let out = Command::new(QUIRE)
        .args(["mount", "--foreground", "--channel", "carrier-pigeon"])
        .arg(dir.path("src"))
        .arg(dir.path("mnt"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("auto, classic, uring"), "{err}");
    assert!(!common::is_mounted(&dir.path("mnt")));
}
