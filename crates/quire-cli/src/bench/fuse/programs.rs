//! The `fuse` suite's real-program cases: a database whose files live in the mount, run on
//! `quire` (and `quire-classic`, the same mount on the classic channel, and `quire-normal`, its
//! threads at the normal scheduling policy), `passthrough` and `ext4`
//! (the backing directory itself, the database's server in a
//! memory group of the budget plus [`HEADROOM`], as the `kernel` variant runs fio).
//!
//! - `pgbench`: PostgreSQL's server (as the `postgres` user when the suite runs as root: the
//!   server refuses to run as root, so the mounts are made with `--allow-other`), listening on
//!   a Unix socket in a temporary directory only, fsync on (its default), `shared_buffers`
//!   16 MiB so that the file cache under test, not the server's own, holds the data; `pgbench
//!   -i -s 50` (about 750 MB, larger than the budget), then `pgbench -n -c 4 -j 2 -T 60`:
//!   `tps` (scale 5 for 10 s with `--quick`).
//! - `db_bench-fill`, `db_bench-readrandom`, `db_bench-readseq`: RocksDB's `db_bench`,
//!   `filluniquerandom` of 1 M keys of 400 B values (100 000 with `--quick`), uncompressed, then
//!   on the reopened database `readrandom` and `readseq` with an 8 MiB block cache; `ops_per_s`
//!   each. Every key written must be found (`(N of N found)`), else the variant fails.
//!
//! A program that is missing is said (`skipped: why`) and its case records nothing; a variant
//! that fails (the program exits with an error, a key is missing) is said with its reason and
//! the suite goes on with the next.

use std::ffi::CString;
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::super::cgroup::MemGroup;
use super::super::Bench;
use super::{warm_pool, Daemon, Env};

/// The variants of the program cases.
pub(super) const VARIANTS: [&str; 5] = [
    "quire-classic",
    "quire-normal",
    "quire",
    "passthrough",
    "ext4",
];

/// The steps the program cases take (for the progress bar).
pub(super) const STEPS: usize = 2 * VARIANTS.len();

/// What the `ext4` variant's memory group holds beyond the budget: the program's own memory
/// (the server's shared buffers and processes, db_bench's memtables and block cache).
const HEADROOM: u64 = 64 << 20;

/// PostgreSQL's shared buffers, the same for every variant.
const PG_SHARED_BUFFERS: &str = "16MB";

/// RocksDB's memtable size: small, so that db_bench's own memory fits the headroom.
const KV_WRITE_BUFFER: u64 = 16 << 20;

struct Sizes {
    pg_scale: u32,
    pg_secs: u32,
    kv_keys: u64,
}

fn sizes(quick: bool) -> Sizes {
    if quick {
        Sizes {
            pg_scale: 5,
            pg_secs: 10,
            kv_keys: 100_000,
        }
    } else {
        Sizes {
            pg_scale: 50,
            pg_secs: 60,
            kv_keys: 1_000_000,
        }
    }
}

/// Runs both program cases on every variant asked for.
pub(super) fn run(b: &mut Bench, env: &Env) {
    let sz = sizes(b.quick());
    let t0 = Instant::now();
    match Postgres::find() {
        Err(why) => b.note(format!("pgbench: skipped: {why}")),
        Ok(pg) => {
            b.compare("pgbench", "ext4", "quire");
            b.compare("pgbench", "quire-classic", "quire");
            b.compare("pgbench", "quire-normal", "quire");
            for v in VARIANTS {
                if !b.wants(v) {
                    continue;
                }
                b.step(&format!("pgbench {v}"));
                match on_variant(env, v, "pg", |dir, group| pg.bench(dir, group, &sz)) {
                    Ok(tps) => b.record("pgbench", v, 4, "tps", tps, "1/s"),
                    Err(e) => b.note(format!("pgbench: {v}: failed: {e:#}")),
                }
            }
        }
    }
    match find_db_bench() {
        Err(why) => b.note(format!("db_bench: skipped: {why}")),
        Ok(exe) => {
            for case in ["db_bench-fill", "db_bench-readrandom", "db_bench-readseq"] {
                b.compare(case, "ext4", "quire");
                b.compare(case, "quire-classic", "quire");
                b.compare(case, "quire-normal", "quire");
            }
            for v in VARIANTS {
                if !b.wants(v) {
                    continue;
                }
                b.step(&format!("db_bench {v}"));
                match on_variant(env, v, "kv", |dir, group| {
                    db_bench(&exe, dir, group, sz.kv_keys)
                }) {
                    Ok(r) => {
                        b.record("db_bench-fill", v, 1, "ops_per_s", r.fill, "1/s");
                        b.record(
                            "db_bench-readrandom",
                            v,
                            1,
                            "ops_per_s",
                            r.readrandom,
                            "1/s",
                        );
                        b.record("db_bench-readseq", v, 1, "ops_per_s", r.readseq, "1/s");
                    }
                    Err(e) => b.note(format!("db_bench: {v}: failed: {e:#}")),
                }
            }
        }
    }
    b.note(format!(
        "pgbench and db_bench took {:.0} s",
        t0.elapsed().as_secs_f64()
    ));
}

/// Runs `work` on a fresh directory `name` of the variant (in the mount, or in the backing
/// directory for `ext4`, whose programs run in the memory group passed to `work`), then stops
/// the daemon and removes the directory from the backing directory.
fn on_variant<T>(
    env: &Env,
    variant: &str,
    name: &str,
    work: impl FnOnce(&Path, Option<&MemGroup>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let backing = env.src.join(name);
    let _ = fs::remove_dir_all(&backing);
    let allow_other: &[&str] = if rustix::process::geteuid().is_root() {
        &["--allow-other"]
    } else {
        &[]
    };
    let result = match variant {
        "ext4" => {
            let group = match &env.cg {
                Some(cg) => Some(cg.group("ext4", Some(env.sz.budget + HEADROOM))?),
                None => None,
            };
            fs::create_dir(&backing)?;
            let r = work(&backing, group.as_ref());
            match (r, &group) {
                (Err(e), Some(g)) if g.oom_kills() > 0 => {
                    Err(e.context("the memory group's OOM killer ended a process"))
                }
                (r, _) => r,
            }
        }
        "quire" | "quire-classic" | "quire-normal" => {
            let d = Daemon::start(
                variant,
                &env.src,
                &env.mnt,
                env.sz.budget,
                None,
                allow_other,
            )?;
            warm_pool(&env.mnt.join("w"), env.sz.budget)?;
            let dir = env.mnt.join(name);
            fs::create_dir(&dir)?;
            let r = work(&dir, None);
            d.stop()?;
            r
        }
        "passthrough" => {
            let group = env.group(variant)?;
            let d = Daemon::start(
                variant,
                &env.src,
                &env.mnt,
                env.sz.budget,
                group.as_ref(),
                allow_other,
            )?;
            env.tighten(variant, group.as_ref(), Some(&d))?;
            let dir = env.mnt.join(name);
            let r = fs::create_dir(&dir)
                .with_context(|| format!("creating {}", dir.display()))
                .and_then(|()| work(&dir, None));
            d.stop()?;
            r
        }
        other => bail!("no program variant {other}"),
    };
    let _ = fs::remove_dir_all(&backing);
    result
}

// ---- running as the database's user, in a memory group --------------------------------------

/// Who runs the database programs: the `postgres` user when the suite runs as root (the server
/// refuses root), else the suite's own user.
#[derive(Clone, Copy)]
struct User {
    uid: u32,
    gid: u32,
}

impl User {
    /// `None`: run as ourselves (not root). Root needs the `postgres` user.
    fn pick() -> Result<Option<User>, String> {
        if !rustix::process::geteuid().is_root() {
            return Ok(None);
        }
        let name = CString::new("postgres").expect("no NUL");
        // SAFETY: a valid C string; getpwnam returns a pointer into static storage or null,
        // read at once (the suite looks users up on one thread).
        let pw = unsafe { libc::getpwnam(name.as_ptr()) };
        if pw.is_null() {
            return Err("there is no postgres user to run the server as (it refuses root)".into());
        }
        // SAFETY: non-null, a valid passwd record.
        let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
        Ok(Some(User { uid, gid }))
    }

    fn chown(user: Option<User>, path: &Path) -> anyhow::Result<()> {
        if let Some(u) = user {
            std::os::unix::fs::chown(path, Some(u.uid), Some(u.gid))
                .with_context(|| format!("chown {}", path.display()))?;
        }
        Ok(())
    }
}

/// `prog` as `user` (if given), joining `group` (if given) before it runs, so that everything
/// it and its children bring into memory is charged there from the start.
fn command(prog: &Path, user: Option<User>, group: Option<&MemGroup>) -> anyhow::Result<Command> {
    let mut cmd = Command::new(prog);
    let procs = match group {
        Some(g) => Some(
            fs::OpenOptions::new()
                .write(true)
                .open(g.procs())
                .with_context(|| format!("opening {}", g.procs().display()))?,
        ),
        None => None,
    };
    if procs.is_none() && user.is_none() {
        return Ok(cmd);
    }
    let procs_fd = procs.as_ref().map(|f| f.as_raw_fd());
    // SAFETY: the closure runs in the forked child before exec and makes only system calls
    // (no allocation). The group's file stays open in the parent until `spawn` returns, as the
    // closure holds it (moved in below).
    unsafe {
        cmd.pre_exec(move || {
            let _keep: &Option<File> = &procs;
            if let Some(fd) = procs_fd {
                // "0": the writing process itself joins the group.
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(u) = user {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setresgid(u.gid, u.gid, u.gid) != 0
                    || libc::setresuid(u.uid, u.uid, u.uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Ok(cmd)
}

/// Runs `cmd` to the end; its output, or an error with what it printed last.
fn output(mut cmd: Command, what: &str) -> anyhow::Result<Output> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            tail(&out.stderr, &out.stdout)
        );
    }
    Ok(out)
}

/// The last lines a failed program printed (standard error, else standard output).
fn tail(err: &[u8], out: &[u8]) -> String {
    let text = String::from_utf8_lossy(if err.iter().any(|c| !c.is_ascii_whitespace()) {
        err
    } else {
        out
    });
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(3)..].join(" / ")
}

// ---- pgbench ---------------------------------------------------------------------------------

/// Where PostgreSQL's programs are, and who runs them.
struct Postgres {
    bin: PathBuf,
    user: Option<User>,
}

/// The programs the case needs, all from one installation.
const PG_PROGRAMS: [&str; 3] = ["initdb", "postgres", "pgbench"];

impl Postgres {
    /// PostgreSQL 15's programs (Debian's directory first), else another version's, else the
    /// first directory on `PATH` that has all of them.
    fn find() -> Result<Postgres, String> {
        let mut dirs = vec![PathBuf::from("/usr/lib/postgresql/15/bin")];
        if let Ok(rd) = fs::read_dir("/usr/lib/postgresql") {
            let mut others: Vec<PathBuf> = rd.flatten().map(|e| e.path().join("bin")).collect();
            others.sort();
            dirs.extend(others.into_iter().rev());
        }
        if let Some(path) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&path));
        }
        let bin = dirs
            .into_iter()
            .find(|d| PG_PROGRAMS.iter().all(|p| d.join(p).is_file()))
            .ok_or_else(|| {
                format!(
                    "PostgreSQL is not installed (no directory with {})",
                    PG_PROGRAMS.join(", ")
                )
            })?;
        Ok(Postgres {
            bin,
            user: User::pick()?,
        })
    }

    fn exe(&self, prog: &str) -> PathBuf {
        self.bin.join(prog)
    }

    /// initdb in `dir/data`, the server started, `pgbench -i`, then the timed run: its tps.
    fn bench(&self, dir: &Path, group: Option<&MemGroup>, sz: &Sizes) -> anyhow::Result<f64> {
        let data = dir.join("data");
        fs::create_dir(&data).with_context(|| format!("creating {}", data.display()))?;
        fs::set_permissions(&data, fs::Permissions::from_mode(0o700))?;
        User::chown(self.user, &data)?;
        let mut initdb = command(&self.exe("initdb"), self.user, group)?;
        initdb
            .arg("-D")
            .arg(&data)
            .args(["--auth=trust", "--no-instructions", "-U", "postgres"]);
        output(initdb, "initdb")?;
        let server = Server::start(self, &data, group)?;
        let mut init = Command::new(self.exe("pgbench"));
        server.client(&mut init);
        init.args(["-i", "-q", "-s", &sz.pg_scale.to_string(), "postgres"]);
        output(init, "pgbench -i")?;
        let mut run = Command::new(self.exe("pgbench"));
        server.client(&mut run);
        let secs = sz.pg_secs.to_string();
        run.args(["-n", "-c", "4", "-j", "2", "-T", &secs, "postgres"]);
        let out = output(run, "pgbench")?;
        server.stop()?;
        parse_tps(&String::from_utf8_lossy(&out.stdout))
    }
}

/// A PostgreSQL server on a Unix socket in its own temporary directory; killed if dropped.
struct Server {
    child: Option<Child>,
    sock: PathBuf,
}

impl Server {
    fn start(pg: &Postgres, data: &Path, group: Option<&MemGroup>) -> anyhow::Result<Server> {
        let sock = std::env::temp_dir().join(format!("quire-bench-pg-{}", std::process::id()));
        let _ = fs::remove_dir_all(&sock);
        fs::create_dir(&sock)?;
        fs::set_permissions(&sock, fs::Permissions::from_mode(0o700))?;
        User::chown(pg.user, &sock)?;
        let mut cmd = command(&pg.exe("postgres"), pg.user, group)?;
        cmd.arg("-D")
            .arg(data)
            .args(["-c", "listen_addresses="])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", sock.display()))
            .args(["-c", &format!("shared_buffers={PG_SHARED_BUFFERS}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = cmd.spawn().context("starting postgres")?;
        let mut s = Server {
            child: Some(child),
            sock,
        };
        s.wait_ready(data)?;
        Ok(s)
    }

    /// Waits until the server says (in `postmaster.pid`) that it accepts connections.
    fn wait_ready(&mut self, data: &Path) -> anyhow::Result<()> {
        let t0 = Instant::now();
        loop {
            let child = self.child.as_mut().expect("running");
            if let Some(st) = child.try_wait()? {
                let mut err = Vec::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_end(&mut err);
                }
                bail!("postgres exited ({st}): {}", tail(&err, b""));
            }
            // postmaster.pid: line 1 the server's pid, line 8 its state.
            let pid = child.id().to_string();
            let ready = fs::read_to_string(data.join("postmaster.pid")).is_ok_and(|p| {
                let l: Vec<&str> = p.lines().map(str::trim).collect();
                l.first() == Some(&pid.as_str()) && l.get(7) == Some(&"ready")
            });
            if ready {
                return Ok(());
            }
            if t0.elapsed() > Duration::from_secs(120) {
                bail!("postgres did not accept connections within 120 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Points a client at the server, as the `postgres` role (the database name comes last).
    fn client(&self, cmd: &mut Command) {
        cmd.arg("-h").arg(&self.sock).args(["-U", "postgres"]);
    }

    /// Fast shutdown (SIGINT: a checkpoint, then exit), waiting for it.
    fn stop(mut self) -> anyhow::Result<()> {
        let mut child = self.child.take().expect("running");
        let pid = rustix::process::Pid::from_child(&child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        let t0 = Instant::now();
        while child.try_wait()?.is_none() {
            if t0.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                let _ = child.wait();
                bail!("postgres did not shut down within 120 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // Fast shutdown; its backends follow the postmaster out.
            let pid = rustix::process::Pid::from_child(&c);
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
            let t0 = Instant::now();
            while matches!(c.try_wait(), Ok(None)) && t0.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = fs::remove_dir_all(&self.sock);
    }
}

/// pgbench's `tps = 1234.5 (without initial connection time)`.
fn parse_tps(out: &str) -> anyhow::Result<f64> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("tps = "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no tps in pgbench's output: {}", tail(b"", out.as_bytes())))
}

// ---- db_bench --------------------------------------------------------------------------------

fn find_db_bench() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("db_bench"))
        .find(|p| p.is_file())
        .ok_or_else(|| "db_bench is not installed (Debian: rocksdb-tools)".into())
}

struct KvResult {
    fill: f64,
    readrandom: f64,
    readseq: f64,
}

/// One benchmark's figures from db_bench's report line (`NAME : X micros/op N ops/sec …`).
struct KvLine {
    ops_per_s: f64,
    /// `(found, asked)` where the line says `(F of N found)`.
    found: Option<(u64, u64)>,
}

fn parse_db_bench(out: &str, bench: &str) -> anyhow::Result<KvLine> {
    let line = out
        .lines()
        .find(|l| {
            l.split_once(':')
                .is_some_and(|(name, rest)| name.trim() == bench && rest.contains("ops/sec"))
        })
        .with_context(|| {
            format!(
                "no {bench} line in db_bench's output: {}",
                tail(b"", out.as_bytes())
            )
        })?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let ops_per_s = words
        .iter()
        .position(|w| *w == "ops/sec")
        .and_then(|i| i.checked_sub(1))
        .and_then(|i| words[i].parse().ok())
        .with_context(|| format!("no ops/sec in {line:?}"))?;
    let found = line.split_once('(').and_then(|(_, r)| {
        let r = r.strip_suffix(')').unwrap_or(r).trim();
        let r = r.strip_suffix("found")?.trim();
        let (f, n) = r.split_once(" of ")?;
        Some((f.trim().parse().ok()?, n.trim().parse().ok()?))
    });
    Ok(KvLine { ops_per_s, found })
}

/// `filluniquerandom` of `keys` keys, then `readrandom` and `readseq` on the reopened database.
fn db_bench(
    exe: &Path,
    dir: &Path,
    group: Option<&MemGroup>,
    keys: u64,
) -> anyhow::Result<KvResult> {
    let db = dir.join("db");
    let common = |cmd: &mut Command| {
        cmd.arg(format!("--db={}", db.display()))
            .arg(format!("--num={keys}"))
            .args(["--value_size=400", "--compression_type=none"])
            .arg(format!("--write_buffer_size={KV_WRITE_BUFFER}"));
    };
    let mut fill = command(exe, None, group)?;
    common(&mut fill);
    fill.args(["--benchmarks=filluniquerandom", "--use_existing_db=0"]);
    let out = output(fill, "db_bench filluniquerandom")?;
    let fill = parse_db_bench(&String::from_utf8_lossy(&out.stdout), "filluniquerandom")?;
    let mut read = command(exe, None, group)?;
    common(&mut read);
    read.args([
        "--benchmarks=readrandom,readseq",
        "--use_existing_db=1",
        "--cache_size=8388608",
    ]);
    let out = output(read, "db_bench readrandom,readseq")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let readrandom = parse_db_bench(&text, "readrandom")?;
    match readrandom.found {
        Some((f, n)) if f == n && n == keys => {}
        Some((f, n)) => bail!("readrandom found {f} of {n} keys (of {keys} written)"),
        None => bail!("readrandom did not say how many keys it found"),
    }
    let readseq = parse_db_bench(&text, "readseq")?;
    Ok(KvResult {
        fill: fill.ops_per_s,
        readrandom: readrandom.ops_per_s,
        readseq: readseq.ops_per_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn db_bench_lines_parse_with_and_without_found() {
        let out = "Keys:       16 bytes each\n\
            readrandom   :       2.954 micros/op 338478 ops/sec 0.295 seconds 100000 operations;  133.1 MB/s (100000 of 100000 found)\n\
            \n\
            readseq      :       0.241 micros/op 4148085 ops/sec 0.024 seconds 100000 operations; 1630.8 MB/s\n";
        let r = parse_db_bench(out, "readrandom").unwrap();
        assert_eq!(r.ops_per_s, 338478.0);
        assert_eq!(r.found, Some((100000, 100000)));
        let s = parse_db_bench(out, "readseq").unwrap();
        assert_eq!(s.ops_per_s, 4148085.0);
        assert_eq!(s.found, None);
        let missing = "readrandom   :       2.954 micros/op 338478 ops/sec 0.295 seconds 100000 operations;  133.1 MB/s (99990 of 100000 found)\n";
        assert_eq!(
            parse_db_bench(missing, "readrandom").unwrap().found,
            Some((99990, 100000))
        );
        assert!(parse_db_bench(out, "filluniquerandom").is_err());
    }

    #[test]
    fn pgbench_tps_parses() {
        let out = "latency average = 3.1 ms\n\
            initial connection time = 4.2 ms\n\
            tps = 1290.123456 (without initial connection time)\n";
        assert_eq!(parse_tps(out).unwrap(), 1290.123456);
        assert!(parse_tps("pgbench: error: connection failed\n").is_err());
    }
}
