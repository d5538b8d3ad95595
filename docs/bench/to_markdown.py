#!/usr/bin/env python3
"""Turns a `quire bench --json` report into the markdown tables of docs/BENCHMARKS.md:
one table per (suite, case), a row per (threads, metric), a column per variant, and the ratio of
the case's "after" variant to its "before" one. The pairs come from the report's `pairs` list
(as the suites declared them); a report without one (written before the format had it) gets
its tables without before/after columns, and a warning. Where the report has them, each metric
shows which way is better (↑ higher, ↓ lower), and figures of several runs show
median [min–max]. Usage: to_markdown.py REPORT.json"""
import json
import sys


def fmt(v):
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.4f}"


def cell(r):
    lo, hi = r.get("min", r["value"]), r.get("max", r["value"])
    if r.get("runs", 1) > 1 and fmt(lo) != fmt(hi):
        return f"{fmt(r['value'])} [{fmt(lo)}–{fmt(hi)}]"
    return fmt(r["value"])


ARROW = {"higher": " ↑", "lower": " ↓"}


def overlaps(b, a):
    """Whether both figures had several runs and their ranges overlap."""
    if b.get("runs", 1) < 2 or a.get("runs", 1) < 2:
        return False
    lo = lambda r: r.get("min", r["value"])
    hi = lambda r: r.get("max", r["value"])
    return lo(b) <= hi(a) and lo(a) <= hi(b)


def verdict(better, b, a):
    if b == a or better not in ("higher", "lower"):
        return ""
    return " better" if (a > b) == (better == "higher") else " worse"


def host_line(report):
    host = report["host"]
    line = f"Host: {host['cpus']} CPUs, kernel {host['kernel']}"
    if host.get("cpu_model"):
        line = f"Host: {host['cpu_model']}, {host['cpus']} CPUs"
        if host.get("memory_bytes"):
            line += f", {host['memory_bytes'] / 2**30:.1f} GiB"
        line += f", kernel {host['kernel']}"
    extra = []
    if host.get("rustc"):
        extra.append(host["rustc"])
    if host.get("profile"):
        extra.append(f"{host['profile']} build")
    if host.get("git_commit"):
        extra.append(f"commit {host['git_commit'][:12]}" + (" (modified)" if host.get("git_dirty") else ""))
    if host.get("date"):
        extra.append(host["date"])
    if report.get("runs", 1) > 1:
        extra.append(f"median of {report['runs']} runs per figure, [min–max]")
    if extra:
        line += "; " + ", ".join(extra)
    return line + "."


def tables(report, suites=None, level=4):
    """The markdown tables of a report, one per (suite, case), for every suite or those named;
    the case headings at `level`."""
    results = [r for r in report["results"] if suites is None or r["suite"] in suites]
    pairs = {(p["suite"], p["case"]): (p["before"], p["after"]) for p in report.get("pairs", [])}
    out = []
    cases = []
    for r in results:
        key = (r["suite"], r["case"])
        if key not in cases:
            cases.append(key)
    for suite, case in cases:
        rs = [r for r in results if (r["suite"], r["case"]) == (suite, case)]
        variants = []
        before, after = pairs.get((suite, case), (None, None))
        for v in [before, after]:
            if v and any(r["variant"] == v for r in rs):
                variants.append(v)
        for r in rs:
            if r["variant"] not in variants:
                variants.append(r["variant"])
        rows = []
        for r in rs:
            k = (r["threads"], r["metric"], r["unit"])
            if k not in rows:
                rows.append(k)
        out.append(f"{'#' * level} {suite} / {case}\n")
        head = ["threads", "metric"] + [
            v + (" (before)" if v == before else " (after)" if v == after else "") for v in variants
        ]
        if before and after:
            head.append("after / before")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for threads, metric, unit in rows:
            found = {}
            for r in rs:
                if (r["threads"], r["metric"]) == (threads, metric):
                    found[r["variant"]] = r
            better = next((r.get("better") for r in found.values()), None)
            cells = [str(threads), f"{metric} ({unit}){ARROW.get(better, '')}"]
            cells += [cell(found[v]) if v in found else "-" for v in variants]
            if before and after:
                b, a = found.get(before), found.get(after)
                if b and a and b["value"]:
                    mark = "~" if overlaps(b, a) else ""
                    ratio = a["value"] / b["value"]
                    cells.append(f"{mark}{ratio:.2f}×{verdict(better, b['value'], a['value'])}")
                else:
                    cells.append("-")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out) + "\n" if out else ""


def legend(report):
    """The line that explains the arrows (and `~`), where the report has them."""
    if not any("better" in r for r in report["results"]):
        return ""
    line = "↑ higher is better, ↓ lower is better"
    if report.get("runs", 1) > 1:
        line += "; ~ marks a ratio whose before and after ranges overlap"
    return line + "."


def main():
    report = json.load(open(sys.argv[1]))
    if "pairs" not in report:
        print(f"{sys.argv[1]}: no `pairs` in this report: tables without before/after columns",
              file=sys.stderr)
    print(host_line(report) + "\n")
    if legend(report):
        print(legend(report) + "\n")
    print(tables(report), end="")


if __name__ == "__main__":
    main()
