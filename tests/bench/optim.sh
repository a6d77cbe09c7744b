#!/usr/bin/env bash
# Parameters updated per second by the fused 8-bit AdamW pass (bf16 gradients
# in, bf16 working copy out: what the CUDA backend's host does per step)
# against its peers, in one run, with the same thread count:
#   - torch.optim.AdamW on the CPU, single-tensor (foreach=False) and foreach
#     paths; the ratio is against the faster of the two. The fused CPU kernel
#     (fused=True) is timed and printed too.
#   - DeepSpeed's DeepSpeedCPUAdam (what MegaTrain and LazyTrain run), from
#     PyPI into a venv under $BUILD_DIR when it is not importable already.
#   - A bandwidth bound: the bytes the pass must read and write per parameter
#     (printed) against a STREAM triad over arrays far larger than the caches.
#     For scale, also the rate of an fp32 Adam-shaped memory loop.
# The peers keep fp32 state (8 bytes per parameter) and read fp32 gradients,
# as they ship; ours keeps 2.03 bytes. PARAMS parameters (default 2^27, over
# TENSORS tensors), medians of REPS steps after one warm-up step.
# Last line: "optim: <ratio>x vs torch, <pct>% of bandwidth bound".
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-$(nproc)}
PARAMS=${PARAMS:-134217728}
TENSORS=${TENSORS:-8}
REPS=${REPS:-7}
export OMP_NUM_THREADS=$THREADS
# The project's venv (deploy/install-deps.sh): the torch the tests pin;
# PYTHON picks another interpreter.
PY=${PYTHON:-.venv/bin/python3}
RATE="$BUILD_DIR/tests/bench_optim_rate"
bench_need_exe "$RATE"
bench_need_py "torch" "the peer"
field() { awk -v k="$1" '$1 == k {print $2}'; }
peer() { # python impl
  "$1" tests/bench/optim_torch.py --impl "$2" --params "$PARAMS" --tensors "$TENSORS" --threads "$THREADS" \
    --reps "$REPS" 2>/dev/null | field "$2_params_per_s"
}

echo "machine: $THREADS threads, $(uptime | sed 's/.*load/load/')"
ours_out=$("$RATE" adamw8 "$PARAMS" "$TENSORS" "$REPS")
ours=$(echo "$ours_out" | field adamw8_params_per_s)
bpp=$(echo "$ours_out" | field adamw8_bytes_per_param)
echo "traind adamw8 ($(echo "$ours_out" | field adamw8_isa)): $ours params/s on $PARAMS params;" \
  "state $(echo "$ours_out" | field adamw8_state_bytes_per_param) bytes/param as allocated"
echo "bytes the pass must touch per param: read $(echo "$ours_out" | field adamw8_bytes_read)" \
  "(g bf16 2, m 1, v 1, w 4, absmaxes), write $(echo "$ours_out" | field adamw8_bytes_written)" \
  "(m 1, v 1, w 4, working copy bf16 2, absmaxes): $bpp"
triad=$("$RATE" triad | field triad_gbs)
bound=$(awk -v t="$triad" -v b="$bpp" 'BEGIN {printf "%.4g", t * 1e9 / b}')
echo "stream triad: $triad GB/s (3 x 512 MiB, 12 bytes/element counted) -> bound $bound params/s"
rmw=$("$RATE" rmw | field rmw_gbs)
echo "for scale: an fp32 Adam-shaped loop (read p g m v, write p m v; 28 bytes/param) moves $rmw GB/s here" \
  "(streams read before they are written need no read-for-ownership, so they beat the triad); against" \
  "that rate the pass is at $(awk -v a="$ours" -v r="$rmw" -v b="$bpp" 'BEGIN {printf "%.0f", 100 * a * b / (r * 1e9)}')%" \
  "of its bound"

single=$(peer "$PY" torch-single)
foreach=$(peer "$PY" torch-foreach)
fused=$(peer "$PY" torch-fused || true)
torch=$(awk -v a="$single" -v b="$foreach" 'BEGIN {print (a > b ? a : b)}')
echo "torch $($PY -c 'import torch; print(torch.__version__)') AdamW: single-tensor $single, foreach $foreach" \
  "params/s; fused=True ${fused:-n/a} params/s (traind ${ours} = $(awk -v a="$ours" -v b="${fused:-0}" \
  'BEGIN {if (b > 0) printf "%.2fx", a / b; else print "n/a"}') of fused)"

# DeepSpeed: importable already, or installed into a venv that sees this torch.
# A venv made from a venv (the default $PY) would see only the base
# interpreter's packages, so a .pth file adds $PY's own to it instead.
DSPY=$PY
if ! $PY -c 'import deepspeed' >/dev/null 2>&1; then
  DSPY="$BUILD_DIR/optim-venv/bin/python"
  if [ ! -x "$DSPY" ] || ! "$DSPY" -c 'import deepspeed' >/dev/null 2>&1; then
    log="$BUILD_DIR/optim-venv-install.log"
    if ! { $PY -m venv "$BUILD_DIR/optim-venv" &&
      $PY -c 'import site; print("\n".join(site.getsitepackages()))' \
        >"$("$DSPY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/peer.pth" &&
      "$BUILD_DIR/optim-venv/bin/pip" install -q --retries 1 --timeout 30 wheel setuptools &&
      "$BUILD_DIR/optim-venv/bin/pip" install -q --retries 1 --timeout 30 --no-build-isolation deepspeed; } \
      >"$log" 2>&1; then
      DSPY=""
      echo "deepspeed: not installable here ($(grep -i -m1 -E 'error' "$log" || tail -n1 "$log"))"
    fi
  fi
fi
if [ -n "$DSPY" ]; then
  ds=$(peer "$DSPY" deepspeed || true)
  if [ -n "$ds" ]; then
    echo "deepspeed $("$DSPY" -c 'import deepspeed; print(deepspeed.__version__)' 2>/dev/null | tail -n1) DeepSpeedCPUAdam:" \
      "$ds params/s (traind $(awk -v a="$ours" -v b="$ds" 'BEGIN {printf "%.2fx", a / b}') of it)"
  else
    echo "deepspeed: installed but its CPU Adam did not run here (see: $DSPY tests/bench/optim_torch.py --impl deepspeed)"
  fi
fi

ratio=$(awk -v a="$ours" -v b="$torch" 'BEGIN {printf "%.2f", a / b}')
pct=$(awk -v a="$ours" -v b="$bound" 'BEGIN {printf "%.0f", 100 * a / b}')
echo "optim: ${ratio}x vs torch, ${pct}% of bandwidth bound"
