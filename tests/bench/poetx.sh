#!/usr/bin/env bash
# POET-X against 8-bit AdamW (the engine's default), in one run, on the same
# model, tokens and seed: the demo model (~10M) and the 40M bench model
# (traind-train's presets), BATCH x SEQ tokens a step of the demo text on
# the cpu backend: adamw8, poetx (its frozen W0 in the fp32 master) and
# poetx-bf16 (W0 in a bf16 base, as the published method holds it). Memory
# comes from each method in its own process over MEM_STEPS steps
# (bench_poetx_run train); tokens/s and the loss from STEPS steps of every
# method in one process with their steps interleaved (bench_poetx_run
# speed), since this machine's load drifts by more than the methods differ.
# Per model and method:
#   - trainable-state bytes per parameter (optimizer state, gradient store,
#     POET-X's θ with moments and gradients, permutations);
#   - peak host bytes per parameter: the process's peak RSS less what it
#     held before the run opened (the libraries and runtime: the same for
#     every method and every model) and less the cpu backend's device arena
#     (activations and weight slots, which a GPU run holds on the GPU), all
#     measured; the raw peak RSS beside it;
#   - the median tokens/s of the steps after the first two, and the loss of
#     the last step.
# BLOCK is POET-X's rotation block size: 32 keeps the published ratio of
# block to width (256 at 4096, 1/16) for both models' 384 and 512, and
# divides every projection's dimensions. POET-X merges every 12 steps, so
# that a merge's work counts in the peak.
# Then the largest dense Qwen3 shape each method can train with this
# machine's host memory (MemAvailable) behind an H200 (the shipped profile,
# engine/plan/profiles/h200-sxm.json, with its host memory replaced), from
# the planner: per shape the training state it counts in host memory and
# whether it finds a plan for batch 1 x 512 (rotation blocks of 256).
# Last lines: per model, poetx (the bf16 base; the fp32 base's figures are
# in the table): host <a> B/param vs adamw8 <b> B/param, <r>x tokens/s,
# loss <l1> vs <l2>; the 40M model's last.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-30}
MEM_STEPS=${MEM_STEPS:-14}
BATCH=${BATCH:-8}
SEQ=${SEQ:-256}
BLOCK=${BLOCK:-32}
RUN="$BUILD_DIR/tests/bench_poetx_run"
bench_need_exe "$RUN"
DATA=data/demo/licenses.txt
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

methods="adamw8 poetx poetx-bf16"
for model in demo bench40m; do
  # Memory: each method in a process of its own, through a merge.
  for method in $methods; do
    "$RUN" train "$method" "$BLOCK" "$model" "$MEM_STEPS" "$BATCH" "$SEQ" "$DATA" > "$out/$model.$method"
  done
  # Speed and loss: every method in one process, steps interleaved.
  "$RUN" speed "$BLOCK" "$model" "$STEPS" "$BATCH" "$SEQ" "$DATA" $methods > "$out/$model.speed"
  for method in $methods; do
    awk -v m="$model" -v me="$method" '
      FILENAME ~ /speed$/ {if ($2 == me) s[$1] = $3; if ($1 == "tokens") tokens = $2; next}
      {v[$1] = $2}
      END {p = v["params"]
           printf "%-9s %-10s %9d params: train state %.2f B/param, host %.2f B/param (peak RSS %.2f, engine %.2f), %6.0f tok/s, loss %.4f after %d tokens\n",
             m, me, p, v["train_state"] / p, (v["peak_rss"] - v["base_rss"] - v["arena_rss"]) / p, v["peak_rss"] / p,
             v["host"] / p, s["tok_s"], s["loss"], tokens}' "$out/$model.$method" "$out/$model.speed"
  done
done

echo "host training state per parameter behind an H200, from the planner, dense Qwen3 shapes (block 256):"
"$RUN" largest 256 1 512 engine/plan/profiles/h200-sxm.json > "$out/largest"
awk '$1 == "shape" {printf "  %-7s %-11s %6.1fB params: %6.1f GiB, %.2f B/param, %s\n", $2, $3, $4 / 1e9, $5 / 2^30, $6,
                      $7 == "fits" ? "planned" : "does not fit"}
     $1 == "largest" {printf "  largest %-7s with this machine'"'"'s MemAvailable (%.1f GiB): %s\n", $2, $4 / 2^30, $3}' "$out/largest"

host() { awk '{v[$1]=$2} END {printf "%.2f", (v["peak_rss"] - v["base_rss"] - v["arena_rss"]) / v["params"]}' "$1"; }
speed() { awk -v k="$1" -v me="$2" '$1 == k && $2 == me {print $3}' "$3"; }
for m in demo bench40m; do
  p=poetx-bf16 q=adamw8 sp="$out/$m.speed"
  r=$(awk -v p="$(speed tok_s $p "$sp")" -v q="$(speed tok_s $q "$sp")" 'BEGIN {printf "%.2f", p / q}')
  l1=$(awk -v l="$(speed loss $p "$sp")" 'BEGIN {printf "%.4f", l}')
  l2=$(awk -v l="$(speed loss $q "$sp")" 'BEGIN {printf "%.4f", l}')
  echo "poetx: host $(host "$out/$m.$p") B/param vs adamw8 $(host "$out/$m.$q") B/param, ${r}x tokens/s, loss $l1 vs $l2"
done
