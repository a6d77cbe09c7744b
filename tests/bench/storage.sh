#!/usr/bin/env bash
# Activation spill through the store against plain file I/O, in one run, on
# the same filesystem: at least 2 GiB in values of 16 to 64 MiB written
# through store_act_put and made durable by flushing the act family (the
# values end in synced blob files), against the same bytes written with
# write() to one file and fsynced; then both read back cold (the files'
# pages evicted with fadvise, and /proc/sys/vm/drop_caches written when
# running as root) with store_act_get and read(). Medians of REPS
# repetitions, the two sides alternating. Last line:
# "storage: <ratio>x of raw write, <ratio>x of raw read" (target >= 0.7x).
# SWEEP=1 first prints the blob-vs-inline measurement behind the store's
# min_blob_size (storage/store_db.c).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
BUILD_DIR=${BUILD_DIR:-build}
DIR=${DIR:-$BUILD_DIR/bench-storage}
MIB=${MIB:-2048}
REPS=${REPS:-5}
bin=$BUILD_DIR/tests/bench_store_rate
bench_need_exe "$bin"
mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT
avail=$(df -Pm "$DIR" | awk 'NR == 2 {print $4}')
if [ "$avail" -lt $((MIB + 512)) ]; then
  echo "storage.sh: $DIR has $avail MiB free, the benchmark needs $((MIB + 512))" >&2
  exit 1
fi
echo "filesystem: $(df -PT "$DIR" | awk 'NR == 2 {print $1 " (" $2 ")"}'), $(nproc) cores"
if [ "${SWEEP:-0}" = 1 ]; then "$bin" blob-sweep "$DIR"; fi
"$bin" spill "$DIR" "$MIB" "$REPS"
