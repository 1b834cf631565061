#!/usr/bin/env bash
# Installs what the tests need, checks formatting, and runs every test: unit and
# golden-script tests, etcdctl and Rust-client integration, the differential test against etcd
# 3.4, and the durability (SIGKILL) test. Always --workspace: another package selection unifies
# features differently and rebuilds RocksDB's C++ (~20 minutes on 2 cores). Lints run before each
# commit (`cargo clippy --workspace --all-targets -- -D warnings`), not here, for the same reason.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
scripts/deps.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/keel-target}"
cargo fmt --all --check
cargo test --workspace
