//! `quire bench`: suites that measure each mechanism against its "before", side by side.
//!
//! A suite is a function that runs its cases and records figures through [`Bench`]. Every figure
//! becomes one JSON result (docs/RULES.md, "The benchmark contract") and one cell of the suite's
//! table, which shows the "before" variant, the "after" variant and the change, as the patch
//! mails did.

mod dcache;
mod dirtybit;
pub(crate) mod evict;
mod fuse;
mod harness;
mod lockref;
mod pagelock;
mod read;
mod unmap;
mod write;
mod xarray;

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// A suite: a name, one line about it, an estimate of its steps (for the progress bar) and the
/// function that runs it.
pub struct Suite {
    pub name: &'static str,
    pub about: &'static str,
    /// How many times the suite will call [`Bench::step`], for the progress bar.
    pub steps: fn(quick: bool) -> u64,
    pub run: fn(&mut Bench) -> anyhow::Result<()>,
}

/// Every suite, in the order `quire bench` runs them when none is named.
pub const SUITES: &[Suite] = &[
    pagelock::SUITE,
    lockref::SUITE,
    xarray::SUITE,
    read::SUITE,
    write::SUITE,
    evict::SUITE,
    dcache::SUITE,
    dirtybit::SUITE,
    unmap::SUITE,
    fuse::SUITE,
];

/// One figure.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub suite: &'static str,
    pub case: String,
    pub variant: String,
    pub threads: usize,
    pub metric: &'static str,
    pub value: f64,
    pub unit: &'static str,
}

/// Which two variants of a case the table compares: `after` against `before`.
#[derive(Clone, Debug)]
struct Comparison {
    suite: &'static str,
    case: String,
    before: String,
    after: String,
}

/// What a suite records into.
pub struct Bench {
    quick: bool,
    records: Vec<Record>,
    comparisons: Vec<Comparison>,
    progress: ProgressBar,
    suite: &'static str,
}

impl Bench {
    /// Whether this is a `--quick` run.
    pub fn quick(&self) -> bool {
        self.quick
    }

    /// Records one figure of the running suite.
    pub fn record(
        &mut self,
        case: &str,
        variant: &str,
        threads: usize,
        metric: &'static str,
        value: f64,
        unit: &'static str,
    ) {
        self.records.push(Record {
            suite: self.suite,
            case: case.to_string(),
            variant: variant.to_string(),
            threads,
            metric,
            value,
            unit,
        });
    }

    /// Declares that the table of `case` compares `after` against `before`.
    pub fn compare(&mut self, case: &str, before: &str, after: &str) {
        self.comparisons.push(Comparison {
            suite: self.suite,
            case: case.to_string(),
            before: before.to_string(),
            after: after.to_string(),
        });
    }

    /// Prints a note for the user (a fallback taken, a variant skipped and why) on standard
    /// error, above the progress bar — also when there is no terminal to draw the bar on.
    pub fn note(&self, msg: impl std::fmt::Display) {
        self.progress.suspend(|| eprintln!("{}: {msg}", self.suite));
    }

    /// Advances the progress bar by one step and shows what runs next.
    pub fn step(&self, what: &str) {
        self.progress.set_message(format!("{}: {what}", self.suite));
        self.progress.inc(1);
    }
}

#[derive(Serialize)]
struct Host {
    cpus: usize,
    kernel: String,
}

#[derive(Serialize)]
struct Report<'a> {
    version: u32,
    host: Host,
    results: &'a [Record],
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Runs the named suites (all of them if `names` is empty), prints their tables and writes the
/// JSON report if asked.
pub fn run(names: &[String], quick: bool, json: Option<&Path>) -> anyhow::Result<()> {
    let mut chosen = Vec::new();
    if names.is_empty() {
        chosen.extend(SUITES.iter());
    } else {
        for n in names {
            match SUITES.iter().find(|s| s.name == n) {
                Some(s) => chosen.push(s),
                None => bail!(
                    "no suite named {n:?}; the suites are: {}",
                    SUITES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
                ),
            }
        }
    }
    let total: u64 = chosen.iter().map(|s| (s.steps)(quick)).sum();
    let progress = ProgressBar::new(total);
    progress.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    let mut bench = Bench {
        quick,
        records: Vec::new(),
        comparisons: Vec::new(),
        progress,
        suite: "",
    };
    let started = Instant::now();
    for s in &chosen {
        bench.suite = s.name;
        (s.run)(&mut bench).with_context(|| format!("suite {}", s.name))?;
    }
    bench.progress.finish_and_clear();
    for s in &chosen {
        print_suite(&bench, s.name);
    }
    eprintln!(
        "ran {} suite(s) in {:.1} s",
        chosen.len(),
        started.elapsed().as_secs_f64()
    );
    if let Some(path) = json {
        let report = Report {
            version: 1,
            host: Host {
                cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
                kernel: kernel_release(),
            },
            results: &bench.records,
        };
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn fmt_value(v: f64) -> String {
    if v == 0.0 {
        "0".to_string()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// Prints one table per case of a suite: a row per (threads, metric), a column per variant, and
/// the change of `after` against `before` where the suite declared them.
fn print_suite(bench: &Bench, suite: &str) {
    let recs: Vec<&Record> = bench.records.iter().filter(|r| r.suite == suite).collect();
    let mut cases: Vec<&str> = Vec::new();
    for r in &recs {
        if !cases.contains(&r.case.as_str()) {
            cases.push(&r.case);
        }
    }
    for case in cases {
        let in_case: Vec<&&Record> = recs.iter().filter(|r| r.case == case).collect();
        let cmp = bench
            .comparisons
            .iter()
            .find(|c| c.suite == suite && c.case == case);
        // Column order: before, after, then the rest in the order they were recorded.
        let mut variants: Vec<&str> = Vec::new();
        if let Some(c) = cmp {
            variants.push(&c.before);
            variants.push(&c.after);
        }
        for r in &in_case {
            if !variants.contains(&r.variant.as_str()) {
                variants.push(&r.variant);
            }
        }
        let mut rows: Vec<(usize, &str, &str)> = Vec::new();
        for r in &in_case {
            if !rows.contains(&(r.threads, r.metric, r.unit)) {
                rows.push((r.threads, r.metric, r.unit));
            }
        }
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        let mut header = vec!["threads".to_string(), "metric".to_string()];
        for (i, v) in variants.iter().enumerate() {
            let tag = match (cmp.is_some(), i) {
                (true, 0) => " (before)",
                (true, 1) => " (after)",
                _ => "",
            };
            header.push(format!("{v}{tag}"));
        }
        if cmp.is_some() {
            header.push("change".to_string());
        }
        table.set_header(header);
        for (threads, metric, unit) in rows {
            let value = |v: &str| {
                in_case
                    .iter()
                    .find(|r| r.variant == v && r.threads == threads && r.metric == metric)
                    .map(|r| r.value)
            };
            let mut row = vec![Cell::new(threads), Cell::new(format!("{metric} ({unit})"))];
            for v in &variants {
                let text = value(v).map_or_else(|| "-".to_string(), fmt_value);
                row.push(Cell::new(text).set_alignment(CellAlignment::Right));
            }
            if let Some(c) = cmp {
                let change = match (value(&c.before), value(&c.after)) {
                    (Some(b), Some(a)) if b != 0.0 => format!("{:+.1}%", (a / b - 1.0) * 100.0),
                    _ => "-".to_string(),
                };
                row.push(Cell::new(change).set_alignment(CellAlignment::Right));
            }
            table.add_row(row);
        }
        println!("{suite} / {case}");
        println!("{table}\n");
    }
}
