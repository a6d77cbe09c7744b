#!/usr/bin/env bash
# Data selection against none, in one run, at one FLOP budget that counts
# the scoring passes (DESIGN §8): the demo model (~10M, traind-train's
# preset) from the same seed on a training set that mixes half of the demo
# text with harmful data (its bytes shuffled, one passage duplicated, one
# sentence repeated; tests/bench/select_data.py), held-out loss on clean
# demo text the training set does not contain. Runs:
#   - none: the first batches drawn, as without selection;
#   - loss, reducible, dynamics: online batch selection from a pool of POOL
#     batches per step (compute/select.h); reducible's reference is the demo
#     model trained for REF_STEPS steps on a held-out tenth of the clean text
#     (its training is not counted, its scoring passes are);
#   - band: offline perplexity pruning: the reference scores every training
#     sample (those FLOPs come off the budget), the run trains on the samples
#     between percentiles BAND_LO and BAND_HI of those scores.
# Each run stops at the budget (max_flops); its held-out loss is measured
# there over the whole eval set.
# Last line: select: best <rule> eval <l> vs <l0> without selection at <F> FLOPs
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
FLOPS=${FLOPS:-2e13}
POOL=${POOL:-4}
REF_STEPS=${REF_STEPS:-40}
BAND_LO=${BAND_LO:-10}
BAND_HI=${BAND_HI:-70}
BATCH=8
SEQ=256
T="$BUILD_DIR/engine/traind-train"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
python3 tests/bench/select_data.py data/demo/licenses.txt "$out"
evalb=$(( $(stat -c %s "$out/eval.txt") / SEQ / BATCH ))
common=(--preset demo --batch $BATCH --seq $SEQ --lr 1e-3 --warmup 10 --steps 100000 --seed 7
        --eval "$out/eval.txt" --eval-every 1000000 --eval-batches $evalb --quiet)
eval_of() { sed -n 's/.*; eval \([0-9.]*\).*/\1/p'; }
flops_of() { sed -n 's/.* \([0-9.e+]*\) model FLOPs.*/\1/p'; }

"$T" --preset demo --batch $BATCH --seq $SEQ --lr 1e-3 --warmup 10 --steps $REF_STEPS --seed 7 \
  --data "$out/holdout.txt" --export "$out/ref" --quiet > "$out/ref.log"
"$T" --model-dir "$out/ref" --batch $BATCH --seq $SEQ --data "$out/train.txt" --score "$out/scores.txt" > "$out/score.log"
score_flops=$(sed -n 's/.*(\([0-9.e+]*\) model FLOPs).*/\1/p' "$out/score.log")
band_flops=$(python3 -c "print('%.6g' % ($FLOPS - $score_flops))")

declare -A ev
run() { # name flags...
  local name=$1; shift
  local line
  line=$("$T" "${common[@]}" --data "$out/train.txt" "$@" | tail -1)
  ev[$name]=$(echo "$line" | eval_of)
  printf '%-9s eval %s  (%s)\n' "$name" "${ev[$name]}" "$(echo "$line" | sed 's/^done: //; s/, mean.*RSS [0-9.]* MiB; / ... /')"
}
echo "budget $FLOPS model FLOPs per run, pool $POOL batches, batch $BATCH x $SEQ, eval $evalb batches"
run none --max-flops "$FLOPS"
run loss --max-flops "$FLOPS" --select loss --select-pool $POOL
run reducible --max-flops "$FLOPS" --select reducible --select-pool $POOL --select-reference "$out/ref"
run dynamics --max-flops "$FLOPS" --select dynamics --select-pool $POOL
echo "band: scoring the training set took $score_flops model FLOPs; the run gets the rest, $band_flops"
run band --max-flops "$band_flops" --select-band "$out/scores.txt:$BAND_LO:$BAND_HI"
best=none
for k in loss reducible dynamics band; do
  if python3 -c "import sys; sys.exit(0 if ${ev[$k]} < ${ev[$best]} else 1)"; then best=$k; fi
done
echo "select: best $best eval ${ev[$best]} vs ${ev[none]} without selection at $FLOPS FLOPs"
