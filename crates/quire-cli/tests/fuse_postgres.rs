//! PostgreSQL on a `quire mount` survives a crash: its server (as the `postgres` user, on a mount
//! made with `--allow-other`, listening on a Unix socket only, fsync on) is killed with SIGKILL,
//! with its backends, in the middle of a pgbench run, and started again on the same mount; its
//! crash recovery must leave the bank consistent — every committed pgbench transaction moved the
//! same amount in accounts, branches, tellers and history, so their sums agree — and pg_amcheck
//! must find nothing wrong with any table or index. Then the same after a clean stop, an unmount
//! (the daemon writes everything back) and a new mount of the same directory.
//!
//! Skips (`skipped: why`) when not root (the server refuses root, and switching to its user
//! needs root), when PostgreSQL or its `postgres` user is missing, or without FUSE.

mod common;

use std::ffi::CString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{skip, Mount, Scratch};

/// The programs the test runs, all from one installation.
const PROGRAMS: [&str; 5] = ["initdb", "postgres", "pgbench", "psql", "pg_amcheck"];

struct Pg {
    bin: PathBuf,
    uid: u32,
    gid: u32,
}

impl Pg {
    /// PostgreSQL 15 (Debian's directory), another version, or `PATH`; and the `postgres` user.
    fn find() -> Result<Pg, String> {
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
            .find(|d| PROGRAMS.iter().all(|p| d.join(p).is_file()))
            .ok_or_else(|| {
                format!(
                    "PostgreSQL is not installed (no directory with {})",
                    PROGRAMS.join(", ")
                )
            })?;
        let name = CString::new("postgres").unwrap();
        // SAFETY: a valid C string; the record is read at once, before any other lookup.
        let pw = unsafe { libc::getpwnam(name.as_ptr()) };
        if pw.is_null() {
            return Err("there is no postgres user to run the server as".into());
        }
        // SAFETY: non-null, a valid passwd record.
        let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
        Ok(Pg { bin, uid, gid })
    }

    /// `prog` run as the `postgres` user.
    fn as_postgres(&self, prog: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(prog));
        let (uid, gid) = (self.uid, self.gid);
        // SAFETY: the closure runs in the forked child before exec and makes only system
        // calls (no allocation).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setresgid(gid, gid, gid) != 0
                    || libc::setresuid(uid, uid, uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    /// A client program pointed at the server on `sock`, as the `postgres` role.
    fn client(&self, prog: &str, sock: &Path) -> Command {
        let mut cmd = Command::new(self.bin.join(prog));
        cmd.arg("-h").arg(sock).args(["-U", "postgres"]);
        cmd
    }

    fn chown(&self, p: &Path) {
        std::os::unix::fs::chown(p, Some(self.uid), Some(self.gid)).unwrap();
    }
}

#[track_caller]
fn ok(mut cmd: Command, what: &str) -> Output {
    let out = cmd.stdin(Stdio::null()).output().expect(what);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A running postmaster; killed hard (with its backends) if dropped.
struct Server {
    child: Option<Child>,
}

impl Server {
    fn start(pg: &Pg, data: &Path, sock: &Path) -> Server {
        let mut cmd = pg.as_postgres("postgres");
        cmd.arg("-D")
            .arg(data)
            .args(["-c", "listen_addresses="])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", sock.display()))
            .args(["-c", "shared_buffers=16MB", "-c", "fsync=on"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut s = Server {
            child: Some(cmd.spawn().expect("starting postgres")),
        };
        let t0 = Instant::now();
        loop {
            let child = s.child.as_mut().unwrap();
            if let Some(st) = child.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                panic!("postgres exited ({st}):\n{err}");
            }
            // postmaster.pid: line 1 the server's pid (a file a killed server left says
            // another), line 8 its state.
            let pid = child.id().to_string();
            let ready = fs::read_to_string(data.join("postmaster.pid")).is_ok_and(|p| {
                let l: Vec<&str> = p.lines().map(str::trim).collect();
                l.first() == Some(&pid.as_str()) && l.get(7) == Some(&"ready")
            });
            if ready {
                return s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "postgres did not accept connections within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL to the postmaster and every process it started: it is stopped first, so that it
    /// starts none while its children are listed.
    fn crash(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id() as i32;
        // SAFETY: signalling our own child (not yet waited for, so its pid is not reused).
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        for c in children(pid) {
            // SAFETY: a child of the stopped postmaster; it cannot be reaped and reused while
            // its parent is stopped.
            unsafe { libc::kill(c, libc::SIGKILL) };
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Fast shutdown (SIGINT: a checkpoint, then exit).
    fn stop(mut self) {
        let mut child = self.child.take().unwrap();
        // SAFETY: signalling our own child (not yet waited for).
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let t0 = Instant::now();
        while child.try_wait().unwrap().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "postgres did not shut down within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.crash();
    }
}

/// The processes whose parent is `pid` (from /proc/PID/stat).
fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // "PID (COMM) STATE PPID …": COMM may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|v| v.parse::<i32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out
}

/// The bank's books: the sums of accounts, branches, tellers and history, and history's rows.
fn books(pg: &Pg, sock: &Path) -> [i64; 5] {
    let mut q = pg.client("psql", sock);
    q.args(["-At", "-F", " ", "-d", "postgres", "-c"]).arg(
        "select (select coalesce(sum(abalance), 0) from pgbench_accounts), \
                (select coalesce(sum(bbalance), 0) from pgbench_branches), \
                (select coalesce(sum(tbalance), 0) from pgbench_tellers), \
                (select coalesce(sum(delta), 0) from pgbench_history), \
                (select count(*) from pgbench_history)",
    );
    let out = String::from_utf8_lossy(&ok(q, "psql").stdout).into_owned();
    let v: Vec<i64> = out
        .split_whitespace()
        .map(|x| x.parse().expect("a number"))
        .collect();
    v.try_into().expect("five figures")
}

/// The books balance, there is history to check them by, and pg_amcheck finds nothing.
#[track_caller]
fn check_consistent(pg: &Pg, sock: &Path, when: &str) -> [i64; 5] {
    let b = books(pg, sock);
    assert!(
        b[0] == b[1] && b[1] == b[2] && b[2] == b[3],
        "{when}: sum(abalance) {}, sum(bbalance) {}, sum(tbalance) {}, sum(delta) {} differ",
        b[0],
        b[1],
        b[2],
        b[3]
    );
    assert!(b[4] > 0, "{when}: no transaction committed before the kill");
    let mut amcheck = pg.client("pg_amcheck", sock);
    amcheck.args(["--all", "--install-missing", "--heapallindexed"]);
    ok(amcheck, &format!("{when}: pg_amcheck"));
    b
}

#[test]
fn pgbench_killed_mid_run_recovers_consistent_and_survives_a_remount() {
    if !rustix::process::geteuid().is_root() {
        return skip("not root: the server refuses root and only root can switch to its user");
    }
    let pg = match Pg::find() {
        Ok(pg) => pg,
        Err(why) => return skip(&why),
    };
    let t0 = Instant::now();
    let dir = Scratch::new("postgres");
    let (src, mnt) = (dir.path("src"), dir.path("mnt"));
    fs::create_dir(&src).unwrap();
    fs::create_dir(&mnt).unwrap();
    let cap = "32M";
    let mount = match Mount::start_with(&src, &mnt, cap, &["--allow-other"]) {
        Ok(m) => m,
        Err(why) => return skip(&why),
    };
    let data = mount.path("pgdata");
    fs::create_dir(&data).unwrap();
    fs::set_permissions(&data, fs::Permissions::from_mode(0o700)).unwrap();
    pg.chown(&data);
    let sock = std::env::temp_dir().join(format!("quire-pgtest-{}", std::process::id()));
    let _ = fs::remove_dir_all(&sock);
    fs::create_dir(&sock).unwrap();
    pg.chown(&sock);

    let mut initdb = pg.as_postgres("initdb");
    initdb
        .arg("-D")
        .arg(&data)
        .args(["--auth=trust", "--no-instructions", "-U", "postgres"]);
    ok(initdb, "initdb");
    let mut server = Server::start(&pg, &data, &sock);
    let mut init = pg.client("pgbench", &sock);
    init.args(["-i", "-q", "-s", "2", "postgres"]);
    ok(init, "pgbench -i");

    // A run of 5 s, its server killed half-way through.
    let mut run = pg.client("pgbench", &sock);
    run.args(["-n", "-c", "2", "-T", "5", "postgres"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut bench = run.spawn().expect("starting pgbench");
    std::thread::sleep(Duration::from_millis(2500));
    server.crash();
    let st = bench.wait().unwrap();
    assert!(
        !st.success(),
        "pgbench finished before the kill: the crash came too late"
    );

    let server = Server::start(&pg, &data, &sock);
    let after_crash = check_consistent(&pg, &sock, "after the crash");
    eprintln!(
        "after the crash: {} transactions in history, balances {}",
        after_crash[4], after_crash[0]
    );

    // A clean stop, unmount (everything written back) and a new mount of the same directory.
    server.stop();
    let st = mount.unmount();
    assert!(st.success(), "the daemon exited with {st}");
    let mount = Mount::start_with(&src, &mnt, cap, &["--allow-other"]).expect("mounts again");
    let server = Server::start(&pg, &data, &sock);
    let after_remount = check_consistent(&pg, &sock, "after the remount");
    assert_eq!(
        after_remount[..],
        after_crash[..],
        "the books changed across a clean stop and remount"
    );
    server.stop();
    drop(mount);
    let _ = fs::remove_dir_all(&sock);
    eprintln!("took {:.1} s", t0.elapsed().as_secs_f64());
}
