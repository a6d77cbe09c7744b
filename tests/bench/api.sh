#!/usr/bin/env bash
# API benchmark: a real traind on a Unix socket in a fresh state directory
# (on the build directory's disk, so that synced writes cost what they
# cost), a long job keeping the cpu runner busy as in real use, then 64
# concurrent clients, connected first, making 10,000 submits with request
# ids (10% retries, some concurrent with the original) mixed with lists
# (bench_api_load; the latencies are the submits'). Afterwards every request
# id must have exactly one job.
# Last line: api: p50 <ms> ms, p99 <ms> ms, <n> lost, <n> duplicated
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
CLIENTS=${CLIENTS:-64}
SUBMITS=${SUBMITS:-10000}
root=$(mktemp -d "$(realpath "$BUILD_DIR")/api-bench-XXXXXX")
pid=
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" || true
  rm -rf "$root"
}
trap cleanup EXIT

mkdir -p "$root/data"
cp data/demo/licenses.txt "$root/data/"
job() { # name steps priority
  cat > "$root/$1.yaml" <<JOB
name: $1
model: {config: {arch: qwen3, vocab_size: 256, hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 4,
                 num_key_value_heads: 2, head_dim: 16, intermediate_size: 176, max_position_embeddings: 512}}
data: {train_path: $root/data/licenses.txt}
training: {steps: $2, batch_size: 4, seq_len: 64, lr: 3e-3}
checkpoints: {every_steps: 1000000}
device: {memory_bytes: 256M}
priority: $3
JOB
}
job busy 100000000 1000
job bench 1 0

OMP_NUM_THREADS=1 "$BUILD_DIR"/daemon/traind --no-config --state-dir "$root/state" --data-root "$root/data" \
  --set retention_jobs=0 2> "$root/traind.log" &
pid=$!
for _ in $(seq 100); do [ -S "$root/state/traind.sock" ] && break; sleep 0.1; done
export TRAIND_ADDR="$root/state/traind.sock"
busy=$("$BUILD_DIR"/client/trainctl submit "$root/busy.yaml")
"$BUILD_DIR"/tests/bench_api_load "$TRAIND_ADDR" "$root/bench.yaml" "$CLIENTS" "$SUBMITS"
"$BUILD_DIR"/client/trainctl cancel "$busy" > /dev/null
