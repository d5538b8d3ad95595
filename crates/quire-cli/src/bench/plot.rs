//! SVG charts of a report (`quire bench --plot DIR`, `quire plot REPORT DIR`), drawn with
//! plotters' SVG backend.
//!
//! Per suite, up to two files:
//! - `SUITE-before-after.svg`: a panel per (case, metric) whose case declares a before/after
//!   pair, with a group of two bars (before, after) per thread count, the medians; whiskers
//!   from the smallest to the largest run where there were several; the change above each
//!   group, green where it is an improvement, red where it is a regression, grey with a `~`
//!   where the before and after runs' ranges overlap.
//! - `SUITE-scaling.svg`: a panel per (case, metric) measured at several thread counts, a line
//!   per variant over the thread counts (logarithmic axis), with the same whiskers.
//!
//! Suites whose report has neither (one thread count, no pair) get no file.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::metric::Better;
use super::report::{cases, Pair, Record, Report};

/// The "before" bars and lines.
pub const BEFORE: RGBColor = RGBColor(0x9A, 0x9A, 0x9A);
/// The "after" bars and lines.
pub const AFTER: RGBColor = RGBColor(0x1F, 0x77, 0xB4);
/// A change for the better.
pub const GOOD: RGBColor = RGBColor(0x1A, 0x7F, 0x37);
/// A change for the worse.
pub const BAD: RGBColor = RGBColor(0xC0, 0x39, 0x2B);
/// A change within the runs' spread.
pub const NOISE: RGBColor = RGBColor(0x80, 0x80, 0x80);
/// The other variants' lines, in turn.
const OTHERS: [RGBColor; 6] = [
    RGBColor(0xE6, 0x7E, 0x22),
    RGBColor(0x8E, 0x44, 0xAD),
    RGBColor(0x16, 0xA0, 0x85),
    RGBColor(0xD3, 0x54, 0x00),
    RGBColor(0x2C, 0x3E, 0x50),
    RGBColor(0xB7, 0x95, 0x0B),
];

const PANEL_W: u32 = 460;
const PANEL_H: u32 = 330;
const TITLE_H: u32 = 64;
const FONT: &str = "sans-serif";

/// A before/after panel: one metric of one case, a (threads, before, after) group per thread
/// count where both variants have the figure.
struct BarPanel<'a> {
    case: &'a str,
    metric: &'a str,
    unit: &'a str,
    better: Option<Better>,
    pair: &'a Pair,
    groups: Vec<(usize, &'a Record, &'a Record)>,
}

/// A scaling panel: one metric of one case over its thread counts, a line per variant.
struct ScalingPanel<'a> {
    case: &'a str,
    metric: &'a str,
    unit: &'a str,
    better: Option<Better>,
    pair: Option<&'a Pair>,
    threads: Vec<usize>,
    /// Per variant, its figures in increasing thread count.
    lines: Vec<(&'a str, Vec<&'a Record>)>,
}

/// The (metric, unit, direction) rows of a case, in recorded order.
fn metrics_of<'a>(recs: &[&'a Record]) -> Vec<(&'a str, &'a str, Option<Better>)> {
    let mut out: Vec<(&str, &str, Option<Better>)> = Vec::new();
    for r in recs {
        let m = (r.metric.as_str(), r.unit.as_str(), r.better);
        if !out.iter().any(|o| o.0 == m.0 && o.1 == m.1) {
            out.push(m);
        }
    }
    out
}

fn bar_panels<'a>(report: &'a Report, suite: &'a str) -> Vec<BarPanel<'a>> {
    let recs: Vec<&Record> = report.of_suite(suite).collect();
    let mut panels = Vec::new();
    for case in cases(recs.iter().copied()) {
        let Some(pair) = report.pair(suite, case) else {
            continue;
        };
        let in_case: Vec<&Record> = recs.iter().copied().filter(|r| r.case == case).collect();
        for (metric, unit, better) in metrics_of(&in_case) {
            let find = |v: &str, t: usize| {
                in_case
                    .iter()
                    .copied()
                    .find(|r| r.variant == v && r.threads == t && r.metric == metric)
            };
            let mut threads: Vec<usize> = in_case
                .iter()
                .filter(|r| r.metric == metric)
                .map(|r| r.threads)
                .collect();
            threads.sort_unstable();
            threads.dedup();
            let groups: Vec<_> = threads
                .into_iter()
                .filter_map(|t| Some((t, find(&pair.before, t)?, find(&pair.after, t)?)))
                .collect();
            if !groups.is_empty() {
                panels.push(BarPanel {
                    case,
                    metric,
                    unit,
                    better,
                    pair,
                    groups,
                });
            }
        }
    }
    panels
}

fn scaling_panels<'a>(report: &'a Report, suite: &'a str) -> Vec<ScalingPanel<'a>> {
    let recs: Vec<&Record> = report.of_suite(suite).collect();
    let mut panels = Vec::new();
    for case in cases(recs.iter().copied()) {
        let in_case: Vec<&Record> = recs.iter().copied().filter(|r| r.case == case).collect();
        let pair = report.pair(suite, case);
        for (metric, unit, better) in metrics_of(&in_case) {
            let of_metric: Vec<&Record> = in_case
                .iter()
                .copied()
                .filter(|r| r.metric == metric && r.unit == unit)
                .collect();
            let mut threads: Vec<usize> = of_metric.iter().map(|r| r.threads).collect();
            threads.sort_unstable();
            threads.dedup();
            if threads.len() < 2 {
                continue;
            }
            // Before and after first, then the others in recorded order.
            let mut variants: Vec<&str> = Vec::new();
            if let Some(p) = pair {
                for v in [&p.before, &p.after] {
                    if of_metric.iter().any(|r| &r.variant == v) {
                        variants.push(v);
                    }
                }
            }
            for r in &of_metric {
                if !variants.contains(&r.variant.as_str()) {
                    variants.push(&r.variant);
                }
            }
            let lines = variants
                .into_iter()
                .map(|v| {
                    let mut pts: Vec<&Record> = of_metric
                        .iter()
                        .copied()
                        .filter(|r| r.variant == v)
                        .collect();
                    pts.sort_by_key(|r| r.threads);
                    (v, pts)
                })
                .collect();
            panels.push(ScalingPanel {
                case,
                metric,
                unit,
                better,
                pair,
                threads,
                lines,
            });
        }
    }
    panels
}

/// Suite names become file names: only letters, digits, `-` and `_`.
fn check_name(suite: &str) -> anyhow::Result<()> {
    let ok = !suite.is_empty()
        && suite
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        bail!("suite name {suite:?} cannot name a chart file");
    }
    Ok(())
}

/// Draws the charts of `report`'s suites (those in `only`, or all if it is empty) into `dir`,
/// which is created if needed; returns the files written.
pub fn draw(report: &Report, dir: &Path, only: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut files = Vec::new();
    for suite in &report.suites {
        if !only.is_empty() && !only.contains(suite) {
            continue;
        }
        check_name(suite)?;
        let bars = bar_panels(report, suite);
        if !bars.is_empty() {
            let path = dir.join(format!("{suite}-before-after.svg"));
            let title = format!("{suite}: before and after");
            draw_grid(report, &path, &title, &bars, draw_bars)
                .with_context(|| format!("drawing {}", path.display()))?;
            files.push(path);
        }
        let scaling = scaling_panels(report, suite);
        if !scaling.is_empty() {
            let path = dir.join(format!("{suite}-scaling.svg"));
            let title = format!("{suite}: scaling with threads");
            draw_grid(report, &path, &title, &scaling, draw_scaling)
                .with_context(|| format!("drawing {}", path.display()))?;
            files.push(path);
        }
    }
    Ok(files)
}

/// One line about what [`draw`] wrote.
pub fn summary(dir: &Path, files: &[PathBuf]) -> String {
    if files.is_empty() {
        return format!(
            "no charts for {}: no case had a before/after pair or several thread counts",
            dir.display()
        );
    }
    let names: Vec<String> = files
        .iter()
        .filter_map(|f| f.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    format!(
        "wrote {} chart(s) to {}: {}",
        files.len(),
        dir.display(),
        names.join(", ")
    )
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A linear axis whose ticks are exactly the given points: the centers of the bar groups,
/// labelled with their thread counts. (plotters' own key-point axis over `f64` cannot take a
/// label formatter.)
struct Ticks {
    range: Range<f64>,
    points: Vec<f64>,
}

impl Ranged for Ticks {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let share = (v - self.range.start) / (self.range.end - self.range.start);
        limit.0 + (share * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.points.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

/// Lays `panels` out in a grid under a title naming the run, draws each with `one`, and writes
/// the file.
fn draw_grid<P>(
    report: &Report,
    path: &Path,
    title: &str,
    panels: &[P],
    one: fn(&Area<'_>, &P) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let cols = panels.len().min(3);
    let rows = panels.len().div_ceil(cols);
    let size = (PANEL_W * cols as u32, PANEL_H * rows as u32 + TITLE_H);
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(TITLE_H);
    head.draw(&Text::new(
        title.to_string(),
        (12, 8),
        (FONT, 22).into_font().color(&BLACK),
    ))?;
    head.draw(&Text::new(
        subtitle(report),
        (12, 38),
        (FONT, 13).into_font().color(&BLACK.mix(0.7)),
    ))?;
    for (area, panel) in body.split_evenly((rows, cols)).iter().zip(panels) {
        one(area, panel)?;
    }
    root.present()?;
    Ok(())
}

/// The run's host, date and number of runs, under the title.
fn subtitle(report: &Report) -> String {
    let h = &report.host;
    let mut parts = Vec::new();
    if !h.date.is_empty() {
        parts.push(h.date.clone());
    }
    if !h.cpu_model.is_empty() {
        parts.push(h.cpu_model.clone());
    }
    parts.push(format!("{} CPUs, Linux {}", h.cpus, h.kernel));
    if !h.git_commit.is_empty() {
        let short = &h.git_commit[..h.git_commit.len().min(12)];
        parts.push(format!(
            "commit {short}{}",
            if h.git_dirty { " (modified)" } else { "" }
        ));
    }
    if report.quick == Some(true) {
        parts.push("--quick".to_string());
    }
    parts.push(if report.runs > 1 {
        format!("median of {} runs, whiskers min–max", report.runs)
    } else {
        "one run per figure".to_string()
    });
    parts.join(" · ")
}

/// The y axis' description: the unit and which way is better.
fn y_desc(unit: &str, better: Option<Better>) -> String {
    let way = match better {
        Some(Better::Higher) => ", higher is better",
        Some(Better::Lower) => ", lower is better",
        _ => "",
    };
    format!("{unit}{way}")
}

/// Axis labels: three significant digits, with k/M/G for large figures.
fn short(v: f64) -> String {
    let a = v.abs();
    let (x, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let ax = x.abs();
    if ax != 0.0 && ax < 1e-3 {
        return format!("{x:.1e}");
    }
    let digits = if ax == 0.0 || ax >= 100.0 {
        0
    } else if ax >= 10.0 {
        1
    } else if ax >= 1.0 {
        2
    } else {
        4
    };
    let mut text = format!("{x:.digits$}");
    if text.contains('.') {
        text = text.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    format!("{text}{suffix}")
}

/// The top of the y axis: above the largest figure, with room for the labels and legend.
fn y_top(max: f64) -> f64 {
    if max > 0.0 && max.is_finite() {
        max * 1.4
    } else {
        1.0
    }
}

/// A whisker from `lo` to `hi` at `x`, with caps `cap` wide, where the runs differed.
fn whisker<DB: DrawingBackend, X: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    x: f64,
    cap: (f64, f64),
    r: &Record,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    if r.runs < 2 || r.lo() == r.hi() {
        return Ok(());
    }
    let style = BLACK.stroke_width(1);
    let (lo, hi) = (r.lo(), r.hi());
    chart
        .draw_series([
            PathElement::new(vec![(x, lo), (x, hi)], style),
            PathElement::new(vec![(cap.0, lo), (cap.1, lo)], style),
            PathElement::new(vec![(cap.0, hi), (cap.1, hi)], style),
        ])
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

fn draw_bars(area: &Area<'_>, p: &BarPanel<'_>) -> anyhow::Result<()> {
    let n = p.groups.len();
    let max = p
        .groups
        .iter()
        .map(|(_, b, a)| b.hi().max(a.hi()))
        .fold(0.0, f64::max);
    let centers: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();
    let labels: Vec<usize> = p.groups.iter().map(|g| g.0).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{} · {}", p.case, p.metric), (FONT, 15))
        .margin(10)
        .x_label_area_size(34)
        .y_label_area_size(62)
        .build_cartesian_2d(
            Ticks {
                range: 0.0..n as f64,
                points: centers,
            },
            0f64..y_top(max),
        )?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("threads")
        .y_desc(y_desc(p.unit, p.better))
        .x_label_formatter(&|x| {
            let i = (x - 0.5).round().max(0.0) as usize;
            labels.get(i).map_or_else(String::new, |t| t.to_string())
        })
        .y_label_formatter(&|y| short(*y))
        .draw()?;
    for (which, color, name) in [(0, BEFORE, &p.pair.before), (1, AFTER, &p.pair.after)] {
        let x0 = if which == 0 { 0.12 } else { 0.52 };
        chart
            .draw_series(p.groups.iter().enumerate().map(|(i, (_, b, a))| {
                let r = if which == 0 { b } else { a };
                let x = i as f64 + x0;
                Rectangle::new([(x, 0.0), (x + 0.36, r.value)], color.filled())
            }))?
            .label(format!(
                "{}: {name}",
                if which == 0 { "before" } else { "after" }
            ))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    for (i, (_, b, a)) in p.groups.iter().enumerate() {
        let i = i as f64;
        whisker(&mut chart, i + 0.30, (i + 0.24, i + 0.36), b)?;
        whisker(&mut chart, i + 0.70, (i + 0.64, i + 0.76), a)?;
        if b.value != 0.0 {
            let pct = (a.value / b.value - 1.0) * 100.0;
            // Green for better, red for worse; grey, with a `~`, where the runs' ranges
            // overlap.
            let overlap = b.overlaps(a);
            let color = match p.better.and_then(|d| d.improved(b.value, a.value)) {
                _ if overlap => NOISE,
                Some(true) => GOOD,
                Some(false) => BAD,
                None => BLACK,
            };
            let style = TextStyle::from((FONT, 13).into_font()).color(&color).pos(
                plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Bottom,
                ),
            );
            chart.draw_series([Text::new(
                format!("{}{pct:+.1}%", if overlap { "~" } else { "" }),
                (i + 0.5, b.hi().max(a.hi())),
                style,
            )])?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 12))
        .draw()?;
    Ok(())
}

fn draw_scaling(area: &Area<'_>, p: &ScalingPanel<'_>) -> anyhow::Result<()> {
    let max = p
        .lines
        .iter()
        .flat_map(|(_, pts)| pts.iter().map(|r| r.hi()))
        .fold(0.0, f64::max);
    let lo = *p.threads.first().expect("two thread counts at least") as f64;
    let hi = *p.threads.last().expect("two thread counts at least") as f64;
    let keys: Vec<f64> = p.threads.iter().map(|&t| t as f64).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{} · {}", p.case, p.metric), (FONT, 15))
        .margin(10)
        .x_label_area_size(34)
        .y_label_area_size(62)
        .build_cartesian_2d(
            (lo / 1.3..hi * 1.3).log_scale().with_key_points(keys),
            0f64..y_top(max),
        )?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("threads")
        .y_desc(y_desc(p.unit, p.better))
        .x_label_formatter(&|x| format!("{}", x.round()))
        .y_label_formatter(&|y| short(*y))
        .draw()?;
    let mut others = OTHERS.iter().cycle();
    for (variant, pts) in &p.lines {
        let (color, tag) = match p.pair {
            Some(pair) if pair.before == *variant => (BEFORE, " (before)"),
            Some(pair) if pair.after == *variant => (AFTER, " (after)"),
            _ => (*others.next().expect("cycle"), ""),
        };
        let xy: Vec<(f64, f64)> = pts.iter().map(|r| (r.threads as f64, r.value)).collect();
        chart
            .draw_series(LineSeries::new(xy.clone(), color.stroke_width(2)))?
            .label(format!("{variant}{tag}"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 14, y)], color.stroke_width(2))
            });
        chart.draw_series(
            xy.iter()
                .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
        )?;
        for r in pts {
            let x = r.threads as f64;
            whisker(&mut chart, x, (x / 1.04, x * 1.04), r)?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 12))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_labels() {
        assert_eq!(short(0.0), "0");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(short(0.1234), "0.1234");
        assert_eq!(short(0.0025), "0.0025");
        assert_eq!(short(0.00002), "2.0e-5");
        assert_eq!(short(3.5), "3.5");
        assert_eq!(short(1234.0), "1234");
        assert_eq!(short(12_345.0), "12.3k");
        assert_eq!(short(50_000_000.0), "50M");
        assert_eq!(short(2_500_000.0), "2.5M");
        assert_eq!(short(104_319_225.0), "104M");
        assert_eq!(short(3e9), "3G");
        assert_eq!(short(-1.5), "-1.5");
    }

    #[test]
    fn file_names_are_checked() {
        assert!(check_name("pagelock").is_ok());
        assert!(check_name("hot_hits-2").is_ok());
        assert!(check_name("../etc").is_err());
        assert!(check_name("").is_err());
    }
}
