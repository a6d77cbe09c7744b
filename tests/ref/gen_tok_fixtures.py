#!/usr/bin/env python3
"""Write the tokenizer reference fixtures: four byte-level BPE tokenizers trained here
with Hugging Face `tokenizers`, and what `tokenizers` makes of ~380 inputs with each.

The C implementation of tokenizer.json (tests/fixtures/tok/<name>/tokenizer.json) is
held to these files; it never imports Python. Each tokenizer copies the pipeline of a
real model family, on a small vocabulary trained from data/demo/*.txt plus the
multilingual text below:

  qwen3_5 as qwen2, with Qwen3.5's regex (letters take combining marks: \p{M}), its
          specials and vision markers, <think> and </think> as plain added tokens.
  qwen2   NFC; Split(Qwen2 regex, isolated) + ByteLevel(use_regex=False); BPE;
          ByteLevel decoder and post-processor; specials <|endoftext|> <|im_start|>
          <|im_end|>, and non-special added tokens with each AddedToken flag
          (lstrip, rstrip, single_word, normalized); a ChatML chat template.
  llama3  no normalizer; Split(Llama-3 regex) + ByteLevel(trim_offsets=True);
          BPE with ignore_merges; ByteLevel + TemplateProcessing (<|begin_of_text|>)
          post-processor; the Llama-3-Instruct chat template.
  gpt2    NFKC; ByteLevel(use_regex=True), GPT-2's own regex; BPE with merges in the
          legacy "a b" serialisation; <|endoftext|> inside the model vocab.

Per tokenizer: tokenizer.json, tokenizer_config.json, cases.jsonl (encode and decode
of each input, the input as raw bytes, some of them invalid UTF-8) and
decode_cases.jsonl (decode of seeded random id sequences). tests/fixtures/tok/ref.json
records the versions and what the script found while checking (round trips, the
effect of ignore_merges and trim_offsets, the legacy merges).

Seeded and single-threaded: a rerun rewrites identical bytes. See tests/ref/README.md.
Usage: .venv/bin/python3 tests/ref/gen_tok_fixtures.py [--out DIR]
"""
import os

# The BPE trainer and batch encoding use a rayon pool; one thread keeps the
# training order, and so the merges' tie-breaking, the same on every machine.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import unicodedata  # noqa: E402

import tokenizers  # noqa: E402
from hf_env import report  # noqa: E402
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,  # noqa: E402
                        normalizers, pre_tokenizers, processors, trainers)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures", "tok")

VOCAB_SIZE = 3000
TRAIN_FILES = ("data/demo/licenses.txt", "data/demo/eval.txt")
MULTILINGUAL_REPEAT = 4  # the few KB below count this many times in training
SEED_CASES = 4242
SEED_DECODE = 4343
SEED_LARGE = 4444
# Qwen3.5/3.6's BPE tokens before its added ones (its config pads the
# embedding to 248320): --large writes a tokenizer of that size.
LARGE_VOCAB = 248044

QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                 r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# transformers' own: its Qwen3_5Tokenizer splits with this.
from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX as QWEN3_5_PATTERN  # noqa: E402
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
                  r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

# Written for this fixture: code, CJK, emoji, accented and other scripts, so the
# vocabulary has merges beyond English license text.
MULTILINGUAL = """\
def merge_counts(pairs, vocab):
\t\"\"\"Count adjacent pairs; return the most frequent one.\"\"\"
\tcounts = {}
\tfor word, freq in vocab.items():
\t\tsymbols = word.split()
\t\tfor i in range(len(symbols) - 1):
\t\t\tcounts[symbols[i], symbols[i + 1]] = counts.get((symbols[i], symbols[i + 1]), 0) + freq
\treturn max(counts, key=counts.get) if counts else None


class Tokenizer:
    def __init__(self, path: str) -> None:
        with open(path, encoding="utf-8") as f:
            self.vocab = json.load(f)["model"]["vocab"]

    def __len__(self) -> int:
        return len(self.vocab)  # 32000 + 256 bytes


static int utf8_len(unsigned char c)
{
\tif (c < 0x80) return 1;
\tif ((c & 0xE0) == 0xC0) return 2;
\tif ((c & 0xF0) == 0xE0) return 3;
\treturn (c & 0xF8) == 0xF0 ? 4 : -1;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; ++i) {
        printf("%s\\n", argv[i]);
    }
    return 0;
}

fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!("{:?}", v); }
const total = items.reduce((acc, x) => acc + x.price * x.qty, 0); // JavaScript
SELECT id, name FROM users WHERE created_at >= '2024-01-01' ORDER BY id DESC;

自然语言处理是人工智能的一个重要分支。分词器把文本切成词元，模型再根据词元学习语言的规律。
我们今天在北京开会，讨论了训练数据的质量、模型的规模以及评估的方法。
机器学习需要大量的数据和计算资源。这个模型有三十亿个参数，训练了两个星期。
繁體中文也很常見：這個詞彙表包含了許多常用的漢字。
日本語の文章も少し入れておきます。東京は日本の首都で、人口がとても多いです。
ひらがなとカタカナ、そして漢字を組み合わせて書きます。コンピューターでトークナイザーを作りました。
今日はいい天気ですね。明日も晴れるでしょう。
한국어 문장도 포함합니다. 서울은 대한민국의 수도입니다. 오늘 날씨가 정말 좋네요.
토크나이저는 텍스트를 작은 단위로 나눕니다. 감사합니다!

Emoji: 😀 😂 🤖 🚀 ❤️ 👍🏽 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸 🇯🇵 🇫🇷 ✨ 🎉 🔥 ✅ ☕ 🙏🏿
Great job! 🎉🎉 Let's ship it 🚀 — the build is green ✅ and coffee is ready ☕.

Français : « Où est la bibliothèque ? » demanda-t-elle. Les élèves étudièrent à l'école ; c'était l'été.
Deutsch: Die Größe der Straße überrascht öfter Fußgänger. Schöne Grüße aus München!
Español: ¿Dónde está el niño? ¡Qué día tan bonito! El señor comió paella en Valencia.
Português: A informação não está disponível; a decisão será tomada amanhã.
Tiếng Việt: Tôi yêu tiếng Việt. Người Việt Nam rất thân thiện và hiếu khách.
Polski: Zażółć gęślą jaźń. Czech: Příliš žluťoučký kůň úpěl ďábelské ódy.
Türkçe: Işık ılık süt içtiğinde; İstanbul'da güzel bir gün.
Ελληνικά: Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.
Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.
العربية: اللغة العربية جميلة جدا. עברית: שלום עולם.
हिन्दी: नमस्ते दुनिया, यह एक परीक्षण वाक्य है। ไทย: สวัสดีครับ ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ

Numbers: 3.14159, 2,718, 1e-9, 0x7fff, 1_000_000, 42nd, v1.2.3, 2024-06-30T12:34:56Z, ½ ① ² Ⅻ
Symbols: → ← ≤ ≥ ≠ ∞ ∑ √ ± × ÷ © ® ™ § ¶ • … “quoted” ‘single’ — – ¿¡ ｆｕｌｌｗｉｄｔｈ ﬁ ﬂ
"""

QWEN2_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# Qwen2.5-Instruct's template without its tool-calling branches, laid out as Qwen's:
# Jinja escapes (\n) inside string literals, {%- and {{- whitespace control between
# indented lines (transformers renders with trim_blocks and lstrip_blocks).
CHATML_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {{- '<|im_start|>system\\n" + QWEN2_SYSTEM + "<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message['role'] == 'system' and loop.first) %}\n"
    "        {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

# Meta-Llama-3-8B-Instruct's template, verbatim: one line, real newlines inside the
# string literals (as its tokenizer_config.json has them), `| trim` binding tighter
# than `+`.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


def tok_spec():
    """name -> what to build. Added tokens are listed in id order; `special` ones
    are added with add_special_tokens, the rest with add_tokens, after training,
    so their ids follow the model vocab (as in Qwen2 and Llama 3), except where
    `trainer_specials` puts them inside the model vocab (as GPT-2 has it)."""
    return {
        "qwen2": dict(
            normalizer=normalizers.NFC(),
            pre_tokenizer=pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
            ]),
            # All three flags off in both, "" affixes in the model: as Qwen2.5's file.
            post_processor=lambda tok: processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                                            use_regex=False),
            decoder_flags=dict(add_prefix_space=False, trim_offsets=False, use_regex=False),
            subword_affixes="",
            ignore_merges=False,
            trainer_specials=[],
            added=[
                AddedToken("<|endoftext|>", special=True, normalized=False),
                AddedToken("<|im_start|>", special=True, normalized=False),
                AddedToken("<|im_end|>", special=True, normalized=False),
                # Qwen3's reasoning markers: added, not special, matched on raw text.
                AddedToken("<think>", special=False, normalized=False),
                AddedToken("</think>", special=False, normalized=False),
                # Takes the whitespace before it (RoBERTa's <mask> has this).
                AddedToken("<lstrip>", special=False, normalized=False, lstrip=True),
                AddedToken("<rstrip>", special=False, normalized=False, rstrip=True),
                # Only where neither neighbour is a word character (regex \w).
                AddedToken("xyzzy", special=False, normalized=False, single_word=True),
                # Matched against the NFC text: precomposed, decomposed (A + U+030A)
                # and ANGSTROM SIGN U+212B all match. Its non-ASCII content also
                # shows what the ByteLevel decoder does to an added token.
                AddedToken("Ångström", special=False, normalized=True),
                # Matched on the raw text: only the precomposed form matches.
                AddedToken("naïve", special=False, normalized=False),
            ],
            # transformers 5's Qwen2Tokenizer rebuilds the pipeline from vocab and
            # merges; for this tokenizer.json it encodes every case the same.
            config=dict(bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                        unk_token=None, chat_template=CHATML_TEMPLATE,
                        model_max_length=32768, errors="replace", add_prefix_space=False,
                        tokenizer_class="Qwen2Tokenizer"),
        ),
        # Qwen3.5/3.6's pipeline as transformers' Qwen3_5Tokenizer builds it: NFC,
        # its regex, whose letters take combining marks (\p{M}) along, then ByteLevel.
        "qwen3_5": dict(
            normalizer=normalizers.NFC(),
            pre_tokenizer=pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(QWEN3_5_PATTERN), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
            ]),
            post_processor=None,
            subword_affixes="",
            ignore_merges=False,
            trainer_specials=[],
            added=[AddedToken(t, special=True, normalized=False) for t in (
                "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>")] + [
                AddedToken(t, special=False, normalized=False) for t in ("<think>", "</think>")],
            config=dict(bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                        unk_token=None, chat_template=CHATML_TEMPLATE, model_max_length=262144,
                        errors="replace", add_prefix_space=False, tokenizer_class="Qwen3_5Tokenizer"),
        ),
        "llama3": dict(
            normalizer=None,
            pre_tokenizer=pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
            ]),
            post_processor=lambda tok: processors.Sequence([
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(
                    single="<|begin_of_text|> $A",
                    pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                    special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))]),
            ]),
            ignore_merges=True,
            # Whole pre-tokens put into the vocab without merges that build them, as
            # Llama 3's vocab (converted from tiktoken ranks) has some: ignore_merges
            # emits them as one token, BPE merges alone never would. A vocab trained
            # here has none (ref.json: ignore_merges_words_in_training_text).
            extra_vocab=[" quux", "foobar", " 自然语言处理", "🤖🚀"],
            trainer_specials=[],
            added=[AddedToken(t, special=True, normalized=False) for t in (
                "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>")],
            config=dict(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                        chat_template=LLAMA3_TEMPLATE, model_max_length=8192,
                        model_input_names=["input_ids", "attention_mask"],
                        tokenizer_class="PreTrainedTokenizerFast"),
        ),
        "gpt2": dict(
            normalizer=normalizers.NFKC(),
            pre_tokenizer=pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            post_processor=None,
            ignore_merges=False,
            # In the model vocab as well as in added_tokens (GPT-2 has it so).
            trainer_specials=["<|endoftext|>"],
            added=[
                # normalized: its content is NFKC'd too, so the trie holds "fixme" and
                # both "ﬁxme" and "fixme" in the input match; decode gives "fixme"
                # (decode uses a normalized token's normalized content).
                AddedToken("ﬁxme", special=False, normalized=True),
                # A space inside: matched before the pre-tokenizer splits on it.
                AddedToken("New York", special=False, normalized=False),
            ],
            # Not GPT2Tokenizer: transformers 5 rebuilds that from vocab and merges
            # and encodes ~50 of the cases differently (its own pipeline, not this one).
            config=dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                        unk_token="<|endoftext|>", model_max_length=1024,
                        add_prefix_space=False, tokenizer_class="PreTrainedTokenizerFast"),
        ),
    }


def read_repo_text(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def training_texts():
    return [read_repo_text(p) for p in TRAIN_FILES] + [MULTILINGUAL] * MULTILINGUAL_REPEAT


def train(spec, pad_to=None):
    """The spec's tokenizer; pad_to: the model vocab grown to that many tokens
    with merges past the trained ones (pad_vocab), before the added tokens."""
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, continuing_subword_prefix="",
                               end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    if spec["normalizer"] is not None:
        tok.normalizer = spec["normalizer"]
    tok.pre_tokenizer = spec["pre_tokenizer"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2,
                                  special_tokens=spec["trainer_specials"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training_texts(), trainer=trainer)
    if spec.get("extra_vocab"):
        tok = add_unmerged_vocab(tok, spec["extra_vocab"])
    if pad_to:
        tok = pad_vocab(tok, pad_to)
    # The trainer writes vocab and merges only; set what the model family uses.
    tok.model.ignore_merges = spec["ignore_merges"]
    tok.model.byte_fallback = False
    if spec.get("subword_affixes") is not None:
        tok.model.continuing_subword_prefix = spec["subword_affixes"]
        tok.model.end_of_word_suffix = spec["subword_affixes"]
    if spec.get("decoder_flags"):
        # decoders.ByteLevel() takes no flags from Python; they only matter as data
        # the C parser must accept (the ByteLevel decoder ignores them).
        tok = with_json_edit(tok, lambda d: d["decoder"].update(spec["decoder_flags"]))
    for t in spec["added"]:
        if t.special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
    if spec["post_processor"] is not None:
        tok.post_processor = spec["post_processor"](tok)
    return tok


def add_unmerged_vocab(tok, words):
    """Appends the byte-level form of each word to the model vocab (no merge)."""
    to_chars = bytes_to_unicode()
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for w in words:
        key = "".join(to_chars[b] for b in w.encode("utf-8"))
        assert key not in vocab, f"{w!r} is in the trained vocab already"
        assert len(tok.model.tokenize(key)) > 1, f"merges build {w!r}"
        vocab[key] = len(vocab)
    return Tokenizer.from_str(json.dumps(data))


def pad_vocab(tok, n):
    """Grows the model vocab to n tokens: each new token joins two earlier ones
    (a merge ranked after every trained one), drawn seeded among the shorter
    tokens so that the text of the cases meets many of them."""
    rng = random.Random(SEED_LARGE)
    data = json.loads(tok.to_str())
    vocab, merges = data["model"]["vocab"], data["model"]["merges"]
    pool = sorted(vocab, key=lambda t: (len(t), vocab[t]))[:4096]
    while len(vocab) < n:
        a, b = rng.choice(pool), rng.choice(pool)
        if a + b in vocab or len(a + b) > 12:
            continue
        merges.append([a, b])
        vocab[a + b] = len(vocab)
        if len(pool) < 65536:
            pool.append(a + b)
    return Tokenizer.from_str(json.dumps(data))


def legacy_merges(path):
    """Rewrite tokenizer.json's merges from [["a", "b"], ...] to ["a b", ...], the
    serialisation of tokenizers < 0.20 that most published GPT-2-era files have."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    merges = data["model"]["merges"]
    assert all(isinstance(m, list) and len(m) == 2 and " " not in m[0] + m[1] for m in merges)
    data["model"]["merges"] = [f"{a} {b}" for a, b in merges]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)


def added_tokens_decoder(tok):
    out = {}
    for i, t in sorted(tok.get_added_tokens_decoder().items()):
        out[str(i)] = dict(content=t.content, lstrip=t.lstrip, normalized=t.normalized,
                           rstrip=t.rstrip, single_word=t.single_word, special=t.special)
    return out


def write_config(tok, spec, path):
    cfg = dict(spec["config"])
    cfg["added_tokens_decoder"] = added_tokens_decoder(tok)
    cfg["clean_up_tokenization_spaces"] = False
    cfg["split_special_tokens"] = False
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False, sort_keys=True)
        f.write("\n")


# ---------------------------------------------------------------- the inputs

def u(s):
    return s.encode("utf-8")


def random_code_point(rng):
    """Any scalar value: a plane uniformly, then a code point in it (surrogates
    redrawn). Most are unassigned; planes 15-16 are private use."""
    while True:
        plane = rng.randrange(17)
        cp = (plane << 16) | rng.randrange(0x10000)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def random_utf8(rng):
    parts = []
    for _ in range(rng.randrange(1, 24)):
        r = rng.random()
        if r < 0.55:
            parts.append(random_code_point(rng))
        elif r < 0.7:
            parts.append(rng.choice(" \t\n"))
        elif r < 0.85:
            parts.append(rng.choice("abcXYZ019'.,"))
        else:
            parts.append(chr(rng.randrange(0x80, 0x800)))  # two-byte range, incl. C1 controls
    return u("".join(parts))


INVALID_PIECES = [
    b"\x80", b"\xbf", b"\x80\x80\x80",           # lone continuation bytes
    b"\xc0", b"\xc1", b"\xc0\xaf", b"\xc1\xbf",   # C0/C1 leads (always overlong)
    b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf",         # overlong 3- and 4-byte
    b"\xe0\x9f\xbf",                              # overlong (E0 needs A0..BF next)
    b"\xed\xa0\x80", b"\xed\xbf\xbf",             # encoded surrogates
    b"\xed\xa0\xbd\xed\xb8\x80",                  # CESU-8 surrogate pair (U+1F600)
    b"\xf4\x90\x80\x80",                          # above U+10FFFF
    b"\xf5", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80", b"\xfe", b"\xff",
    b"\xe4\xbd", b"\xf0\x9f\x98", b"\xf0\x9f", b"\xc3",  # truncated sequences
    b"\xe4\xbda", b"\xf0\x9f\x98 ",               # truncated, then ASCII
    b"\xef\xbb\xbf",                              # BOM (valid)
    b"\xef\xbf\xbe", b"\xf4\x8f\xbf\xbf",         # noncharacters (valid)
]


def invalid_mix(rng):
    valid = ["hello", " world", "日本", "é", "😀", "\n", "  ", "<|im_end|>", "don't", "42"]
    out = b""
    for _ in range(rng.randrange(2, 7)):
        if rng.random() < 0.5:
            out += rng.choice(INVALID_PIECES)
        else:
            out += u(rng.choice(valid))
    return out


def corpus_slices(rng, rel, n, lo, hi):
    data = read_repo_text(rel).encode("utf-8")
    out = []
    for _ in range(n):
        length = rng.randrange(lo, hi)
        start = rng.randrange(0, len(data) - length)
        out.append(data[start:start + length])
    return out


def build_cases():
    """(kind, raw bytes) in a fixed order; seeded."""
    rng = random.Random(SEED_CASES)
    cases = []

    def add(kind, items):
        for x in items:
            cases.append((kind, x if isinstance(x, bytes) else u(x)))

    add("empty", [""])
    add("single", ["a", "Z", " ", "\t", "\n", "\r", "0", "'", "!", "~", "\x00", "\x7f", "é",
                   "\u00a0", "中", "😀", "\U0010ffff", "\ufffd", "\u0301", "\u200d", "\ufeff", "ſ"])

    add("prose", corpus_slices(rng, "data/demo/licenses.txt", 16, 40, 700))
    add("prose", corpus_slices(rng, "data/demo/eval.txt", 6, 40, 700))
    add("prose", [
        "The quick brown fox jumps over the lazy dog.",
        "  Leading spaces, and trailing ones.   ",
        "Hello, World! How are you today?? I'm fine -- thanks...",
        "e-mail: someone@example.com; URL: https://example.org/a/b?x=1&y=2#top",
        "\"Quoted\" and 'single-quoted' text; (parentheses) [brackets] {braces} <angles>",
    ])

    add("code", [
        "def f(x):\n    return x * 2\n",
        "if (a && b) {\n\treturn -1;\n}\n",
        "\tint x = 0;\t// tab-indented\n\t\tx++;\n",
        "for i in range(10):\n        print(i)  \n\n\n",
        "#include <stdio.h>\nint main(void){printf(\"%d\\n\", 42);}\n",
        "    \n  \t \n\t\t\t",
        "x=[1,2,3];y={'a':1,\"b\":2}\n",
        "    def __init__(self, *args, **kwargs):\r\n        super().__init__()\r\n",
        "SELECT * FROM t WHERE a <> 'x' AND b >= 10;  -- comment",
        "lambda: (yield)  # noqa: E731\n\n",
        "<div class=\"x\">&amp; &lt;tag&gt;</div>",
    ])
    code = MULTILINGUAL.split("\n\u81ea")[0].encode("utf-8")  # the code part, up to the Chinese
    for _ in range(4):
        length = rng.randrange(60, 300)
        start = rng.randrange(0, len(code) - length)
        add("code", [code[start:start + length]])

    add("cjk", [
        "自然语言处理是人工智能的一个重要分支。",
        "我们今天在北京开会，讨论了模型。",
        "繁體中文：這個詞彙表",
        "東京は日本の首都です。ひらがなカタカナ",
        "ｶﾀｶﾅ半角とﾟﾞ",
        "한국어 문장입니다. 서울",
        "\u1112\u1161\u11ab\u1100\u1173\u11af",  # 한글 as conjoining jamo (NFC composes)
        "\u1100\u1161 \u110b\u1175",  # 가 이 decomposed
        "中文English混合123文本",
        "\u3000全角スペース\u3000と、句読点。",
        "𠀀𠀁𪚥 (CJK Extension B)",
        "ㄱㄴㄷ ㅏㅑ (compatibility jamo)",
        "漢字\n改行\r\n漢字",
    ])

    add("emoji", [
        "😀😂🤖🚀",
        "👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈",
        "🇺🇸🇯🇵🇫🇷🇩🇪",
        "👍🏽👍🏿👋🏻",
        "❤️ ❤ ☕️ ✅",
        "Ship it 🚀!!",
        "🙂🙂🙂🙂🙂🙂🙂🙂",
        "#️⃣ 1️⃣ *️⃣",
        "🏴󠁧󠁢󠁳󠁣󠁴󠁿 (tag sequence)",
        "a😀b c😀 😀d",
    ])

    add("marks", [
        "cafe\u0301 vs caf\u00e9",
        "Vie\u0323\u0302t Nam, Tie\u0302\u0301ng Vie\u0323\u0302t",
        "Tiếng Việt: người, được, những",
        "A\u030angstro\u0308m",
        "\u212bngstr\u00f6m",
        "e\u0301\u0301\u0301\u0301 stacked",
        "ﬁnal ﬂow ﬃ ﬀ ﬅ",
        "Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３",
        "x² + y³ = z⁴, H₂O",
        "ℌ ℍ ℕ ℤ ℝ",
        "① ② ⑳ ㉑",
        "½ ¼ ⅞",
        "㎏ ㎞ ㍱ ㌀",
        "Ⅻ ⅻ Ⅳ",
        "µ vs μ, Ω vs Ω, K vs K",
        "ǅ ǈ ǋ",
        "\u0958\u0959 (Devanagari composition exclusions)",
        "\u1e9b\u0323",
        "\u00c5\u0301 a\u0328\u0301",
        "ﷺ ﷻ",
        "...\u2026 \u2024\u2025",
        "Dž dž DŽ",
        "\u0345\u0301 \u0301\u0345",
        # Decompositions newer than tokenizers' normalization tables (its
        # unicode-normalization-alignments crate): Unicode 12.0 U+1F16C, 12.1 U+32FF,
        # 13.0 U+1FBF0 and the Dives Akuru pair U+11935 U+11930 (NFC: U+11938),
        # 14.0 U+A7F2 and U+10781: tokenizers leaves them as they are.
        "\U0001f16c \u32ff \U0001fbf0\U0001fbf9 \ua7f2 \U00010781",
        "\U00011935\U00011930 \U00011938",
        # Letters and digits of Unicode 16.0 (Oniguruma's \p{L} and \p{N} know them)
        "\u1c89\u1c8a \U000105c0\U000105c1 \U00010d40\U00010d41 x\U000116d0y",
    ])

    add("whitespace", [
        "a\tb\t\tc",
        "line1\r\nline2\r\n",
        "a     b",
        "trailing   ",
        "   leading",
        "a\u00a0b\u00a0\u00a0c",
        "a\u3000b",
        "a\u2028b\u2029c",
        "a\u0085b",
        "a\u000bb\u000cc",
        "a\u2000\u2001\u2002\u2003\u2009\u200a b",
        "a\u200bb\u2060c\ufeffd",
        "a\u180eb",
        "\n\n\n",
        "\r\r\n\n\r",
        " \n \n ",
        "x  \n  y",
        "\t\n\t\n",
        "end\n",
        "a \u00a0 b \u3000 c",
        "    ",
    ])

    digits = [str(rng.randrange(10 ** (n - 1), 10 ** n)) for n in range(1, 21)]
    add("digits", digits)
    add("digits", [
        "abc123def4567", "v1.2.3-rc10", "0x1F2E3D", "3.14159265358979",
        "2024-06-30 12:34:56", "1,234,567.89", "x" + "9" * 13 + "y", "١٢٣٤٥ ۱۲۳ १२३",
        "𝟏𝟐𝟑 ⁰¹²", "12 345 6789",
    ])

    add("contractions", [
        "I'M HERE", "don't won't can't", "They'Ll", "we'VE you'Re she'S it'D",
        "I'm I'M i'm", "'s 's 'S", "rock'n'roll", "o'clock", "It'ſt", "x'ﬅ",
        "don’t (curly)", "'''", "L'école", "he'LL'S",
    ])

    # Every special and added token of the three tokenizers, in each of them.
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
              "<lstrip>", "<rstrip>", "xyzzy", "Ångström", "naïve",
              "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
              "<|end_header_id|>", "<|eot_id|>", "ﬁxme", "New York"]
    for t in tokens:
        add("added", [t, "x" + t + "y", "Hello " + t + " world", "  " + t + "\n"])
    add("added", [
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        "<|im_end|><|im_end|>", "<|im_end|", "<|im_end|>>", "<<|im_end|>",
        "<|endoftext|> <|endoftext|>",
        "<think>\nreasoning\n</think>\n\nanswer",
        # lstrip
        "a  \t<lstrip>b", "a<lstrip>", "\n\n<lstrip>", "x\u3000<lstrip>", "x\u00a0<lstrip>",
        "<think>   <lstrip>", "<rstrip>   <lstrip>", "<lstrip><lstrip>", "<lstrip>  ",
        # rstrip
        "<rstrip>   x", "<rstrip>\n\nx", "<rstrip>\u2028x", "x <rstrip>", "<rstrip>",
        # single_word
        "xyzzy xyzzy", "axyzzy", "xyzzyb", "_xyzzy", "xyzzy_", "1xyzzy", "xyzzy-x",
        "(xyzzy)", "xyzzyxyzzy", "e\u0301xyzzy", "xyzzy\u0301", "éxyzzy", "中xyzzy",
        "xyzzy.", "XYZZY",
        # normalized / not normalized
        "A\u030angstro\u0308m", "\u212bngstr\u00f6m", "ångström", "Ångströms", "xÅngström",
        "nai\u0308ve", "NAÏVE",
        "fixme", "ﬁxme!", "FIXME", "New  York", "New\u00a0York", "new york",
    ])

    # Llama 3's extra vocab entries (ignore_merges): whole pre-tokens, and near misses.
    add("ignore_merges", [" quux", "quux", "a quux b", " quuxx", "foobar", " foobar", "foobarx",
                          " 自然语言处理", "自然语言处理", "我们 自然语言处理。", "🤖🚀", "🤖🚀🤖🚀", " 🤖🚀"])

    add("random_utf8", [random_utf8(rng) for _ in range(24)])
    add("invalid", INVALID_PIECES)
    add("invalid", [invalid_mix(rng) for _ in range(12)])
    add("invalid", [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 24))) for _ in range(8)])
    return cases


def decode_id_sequences(tok):
    """Seeded id sequences for decode alone: byte tokens that split characters,
    added tokens anywhere, random ids."""
    rng = random.Random(SEED_DECODE)
    n = tok.get_vocab_size(with_added_tokens=True)
    byte_ids = [tok.token_to_id(c) for c in bytes_to_unicode()]  # alphabet() is a set: no order
    added = sorted(tok.get_added_tokens_decoder())
    seqs = [[], [tok.token_to_id("Ġ")]]
    for _ in range(12):
        seqs.append([rng.choice(byte_ids) for _ in range(rng.randrange(1, 10))])
    for _ in range(12):
        seqs.append([rng.randrange(n) for _ in range(rng.randrange(1, 20))])
    for _ in range(8):
        s = [rng.randrange(n) for _ in range(rng.randrange(0, 8))]
        for _ in range(rng.randrange(1, 4)):
            s.insert(rng.randrange(len(s) + 1), rng.choice(added))
        seqs.append(s)
    # ids past the vocabulary: decode leaves them out, silently
    seqs.append([rng.randrange(n), n, rng.randrange(n), n + 1000, 2 ** 31 - 1])
    return seqs


# ---------------------------------------------------------------- writing

def expected_roundtrip(tok, text):
    n = tok.normalizer
    return n.normalize_str(text) if n is not None else text


def encode_cases(tok, cases):
    lines, mismatches = [], []
    for i, (kind, raw) in enumerate(cases):
        text = raw.decode("utf-8", "replace")
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_special = tok.encode(text, add_special_tokens=True).ids
        dec = tok.decode(ids, skip_special_tokens=False)
        dec_skip = tok.decode(ids, skip_special_tokens=True)
        lines.append(dict(kind=kind, hex=raw.hex(), ids=ids, ids_special=ids_special,
                          decoded_hex=dec.encode("utf-8").hex(),
                          decoded_skip_hex=dec_skip.encode("utf-8").hex()))
        if dec != expected_roundtrip(tok, text):
            mismatches.append(dict(line=i + 1, kind=kind, text=text, decoded=dec))
    return lines, mismatches


def write_jsonl(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for obj in lines:
            f.write(json.dumps(obj, ensure_ascii=True, separators=(",", ":")) + "\n")


def with_json_edit(tok, edit):
    data = json.loads(tok.to_str())
    edit(data)
    return Tokenizer.from_str(json.dumps(data))


def check_variants(name, tok, texts):
    """What a C reimplementation may take for granted: settings whose change does
    or does not move any id on these inputs."""
    found = {}

    def differing(other):
        n = 0
        for t in texts:
            if tok.encode(t, add_special_tokens=True).ids != other.encode(t, add_special_tokens=True).ids:
                n += 1
        return n

    def set_ignore_merges(v):
        return lambda d: d["model"].__setitem__("ignore_merges", v)

    found["ignore_merges_flipped_changes_ids_in"] = differing(
        with_json_edit(tok, set_ignore_merges(not tok.model.ignore_merges)))
    if name == "llama3":
        def trim(d):
            d["pre_tokenizer"]["pretokenizers"][1]["trim_offsets"] = False
        found["pre_tokenizer_trim_offsets_false_changes_ids_in"] = differing(with_json_edit(tok, trim))
    return found


def ignore_merges_words(tok):
    """Pre-tokens where ignore_merges matters: the word is itself a vocab entry but
    the merges split it differently."""
    vocab = with_json_edit(tok, lambda d: d["model"].__setitem__("ignore_merges", False)).model
    words = []
    seen = set()
    for text in training_texts():
        for piece, _ in tok.pre_tokenizer.pre_tokenize_str(
                tok.normalizer.normalize_str(text) if tok.normalizer else text):
            if piece in seen:
                continue
            seen.add(piece)
            if vocab.token_to_id(piece) is None:
                continue
            ids = [t.id for t in vocab.tokenize(piece)]
            if len(ids) != 1:
                words.append(piece)
    return words


def compare_lossy(tok, cases):
    """Python's 'replace' (how the cases' text is made from bytes) against the
    ByteLevel decoder's lossy UTF-8 (Rust's from_utf8_lossy): decode the raw bytes
    as byte tokens and compare. Returns the count of inputs where they differ."""
    byte_id = {}
    for b, ch in enumerate(bytes_to_unicode()):
        byte_id[b] = tok.token_to_id(ch)
    diff = 0
    for _, raw in cases:
        if tok.decode([byte_id[b] for b in raw]) != raw.decode("utf-8", "replace"):
            diff += 1
    return diff


def bytes_to_unicode():
    """GPT-2's byte -> printable character map, indexed by byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def fresh_dir(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)


def gen_one(out, name, spec, cases):
    fdir = os.path.join(out, name)
    fresh_dir(fdir)
    tok = train(spec)
    path = os.path.join(fdir, "tokenizer.json")
    tok.save(path)
    info = {}
    corpus = training_texts()
    if name == "gpt2":
        legacy_merges(path)
        reread = Tokenizer.from_file(path)
        same = all(reread.encode(t).ids == tok.encode(t).ids for t in corpus) and all(
            reread.encode(r.decode("utf-8", "replace")).ids ==
            tok.encode(r.decode("utf-8", "replace")).ids for _, r in cases)
        if not same:
            sys.exit("gpt2: the legacy-merges tokenizer.json encodes differently")
        info["legacy_merges_same_ids"] = same
    tok = Tokenizer.from_file(path)  # everything below from the file the C tests read
    assert tok.get_vocab_size(with_added_tokens=False) == VOCAB_SIZE + len(spec.get("extra_vocab", []))
    write_config(tok, spec, os.path.join(fdir, "tokenizer_config.json"))

    lines, mismatches = encode_cases(tok, cases)
    write_jsonl(os.path.join(fdir, "cases.jsonl"), lines)
    dec_lines = []
    for ids in decode_id_sequences(tok):
        dec_lines.append(dict(ids=ids,
                              decoded_hex=tok.decode(ids, skip_special_tokens=False).encode("utf-8").hex(),
                              decoded_skip_hex=tok.decode(ids, skip_special_tokens=True).encode("utf-8").hex()))
    write_jsonl(os.path.join(fdir, "decode_cases.jsonl"), dec_lines)

    texts = [r.decode("utf-8", "replace") for _, r in cases] + corpus
    info.update(check_variants(name, tok, texts))
    info["ignore_merges_words_in_training_text"] = len(ignore_merges_words(tok))
    info["cases"] = len(lines)
    info["roundtrip_mismatch_lines"] = [m["line"] for m in mismatches]
    if tok.normalizer is not None:
        info["normalizer_differs_from_python_unicodedata_lines"] = [
            i + 1 for i, (_, r) in enumerate(cases)
            if tok.normalizer.normalize_str(r.decode("utf-8", "replace")) != unicodedata.normalize(
                type(tok.normalizer).__name__, r.decode("utf-8", "replace"))]
    info["python_replace_vs_rust_lossy_differ"] = compare_lossy(tok, cases)
    if name == "qwen3_5":
        # What \p{M} changes: the lines whose pre-tokens Qwen2's regex splits otherwise.
        q2 = pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False)
        q35 = pre_tokenizers.Split(Regex(QWEN3_5_PATTERN), behavior="isolated", invert=False)
        info["splits_differ_from_qwen2_regex_lines"] = [
            i + 1 for i, (_, r) in enumerate(cases)
            if q2.pre_tokenize_str(tok.normalizer.normalize_str(r.decode("utf-8", "replace"))) !=
            q35.pre_tokenize_str(tok.normalizer.normalize_str(r.decode("utf-8", "replace")))]

    print(f"{name}: {len(lines)} cases, {len(dec_lines)} decode cases, "
          f"{len(mismatches)} where decode(encode(text)) != normalize(text)")
    for m in mismatches:
        print(f"  line {m['line']:>3} {m['kind']:<12} text={m['text']!r:.70} decoded={m['decoded']!r:.70}")
    for k, v in info.items():
        if k not in ("roundtrip_mismatch_lines", "cases"):
            print(f"  {k}: {v}")
    return info


def gen_large(out):
    """The qwen3_5 tokenizer at Qwen3.5's vocabulary size, with its cases and
    decode cases, into out (not committed: about 10 MB; test_tok_parity makes it)."""
    spec = tok_spec()["qwen3_5"]
    os.makedirs(out, exist_ok=True)
    tok = train(spec, pad_to=LARGE_VOCAB)
    path = os.path.join(out, "tokenizer.json")
    tok.save(path)
    tok = Tokenizer.from_file(path)
    assert tok.get_vocab_size(with_added_tokens=False) == LARGE_VOCAB
    write_config(tok, spec, os.path.join(out, "tokenizer_config.json"))
    # Besides the shared cases, text made of the grown tokens' bytes (ids up to
    # the last), where the late merges must apply.
    to_byte = {c: b for b, c in enumerate(bytes_to_unicode())}
    rng = random.Random(SEED_LARGE + 1)
    grown = [t for t, i in tok.get_vocab(with_added_tokens=False).items() if i >= LARGE_VOCAB - 50000]
    cases = build_cases() + [("large", b"".join(bytes(to_byte[ch] for ch in rng.choice(grown))
                                                for _ in range(rng.randrange(1, 12)))) for _ in range(60)]
    lines, _ = encode_cases(tok, cases)
    write_jsonl(os.path.join(out, "cases.jsonl"), lines)
    write_jsonl(os.path.join(out, "decode_cases.jsonl"), [
        dict(ids=ids, decoded_hex=tok.decode(ids, skip_special_tokens=False).encode("utf-8").hex(),
             decoded_skip_hex=tok.decode(ids, skip_special_tokens=True).encode("utf-8").hex())
        for ids in decode_id_sequences(tok)])
    big = sum(1 for line in lines for i in line["ids"] if i >= VOCAB_SIZE)
    top = sum(1 for line in lines for i in line["ids"] if LARGE_VOCAB - 50000 <= i < LARGE_VOCAB)
    print(f"{out}: {tok.get_vocab_size(with_added_tokens=True)} tokens; the cases use {big} ids past the "
          f"trained {VOCAB_SIZE}, {top} of the last 50000")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: tests/fixtures/tok)")
    ap.add_argument("--large", metavar="DIR", help="write only the qwen3_5 tokenizer at Qwen3.5's "
                    f"vocabulary size ({LARGE_VOCAB} + its added tokens) and its cases into DIR")
    args = ap.parse_args()
    if args.large:
        gen_large(args.large)
        return
    os.makedirs(args.out, exist_ok=True)

    cases = build_cases()
    specs = tok_spec()
    findings = {}
    for name, spec in specs.items():
        findings[name] = gen_one(args.out, name, spec, cases)

    meta = {
        "generated_by": "tests/ref/gen_tok_fixtures.py",
        "tokenizers_version": tokenizers.__version__,
        "python_unicodedata_version": unicodedata.unidata_version,
        "vocab_size": VOCAB_SIZE,
        "training_text": list(TRAIN_FILES) + [f"the script's MULTILINGUAL text, {MULTILINGUAL_REPEAT} times"],
        "seeds": {"cases": SEED_CASES, "decode_cases": SEED_DECODE},
        "cases_text": "text = bytes.fromhex(hex).decode('utf-8', 'replace') (Python: one U+FFFD per "
                      "maximal invalid subpart); ids = encode(text, add_special_tokens=False); "
                      "ids_special = encode(text, add_special_tokens=True); decoded_hex = "
                      "decode(ids, skip_special_tokens=False) as UTF-8; decoded_skip_hex the same "
                      "with skip_special_tokens=True",
        "findings": findings,
    }
    try:
        import transformers
        meta["transformers_version"] = transformers.__version__
    except ImportError:
        pass
    with open(os.path.join(args.out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")
    report(args.out, list(specs), ["ref.json"])


if __name__ == "__main__":
    main()
