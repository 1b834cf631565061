#!/usr/bin/env bash
# Builds and starts the whole system on its embedded default: keel-apiserver with a keel member
# in its own process, its controllers and scheduler, and three simulated nodes (node-1..node-3),
# data in ./keel.data, HTTPS on https://127.0.0.1:6443. It prints how to point kubectl at it. Any keel-apiserver flag may be passed through (they come after the defaults, so
# they win), e.g. --secure-port=7443 or --etcd-servers=http://127.0.0.1:2379.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
"$here/scripts/deps.sh" clang libclang-dev
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/keel-target}"
cargo build --release --manifest-path "$here/Cargo.toml" -p keel-store -p keel-apiserver --bin keel --bin keel-apiserver
exec "$CARGO_TARGET_DIR/release/keel-apiserver" --data-dir ./keel.data --bind-address 127.0.0.1 --simulated-nodes=3 "$@"
