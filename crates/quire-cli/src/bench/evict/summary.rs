//! The tables of a trace replay (`trace.rs`) and its summary against exact LRU.
//!
//! A cell is one trace at one cache size. Per trace, a table: a row per cell
//! (`trace capacity (share)`), a column per variant, each its hit ratio. Then per size (as
//! `--sizes` gave it), a summary over the traces that have a cell of that size: for each
//! variant,
//! - the mean miss-ratio reduction against exact LRU (`exact-lru`), `(mr_lru - mr_v) /
//!   mr_lru` averaged over those cells (a miss ratio is `1 - hit ratio`); a cell where exact
//!   LRU misses nothing is left out (there is nothing to reduce), of the mean and of the
//!   counts below;
//! - its rank at that size by that mean (1 the best; equal means share a rank);
//! - how many cells it is worse than exact LRU in by more than 1% and by more than 5%:
//!   `(mr_v - mr_lru) / mr_lru` above 0.01, above 0.05.
//!
//! Both go into the JSON report as its `trace` object (per cell every variant's hit ratio
//! and, where measured, its replay speed in accesses per second; the cells left out; the
//! summary), beside the per-figure results.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use serde::{Deserialize, Serialize};

use super::peers::BASELINE;
use crate::bench::report::Record;

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
}

/// A cell left out: under the smallest cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkippedCell {
    pub trace: String,
    pub file: String,
    pub size: String,
    pub capacity: u64,
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
}

/// The figures of `cells` from the aggregated `results` of the suite, and their summary.
pub fn collect(results: &[Record], cells: &[CellInfo], skipped: &[SkippedCell]) -> TraceReport {
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
    let summary = summarize(&cells, BASELINE);
    TraceReport {
        baseline: BASELINE.to_string(),
        cells,
        skipped: skipped.to_vec(),
        summary,
    }
}

/// The summary of `cells` against `baseline`, per size in the order the sizes first appear.
pub fn summarize(cells: &[CellFigures], baseline: &str) -> Vec<SizeSummary> {
    if !cells.iter().any(|c| c.hit_ratio(baseline).is_some()) {
        return Vec::new();
    }
    let mut sizes: Vec<&str> = Vec::new();
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
                        let (Some(l), Some(v)) = (c.hit_ratio(baseline), c.hit_ratio(variant))
                        else {
                            continue;
                        };
                        let (mr_l, mr_v) = (1.0 - l, 1.0 - v);
                        if mr_l <= 0.0 {
                            continue;
                        }
                        let worse = (mr_v - mr_l) / mr_l;
                        reductions.push(-worse);
                        w1 += usize::from(worse > 0.01);
                        w5 += usize::from(worse > 0.05);
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
    if !r.skipped.is_empty() {
        let left: Vec<String> = r
            .skipped
            .iter()
            .map(|s| format!("{} {} ({} entries)", s.trace, s.size, s.capacity))
            .collect();
        out.push_str(&format!(
            "cells left out (under {} entries): {}\n\n",
            super::trace::MIN_ENTRIES,
            left.join(", ")
        ));
    }
    if r.summary.is_empty() && !r.cells.is_empty() {
        out.push_str(&format!(
            "no summary: {} (exact LRU, its baseline) did not run\n\n",
            r.baseline
        ));
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
                        .map_or_else(|| "-".into(), |m| format!("{:+.1}%", m * 100.0)),
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
        let s = summarize(&cells, "exact-lru");
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
        assert!(summarize(&cells, "nope").is_empty());
        // Rendered: a table per trace, one summary per size.
        let r = TraceReport {
            baseline: "exact-lru".into(),
            cells,
            skipped: vec![],
            summary: s,
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
    }
}
