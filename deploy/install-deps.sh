#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the demo need,
# then the project's Python environment .venv/ (tests/requirements.txt) that
# the tests run their Python on (tests/CMakeLists.txt: TRAIND_PYTHON).
# Idempotent: packages already present are skipped, apt is only consulted when
# something is missing, pip only when the venv lacks a pinned version. Run as
# root (or through sudo) on Debian 12. Any failure fails the script: a test
# whose tools are missing fails rather than skips, so a half set-up machine
# must not pass for a set-up one.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-openmp-dev libjansson-dev
  libglpk-dev librocksdb-dev libuv1-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libsystemd-dev
  # the tokenizer: pre-tokenizer regexes, Unicode normalization
  libpcre2-dev libutf8proc-dev
  # distributed runs: MPI's library and mpirun (the dist tests launch with it)
  libopenmpi-dev openmpi-bin
  # the two-host dist test joins two network namespaces with a veth pair
  iproute2
  # the API: the standard health.proto, job files, the fuzz target (libFuzzer)
  grpc-proto libyaml-dev clang
  # the TLS test makes its certificate with it
  openssl
  # the interpreter .venv/ is made from; Debian's needs python3-venv for that
  python3 python3-venv
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

# The venv, as the user running this script (not through sudo), so that the
# tests can use it. "Up to date" means every pin of tests/requirements.txt is
# installed at that version: read from the packages' metadata, which takes
# well under a second, where even a no-op pip run takes seconds.
venv=.venv
reqs=tests/requirements.txt
venv_current() {
  "$venv/bin/python3" - "$reqs" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version

stale = []
for line in open(sys.argv[1]):
    pin = line.split("#")[0].strip()
    if not pin:
        continue
    name, want = pin.split("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        have = None
    if have != want:
        stale.append(f"{name} {have or 'missing'} (pinned {want})")
if stale:
    print("install-deps: .venv needs: " + ", ".join(stale))
sys.exit(1 if stale else 0)
PY
}

if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c '' 2>/dev/null && venv_current; then
  exit 0
fi
fail() {
  echo "install-deps: $1; the tests that need Python will fail until this succeeds" >&2
  exit 1
}
# --clear: a venv whose interpreter no longer runs (its base python was
# removed or upgraded) is rebuilt rather than patched.
if ! "$venv/bin/python3" -c '' 2>/dev/null; then
  python3 -m venv --clear "$venv" || fail "cannot create $venv with $(command -v python3)"
fi
# Mostly torch and the CUDA libraries its PyPI wheel depends on: see README.
"$venv/bin/python3" -m pip install -r "$reqs" || fail "pip could not install $reqs into $venv"
venv_current || fail "$venv does not hold $reqs after pip ran"
echo "install-deps: $venv is ready ($("$venv/bin/python3" --version))"
