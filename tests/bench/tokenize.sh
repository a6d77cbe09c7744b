#!/usr/bin/env bash
# Encoding rate of engine/tok (tok.h: Hugging Face tokenizer.json, byte-level
# BPE, in C) against the Rust `tokenizers` package it copies, in one run, one
# thread each, on the same documents and the same tokenizer:
#   - the tokenizer: Qwen2's pipeline (as tests/ref/gen_tok_fixtures.py's
#     qwen2: NFC; Split on Qwen2's regex, isolated; ByteLevel without its
#     regex; BPE, no affixes; <|endoftext|> <|im_start|> <|im_end|>) at a
#     real vocabulary size, VOCAB (default 32000) merges' worth, trained here
#     by tokenizers on one thread (deterministic);
#   - the text, also its training text: MB (default 6) MB of documents: the
#     demo text (data/demo/*.txt) in paragraphs, and generated with a fixed
#     seed: English-like prose (a word chain over the demo text, and words
#     from a letter-trigram chain over its words drawn by Zipf's law, so the
#     vocabulary has ~40k words to learn from), Python, C, JavaScript, SQL and
#     Rust code, CSV, JSON and log lines full of numbers, Chinese, Japanese and
#     Korean text, chat lines with emoji;
#   - theirs: Tokenizer.encode_batch over the documents (no special tokens)
#     with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false; ours:
#     tests/bench/tok_rate.c, eng_tok_encode over the same documents. Each
#     run starts from a freshly loaded tokenizer (empty word caches); loading
#     is not timed. The two sides alternate, REPS (default 5) runs each,
#     medians quoted; every run of both must give the same total token count,
#     and the first run of both the same ids (compared untimed).
# Last line: "tokenize: <r>x of tokenizers (Rust), <mb> MB/s" (r: our tokens/s
# over theirs; mb: our MB/s, MB = 1e6 bytes).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
BUILD_DIR=${BUILD_DIR:-build}
MB=${MB:-6}
VOCAB=${VOCAB:-32000}
REPS=${REPS:-5}
# The project's venv (deploy/install-deps.sh): the tokenizers the tests pin;
# PYTHON picks another interpreter.
PY=${PYTHON:-.venv/bin/python3}
RATE="$BUILD_DIR/tests/bench_tok_rate"
bench_need_exe "$RATE"
bench_need_py "tokenizers" "the peer"
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# The documents (docs.bin: UTF-8, NUL between documents) and the tokenizer.
$PY - "$out" "$MB" "$VOCAB" <<'EOF'
import itertools
import json
import random
import re
import sys
import time

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

out, MB, VOCAB = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rng = random.Random(20261205)
demo = [open(p, encoding="utf-8").read() for p in ("data/demo/licenses.txt", "data/demo/eval.txt")]
docs = [p for t in demo for p in re.split(r"\n\s*\n", t) if p.strip()]


def zipf_cum(n):
    return list(itertools.accumulate(1.0 / (r + 2) for r in range(n)))


# English-like prose: half a word chain over the demo text, half words drawn by
# Zipf's law from its ~2000 words and 40000 more made by a letter-trigram chain
# over them (the demo text alone is too small a vocabulary for 32k merges).
words = re.findall(r"\S+", " ".join(demo))
follow = {}
for a, b in zip(words, words[1:]):
    follow.setdefault(a, []).append(b)
starts = sorted(w for w in follow if w[:1].isupper())
freq = {}
for w in re.findall(r"[a-z]+", " ".join(demo).lower()):
    freq[w] = freq.get(w, 0) + 1
tri = {}
for w, c in sorted(freq.items()):
    s = "^^" + w + "$"
    for i in range(len(s) - 2):
        nxt = tri.setdefault(s[i:i + 2], {})
        nxt[s[i + 2]] = nxt.get(s[i + 2], 0) + c
tri = {k: (list(v), list(itertools.accumulate(v.values()))) for k, v in tri.items()}
known, made = set(freq), []
while len(made) < 40000:
    k, w = "^^", ""
    while len(w) < 16:
        chars, cum = tri[k]
        c = rng.choices(chars, cum_weights=cum)[0]
        if c == "$":
            break
        w += c
        k = k[1] + c
    if 2 <= len(w) <= 15 and w not in known:
        known.add(w)
        made.append(w)
lex = sorted(freq, key=lambda w: (-freq[w], w))[:1500] + made
lex_cum = zipf_cum(len(lex))


def prose(nbytes):
    out, n, w, cap = [], 0, rng.choice(starts), False
    while n < nbytes:
        if cap:
            w = w.capitalize()
        cap = False
        r = rng.random()
        if r < 0.06:
            w += ","
        elif r < 0.1:
            w += rng.choice((".", ".", ".", "?", "!", ";", ":"))
            cap = w[-1] in ".?!"
        elif r < 0.11:
            w = "(" + w + ")"
        elif r < 0.12:
            w = '"' + w + '"'
        out.append(w)
        n += len(w) + 1
        nxt = follow.get(w)
        w = rng.choice(nxt) if nxt and rng.random() < 0.5 else rng.choices(lex, cum_weights=lex_cum)[0]
    return " ".join(out) + "."


def size():
    return int(min(rng.lognormvariate(6.8, 0.8), 8000))


def ident(style):
    ws = [rng.choices(lex, cum_weights=lex_cum)[0] for _ in range(rng.choice((1, 2, 2, 3)))]
    if style == "snake":
        return "_".join(ws)
    if style == "camel":
        return ws[0] + "".join(w.capitalize() for w in ws[1:])
    return "".join(w.capitalize() for w in ws)


def num():
    r = rng.random()
    if r < 0.4:
        return str(rng.randint(0, 100))
    if r < 0.6:
        return str(rng.randint(0, 10 ** rng.randint(3, 9)))
    if r < 0.8:
        return f"{rng.uniform(-1000, 1000):.{rng.randint(1, 6)}f}"
    if r < 0.9:
        return hex(rng.getrandbits(rng.choice((8, 16, 32))))
    return f"{rng.uniform(0, 10):.3g}e-{rng.randint(1, 12)}"


def py_code():
    lines = []
    for _ in range(rng.randint(1, 5)):
        args = [ident("snake") for _ in range(rng.randint(0, 4))]
        lines.append(f"def {ident('snake')}({', '.join(args)}):")
        lines.append(f'    """{prose(rng.randint(20, 120)).capitalize()}"""')
        for _ in range(rng.randint(2, 12)):
            v, d, c = ident("snake"), "    " * rng.randint(1, 3), rng.random()
            if c < 0.3:
                lines.append(f"{d}{v} = {rng.choice(args) if args else num()} * {num()} + {num()}")
            elif c < 0.5:
                lines.append(f"{d}for {v} in range({num()}, len({ident('snake')})):")
            elif c < 0.65:
                lines.append(f"{d}if {v} >= {num()} and not {ident('snake')}:")
            elif c < 0.8:
                lines.append(f"{d}{v}.append({ident('snake')}[{rng.randint(0, 9)}])  # {prose(rng.randint(10, 50))}")
            else:
                lines.append(f'{d}print(f"{v} = {{{v}!r}}, {ident("snake")}={{{num()}}}")')
        lines.append(f"    return {ident('snake')}\n")
    return "\n".join(lines)


def c_code():
    lines = [f"#include <{rng.choice(('stdio', 'stdlib', 'string', 'stdint', 'math'))}.h>", ""]
    for _ in range(rng.randint(1, 4)):
        ty = rng.choice(("int", "size_t", "double", "static int", "uint32_t", "const char *"))
        params = ", ".join(rng.choice(("int ", "float *", "const char *")) + ident("snake") for _ in range(rng.randint(1, 3)))
        lines.append(f"{ty} {ident('snake')}({params}) {{")
        for _ in range(rng.randint(2, 10)):
            d, c = "\t" * rng.randint(1, 3), rng.random()
            if c < 0.3:
                lines.append(f"{d}{ident('snake')} += {ident('snake')}[{ident('snake')}] * {num()};")
            elif c < 0.5:
                lines.append(f"{d}for (int i = 0; i < {num()}; i++) {{")
            elif c < 0.7:
                lines.append(f"{d}if ({ident('snake')} == NULL) return -{rng.randint(1, 9)}; // {prose(rng.randint(10, 40))}")
            else:
                lines.append(f'{d}printf("%s: %d\\n", {ident("snake")}, {ident("snake")}->{ident("snake")});')
        lines.append("\treturn 0;\n}\n")
    return "\n".join(lines)


def other_code():
    lines = []
    for _ in range(rng.randint(2, 10)):
        c = rng.random()
        if c < 0.3:
            lines.append(f"const {ident('camel')} = await {ident('camel')}.{ident('camel')}({{ {ident('camel')}: {num()}, "
                         f"{ident('camel')}: '{ident('snake')}' }});")
        elif c < 0.6:
            lines.append(f"export function {ident('camel')}({ident('camel')}, {ident('camel')}) {{ return "
                         f"{ident('camel')}.map((x) => x * {num()}).filter(Boolean); }}")
        elif c < 0.8:
            lines.append(f"SELECT {ident('snake')}, COUNT(*) FROM {ident('snake')} WHERE {ident('snake')} > {num()} "
                         f"GROUP BY 1 ORDER BY 2 DESC LIMIT {rng.randint(1, 100)};")
        else:
            lines.append(f"fn {ident('snake')}(&self, {ident('snake')}: &[u{rng.choice((8, 16, 32, 64))}]) -> "
                         f"Result<{ident('pascal')}, Error> {{ Ok(Self::{ident('snake')}()?) }}")
    return "\n".join(lines)


def data():
    c = rng.random()
    if c < 0.35:
        cols = [ident("snake") for _ in range(rng.randint(3, 8))]
        return "\n".join([",".join(cols)] + [",".join(num() for _ in cols) for _ in range(rng.randint(5, 40))])
    if c < 0.7:
        recs = [{ident("snake"): (num() if rng.random() < 0.5 else ident("camel")) for _ in range(rng.randint(2, 6))}
                for _ in range(rng.randint(1, 10))]
        return json.dumps(recs, indent=rng.choice((None, 2)), ensure_ascii=False)
    return "\n".join(
        f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
        f"{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z {rng.choice(('INFO', 'WARN', 'ERROR', 'DEBUG'))} "
        f"[{ident('snake')}] {rng.randint(1, 255)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)} "
        f"{prose(rng.randint(20, 80))} latency={rng.uniform(0, 500):.2f}ms id={rng.getrandbits(64):016x}"
        for _ in range(rng.randint(5, 30)))


ZH = ("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所"
      "民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日"
      "那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想"
      "已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指"
      "几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权"
      "收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集"
      "温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支"
      "般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属"
      "圆包火住调满县局照参红细引听该铁价严模训练语言词网络")
ZH_WORDS = ["人工智能", "机器学习", "深度学习", "自然语言", "数据", "模型", "训练", "参数", "计算", "问题", "我们", "他们",
            "今天", "中国", "北京", "上海", "发展", "经济", "社会", "文化", "技术", "研究", "工作", "时间", "世界", "国家",
            "公司", "市场", "系统", "方法"]
JA = ["です", "ます", "した", "して", "これ", "それ", "日本", "東京", "今日", "明日", "天気", "学校", "先生", "学生", "会社",
      "仕事", "電車", "時間", "コンピューター", "データ", "モデル", "トークナイザー", "ソフトウェア", "インターネット", "の", "は",
      "が", "を", "に", "で", "と", "も", "から", "まで", "とても", "少し", "新しい", "大きい", "書きます", "読みます",
      "作りました", "思います"]
KO = ["입니다", "합니다", "있습니다", "서울", "한국", "오늘", "날씨", "정말", "좋네요", "학교", "회사", "사람", "데이터", "모델",
      "컴퓨터", "토크나이저", "텍스트", "문장", "단위", "나눕니다"]
KO_PARTICLES = ["은", "는", "이", "가", "을", "를", "에서", "으로", "그리고", "하지만", "감사합니다"]
EMOJI = ("😀 😂 🤣 😊 😍 🤔 😅 😭 😎 🙃 🤖 🚀 ❤️ 👍 👍🏽 🙏 🙏🏿 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸 🇯🇵 🇫🇷 ✨ 🎉 🔥 ✅ ❌ ☕ 💯 👀 🍕 🐍 📈 "
         "⚡ 🌍").split()
pools = {}


def zipf(pool):
    key = id(pool)
    if key not in pools:
        pools[key] = zipf_cum(len(pool))
    return rng.choices(pool, cum_weights=pools[key])[0]


def sentences(nbytes, one):
    out, n = [], 0
    while n < nbytes:
        s = one()
        out.append(s)
        n += len(s.encode())
    return "".join(out)


def zh():
    return sentences(size(), lambda: "".join(zipf(ZH_WORDS) if rng.random() < 0.3 else zipf(ZH) for _ in range(rng.randint(6, 30)))
                     + rng.choice("。。。，！？；："))


def ja():
    return sentences(size(), lambda: "".join(zipf(JA) for _ in range(rng.randint(4, 16))) + rng.choice("。。、！？"))


def ko():
    return sentences(size(), lambda: " ".join(zipf(KO) + (zipf(KO_PARTICLES) if rng.random() < 0.5 else "")
                                               for _ in range(rng.randint(3, 10))) + rng.choice((". ", "! ", "? ")))


def chat():
    lines = []
    for _ in range(rng.randint(2, 12)):
        s = prose(rng.randint(10, 120))
        if rng.random() < 0.6:
            s += " " + "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
        if rng.random() < 0.2:
            s = rng.choice(EMOJI) + " " + s
        lines.append(f"{ident('pascal')}: {s}")
    return "\n".join(lines)


kinds = [(0.40, lambda: prose(size())), (0.08, py_code), (0.05, c_code), (0.05, other_code), (0.12, data),
         (0.12, zh), (0.05, ja), (0.04, ko), (0.09, chat)]
cum = list(itertools.accumulate(w for w, _ in kinds))
total = sum(len(d.encode()) for d in docs)
while total < MB * 1e6:
    d = rng.choices(kinds, cum_weights=cum)[0][1]()
    docs.append(d)
    total += len(d.encode())
rng.shuffle(docs)
with open(f"{out}/docs.bin", "wb") as f:
    f.write(b"\0".join(d.encode() for d in docs))

QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                 r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
tok = Tokenizer(models.BPE(dropout=None, unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                           fuse_unk=False, byte_fallback=False))
tok.normalizer = normalizers.NFC()
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
])
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=[],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
t0 = time.perf_counter()
tok.train_from_iterator(docs, trainer=trainer)
secs = time.perf_counter() - t0
tok.model.continuing_subword_prefix = ""
tok.model.end_of_word_suffix = ""
tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                        for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
tok.save(f"{out}/tokenizer.json")
print(f"text: {len(docs)} documents, {total / 1e6:.2f} MB (median {sorted(len(d.encode()) for d in docs)[len(docs) // 2]} "
      f"bytes); tokenizer: vocab {tok.get_vocab_size()}, trained on that text in {secs:.1f} s by tokenizers "
      f"{__import__('tokenizers').__version__}")
EOF

# theirs: one run, "tokens <n> s <seconds>"; with an ids file (bench_tok_rate's)
# also "ids same" or where they first differ, compared after the timing.
theirs() { # [ids file]
  $PY - "$out" "$@" <<'EOF'
import array
import sys
import time

from tokenizers import Tokenizer

out = sys.argv[1]
with open(f"{out}/docs.bin", "rb") as f:
    docs = f.read().decode("utf-8").split("\0")
tok = Tokenizer.from_file(f"{out}/tokenizer.json")
t0 = time.perf_counter()
enc = tok.encode_batch(docs, add_special_tokens=False)
secs = time.perf_counter() - t0
print("tokens", sum(len(e.ids) for e in enc), "s", f"{secs:.4f}")
if len(sys.argv) > 2:
    ours = array.array("i")
    with open(sys.argv[2], "rb") as f:
        ours.frombytes(f.read())
    at = 0
    for d, e in enumerate(enc):
        if list(ours[at:at + len(e.ids)]) != e.ids:
            print(f"ids differ in document {d} (token {at} on)")
            sys.exit(0)
        at += len(e.ids)
    print("ids same" if at == len(ours) else f"ids differ: traind has {len(ours)}, tokenizers {at}")
EOF
}

ours_s=() theirs_s=()
tokens=
for r in $(seq "$REPS"); do
  ids=()
  if [ "$r" = 1 ]; then ids=("$out/ids.bin"); fi
  a=$("$RATE" "$out/tokenizer.json" "$out/docs.bin" 1 "${ids[@]}")
  b=$(theirs "${ids[@]}")
  ta=$(awk '$2 == "docs" {print $7}' <<<"$a")
  tb=$(awk '$1 == "tokens" {print $2}' <<<"$b")
  if [ "$r" = 1 ] && ! grep -qx "ids same" <<<"$b"; then
    echo "tokenize.sh: $(grep '^ids' <<<"$b")" >&2
    exit 1
  fi
  bytes=$(awk '$2 == "docs" {print $5}' <<<"$a")
  if [ "$ta" != "$tb" ] || { [ -n "$tokens" ] && [ "$ta" != "$tokens" ]; }; then
    echo "tokenize.sh: token counts differ: traind $ta, tokenizers $tb (run $r; run 1: ${tokens:-$ta})" >&2
    exit 1
  fi
  tokens=$ta
  ours_s+=("$(awk '$2 == "tokens_per_s" {print $7}' <<<"$a")")
  theirs_s+=("$(awk '$1 == "tokens" {print $4}' <<<"$b")")
done
sa=$(printf '%s\n' "${ours_s[@]}" | median)
sb=$(printf '%s\n' "${theirs_s[@]}" | median)
echo "both: $tokens tokens, the same count in every run, the same ids (first run)"
awk -v t="$tokens" -v by="$bytes" -v s="$sa" -v n="$REPS" \
  'BEGIN {printf "traind (engine/tok), one thread: %.3f s, %.0f tokens/s, %.2f MB/s (median of %d)\n", s, t / s, by / s / 1e6, n}'
awk -v t="$tokens" -v by="$bytes" -v s="$sb" -v n="$REPS" \
  'BEGIN {printf "tokenizers (Rust) encode_batch, one thread: %.3f s, %.0f tokens/s, %.2f MB/s (median of %d)\n", s, t / s, by / s / 1e6, n}'
awk -v by="$bytes" -v a="$sa" -v b="$sb" 'BEGIN {printf "tokenize: %.2fx of tokenizers (Rust), %.1f MB/s\n", b / a, by / a / 1e6}'
