#!/usr/bin/env bash
# The GPU check of the cuda backend, in one command from the repository root:
#   tests/gpu/run.sh
# 1. prints the GPU (nvidia-smi) and the toolchain;
# 2. configures and builds the engine-only CUDA project (tests/gpu/CMakeLists.txt:
#    the CUDA toolkit, a C compiler and libc, nothing else) in build-gpu-only/;
# 3. runs the GPU tests: kernel parity against the cpu kernels and references
#    (test_gpu_kernels), the backend contract (test_gpu_backend), one full
#    training step against the transformers fixtures (test_gpu_step) and,
#    where the engine library could be built (it needs OpenBLAS and jansson,
#    which the GPU machine may lack; the build says which), training through
#    the engine's API against the cpu backend (test_gpu_engine);
# 4. runs the 7B-shaped streaming benchmark (bench_gpu).
# With $OUT set, the whole log goes to $OUT/run.log and the benchmark's figures
# to $OUT/bench_gpu.json. Exit status: 0 when everything passed, 77 when there
# is no GPU (the build still ran; the tests and the benchmark skipped), 1 when
# anything failed. Takes about two minutes on a 16-core machine with an H200,
# most of it the build.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD_DIR:-build-gpu-only}
JOBS=${JOBS:-$(nproc)}
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/run.log") 2>&1
fi

section() { printf '\n==== %s ====\n' "$*"; }

section "machine"
uname -srm
echo "cores: $(nproc)"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi || true
else
  echo "nvidia-smi: not found"
fi

section "toolchain"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$NVCC" --version | tail -n 2
cmake --version | head -n 1
${CC:-cc} --version | head -n 1

section "build ($BUILD)"
start=$(date +%s)
mkdir -p "$BUILD"
if ! cmake -S tests/gpu -B "$BUILD" -DCMAKE_CUDA_COMPILER="$NVCC" >"$BUILD/configure.log" 2>&1; then
  cat "$BUILD/configure.log"
  echo "FAIL: configure"
  exit 1
fi
if ! cmake --build "$BUILD" -j "$JOBS" >"$BUILD/build.log" 2>&1; then
  cat "$BUILD/build.log"
  echo "FAIL: build"
  exit 1
fi
echo "built in $(( $(date +%s) - start )) s"

status=0
skipped=0
run() { # name, timeout in seconds, command...
  local name=$1 limit=$2
  shift 2
  section "$name"
  local t0 rc
  t0=$(date +%s%N)
  timeout "$limit" "$@"
  rc=$?
  printf -- '-- %s: ' "$name"
  case $rc in
    0) echo "passed" ;;
    77) echo "skipped"; skipped=1 ;;
    124) echo "FAILED (timed out after $limit s)"; status=1 ;;
    *) echo "FAILED (exit $rc)"; status=1 ;;
  esac
  echo "-- $name took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}

run test_gpu_backend 60 "$BUILD/test_gpu_backend"
run test_gpu_kernels 90 "$BUILD/test_gpu_kernels"
run test_gpu_step 60 "$BUILD/test_gpu_step"
run test_gpu_poet 60 "$BUILD/test_gpu_poet"
if [ -x "$BUILD/test_gpu_engine" ]; then
  run test_gpu_engine 120 "$BUILD/test_gpu_engine"
else
  section test_gpu_engine
  grep -h 'test_gpu_engine: not built' "$BUILD/configure.log" ||
    echo "test_gpu_engine: not built in $BUILD"
  echo "-- test_gpu_engine: not run here; the full build runs it (ctest -L gpu)"
fi
run bench_gpu 150 "$BUILD/bench_gpu"

section "summary"
if [ $status -ne 0 ]; then
  echo "FAILED"
  exit 1
fi
if [ $skipped -ne 0 ]; then
  echo "SKIPPED: no usable GPU here (the build passed)"
  exit 77
fi
echo "PASSED"
