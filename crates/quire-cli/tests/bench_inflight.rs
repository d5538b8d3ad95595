//! `quire bench inflight --quick`: the built binary runs the suite and its JSON report is
//! well-formed — every case of `quire-sync` with its metrics, and `kernel` and `device` either
//! measured in every case they belong to or said to be skipped (no fio, no io_uring, no memory
//! cgroup). No figure is judged: these are the machine's, not the test's.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

const QUIRE: &str = env!("CARGO_BIN_EXE_quire");

const ZIPF: [&str; 3] = ["zipf-qd1", "zipf-qd8", "zipf-qd32"];
/// The cases fio runs, as the suite's `skipped` notes name them.
const FIO_CASES: &str = "inflight: zipf-qd1, zipf-qd8, zipf-qd32, cold-seq";

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The metrics of (case, variant) in the report, with their units.
fn metrics(r: &serde_json::Value, case: &str, variant: &str) -> BTreeSet<(String, String)> {
    r["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["case"] == case && x["variant"] == variant)
        .map(|x| {
            (
                x["metric"].as_str().unwrap().to_string(),
                x["unit"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The value of `metric` of (case, variant) in the report.
fn value(r: &serde_json::Value, case: &str, variant: &str, metric: &str) -> f64 {
    r["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["case"] == case && x["variant"] == variant && x["metric"] == metric)
        .and_then(|x| x["value"].as_f64())
        .unwrap_or_else(|| panic!("no {metric} for {case} / {variant}"))
}

fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn quick_run_is_well_formed() {
    let dir = Dir(std::env::temp_dir().join(format!("quire-inflight-{}", std::process::id())));
    let _ = fs::remove_dir_all(&dir.0);
    fs::create_dir_all(&dir.0).unwrap();
    let json = dir.0.join("out.json");
    let out = Command::new(QUIRE)
        .args(["bench", "inflight", "--quick", "--json"])
        .arg(&json)
        .output()
        .expect("run quire");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["suites"], serde_json::json!(["inflight"]));

    let cases: BTreeSet<&str> = ZIPF
        .iter()
        .copied()
        .chain(["cold-seq", "fsync-1g"])
        .collect();
    for x in r["results"].as_array().unwrap() {
        assert_eq!(x["suite"], "inflight", "{x}");
        assert_eq!(x["threads"], 1, "{x}");
        assert!(cases.contains(x["case"].as_str().unwrap()), "{x}");
        let v = x["value"].as_f64().unwrap();
        assert!(v.is_finite() && v >= 0.0, "{x}");
        assert!(x["better"].is_string(), "a metric without a direction: {x}");
    }

    let zipf = set(&[("iops", "1/s"), ("miss_iops", "1/s")]);
    // quire-async also says how its polling thread and the engine overlapped the reads.
    let zipf_async = set(&[
        ("iops", "1/s"),
        ("miss_iops", "1/s"),
        ("mean_depth", "requests"),
        ("wake_to_poll_us", "us"),
        ("ready_per_pass", "futures"),
    ]);
    let seq = set(&[("mb_per_s", "MiB/s")]);
    let fsync = set(&[("seconds", "s")]);
    // quire-sync and quire-async run everywhere (quire-async in the Zipf cases only);
    // quire-local where the thread can have a ring of its own (else it says why).
    let local_skipped = stderr.contains("/ quire-local: skipped: ");
    for case in ZIPF {
        assert_eq!(metrics(&r, case, "quire-sync"), zipf, "{case}");
        let polled: &[&str] = if local_skipped {
            assert!(metrics(&r, case, "quire-local").is_empty(), "{case}");
            &["quire-async"]
        } else {
            &["quire-async", "quire-local"]
        };
        for &v in polled {
            assert_eq!(metrics(&r, case, v), zipf_async, "{case} {v}");
            // Each future has at most one miss in flight: the engine's requests join between
            // 1 and the case's depth in flight, and a pass polls between 1 and that many.
            // Readahead adds requests beyond the futures' own where a miss follows its page's
            // neighbour (2 of 7 672 requests in a quick run at depth 1 with commit c72358c's
            // probation floor, which joined with up to 3 in flight; none with the floor since):
            // the mean depth may pass the case's depth by that much, not more than 1% of it.
            let depth: f64 = case.trim_start_matches("zipf-qd").parse().unwrap();
            for (metric, slack) in [("mean_depth", 0.01), ("ready_per_pass", 0.0)] {
                let x = value(&r, case, v, metric);
                assert!(
                    (1.0..=depth * (1.0 + slack)).contains(&x),
                    "{case} {v} {metric} {x}"
                );
            }
        }
        assert!(stdout.contains(&format!("inflight / {case}")), "{stdout}");
    }
    assert_eq!(metrics(&r, "cold-seq", "quire-sync"), seq);
    assert_eq!(metrics(&r, "fsync-1g", "quire-sync"), fsync);
    assert!(metrics(&r, "cold-seq", "quire-async").is_empty());
    assert!(metrics(&r, "cold-seq", "quire-local").is_empty());
    // What each fio variant needs may be missing here: then it says why and records nothing.
    for (variant, own) in [
        (
            "kernel",
            vec![
                ("zipf-qd1", &zipf),
                ("zipf-qd8", &zipf),
                ("zipf-qd32", &zipf),
                ("cold-seq", &seq),
            ],
        ),
        (
            "device",
            vec![
                ("zipf-qd1", &zipf),
                ("zipf-qd8", &zipf),
                ("zipf-qd32", &zipf),
                ("cold-seq", &seq),
            ],
        ),
    ] {
        if stderr.contains(&format!("{FIO_CASES} / {variant}: skipped: ")) {
            eprintln!("skipped: {variant}, as the suite said");
            for (case, _) in own {
                assert!(metrics(&r, case, variant).is_empty(), "{variant} {case}");
            }
            continue;
        }
        for (case, want) in own {
            assert_eq!(&metrics(&r, case, variant), want, "{variant} {case}");
        }
    }
    // The kernel's fsync needs nothing but a file.
    assert_eq!(metrics(&r, "fsync-1g", "kernel"), fsync);
    assert!(metrics(&r, "fsync-1g", "device").is_empty());
    // Each case compares the kernel with quire: the Zipf cases with quire-async, the others
    // with quire-sync.
    for p in r["pairs"].as_array().unwrap() {
        let after = if ZIPF.contains(&p["case"].as_str().unwrap()) {
            "quire-async"
        } else {
            "quire-sync"
        };
        assert_eq!(
            (&p["before"], &p["after"]),
            (&"kernel".into(), &after.into()),
            "{p}"
        );
    }
    assert!(stderr.contains("miss_iops: quire"), "{stderr}");
}

/// Without fio (a `PATH` where it cannot be found) the fio variants say why and record
/// nothing, and the rest still runs: the kernel's `fsync-1g`, which needs no fio.
#[test]
fn without_fio_the_fio_variants_are_skipped() {
    let dir =
        Dir(std::env::temp_dir().join(format!("quire-inflight-nofio-{}", std::process::id())));
    let _ = fs::remove_dir_all(&dir.0);
    fs::create_dir_all(dir.0.join("bin")).unwrap();
    let json = dir.0.join("out.json");
    let out = Command::new(QUIRE)
        .args([
            "bench",
            "inflight",
            "--quick",
            "--variants",
            "kernel,device",
            "--json",
        ])
        .arg(&json)
        .env("PATH", dir.0.join("bin"))
        .output()
        .expect("run quire");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for v in ["kernel", "device"] {
        assert!(
            stderr.contains(&format!("{FIO_CASES} / {v}: skipped: fio is not installed")),
            "{stderr}"
        );
    }
    let r: serde_json::Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    let found: BTreeSet<(String, String)> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["case"].as_str().unwrap().to_string(),
                x["variant"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(found, set(&[("fsync-1g", "kernel")]));
    assert_eq!(r["pairs"], serde_json::json!([]));
}
