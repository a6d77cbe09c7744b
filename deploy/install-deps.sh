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
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
