#!/usr/bin/env bash
# Installs the Debian packages keel's build and tests need, if missing:
#   clang, libclang-dev   RocksDB's bindings (bindgen) and its bundled C++ build
#   protobuf-compiler     protoc, for the etcd-client crate used by the integration tests
#   etcd-server, etcd-client   etcd 3.4 and etcdctl: the reference peer and first real client
set -euo pipefail
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(clang libclang-dev protobuf-compiler etcd-server etcd-client)
missing=()
for p in "${want[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
