//! Memory groups (cgroup v1) made under this process's own, to hold a process (a FUSE daemon,
//! fio) and the page cache it brings in to a budget: the `fuse`, `inflight` and `object`
//! suites' bound on what quire's peers may use.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

/// Where this process's memory cgroup (v1) is; new groups are made under it.
pub(super) struct MemGroups {
    base: PathBuf,
}

/// One memory group, removed when dropped.
pub(super) struct MemGroup {
    dir: PathBuf,
}

impl MemGroups {
    /// This process's group, if the v1 memory controller is mounted and a group can be made
    /// under it; else why not.
    pub(super) fn new() -> Result<MemGroups, String> {
        let mount = Path::new("/sys/fs/cgroup/memory");
        if !mount.join("memory.limit_in_bytes").exists() {
            return Err("no cgroup-v1 memory controller at /sys/fs/cgroup/memory".into());
        }
        let own = fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let rel = own
            .lines()
            .find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
                ctrl.split(',')
                    .any(|c| c == "memory")
                    .then(|| path.to_string())
            })
            .ok_or("this process is in no memory cgroup")?;
        let base = mount.join(rel.trim_start_matches('/'));
        let probe = base.join(format!("quire-probe-{}", std::process::id()));
        fs::create_dir(&probe)
            .map_err(|e| format!("making a group under {}: {e}", base.display()))?;
        let _ = fs::remove_dir(&probe);
        Ok(MemGroups { base })
    }

    /// A fresh group `quire-bench-NAME-PID`, limited to `limit` bytes where given.
    pub(super) fn group(&self, name: &str, limit: Option<u64>) -> anyhow::Result<MemGroup> {
        let dir = self
            .base
            .join(format!("quire-bench-{name}-{}", std::process::id()));
        let _ = fs::remove_dir(&dir);
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let g = MemGroup { dir };
        if let Some(limit) = limit {
            g.set_limit(limit)?;
        }
        Ok(g)
    }
}

impl MemGroup {
    /// The file a process joins the group through (its pid written there).
    pub(super) fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    pub(super) fn set_limit(&self, limit: u64) -> anyhow::Result<()> {
        fs::write(self.dir.join("memory.limit_in_bytes"), limit.to_string())
            .with_context(|| format!("limiting {}", self.dir.display()))
    }

    /// The most memory the group has held at once (`memory.max_usage_in_bytes`).
    pub(super) fn max_usage(&self) -> anyhow::Result<u64> {
        let p = self.dir.join("memory.max_usage_in_bytes");
        fs::read_to_string(&p)
            .with_context(|| format!("reading {}", p.display()))?
            .trim()
            .parse()
            .with_context(|| format!("parsing {}", p.display()))
    }

    /// How many of the group's processes the kernel killed for memory.
    pub(super) fn oom_kills(&self) -> u64 {
        fs::read_to_string(self.dir.join("memory.oom_control"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0)
    }
}

impl Drop for MemGroup {
    fn drop(&mut self) {
        // The processes have exited; their page cache is moved to the parent group.
        for _ in 0..50 {
            if fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
