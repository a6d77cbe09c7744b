#!/usr/bin/env bash
# The planner on LazyTrain's published setups (arXiv 2608.11919):
#   - H800 profile, sequence 1024, LazyTrain's batches (3B 192, 7B 144, 14B 96,
#     27B 72), and the 27B run with LazyTrain's budgets pinned (activations:
#     GPU 21.55, CPU 15, NVMe 32 GiB; PCIe 12/12 GB/s; NVMe 2.83 read, 3.35
#     write GB/s): per model the solve time (<= 5 s) and gap (<= 2%), and the
#     simulated throughput against MegaTrain's checkpoint-every-4-layers policy
#     at the same batch and budgets (>= 1.0x; >= 1.10x on the pinned 27B).
#   - RTX 3090 profile: the largest batch that fits, against LazyTrain's
#     (8, 6, 4, 2 for 3B, 7B, 14B, 27B).
# First line: the H800 profile against LazyTrain's published 27B throughput.
# Last line: "plan: <speedup on the pinned 27B>x over every-4, max solve <s> s".
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
BUILD_DIR=${BUILD_DIR:-build}
BENCH="$BUILD_DIR/tests/bench_plan_bench"
bench_need_exe "$BENCH"
echo "machine: $(nproc) threads, $(uptime | sed 's/.*load/load/')"
exec "$BENCH" "$PWD"
