#!/usr/bin/env bash
# The demo job, through the product as users meet it: start traind on a
# temporary state directory, submit deploy/example-job.yaml (a ~10M-parameter
# Qwen3-style model trained from scratch on the English text in data/demo,
# about a minute on the cpu backend, layers streaming through a 256 MiB
# device arena) with trainctl, watch it to the end (step, loss, tokens/s),
# export the model as a Hugging Face directory and stop the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-60}
out=$(mktemp -d /tmp/traind-demo-XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null && wait "$pid" || true; fi
  rm -rf "$out"
}
trap cleanup EXIT

"$BUILD_DIR"/daemon/traind --no-config --state-dir "$out/state" --data-root "$PWD/data" 2> "$out/traind.log" &
pid=$!
for _ in $(seq 100); do [ -S "$out/state/traind.sock" ] && break; sleep 0.1; done
[ -S "$out/state/traind.sock" ] || { cat "$out/traind.log" >&2; exit 1; }
export TRAIND_ADDR="$out/state/traind.sock"

job=$("$BUILD_DIR"/client/trainctl submit deploy/example-job.yaml --steps "$STEPS")
echo "submitted job $job"
"$BUILD_DIR"/client/trainctl watch "$job"
"$BUILD_DIR"/client/trainctl export "$job" "$out/model"
kill -TERM "$pid" && wait "$pid" && pid=
echo "exported the trained model as a Hugging Face directory: $(ls "$out/model" | tr '\n' ' ')"
