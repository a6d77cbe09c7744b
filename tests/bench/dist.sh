#!/usr/bin/env bash
# Data-parallel throughput on the cpu backend (issue 19): traind-train on the
# bench5m model, one process on one core (W = 1) against `mpirun -np 2`, one
# core each (W = 2), the same global batch and micro-batch split (one
# micro-batch per rank), RUNS runs each, alternating; the medians of their
# mean tokens/s (steps 3.. of each run) and, at W = 2, the share of the step
# spent summing over the ranks (its "comm" over its wall time; waiting for
# the other rank counts as communication). On a machine with two cores the
# ideal is 2x. Then the bytes per parameter each rank holds on the bench40m
# model at W = 1, 2, 4 with a bf16 working copy (--work-bf16; one step each):
# optimizer state and fp32 master fall as 1/W (ZeRO-1, the master in parts),
# the working copy stays whole. And one W = 2 run with --plan auto: the
# communication its plan predicts per step (the ranks' all-reduce measured
# at start) against the median measured (steps 3..).
# Last line: "dist: W=2 <ratio>x tokens/s of W=1 (<t2> vs <t1>), communication <pct>% of the step"
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
BUILD_DIR=${BUILD_DIR:-build}
RUNS=${RUNS:-3}
STEPS=${STEPS:-12}
TRAIN="$BUILD_DIR/engine/traind-train"
bench_need_exe "$TRAIN"
command -v mpirun >/dev/null || { echo "dist.sh: mpirun is missing (run deploy/install-deps.sh)" >&2; exit 1; }
[ "$(nproc --all)" -ge 2 ] || { echo "dist.sh: needs two cores" >&2; exit 1; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
ARGS=(--preset bench5m --data data/demo/licenses.txt --seq 256 --batch 8 --micro 2 --steps "$STEPS" --grad-fp32)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
tps() { sed -n 's/^done:.* mean \([0-9.]*\) tok\/s.*/\1/p' "$1"; }
comm() { # the share of the step at W=2: sum of comm over sum of step wall time (steps 3..)
  awk '$1 == "step" && $2 > 2 { for (i = 1; i < NF; i++) { if ($i == "tok/s") t = $(i+1); if ($i == "comm") c = $(i+1) }
       sub("s", "", c); wall += 256 * 8 / t; sum += c } END { printf "%.1f\n", 100 * sum / wall }' "$1"
}
echo "machine: $(nproc --all) cores, $(uptime | sed 's/.*load/load/'); ${ARGS[*]}"
for i in $(seq "$RUNS"); do
  taskset -c 0 "$TRAIN" "${ARGS[@]}" > "$out/w1.$i"
  mpirun -np 2 --bind-to core "$TRAIN" "${ARGS[@]}" > "$out/w2.$i"
  echo "run $i: W=1 $(tps "$out/w1.$i") tok/s, W=2 $(tps "$out/w2.$i") tok/s, comm $(comm "$out/w2.$i")%"
done
t1=$(for i in $(seq "$RUNS"); do tps "$out/w1.$i"; done | median)
t2=$(for i in $(seq "$RUNS"); do tps "$out/w2.$i"; done | median)
c2=$(for i in $(seq "$RUNS"); do comm "$out/w2.$i"; done | median)
grep '^done' "$out/w2.1"
mpirun -np 2 --bind-to core "$TRAIN" "${ARGS[@]}" --plan auto --calibrate 3 > "$out/plan"
predicted=$(sed -n 's/.*of the exposed time, \([0-9.]*\) s summing.*/\1/p' "$out/plan")
measured=$(awk '$1 == "step" && $2 > 2 { for (i = 1; i < NF; i++) if ($i == "comm") { c = $(i+1); sub("s", "", c); print c } }' \
  "$out/plan" | median)
echo "W=2 with --plan auto: communication predicted $predicted s a step, measured $measured s (median)"
bytes() { sed -n "s/.*optimizer state \([0-9.]*\), fp32 master \([0-9.]*\), bf16 working copy \([0-9.]*\) bytes.*/\\$2/p" "$1"; }
num() { echo "scale=3; $1" | bc -l | sed 's/^\./0./'; }
for W in 1 2 4; do
  mpirun -np "$W" --oversubscribe "$TRAIN" --preset bench40m --data data/demo/licenses.txt --seq 64 --batch 4 \
    --micro 4 --steps 1 --work-bf16 > "$out/m$W"
  o=$(bytes "$out/m$W" 1) m=$(bytes "$out/m$W" 2) w=$(bytes "$out/m$W" 3)
  [ "$W" = 1 ] && one=$(num "$o + $m")
  echo "bench40m, W=$W, bytes/parameter per rank: optimizer state $o + fp32 master $m = $(num "$o + $m")" \
    "(W=1's / W: $(num "$one / $W")); bf16 working copy $w"
done
printf 'dist: W=2 %.2fx tokens/s of W=1 (%.0f vs %.0f), communication %.1f%% of the step\n' \
  "$(echo "$t2 / $t1" | bc -l)" "$t2" "$t1" "$c2"
