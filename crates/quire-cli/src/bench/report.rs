//! The JSON report of `quire bench` (`--json FILE`), what `quire plot` reads back, and how the
//! runs of `--runs N` become one figure each.
//!
//! The format is version 1 of the benchmark contract (docs/RULES.md), extended with fields a version-1
//! reader can ignore: every result keeps `suite`, `case`, `variant`, `threads`, `metric`,
//! `value` and `unit`, and adds `better` (which way the metric improves), `runs` and
//! `min`/`median`/`max` over those runs (`value` is the median). The report adds a fuller
//! `host`, the `runs` and `quick` settings, the suites run, the variants asked for
//! (`--variants`; absent when all ran), and `pairs`: the before/after variants each case
//! compares, as the suites declared them. Reports written before these fields existed still
//! read: a result without them is one run whose figure is its `value`.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::host::Host;
use super::metric::Better;

/// The report format's version.
pub const VERSION: u32 = 1;

/// One figure: a metric of one variant of a case at one thread count, over `runs` runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub suite: String,
    pub case: String,
    pub variant: String,
    pub threads: usize,
    pub metric: String,
    /// The median over the runs (the figure itself where there was one run).
    pub value: f64,
    pub unit: String,
    /// Which way the metric improves; absent for a metric `bench/metric.rs` does not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub better: Option<Better>,
    /// How many runs measured it.
    #[serde(default = "one")]
    pub runs: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

fn one() -> usize {
    1
}

impl Record {
    /// One run's figure, as a suite records it.
    pub fn sample(
        suite: &str,
        case: &str,
        variant: &str,
        threads: usize,
        metric: &str,
        value: f64,
        unit: &str,
    ) -> Record {
        Record {
            suite: suite.to_string(),
            case: case.to_string(),
            variant: variant.to_string(),
            threads,
            metric: metric.to_string(),
            value,
            unit: unit.to_string(),
            better: Better::of(metric),
            runs: 1,
            min: Some(value),
            median: Some(value),
            max: Some(value),
        }
    }

    /// The smallest figure of the runs.
    pub fn lo(&self) -> f64 {
        self.min.unwrap_or(self.value)
    }

    /// The largest figure of the runs.
    pub fn hi(&self) -> f64 {
        self.max.unwrap_or(self.value)
    }

    /// Whether this figure and `other` were each measured several times and their ranges
    /// overlap: a difference between them is then within the noise of the runs.
    pub fn overlaps(&self, other: &Record) -> bool {
        self.runs > 1 && other.runs > 1 && self.lo() <= other.hi() && other.lo() <= self.hi()
    }

    /// Whether `other` is the same figure (suite, case, variant, threads, metric and unit),
    /// perhaps of another run.
    fn same_figure(&self, other: &Record) -> bool {
        self.suite == other.suite
            && self.case == other.case
            && self.variant == other.variant
            && self.threads == other.threads
            && self.metric == other.metric
            && self.unit == other.unit
    }
}

/// The before/after variants a case compares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pair {
    pub suite: String,
    pub case: String,
    pub before: String,
    pub after: String,
}

/// A whole report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub version: u32,
    pub host: Host,
    /// Whether the run was `--quick` (absent in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quick: Option<bool>,
    /// Runs per figure (`--runs`; absent in older reports, which ran once).
    #[serde(default = "one")]
    pub runs: usize,
    /// The suites run, in order (in older reports: those that have results).
    #[serde(default)]
    pub suites: Vec<String>,
    /// The variants the run was limited to (`--variants`); absent when every variant ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variants: Option<Vec<String>>,
    /// The before/after pair of each case that declares one.
    #[serde(default)]
    pub pairs: Vec<Pair>,
    pub results: Vec<Record>,
    /// A trace replay's cells and their summary against exact LRU (`evict --trace`; absent
    /// otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<super::evict::TraceReport>,
}

impl Report {
    /// Reads a report written by `quire bench --json`, of this version or an older one.
    pub fn load(path: &Path) -> anyhow::Result<Report> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Report::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses a report; fills in what older reports lack (the suites from the results, the
    /// direction of each known metric).
    pub fn parse(text: &str) -> anyhow::Result<Report> {
        let mut r: Report = serde_json::from_str(text).context("not a quire bench report")?;
        anyhow::ensure!(
            r.version == VERSION,
            "report version {} (this quire reads version {VERSION})",
            r.version
        );
        if r.suites.is_empty() {
            for x in &r.results {
                if !r.suites.contains(&x.suite) {
                    r.suites.push(x.suite.clone());
                }
            }
        }
        for x in &mut r.results {
            if x.better.is_none() {
                x.better = Better::of(&x.metric);
            }
        }
        Ok(r)
    }

    /// Writes the report as pretty JSON, through a temporary file renamed over `path`, so that
    /// a reader never sees half a report.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        std::fs::write(&tmp, text + "\n")
            .with_context(|| format!("writing {}", Path::new(&tmp).display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
    }

    /// The pair `case` of `suite` compares, if it declared one.
    pub fn pair(&self, suite: &str, case: &str) -> Option<&Pair> {
        self.pairs
            .iter()
            .find(|p| p.suite == suite && p.case == case)
    }

    /// The results of one suite.
    pub fn of_suite<'a>(&'a self, suite: &'a str) -> impl Iterator<Item = &'a Record> + 'a {
        self.results.iter().filter(move |r| r.suite == suite)
    }
}

/// The cases of `records`, in the order they first appear.
pub fn cases<'a>(records: impl IntoIterator<Item = &'a Record>) -> Vec<&'a str> {
    let mut cases: Vec<&str> = Vec::new();
    for r in records {
        if !cases.contains(&r.case.as_str()) {
            cases.push(&r.case);
        }
    }
    cases
}

/// Folds the figures of several runs into one record per figure, in the order the figures were
/// first recorded: `min`, `median` and `max` over the runs that recorded it, `value` the
/// median. (A figure a run skipped, such as a variant that could not run that time, has fewer
/// runs.)
pub fn aggregate(samples: &[Record]) -> Vec<Record> {
    let mut groups: Vec<(Record, Vec<f64>)> = Vec::new();
    for s in samples {
        match groups.iter_mut().find(|(r, _)| r.same_figure(s)) {
            Some((_, values)) => values.push(s.value),
            None => groups.push((s.clone(), vec![s.value])),
        }
    }
    groups
        .into_iter()
        .map(|(mut r, mut values)| {
            values.sort_by(f64::total_cmp);
            let median = median_of_sorted(&values);
            r.runs = values.len();
            r.min = values.first().copied();
            r.max = values.last().copied();
            r.median = Some(median);
            r.value = median;
            r
        })
        .collect()
}

/// The median of sorted, non-empty `v`: the middle value, or the mean of the middle two.
fn median_of_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(variant: &str, metric: &str, value: f64) -> Record {
        Record::sample("pagelock", "handoff", variant, 64, metric, value, "1/s")
    }

    #[test]
    fn runs_fold_into_min_median_max() {
        let samples = vec![
            s("exact", "ops_per_s", 30.0),
            s("exact", "wakeups_per_op", 1.0),
            s("exact", "ops_per_s", 10.0),
            s("exact", "wakeups_per_op", 3.0),
            s("exact", "ops_per_s", 20.0),
            s("exact", "wakeups_per_op", 2.0),
            s("exact", "wakeups_per_op", 4.0),
        ];
        let out = aggregate(&samples);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].metric, "ops_per_s");
        assert_eq!(
            (
                out[0].runs,
                out[0].min,
                out[0].median,
                out[0].max,
                out[0].value
            ),
            (3, Some(10.0), Some(20.0), Some(30.0), 20.0)
        );
        // An even count: the mean of the middle two.
        assert_eq!(out[1].runs, 4);
        assert_eq!(out[1].value, 2.5);
        assert_eq!((out[1].lo(), out[1].hi()), (1.0, 4.0));
        assert!(out[1].overlaps(&out[1]));
        assert!(!out[0].overlaps(&out[1]), "[10, 30] and [1, 4]");
        let single = aggregate(&[s("exact", "ops_per_s", 20.0)]);
        assert!(
            !single[0].overlaps(&out[0]),
            "one run has no range to overlap"
        );
        assert_eq!(out[1].better, Some(Better::Lower));
        assert_eq!(out[0].better, Some(Better::Higher));
    }

    #[test]
    fn one_run_is_its_own_spread() {
        let out = aggregate(&[s("exact", "ops_per_s", 7.0)]);
        assert_eq!(
            (out[0].runs, out[0].min, out[0].median, out[0].max),
            (1, Some(7.0), Some(7.0), Some(7.0))
        );
    }

    #[test]
    fn version_1_reports_without_the_new_fields_read() {
        let old = r#"{"version": 1, "host": {"cpus": 2, "kernel": "6.18"},
            "results": [{"suite": "lockref", "case": "get-put", "variant": "lockref",
                         "threads": 2, "metric": "ops_per_s", "value": 5.0, "unit": "1/s"}]}"#;
        let r = Report::parse(old).unwrap();
        assert_eq!(r.suites, ["lockref"]);
        assert_eq!(r.runs, 1);
        assert!(r.pairs.is_empty());
        let x = &r.results[0];
        assert_eq!((x.runs, x.lo(), x.hi()), (1, 5.0, 5.0));
        assert_eq!(x.better, Some(Better::Higher));
        assert!(Report::parse(&old.replace("\"version\": 1", "\"version\": 7")).is_err());
        assert!(Report::parse("{}").is_err());
    }

    #[test]
    fn round_trip_keeps_every_field() {
        let r = Report {
            version: VERSION,
            host: Host::probe(),
            quick: Some(true),
            runs: 3,
            suites: vec!["pagelock".into()],
            variants: Some(vec!["exact".into()]),
            pairs: vec![Pair {
                suite: "pagelock".into(),
                case: "handoff".into(),
                before: "unfiltered-wake-all".into(),
                after: "exact".into(),
            }],
            results: aggregate(&[s("exact", "ops_per_s", 1.0), s("exact", "ops_per_s", 2.0)]),
            trace: None,
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(Report::parse(&text).unwrap(), r);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let x = &v["results"][0];
        for k in [
            "suite", "case", "variant", "threads", "metric", "value", "unit", "better", "runs",
            "min", "median", "max",
        ] {
            assert!(x.get(k).is_some(), "result without {k}: {x}");
        }
        assert_eq!(x["better"], "higher");
        assert_eq!(v["pairs"][0]["after"], "exact");
        assert_eq!(v["variants"][0], "exact");
        // Without --variants the field is left out.
        let all = Report {
            variants: None,
            ..r.clone()
        };
        assert!(serde_json::to_value(&all)
            .unwrap()
            .get("variants")
            .is_none());
    }
}
