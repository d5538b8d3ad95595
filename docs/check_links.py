#!/usr/bin/env python3
"""Checks that the docs point at files that exist: every relative markdown link in README.md,
CHANGELOG.md, crates/*/README.md, docs/*.md and docs/journal/*.md, and every repository path
written in them (`docs/…`, `crates/…`, `tools/…`, `.ci/…`). A path under docs/bench/experiments/
(the experiment patches, no longer in the tree) must exist in the commit docs/journal/README.md
names for them. Paths in the journal to source files that have since moved are history: they are
listed as warnings with --all, not errors. Exits 1 if anything is missing.
Usage: python3 docs/check_links.py [--all]"""
import fnmatch
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPERIMENTS = "docs/bench/experiments/"
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w./-])((?:docs|crates|tools|\.ci)/[\w./+-]*[\w/+-])")


def experiments_commit():
    text = open(os.path.join(ROOT, "docs/journal/README.md")).read()
    m = re.search(r"git show ([0-9a-f]{40}):docs/bench/experiments/", text)
    return m.group(1) if m else None


def in_commit(commit, path):
    if not commit:
        return False
    names = subprocess.run(["git", "-C", ROOT, "ls-tree", "-r", "-t", "--name-only", commit, EXPERIMENTS],
                           capture_output=True, text=True).stdout.split("\n")
    pattern = re.sub(r"(?<=[a-z0-9/-])[A-Z]+(?=[-./]|$)", "*", path.rstrip("/"))
    return any(fnmatch.fnmatchcase(n, pattern) for n in names)


def exists(path):
    """Whether the path, or a file it names with a placeholder (`run-N-defer-D.json`) or cut at a
    line's end (`docs/bench/2026-11-23-`), is in the tree."""
    if os.path.exists(os.path.join(ROOT, path)):
        return True
    pattern = re.sub(r"(?<=[a-z0-9/-])[A-Z]+(?=[-./]|$)", "*", path)
    if path.endswith(("-", "_")):
        pattern += "*"
    return pattern != path and bool(glob.glob(pattern, root_dir=ROOT))


def main():
    show_all = "--all" in sys.argv
    files = ["README.md", "CHANGELOG.md"] + sorted(glob.glob("crates/*/README.md", root_dir=ROOT))
    files += sorted(glob.glob("docs/*.md", root_dir=ROOT)) + sorted(glob.glob("docs/bench/*.md", root_dir=ROOT)) + sorted(glob.glob("docs/journal/*.md", root_dir=ROOT))
    commit = experiments_commit()
    errors = warnings = 0
    for f in files:
        full = os.path.join(ROOT, f)
        if not os.path.exists(full):
            continue
        journal = f.startswith("docs/journal/")
        for n, line in enumerate(open(full), 1):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue
                path = os.path.normpath(os.path.join(os.path.dirname(f), target.split("#")[0]))
                if not os.path.exists(os.path.join(ROOT, path)):
                    print(f"{f}:{n}: link to a missing file: {target}")
                    errors += 1
            for path in PATH.findall(line):
                path = path.rstrip(".")
                if "*" in path or "/target/" in path + "/":
                    continue
                if exists(path):
                    continue
                if path.startswith(EXPERIMENTS) and (in_commit(commit, path) or path.endswith("/NAME")):
                    continue
                if journal and not path.startswith("docs/"):
                    warnings += 1
                    if show_all:
                        print(f"{f}:{n}: (history) path no longer in the tree: {path}")
                    continue
                print(f"{f}:{n}: missing path: {path}")
                errors += 1
    print(f"{len(files)} files checked: {errors} missing, {warnings} moved source paths in the journal",
          file=sys.stderr)
    sys.exit(1 if errors else 0)


main()
