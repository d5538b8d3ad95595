//! `quire plot REPORT DIR`: the charts drawn from a small report are well-formed SVG with the
//! series the report calls for — a before and an after bar per thread count, a line per variant
//! where a case ran at several thread counts — and nothing for what the report lacks. No pixel
//! is checked: only the document's structure, its labels and its colours.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const QUIRE: &str = env!("CARGO_BIN_EXE_quire");
/// The colours of `bench/plot.rs`: before, after, an improvement, a change within the noise.
const BEFORE: &str = "#9A9A9A";
const AFTER: &str = "#1F77B4";
const GOOD: &str = "#1A7F37";
const NOISE: &str = "#808080";

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("quire-plot-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// One result of the report, over three runs.
fn result(
    suite: &str,
    case: &str,
    variant: &str,
    threads: usize,
    metric: &str,
    (min, median, max): (f64, f64, f64),
) -> serde_json::Value {
    serde_json::json!({
        "suite": suite, "case": case, "variant": variant, "threads": threads,
        "metric": metric, "value": median, "unit": "1/s", "better": "higher",
        "runs": 3, "min": min, "median": median, "max": max,
    })
}

/// `lockref / get-put`: spinlock (before), lockref (after) and mutex at 1, 2 and 16 threads,
/// `ops_per_s` for all three and `slow_paths_per_op` for lockref only; `pagelock / handoff`:
/// unfiltered-wake-all and exact at 64 threads only.
fn small_report() -> serde_json::Value {
    let mut results = Vec::new();
    for (t, base) in [(1, 100.0), (2, 60.0), (16, 50.0)] {
        results.push(result(
            "lockref",
            "get-put",
            "spinlock",
            t,
            "ops_per_s",
            (base - 1.0, base, base + 1.0),
        ));
        results.push(result(
            "lockref",
            "get-put",
            "lockref",
            t,
            "ops_per_s",
            (2.0 * base - 1.0, 2.0 * base, 2.0 * base + 1.0),
        ));
        results.push(result(
            "lockref",
            "get-put",
            "mutex",
            t,
            "ops_per_s",
            (base / 2.0, base / 2.0, base / 2.0),
        ));
        results.push(result(
            "lockref",
            "get-put",
            "lockref",
            t,
            "slow_paths_per_op",
            (0.0, 0.0, 0.0),
        ));
    }
    // Ranges that overlap: the change is within the noise.
    results.push(result(
        "pagelock",
        "handoff",
        "unfiltered-wake-all",
        64,
        "ops_per_s",
        (90.0, 100.0, 110.0),
    ));
    results.push(result(
        "pagelock",
        "handoff",
        "exact",
        64,
        "ops_per_s",
        (95.0, 105.0, 115.0),
    ));
    serde_json::json!({
        "version": 1,
        "host": {"cpus": 2, "kernel": "6.18.0", "cpu_model": "Test CPU", "date": "2026-11-23T00:00:00Z"},
        "quick": false,
        "runs": 3,
        "suites": ["lockref", "pagelock"],
        "pairs": [
            {"suite": "lockref", "case": "get-put", "before": "spinlock", "after": "lockref"},
            {"suite": "pagelock", "case": "handoff", "before": "unfiltered-wake-all", "after": "exact"},
        ],
        "results": results,
    })
}

fn quire_plot(args: &[&Path]) -> Output {
    Command::new(QUIRE).arg("plot").args(args).output().unwrap()
}

/// The texts of an SVG document, after checking that it parses and that its root is `<svg>`.
struct Svg {
    text: String,
}

impl Svg {
    fn read(path: &Path) -> Svg {
        let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        {
            let doc = roxmltree::Document::parse(&text)
                .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
            let root = doc.root_element();
            assert_eq!(root.tag_name().name(), "svg", "{}", path.display());
            assert_eq!(
                root.tag_name().namespace(),
                Some("http://www.w3.org/2000/svg")
            );
            assert!(root.attribute("width").is_some() && root.attribute("height").is_some());
        }
        Svg { text }
    }

    fn with<R>(&self, f: impl FnOnce(&roxmltree::Document<'_>) -> R) -> R {
        f(&roxmltree::Document::parse(&self.text).unwrap())
    }

    /// The text of every `<text>` element, trimmed.
    fn texts(&self) -> Vec<String> {
        self.with(|d| {
            d.descendants()
                .filter(|n| n.has_tag_name("text"))
                .map(|n| n.text().unwrap_or("").trim().to_string())
                .collect()
        })
    }

    fn has_text(&self, s: &str) -> bool {
        self.texts().iter().any(|t| t == s)
    }

    /// The colour of the `<text>` element that reads `s`.
    fn text_fill(&self, s: &str) -> Option<String> {
        self.with(|d| {
            d.descendants()
                .find(|n| n.has_tag_name("text") && n.text().map(str::trim) == Some(s))
                .and_then(|n| n.attribute("fill").map(str::to_string))
        })
    }

    /// How many filled rectangles have colour `fill`.
    fn rects(&self, fill: &str) -> usize {
        self.with(|d| {
            d.descendants()
                .filter(|n| n.has_tag_name("rect") && n.attribute("fill") == Some(fill))
                .count()
        })
    }

    /// The number of points of each polyline drawn in colour `stroke`.
    fn lines(&self, stroke: &str) -> Vec<usize> {
        self.with(|d| {
            d.descendants()
                .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke") == Some(stroke))
                .map(|n| {
                    n.attribute("points")
                        .unwrap_or("")
                        .split_whitespace()
                        .count()
                })
                .collect()
        })
    }
}

#[test]
fn charts_of_a_small_report() {
    let dir = Dir::new("small");
    let report = dir.0.join("report.json");
    fs::write(
        &report,
        serde_json::to_string_pretty(&small_report()).unwrap(),
    )
    .unwrap();
    let out_dir = dir.0.join("charts");
    let out = quire_plot(&[&report, &out_dir]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut names: Vec<String> = fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // pagelock ran at one thread count only: no scaling chart.
    assert_eq!(
        names,
        [
            "lockref-before-after.svg",
            "lockref-scaling.svg",
            "pagelock-before-after.svg"
        ]
    );

    // lockref before/after: one panel (ops_per_s; slow_paths_per_op has no "before"), three
    // groups, each a before and an after bar; one more of each colour in the legend.
    let bars = Svg::read(&out_dir.join("lockref-before-after.svg"));
    assert!(
        bars.has_text("lockref: before and after"),
        "{:?}",
        bars.texts()
    );
    assert!(bars.has_text("get-put · ops_per_s"));
    assert!(!bars.has_text("get-put · slow_paths_per_op"));
    assert!(bars.has_text("before: spinlock") && bars.has_text("after: lockref"));
    assert!(!bars.texts().iter().any(|t| t.contains("mutex")));
    assert_eq!(bars.rects(BEFORE), 3 + 1);
    assert_eq!(bars.rects(AFTER), 3 + 1);
    for t in ["1", "2", "16"] {
        assert!(
            bars.has_text(t),
            "no label for {t} threads: {:?}",
            bars.texts()
        );
    }
    assert!(bars.has_text("1/s, higher is better"));
    // Twice the throughput at every thread count, ranges apart: +100 %, an improvement.
    assert_eq!(bars.texts().iter().filter(|t| *t == "+100.0%").count(), 3);
    assert_eq!(bars.text_fill("+100.0%").as_deref(), Some(GOOD));
    // Whiskers (min–max) above and below each of the six bars: three strokes each.
    assert!(bars.lines("#000000").len() >= 6 * 3);

    // pagelock: overlapping ranges, so the +5 % is marked as noise.
    let noisy = Svg::read(&out_dir.join("pagelock-before-after.svg"));
    assert!(noisy.has_text("~+5.0%"), "{:?}", noisy.texts());
    assert_eq!(noisy.text_fill("~+5.0%").as_deref(), Some(NOISE));
    assert_eq!(noisy.rects(BEFORE), 2);

    // lockref scaling: a panel per metric; ops_per_s has a 3-point line per variant, before
    // and after in their colours; slow_paths_per_op has lockref's line only.
    let scaling = Svg::read(&out_dir.join("lockref-scaling.svg"));
    assert!(scaling.has_text("get-put · ops_per_s"));
    assert!(scaling.has_text("get-put · slow_paths_per_op"));
    for label in ["spinlock (before)", "lockref (after)", "mutex"] {
        assert!(
            scaling.has_text(label),
            "no series {label}: {:?}",
            scaling.texts()
        );
    }
    // Data lines have 3 points; the legend's sample line has 2.
    let three = |stroke: &str| scaling.lines(stroke).iter().filter(|&&n| n == 3).count();
    assert_eq!(three(BEFORE), 1);
    assert_eq!(three(AFTER), 2, "lockref in both panels");
    let polylines = scaling.with(|d| {
        d.descendants()
            .filter(|n| n.has_tag_name("polyline"))
            .filter(|n| {
                n.attribute("points")
                    .unwrap_or("")
                    .split_whitespace()
                    .count()
                    == 3
            })
            .count()
    });
    assert_eq!(
        polylines, 4,
        "spinlock, lockref and mutex, then lockref again"
    );

    // Only the suites asked for.
    let only = dir.0.join("only");
    let out = Command::new(QUIRE)
        .arg("plot")
        .arg(&report)
        .arg(&only)
        .arg("pagelock")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fs::read_dir(&only).unwrap().count(), 1);
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let dir = Dir::new("bad");
    let report = dir.0.join("report.json");
    fs::write(&report, serde_json::to_string(&small_report()).unwrap()).unwrap();
    let check = |out: Output, needle: &str| {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "succeeded: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains(needle), "{needle:?} not in {err}");
    };
    check(
        Command::new(QUIRE)
            .arg("plot")
            .arg(&report)
            .arg(dir.0.join("x"))
            .arg("nosuch")
            .output()
            .unwrap(),
        "has no suite \"nosuch\"",
    );
    check(
        quire_plot(&[&dir.0.join("missing.json"), &dir.0]),
        "missing.json",
    );
    let garbage = dir.0.join("garbage.json");
    fs::write(&garbage, "{\"version\": 1}").unwrap();
    check(quire_plot(&[&garbage, &dir.0]), "not a quire bench report");
    let evil = dir.0.join("evil.json");
    let mut r = small_report();
    r["suites"] = serde_json::json!(["../escape"]);
    fs::write(&evil, r.to_string()).unwrap();
    check(
        quire_plot(&[&evil, &dir.0.join("y")]),
        "cannot name a chart file",
    );
    assert!(!dir.0.join("escape-before-after.svg").exists());
}
