//! The terminal tables of `quire bench`: per case of a suite, a row per (threads, metric) with
//! the direction that is better, a column per variant (the declared "before" and "after" first)
//! and the change of "after" against "before", as the patch mails showed them.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};

use super::metric::Better;
use super::report::{cases, Record, Report};

/// The legend printed once above the tables.
pub fn legend(runs: usize) -> String {
    let mut s = String::from(
        "↑ higher is better, ↓ lower is better; change = after against before (better/worse)",
    );
    if runs > 1 {
        s.push_str(&format!(
            "\neach cell is the median of {runs} runs [min–max]; ~ marks a change whose \
             before and after ranges overlap"
        ));
    }
    s
}

/// A figure as the tables print it.
pub fn fmt_value(v: f64) -> String {
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

fn cell_text(r: &Record) -> String {
    let (lo, hi) = (fmt_value(r.lo()), fmt_value(r.hi()));
    if r.runs > 1 && lo != hi {
        format!("{} [{lo}–{hi}]", fmt_value(r.value))
    } else {
        fmt_value(r.value)
    }
}

/// The change of `after` against `before`: the percentage, whether it is better or worse, and
/// `~` in front where the runs' ranges overlap.
fn change_text(before: &Record, after: &Record) -> String {
    if before.value == 0.0 {
        return "-".to_string();
    }
    let pct = format!("{:+.1}%", (after.value / before.value - 1.0) * 100.0);
    let overlap = before.overlaps(after);
    let verdict = match before
        .better
        .and_then(|b| b.improved(before.value, after.value))
    {
        Some(true) => " better",
        Some(false) => " worse",
        None => "",
    };
    format!("{}{pct}{verdict}", if overlap { "~" } else { "" })
}

/// The tables of one suite of `report`, one per case, each under a `suite / case` title.
pub fn render_suite(report: &Report, suite: &str) -> String {
    let recs: Vec<&Record> = report.of_suite(suite).collect();
    let mut out = String::new();
    for case in cases(recs.iter().copied()) {
        let in_case: Vec<&Record> = recs.iter().copied().filter(|r| r.case == case).collect();
        let pair = report.pair(suite, case);
        // Column order: before, after, then the rest in the order they were recorded.
        let mut variants: Vec<&str> = Vec::new();
        if let Some(p) = pair {
            variants.push(&p.before);
            variants.push(&p.after);
        }
        for r in &in_case {
            if !variants.contains(&r.variant.as_str()) {
                variants.push(&r.variant);
            }
        }
        let mut rows: Vec<(usize, &str, &str, Option<Better>)> = Vec::new();
        for r in &in_case {
            let row = (r.threads, r.metric.as_str(), r.unit.as_str(), r.better);
            if !rows.contains(&row) {
                rows.push(row);
            }
        }
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        let mut header = vec!["threads".to_string(), "metric".to_string()];
        for (i, v) in variants.iter().enumerate() {
            let tag = match (pair.is_some(), i) {
                (true, 0) => " (before)",
                (true, 1) => " (after)",
                _ => "",
            };
            header.push(format!("{v}{tag}"));
        }
        if pair.is_some() {
            header.push("change".to_string());
        }
        table.set_header(header);
        for (threads, metric, unit, better) in rows {
            let find = |v: &str| {
                in_case
                    .iter()
                    .copied()
                    .find(|r| r.variant == v && r.threads == threads && r.metric == metric)
            };
            let arrow = better.map_or("", Better::arrow);
            let mut row = vec![
                Cell::new(threads),
                Cell::new(format!("{metric} ({unit}){arrow}")),
            ];
            for v in &variants {
                let text = find(v).map_or_else(|| "-".to_string(), cell_text);
                row.push(Cell::new(text).set_alignment(CellAlignment::Right));
            }
            if let Some(p) = pair {
                let change = match (find(&p.before), find(&p.after)) {
                    (Some(b), Some(a)) => change_text(b, a),
                    _ => "-".to_string(),
                };
                row.push(Cell::new(change).set_alignment(CellAlignment::Right));
            }
            table.add_row(row);
        }
        out.push_str(&format!("{suite} / {case}\n{table}\n\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::host::Host;
    use crate::bench::report::{aggregate, Pair, VERSION};

    fn report(samples: &[Record]) -> Report {
        Report {
            version: VERSION,
            host: Host::default(),
            quick: Some(true),
            runs: 2,
            suites: vec!["pagelock".into()],
            variants: None,
            pairs: vec![Pair {
                suite: "pagelock".into(),
                case: "uncontended".into(),
                before: "always-lookup".into(),
                after: "waiters-bit".into(),
            }],
            results: aggregate(samples),
            trace: None,
        }
    }

    fn s(variant: &str, metric: &str, value: f64) -> Record {
        Record::sample("pagelock", "uncontended", variant, 1, metric, value, "ns")
    }

    #[test]
    fn table_shows_directions_spread_and_verdicts() {
        let r = report(&[
            s("waiters-bit", "ns_per_op", 10.0),
            s("always-lookup", "ns_per_op", 20.0),
            s("waiters-bit", "ns_per_op", 12.0),
            s("always-lookup", "ns_per_op", 22.0),
            s("waiters-bit", "ops_per_s", 100.0),
            s("always-lookup", "ops_per_s", 99.0),
            s("waiters-bit", "ops_per_s", 90.0),
            s("always-lookup", "ops_per_s", 95.0),
        ]);
        let text = render_suite(&r, "pagelock");
        assert!(text.starts_with("pagelock / uncontended\n"), "{text}");
        // Before first, though "after" was recorded first.
        let b = text.find("always-lookup (before)").expect(&text);
        let a = text.find("waiters-bit (after)").expect(&text);
        assert!(b < a, "{text}");
        assert!(text.contains("ns_per_op (ns) ↓"), "{text}");
        assert!(text.contains("ops_per_s (ns) ↑"), "{text}");
        // Medians 21 and 11, with their ranges; 11 / 21 - 1 = -47.6 %, lower is better.
        assert!(text.contains("21.00 [20.00–22.00]"), "{text}");
        assert!(text.contains("11.00 [10.00–12.00]"), "{text}");
        assert!(text.contains("-47.6% better"), "{text}");
        // 95 after 97: down, so worse, but the ranges [90, 100] and [95, 99] overlap.
        assert!(text.contains("~-2.1% worse"), "{text}");
    }

    #[test]
    fn without_a_pair_there_is_no_change_column() {
        let mut r = report(&[s("waiters-bit", "ns_per_op", 10.0)]);
        r.pairs.clear();
        let text = render_suite(&r, "pagelock");
        assert!(!text.contains("change"), "{text}");
        assert!(!text.contains("(before)"), "{text}");
        assert!(render_suite(&r, "lockref").is_empty());
    }
}
