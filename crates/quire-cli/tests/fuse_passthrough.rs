//! The benchmark's comparison mount, `quire mount --kind passthrough` (and `passthrough-cached`),
//! as a complete file system: renames in all three modes, hard links, what an unprivileged
//! caller makes through an `--allow-other` mount is the caller's, real programs (sqlite3, git,
//! PostgreSQL's `initdb` as the `postgres` user, RocksDB's `db_bench`) run on it, and the POSIX
//! conformance scenarios quire's mount is held to (`fuse_posix.rs`) give the backing file
//! system's answers on it too, with either kernel cache setting. A program missing here makes
//! its test print `skipped: why`.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::as_user::{self, expect, Scenario, User};
use common::{have, sh, skip, Mount, Scratch, Setup};

child_main!();

/// The two passthrough kinds: direct I/O opens, and the kernel's FUSE page cache on.
const KINDS: [&str; 2] = ["passthrough", "passthrough-cached"];

fn setup(tag: &str, kind: &str, extra: &[&str]) -> Option<Setup> {
    let mut args = vec!["--kind", kind];
    args.extend_from_slice(extra);
    Setup::with(&format!("{tag}-{kind}"), "16M", &args)
}

/// The conformance scenarios on the passthrough with direct I/O opens.
mod direct {
    use super::*;
    const KIND: &[&str] = &["--kind", "passthrough"];
    include!("common/posix_cases.rs");
}

/// The conformance scenarios on the passthrough with the kernel's FUSE page cache on.
mod cached {
    use super::*;
    const KIND: &[&str] = &["--kind", "passthrough-cached"];
    include!("common/posix_cases.rs");
}

fn rename2(from: &Path, to: &Path, flags: rustix::fs::RenameFlags) -> rustix::io::Result<()> {
    rustix::fs::renameat_with(rustix::fs::CWD, from, rustix::fs::CWD, to, flags)
}

#[test]
fn renames_replace_refuse_or_exchange_and_the_next_lookup_and_read_see_it() {
    use rustix::fs::RenameFlags as F;
    for kind in KINDS {
        let Some(s) = setup("pt-rename", kind, &[]) else {
            return;
        };
        fs::create_dir(s.mnt("d")).unwrap();
        fs::write(s.mnt("a"), b"alpha").unwrap();
        fs::write(s.mnt("b"), b"bravo").unwrap();
        // Read once, so the kernel holds the names (and with the cache, the data).
        assert_eq!(fs::read(s.mnt("a")).unwrap(), b"alpha");
        assert_eq!(fs::read(s.mnt("b")).unwrap(), b"bravo");

        // Plain: replaces the target.
        rename2(&s.mnt("a"), &s.mnt("d/c"), F::empty()).unwrap();
        assert!(!s.mnt("a").exists(), "{kind}: the old name is gone");
        assert_eq!(fs::read(s.mnt("d/c")).unwrap(), b"alpha", "{kind}");
        fs::write(s.mnt("e"), b"echo").unwrap();
        rename2(&s.mnt("e"), &s.mnt("d/c"), F::empty()).unwrap();
        assert_eq!(fs::read(s.mnt("d/c")).unwrap(), b"echo", "{kind}: replaced");
        assert_eq!(
            fs::read(s.src("d/c")).unwrap(),
            b"echo",
            "{kind}: in the source"
        );

        // RENAME_NOREPLACE: refused over an existing name, done onto a free one.
        assert_eq!(
            rename2(&s.mnt("b"), &s.mnt("d/c"), F::NOREPLACE),
            Err(rustix::io::Errno::EXIST),
            "{kind}"
        );
        assert_eq!(
            fs::read(s.mnt("d/c")).unwrap(),
            b"echo",
            "{kind}: untouched"
        );
        rename2(&s.mnt("b"), &s.mnt("d/b2"), F::NOREPLACE).unwrap();
        assert_eq!(fs::read(s.mnt("d/b2")).unwrap(), b"bravo", "{kind}");
        assert!(!s.mnt("b").exists(), "{kind}");

        // RENAME_EXCHANGE: the two names swap files, a file and a directory too.
        let ino_c = fs::metadata(s.mnt("d/c")).unwrap().ino();
        rename2(&s.mnt("d/c"), &s.mnt("d/b2"), F::EXCHANGE).unwrap();
        assert_eq!(fs::read(s.mnt("d/c")).unwrap(), b"bravo", "{kind}");
        assert_eq!(fs::read(s.mnt("d/b2")).unwrap(), b"echo", "{kind}");
        assert_eq!(fs::metadata(s.mnt("d/b2")).unwrap().ino(), ino_c, "{kind}");
        fs::create_dir(s.mnt("sub")).unwrap();
        fs::write(s.mnt("sub/inner"), b"in").unwrap();
        rename2(&s.mnt("sub"), &s.mnt("d/c"), F::EXCHANGE).unwrap();
        assert_eq!(fs::read(s.mnt("d/c/inner")).unwrap(), b"in", "{kind}");
        assert_eq!(fs::read(s.mnt("sub")).unwrap(), b"bravo", "{kind}");
        assert_eq!(
            rename2(&s.mnt("sub"), &s.mnt("nothing"), F::EXCHANGE),
            Err(rustix::io::Errno::NOENT),
            "{kind}"
        );

        // A directory renamed with files open under it: reached by the new path.
        fs::create_dir(s.mnt("old")).unwrap();
        fs::write(s.mnt("old/f"), b"deep").unwrap();
        rename2(&s.mnt("old"), &s.mnt("new"), F::empty()).unwrap();
        assert_eq!(fs::read(s.mnt("new/f")).unwrap(), b"deep", "{kind}");
        assert!(!s.mnt("old/f").exists(), "{kind}");
    }
}

#[test]
fn a_hard_link_is_one_inode_with_two_links() {
    for kind in KINDS {
        let Some(s) = setup("pt-link", kind, &[]) else {
            return;
        };
        fs::write(s.mnt("f"), b"one file").unwrap();
        fs::create_dir(s.mnt("d")).unwrap();
        fs::hard_link(s.mnt("f"), s.mnt("d/g")).unwrap();
        let (f, g) = (
            fs::metadata(s.mnt("f")).unwrap(),
            fs::metadata(s.mnt("d/g")).unwrap(),
        );
        assert_eq!(f.ino(), g.ino(), "{kind}: one inode");
        assert_eq!((f.nlink(), g.nlink()), (2, 2), "{kind}");
        assert_eq!(
            fs::metadata(s.src("f")).unwrap().ino(),
            fs::metadata(s.src("d/g")).unwrap().ino(),
            "{kind}: linked in the source"
        );
        // A write through one name is read through the other.
        fs::write(s.mnt("d/g"), b"written via g").unwrap();
        assert_eq!(fs::read(s.mnt("f")).unwrap(), b"written via g", "{kind}");
        fs::remove_file(s.mnt("f")).unwrap();
        assert_eq!(fs::metadata(s.mnt("d/g")).unwrap().nlink(), 1, "{kind}");
        // Directories cannot be linked.
        assert!(fs::hard_link(s.mnt("d"), s.mnt("d2")).is_err(), "{kind}");
    }
}

#[test]
fn symlinks_nodes_xattrs_fallocate_fsync_and_statfs_pass_through() {
    for kind in KINDS {
        let Some(s) = setup("pt-misc", kind, &[]) else {
            return;
        };
        fs::write(s.mnt("f"), b"data").unwrap();
        std::os::unix::fs::symlink("f", s.mnt("l")).unwrap();
        assert_eq!(fs::read_link(s.mnt("l")).unwrap(), Path::new("f"), "{kind}");
        assert_eq!(fs::read(s.mnt("l")).unwrap(), b"data", "{kind}");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            s.mnt("fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(
            fs::symlink_metadata(s.src("fifo"))
                .unwrap()
                .file_type()
                .is_fifo_like(),
            "{kind}"
        );
        rustix::fs::setxattr(s.mnt("f"), "user.k", b"v", rustix::fs::XattrFlags::empty()).unwrap();
        let mut buf = [0u8; 16];
        let n = rustix::fs::getxattr(s.src("f"), "user.k", &mut buf[..]).unwrap();
        assert_eq!(&buf[..n], b"v", "{kind}: set in the source");
        let n = rustix::fs::getxattr(s.mnt("f"), "user.k", &mut buf[..]).unwrap();
        assert_eq!(&buf[..n], b"v", "{kind}");
        rustix::fs::removexattr(s.mnt("f"), "user.k").unwrap();
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(s.mnt("f"))
            .unwrap();
        rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, 1 << 20).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 1 << 20, "{kind}");
        f.sync_all().unwrap();
        f.sync_data().unwrap();
        let dir = fs::File::open(s.mnt("")).unwrap();
        dir.sync_all().unwrap();
        let (m, b) = (
            rustix::fs::statvfs(s.mnt("")).unwrap(),
            rustix::fs::statvfs(s.src("")).unwrap(),
        );
        assert_eq!((m.f_blocks, m.f_bsize), (b.f_blocks, b.f_bsize), "{kind}");
        // readdir(plus) lists what is there.
        let mut names: Vec<String> = fs::read_dir(s.mnt(""))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["f", "fifo", "l"], "{kind}");
    }
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for fs::FileType {
    fn is_fifo_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_fifo(self)
    }
}

#[test]
fn what_an_unprivileged_caller_makes_through_allow_other_is_its_own() {
    if !as_user::can_switch() {
        return skip("acting as another user needs root");
    }
    for kind in KINDS {
        let Some(s) = setup("pt-owner", kind, &["--allow-other"]) else {
            return;
        };
        fs::create_dir(s.mnt("w")).unwrap();
        rustix::fs::chmod(s.mnt("w"), rustix::fs::Mode::from_raw_mode(0o777)).unwrap();
        let nobody = User::new(65534, 65534, &[65534]);
        let owner = |name: &str| {
            let m = fs::symlink_metadata(s.src(name)).unwrap();
            (m.uid(), m.gid())
        };
        // A file and a directory first (the mount could always make these), then the rest.
        let t = as_user::run(&s.mnt(""), &nobody, "create w/f 0644\nmkdir w/d 0755");
        assert_eq!(t, ["ok", "ok"], "{kind}");
        for name in ["w/f", "w/d"] {
            assert_eq!(
                owner(name),
                (65534, 65534),
                "{kind}: {name} is the caller's"
            );
        }
        let t = as_user::run(&s.mnt(""), &nobody, "symlink f w/l\nmknod w/p p 0600 0 0");
        assert_eq!(t, ["ok", "ok"], "{kind}");
        for name in ["w/l", "w/p"] {
            assert_eq!(
                owner(name),
                (65534, 65534),
                "{kind}: {name} is the caller's"
            );
        }
    }
}

#[test]
fn sqlite3_runs_on_it() {
    if !have("sqlite3") {
        return skip("sqlite3 is not installed");
    }
    for kind in KINDS {
        let Some(s) = setup("pt-sqlite", kind, &[]) else {
            return;
        };
        for mode in ["delete", "wal"] {
            let db = s.mnt(&format!("{mode}.db"));
            let q = |sql: &str| sh(&format!("sqlite3 {} \"{sql}\"", db.display()));
            assert_eq!(q(&format!("pragma journal_mode={mode};")).trim(), mode);
            q("create table t(k integer primary key, v text);");
            q(
                "with recursive c(x) as (select 1 union all select x+1 from c where x<20000) \
               insert into t select x, hex(randomblob(32)) from c;",
            );
            q("update t set v = 'x' where k % 7 = 0; delete from t where k % 11 = 0;");
            assert_eq!(q("pragma integrity_check;").trim(), "ok", "{kind} {mode}");
            assert_eq!(
                q("select count(*) from t;").trim(),
                "18182",
                "{kind} {mode}"
            );
        }
    }
}

#[test]
fn git_init_commit_and_fsck_run_on_it() {
    if !have("git") {
        return skip("git is not installed");
    }
    for kind in KINDS {
        let Some(s) = setup("pt-git", kind, &[]) else {
            return;
        };
        let repo = s.mnt("repo");
        let g = format!(
            "git -C {} -c user.email=t@example.com -c user.name=test -c init.defaultBranch=main",
            repo.display()
        );
        fs::create_dir(&repo).unwrap();
        sh(&format!("{g} init -q"));
        for i in 0..5 {
            fs::write(
                repo.join(format!("f{i}")),
                format!("file {i}\n").repeat(100),
            )
            .unwrap();
            sh(&format!("{g} add -A && {g} commit -q -m c{i}"));
        }
        sh(&format!("{g} mv f0 g0 && {g} commit -q -m mv"));
        sh(&format!("{g} gc -q"));
        sh(&format!("{g} fsck --full --strict"));
        assert_eq!(
            sh(&format!("{g} rev-list --count HEAD")).trim(),
            "6",
            "{kind}"
        );
    }
}

/// PostgreSQL 15's `initdb`, where installed.
fn initdb() -> Option<PathBuf> {
    ["/usr/lib/postgresql/15/bin/initdb", "/usr/local/bin/initdb"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// The `postgres` user's ids, if there is one.
fn postgres_user() -> Option<(u32, u32)> {
    let out = std::process::Command::new("id")
        .args(["-u", "postgres"])
        .output()
        .ok()?;
    let uid = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    let out = std::process::Command::new("id")
        .args(["-g", "postgres"])
        .output()
        .ok()?;
    let gid = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    Some((uid, gid))
}

#[test]
fn initdb_runs_as_the_postgres_user_on_it() {
    let Some(initdb) = initdb() else {
        return skip("PostgreSQL's initdb is not installed");
    };
    let Some((uid, gid)) = postgres_user() else {
        return skip("there is no postgres user");
    };
    if !as_user::can_switch() || !have("runuser") {
        return skip("running as postgres needs root and runuser");
    }
    for kind in KINDS {
        let Some(s) = setup("pt-initdb", kind, &["--allow-other"]) else {
            return;
        };
        // The data directory's parent is the postgres user's, as a packaged setup makes it.
        fs::create_dir(s.mnt("pg")).unwrap();
        rustix::fs::chown(
            s.mnt("pg"),
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        )
        .unwrap();
        let data = s.mnt("pg/data");
        let out = std::process::Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(&initdb)
            .args(["-D"])
            .arg(&data)
            .args([
                "--auth=trust",
                "--no-instructions",
                "--locale=C",
                "-E",
                "UTF8",
            ])
            .current_dir("/")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{kind}: initdb failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let m = fs::metadata(s.src("pg/data/PG_VERSION")).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{kind}: postgres's files");
    }
}

#[test]
fn db_bench_fills_and_reads_on_it() {
    if !have("db_bench") && !Path::new("/usr/bin/db_bench").is_file() {
        return skip("db_bench is not installed (apt-get install rocksdb-tools)");
    }
    for kind in KINDS {
        let Some(s) = setup("pt-rocksdb", kind, &[]) else {
            return;
        };
        let out = std::process::Command::new("db_bench")
            .arg("--benchmarks=fillseq,readrandom")
            .arg("--num=20000")
            .arg(format!("--db={}", s.mnt("db").display()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{kind}: db_bench failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("readrandom"), "{kind}: {text}");
        assert!(text.contains("(20000 of 20000 found)"), "{kind}: {text}");
    }
}
