#!/usr/bin/env python3
"""The side-by-side tables of BENCHMARKS "Issue 23, 2026-11-26 (later)", from the JSONs here:
before-N/after-N (alternated pairs, `--variants multigen-loop,multigen-loop-4k --runs 1`) and
trace-BUDGET-{before,after} (cloudPhysicsIO, `--no-readahead --runs 3`)."""
import json
import os

D = os.path.dirname(os.path.abspath(__file__))


def medians(f):
    d = json.load(open(f))
    return {(r["case"], r["variant"], r["metric"]): r["median"] for r in d["results"]}


rows = [("zipf", "hit_ratio"), ("scan", "hot_hit_ratio"), ("loop", "hit_ratio"), ("switch", "hit_ratio")]
out = ["| case | variant | 5ce5429, pair 1 / 2 / 3 | 5073614, pair 1 / 2 / 3 |", "|---|---|---|---|"]
for v in ["multigen-loop", "multigen-loop-4k"]:
    for c, m in rows:
        b = [medians(f"{D}/before-{i}.json")[(c, v, m)] for i in (1, 2, 3)]
        a = [medians(f"{D}/after-{i}.json")[(c, v, m)] for i in (1, 2, 3)]
        out.append(f"| {c} {m} | {v} | {' / '.join(f'{x:.4f}' for x in b)} | {' / '.join(f'{x:.4f}' for x in a)} |")
out += ["", "| budget | variant | 5ce5429 | 5073614 |", "|---|---|---|---|"]
for budget in ["16M", "48M"]:
    runs = [json.load(open(f"{D}/trace-{budget}-{w}.json")) for w in ("before", "after")]
    for v in ["default", "lru-workingset", "lru", "multigen", "clock", "opt"]:
        cells = []
        for d in runs:
            r = [r for r in d["results"] if r["variant"] == v and r["metric"] == "hit_ratio"][0]
            cells.append(f"{r['median']:.4f} [{r['min']:.4f}–{r['max']:.4f}]")
        out.append(f"| {budget} | {v} | {cells[0]} | {cells[1]} |")
print("\n".join(out))
