//! `quire bench --variants NAME,...`: the built binary runs exactly the variants asked for (read
//! back from its JSON report), leaves out the before/after pairs that would need a variant it
//! did not run, leaves out suites with none of them, and refuses an unknown name before
//! anything runs, listing the suite's variants. And `--threads N,...`: the scaling cases run at
//! exactly those thread counts.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const QUIRE: &str = env!("CARGO_BIN_EXE_quire");

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("quire-variants-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn quire(args: &[&str]) -> Output {
    Command::new(QUIRE).args(args).output().expect("run quire")
}

fn report(json: &Path) -> serde_json::Value {
    serde_json::from_slice(&fs::read(json).unwrap()).unwrap()
}

/// The (suite, case, variant) of every figure of a report.
fn figures(r: &serde_json::Value) -> BTreeSet<(String, String, String)> {
    r["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|x| {
            let s = |k: &str| x[k].as_str().unwrap().to_string();
            (s("suite"), s("case"), s("variant"))
        })
        .collect()
}

fn set(items: &[(&str, &str, &str)]) -> BTreeSet<(String, String, String)> {
    items
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

/// Runs `quire bench ARGS --json out.json` and returns (report, stdout, stderr).
fn bench(dir: &Dir, args: &[&str]) -> (serde_json::Value, String, String) {
    let json = dir.path("out.json");
    let _ = fs::remove_file(&json);
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let out = quire(&all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{all:?}: {stdout}\n{stderr}");
    (report(&json), stdout, stderr)
}

#[test]
fn only_the_chosen_variants_run() {
    let dir = Dir::new("pagelock");
    let (r, stdout, _) = bench(
        &dir,
        &["pagelock", "--quick", "--variants", "waiters-bit,exact"],
    );
    assert_eq!(
        figures(&r),
        set(&[
            ("pagelock", "uncontended", "waiters-bit"),
            ("pagelock", "handoff", "exact"),
            ("pagelock", "handoff-io", "exact"),
        ])
    );
    assert_eq!(r["variants"], serde_json::json!(["waiters-bit", "exact"]));
    // Every pair of the suite needs a variant that did not run: none is declared, and the
    // tables show no change against nothing.
    assert_eq!(r["pairs"], serde_json::json!([]));
    assert!(
        !stdout.contains("(before)") && !stdout.contains("(after)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("variants: waiters-bit, exact (--variants)"),
        "{stdout}"
    );
    assert!(stdout.contains("pagelock / handoff-io"), "{stdout}");
}

#[test]
fn a_pair_whose_variants_both_ran_is_kept_and_other_suites_are_left_out() {
    let dir = Dir::new("dirtybit");
    let (r, stdout, stderr) = bench(
        &dir,
        &[
            "pagelock",
            "dirtybit",
            "--quick",
            "--variants",
            "software,always-lookup,waiters-bit",
        ],
    );
    let figs = figures(&r);
    assert!(
        figs.iter().all(|(s, c, v)| match s.as_str() {
            "pagelock" => c == "uncontended" && (v == "always-lookup" || v == "waiters-bit"),
            "dirtybit" => v == "software",
            _ => false,
        }),
        "{figs:?}"
    );
    for case in ["test-clean", "write-test", "scan"] {
        assert!(figs.contains(&("dirtybit".into(), case.into(), "software".into())));
    }
    assert!(figs.contains(&(
        "pagelock".into(),
        "uncontended".into(),
        "waiters-bit".into()
    )));
    // Only pagelock's uncontended case had both sides of its pair.
    assert_eq!(
        r["pairs"],
        serde_json::json!([{"suite": "pagelock", "case": "uncontended",
                            "before": "always-lookup", "after": "waiters-bit"}])
    );
    assert!(stdout.contains("always-lookup (before)"), "{stdout}");
    // A suite with none of the names is not run, and says so.
    let dir2 = Dir::new("skip");
    let (r, _, stderr2) = bench(
        &dir2,
        &["pagelock", "dirtybit", "--quick", "--variants", "software"],
    );
    assert_eq!(r["suites"], serde_json::json!(["dirtybit"]));
    assert!(
        stderr2.contains("pagelock: skipped: none of --variants is one of its variants"),
        "{stderr2}"
    );
    drop(stderr);
}

#[test]
fn unknown_variants_are_refused_before_anything_runs() {
    let dir = Dir::new("unknown");
    let json = dir.path("out.json");
    let out = quire(&[
        "bench",
        "pagelock",
        "--variants",
        "exact,nope",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "no variant named \"nope\" in suite pagelock; its variants are: always-lookup, \
             waiters-bit, unfiltered-wake-all, exact"
        ),
        "{stderr}"
    );
    // Nothing ran: no host line, no table, no report.
    assert!(stdout.is_empty(), "{stdout}");
    assert!(!json.exists());

    // A name of another suite is no variant of this one.
    let out = quire(&["bench", "lockref", "--variants", "exact"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("its variants are: spinlock, lockref, mutex"),
        "{stderr}"
    );
    // An empty name.
    let out = quire(&["bench", "lockref", "--variants", "lockref,"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--variants needs variant names"));
}

#[test]
fn a_trace_replay_runs_the_chosen_variants_only() {
    let dir = Dir::new("trace");
    let trace = dir.path("t.txt");
    let pages: Vec<String> = (0..4)
        .flat_map(|_| (0..600).map(|p| p.to_string()))
        .collect();
    fs::write(&trace, pages.join("\n") + "\n").unwrap();
    let t = trace.to_str().unwrap();
    let (r, _, _) = bench(
        &dir,
        &[
            "evict",
            "--trace",
            t,
            "--budget",
            "1M",
            "--variants",
            "lru,default",
        ],
    );
    let variants: BTreeSet<String> = figures(&r).into_iter().map(|f| f.2).collect();
    assert_eq!(
        variants,
        ["default", "lru"].iter().map(|s| s.to_string()).collect()
    );
    // `kernel` is a variant of the suite's cases, not of a replay.
    let out = quire(&["bench", "evict", "--trace", t, "--variants", "kernel"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no variant named \"kernel\" in suite evict; its variants are: clock,"),
        "{stderr}"
    );
}

#[test]
fn list_names_each_suites_variants() {
    let out = quire(&["bench", "--list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("variants: always-lookup, waiters-bit, unfiltered-wake-all, exact"),
        "{text}"
    );
    assert!(
        text.contains("variants: clock, lru, lru-workingset"),
        "{text}"
    );
}

/// The thread counts of a report's figures for one suite.
fn thread_counts(r: &serde_json::Value, suite: &str) -> BTreeSet<u64> {
    r["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|x| x["suite"] == suite)
        .map(|x| x["threads"].as_u64().expect("threads"))
        .collect()
}

#[test]
fn threads_replace_a_scaling_suites_own_counts() {
    let dir = Dir::new("threads");
    // lockref's own counts are 1, 2 and 16.
    let (r, _, _) = bench(
        &dir,
        &[
            "lockref",
            "--quick",
            "--variants",
            "lockref",
            "--threads",
            "3,1",
        ],
    );
    assert_eq!(thread_counts(&r, "lockref"), BTreeSet::from([1, 3]));
    let (r, _, _) = bench(&dir, &["lockref", "--quick", "--variants", "lockref"]);
    assert_eq!(thread_counts(&r, "lockref"), BTreeSet::from([1, 2, 16]));

    // A count of 0 is refused before anything runs.
    let out = quire(&["bench", "lockref", "--quick", "--threads", "1,0"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--threads"), "{stderr}");
}
