# shellcheck shell=bash
# What the benchmarks share, sourced by tests/bench/*.sh once they are in the
# repository's root: the checks that stop a run, naming what is missing,
# before it measures anything.

# bench_need_exe FILE: FILE must have been built.
bench_need_exe() {
  [ -x "$1" ] && return
  echo "${0##*/}: $1 is missing: build first (cmake --build ${BUILD_DIR:-build})" >&2
  exit 1
}

# bench_need_py MODULES WHO: $PY must import MODULES ("torch, transformers"),
# which WHO ("the peer", "the data generator") needs.
bench_need_py() {
  $PY -c "import $1" >/dev/null 2>&1 && return
  echo "${0##*/}: $2 needs $1 on $PY (run deploy/install-deps.sh)" >&2
  exit 1
}
