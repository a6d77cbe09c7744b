#!/usr/bin/env bash
# The planner's plan run for real on the cpu backend against MegaTrain's
# every-4-layers policy: the demo-sized model under a device cap
# that cannot hold every boundary on the device, both policies trained
# alternately in one run after calibrating this machine; prints measured
# step times beside the simulator's predictions and measured tier bytes
# beside the predicted peaks, with links capped so that transfers take real
# time. Last line: "plan_run: program's plan <x>x over every-4 measured
# (<y>x predicted); step time predicted within <p>%; exposed transfer <q>%
# of step".
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-6}
BENCH="$BUILD_DIR/tests/bench_plan_run"
bench_need_exe "$BENCH"
echo "machine: $(nproc) threads, $(uptime | sed 's/.*load/load/')"
TIMELINES=${TIMELINES:-$BUILD_DIR/plan_run}
mkdir -p "$TIMELINES"
echo "timelines (measured and predicted, last step of each policy): $TIMELINES/*.svg"
exec "$BENCH" "$PWD" "$STEPS" "$TIMELINES"
