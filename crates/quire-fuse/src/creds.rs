//! Acting as the caller: the credentials of the process that made a request, and running a
//! backing system call with the serving thread's file-system ids switched to them.
//!
//! The daemon runs as root and does its backing work as root, but what a request *creates*
//! must come out as the kernel would have made it for the caller: owned by the caller's
//! `fsuid`, grouped by its `fsgid` (or by the directory's group where the directory is
//! set-group-id, which also passes the bit on to a new directory), with the set-group-id bit of
//! a new file dropped where the caller is not in its group. Rather than creating as root and
//! patching the result after (a `chown` that clears set-user-id bits, a window in which the new
//! file is root's), [`DaemonCreds::as_caller`] makes the one creating system call with the
//! thread's `fsuid`, `fsgid` and supplementary groups set to the caller's — as the kernel's own
//! NFS server does — so the backing file system applies the kernel's own rules
//! (`inode_init_owner`, `mode_strip_sgid`). Changing `fsuid` away from 0 drops the file-system
//! capabilities (`CAP_DAC_OVERRIDE`, `CAP_FOWNER`, `CAP_FSETID`, `CAP_MKNOD`, …) from the
//! thread's effective set; a capability the *caller* holds can be kept for the call (device
//! nodes: `CAP_MKNOD`). Credentials are per thread in the kernel (`setfsuid`, `setfsgid` and the
//! raw `setgroups` system call touch only the calling thread), and every switch is undone
//! before the call returns, on every path.
//!
//! FUSE tells the daemon the caller's `uid`, `gid` and `pid` (for the thread that made the
//! request); supplementary groups and capabilities are read from `/proc/PID/status`, as
//! libfuse's `fuse_req_getgroups` does.

use std::fs;

use crate::serve::Req;
use rustix::io::Errno;
use rustix::process::Gid;
use rustix::thread::{CapabilitySet, CapabilitySets};

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The caller's file-system user id.
    pub uid: u32,
    /// The caller's file-system group id.
    pub gid: u32,
    /// Its supplementary groups (empty where they could not be read).
    pub groups: Vec<u32>,
    /// Its effective capabilities (empty where they could not be read, unless it is root).
    pub caps: CapabilitySet,
}

impl Caller {
    /// The caller of `req`, with its groups and capabilities from `/proc/PID/status`.
    pub fn of(req: &Req) -> Caller {
        Caller::read(req.uid(), req.gid(), req.pid())
    }

    /// The caller with ids `uid`/`gid` whose thread is `pid`.
    pub fn read(uid: u32, gid: u32, pid: u32) -> Caller {
        let status = if pid == 0 {
            None
        } else {
            fs::read_to_string(format!("/proc/{pid}/status")).ok()
        };
        let (groups, caps) = status.as_deref().map_or((Vec::new(), None), parse_status);
        // Without /proc, root is taken as capable (as a FUSE server without it would).
        let caps = caps.unwrap_or(if uid == 0 {
            CapabilitySet::all()
        } else {
            CapabilitySet::empty()
        });
        Caller {
            uid,
            gid,
            groups,
            caps,
        }
    }

    /// Whether the caller is in group `gid` (its own or a supplementary one): `in_group_p`.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// Whether the caller holds capability `cap` in its effective set.
    pub fn capable(&self, cap: CapabilitySet) -> bool {
        self.caps.contains(cap)
    }
}

/// The groups and effective capabilities of a `/proc/PID/status` text.
fn parse_status(s: &str) -> (Vec<u32>, Option<CapabilitySet>) {
    let mut groups = Vec::new();
    let mut caps = None;
    for line in s.lines() {
        if let Some(g) = line.strip_prefix("Groups:") {
            groups = g
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
        } else if let Some(c) = line.strip_prefix("CapEff:") {
            caps = u64::from_str_radix(c.trim(), 16)
                .ok()
                .map(CapabilitySet::from_bits_retain);
        }
    }
    (groups, caps)
}

/// The daemon's own credentials, to switch away from and back to.
#[derive(Debug)]
pub struct DaemonCreds {
    uid: u32,
    gid: u32,
    groups: Vec<Gid>,
}

impl DaemonCreds {
    /// The calling thread's credentials now (taken once, when the file system is made).
    pub fn current() -> DaemonCreds {
        DaemonCreds {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            groups: rustix::process::getgroups().unwrap_or_default(),
        }
    }

    /// Whether the daemon can act as another user (it runs as root).
    pub fn can_switch(&self) -> bool {
        self.uid == 0
    }

    /// Whether a request from `uid`/`gid` is run with switched credentials: the daemon runs as
    /// root and the caller's ids are not the daemon's.
    pub fn switches_for(&self, uid: u32, gid: u32) -> bool {
        self.can_switch() && (uid != self.uid || gid != self.gid)
    }

    /// Runs `f` — one backing system call that creates something — with the thread's
    /// `fsuid`, `fsgid` and supplementary groups set to `caller`'s, keeping of the capabilities
    /// in `keep` those the caller holds, and switches back before returning. Where the daemon
    /// is not root, or the caller's ids are the daemon's, `f` runs unchanged. `EPERM` if the
    /// switch is refused (nothing is run then).
    pub fn as_caller<T>(
        &self,
        caller: &Caller,
        keep: CapabilitySet,
        f: impl FnOnce() -> T,
    ) -> Result<T, Errno> {
        if !self.switches_for(caller.uid, caller.gid) {
            return Ok(f());
        }
        let _back = Switched::to(self, caller, keep)?;
        Ok(f())
    }
}

/// The thread's credentials while switched to a caller's; switched back on drop.
struct Switched<'a> {
    daemon: &'a DaemonCreds,
    caps: Option<CapabilitySets>,
}

impl<'a> Switched<'a> {
    fn to(daemon: &'a DaemonCreds, caller: &Caller, keep: CapabilitySet) -> Result<Self, Errno> {
        // From here on, any failure switches back what was switched (Drop).
        let mut s = Switched { daemon, caps: None };
        let groups: Vec<Gid> = caller.groups.iter().map(|&g| Gid::from_raw(g)).collect();
        rustix::thread::set_thread_groups(&groups)?;
        if !set_fsgid(caller.gid) || !set_fsuid(caller.uid) {
            return Err(Errno::PERM);
        }
        let keep = keep & caller.caps;
        if !keep.is_empty() {
            let now = rustix::thread::capabilities(None)?;
            s.caps = Some(now);
            let mut raised = now;
            raised.effective |= keep & now.permitted;
            rustix::thread::set_capabilities(None, raised)?;
        }
        Ok(s)
    }
}

impl Drop for Switched<'_> {
    fn drop(&mut self) {
        // The capabilities first: the saved set is the one taken after the switch (without
        // the file-system capabilities, which `fsuid` 0 then raises again from the permitted
        // set); restored after `fsuid`, it would drop them for good.
        let ok = self
            .caps
            .is_none_or(|c| rustix::thread::set_capabilities(None, c).is_ok())
            && set_fsuid(self.daemon.uid)
            && set_fsgid(self.daemon.gid)
            && rustix::thread::set_thread_groups(&self.daemon.groups).is_ok();
        // A serving thread left with another user's credentials would act as that user for
        // every later request: never go on.
        assert!(ok, "quire-fuse: could not restore the daemon's credentials");
    }
}

/// Sets the thread's `fsuid` and checks that it took (the system call reports no error).
fn set_fsuid(uid: u32) -> bool {
    // SAFETY: setfsuid changes only the calling thread's credentials; any value is valid.
    unsafe { libc::setfsuid(uid) };
    // SAFETY: as above; -1 is never a valid id, so this reads the current fsuid unchanged.
    let now = unsafe { libc::setfsuid(u32::MAX) };
    now as u32 == uid
}

/// Sets the thread's `fsgid` and checks that it took.
fn set_fsgid(gid: u32) -> bool {
    // SAFETY: setfsgid changes only the calling thread's credentials; any value is valid.
    unsafe { libc::setfsgid(gid) };
    // SAFETY: as above; -1 reads the current fsgid unchanged.
    let now = unsafe { libc::setfsgid(u32::MAX) };
    now as u32 == gid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_gives_groups_and_effective_capabilities() {
        let s = "Name:\tx\nUid:\t1\t1\t1\t1\nGroups:\t4 24 27 \nCapInh:\t0000000000000000\n\
                 CapEff:\t0000000000000010\n";
        let (g, c) = parse_status(s);
        assert_eq!(g, vec![4, 24, 27]);
        assert_eq!(c, Some(CapabilitySet::FSETID));
        let (g, c) = parse_status("Groups:\t\n");
        assert!(g.is_empty());
        assert_eq!(c, None);
    }

    #[test]
    fn this_process_reads_as_itself() {
        let me = Caller::read(
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
            std::process::id(),
        );
        let groups: Vec<u32> = rustix::process::getgroups()
            .unwrap()
            .iter()
            .map(|g| g.as_raw())
            .collect();
        assert_eq!(me.groups, groups);
        assert!(me.in_group(me.gid));
        if me.uid == 0 {
            assert!(me.capable(CapabilitySet::MKNOD));
        }
    }

    #[test]
    fn a_switch_is_undone_on_return_and_on_panic() {
        let d = DaemonCreds::current();
        if !d.can_switch() {
            return eprintln!("skipped: switching credentials needs root");
        }
        let caller = Caller {
            uid: 65534,
            gid: 65534,
            groups: vec![65534],
            caps: CapabilitySet::empty(),
        };
        let inside = d
            .as_caller(&caller, CapabilitySet::empty(), || {
                let caps = rustix::thread::capabilities(None).unwrap();
                (
                    unsafe_fsuid(),
                    unsafe_fsgid(),
                    rustix::process::getgroups().unwrap(),
                    caps.effective.contains(CapabilitySet::DAC_OVERRIDE),
                )
            })
            .unwrap();
        assert_eq!(inside.0, 65534);
        assert_eq!(inside.1, 65534);
        assert_eq!(inside.2, vec![Gid::from_raw(65534)]);
        assert!(!inside.3, "fsuid != 0 drops CAP_DAC_OVERRIDE");
        assert_eq!(unsafe_fsuid(), 0);
        assert_eq!(rustix::process::getgroups().unwrap(), d.groups);
        let caps = rustix::thread::capabilities(None).unwrap();
        assert!(caps.effective.contains(CapabilitySet::DAC_OVERRIDE));
        // A panic inside switches back too.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            d.as_caller(&caller, CapabilitySet::empty(), || panic!("inside"))
        }));
        assert!(r.is_err());
        assert_eq!(unsafe_fsuid(), 0);
        assert_eq!(unsafe_fsgid(), d.gid);
        // A capability the caller holds is kept for the call, one it lacks is not.
        let mknod = |c: &Caller| {
            d.as_caller(c, CapabilitySet::MKNOD, || {
                rustix::thread::capabilities(None)
                    .unwrap()
                    .effective
                    .contains(CapabilitySet::MKNOD)
            })
            .unwrap()
        };
        assert!(!mknod(&caller));
        let with = Caller {
            caps: CapabilitySet::MKNOD,
            ..caller.clone()
        };
        assert!(mknod(&with));
        assert!(rustix::thread::capabilities(None)
            .unwrap()
            .effective
            .contains(CapabilitySet::MKNOD));
    }

    fn unsafe_fsuid() -> u32 {
        // SAFETY: -1 reads the thread's fsuid without changing it.
        unsafe { libc::setfsuid(u32::MAX) as u32 }
    }

    fn unsafe_fsgid() -> u32 {
        // SAFETY: -1 reads the thread's fsgid without changing it.
        unsafe { libc::setfsgid(u32::MAX) as u32 }
    }
}
