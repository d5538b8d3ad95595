#!/usr/bin/env python3
"""Prints the table of issue 23's targets against an `evict` report (docs/BENCHMARKS.md,
"Issue 23"): the default policy's hit ratios and the peers' best from the issue, zipf IOPS
against the kernel's, reclaim CPU per evicted page against `lru-workingset`, and the shadow
heap. Usage: issue23_targets.py REPORT.json"""
import json
import sys

r = json.load(open(sys.argv[1]))
val = {}
for x in r["results"]:
    val[(x["case"], x["variant"], x["metric"])] = x["value"]

# (case, metric, target, the best peer's figure in the table, which peer)
hit = [
    ("zipf", "hit_ratio", 0.85, 0.846, "quick_cache"),
    ("loop", "hit_ratio", 0.77, 0.763, "moka"),
    ("scan", "hot_hit_ratio", 0.99, 1.000, "quick_cache, foyer, ARC"),
    ("switch", "hit_ratio", 0.75, 0.750, "exact LRU"),
]
print("| workload | target | `default` | `lru-workingset` (before) | kernel | OPT | best peer (issue) | met |")
print("|---|---|---|---|---|---|---|---|")
for case, metric, target, peer, who in hit:
    d = val[(case, "default", metric)]
    b = val[(case, "lru-workingset", metric)]
    k = val.get((case, "kernel", metric))
    o = val.get((case, "opt", metric))
    f = lambda v: "—" if v is None else f"{v:.3f}"
    met = "yes" if d >= target else f"no ({d - target:+.3f})"
    print(f"| {case} ({metric}) | ≥ {target} | {d:.3f} | {b:.3f} | {f(k)} | {f(o)} | {peer:.3f} ({who}) | {met} |")
print()
zi, ki = val[("zipf", "default", "iops")], val[("zipf", "kernel", "iops")]
print(f"zipf IOPS: default {zi:,.0f}, kernel {ki:,.0f}: {zi / ki:.2f}× (target ≥ 1.1×)")
print()
print("| case | reclaim ns per evicted page, `default` | `lru-workingset` | ratio (target ≤ 1.2) |")
print("|---|---|---|---|")
for case in ["zipf", "scan", "loop", "switch", "readonce"]:
    d = val[(case, "default", "reclaim_ns_per_evicted")]
    b = val[(case, "lru-workingset", "reclaim_ns_per_evicted")]
    print(f"| {case} | {d:.1f} | {b:.1f} | {d / b:.2f} |")
print()
h = val[("shadow-memory", "shrinker", "index_heap_bytes_per_budget_byte")]
print(f"index heap per budget byte while 100 budgets stream (shrinker on, default policy): {h:.4f} (target ≤ 0.02)")
