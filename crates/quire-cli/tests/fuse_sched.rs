//! The scheduling policy of the mount's threads (`quire_fuse::sched`): a detached mount with a
//! scheduling group of its own runs every thread at `SCHED_IDLE`; a mount that shares its
//! group (here: `--foreground`, in the test's session) keeps the normal policy and says why;
//! `--sched` overrides either way. `quire stat` reports what was chosen, and the data are right
//! whatever the policy.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{is_mounted, skip, Mount, Scratch, QUIRE};

fn stat(mnt: &Path) -> String {
    let out = Command::new(QUIRE).arg("stat").arg(mnt).output().unwrap();
    assert!(out.status.success(), "quire stat: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn line<'a>(stat: &'a str, name: &str) -> &'a str {
    stat.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in quire stat:\n{stat}"))
}

/// The scheduling policy of each thread of process `pid`.
fn policies(pid: u32) -> Vec<(String, i32)> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|t| {
            let tid: i32 = t.file_name().to_str()?.parse().ok()?;
            let comm = fs::read_to_string(t.path().join("comm")).ok()?;
            // SAFETY: reads a thread's policy; no memory is passed.
            let p = unsafe { libc::sched_getscheduler(tid) };
            (p >= 0).then(|| (comm.trim().to_string(), p))
        })
        .collect()
}

fn exercise(mnt: &Path) {
    let data: Vec<u8> = (0..1_500_000u32)
        .map(|i| (i * 13 + i / 4096) as u8)
        .collect();
    fs::write(mnt.join("f"), &data).unwrap();
    assert_eq!(fs::read(mnt.join("f")).unwrap(), data);
}

/// Whether a process in this test's cpu cgroup that leads its own session has a scheduling group
/// of its own: autogroups on, and the cgroup the root (where autogroups apply).
fn autogroup_applies() -> Result<(), String> {
    let on = fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled")
        .map_err(|e| format!("no autogroups here ({e})"))?;
    if on.trim() != "1" {
        return Err("autogroups are off".into());
    }
    let cg = fs::read_to_string("/proc/self/cgroup").unwrap();
    let cpu = cg.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, c, p) = (f.next()?, f.next()?, f.next()?);
        c.split(',').any(|c| c == "cpu").then_some(p)
    });
    let ns =
        fs::read_link("/proc/self/ns/cgroup").map_err(|e| format!("no cgroup namespace ({e})"))?;
    if ns.as_os_str() != "cgroup:[4026531835]" {
        return Err(format!(
            "this test runs in cgroup namespace {} (a container's)",
            ns.display()
        ));
    }
    match cpu {
        Some("/") => Ok(()),
        Some(p) => Err(format!("this test runs in cpu cgroup {p}, not the root")),
        None => Err("no cgroup-v1 cpu controller (the v2 case is not checked here)".into()),
    }
}

#[test]
fn a_detached_mount_with_a_group_of_its_own_runs_every_thread_at_sched_idle() {
    if let Err(why) = autogroup_applies() {
        return skip(&why);
    }
    if let Err(e) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        return skip(&format!("/dev/fuse cannot be opened: {e}"));
    }
    let dir = Scratch::new("sched-detached");
    let (src, mnt) = (dir.path("src"), dir.path("mnt"));
    fs::create_dir(&src).unwrap();
    fs::create_dir(&mnt).unwrap();
    // Whether this machine lets the test mount at all (a foreground mount): if it does, the
    // detached one must mount too.
    match Mount::start(&src, &mnt, "32M") {
        Ok(m) => assert!(m.unmount().success()),
        Err(why) => return skip(&why),
    }
    let out = Command::new(QUIRE)
        .args(["mount", "--capacity", "32M"])
        .arg(&src)
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "a detached mount failed where a foreground one worked: {out:?}"
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let pid: u32 = said
        .rsplit_once("daemon pid ")
        .and_then(|(_, p)| p.trim().trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no daemon pid in {said:?}"));
    let s = stat(&mnt);
    let result = std::panic::catch_unwind(|| {
        assert_eq!(line(&s, "fuse_sched_idle"), "1", "{s}");
        assert!(line(&s, "fuse_sched").contains("leads its session"), "{s}");
        let p = policies(pid);
        assert!(p.len() > 4, "the daemon's threads: {p:?}");
        for (comm, policy) in &p {
            assert_eq!(*policy, libc::SCHED_IDLE, "thread {comm}: {p:?}");
        }
        exercise(&mnt);
    });
    let _ = rustix::mount::unmount(&mnt, rustix::mount::UnmountFlags::empty());
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if is_mounted(&mnt) {
        let _ = rustix::mount::unmount(&mnt, rustix::mount::UnmountFlags::DETACH);
    }
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// Mounts `src` at `mnt` in the foreground with `--sched sched` and checks the policy `quire
/// stat` reports and every thread has: `SCHED_IDLE` if `idle`, else the normal one. Returns the
/// mount and the reason `quire stat` gives, or `None` (skipped) where the first mount of a test
/// (`first`) finds that this machine cannot mount.
fn mount_checked(
    src: &Path,
    mnt: &Path,
    sched: &str,
    idle: bool,
    first: bool,
) -> Option<(Mount, String)> {
    fs::create_dir(mnt).unwrap();
    let m = match Mount::start_with(src, mnt, "32M", &["--sched", sched]) {
        Ok(m) => m,
        Err(why) if first => {
            skip(&why);
            return None;
        }
        Err(why) => panic!("--sched {sched}: {why}"),
    };
    let s = stat(mnt);
    assert_eq!(
        line(&s, "fuse_sched_idle"),
        if idle { "1" } else { "0" },
        "--sched {sched}: {s}"
    );
    let want = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    let p = policies(m.pid());
    for (comm, policy) in &p {
        assert_eq!(*policy, want, "--sched {sched}, thread {comm}: {p:?}");
    }
    let why = line(&s, "fuse_sched").to_string();
    Some((m, why))
}

#[test]
fn a_mount_sharing_its_session_keeps_the_normal_policy_unless_told() {
    let dir = Scratch::new("sched-foreground");
    fs::create_dir(dir.path("src")).unwrap();
    for (i, (sched, idle)) in [("auto", false), ("normal", false), ("idle", true)]
        .into_iter()
        .enumerate()
    {
        let mnt = dir.path(&format!("mnt-{sched}"));
        let Some((m, why)) = mount_checked(&dir.path("src"), &mnt, sched, idle, i == 0) else {
            return;
        };
        match sched {
            // A `--foreground` child of this test shares its session (and cgroup).
            "auto" => assert!(why.starts_with("normal: "), "{why}"),
            _ => assert!(
                why.contains(&format!("asked for (--sched {sched})")),
                "{why}"
            ),
        }
        exercise(&mnt);
        assert!(
            m.unmount().success(),
            "--sched {sched}: the daemon exits cleanly"
        );
    }
}

#[test]
fn an_object_store_mount_keeps_the_normal_policy_unless_told() {
    if let Err(e) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        return skip(&format!("/dev/fuse cannot be opened: {e}"));
    }
    let dir = Scratch::new("sched-object");
    for (i, (sched, idle)) in [("auto", false), ("idle", true)].into_iter().enumerate() {
        let mnt = dir.path(&format!("mnt-{sched}"));
        let Some((m, why)) = mount_checked(Path::new("memory:///"), &mnt, sched, idle, i == 0)
        else {
            return;
        };
        if !idle {
            assert!(why.contains("object store mount"), "{why}");
        }
        exercise(&mnt);
        assert!(
            m.unmount().success(),
            "--sched {sched}: the daemon exits cleanly"
        );
    }
}
