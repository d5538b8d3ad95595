#!/usr/bin/env python3
"""Turns a `quire bench --json` report into the markdown tables of docs/BENCHMARKS.md:
one table per (suite, case), a row per (threads, metric), a column per variant, and the ratio of
the declared "after" variant to the "before" one. Usage: to_markdown.py REPORT.json"""
import json
import sys

# The (before, after) pair each case compares, as the suites declare them.
PAIRS = {
    ("pagelock", "uncontended"): ("always-lookup", "waiters-bit"),
    ("pagelock", "handoff"): ("unfiltered-wake-all", "exact"),
    ("pagelock", "handoff-io"): ("unfiltered-wake-all", "exact"),
    ("lockref", "get-put"): ("spinlock", "lockref"),
    ("xarray", "load"): ("rwlock-btreemap", "xarray"),
    ("xarray", "add-over-shadow"): ("multi-walk", "single-walk"),
    ("xarray", "add-over-shadow-order2"): ("multi-walk", "single-walk"),
    ("read", "hot-random"): ("kernel-pread", "quire-read"),
    ("read", "cold-seq"): ("kernel", "quire"),
    ("write", "seq-fsync"): ("kernel", "quire"),
    ("dcache", "short"): ("spinlock", "lockref"),
    ("evict", "zipf"): ("clock", "lru-workingset"),
    ("evict", "scan"): ("clock", "lru-workingset"),
    ("evict", "loop"): ("clock", "lru-workingset"),
    ("evict", "switch"): ("clock", "lru-workingset"),
    ("evict", "readonce"): ("clock", "lru-workingset"),
    ("evict", "shadow-memory"): ("no-shrinker", "shrinker"),
    ("unmap", "exit"): ("always-test-dirty", "skip-dead-anon"),
    ("unmap", "exit-swapcache"): ("always-test-dirty", "skip-dead-anon"),
    ("unmap", "fork-exit"): ("always-test-dirty", "skip-dead-anon"),
    ("fuse", "hot-randread"): ("passthrough", "quire"),
    ("fuse", "zipf-randread"): ("passthrough", "quire"),
    ("fuse", "seqread"): ("passthrough", "quire"),
    ("fuse", "seqwrite-fsync"): ("passthrough", "quire"),
    ("fuse", "stat-storm-cold"): ("passthrough", "quire"),
    ("fuse", "stat-storm-warm"): ("passthrough", "quire"),
}


def fmt(v):
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.4f}"


def main():
    report = json.load(open(sys.argv[1]))
    results = report["results"]
    host = report["host"]
    print(f"Host: {host['cpus']} CPUs, kernel {host['kernel']}.\n")
    cases = []
    for r in results:
        key = (r["suite"], r["case"])
        if key not in cases:
            cases.append(key)
    for suite, case in cases:
        rs = [r for r in results if (r["suite"], r["case"]) == (suite, case)]
        variants = []
        before, after = PAIRS.get((suite, case), (None, None))
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
        print(f"#### {suite} / {case}\n")
        head = ["threads", "metric"] + [
            v + (" (before)" if v == before else " (after)" if v == after else "") for v in variants
        ]
        if before and after:
            head.append("after / before")
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for threads, metric, unit in rows:
            vals = {}
            for r in rs:
                if (r["threads"], r["metric"]) == (threads, metric):
                    vals[r["variant"]] = r["value"]
            cells = [str(threads), f"{metric} ({unit})"] + [fmt(vals[v]) if v in vals else "-" for v in variants]
            if before and after:
                b, a = vals.get(before), vals.get(after)
                cells.append(f"{a / b:.2f}×" if b and a is not None else "-")
            print("| " + " | ".join(cells) + " |")
        print()


main()
