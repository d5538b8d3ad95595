#!/usr/bin/env bash
# Build quire's S3 test server and proxy (release) and print their paths.
# Usage: tools/s3-server/build.sh   (from anywhere)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cargo build --release --locked --manifest-path "$here/Cargo.toml" >&2
echo "$here/target/release/quire-s3-server"
echo "$here/target/release/quire-s3-proxy"
