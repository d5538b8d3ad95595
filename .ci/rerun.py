#!/usr/bin/env python3
"""Runs again test and example executables that `cargo test --workspace` built, as `cargo test`
and `cargo run` run them: a test in its package's directory, its targets in cargo's order (the
library's unit tests, then the integration tests by name), stopping at the first that fails.

Why not `cargo test -p PACKAGE`: cargo resolves the dependencies' features for the packages a
command selects, so a narrower command than `--workspace` builds a differently featured tokio,
rustls and the crates above them again (three minutes of CI's time, for the same code).

Usage: .ci/rerun.py LIST PACKAGE TARGET...
  LIST     the output of `cargo test --workspace --no-run --message-format=json` (the same
           settings as the build it names, so that it built nothing)
  TARGET   `lib` (the library's unit tests), `tests` (every integration test),
           `test:NAME`, or `example:NAME`
The environment passes through (the settings under which the tests run again).
"""

import json
import os
import subprocess
import sys


def package_name(package_id):
    # "path+file:///dir/quire-cli#0.1.0" or "path+file:///dir/s3-server#quire-s3-tools@0.1.0"
    url, _, fragment = package_id.partition("#")
    if "@" in fragment:
        return fragment.split("@")[0]
    return url.rstrip("/").rsplit("/", 1)[-1]


def built(list_path, package):
    """(kind, name) -> (executable, package directory) for `package`'s runnable artifacts."""
    found = {}
    with open(list_path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            m = json.loads(line)
            if m.get("reason") != "compiler-artifact" or not m.get("executable"):
                continue
            if package_name(m["package_id"]) != package:
                continue
            kinds = m["target"]["kind"]
            if m["profile"]["test"] and "lib" in kinds:
                kind = "lib"
            elif m["profile"]["test"] and "test" in kinds:
                kind = "test"
            elif "example" in kinds:
                kind = "example"
            else:
                continue
            found[(kind, m["target"]["name"])] = (
                m["executable"],
                os.path.dirname(m["manifest_path"]),
            )
    return found


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    list_path, package, rest = argv[0], argv[1], argv[2:]
    found = built(list_path, package)
    runs = []
    for t in rest:
        if t == "lib":
            wanted = [k for k in found if k[0] == "lib"]
        elif t == "tests":
            wanted = sorted(k for k in found if k[0] == "test")
        elif t.startswith(("test:", "example:")):
            kind, name = t.split(":", 1)
            wanted = [(kind, name)]
        else:
            sys.exit(f"unknown target {t!r}\n{__doc__}")
        if not wanted:
            sys.exit(f"{list_path} lists no {t} of {package}")
        for k in wanted:
            if k not in found:
                sys.exit(f"{list_path} lists no {k[0]} {k[1]} of {package}")
            if k not in runs:
                runs.append(k)
    for kind, name in runs:
        exe, pkg_dir = found[(kind, name)]
        print(f"     Running {kind} {name} ({os.path.relpath(exe)})", flush=True)
        code = subprocess.call([exe], cwd=None if kind == "example" else pkg_dir)
        if code != 0:
            sys.exit(f"{kind} {name} of {package} failed (exit {code})")


if __name__ == "__main__":
    main(sys.argv[1:])
