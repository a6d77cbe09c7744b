#!/usr/bin/env bash
# The demo job: a ~10M-parameter Qwen3-style model trained from scratch for
# about a minute on the English text in data/demo (byte-level tokens), on the
# cpu backend with layers streaming through a capped device arena. Prints
# step, loss and tokens/s; the loss falls from ~5.5 (uniform over 256 bytes).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-60}
out=$(mktemp -d /tmp/traind-demo-XXXXXX)
trap 'rm -rf "$out"' EXIT

"$BUILD_DIR"/engine/traind-train --preset demo \
  --data data/demo/licenses.txt --eval data/demo/eval.txt --eval-every 20 \
  --seq 256 --batch 8 --steps "$STEPS" --lr 2e-3 --min-lr 2e-4 --warmup 10 \
  --cap 256 --ckpt-every 2 --export "$out/model"
echo "exported the trained model as a Hugging Face directory: $(ls "$out/model" | tr '\n' ' ')"
