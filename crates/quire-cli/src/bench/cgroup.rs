//! Memory groups (cgroup v1) made under this process's own, to hold a process (a FUSE daemon,
//! fio) and the page cache it brings in to a budget: the `fuse`, `inflight` and `object`
//! suites' bound on what quire's peers may use.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
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

    /// Holds the group's page cache to `cache` bytes beyond what its processes hold of their
    /// own, as the group's memory grows and shrinks: every [`FOLLOW_EVERY`] the bound is set to
    /// `cache` plus the group's own memory ([`Usage::own`]). A v1 group bounds its processes'
    /// memory and their page cache together, so a fixed bound with room for a heap to grow
    /// lets the page cache fill that room while the heap does not; this bound gives a heap
    /// what it takes and the page cache what it was allowed. Stops when dropped.
    pub(super) fn follow(&self, cache: u64) -> Follower {
        let dir = self.dir.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = Peaks::default();
            while !flag.load(Ordering::Relaxed) {
                if let Ok(u) = Usage::read(&dir) {
                    let bound = cache + u.own();
                    // Lowering a bound below what the group holds makes the writer reclaim
                    // its page cache; where it can't (pages under write-back) the kernel
                    // refuses (EBUSY) and the old bound stays until the next round.
                    let _ = fs::write(dir.join("memory.limit_in_bytes"), bound.to_string());
                    peak.own = peak.own.max(u.own());
                    peak.cache = peak.cache.max(u.data_cache());
                }
                std::thread::sleep(FOLLOW_EVERY);
            }
            peak
        });
        Follower {
            stop,
            thread: Some(thread),
        }
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

/// How often [`MemGroup::follow`] moves the bound.
const FOLLOW_EVERY: Duration = Duration::from_millis(20);

/// A group's memory by kind (`memory.stat`, bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Usage {
    /// Anonymous memory (`rss`: heaps, stacks, anonymous mappings).
    pub anon: u64,
    /// Page cache (`cache`), the files its processes map included.
    pub cache: u64,
    /// The part of `cache` its processes map (`mapped_file`: their code, their libraries).
    pub mapped: u64,
}

impl Usage {
    fn read(dir: &Path) -> anyhow::Result<Usage> {
        let p = dir.join("memory.stat");
        let text = fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        Ok(Usage::parse(&text))
    }

    fn parse(stat: &str) -> Usage {
        let mut u = Usage::default();
        for l in stat.lines() {
            let mut f = l.split_whitespace();
            let (Some(k), Some(v)) = (f.next(), f.next().and_then(|v| v.parse().ok())) else {
                continue;
            };
            match k {
                "rss" => u.anon = v,
                "cache" => u.cache = v,
                "mapped_file" => u.mapped = v,
                _ => {}
            }
        }
        u
    }

    /// What the processes hold of their own: their anonymous memory and the files they map
    /// (a daemon's code is its own, not a cache of data).
    pub fn own(&self) -> u64 {
        self.anon + self.mapped
    }

    /// The page cache beside the mapped files: the data the group caches.
    pub fn data_cache(&self) -> u64 {
        self.cache.saturating_sub(self.mapped)
    }
}

/// The most a followed group held, by kind.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Peaks {
    /// [`Usage::own`] at its largest.
    pub own: u64,
    /// [`Usage::data_cache`] at its largest.
    pub cache: u64,
}

/// A [`MemGroup::follow`] in progress.
pub(super) struct Follower {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Peaks>>,
}

impl Follower {
    /// Stops following; what the group held at most meanwhile.
    pub(super) fn finish(mut self) -> Peaks {
        self.end()
    }

    fn end(&mut self) -> Peaks {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.end();
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

#[cfg(test)]
mod tests {
    use super::Usage;

    #[test]
    fn usage_reads_the_groups_own_memory_and_its_data_cache() {
        let stat = "cache 104857600\nrss 7340032\nrss_huge 0\nshmem 0\nmapped_file 13631488\n\
                    total_cache 1\ntotal_rss 2\ntotal_mapped_file 3\nbad line\n";
        let u = Usage::parse(stat);
        assert_eq!(
            u,
            Usage {
                anon: 7 << 20,
                cache: 100 << 20,
                mapped: 13 << 20,
            }
        );
        assert_eq!(u.own(), 20 << 20);
        assert_eq!(u.data_cache(), 87 << 20);
    }
}
