//! The tables of a trace replay (`trace.rs`) and its summary against exact LRU.
//!
//! A cell is one trace at one cache size. Per trace, a table: a row per cell
//! (`trace capacity (share)`), a column per variant, each its hit ratio. Then per size, in the
//! order of `--sizes`, a summary over the traces that have a cell of that size: for each
//! variant,
//! - the mean miss-ratio reduction against exact LRU (`exact-lru`), `(mr_lru - mr_v) /
//!   mr_lru` averaged over those cells (a miss ratio is `1 - hit ratio`); a cell where exact
//!   LRU misses nothing is left out (there is nothing to reduce), of the mean and of the
//!   counts below;
//! - its rank at that size by that mean (1 the best; equal means share a rank);
//! - how many cells it is worse than exact LRU in by more than 1% and by more than 5%:
//!   `(mr_v - mr_lru) / mr_lru` above 0.01, above 0.05.
//!
//! Each of these is computed from the cell's miss counts (its hit ratio times its accesses,
//! rounded back to the integer it was computed from), not from the ratios: exact LRU's own
//! reduction is exactly 0, and a variant that misses exactly 1% (5%) more than exact LRU is not
//! counted worse by more than 1% (5%) whichever way the ratios round.
//!
//! The explanation above the tables says what `opt` is a ceiling of (Belady's replacement with
//! every missed page inserted: a cache that keeps every page it reads; the peers that may
//! refuse an insert, `peers.rs`, can go above it), that quire's caches hold a little less than
//! their budget (the free frames its watermarks keep: under 2% below 4 MiB, where the reader
//! reclaims for itself, a few tenths of a percent above, where background reclaim keeps a
//! headroom) while OPT and the libraries hold exactly their capacity, and, where
//! the replay read ahead, that quire's hit ratios then count the pages it read ahead (used or
//! not) while the others simulate the accesses alone: that caveat is recorded in the report
//! too (`caveats`).
//!
//! Both go into the JSON report as its `trace` object (per cell every variant's hit ratio
//! and, where measured, its replay speed in accesses per second; the cells left out; the
//! summary), beside the per-figure results.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use serde::{Deserialize, Serialize};

use super::peers::{BASELINE, PEERS};
use super::trace::{TraceArgs, MIN_ENTRIES};
use crate::bench::report::Record;

/// The caveat of a replay that read ahead.
pub const READAHEAD_CAVEAT: &str = "readahead is on: quire's hit ratios count every page it \
read from the store, pages read ahead and never used included (and pages read ahead before \
their access as hits), while opt and the cache libraries simulate the accesses alone; the \
summary compares what each keeps only with --no-readahead";

/// What a replay says of one cell it ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellInfo {
    /// The case its figures are recorded under.
    pub case: String,
    /// The trace's short name.
    pub trace: String,
    pub file: String,
    /// The size as `--sizes` gave it (`budget` without `--sizes`).
    pub size: String,
    /// Entries (pages) of the caches.
    pub capacity: u64,
    /// `capacity` over the trace's distinct pages.
    pub share: f64,
    pub accesses: u64,
    pub distinct: u64,
    /// The entries the size asked for, where more than `distinct`: the cell was clamped to
    /// `distinct` entries (a larger cache holds the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clamped_from: Option<u64>,
}

/// A size a trace has no cell of: under the smallest cell, or of the same entries as an
/// earlier size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkippedCell {
    pub trace: String,
    pub file: String,
    pub size: String,
    pub capacity: u64,
    /// The earlier size of the same entries, whose cell stands for this one; absent: the cell
    /// is under the smallest one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_as: Option<String>,
}

/// One variant's figures in one cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VariantFigures {
    pub variant: String,
    pub hit_ratio: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accesses_per_s: Option<f64>,
}

/// A cell with its figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellFigures {
    #[serde(flatten)]
    pub info: CellInfo,
    pub variants: Vec<VariantFigures>,
}

impl CellFigures {
    fn hit_ratio(&self, variant: &str) -> Option<f64> {
        self.variants
            .iter()
            .find(|v| v.variant == variant)
            .map(|v| v.hit_ratio)
    }
}

/// One variant at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SummaryRow {
    pub variant: String,
    /// Cells averaged: those of the size where the variant and exact LRU both ran and exact
    /// LRU missed something.
    pub cells: usize,
    /// The mean of `(mr_lru - mr_v) / mr_lru`; `None` where no cell counts.
    pub mean_miss_ratio_reduction: Option<f64>,
    /// 1 for the largest mean; `None` without a mean.
    pub rank: Option<usize>,
    /// Cells where `(mr_v - mr_lru) / mr_lru > 0.01`.
    pub worse_than_lru_1pct: usize,
    /// Cells where `(mr_v - mr_lru) / mr_lru > 0.05`.
    pub worse_than_lru_5pct: usize,
}

/// The summary of one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SizeSummary {
    pub size: String,
    /// Best first.
    pub rows: Vec<SummaryRow>,
}

/// The `trace` object of the JSON report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceReport {
    /// The variant the summary measures against.
    pub baseline: String,
    pub cells: Vec<CellFigures>,
    #[serde(default)]
    pub skipped: Vec<SkippedCell>,
    /// Empty where the baseline did not run.
    pub summary: Vec<SizeSummary>,
    /// What the figures do not compare ([`READAHEAD_CAVEAT`] where the replay read ahead).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caveats: Vec<String>,
}

/// The figures of `cells` from the aggregated `results` of the suite, and their summary, the
/// sizes in the order of `args`' `--sizes`.
pub fn collect(
    results: &[Record],
    cells: &[CellInfo],
    skipped: &[SkippedCell],
    args: &TraceArgs,
) -> TraceReport {
    let cells: Vec<CellFigures> = cells
        .iter()
        .map(|info| {
            let mut variants: Vec<VariantFigures> = Vec::new();
            for r in results.iter().filter(|r| r.case == info.case) {
                if r.metric == "hit_ratio" {
                    variants.push(VariantFigures {
                        variant: r.variant.clone(),
                        hit_ratio: r.value,
                        accesses_per_s: None,
                    });
                }
            }
            for r in results.iter().filter(|r| r.case == info.case) {
                if r.metric == "accesses_per_s" {
                    if let Some(v) = variants.iter_mut().find(|v| v.variant == r.variant) {
                        v.accesses_per_s = Some(r.value);
                    }
                }
            }
            CellFigures {
                info: info.clone(),
                variants,
            }
        })
        .collect();
    let sizes: Vec<String> = args
        .sizes
        .as_ref()
        .map_or_else(Vec::new, |s| s.0.iter().map(|(l, _)| l.clone()).collect());
    let summary = summarize(&cells, BASELINE, &sizes);
    TraceReport {
        baseline: BASELINE.to_string(),
        cells,
        skipped: skipped.to_vec(),
        summary,
        caveats: caveats(args.readahead),
    }
}

/// The caveats of a replay that read ahead or not.
pub fn caveats(readahead: bool) -> Vec<String> {
    if readahead {
        vec![READAHEAD_CAVEAT.to_string()]
    } else {
        Vec::new()
    }
}

/// A variant's misses in a cell: its hit ratio times the cell's accesses, rounded back to the
/// integer count it was computed from (pages read from the store for quire, which readahead
/// may take above the accesses; misses for OPT and the libraries).
fn misses(c: &CellFigures, variant: &str) -> Option<i128> {
    let h = c.hit_ratio(variant)?;
    Some(((1.0 - h) * c.info.accesses as f64).round() as i128)
}

/// The summary of `cells` against `baseline`, per size: the sizes of `order` (`--sizes`) in
/// its order, then any other in the order first seen.
pub fn summarize(cells: &[CellFigures], baseline: &str, order: &[String]) -> Vec<SizeSummary> {
    if !cells.iter().any(|c| c.hit_ratio(baseline).is_some()) {
        return Vec::new();
    }
    let mut sizes: Vec<&str> = order
        .iter()
        .map(String::as_str)
        .filter(|o| cells.iter().any(|c| c.info.size == *o))
        .collect();
    for c in cells {
        if !sizes.contains(&c.info.size.as_str()) {
            sizes.push(&c.info.size);
        }
    }
    sizes
        .into_iter()
        .map(|size| {
            let at: Vec<&CellFigures> = cells.iter().filter(|c| c.info.size == size).collect();
            let mut rows: Vec<SummaryRow> = variants(cells)
                .into_iter()
                .map(|variant| {
                    let mut reductions = Vec::new();
                    let (mut w1, mut w5) = (0, 0);
                    for c in &at {
                        let (Some(l), Some(v)) = (misses(c, baseline), misses(c, variant)) else {
                            continue;
                        };
                        if l <= 0 {
                            continue;
                        }
                        // (mr_lru - mr_v) / mr_lru, the accesses cancelled out.
                        reductions.push((l - v) as f64 / l as f64);
                        // (mr_v - mr_lru) / mr_lru above 1/100, above 1/20, in integers.
                        w1 += usize::from(100 * (v - l) > l);
                        w5 += usize::from(20 * (v - l) > l);
                    }
                    let mean = (!reductions.is_empty())
                        .then(|| reductions.iter().sum::<f64>() / reductions.len() as f64);
                    SummaryRow {
                        variant: variant.to_string(),
                        cells: reductions.len(),
                        mean_miss_ratio_reduction: mean,
                        rank: None,
                        worse_than_lru_1pct: w1,
                        worse_than_lru_5pct: w5,
                    }
                })
                .collect();
            // Best first; those without a mean last, in their order.
            rows.sort_by(
                |a, b| match (a.mean_miss_ratio_reduction, b.mean_miss_ratio_reduction) {
                    (Some(x), Some(y)) => y.total_cmp(&x),
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (None, None) => std::cmp::Ordering::Equal,
                },
            );
            // Competition ranking: equal means share the better rank.
            for i in 0..rows.len() {
                let Some(m) = rows[i].mean_miss_ratio_reduction else {
                    break;
                };
                rows[i].rank = Some(match i {
                    0 => 1,
                    _ if rows[i - 1].mean_miss_ratio_reduction == Some(m) => {
                        rows[i - 1].rank.expect("ranked")
                    }
                    _ => i + 1,
                });
            }
            SizeSummary {
                size: size.to_string(),
                rows,
            }
        })
        .collect()
}

/// Every variant of `cells`, in the order first seen.
fn variants(cells: &[CellFigures]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for c in cells {
        for v in &c.variants {
            if !out.contains(&v.variant.as_str()) {
                out.push(&v.variant);
            }
        }
    }
    out
}

/// A cell's row label: `trace capacity (share)`, the share as `--sizes` gave it where it was
/// a percentage.
fn row_label(c: &CellInfo) -> String {
    let share = if c.size.ends_with('%') {
        c.size.clone()
    } else {
        format!("{:.2}%", c.share * 100.0)
    };
    format!("{} {} ({share})", c.trace, c.capacity)
}

/// A mean reduction as the summary prints it: signed, one decimal; `0.0%` where it rounds to
/// nothing, of either sign.
fn percent(m: f64) -> String {
    let p = m * 100.0;
    if p.abs() < 0.05 {
        "0.0%".to_string()
    } else {
        format!("{p:+.1}%")
    }
}

/// What `opt` is the ceiling of, said above the tables.
fn opt_explained() -> String {
    let refusing: Vec<&str> = PEERS
        .iter()
        .filter(|p| p.may_refuse())
        .map(|p| p.name())
        .collect();
    format!(
        "hit ratios (every access counted, cold misses included). opt is Belady's replacement \
         with every missed page inserted: the ceiling of a cache that keeps every page it reads, \
         as a page cache must; {} may refuse a new entry (their admission) and so can go above it\n",
        refusing.join(" and ")
    )
}

/// Said above the summaries: what the entries of quire and of the others hold.
const SUMMARY_EXPLAINED: &str = "summary per size against exact-lru: mean miss-ratio reduction \
(mr_lru - mr_v) / mr_lru over the traces, rank by it, and cells where a variant misses more \
than exact-lru by over 1% and over 5% (from the integer miss counts). quire keeps a reserve of \
free frames (its watermarks: under 2% of a budget below 4 MiB, where the reader reclaims for \
itself; at least 16 frames above, where background reclaim runs ahead), so it holds slightly \
fewer entries than its budget; opt and the libraries hold exactly their capacity\n";

/// The tables of `r`: one per trace, then one summary per size.
pub fn render(r: &TraceReport) -> String {
    let mut out = String::new();
    let all = variants(&r.cells);
    let mut traces: Vec<&str> = Vec::new();
    for c in &r.cells {
        if !traces.contains(&c.info.trace.as_str()) {
            traces.push(&c.info.trace);
        }
    }
    if !traces.is_empty() {
        out.push_str(&opt_explained());
        out.push('\n');
    }
    for t in traces {
        let cells: Vec<&CellFigures> = r.cells.iter().filter(|c| c.info.trace == t).collect();
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        let mut header = vec!["cell (hit ratio ↑)".to_string()];
        header.extend(all.iter().map(|v| v.to_string()));
        table.set_header(header);
        for c in cells {
            let mut row = vec![Cell::new(row_label(&c.info))];
            for v in &all {
                let text = c
                    .hit_ratio(v)
                    .map_or_else(|| "-".into(), |h| format!("{h:.4}"));
                row.push(Cell::new(text).set_alignment(CellAlignment::Right));
            }
            table.add_row(row);
        }
        out.push_str(&format!("evict / trace {t}\n{table}\n\n"));
    }
    let clamped: Vec<String> = r
        .cells
        .iter()
        .filter_map(|c| {
            let asked = c.info.clamped_from?;
            Some(format!(
                "{} {} ({asked} entries, held at {})",
                c.info.trace, c.info.size, c.info.capacity
            ))
        })
        .collect();
    if !clamped.is_empty() {
        out.push_str(&format!(
            "cells clamped to their trace's distinct pages (a larger cache holds the same): {}\n\n",
            clamped.join(", ")
        ));
    }
    let small: Vec<String> = r
        .skipped
        .iter()
        .filter(|s| s.same_as.is_none())
        .map(|s| format!("{} {} ({} entries)", s.trace, s.size, s.capacity))
        .collect();
    if !small.is_empty() {
        out.push_str(&format!(
            "cells left out (under {MIN_ENTRIES} entries): {}\n\n",
            small.join(", ")
        ));
    }
    let same: Vec<String> = r
        .skipped
        .iter()
        .filter_map(|s| {
            let first = s.same_as.as_ref()?;
            Some(format!(
                "{} {} ({} entries, as {first})",
                s.trace, s.size, s.capacity
            ))
        })
        .collect();
    if !same.is_empty() {
        out.push_str(&format!(
            "cells left out (the entries of an earlier size, replayed once under it): {}\n\n",
            same.join(", ")
        ));
    }
    if r.summary.is_empty() && !r.cells.is_empty() {
        out.push_str(&format!(
            "no summary: {} (exact LRU, its baseline) did not run\n\n",
            r.baseline
        ));
    }
    if !r.summary.is_empty() {
        for c in &r.caveats {
            out.push_str(&format!("caveat: {c}\n"));
        }
        out.push_str(SUMMARY_EXPLAINED);
        out.push('\n');
    }
    for s in &r.summary {
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        table.set_header(vec![
            "rank",
            "variant",
            "miss-ratio reduction vs LRU (mean) ↑",
            "cells",
            "worse than LRU by >1%",
            "by >5%",
        ]);
        for row in &s.rows {
            let right = |t: String| Cell::new(t).set_alignment(CellAlignment::Right);
            table.add_row(vec![
                right(row.rank.map_or_else(|| "-".into(), |k| k.to_string())),
                Cell::new(&row.variant),
                right(
                    row.mean_miss_ratio_reduction
                        .map_or_else(|| "-".into(), percent),
                ),
                right(row.cells.to_string()),
                right(row.worse_than_lru_1pct.to_string()),
                right(row.worse_than_lru_5pct.to_string()),
            ]);
        }
        out.push_str(&format!(
            "evict / summary at {} (against {}; a cell where it misses nothing is left out)\n\
             {table}\n\n",
            s.size, r.baseline
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(trace: &str, size: &str, figures: &[(&str, f64)]) -> CellFigures {
        CellFigures {
            info: CellInfo {
                case: format!("trace {trace} {size}"),
                trace: trace.into(),
                file: format!("{trace}.txt"),
                size: size.into(),
                capacity: 300,
                share: 0.1,
                accesses: 1000,
                distinct: 3000,
                clamped_from: None,
            },
            variants: figures
                .iter()
                .map(|&(v, h)| VariantFigures {
                    variant: v.into(),
                    hit_ratio: h,
                    accesses_per_s: None,
                })
                .collect(),
        }
    }

    fn row<'a>(s: &'a SizeSummary, v: &str) -> &'a SummaryRow {
        s.rows.iter().find(|r| r.variant == v).expect(v)
    }

    #[test]
    fn summary_arithmetic_on_a_hand_made_table() {
        // Size 10%, three traces:
        //   a: LRU misses 0.5; x 0.4 (reduction +20%), y 0.52 (+4% worse: -4%), z 0.4 (+20%)
        //   b: LRU misses 0.2; x 0.1 (+50%), y 0.22 (10% worse: -10%), z 0.19 (+5%)
        //   c: LRU misses nothing: left out of every figure, though y misses there.
        // Means: x (20 + 50) / 2 = +35%, z (20 + 5) / 2 = +12.5%, LRU 0, y (-4 - 10) / 2 = -7%.
        // Worse by > 1%: y twice; by > 5%: y once (b). Ranks x 1, z 2, LRU 3, y 4.
        // Size 1%: one trace; x and z tie at +50%: both rank 1, LRU 3.
        let cells = vec![
            cell(
                "a",
                "10%",
                &[("exact-lru", 0.5), ("x", 0.6), ("y", 0.48), ("z", 0.6)],
            ),
            cell(
                "b",
                "10%",
                &[("exact-lru", 0.8), ("x", 0.9), ("y", 0.78), ("z", 0.81)],
            ),
            cell(
                "c",
                "10%",
                &[("exact-lru", 1.0), ("x", 1.0), ("y", 0.5), ("z", 1.0)],
            ),
            cell(
                "a",
                "1%",
                &[("exact-lru", 0.0), ("x", 0.5), ("y", 0.0), ("z", 0.5)],
            ),
        ];
        let s = summarize(&cells, "exact-lru", &["10%".into(), "1%".into()]);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].size, "10%");
        let order: Vec<&str> = s[0].rows.iter().map(|r| r.variant.as_str()).collect();
        assert_eq!(order, ["x", "z", "exact-lru", "y"]);
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
        assert!(close(row(&s[0], "x").mean_miss_ratio_reduction, 0.35));
        assert!(close(row(&s[0], "z").mean_miss_ratio_reduction, 0.125));
        assert!(close(row(&s[0], "y").mean_miss_ratio_reduction, -0.07));
        assert!(close(
            row(&s[0], "exact-lru").mean_miss_ratio_reduction,
            0.0
        ));
        let ranks: Vec<Option<usize>> = s[0].rows.iter().map(|r| r.rank).collect();
        assert_eq!(ranks, [Some(1), Some(2), Some(3), Some(4)]);
        let y = row(&s[0], "y");
        assert_eq!(
            (y.cells, y.worse_than_lru_1pct, y.worse_than_lru_5pct),
            (2, 2, 1)
        );
        for v in ["x", "z", "exact-lru"] {
            let r = row(&s[0], v);
            assert_eq!(
                (r.cells, r.worse_than_lru_1pct, r.worse_than_lru_5pct),
                (2, 0, 0),
                "{v}"
            );
        }
        // The tie at 1%.
        assert_eq!(s[1].size, "1%");
        assert_eq!(row(&s[1], "x").rank, Some(1));
        assert_eq!(row(&s[1], "z").rank, Some(1));
        assert_eq!(row(&s[1], "exact-lru").rank, Some(3));
        assert_eq!(row(&s[1], "y").rank, Some(3));
        // Without the baseline there is no summary.
        assert!(summarize(&cells, "nope", &[]).is_empty());
        // Rendered: a table per trace, one summary per size.
        let r = TraceReport {
            baseline: "exact-lru".into(),
            cells,
            skipped: vec![],
            summary: s,
            caveats: vec![],
        };
        let text = render(&r);
        for t in [
            "evict / trace a\n",
            "evict / trace b\n",
            "evict / trace c\n",
        ] {
            assert!(text.contains(t), "{text}");
        }
        assert!(text.contains("a 300 (10%)"), "{text}");
        assert!(text.contains("evict / summary at 10%"), "{text}");
        assert!(text.contains("+35.0%"), "{text}");
        assert!(text.contains("-7.0%"), "{text}");
        assert!(text.contains("opt is Belady's replacement with every missed page inserted"));
        assert!(text.contains("w-tinylfu and moka may refuse"), "{text}");
        assert!(
            text.contains("quire keeps a reserve of free frames"),
            "{text}"
        );
        assert!(!text.contains("caveat"), "{text}");
    }

    #[test]
    fn sizes_are_summarised_in_the_order_of_sizes() {
        // Trace a has no cell at 0.1% (left out as too small), b has: the first cell seen is
        // a's 1%, but the summaries follow --sizes.
        let cells = vec![
            cell("a", "1%", &[("exact-lru", 0.5), ("x", 0.6)]),
            cell("b", "1%", &[("exact-lru", 0.5), ("x", 0.6)]),
            cell("b", "0.1%", &[("exact-lru", 0.2), ("x", 0.3)]),
            cell("b", "40%", &[("exact-lru", 0.8), ("x", 0.9)]),
        ];
        let order = ["0.1%", "1%", "40%"].map(String::from);
        let s = summarize(&cells, "exact-lru", &order);
        let sizes: Vec<&str> = s.iter().map(|s| s.size.as_str()).collect();
        assert_eq!(sizes, ["0.1%", "1%", "40%"]);
        // Sizes not in the order (a run without --sizes: `budget`) follow, as first seen.
        let s = summarize(&cells, "exact-lru", &["40%".into()]);
        let sizes: Vec<&str> = s.iter().map(|s| s.size.as_str()).collect();
        assert_eq!(sizes, ["40%", "1%", "0.1%"]);
    }

    #[test]
    fn exact_lru_is_zero_and_boundaries_do_not_flip() {
        // 1000 accesses; exact LRU misses 500 (a), 200 (b), 700 (c). x misses exactly 1% more
        // in each (505, 202, 707), y exactly 5% more (525, 210, 735): neither is worse by
        // *more* than its threshold, though the ratios' floating-point quotients land just
        // above 0.01 and 0.05. z misses one more than x and y in each: above.
        let cells = vec![
            cell(
                "a",
                "1%",
                &[("exact-lru", 0.5), ("x", 0.495), ("y", 0.475), ("z", 0.474)],
            ),
            cell(
                "b",
                "1%",
                &[("exact-lru", 0.8), ("x", 0.798), ("y", 0.79), ("z", 0.789)],
            ),
            cell(
                "c",
                "1%",
                &[("exact-lru", 0.3), ("x", 0.293), ("y", 0.265), ("z", 0.264)],
            ),
        ];
        let s = summarize(&cells, "exact-lru", &[]);
        let counts = |v: &str| {
            let r = row(&s[0], v);
            (r.worse_than_lru_1pct, r.worse_than_lru_5pct)
        };
        assert_eq!(counts("x"), (0, 0));
        assert_eq!(counts("y"), (3, 0));
        assert_eq!(counts("z"), (3, 3));
        let lru = row(&s[0], "exact-lru").mean_miss_ratio_reduction.unwrap();
        assert_eq!(lru, 0.0);
        assert!(lru.is_sign_positive(), "{lru}");
        assert!((row(&s[0], "x").mean_miss_ratio_reduction.unwrap() + 0.01).abs() < 1e-12);
        let r = TraceReport {
            baseline: "exact-lru".into(),
            cells,
            skipped: vec![],
            summary: s,
            caveats: caveats(true),
        };
        let text = render(&r);
        assert!(!text.contains("-0.0%"), "{text}");
        let summary = &text[text.find("evict / summary at").expect("a summary")..];
        let lru_line = summary
            .lines()
            .find(|l| l.contains(" exact-lru "))
            .expect("exact-lru's row");
        assert!(lru_line.contains(" 0.0% "), "{lru_line}");
        // With readahead, the caveat above the summary.
        let caveat = text.find("caveat: readahead is on").expect("the caveat");
        assert!(caveat < text.find("evict / summary at").unwrap(), "{text}");
        assert!(percent(-0.0001).starts_with("0.0"));
        assert_eq!(percent(0.1234), "+12.3%");
    }

    #[test]
    fn clamped_and_repeated_sizes_are_listed() {
        let mut c = cell("a", "1G", &[("exact-lru", 0.5)]);
        c.info.clamped_from = Some(262_144);
        c.info.capacity = 3000;
        let r = TraceReport {
            baseline: "exact-lru".into(),
            cells: vec![c],
            skipped: vec![
                SkippedCell {
                    trace: "a".into(),
                    file: "a.txt".into(),
                    size: "100%".into(),
                    capacity: 3000,
                    same_as: Some("1G".into()),
                },
                SkippedCell {
                    trace: "a".into(),
                    file: "a.txt".into(),
                    size: "0.1%".into(),
                    capacity: 3,
                    same_as: None,
                },
            ],
            summary: vec![],
            caveats: vec![],
        };
        let text = render(&r);
        for t in [
            "a 1G (262144 entries, held at 3000)",
            "cells left out (under 256 entries): a 0.1% (3 entries)",
            "replayed once under it): a 100% (3000 entries, as 1G)",
        ] {
            assert!(text.contains(t), "{t:?} not in {text}");
        }
    }
}
