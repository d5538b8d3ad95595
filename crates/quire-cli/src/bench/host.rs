//! The host a report was measured on: CPU, memory, kernel, the build (compiler, commit,
//! profile) and the date — printed as the header of `quire bench` and kept in the JSON report.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// What a report says about its host. Reports written before the header existed have only
/// `cpus` and `kernel`; the other fields are then empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// CPUs this process may run on (its affinity mask).
    pub cpus: usize,
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// The CPU's model name, from `/proc/cpuinfo`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cpu_model: String,
    /// CPUs online on the machine.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cpus_online: usize,
    /// Physical memory, in bytes (`MemTotal`).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub memory_bytes: u64,
    /// The compiler that built `quire` (`rustc --version` at build time).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rustc: String,
    /// The git commit `quire` was built from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub git_commit: String,
    /// Whether the crates' sources differed from that commit when built.
    #[serde(default)]
    pub git_dirty: bool,
    /// `release` or `debug`: figures of a debug build say little.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub profile: String,
    /// When the run started, UTC, as `YYYY-MM-DDThh:mm:ssZ`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub date: String,
    /// Whether the run had root's rights (several suites measure more with them).
    #[serde(default)]
    pub root: bool,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl Host {
    /// Reads this host's description; what cannot be read stays empty.
    pub fn probe() -> Host {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Host {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".to_string()),
            cpu_model: cpu_model(&cpuinfo),
            cpus_online: usize::try_from(online).unwrap_or(0),
            memory_bytes: mem_total(&meminfo),
            rustc: env!("QUIRE_BUILD_RUSTC").to_string(),
            git_commit: env!("QUIRE_BUILD_COMMIT").to_string(),
            git_dirty: env!("QUIRE_BUILD_DIRTY") == "true",
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_string(),
            date: utc_date(secs),
            root: rustix::process::geteuid().is_root(),
        }
    }
}

/// The first `model name` of `/proc/cpuinfo` (x86), else its `Hardware` or `CPU part` line
/// (some Arm kernels), else empty.
fn cpu_model(cpuinfo: &str) -> String {
    for key in ["model name", "Hardware", "cpu model", "CPU part"] {
        for line in cpuinfo.lines() {
            if let Some((k, v)) = line.split_once(':') {
                if k.trim() == key && !v.trim().is_empty() {
                    return v.trim().to_string();
                }
            }
        }
    }
    String::new()
}

/// `MemTotal` of `/proc/meminfo`, in bytes (0 if absent).
fn mem_total(meminfo: &str) -> u64 {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// `secs` since the epoch as an ISO 8601 UTC date and time.
fn utc_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (the classic era-based
/// conversion: 400-year eras of 146 097 days, years starting in March).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of the March-based year
    let mp = (5 * doy + 2) / 153; // month, March = 0
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

impl fmt::Display for Host {
    /// Two lines: the machine, then the build and the date.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let or = |s: &str| if s.is_empty() { "unknown" } else { s }.to_string();
        write!(f, "host: {}, {} CPUs", or(&self.cpu_model), self.cpus)?;
        if self.cpus_online != 0 && self.cpus_online != self.cpus {
            write!(f, " ({} online)", self.cpus_online)?;
        }
        if self.memory_bytes != 0 {
            write!(
                f,
                ", {:.1} GiB memory",
                self.memory_bytes as f64 / (1u64 << 30) as f64
            )?;
        }
        write!(f, ", Linux {}", self.kernel)?;
        if self.root {
            write!(f, ", as root")?;
        }
        writeln!(f)?;
        let commit = if self.git_commit.is_empty() {
            "unknown commit".to_string()
        } else {
            let short = &self.git_commit[..self.git_commit.len().min(12)];
            let dirty = if self.git_dirty { " (modified)" } else { "" };
            format!("commit {short}{dirty}")
        };
        write!(
            f,
            "build: {}, {}, {commit}; started {}",
            or(&self.rustc),
            or(&self.profile),
            or(&self.date)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc_date(0), "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day of a century year) and the day after.
        assert_eq!(utc_date(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_date(951_868_799), "2000-02-29T23:59:59Z");
        assert_eq!(utc_date(951_868_800), "2000-03-01T00:00:00Z");
        assert_eq!(utc_date(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(utc_date(4_102_444_800), "2100-01-01T00:00:00Z");
    }

    #[test]
    fn proc_files() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\
                       processor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(cpu_model(cpuinfo), "AMD EPYC 7B13");
        assert_eq!(cpu_model("processor : 0\nHardware : BCM2835\n"), "BCM2835");
        assert_eq!(cpu_model("processor : 0\n"), "");
        let meminfo = "MemTotal:       24684092 kB\nMemFree:         1000 kB\n";
        assert_eq!(mem_total(meminfo), 24_684_092 * 1024);
        assert_eq!(mem_total("MemFree: 1 kB\n"), 0);
    }

    #[test]
    fn old_reports_host_reads() {
        let h: Host = serde_json::from_str(r#"{"cpus": 2, "kernel": "6.18.44"}"#).unwrap();
        assert_eq!(h.cpus, 2);
        assert_eq!(h.kernel, "6.18.44");
        assert!(h.rustc.is_empty() && h.memory_bytes == 0);
        let probed = Host::probe();
        assert!(probed.cpus >= 1);
        assert_eq!(probed.date.len(), "2026-11-23T00:00:00Z".len());
        let back: Host = serde_json::from_str(&serde_json::to_string(&probed).unwrap()).unwrap();
        assert_eq!(back, probed);
    }
}
