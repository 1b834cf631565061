#!/usr/bin/env bash
# Builds and starts keel, the etcd-compatible store alone. With no arguments: a single member
# serving clients on http://127.0.0.1:2379 with its data in ./default.keel. Any etcd flags may be
# passed through.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
"$here/scripts/deps.sh" clang libclang-dev
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/keel-target}"
cargo build --release --manifest-path "$here/Cargo.toml" -p keel-store -p keel-apiserver --bin keel --bin keel-apiserver
exec "$CARGO_TARGET_DIR/release/keel" "$@"
