//! Real programs on a `quire mount` over a temporary directory: dd, fio, sqlite3, git and tar,
//! each followed by an unmount and a check of the source directory itself; a daemon killed with
//! SIGKILL loses no fsynced byte; the daemon's memory stays within its budget plus its stated
//! overhead while fio reads a file four times the budget.
//!
//! Where FUSE or a program is missing, the test prints `skipped: why` and passes.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{have, random_bytes, sh, skip, Mount, Scratch, Setup};

#[test]
fn dd_64_mib_with_conv_fsync_reaches_the_source_byte_for_byte() {
    let Some(mut s) = Setup::new("dd", "32M") else {
        return;
    };
    let data = s.dir.path("random");
    fs::write(&data, random_bytes(64 << 20, 1)).unwrap();
    sh(&format!(
        "dd if={} of={} bs=1M conv=fsync status=none",
        data.display(),
        s.mnt("f").display()
    ));
    sh(&format!("cmp {} {}", data.display(), s.mnt("f").display()));
    s.unmount();
    sh(&format!("cmp {} {}", data.display(), s.src("f").display()));
}

/// fio's options for the random-write job (the verify pass must repeat them).
const FIO_JOB: &str = "--name=rw --rw=randwrite --bs=4k --size=16M --numjobs=2 \
     --ioengine=psync --verify=crc32c --randrepeat=1 --fsync_on_close=1 --group_reporting \
     --verify_state_save=0";

#[test]
fn fio_random_writes_verify_in_the_job_after_a_remount_and_on_the_source() {
    if !have("fio") {
        return skip("fio is not installed");
    }
    let Some(mut s) = Setup::new("fio", "32M") else {
        return;
    };
    let dir = s.mnt("");
    sh(&format!(
        "fio {FIO_JOB} --do_verify=1 --directory={}",
        dir.display()
    ));
    s.unmount();
    s.remount("32M");
    // A separate verify pass through a fresh mount (nothing cached).
    sh(&format!(
        "fio {FIO_JOB} --verify_only --directory={}",
        dir.display()
    ));
    s.unmount();
    // And on the source directory itself.
    sh(&format!(
        "fio {FIO_JOB} --verify_only --directory={}",
        s.src("").display()
    ));
}

fn sqlite(db: &Path, sql: &str) -> String {
    sh(&format!("sqlite3 {} \"{}\"", db.display(), sql))
        .trim()
        .to_string()
}

#[test]
fn sqlite_100k_rows_in_rollback_journal_and_wal_modes_stay_intact_across_a_remount() {
    if !have("sqlite3") {
        return skip("sqlite3 is not installed");
    }
    let Some(mut s) = Setup::new("sqlite", "32M") else {
        return;
    };
    for (db, mode) in [("journal.db", "delete"), ("wal.db", "wal")] {
        let p = s.mnt(db);
        assert_eq!(sqlite(&p, &format!("pragma journal_mode={mode};")), mode);
        sqlite(
            &p,
            "create table t(id integer primary key, v text, b blob); create index tv on t(v);",
        );
        // 100 transactions of 1000 rows.
        let mut script = String::new();
        for tx in 0..100 {
            script.push_str("begin;");
            script.push_str(&format!(
                "insert into t(v, b) select 'row-{tx}-' || value, randomblob(64) from generate_series(1, 1000);"
            ));
            script.push_str("commit;");
        }
        let script_path = s.dir.path(&format!("{db}.sql"));
        fs::write(&script_path, &script).unwrap();
        let out = Command::new("sqlite3")
            .arg(&p)
            .stdin(fs::File::open(&script_path).unwrap())
            .output()
            .unwrap();
        if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("generate_series")
        {
            // An old sqlite3 without generate_series: a recursive CTE does the same.
            let cte = (0..100)
                .map(|tx| format!("begin; with recursive c(x) as (select 1 union all select x+1 from c where x<1000) insert into t(v, b) select 'row-{tx}-' || x, randomblob(64) from c; commit;"))
                .collect::<String>();
            fs::write(&script_path, cte).unwrap();
            sh(&format!(
                "sqlite3 {} < {}",
                p.display(),
                script_path.display()
            ));
        } else {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(sqlite(&p, "pragma integrity_check;"), "ok", "{db}");
        assert_eq!(sqlite(&p, "select count(*) from t;"), "100000", "{db}");
    }
    s.unmount();
    s.remount("32M");
    for db in ["journal.db", "wal.db"] {
        let p = s.mnt(db);
        assert_eq!(
            sqlite(&p, "pragma integrity_check;"),
            "ok",
            "{db} after remount"
        );
        assert_eq!(sqlite(&p, "select count(*) from t;"), "100000", "{db}");
    }
    s.unmount();
    for db in ["journal.db", "wal.db"] {
        let p = s.src(db);
        assert_eq!(
            sqlite(&p, "pragma integrity_check;"),
            "ok",
            "{db} on the source"
        );
        assert_eq!(sqlite(&p, "select count(*) from t;"), "100000", "{db}");
    }
}

#[test]
fn git_init_commit_gc_fsck_and_clone_out_of_the_mount() {
    if !have("git") {
        return skip("git is not installed");
    }
    let Some(mut s) = Setup::new("git", "32M") else {
        return;
    };
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../quire-cache/src");
    let repo = s.mnt("repo");
    let g = "git -c user.email=t@example.com -c user.name=test -c init.defaultBranch=main";
    sh(&format!(
        "mkdir {r} && cp -r {t} {r}/src && cd {r} && {g} init -q && {g} add -A && {g} commit -q -m one \
         && echo change >> src/lib.rs && {g} commit -q -am two && {g} gc -q && {g} fsck --full --strict",
        r = repo.display(),
        t = tree.display()
    ));
    let out = s.dir.path("clone");
    sh(&format!(
        "git clone -q {} {}",
        repo.display(),
        out.display()
    ));
    sh(&format!(
        "diff -r {}/src {}/src",
        repo.display(),
        out.display()
    ));
    assert_eq!(
        sh(&format!("git -C {} rev-list --count HEAD", out.display())).trim(),
        "2"
    );
    s.unmount();
    sh(&format!(
        "git -C {} fsck --full --strict",
        s.src("repo").display()
    ));
    sh(&format!(
        "diff -r {}/src {}/src",
        s.src("repo").display(),
        out.display()
    ));
}

/// Names, kinds, modes, sizes, symbolic-link targets and hard-link groups under `root`.
fn describe(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut inodes: BTreeMap<u64, String> = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let md = fs::symlink_metadata(&p).unwrap();
            let mode = md.permissions().mode() & 0o7777;
            let what = if md.file_type().is_symlink() {
                format!("link -> {}", fs::read_link(&p).unwrap().display())
            } else if md.is_dir() {
                todo.push(p.clone());
                format!("dir {mode:o}")
            } else {
                // Hard links: the first name seen stands for the group.
                let first = inodes
                    .entry(md.ino())
                    .or_insert_with(|| rel.clone())
                    .clone();
                format!(
                    "file {mode:o} {} bytes, links {} (first {})",
                    md.len(),
                    md.nlink(),
                    if md.nlink() > 1 { first } else { rel.clone() }
                )
            };
            out.insert(rel, what);
        }
    }
    out
}

#[test]
fn tar_in_and_out_keeps_names_modes_symlinks_hard_links_and_sizes() {
    if !have("tar") || !have("diff") {
        return skip("tar or diff is not installed");
    }
    let Some(mut s) = Setup::new("tar", "32M") else {
        return;
    };
    // An original tree with the things tar must carry.
    let orig = s.dir.path("orig");
    fs::create_dir_all(orig.join("a/b/c")).unwrap();
    fs::write(orig.join("a/small"), b"small").unwrap();
    fs::write(orig.join("a/b/big"), random_bytes(3 << 20, 7)).unwrap();
    fs::write(orig.join("a/b/c/empty"), b"").unwrap();
    fs::write(orig.join("exec.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(orig.join("exec.sh"), fs::Permissions::from_mode(0o751)).unwrap();
    fs::write(orig.join("secret"), b"s").unwrap();
    fs::set_permissions(orig.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(orig.join("a/b"), fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink("a/small", orig.join("rel-link")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/target", orig.join("dangling")).unwrap();
    fs::hard_link(orig.join("a/small"), orig.join("a/b/c/hard")).unwrap();
    let names = (0..200)
        .map(|i| format!("n{i:03}-\u{e9}t\u{e9}"))
        .collect::<Vec<_>>();
    for n in &names {
        fs::write(orig.join("a").join(n), n.as_bytes()).unwrap();
    }
    let want = describe(&orig);

    let inside = s.mnt("x");
    fs::create_dir(&inside).unwrap();
    sh(&format!(
        "tar -C {} -cf - . | tar -C {} -xpf -",
        orig.display(),
        inside.display()
    ));
    assert_eq!(describe(&inside), want, "through the mount");
    let out = s.dir.path("out");
    fs::create_dir(&out).unwrap();
    sh(&format!(
        "tar -C {} -cf - . | tar -C {} -xpf -",
        inside.display(),
        out.display()
    ));
    sh(&format!(
        "diff -r --no-dereference {} {}",
        orig.display(),
        out.display()
    ));
    assert_eq!(describe(&out), want, "out of the mount");
    s.unmount();
    sh(&format!(
        "diff -r --no-dereference {} {}",
        orig.display(),
        s.src("x").display()
    ));
    assert_eq!(describe(&s.src("x")), want, "in the source");
}

#[test]
fn a_daemon_killed_with_sigkill_loses_no_fsynced_byte() {
    let Some(mut s) = Setup::new("crash", "32M") else {
        return;
    };
    let synced = s.dir.path("synced");
    fs::write(&synced, random_bytes(8 << 20, 3)).unwrap();
    // The client writes and fsyncs; then writes more without syncing.
    sh(&format!(
        "dd if={} of={} bs=1M conv=fsync status=none",
        synced.display(),
        s.mnt("c").display()
    ));
    fs::write(s.mnt("unsynced"), random_bytes(1 << 20, 4)).unwrap();
    let mut m = s.mount.take().unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(m.pid() as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let st = m.wait();
    assert!(!st.success(), "killed");
    // The mount is detached (the kernel aborted the connection when the daemon died).
    rustix::mount::unmount(&m.mnt, rustix::mount::UnmountFlags::DETACH).unwrap();
    drop(m);
    sh(&format!(
        "cmp {} {}",
        synced.display(),
        s.src("c").display()
    ));
}

#[test]
fn the_daemons_memory_stays_within_its_budget_while_fio_reads_four_times_as_much() {
    if !have("fio") {
        return skip("fio is not installed");
    }
    // The budget, and the overhead the daemon is allowed on top (see docs/ARCHITECTURE.md,
    // quire-fuse: binary, threads' request and reply buffers, dentries, allocator slack).
    const BUDGET: u64 = 64 << 20;
    const OVERHEAD: u64 = 48 << 20;
    let dir = Scratch::new("mem");
    fs::create_dir(dir.path("src")).unwrap();
    fs::create_dir(dir.path("mnt")).unwrap();
    // The file is made in the source directly: 4× the budget.
    let f = fs::File::create(dir.path("src/big")).unwrap();
    let chunk = random_bytes(1 << 20, 9);
    for _ in 0..((4 * BUDGET) >> 20) {
        use std::io::Write;
        (&f).write_all(&chunk).unwrap();
    }
    drop(f);
    let m = match Mount::start(&dir.path("src"), &dir.path("mnt"), "64M") {
        Ok(m) => m,
        Err(why) => return skip(&why),
    };
    let mut fio = Command::new("fio")
        .args([
            "--name=mem",
            "--rw=randread",
            "--bs=64k",
            "--ioengine=psync",
            "--numjobs=2",
            "--time_based",
            "--runtime=4",
            "--filename",
        ])
        .arg(m.path("big"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let mut peak = 0;
    while fio.try_wait().unwrap().is_none() {
        peak = peak.max(m.rss());
        std::thread::sleep(Duration::from_millis(50));
        assert!(t0.elapsed() < Duration::from_secs(60));
    }
    peak = peak.max(m.rss());
    let stats = sh(&format!("{} stat {}", common::QUIRE, m.mnt.display()));
    let read: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("fuse_bytes_read "))
        .unwrap()
        .parse()
        .unwrap();
    eprintln!(
        "daemon peak RSS {} MiB for a {} MiB budget; {} MiB read through it",
        peak >> 20,
        BUDGET >> 20,
        read >> 20
    );
    assert!(
        read > BUDGET,
        "fio read more than the budget ({read} bytes)"
    );
    assert!(
        peak <= BUDGET + OVERHEAD,
        "peak RSS {peak} exceeds the budget {BUDGET} + overhead {OVERHEAD}"
    );
    let st = m.unmount();
    assert!(st.success());
}
