//! `quire mount URL MNT`: an object store mounted through the real `quire` binary — mostly
//! `memory:///` (an in-memory bucket, fresh for each mount), once `file:///DIR` to see the
//! objects land — driven by std::fs and real programs (cp, diff, dd). And an unreachable S3
//! endpoint fails at mount time, mounting nothing.
//!
//! Where FUSE is missing, a test prints `skipped: why` and passes.

mod common;
// The S3 tools' finder, the one the `quire` binary's benchmark carries.
#[path = "../src/s3_tools.rs"]
#[allow(dead_code)] // the proxy is the benchmark's
mod s3_tools;

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{have, is_mounted, random_bytes, sh, skip, Mount, Scratch, QUIRE};

/// A mount of `url` at `<scratch>/mnt` (the mount is dropped, so unmounted, first).
struct ObjMount {
    mount: Option<Mount>,
    dir: Scratch,
}

impl ObjMount {
    fn new(tag: &str, url: &str) -> Option<ObjMount> {
        let dir = Scratch::new(&format!("obj-{tag}"));
        fs::create_dir(dir.path("mnt")).unwrap();
        fs::create_dir(dir.path("staging")).unwrap();
        let staging = dir.path("staging");
        let extra = ["--staging", staging.to_str().unwrap()];
        match Mount::start_with(Path::new(url), &dir.path("mnt"), "64M", &extra) {
            Ok(m) => Some(ObjMount {
                mount: Some(m),
                dir,
            }),
            Err(why) => {
                skip(&why);
                None
            }
        }
    }

    fn mnt(&self, rel: &str) -> PathBuf {
        self.dir.path("mnt").join(rel)
    }

    fn unmount(&mut self) {
        let st = self.mount.take().expect("mounted").unmount();
        assert!(st.success(), "the daemon exited with {st}");
        assert!(!is_mounted(&self.dir.path("mnt")));
    }
}

/// Whether `/dev/fuse` opens here; if not, the test says `skipped: why`.
fn fuse_opens() -> bool {
    match fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => true,
        Err(e) => {
            skip(&format!("/dev/fuse cannot be opened: {e}"));
            false
        }
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_file_written_and_closed_reads_back_and_lists() {
    let Some(m) = ObjMount::new("rw", "memory:///") else {
        return;
    };
    let f = m.mnt("hello.txt");
    fs::write(&f, b"hello, bucket\n").unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"hello, bucket\n");
    assert_eq!(fs::metadata(&f).unwrap().len(), 14);
    // Appending through a second open.
    let mut a = fs::OpenOptions::new().append(true).open(&f).unwrap();
    a.write_all(b"more\n").unwrap();
    drop(a);
    assert_eq!(fs::read(&f).unwrap(), b"hello, bucket\nmore\n");
    fs::create_dir(m.mnt("sub")).unwrap();
    fs::write(m.mnt("sub/x"), b"x").unwrap();
    assert_eq!(names(&m.mnt("")), ["hello.txt", "sub"]);
    assert_eq!(names(&m.mnt("sub")), ["x"]);
    assert!(fs::metadata(m.mnt("sub")).unwrap().is_dir());
    // O_EXCL on an existing name.
    let e = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&f)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists);
    // unlink, then it is gone.
    fs::remove_file(&f).unwrap();
    assert_eq!(
        fs::metadata(&f).unwrap_err().kind(),
        ErrorKind::NotFound,
        "unlinked"
    );
    assert_eq!(names(&m.mnt("")), ["sub"]);
}

#[test]
fn cp_r_of_a_tree_diffs_clean() {
    let Some(m) = ObjMount::new("cp", "memory:///") else {
        return;
    };
    let src = Scratch::new("obj-cp-src");
    let tree = src.path("tree");
    for d in ["a", "a/b", "c"] {
        fs::create_dir_all(tree.join(d)).unwrap();
    }
    for i in 0..20u64 {
        let dir = ["", "a", "a/b", "c"][i as usize % 4];
        let len = (i as usize * 3571) % 20000;
        fs::write(tree.join(dir).join(format!("f{i}")), random_bytes(len, i)).unwrap();
    }
    fs::write(tree.join("a/big"), random_bytes(3 << 20, 99)).unwrap();
    sh(&format!(
        "cp -r {} {}",
        tree.display(),
        m.mnt("tree").display()
    ));
    sh(&format!(
        "diff -r {} {}",
        tree.display(),
        m.mnt("tree").display()
    ));
    assert_eq!(names(&m.mnt("tree")), names(&tree));
    assert_eq!(names(&m.mnt("tree/a")), names(&tree.join("a")));
    assert_eq!(fs::metadata(m.mnt("tree/a/big")).unwrap().len(), 3 << 20);
}

#[test]
fn dd_of_8_mib_reads_back_byte_for_byte() {
    let Some(m) = ObjMount::new("dd", "memory:///") else {
        return;
    };
    let s = Scratch::new("obj-dd-src");
    let data = random_bytes(8 << 20, 7);
    fs::write(s.path("r"), &data).unwrap();
    sh(&format!(
        "dd if={} of={} bs=1M conv=fsync status=none",
        s.path("r").display(),
        m.mnt("f").display()
    ));
    assert_eq!(fs::metadata(m.mnt("f")).unwrap().len(), 8 << 20);
    let mut back = Vec::new();
    fs::File::open(m.mnt("f"))
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert!(back == data, "the 8 MiB read back differ");
    sh(&format!(
        "cmp {} {}",
        s.path("r").display(),
        m.mnt("f").display()
    ));
}

#[test]
fn truncate_unlink_and_rmdir_of_a_non_empty_directory() {
    let Some(m) = ObjMount::new("trunc", "memory:///") else {
        return;
    };
    let f = m.mnt("t");
    fs::write(&f, random_bytes(100_000, 3)).unwrap();
    // ftruncate through an open handle, down then up.
    let h = fs::OpenOptions::new().write(true).open(&f).unwrap();
    h.set_len(1000).unwrap();
    h.set_len(5000).unwrap();
    drop(h);
    let back = fs::read(&f).unwrap();
    assert_eq!(back.len(), 5000);
    assert_eq!(&back[..1000], &random_bytes(100_000, 3)[..1000]);
    assert!(back[1000..].iter().all(|&b| b == 0), "extended with zeros");
    // truncate(2) by path, no handle open.
    sh(&format!("truncate -s 10 {}", f.display()));
    assert_eq!(fs::read(&f).unwrap(), &random_bytes(100_000, 3)[..10]);
    // O_TRUNC.
    fs::write(&f, b"short").unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"short");

    fs::create_dir(m.mnt("d")).unwrap();
    fs::write(m.mnt("d/in"), b"1").unwrap();
    let e = fs::remove_dir(m.mnt("d")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY), "{e}");
    fs::remove_file(m.mnt("d/in")).unwrap();
    fs::remove_dir(m.mnt("d")).unwrap();
    fs::remove_file(&f).unwrap();
    assert!(names(&m.mnt("")).is_empty(), "{:?}", names(&m.mnt("")));
    // An empty directory made and removed.
    fs::create_dir(m.mnt("empty")).unwrap();
    assert_eq!(
        fs::create_dir(m.mnt("empty")).unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    fs::remove_dir(m.mnt("empty")).unwrap();
    assert_eq!(
        fs::remove_dir(m.mnt("empty")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn rename_of_a_file_works_and_of_a_directory_is_exdev() {
    let Some(m) = ObjMount::new("mv", "memory:///") else {
        return;
    };
    let data = random_bytes(300_000, 5);
    fs::write(m.mnt("a"), &data).unwrap();
    fs::rename(m.mnt("a"), m.mnt("b")).unwrap();
    assert_eq!(fs::read(m.mnt("b")).unwrap(), data);
    assert_eq!(
        fs::metadata(m.mnt("a")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // Over an existing file.
    fs::write(m.mnt("c"), b"old").unwrap();
    fs::rename(m.mnt("b"), m.mnt("c")).unwrap();
    assert_eq!(fs::read(m.mnt("c")).unwrap(), data);
    assert_eq!(names(&m.mnt("")), ["c"]);
    // A directory.
    fs::create_dir(m.mnt("d")).unwrap();
    fs::write(m.mnt("d/f"), b"f").unwrap();
    let e = fs::rename(m.mnt("d"), m.mnt("e")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{e}");
    // mv falls back to copy and delete.
    sh(&format!(
        "mv {} {}",
        m.mnt("d").display(),
        m.mnt("e").display()
    ));
    assert_eq!(fs::read(m.mnt("e/f")).unwrap(), b"f");
    assert_eq!(names(&m.mnt("")), ["c", "e"]);
}

#[test]
fn a_file_url_mount_leaves_the_objects_in_the_directory() {
    let store = Scratch::new("obj-file-store");
    let url = format!("file://{}", store.0.display());
    let Some(mut m) = ObjMount::new("file", &url) else {
        return;
    };
    fs::create_dir(m.mnt("x")).unwrap();
    fs::write(m.mnt("x/y"), b"persisted").unwrap();
    fs::write(m.mnt("top"), random_bytes(70_000, 2)).unwrap();
    m.unmount();
    assert_eq!(fs::read(store.path("x/y")).unwrap(), b"persisted");
    assert_eq!(
        fs::read(store.path("top")).unwrap(),
        random_bytes(70_000, 2)
    );
}

#[test]
fn an_unreachable_s3_endpoint_fails_at_mount_time_and_mounts_nothing() {
    if !fuse_opens() {
        return;
    }
    let dir = Scratch::new("obj-s3-bad");
    fs::create_dir(dir.path("mnt")).unwrap();
    let t0 = Instant::now();
    let out = Command::new(QUIRE)
        .args(["mount", "--retry-timeout", "1", "s3://no-such-bucket/p"])
        .arg(dir.path("mnt"))
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "x")
        .env("AWS_SECRET_ACCESS_KEY", "y")
        .env("AWS_REGION", "us-east-1")
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "quire mount succeeded: {err}");
    assert!(
        err.contains("cannot use s3://no-such-bucket/p") && err.contains("nothing mounted"),
        "a clear message: {err}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "failed in {:?}",
        t0.elapsed()
    );
    assert!(!is_mounted(&fs::canonicalize(dir.path("mnt")).unwrap()));
}

/// The project's S3 server (`tools/s3-server`; found or built on first use by `s3_tools`),
/// serving bucket `bucket` from a scratch directory.
struct S3Server {
    child: std::process::Child,
    port: u16,
    root: Scratch,
}

impl S3Server {
    fn start() -> Option<S3Server> {
        let bin = s3_tools::for_test()?.server;
        let root = Scratch::new("obj-s3-server");
        fs::create_dir(root.path("bucket")).unwrap();
        let pf = root.path(".port");
        let mut child = Command::new(bin)
            .arg("--root")
            .arg(&root.0)
            .args(["--addr", "127.0.0.1:0", "--port-file"])
            .arg(&pf)
            .args(["--access-key", "quire", "--secret-key", "quire-secret"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting quire-s3-server");
        let t0 = Instant::now();
        let port = loop {
            if let Some(p) = fs::read_to_string(&pf)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break p;
            }
            assert!(child.try_wait().unwrap().is_none(), "the server exited");
            assert!(t0.elapsed() < Duration::from_secs(20), "no port");
            std::thread::sleep(Duration::from_millis(20));
        };
        Some(S3Server { child, port, root })
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `quire mount --foreground s3://bucket/pre MNT` against `server`.
fn mount_s3(server: &S3Server, mnt: &Path) -> Mount {
    mount_s3_with(server, mnt, "64M", &[], None)
}

/// [`mount_s3`] with a capacity, more arguments, and the memory cgroup the daemon is moved into
/// as soon as it starts (its `cgroup.procs`).
fn mount_s3_with(
    server: &S3Server,
    mnt: &Path,
    capacity: &str,
    extra: &[&str],
    group: Option<&Path>,
) -> Mount {
    let mnt = fs::canonicalize(mnt).unwrap();
    let url = "s3://bucket/pre";
    let mut child = Command::new(QUIRE)
        .args(["mount", "--foreground", "--capacity", capacity])
        .args(if extra.contains(&"--retry-timeout") {
            &[][..]
        } else {
            &["--retry-timeout", "5"][..]
        })
        .args(extra)
        .arg(url)
        .arg(&mnt)
        .env(
            "AWS_ENDPOINT_URL",
            format!("http://127.0.0.1:{}", server.port),
        )
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "quire")
        .env("AWS_SECRET_ACCESS_KEY", "quire-secret")
        .env("AWS_REGION", "us-east-1")
        // A test that allows a longer retry allows each request as long: object_store's own
        // per-request timeout (30 s) would cut a slow completion short and retry it, and a
        // retried CompleteMultipartUpload finds its upload gone (AccessDenied) though the
        // object is whole.
        .env(
            "AWS_TIMEOUT",
            extra
                .iter()
                .position(|a| *a == "--retry-timeout")
                .and_then(|i| extra.get(i + 1))
                .map_or("30s".to_string(), |s| format!("{s}s")),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(g) = group {
        fs::write(g, child.id().to_string()).expect("moving the daemon into its memory group");
    }
    let t0 = Instant::now();
    while !is_mounted(&mnt) {
        if let Ok(Some(st)) = child.try_wait() {
            let mut e = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut e);
            panic!("quire mount exited ({st}): {e}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "not mounted in 20 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Mount {
        src: PathBuf::from(url),
        mnt,
        child: Some(child),
        capacity: capacity.into(),
    }
}

#[test]
fn an_s3_mount_round_trips_through_the_s3_server_and_a_remount() {
    if !fuse_opens() {
        return;
    }
    let Some(server) = S3Server::start() else {
        return;
    };
    let dir = Scratch::new("obj-s3-mnt");
    fs::create_dir(dir.path("mnt")).unwrap();
    let m = mount_s3(&server, &dir.path("mnt"));
    let big = random_bytes(3 << 20, 11);
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/big"), &big).unwrap();
    fs::write(m.path("small"), b"small").unwrap();
    fs::rename(m.path("small"), m.path("renamed")).unwrap();
    assert_eq!(names(&m.path("")), ["d", "renamed"]);
    // The objects are under the prefix on the server.
    let obj = |k: &str| server.root.path("bucket").join("pre").join(k);
    assert_eq!(fs::read(obj("d/big")).unwrap(), big);
    assert_eq!(fs::read(obj("renamed")).unwrap(), b"small");
    assert!(!obj("small").exists());
    let st = m.unmount();
    assert!(st.success(), "{st}");
    // A fresh mount (nothing cached) reads them back.
    let m = mount_s3(&server, &dir.path("mnt"));
    assert_eq!(fs::read(m.path("d/big")).unwrap(), big);
    assert_eq!(fs::read(m.path("renamed")).unwrap(), b"small");
    let e = fs::remove_dir(m.path("d")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY), "{e}");
    let st = m.unmount();
    assert!(st.success(), "{st}");
}

/// `ls -l` of a directory: its one LIST gives every entry's attributes (READDIRPLUS), so the
/// stats after it ask the store nothing, and the sizes are the objects'. One file is still
/// open for writing: its size is the handle's, not the (older) object's.
#[test]
fn a_long_listing_costs_one_list_and_no_head_per_name() {
    if !fuse_opens() {
        return;
    }
    let Some(server) = S3Server::start() else {
        return;
    };
    let dir = Scratch::new("obj-s3-ls");
    fs::create_dir(dir.path("mnt")).unwrap();
    const N: usize = 40;
    let m = mount_s3(&server, &dir.path("mnt"));
    fs::create_dir(m.path("d")).unwrap();
    fs::create_dir(m.path("d/sub")).unwrap();
    for i in 0..N {
        fs::write(m.path(&format!("d/f{i:02}")), vec![b'x'; 100 + i]).unwrap();
    }
    fs::write(m.path("d/sub/inner"), b"inner").unwrap();
    assert!(m.unmount().success());

    // A fresh mount: nothing known of `d`'s names.
    let m = mount_s3(&server, &dir.path("mnt"));
    // The open file is held by a shell, not by this process: a child that another test forks
    // meanwhile would carry this process's descriptor until its exec, and each close of a
    // descriptor of a mount's file is a FLUSH, an upload here.
    let mut holder = Command::new("sh")
        .arg("-c")
        .arg(r#"exec 3>>"$1" && printf '%1000s' '' >&3 && echo ready && { read _ || true; }"#)
        .arg("sh")
        .arg(m.path("d/f00"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = [0u8; 6];
    holder
        .stdout
        .take()
        .unwrap()
        .read_exact(&mut ready)
        .unwrap();
    assert_eq!(&ready, b"ready\n");
    let before = quire_stat(&m.path(""));
    let mut seen = Vec::new();
    for e in fs::read_dir(m.path("d")).unwrap() {
        let e = e.unwrap();
        let md = fs::metadata(e.path()).unwrap();
        seen.push((e.file_name().into_string().unwrap(), md.is_dir(), md.len()));
    }
    let after = quire_stat(&m.path(""));
    seen.sort();
    let mut want: Vec<(String, bool, u64)> = (0..N)
        .map(|i| (format!("f{i:02}"), false, 100 + i as u64))
        .collect();
    want[0].2 = 100 + 1000;
    want.push(("sub".into(), true, 0));
    want.sort();
    assert_eq!(seen.len(), want.len());
    for (s, w) in seen.iter().zip(&want) {
        assert_eq!((&s.0, s.1), (&w.0, w.1));
        if !s.1 {
            assert_eq!(s.2, w.2, "the size of {}", s.0);
        }
    }
    let delta = |name| counter(&after, name) - counter(&before, name);
    // The kernel keeps the entries' attributes for a second; a machine slow enough to let
    // some expire between the listing and the stats asks for those again.
    assert!(
        delta("object_head") * 4 < N as u64,
        "{} HEADs for {N} names listed (LISTs: {})",
        delta("object_head"),
        delta("object_list")
    );
    assert!(
        delta("object_list") * 4 < N as u64,
        "{} LISTs for {N} names listed",
        delta("object_list")
    );
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    assert!(m.unmount().success());
}

/// A mount of `url` with a small memory budget and a disk tier in `tier`.
fn mount_with_tier(url: &str, mnt: &Path, tier: &Path) -> Option<Mount> {
    let extra = ["--disk-cache", tier.to_str().unwrap(), "--disk-size", "64M"];
    match Mount::start_with(Path::new(url), mnt, "4M", &extra) {
        Ok(m) => Some(m),
        Err(why) => {
            skip(&why);
            None
        }
    }
}

/// The value of counter `name` in `quire stat`'s output.
fn counter(stat: &str, name: &str) -> u64 {
    stat.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in quire stat:\n{stat}"))
}

fn quire_stat(mnt: &Path) -> String {
    let out = Command::new(QUIRE).arg("stat").arg(mnt).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Data evicted from a 4 MiB budget lands in the disk tier; a remount with the same tier
/// reads it from disk rather than the store, and `quire stat` shows the backing's and the
/// tier's counters.
#[test]
fn a_disk_tier_serves_a_remount_and_quire_stat_shows_it() {
    let store = Scratch::new("obj-tier-store");
    let data = random_bytes(16 << 20, 7);
    fs::write(store.path("big"), &data).unwrap();
    let url = format!("file://{}", store.0.display());
    let dir = Scratch::new("obj-tier");
    fs::create_dir(dir.path("mnt")).unwrap();
    let tier = dir.path("tier");
    let mnt = dir.path("mnt");
    let Some(m) = mount_with_tier(&url, &mnt, &tier) else {
        return;
    };
    assert_eq!(fs::read(mnt.join("big")).unwrap(), data);
    let first = quire_stat(&mnt);
    assert!(counter(&first, "object_get") > 0);
    assert!(counter(&first, "object_bytes_read") >= data.len() as u64);
    // Let the tier's writer catch up before the daemon goes: what still waits in its queue
    // goes with the daemon, and on a loaded machine the writer may be behind for longer than
    // any fixed pause.
    let t0 = Instant::now();
    loop {
        let stat = quire_stat(&mnt);
        if counter(&stat, "tier_queued_bytes") == 0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the tier's queue still holds offers after 10 s:\n{stat}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(m.unmount().success());

    let Some(m) = mount_with_tier(&url, &mnt, &tier) else {
        return;
    };
    assert_eq!(fs::read(mnt.join("big")).unwrap(), data);
    let second = quire_stat(&mnt);
    let hits = counter(&second, "tier_hits");
    let fetched = counter(&second, "object_bytes_read");
    assert!(
        hits * 4096 >= (8 << 20),
        "a remount read {hits} pages from the tier:\n{second}"
    );
    assert!(
        fetched < data.len() as u64 / 2,
        "fetched {fetched} bytes again"
    );
    assert_eq!(counter(&second, "tier_corrupt"), 0);
    assert!(m.unmount().success());
}

/// A database someone else put in the bucket, opened read-only by sqlite through the mount.
#[test]
fn sqlite_reads_a_database_from_the_bucket() {
    if !have("sqlite3") {
        return skip("sqlite3 is not installed");
    }
    let store = Scratch::new("obj-sqlite-store");
    let db = store.path("app.db");
    sh(&format!(
        "sqlite3 {} 'create table t(k integer primary key, v text); \
         with recursive n(i) as (select 1 union all select i + 1 from n where i < 20000) \
         insert into t select i, hex(randomblob(40)) from n; create index tv on t(v);'",
        db.display()
    ));
    let want = sh(&format!(
        "sqlite3 {} 'select count(*), sum(length(v)), max(k) from t'",
        db.display()
    ));
    let url = format!("file://{}", store.0.display());
    let Some(m) = ObjMount::new("sqlite", &url) else {
        return;
    };
    let through = m.mnt("app.db");
    let ok = sh(&format!(
        "sqlite3 -readonly {} 'pragma integrity_check'",
        through.display()
    ));
    assert_eq!(ok.trim(), "ok");
    let got = sh(&format!(
        "sqlite3 -readonly {} 'select count(*), sum(length(v)), max(k) from t'",
        through.display()
    ));
    assert_eq!(got, want);
}

/// fio writes a file with checksummed blocks through the mount and verifies them back.
#[test]
fn fio_verify_through_the_mount() {
    if !have("fio") {
        return skip("fio is not installed");
    }
    let Some(m) = ObjMount::new("fio", "memory:///") else {
        return;
    };
    let f = m.mnt("fio.dat");
    sh(&format!(
        "fio --name=verify --filename={} --rw=randwrite --bs=16k --size=24M --ioengine=psync \
         --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 --randrepeat=1 --output-format=terse >/dev/null",
        f.display()
    ));
    // Closed, so uploaded: a fresh read of the whole file is whole.
    assert_eq!(fs::metadata(&f).unwrap().len(), 24 << 20);
}

/// Close-to-open through the mount: an object replaced behind it is read anew by the next
/// open; one replaced under an open reader fails that reader's next miss with `ESTALE`, never
/// bytes of the new version.
#[test]
fn replaced_objects_through_the_mount() {
    use std::os::unix::fs::FileExt;
    let store = Scratch::new("obj-replace-store");
    let old = random_bytes(32 << 20, 31);
    fs::write(store.path("obj"), &old).unwrap();
    let url = format!("file://{}", store.0.display());
    let dir = Scratch::new("obj-replace");
    fs::create_dir(dir.path("mnt")).unwrap();
    let mnt = dir.path("mnt");
    let m = match Mount::start_with(Path::new(&url), &mnt, "4M", &[]) {
        Ok(m) => m,
        Err(why) => return skip(&why),
    };
    let f = fs::File::open(mnt.join("obj")).unwrap();
    let mut buf = vec![0u8; 4096];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, &old[..4096]);
    // Replaced behind the mount (another writer of the bucket), same size.
    let new = random_bytes(32 << 20, 32);
    let tmp = store.path(".obj.tmp");
    fs::write(&tmp, &new).unwrap();
    fs::rename(&tmp, store.path("obj")).unwrap();
    // Far past anything read ahead, under a 4 MiB budget: the store must be asked.
    let e = f
        .read_exact_at(&mut buf, 30 << 20)
        .expect_err("the object changed under an open reader");
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
    drop(f);
    // A new open (after the attribute timeout) sees the new version.
    std::thread::sleep(Duration::from_millis(1100));
    let f = fs::File::open(mnt.join("obj")).unwrap();
    f.read_exact_at(&mut buf, 30 << 20).unwrap();
    assert_eq!(buf, &new[30 << 20..(30 << 20) + 4096]);
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, &new[..4096], "an old version's cached page");
    drop(f);
    assert!(m.unmount().success());
}

/// A cgroup-v1 memory group made under this process's own, removed when dropped.
struct MemGroup {
    dir: PathBuf,
}

impl MemGroup {
    /// A fresh group limited to `limit` bytes, or why none can be made.
    fn new(name: &str, limit: u64) -> Result<MemGroup, String> {
        let root = Path::new("/sys/fs/cgroup/memory");
        if !root.join("memory.limit_in_bytes").exists() {
            return Err("no cgroup-v1 memory controller at /sys/fs/cgroup/memory".into());
        }
        let own = fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let rel = own
            .lines()
            .find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
                ctrl.split(',').any(|c| c == "memory").then_some(path)
            })
            .ok_or("this process is in no memory cgroup")?;
        let dir = root
            .join(rel.trim_start_matches('/'))
            .join(format!("quire-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir(&dir);
        fs::create_dir(&dir).map_err(|e| format!("making {}: {e}", dir.display()))?;
        let g = MemGroup { dir };
        fs::write(g.dir.join("memory.limit_in_bytes"), limit.to_string())
            .map_err(|e| format!("limiting {}: {e}", g.dir.display()))?;
        Ok(g)
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    fn value(&self, file: &str) -> u64 {
        fs::read_to_string(self.dir.join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// A line `key N` of `file` (`memory.stat`, `memory.oom_control`).
    fn field(&self, file: &str, key: &str) -> u64 {
        fs::read_to_string(self.dir.join(file))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The group's peak (`memory.max_usage_in_bytes`) and OOM kills, as a line for messages.
    fn report(&self) -> String {
        format!(
            "group peak {} MiB of {} MiB, oom_kill {}, under_oom {}, failcnt {}, rss {} MiB, cache {} MiB",
            self.value("memory.max_usage_in_bytes") >> 20,
            self.value("memory.limit_in_bytes") >> 20,
            self.field("memory.oom_control", "oom_kill"),
            self.field("memory.oom_control", "under_oom"),
            self.value("memory.failcnt"),
            self.field("memory.stat", "rss") >> 20,
            self.field("memory.stat", "cache") >> 20,
        )
    }
}

impl Drop for MemGroup {
    fn drop(&mut self) {
        // Its processes have exited; what they left charged moves to the parent.
        for _ in 0..100 {
            if fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The `i`th MiB of the test's object: one random MiB with `i` in its first bytes.
fn mib_of(block: &[u8], i: u64) -> Vec<u8> {
    let mut b = block.to_vec();
    b[..8].copy_from_slice(&i.to_le_bytes());
    b
}

/// The mount's whole memory stays within its budget: with `--capacity 256M`, a disk tier and a
/// staging directory, in a memory group of the capacity + 64 MiB (which charges the page cache
/// of its staging and tier files too), a 1 GiB file is written and fsynced, and a fresh mount
/// reads it back cold — the daemon is never killed, every byte comes back, and `quire stat`'s
/// resident memory is within the budget it states.
///
/// What it guards: without the bounds on upload parts, tier offers and spilled files the
/// daemon is killed by the group within 15 s of the write, and with a 16 MiB readahead window
/// during the cold read (which peaks at 324 MiB in a group without a limit; 298 MiB with the
/// 8 MiB window).
#[test]
fn an_s3_mount_stays_within_a_memory_group_of_its_capacity_plus_64_mib() {
    const CAPACITY: u64 = 256 << 20;
    const SIZE: u64 = 1 << 30;
    if !fuse_opens() {
        return;
    }
    let group = match MemGroup::new("s3-budget", CAPACITY + (64 << 20)) {
        Ok(g) => g,
        Err(why) => return skip(&why),
    };
    let Some(server) = S3Server::start() else {
        return;
    };
    let dir = Scratch::new("obj-s3-budget");
    for d in ["mnt", "tier", "staging"] {
        fs::create_dir(dir.path(d)).unwrap();
    }
    let (tier, staging) = (dir.path("tier"), dir.path("staging"));
    // Completing a 1 GiB multipart upload makes the test server join and hash the parts, which
    // takes the debug build longer than the 5 s the other tests allow a request.
    let extra = [
        "--retry-timeout",
        "300",
        "--disk-cache",
        tier.to_str().unwrap(),
        "--disk-size",
        "2G",
        "--staging",
        staging.to_str().unwrap(),
    ];
    let procs = group.procs();
    let mount = || mount_s3_with(&server, &dir.path("mnt"), "256M", &extra, Some(&procs));
    let block = random_bytes(1 << 20, 41);
    let t0 = Instant::now();

    // What the daemon said about its memory, checked against the budget it states.
    let check_stat = |m: &Mount, when: &str| {
        let st = quire_stat(&m.path(""));
        let (rss, budget) = (
            counter(&st, "memory_rss_bytes"),
            counter(&st, "memory_mount_budget_bytes"),
        );
        assert!(
            rss <= budget,
            "{when}: resident {} MiB over the stated budget {} MiB",
            rss >> 20,
            budget >> 20
        );
        assert!(counter(&st, "memory_upload_bytes_max") <= counter(&st, "memory_upload_bound"));
        assert!(
            counter(&st, "memory_tier_queued_bytes_max") <= counter(&st, "memory_tier_queue_bound")
        );
        // --capacity pays for what grows with the cache: the frames, their descriptors and the
        // tier's queue within it.
        let frames = counter(&st, "memory_frame_pool_bytes");
        assert!(
            frames + frames / 64 + counter(&st, "memory_tier_queue_bound") <= CAPACITY,
            "{when}: {} MiB of frames with their descriptors and the tier's queue pass --capacity",
            frames >> 20
        );
        eprintln!(
            "{when}: rss {} MiB, budget {} MiB, upload max {} MiB, tier queue max {} MiB; {}",
            rss >> 20,
            budget >> 20,
            counter(&st, "memory_upload_bytes_max") >> 20,
            counter(&st, "memory_tier_queued_bytes_max") >> 20,
            group.report()
        );
    };

    // The file is written and read by `dd`, through pipes: a descriptor of it in this process
    // would be carried by every child another test forks meanwhile until its exec, and each
    // close of it is a FLUSH, which uploads the file (a gigabyte, by the end).
    let mut m = mount();
    let written = (|| -> std::io::Result<()> {
        let mut dd = Command::new("dd")
            .arg(format!("of={}", m.path("big").display()))
            .args(["bs=1M", "iflag=fullblock", "conv=fsync", "status=none"])
            .stdin(Stdio::piped())
            .spawn()?;
        let mut to = dd.stdin.take().unwrap();
        for i in 0..SIZE >> 20 {
            to.write_all(&mib_of(&block, i))?;
        }
        drop(to);
        let st = dd.wait()?;
        if st.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("dd exited with {st}")))
        }
    })();
    let alive = m.child.as_mut().unwrap().try_wait().unwrap().is_none();
    assert!(
        written.is_ok() && alive,
        "writing 1 GiB: {written:?}, daemon alive: {alive}; {}",
        group.report()
    );
    check_stat(&m, "after the write");
    assert!(m.unmount().success());
    assert_eq!(
        fs::metadata(server.root.path("bucket/pre/big"))
            .unwrap()
            .len(),
        SIZE
    );
    let write_s = t0.elapsed().as_secs_f64();
    fs::write(group.dir.join("memory.max_usage_in_bytes"), "0").unwrap();

    // Cold: a new daemon, nothing in its page cache or tier.
    let mut m = mount();
    let read = (|| -> std::io::Result<u64> {
        let mut dd = Command::new("dd")
            .arg(format!("if={}", m.path("big").display()))
            .args(["bs=1M", "status=none"])
            .stdout(Stdio::piped())
            .spawn()?;
        let mut from = dd.stdout.take().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut bad = 0;
        for i in 0..SIZE >> 20 {
            from.read_exact(&mut buf)?;
            bad += u64::from(buf != mib_of(&block, i));
        }
        let st = dd.wait()?;
        if !st.success() {
            return Err(std::io::Error::other(format!("dd exited with {st}")));
        }
        Ok(bad)
    })();
    let alive = m.child.as_mut().unwrap().try_wait().unwrap().is_none();
    assert!(
        matches!(read, Ok(0)) && alive,
        "reading 1 GiB cold: {read:?} MiB wrong, daemon alive: {alive}; {}",
        group.report()
    );
    check_stat(&m, "after the cold read");
    assert_eq!(group.field("memory.oom_control", "oom_kill"), 0);
    assert!(m.unmount().success());
    eprintln!(
        "write + fsync and unmount {write_s:.1} s, cold read {:.1} s",
        t0.elapsed().as_secs_f64() - write_s
    );
}
