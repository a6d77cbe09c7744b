#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the demo need.
# Idempotent: packages already present are skipped, apt is only consulted when
# something is missing. Run as root (or through sudo) on Debian 12.
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config git python3
  libopenblas-openmp-dev libjansson-dev
  libglpk-dev librocksdb-dev libuv1-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libsystemd-dev
  # the API: the standard health.proto, job files, the fuzz target (libFuzzer)
  grpc-proto libyaml-dev clang
  # the interop tests: Debian's grpcio client, and what PyPI's grpclib needs
  python3-grpcio python3-protobuf python3-h2 python3-multidict python3-pip
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The interop test's independent client: grpclib, a pure-Python gRPC over h2
# (PyPI only). Its dependencies come from Debian above, so pip adds this one
# package and nothing else. Without it the interop test reports "skipped".
if ! python3 -c 'import grpclib' 2>/dev/null; then
  pip_flags="--quiet --no-deps"
  python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages && pip_flags="$pip_flags --break-system-packages"
  $sudo python3 -m pip install $pip_flags grpclib || echo "install-deps: could not install grpclib from PyPI; the interop test will be skipped" >&2
fi
