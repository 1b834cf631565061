#!/usr/bin/env bash
# Builds keel and keel-bench (release) and runs `keel-bench compare`: etcd 3.4 (Debian
# etcd-server) and keel started with the same flags in fresh data dirs, one server kind at a time,
# in alternating rounds. Writes report.md (ratios, targets), results.json and SVG plots to
# bench-results/ (or --out DIR). Arguments go to compare, e.g. `scripts/bench.sh --rounds 1
# --duration 5 --watchers 10000`; `keel-bench compare --help` lists them.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
scripts/deps.sh clang libclang-dev etcd-server
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/keel-target}"
cargo build --release --workspace
exec "$CARGO_TARGET_DIR/release/keel-bench" compare --keel-bin "$CARGO_TARGET_DIR/release/keel" "$@"
