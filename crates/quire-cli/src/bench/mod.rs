//! `quire bench`: suites that measure each mechanism against its "before", side by side.
//!
//! A suite is a function that runs its cases and records figures through [`Bench`]. Every figure
//! becomes one JSON result (docs/RULES.md, "The benchmark contract"; `report.rs`) and one cell of
//! the suite's table (`table.rs`), which shows the "before" variant, the "after" variant and the
//! change, as the patch mails did, and which way each metric is better (`metric.rs`).
//!
//! A run prints its host (`host.rs`) first, then each suite's tables as soon as the suite is
//! done. With `--runs N` each suite runs N times in a row and every figure is the median of its
//! N values, with the smallest and largest beside it; the JSON report is rewritten after each
//! suite, so that a run that fails later keeps what was measured. `--plot DIR` draws the charts
//! of `plot.rs` at the end.

mod cgroup;
mod dcache;
mod dirtybit;
pub(crate) mod evict;
mod fuse;
mod harness;
mod host;
mod inflight;
mod lockref;
mod metric;
mod object;
mod pagelock;
pub(crate) mod plot;
mod query;
mod read;
pub(crate) mod report;
mod stats;
mod table;
mod unmap;
pub(crate) mod variants;
mod write;
mod xarray;

use std::cell::RefCell;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};

use host::Host;
use report::{aggregate, Pair, Record, Report};
use variants::Selection;

/// A suite: a name, one line about it, its variants, an estimate of its steps (for the progress
/// bar) and the function that runs it.
pub struct Suite {
    pub name: &'static str,
    pub about: &'static str,
    /// Every variant the suite can record, by name (what `--variants` chooses from). The suite
    /// runs a variant only if [`Bench::wants`] it.
    pub variants: &'static [&'static str],
    /// How many times the suite will call [`Bench::step`], for the progress bar.
    pub steps: fn(&Plan<'_>) -> u64,
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
    inflight::SUITE,
    object::SUITE,
    stats::SUITE,
];

/// Suites that run only when named (`quire bench query`): `query` builds DataFusion, which the
/// default run (and CI's `quire bench --quick`) must not.
pub const OPT_IN: &[Suite] = &[query::SUITE];

/// The suite named `name`, of either list.
fn find_suite(name: &str) -> Option<&'static Suite> {
    SUITES.iter().chain(OPT_IN).find(|s| s.name == name)
}

/// What a run asks of every suite, as the suites' step counts need it.
#[derive(Clone, Copy)]
pub struct Plan<'a> {
    /// `--quick`.
    pub quick: bool,
    /// `--threads`: the thread counts of the scaling cases, in place of each suite's own.
    pub threads: Option<&'a [usize]>,
}

impl<'a> Plan<'a> {
    /// The thread counts a scaling case runs at: `--threads` where given, else the suite's
    /// own `default`.
    pub fn threads(&self, default: &'a [usize]) -> &'a [usize] {
        self.threads.unwrap_or(default)
    }
}

/// What a suite records into.
pub struct Bench {
    quick: bool,
    /// The figures of the running suite, one per run of it.
    samples: Vec<Record>,
    pairs: Vec<Pair>,
    progress: ProgressBar,
    suite: &'static str,
    /// Notes already printed: a suite run N times says each thing once.
    noted: RefCell<HashSet<String>>,
    /// `--trace`: the trace `evict` replays instead of its cases.
    trace: Option<evict::TraceArgs>,
    /// `--variants`: the variants to run.
    selection: Selection,
    /// `--threads`: the thread counts of the scaling cases.
    threads: Option<Vec<usize>>,
    /// The cells a trace replay ran (each once, however many `--runs`) and those it left out.
    trace_cells: Vec<evict::CellInfo>,
    trace_skipped: Vec<evict::SkippedCell>,
}

impl Bench {
    /// Whether this is a `--quick` run.
    pub fn quick(&self) -> bool {
        self.quick
    }

    /// The thread counts a scaling case runs at: `--threads` where given, else the suite's
    /// own `default`.
    pub fn threads<'b>(&'b self, default: &'b [usize]) -> &'b [usize] {
        let plan = Plan {
            quick: self.quick,
            threads: self.threads.as_deref(),
        };
        plan.threads(default)
    }

    /// The trace to replay (`--trace`, `evict` only).
    pub fn trace(&self) -> Option<&evict::TraceArgs> {
        self.trace.as_ref()
    }

    /// Declares a cell of a trace replay: its figures are recorded under `cell.case`.
    pub fn trace_cell(&mut self, cell: evict::CellInfo) {
        if !self.trace_cells.iter().any(|c| c.case == cell.case) {
            self.trace_cells.push(cell);
        }
    }

    /// Declares a cell of a trace replay that was left out.
    pub fn trace_skipped(&mut self, cell: evict::SkippedCell) {
        if !self.trace_skipped.contains(&cell) {
            self.trace_skipped.push(cell);
        }
    }

    /// Whether to run the variant `name` of the running suite (`--variants`; all of them
    /// without it). A suite asks before it runs a variant, or before it sets one up.
    pub fn wants(&self, name: &str) -> bool {
        self.selection.wants(name)
    }

    /// Records one figure of the running suite; a figure of a variant not asked for
    /// (`--variants`) is left out.
    pub fn record(
        &mut self,
        case: &str,
        variant: &str,
        threads: usize,
        metric: &'static str,
        value: f64,
        unit: &'static str,
    ) {
        if !self.wants(variant) {
            return;
        }
        self.samples.push(Record::sample(
            self.suite, case, variant, threads, metric, value, unit,
        ));
    }

    /// Records one figure whose metric and unit another program named (the `query` suite's
    /// runner): as [`Bench::record`] otherwise.
    pub fn record_figure(
        &mut self,
        case: &str,
        variant: &str,
        threads: usize,
        metric: &str,
        value: f64,
        unit: &str,
    ) {
        if !self.wants(variant) {
            return;
        }
        self.samples.push(Record::sample(
            self.suite, case, variant, threads, metric, value, unit,
        ));
    }

    /// Declares that the table of `case` compares `after` against `before`. Under `--variants`,
    /// a pair one of whose variants is left out is not declared: there is nothing to compare.
    pub fn compare(&mut self, case: &str, before: &str, after: &str) {
        if !(self.wants(before) && self.wants(after)) {
            return;
        }
        let known = self
            .pairs
            .iter()
            .any(|p| p.suite == self.suite && p.case == case);
        if !known {
            self.pairs.push(Pair {
                suite: self.suite.to_string(),
                case: case.to_string(),
                before: before.to_string(),
                after: after.to_string(),
            });
        }
    }

    /// Prints a note for the user (a fallback taken, a variant skipped and why) on standard
    /// error, above the progress bar — also when there is no terminal to draw the bar on. A
    /// note already printed in this run is not repeated.
    pub fn note(&self, msg: impl std::fmt::Display) {
        let line = format!("{}: {msg}", self.suite);
        if self.noted.borrow_mut().insert(line.clone()) {
            self.progress.suspend(|| eprintln!("{line}"));
        }
    }

    /// Takes `n` steps out of the progress bar's total: steps it counted that will not run
    /// (a trace replay's cells left out, known once the trace is read).
    pub fn unplanned_steps(&self, n: u64) {
        if let Some(len) = self.progress.length() {
            self.progress.set_length(len.saturating_sub(n));
        }
    }

    /// Advances the progress bar by one step and shows what runs next.
    pub fn step(&self, what: &str) {
        self.progress.set_message(format!("{}: {what}", self.suite));
        self.progress.inc(1);
    }
}

/// What `quire bench` was asked to do.
pub struct Options<'a> {
    /// The suites to run (all of them if empty).
    pub suites: &'a [String],
    pub quick: bool,
    /// Runs per figure (at least 1).
    pub runs: usize,
    /// Where to write the JSON report.
    pub json: Option<&'a Path>,
    /// Where to draw the charts.
    pub plot: Option<&'a Path>,
    /// `--trace`: replay this trace in `evict` instead of its cases (no other suite may run).
    pub trace: Option<&'a evict::TraceArgs>,
    /// `--variants`: run only these variants (each must be a variant of a suite that runs).
    pub variants: Option<&'a [String]>,
    /// `--threads`: the thread counts of the scaling cases (lockref, xarray's loads, read's hot
    /// reads, dcache), in place of each suite's own; each at least 1.
    pub threads: Option<&'a [usize]>,
}

/// The variants a suite can record in this run (a trace replay has its own).
pub fn variants_of(s: &Suite, trace: bool) -> &'static [&'static str] {
    if trace && s.name == evict::SUITE.name {
        evict::TRACE_VARIANTS
    } else {
        s.variants
    }
}

/// Runs the chosen suites; prints the host, then each suite's tables as soon as it is done;
/// keeps the JSON report up to date after each suite and draws the charts at the end.
pub fn run(opts: &Options<'_>) -> anyhow::Result<()> {
    if let Some(t) = opts.threads {
        if t.is_empty() || t.contains(&0) {
            bail!("--threads takes thread counts of at least 1, e.g. --threads 1,2,4,8,16");
        }
    }
    let mut chosen = Vec::new();
    if let Some(t) = opts.trace {
        if let Some(other) = opts.suites.iter().find(|s| *s != evict::SUITE.name) {
            bail!(
                "--trace {} is for the evict suite only, not {other:?}: quire bench evict --trace FILE",
                t.path.display()
            );
        }
        chosen.push(
            SUITES
                .iter()
                .find(|s| s.name == evict::SUITE.name)
                .expect("evict"),
        );
    } else if opts.suites.is_empty() {
        chosen.extend(SUITES.iter());
    } else {
        for n in opts.suites {
            match find_suite(n) {
                Some(s) => chosen.push(s),
                None => bail!(
                    "no suite named {n:?}; the suites are: {}",
                    SUITES
                        .iter()
                        .chain(OPT_IN)
                        .map(|s| s.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    }
    let selection = match opts.variants {
        None => Selection::all(),
        Some(names) => {
            let declared: Vec<(&'static str, Vec<&'static str>)> = chosen
                .iter()
                .map(|s| (s.name, variants_of(s, opts.trace.is_some()).to_vec()))
                .collect();
            Selection::new(names, &declared)?
        }
    };
    // A suite none of whose variants was asked for does not run.
    chosen.retain(|s| {
        let keep = selection.any_of(variants_of(s, opts.trace.is_some()));
        if !keep {
            eprintln!(
                "{}: skipped: none of --variants is one of its variants ({})",
                s.name,
                variants_of(s, opts.trace.is_some()).join(", ")
            );
        }
        keep
    });
    let runs = opts.runs.max(1);
    let quick = opts.quick;
    let mut report = Report {
        version: report::VERSION,
        host: Host::probe(),
        quick: Some(quick),
        runs,
        suites: chosen.iter().map(|s| s.name.to_string()).collect(),
        variants: selection.names().map(<[String]>::to_vec),
        pairs: Vec::new(),
        results: Vec::new(),
        trace: None,
    };
    println!("{}", report.host);
    if let Some(v) = &report.variants {
        println!("variants: {} (--variants)", v.join(", "));
    }
    if report.host.profile == "debug" {
        println!("warning: a debug build; its figures say little (build with --release)");
    }
    println!("{}\n", table::legend(runs));

    let plan = Plan {
        quick,
        threads: opts.threads,
    };
    let steps = |s: &Suite| match opts.trace {
        Some(t) => evict::trace_steps(t, &|v| selection.wants(v)),
        None => (s.steps)(&plan),
    };
    let total: u64 = chosen.iter().map(|s| steps(s)).sum::<u64>() * runs as u64;
    let progress = ProgressBar::new(total);
    progress.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    let mut bench = Bench {
        quick,
        samples: Vec::new(),
        pairs: Vec::new(),
        progress,
        suite: "",
        noted: RefCell::new(HashSet::new()),
        trace: opts.trace.cloned(),
        selection,
        threads: opts.threads.map(<[usize]>::to_vec),
        trace_cells: Vec::new(),
        trace_skipped: Vec::new(),
    };
    let started = Instant::now();
    for s in &chosen {
        bench.suite = s.name;
        for i in 0..runs {
            if let Err(e) = (s.run)(&mut bench) {
                bench.progress.finish_and_clear();
                let run = if runs > 1 {
                    format!(" (run {} of {runs})", i + 1)
                } else {
                    String::new()
                };
                let kept = match opts.json {
                    Some(p) if !report.results.is_empty() => {
                        format!("; {} keeps the suites that finished", p.display())
                    }
                    _ => String::new(),
                };
                return Err(e.context(format!("suite {}{run}{kept}", s.name)));
            }
        }
        report.results.extend(aggregate(&bench.samples));
        bench.samples.clear();
        report.pairs.append(&mut bench.pairs);
        // A trace replay of several cells shows a table per trace and a summary in place of
        // a table per case (per cell); one cell shows both.
        let mut tables = String::new();
        if opts.trace.is_none() || bench.trace_cells.len() == 1 {
            tables = table::render_suite(&report, s.name);
        }
        if let Some(args) = opts.trace {
            let t = evict::trace_report(
                &report.results,
                &bench.trace_cells,
                &bench.trace_skipped,
                args,
            );
            tables.push_str(&evict::render_trace(&t));
            report.trace = Some(t);
        }
        bench.progress.suspend(|| print!("{tables}"));
        if let Some(path) = opts.json {
            report.save(path)?;
        }
    }
    bench.progress.finish_and_clear();
    eprintln!(
        "ran {} suite(s) in {:.1} s",
        chosen.len(),
        started.elapsed().as_secs_f64()
    );
    if let Some(dir) = opts.plot {
        let files = plot::draw(&report, dir, &[])?;
        eprintln!("{}", plot::summary(dir, &files));
    }
    Ok(())
}

/// `quire plot REPORT DIR [SUITE...]`: the charts of a stored report.
pub fn plot_file(report: &Path, dir: &Path, suites: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    let r = Report::load(report)?;
    for s in suites {
        if !r.suites.contains(s) {
            bail!(
                "{} has no suite {s:?}; it has: {}",
                report.display(),
                r.suites.join(", ")
            );
        }
    }
    let files = plot::draw(&r, dir, suites)?;
    eprintln!("{}", plot::summary(dir, &files));
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(selection: Selection) -> Bench {
        Bench {
            quick: true,
            samples: Vec::new(),
            pairs: Vec::new(),
            progress: ProgressBar::hidden(),
            suite: "pagelock",
            noted: RefCell::new(HashSet::new()),
            trace: None,
            selection,
            threads: None,
            trace_cells: Vec::new(),
            trace_skipped: Vec::new(),
        }
    }

    #[test]
    fn figures_and_pairs_of_variants_left_out_are_dropped() {
        let declared = vec![("pagelock", vec!["always-lookup", "waiters-bit", "exact"])];
        let sel = Selection::new(&["waiters-bit".to_string()], &declared).unwrap();
        let mut b = bench(sel);
        assert!(b.wants("waiters-bit") && !b.wants("always-lookup"));
        b.compare("uncontended", "always-lookup", "waiters-bit");
        b.record("uncontended", "always-lookup", 1, "ns_per_op", 2.0, "ns");
        b.record("uncontended", "waiters-bit", 1, "ns_per_op", 1.0, "ns");
        assert!(
            b.pairs.is_empty(),
            "a pair with a side left out: {:?}",
            b.pairs
        );
        let kept: Vec<&str> = b.samples.iter().map(|r| r.variant.as_str()).collect();
        assert_eq!(kept, ["waiters-bit"]);

        // Without --variants everything is kept.
        let mut b = bench(Selection::all());
        b.compare("uncontended", "always-lookup", "waiters-bit");
        b.record("uncontended", "always-lookup", 1, "ns_per_op", 2.0, "ns");
        b.record("uncontended", "waiters-bit", 1, "ns_per_op", 1.0, "ns");
        assert_eq!((b.pairs.len(), b.samples.len()), (1, 2));
    }

    #[test]
    fn every_suite_declares_its_variants_once_each() {
        for s in SUITES.iter().chain(OPT_IN) {
            assert!(!s.variants.is_empty(), "{} declares no variant", s.name);
            for (i, v) in s.variants.iter().enumerate() {
                assert!(
                    !v.is_empty() && !v.contains(',') && !s.variants[..i].contains(v),
                    "{}: variant {v:?} empty, with a comma, or twice",
                    s.name
                );
            }
        }
        let evict = SUITES.iter().find(|s| s.name == "evict").unwrap();
        assert_eq!(variants_of(evict, true), evict::TRACE_VARIANTS);
        assert_eq!(variants_of(evict, false), evict.variants);
    }
}
