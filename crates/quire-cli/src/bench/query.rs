//! Suite `query`: TPC-H on DataFusion over the project's S3 server behind the `object` suite's
//! emulated link (2 ms per request, 1000 Mbit/s), read directly and through quire's cache.
//!
//! DataFusion is not built into `quire`: the suite runs the runner `quire-query` (the crate
//! `crates/quire-query`, a workspace of its own, whose README says what it measures) and merges
//! the figures it writes as JSON. The runner is `$QUIRE_QUERY_BIN` where that is set, else it
//! is built from this source tree (`cargo build --manifest-path crates/quire-query/Cargo.toml`,
//! `--release`, or its `dev` profile with `--quick`; the first build takes many minutes) and
//! run from its target directory. Where it cannot be had the suite says "skipped: why".
//!
//! The suite is not among those `quire bench` runs when none is named (it would build
//! DataFusion): `quire bench query [--quick]`.
//!
//! Variants: `direct` (object_store's S3 client), `quire-store` (the same behind quire-object's
//! `CachedStore`, 256 MiB of memory and a 2 GiB disk tier), and DataFusion on the local files of
//! the mounts `quire-mount` (this binary's `quire mount`, passed as `$QUIRE_BIN`), `s3fs` and
//! `rclone`, the peers in a memory group as in the `object` suite; and `local`, DataFusion on
//! the same files on the local disk (its warm pass only: the floor of DataFusion's own work).
//! Case `tpch-sfF` (SF 1; 0.1 with `--quick`); metrics `cold_s`, `warm_s`, `restart_s`, the
//! GETs and MiB each of those phases fetched (`cold_gets`, `cold_mib`, …) and `peak_rss_mib`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;
use serde::Deserialize;

use super::{Bench, Suite};

pub const SUITE: Suite = Suite {
    name: "query",
    about: "TPC-H on DataFusion over S3 through a delaying proxy: direct vs quire's CachedStore (runs quire-query)",
    variants: &VARIANTS,
    steps: |_| 1,
    run,
};

const VARIANTS: [&str; 6] = [
    "direct",
    "quire-store",
    "quire-mount",
    "s3fs",
    "rclone",
    "local",
];

/// The metrics the runner records (each has a direction in `metric.rs`; the test below checks).
const METRICS: [&str; 10] = [
    "cold_s",
    "warm_s",
    "restart_s",
    "cold_gets",
    "warm_gets",
    "restart_gets",
    "cold_mib",
    "warm_mib",
    "restart_mib",
    "peak_rss_mib",
];

/// One figure as the runner writes it.
#[derive(Deserialize)]
struct Figure {
    case: String,
    variant: String,
    threads: usize,
    metric: String,
    value: f64,
    unit: String,
}

#[derive(Deserialize)]
struct Output {
    results: Vec<Figure>,
}

/// The source tree's runner crate, if this binary was built from one that has it.
fn runner_crate() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../quire-query");
    dir.join("Cargo.toml").is_file().then_some(dir)
}

/// The runner: `$QUIRE_QUERY_BIN`, or built from the source tree; else why not.
fn runner(b: &Bench) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("QUIRE_QUERY_BIN") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("QUIRE_QUERY_BIN={} is not a file", p.display()))
        };
    }
    let dir = runner_crate().ok_or(
        "no runner: QUIRE_QUERY_BIN is not set and this build's source tree has no crates/quire-query",
    )?;
    let (profile, sub) = if b.quick() {
        ("dev", "debug")
    } else {
        ("release", "release")
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    b.note(format!(
        "building quire-query (profile {profile}) in {}: DataFusion, many minutes the first time",
        dir.display()
    ));
    let status = Command::new(&cargo)
        .arg("build")
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .args(["--profile", profile])
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    if !status.success() {
        return Err(format!(
            "`cargo build --profile {profile}` of {} failed ({status})",
            dir.display()
        ));
    }
    let bin = dir.join("target").join(sub).join("quire-query");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "cargo built quire-query but {} is missing",
            bin.display()
        ))
    }
}

fn run(b: &mut Bench) -> anyhow::Result<()> {
    let wanted: Vec<&str> = VARIANTS.iter().copied().filter(|v| b.wants(v)).collect();
    let bin = match runner(b) {
        Ok(p) => p,
        Err(why) => {
            b.note(format!("skipped: {why}"));
            return Ok(());
        }
    };
    b.step("TPC-H on DataFusion");
    let out = tempfile_path()?;
    let mut cmd = Command::new(&bin);
    cmd.arg("bench")
        .arg("--variants")
        .arg(wanted.join(","))
        .arg("--json")
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    if b.quick() {
        cmd.arg("--quick");
    }
    // The runner's S3 tools are this binary's (found or built once); its quire mounts, this
    // binary.
    if let Ok(t) = crate::s3_tools::find() {
        if let Some(dir) = t.server.parent() {
            cmd.env("QUIRE_S3_TOOLS", dir);
        }
    }
    if let Ok(exe) = std::env::current_exe() {
        cmd.env("QUIRE_BIN", exe);
    }
    let status = cmd
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    anyhow::ensure!(
        status.success(),
        "{} bench failed ({status})",
        bin.display()
    );
    let text =
        std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    let _ = std::fs::remove_file(&out);
    let o: Output = serde_json::from_str(&text).context("the runner's JSON")?;
    if o.results.is_empty() {
        b.note("the runner recorded nothing (it said why above)");
    }
    let mut cases: Vec<String> = Vec::new();
    for f in o.results {
        if !METRICS.contains(&f.metric.as_str()) {
            b.note(format!(
                "the runner's metric {:?} is not one this suite knows",
                f.metric
            ));
        }
        if !cases.contains(&f.case) {
            cases.push(f.case.clone());
        }
        b.record_figure(&f.case, &f.variant, f.threads, &f.metric, f.value, &f.unit);
    }
    for c in &cases {
        b.compare(c, "direct", "quire-store");
    }
    Ok(())
}

/// A path for the runner's JSON.
fn tempfile_path() -> anyhow::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Ok(std::env::temp_dir().join(format!(
        "quire-bench-query-{}-{nanos}.json",
        std::process::id()
    )))
}

#[cfg(test)]
mod tests {
    use super::super::metric::Better;
    use super::*;

    #[test]
    fn every_metric_of_the_runner_has_a_direction() {
        for m in METRICS {
            assert_eq!(Better::of(m), Some(Better::Lower), "{m}");
        }
    }

    #[test]
    fn the_runners_output_parses() {
        let text = r#"{"suite": "query", "sf": 0.1, "results": [{"suite": "query",
            "case": "tpch-sf0.1", "variant": "direct", "threads": 2, "metric": "cold_s",
            "value": 1.5, "unit": "s", "better": "lower", "runs": 1, "min": 1.5,
            "median": 1.5, "max": 1.5}]}"#;
        let o: Output = serde_json::from_str(text).unwrap();
        assert_eq!(o.results[0].metric, "cold_s");
        assert_eq!(o.results[0].value, 1.5);
    }
}
