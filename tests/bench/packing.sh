#!/usr/bin/env bash
# Packing chat records several to a sequence (engine/data's default) against
# one record per sequence padded to seq_len (traind-train --no-pack), in one
# run, on the same model, data, seed and steps: the tiny model (traind-train's
# preset, vocab 3072) with the qwen2 fixture tokenizer and its ChatML template
# (tests/fixtures/tok/qwen2), SEQ (default 512) x BATCH (default 4) tokens a
# step, STEPS (default 10) steps on the cpu backend.
# The data: RECORDS (default 300) conversations generated with a fixed seed:
# a system message in three of ten, 1 to 4 user/assistant turns of passages of
# the demo text with lognormal lengths (user ~25, assistant ~60 tokens), kept
# when their ChatML rendering (counted here with tokenizers) fits in
# SEQ - 16 tokens, so none is cut and the tokens traind-train's note line
# counts are the tokens it serves (the script fails when the note says some
# were cut).
# Per mode, each run's tok/s is the median of its steps' after the first
# WARMUP (default 2); it counts batch x seq tokens, padding included, and so
# is the same for both modes up to noise. Useful tokens/s is that times the
# fraction of each sequence that is record tokens: record tokens / (samples x
# seq), from the note line (packed, it also prints that fraction). Modes
# alternate, REPS (default 3) runs each, medians quoted.
# Last line: "packing: <g>x tokens/s of padding (<fp>% vs <fn>% of each
# sequence used)" (g: useful tokens/s packed over padded).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
BUILD_DIR=${BUILD_DIR:-build}
SEQ=${SEQ:-512}
BATCH=${BATCH:-4}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-2}
REPS=${REPS:-3}
RECORDS=${RECORDS:-300}
# The project's venv (deploy/install-deps.sh): the tokenizers the tests pin;
# PYTHON picks another interpreter.
PY=${PYTHON:-.venv/bin/python3}
T="$BUILD_DIR/engine/traind-train"
TOK=tests/fixtures/tok/qwen2
bench_need_exe "$T"
bench_need_py "tokenizers" "the data generator"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

$PY - "$out/chat.jsonl" "$RECORDS" "$SEQ" "$TOK/tokenizer.json" <<'EOF'
import json
import random
import re
import sys

from tokenizers import Tokenizer

path, n, seq, tok_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = random.Random(20261206)
tok = Tokenizer.from_file(tok_path)
# The fixture's ChatML template (tests/ref/gen_tok_fixtures.py): this system
# prompt when the conversation has none.
SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
words = re.findall(r"\S+", "\n".join(open(p, encoding="utf-8").read()
                                      for p in ("data/demo/licenses.txt", "data/demo/eval.txt")))


def passage(ntok):  # ~1.3 tokens a word in this text with this tokenizer
    k = max(1, round(ntok / 1.3))
    i = rng.randrange(len(words) - k)
    return " ".join(words[i:i + k])


def chatml(msgs):
    s = "" if msgs[0]["role"] == "system" else f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    return s + "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)


recs, lens, tried = [], [], 0
while len(recs) < n:
    tried += 1
    msgs = []
    if rng.random() < 0.3:
        msgs.append({"role": "system", "content": passage(rng.lognormvariate(3.0, 0.5))})
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        msgs.append({"role": "user", "content": passage(rng.lognormvariate(3.2, 0.8))})
        msgs.append({"role": "assistant", "content": passage(rng.lognormvariate(4.1, 0.8))})
    t = len(tok.encode(chatml(msgs), add_special_tokens=False).ids)
    if t > seq - 16:
        continue
    recs.append(msgs)
    lens.append(t)
with open(path, "w", encoding="utf-8") as f:
    for m in recs:
        f.write(json.dumps({"messages": m}, ensure_ascii=False) + "\n")
s = sorted(lens)
print(f"data: {n} conversations ({tried - n} over {seq - 16} tokens redrawn), {sum(s)} tokens as ChatML: "
      f"min {s[0]}, median {s[n // 2]}, p90 {s[n * 9 // 10]}, max {s[-1]}; "
      f"{sum(50 <= x <= 600 for x in s)} of them 50-600, {sum(x > seq - 64 for x in s)} over {seq - 64}")
EOF

common=(--preset tiny --vocab 3072 --tokenizer "$TOK" --data "$out/chat.jsonl" --seq "$SEQ" --batch "$BATCH"
        --steps "$STEPS" --seed 7)
declare -A rates note
for _ in $(seq "$REPS"); do
  for mode in packed padded; do
    flags=()
    if [ $mode = padded ]; then flags=(--no-pack); fi
    "$T" "${common[@]}" "${flags[@]}" > "$out/$mode.log" 2> "$out/$mode.err" || {
      echo "packing.sh: traind-train ($mode) failed:" >&2
      cat "$out/$mode.err" >&2
      exit 1
    }
    note[$mode]=$(sed -n 's/^traind-train: note: .*: \([0-9]* records (.*\)/\1/p' "$out/$mode.err")
    rates[$mode]+="$(awk -v w="$WARMUP" '/^step/ && $2 > w {for (i = 1; i <= NF; i++) if ($i == "tok/s") print $(i + 1)}' \
      "$out/$mode.log" | median) "
  done
done

# "<records> records (<tokens> tokens before cutting), <cut> cut to seq_len <seq>, in <samples> samples[, packed (<x>% ...)]"
field() { awk -v k="$2" '{for (i = 2; i <= NF; i++) if ($i == k || $i == k ",") {gsub(/[(,]/, "", $(i - 1)); print $(i - 1)}}' <<<"$1"; }
declare -A fill useful rate
for mode in packed padded; do
  n=${note[$mode]}
  if [ -z "$n" ]; then
    echo "packing.sh: traind-train ($mode) printed no note line about the data" >&2
    exit 1
  fi
  echo "$mode: $n"
  tokens=$(awk '{gsub(/\(/, "", $3); print $3}' <<<"$n")
  cut=$(field "$n" cut)
  samples=$(field "$n" samples)
  if [ "$cut" != 0 ]; then
    echo "packing.sh: $cut records were cut to $SEQ tokens: the note's token count includes their cut parts" >&2
    exit 1
  fi
  fill[$mode]=$(awk -v t="$tokens" -v s="$samples" -v q="$SEQ" 'BEGIN {printf "%.4f", t / (s * q)}')
  rate[$mode]=$(tr ' ' '\n' <<<"${rates[$mode]}" | grep . | median)
  useful[$mode]=$(awk -v r="${rate[$mode]}" -v f="${fill[$mode]}" 'BEGIN {printf "%.0f", r * f}')
done
pct=$(sed -n 's/.*packed (\([0-9.]*\)% of their tokens are records).*/\1/p' <<<"${note[packed]}")
if [ -z "$pct" ] || ! awk -v a="$pct" -v b="${fill[packed]}" 'BEGIN {exit !(a - 100 * b < 0.06 && 100 * b - a < 0.06)}'; then
  echo "packing.sh: the packed note says ${pct:-nothing}% records, $(awk -v f="${fill[packed]}" 'BEGIN {print 100 * f}')% from its counts" >&2
  exit 1
fi
for mode in packed padded; do
  awk -v m="$mode" -v r="${rate[$mode]}" -v runs="${rates[$mode]% }" -v f="${fill[$mode]}" -v u="${useful[$mode]}" \
    'BEGIN {printf "%s: %.0f tok/s (median of runs %s), %.1f%% of it records: %.0f useful tokens/s\n", m, r, runs, 100 * f, u}'
done
awk -v a="${useful[packed]}" -v b="${useful[padded]}" -v fp="${fill[packed]}" -v fn="${fill[padded]}" \
  'BEGIN {printf "packing: %.2fx tokens/s of padding (%.1f%% vs %.1f%% of each sequence used)\n", a / b, 100 * fp, 100 * fn}'
