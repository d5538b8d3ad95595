//! How the daemon's threads are scheduled: `SCHED_IDLE` where the daemon has a scheduling group
//! of its own, so that a program woken by a reply stays on its CPU.
//!
//! A request is a ping-pong between the requester and a serving thread on the requester's CPU
//! (the io_uring channel routes a request to the queue of the CPU it was made on). The serving
//! thread wakes the requester while it still runs, so the scheduler finds the requester's CPU
//! busy and moves the requester to an idle one (`select_idle_sibling`). Waking an idle CPU takes
//! an inter-processor interrupt, and on a virtual machine a halted vCPU's return: more than the
//! rest of the round trip (two threads handing a byte back and forth through pipes take about
//! 2.4–3.9 µs a round on one CPU of the 2-core development VM and 12.5 µs across its two). A CPU
//! that runs only `SCHED_IDLE` tasks counts as idle for that choice, so the requester is woken
//! where it was, and runs at once (a waking task of another policy preempts a `SCHED_IDLE` one):
//! the whole round trip stays on one CPU.
//!
//! `SCHED_IDLE` also gives a thread the least weight against the other tasks of its scheduling
//! group. Alone in its group, the daemon's threads compete only with each other (all of them
//! `SCHED_IDLE`, so fairly: the policy is set before the first thread starts, and threads inherit
//! it), and the group's share of the CPU against other groups is that of any group. Sharing a
//! group with busy tasks, its threads would run only when those sleep — a priority inversion for
//! the programs waiting on the mount. So [`SchedChoice::Auto`] takes `SCHED_IDLE` only where the
//! daemon's group is its own ([`own_group`]), as far as it can tell when the mount starts (a
//! process that joins the group later is not seen):
//! - its `cpu` cgroup is the root of the initial cgroup namespace (inside a container's
//!   namespace, the root shown is the container's group, and autogroups do not apply there),
//!   autogroups are on (`kernel.sched_autogroup_enabled`), and it leads its session: a detached
//!   `quire mount` calls `setsid`, which makes its autogroup;
//! - or its `cpu` cgroup is not the root and holds no other process (the parent of a detached
//!   daemon, about to exit, aside) and no child group: a service's own cgroup.

use std::fs;
use std::path::{Path, PathBuf};

/// The scheduling policy asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedChoice {
    /// `SCHED_IDLE` where the daemon's scheduling group is its own ([`own_group`]), else the
    /// normal policy (and the reason is shown).
    Auto,
    /// `SCHED_IDLE` whatever the group (the caller vouches for it).
    Idle,
    /// The normal policy (`SCHED_OTHER`).
    Normal,
}

impl std::str::FromStr for SchedChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<SchedChoice, String> {
        match s {
            "auto" => Ok(SchedChoice::Auto),
            "idle" => Ok(SchedChoice::Idle),
            "normal" => Ok(SchedChoice::Normal),
            _ => Err(format!(
                "unknown scheduling policy {s:?} (auto, idle, normal)"
            )),
        }
    }
}

/// The policy the daemon's threads run under, and why: set once, before the first thread
/// starts, shown by `quire stat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sched {
    /// `SCHED_IDLE` (`false`: the normal policy).
    pub idle: bool,
    /// Why (what was asked, what the daemon's scheduling group is).
    pub why: String,
}

impl std::fmt::Display for Sched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = if self.idle { "SCHED_IDLE" } else { "normal" };
        write!(f, "{name}: {}", self.why)
    }
}

/// Chooses the policy for `choice`, sets it on the calling thread, and records it for `quire
/// stat`. Call it before any thread of the daemon starts: threads inherit the policy, and it must
/// be the same for all of them (see the module documentation).
///
/// `parent_exits`: this process is a detached daemon whose parent waits for the mount and then
/// exits, so the parent does not count as sharing the group.
pub fn apply(choice: SchedChoice, parent_exits: bool) -> Sched {
    let s = choose_and_set(choice, parent_exits);
    crate::stats::set_sched(s.clone());
    s
}

/// [`apply`] without the record.
fn choose_and_set(choice: SchedChoice, parent_exits: bool) -> Sched {
    let why = match choice {
        SchedChoice::Normal => {
            let why = "asked for (--sched normal)".to_string();
            return match set_policy(libc::SCHED_OTHER) {
                Ok(()) => observed(why),
                Err(e) => observed(format!(
                    "{why}, but sched_setscheduler(SCHED_OTHER) failed: {e}"
                )),
            };
        }
        SchedChoice::Idle => "asked for (--sched idle)".to_string(),
        SchedChoice::Auto => match own_group(parent_exits) {
            Ok(why) => why,
            Err(why) => {
                return observed(format!(
                    "{why}: a SCHED_IDLE daemon would wait behind the group's other tasks"
                ))
            }
        },
    };
    match set_policy(libc::SCHED_IDLE) {
        Ok(()) => observed(why),
        Err(e) => observed(format!(
            "{why}, but sched_setscheduler(SCHED_IDLE) failed: {e}"
        )),
    }
}

/// The policy the calling thread has now, with `why`.
fn observed(why: String) -> Sched {
    // SAFETY: reads the calling thread's policy; no memory is passed.
    let policy = unsafe { libc::sched_getscheduler(0) };
    let idle = policy == libc::SCHED_IDLE;
    let why = match policy {
        libc::SCHED_OTHER | libc::SCHED_IDLE => why,
        p => format!("{why} (kept the policy it was started with, {p})"),
    };
    Sched { idle, why }
}

/// Leaves the policy the daemon was started with (normally the normal one), without asking the
/// group, and records it with `why`: for a file system where `SCHED_IDLE` was not measured to
/// help (`quire mount`'s object store mounts).
pub fn keep_normal(why: &str) -> Sched {
    let s = observed(why.to_string());
    crate::stats::set_sched(s.clone());
    s
}

/// Sets `policy` (priority 0) on the calling thread.
fn set_policy(policy: libc::c_int) -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid `sched_param` for the call's duration; pid 0 is the calling
    // thread, and the call changes nothing but its scheduling policy.
    let r = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The inode of the initial cgroup namespace (`PROC_CGROUP_INIT_INO`).
const INITIAL_CGROUP_NS: &str = "cgroup:[4026531835]";

/// Whether this process has a scheduling group of its own (see the module documentation):
/// `Ok(what the group is)` or `Err(why not)`. `parent_exits` as for [`apply`].
pub fn own_group(parent_exits: bool) -> Result<String, String> {
    let cgroup = fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup unreadable ({e})"))?;
    let (hier, path) = cpu_cgroup(&cgroup).ok_or("no cpu cgroup in /proc/self/cgroup")?;
    if path == "/" {
        let ns = fs::read_link("/proc/self/ns/cgroup")
            .map_err(|e| format!("/proc/self/ns/cgroup unreadable ({e})"))?;
        if ns.as_os_str() != INITIAL_CGROUP_NS {
            return Err(format!(
                "in cgroup namespace {} (a container's): the root it shows is a group \
                 shared with the container's processes",
                ns.display()
            ));
        }
        return autogroup();
    }
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo unreadable ({e})"))?;
    let root = hierarchy_root(&mountinfo, hier)
        .ok_or_else(|| format!("cpu cgroup {path}: its hierarchy is not mounted"))?;
    let dir = root.join(path.trim_start_matches('/'));
    if hier == Hierarchy::V2 && !controls_cpu(&dir) {
        return Err(format!(
            "cgroup {path} has no cpu controller of its own (the group is an ancestor's)"
        ));
    }
    let ignore = parent_exits.then(rustix::process::getppid).flatten();
    let ignore = ignore.map(|p| p.as_raw_nonzero().get());
    alone_in(&dir, ignore).map(|()| format!("alone in cpu cgroup {path}"))
}

/// The root cgroup's case: an autogroup of its own (autogroups on, and this process leads its
/// session).
fn autogroup() -> Result<String, String> {
    let on = fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled")
        .is_ok_and(|s| s.trim() == "1");
    if !on {
        return Err("in the root cpu cgroup with autogroups off".into());
    }
    let me = rustix::process::getpid();
    match rustix::process::getsid(None) {
        Ok(sid) if sid == me => Ok("leads its session: an autogroup of its own".into()),
        Ok(sid) => Err(format!(
            "shares the autogroup of session {} (run detached, without --foreground)",
            sid.as_raw_nonzero()
        )),
        Err(e) => Err(format!("getsid failed ({e})")),
    }
}

/// A cgroup hierarchy: v1 (one per controller set) or the unified v2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hierarchy {
    V1,
    V2,
}

/// The hierarchy and path of this process's `cpu` cgroup, from `/proc/self/cgroup`'s text: a
/// v1 line naming the `cpu` controller, else the v2 line (`0::PATH`).
fn cpu_cgroup(text: &str) -> Option<(Hierarchy, &str)> {
    let mut v2 = None;
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        if controllers.split(',').any(|c| c == "cpu") {
            return Some((Hierarchy::V1, path));
        }
        if controllers.is_empty() {
            v2 = Some((Hierarchy::V2, path));
        }
    }
    v2
}

/// Where `hier` is mounted, from `/proc/self/mountinfo`'s text: the v1 hierarchy whose options
/// name `cpu`, or the `cgroup2` file system.
fn hierarchy_root(mountinfo: &str, hier: Hierarchy) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let point = left.split_whitespace().nth(4)?;
        let mut r = right.split_whitespace();
        let (fstype, _source, options) = (r.next()?, r.next()?, r.next()?);
        let hit = match hier {
            Hierarchy::V2 => fstype == "cgroup2",
            Hierarchy::V1 => fstype == "cgroup" && options.split(',').any(|o| o == "cpu"),
        };
        hit.then(|| PathBuf::from(point))
    })
}

/// Whether the v2 cgroup at `dir` has the cpu controller (its parent enables it for its
/// children; only then is it a scheduling group).
fn controls_cpu(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.controllers"))
        .is_ok_and(|s| s.split_whitespace().any(|c| c == "cpu"))
}

/// Whether the cgroup at `dir` holds this process alone (`ignore`, a process about to exit,
/// aside): no other process, no child group.
fn alone_in(dir: &Path, ignore: Option<i32>) -> Result<(), String> {
    let procs = fs::read_to_string(dir.join("cgroup.procs"))
        .map_err(|e| format!("{}: unreadable ({e})", dir.display()))?;
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let others = procs
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter(|&p| p != me && Some(p) != ignore)
        .count();
    if others > 0 {
        return Err(format!(
            "cgroup {} holds {others} other process(es)",
            dir.display()
        ));
    }
    let children = fs::read_dir(dir)
        .map_err(|e| format!("{}: unreadable ({e})", dir.display()))?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .count();
    if children > 0 {
        return Err(format!(
            "cgroup {} has {children} child group(s)",
            dir.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_cgroup_is_found_in_v1_and_v2_listings() {
        let v1 = "9:name=systemd:/\n4:memory:/a/b\n2:cpu,cpuacct:/svc\n1:cpuacct:/x\n0::/\n";
        assert_eq!(cpu_cgroup(v1), Some((Hierarchy::V1, "/svc")));
        // `cpuacct` alone is not the cpu controller.
        let acct = "2:cpuacct:/x\n0::/user.slice/s.scope\n";
        assert_eq!(
            cpu_cgroup(acct),
            Some((Hierarchy::V2, "/user.slice/s.scope"))
        );
        assert_eq!(
            cpu_cgroup("0::/system.slice/quire.service\n"),
            Some((Hierarchy::V2, "/system.slice/quire.service"))
        );
        assert_eq!(cpu_cgroup("4:memory:/a\n"), None);
        assert_eq!(cpu_cgroup(""), None);
    }

    #[test]
    fn hierarchies_are_found_in_mountinfo() {
        let mi = "30 25 0:26 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n\
                  31 25 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                  32 25 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            hierarchy_root(mi, Hierarchy::V1),
            Some(PathBuf::from("/sys/fs/cgroup/cpu"))
        );
        assert_eq!(
            hierarchy_root(mi, Hierarchy::V2),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let no_cpu = "30 25 0:26 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n";
        assert_eq!(hierarchy_root(no_cpu, Hierarchy::V1), None);
    }

    #[test]
    fn a_cgroup_shared_with_another_process_is_not_our_own() {
        let dir = std::env::temp_dir().join(format!("quire-sched-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        fs::write(dir.join("cgroup.procs"), format!("{me}\n")).unwrap();
        assert_eq!(alone_in(&dir, None), Ok(()));
        fs::write(dir.join("cgroup.procs"), format!("1\n{me}\n")).unwrap();
        let e = alone_in(&dir, None).unwrap_err();
        assert!(e.contains("1 other process"), "{e}");
        // The parent of a detached daemon, about to exit, aside.
        assert_eq!(alone_in(&dir, Some(1)), Ok(()));
        fs::write(dir.join("cgroup.procs"), format!("{me}\n")).unwrap();
        fs::create_dir(dir.join("child")).unwrap();
        let e = alone_in(&dir, None).unwrap_err();
        assert!(e.contains("1 child group"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    fn policy() -> i32 {
        // SAFETY: reads the calling thread's policy; no memory is passed.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn idle_is_set_on_the_calling_thread_and_inherited() {
        let started = policy();
        std::thread::spawn(|| {
            let s = choose_and_set(SchedChoice::Idle, false);
            assert!(s.idle, "{s}");
            assert_eq!(policy(), libc::SCHED_IDLE);
            let child = std::thread::spawn(policy).join().unwrap();
            assert_eq!(
                child,
                libc::SCHED_IDLE,
                "a thread started after inherits it"
            );
            let s = choose_and_set(SchedChoice::Normal, false);
            assert!(!s.idle, "{s}");
            assert_eq!(policy(), libc::SCHED_OTHER, "normal is set, not assumed");
        })
        .join()
        .unwrap();
        assert_eq!(policy(), started, "other threads keep theirs");
    }

    #[test]
    fn choices_parse() {
        assert_eq!("auto".parse(), Ok(SchedChoice::Auto));
        assert_eq!("idle".parse(), Ok(SchedChoice::Idle));
        assert_eq!("normal".parse(), Ok(SchedChoice::Normal));
        assert!("fifo".parse::<SchedChoice>().is_err());
    }
}
