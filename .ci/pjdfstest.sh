#!/usr/bin/env bash
# pjdfstest (the Rust port, 0.2.2) against `quire mount --allow-other`, run as root with its
# dummy users nobody/nogroup and daemon/daemon. The source lies under a `mktemp -d` parent
# (mode 0700, only root may search it), so any backing call the daemon made as the caller
# through the path above the source would fail here; the mount point lies outside that
# parent, where the test users can reach it (pjdfstest names files by absolute paths: a mount
# point under the 0700 parent fails the same 20 user cases on ext4 and on a bind mount too).
# Fails on any failed case, and when pjdfstest stops partway (exit 101, no summary: its panic
# hook prints nothing, so a panic outside a test case, making or chmod-ing its per-case
# directory in the mount, ends it silently); either way its failures, any panic and its last
# lines are printed. Usage: .ci/pjdfstest.sh
# [TEST_PATTERN...] (all cases without one; QUIRE=path picks the binary,
# target/release/quire by default; PJD_WRAP="strace -f -o FILE" or the like runs pjdfstest
# under that command).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.2.2
quire=${QUIRE:-target/release/quire}
pjd="${CARGO_HOME:-$HOME/.cargo}/bin/pjdfstest"

if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: pjdfstest switches users and mounts, which needs root"
  exit 0
fi
if ! [ -e /dev/fuse ]; then
  echo "skipped: /dev/fuse is missing"
  exit 0
fi
if ! id nobody >/dev/null 2>&1 || ! getent group nogroup >/dev/null || ! id daemon >/dev/null 2>&1; then
  echo "pjdfstest needs the users nobody (group nogroup) and daemon (group daemon)" >&2
  exit 1
fi

if [ -x "$pjd" ] && [ "$("$pjd" --version 2>/dev/null)" = "pjdfstest $VERSION" ]; then
  echo "pjdfstest $VERSION already installed"
else
  t0=$(date +%s)
  cargo install --locked pjdfstest --version "$VERSION"
  echo "installed pjdfstest $VERSION in $(($(date +%s) - t0)) s"
fi

# The binary of this checkout (a no-op when it is current), unless one was named.
[ -n "${QUIRE:-}" ] || cargo build --release -p quire-cli
parent=$(mktemp -d)   # 0700, root's
mnt=$(mktemp -d)
chmod 0755 "$mnt"
mkdir "$parent/src"
conf="$parent/pjdfstest.toml"
# naptime: longer than the backing file system's time-stamp granularity (the kernel's clock
# tick for ext4), so the time-stamp cases see a change.
cat >"$conf" <<'EOF'
[features]
posix_fallocate = {}

[settings]
naptime = 0.01
allow_remount = false

[dummy_auth]
entries = [
  ["nobody", "nogroup"],
  ["daemon", "daemon"],
]
EOF
"$quire" mount --foreground --allow-other "$parent/src" "$mnt" 2>"$parent/daemon.log" &
daemon=$!
cleanup() {
  umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
  wait "$daemon" 2>/dev/null || true
  if [ -s "$parent/daemon.log" ]; then sed 's/^/quire mount: /' "$parent/daemon.log"; fi
  rm -rf "$parent"
  rmdir "$mnt" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 200); do
  grep -q " $mnt fuse" /proc/self/mounts && break
  kill -0 "$daemon" 2>/dev/null || { echo "quire mount exited before mounting" >&2; exit 1; }
  sleep 0.1
done
grep -q " $mnt fuse" /proc/self/mounts || { echo "quire mount did not mount within 20 s" >&2; exit 1; }

mkdir -p target
out=target/pjdfstest.out
status=0
timeout 900 ${PJD_WRAP:-} "$pjd" -c "$conf" -p "$mnt" "$@" >"$out" 2>&1 || status=$?
summary=$(grep '^Summary:' "$out" || true)
echo "${summary:-pjdfstest gave no summary}"
if [ "$status" -ne 0 ] || [ -z "$summary" ] || ! grep -q '^Summary: 0 failed' <<<"$summary"; then
  grep -E 'FAILED|PASSED UNEXPECTEDLY' -A3 "$out" >&2 || true
  grep -n -B2 -A8 'panicked' "$out" >&2 || true
  tail -40 "$out" >&2
  echo "pjdfstest failed (exit $status)" >&2
  exit 1
fi
