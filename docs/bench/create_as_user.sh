#!/usr/bin/env bash
# The cost of acting as the caller: files created per second through `quire mount`, by root
# (the daemon creates as itself) and by another user (the daemon switches the serving thread's
# fsuid, fsgid and groups for each create, reading the caller's groups from /proc), beside the
# same on the backing directory itself. Needs root, FUSE and setpriv (util-linux).
# Usage: docs/bench/create_as_user.sh [FILES] [ROUNDS]   (from the repository root)
set -euo pipefail
n=${1:-5000}
rounds=${2:-3}
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root (switching users)"; exit 0; }
cargo build --release -q -p quire-cli
bin=target/release/quire
base=$(mktemp -d /var/tmp/quire-create-XXXXXX)
chmod 0755 "$base"
trap 'umount "$base/mnt" 2>/dev/null || true; rm -rf "$base"' EXIT
mkdir -p "$base/src" "$base/mnt" "$base/plain"
chmod 0777 "$base/src" "$base/plain"
"$bin" mount "$base/src" "$base/mnt" --capacity 64M --allow-other
# Creates $n empty files in $1 (open O_CREAT|O_EXCL, close); prints files per second.
creates() {
  /usr/bin/python3 - "$1" "$n" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
for i in range(n):
    os.close(os.open(os.path.join(d, f"f{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
print(f"{n / (time.perf_counter() - t):.0f}")
PY
}
as_user() { setpriv --reuid=1001 --regid=1001 --groups=1001,1002 "$@"; }
# Root and the user alternate which goes first (ext4's inode allocation slows as a directory's
# block group fills with recently deleted inodes: the order alone moves a figure).
printf "%-6s %-14s %-14s %-14s %-14s\n" round mount-root mount-user plain-root plain-user
for r in $(seq "$rounds"); do
  declare -A got=()
  if [ $((r % 2)) -eq 1 ]; then order="root user"; else order="user root"; fi
  for where in mnt plain; do
    for who in $order; do
      d="$base/$where/$who-$r"
      mkdir "$d"; chmod 0777 "$d"
      if [ "$who" = root ]; then
        got[$where-$who]=$(creates "$d")
      else
        got[$where-$who]=$(as_user bash -c "$(declare -f creates); n=$n; creates $d")
      fi
    done
  done
  printf "%-6s %-14s %-14s %-14s %-14s\n" "$r" "${got[mnt-root]}" "${got[mnt-user]}" \
    "${got[plain-root]}" "${got[plain-user]}"
  unset got
done
