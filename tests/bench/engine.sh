#!/usr/bin/env bash
# Training throughput of the cpu backend against PyTorch on the CPU, in one
# run, with the same thread count: transformers' Qwen3 model class (sdpa
# attention, no torch.compile) and torch.optim.AdamW, full steps (forward,
# backward, clipping, AdamW), warm-up steps excluded, medians quoted.
# Models: ~5M (d 256, 4 layers, 8 heads, 4 kv heads, ffn 688, vocab 4096),
# ~40M (d 512, 8 layers, 8/4 heads, ffn 1536, vocab 16384) and a ~44M Qwen3.5
# hybrid of the 40M's sizes (transformers' Qwen3_5ForCausalLM; traind-train's
# hybrid40m), T 256, batch 8.
# Also prints the achieved GFLOP/s (6 · params · tokens per second, the
# convention of the papers we compare with) against the machine's sgemm rate
# (OpenBLAS) measured in the same run, and the rate of the engine's own
# product on the same shape: on a cpu with AMX it exceeds OpenBLAS's
# (kernels/cpu/gemm_amx.h), so a step can pass 100% of sgemm.
# The engine runs the cpu products' route TRAIND_CPU_GEMM names (default: the
# cpu's best; the first line says which). Forcing avx2 on a cpu with AVX-512
# stands for a machine without it, so torch is then held to AVX2 as well
# (MKL_ENABLE_INSTRUCTIONS, ATEN_CPU_CAPABILITY, ONEDNN/DNNL_MAX_CPU_ISA), as it
# would be there. Last line: "engine: <ratio>x vs torch" (5M model).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-$(nproc)}
STEPS=${STEPS:-12}
WARMUP=3
export OMP_NUM_THREADS=$THREADS
# The project's venv (deploy/install-deps.sh): the torch and transformers the
# tests pin; PYTHON picks another interpreter.
PY=${PYTHON:-.venv/bin/python3}
bench_need_py "torch, transformers" "the peer"

median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

rates=$("$BUILD_DIR"/tests/bench_sgemm_rate)
sgemm=$(awk '$1 == "sgemm_gflops" {print $2}' <<<"$rates")
core=$(awk '$1 == "sgemm_gflops" {print $3}' <<<"$rates")
route=$(awk '$1 == "engine_sgemm_gflops" {print $3}' <<<"$rates")
esgemm=$(awk '$1 == "engine_sgemm_gflops" {print $2}' <<<"$rates")
torch_env=()
if [ "$route" = avx2 ]; then
  torch_env=(MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2)
fi
echo "route: $route (the cpu products of traind)${torch_env[*]:+; torch held to AVX2: ${torch_env[*]}}"
echo "machine: $THREADS threads, sgemm $sgemm GFLOP/s (OpenBLAS $core, 2048^3, median of 5); the engine's own product $esgemm GFLOP/s on its $route route"

# ours: per-step tok/s lines after the warm-up, median
ours() { # preset
  "$BUILD_DIR"/engine/traind-train --preset "$1" --data data/demo/licenses.txt --seq 256 --batch 8 \
    --steps $((STEPS + WARMUP)) --cap 4096 --keep-acts --lr 1e-4 |
    awk -v w=$WARMUP '/^step/ && $2 > w {for (i=1;i<=NF;i++) if ($i=="tok/s") print $(i+1)}' | median
}
params() {
  "$BUILD_DIR"/engine/traind-train --preset "$1" --data data/demo/licenses.txt --seq 256 --batch 8 --steps 0 |
    awk '/^model/ {print $3}'
}
theirs() { # torch args... (--arch qwen3 unless given)
  env "${torch_env[@]}" $PY tests/bench/engine_torch.py --arch qwen3 "$@" --seq 256 --batch 8 --steps "$STEPS" --warmup $WARMUP \
    --threads "$THREADS" | awk '/^torch_tokens_per_s/ {print $2}'
}

declare -A ratio
for model in 5m 40m hybrid40m; do
  case $model in
    5m) preset=bench5m; targs=(--d 256 --layers 4 --heads 8 --kv 4 --ffn 688 --vocab 4096) ;;
    40m) preset=bench40m; targs=(--d 512 --layers 8 --heads 8 --kv 4 --ffn 1536 --vocab 16384) ;;
    # Qwen3.5's hybrid: 6 Gated DeltaNet layers (4 key, 8 value heads of 64),
    # gated full attention every 4th; transformers' delta rule is plain PyTorch.
    hybrid40m) preset=hybrid40m
      targs=(--arch qwen3_5 --d 512 --layers 8 --heads 8 --kv 4 --ffn 1536 --vocab 16384 --full-every 4 --dn-heads 4) ;;
  esac
  n=$(params $preset)
  a=$(ours $preset)
  b=$(theirs "${targs[@]}")
  r=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", a / b}')
  ratio[$model]=$r
  gf=$(awk -v t="$a" -v n="$n" 'BEGIN {printf "%.1f", 6 * n * t / 1e9}')
  pct=$(awk -v g="$gf" -v s="$sgemm" 'BEGIN {printf "%.0f", 100 * g / s}')
  echo "model $model ($n params): traind ${a} tok/s, torch ${b} tok/s, ratio ${r}x; traind ${gf} GFLOP/s = ${pct}% of sgemm"
done
echo "engine: ${ratio[5m]}x vs torch"
