#!/usr/bin/env bash
# POET-X against 8-bit AdamW (the engine's default), in one run, on the same
# model, tokens and seed: the demo model (~10M) and the 40M bench model
# (traind-train's presets), STEPS steps of BATCH x SEQ tokens of the demo
# text on the cpu backend, each method in its own process
# (bench_poetx_run train). Per model and method: trainable-state bytes
# (optimizer state, gradient store, POET-X's θ, moments, gradients and
# permutations) and peak host bytes (measured peak RSS, and what the engine
# accounts the run holds) per parameter, the median tokens/s of the steps
# after the first two, and the loss of the last step. BLOCK is POET-X's
# rotation block size (it must divide every projection's dimensions: 128
# does for both models).
# Then the largest dense Qwen3 shape each method can train with this
# machine's host memory (MemAvailable) behind an H200 (the shipped profile,
# engine/plan/profiles/h200-sxm.json, with its host memory replaced), from
# the planner: per shape the training state it counts in host memory and
# whether it finds a plan for batch 1 x 512 (rotation blocks of 256).
# Last line: poetx: host <a> B/param vs adamw8 <b> B/param, <r>x tokens/s,
# loss <l1> vs <l2> (the 40M model; host is peak RSS per parameter).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-30}
BATCH=${BATCH:-8}
SEQ=${SEQ:-256}
BLOCK=${BLOCK:-128}
RUN="$BUILD_DIR/tests/bench_poetx_run"
if [ ! -x "$RUN" ]; then
  echo "poetx.sh: $RUN is missing: build first (cmake --build $BUILD_DIR)" >&2
  exit 1
fi
DATA=data/demo/licenses.txt
field() { awk -v k="$1" '$1 == k {print $2}' "$2"; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for model in demo bench40m; do
  for method in adamw8 poetx; do
    "$RUN" train "$method" "$BLOCK" "$model" "$STEPS" "$BATCH" "$SEQ" "$DATA" > "$out/$model.$method"
  done
  for method in adamw8 poetx; do
    f="$out/$model.$method"
    awk -v m="$model" -v me="$method" '
      {v[$1] = $2}
      END {printf "%-9s %-7s %10d params: train state %.2f B/param, peak RSS %.2f B/param (engine %.2f), %8.0f tok/s, loss %.4f after %d tokens\n",
             m, me, v["params"], v["train_state"] / v["params"], v["peak_rss"] / v["params"], v["host"] / v["params"],
             v["tok_s"], v["loss"], v["tokens"]}' "$f"
  done
done

echo "host training state per parameter behind an H200, from the planner, dense Qwen3 shapes (block 256):"
"$RUN" largest 256 1 512 engine/plan/profiles/h200-sxm.json > "$out/largest"
awk '$1 == "shape" {printf "  %-7s %-11s %6.1fB params: %6.1f GiB, %.2f B/param, %s\n", $2, $3, $4 / 1e9, $5 / 2^30, $6,
                      $7 == "fits" ? "planned" : "does not fit"}
     $1 == "largest" {printf "  largest %-7s with this machine'"'"'s MemAvailable (%.1f GiB): %s\n", $2, $4 / 2^30, $3}' "$out/largest"

m=bench40m
a=$(awk '{v[$1]=$2} END {printf "%.2f", v["peak_rss"] / v["params"]}' "$out/$m.poetx")
b=$(awk '{v[$1]=$2} END {printf "%.2f", v["peak_rss"] / v["params"]}' "$out/$m.adamw8")
r=$(awk -v p="$(field tok_s "$out/$m.poetx")" -v q="$(field tok_s "$out/$m.adamw8")" 'BEGIN {printf "%.2f", p / q}')
l1=$(awk '{v[$1]=$2} END {printf "%.4f", v["loss"]}' "$out/$m.poetx")
l2=$(awk '{v[$1]=$2} END {printf "%.4f", v["loss"]}' "$out/$m.adamw8")
echo "poetx: host $a B/param vs adamw8 $b B/param, ${r}x tokens/s, loss $l1 vs $l2"
