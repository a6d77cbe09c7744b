#!/usr/bin/env python3
"""Write the chat-template reference fixtures: what transformers' apply_chat_template
makes of ~30 conversations with the ChatML (Qwen2.5-style) and Llama-3-Instruct
templates of tests/fixtures/tok/{qwen2,llama3}.

Reads the tokenizer directories gen_tok_fixtures.py wrote (run that first) and writes
tests/fixtures/chat/{chatml,llama3}.jsonl and the two templates, byte for byte as
their tokenizer_config.json holds them, as {chatml,llama3}.jinja. Per conversation:

  messages          the input
  text, ids         apply_chat_template(messages): the rendered string and its ids
  assistant_masks   return_assistant_tokens_mask=True: 1 on every token whose offsets
                    overlap a {% generation %} span (see GENERATION_TEMPLATES)
  gen_prompt_text, gen_prompt_ids   the same with add_generation_prompt=True
  ids_sanitized     sanitize_control_tokens=True: special-token strings inside the
                    messages encoded as plain text
  continue_text, continue_ids      continue_final_message=True (only where the last
                    message is the assistant's)

apply_chat_template has no prompt/completion form in transformers 5.24, so there are
no such examples; continue_final_message (a prefilled assistant turn) is the nearest.
Deterministic: a rerun rewrites identical bytes. See tests/ref/README.md.
Usage: .venv/bin/python3 tests/ref/gen_chat_fixtures.py [--tok DIR] [--out DIR]
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_env import report, require  # noqa: E402

_, transformers = require("gen_chat_fixtures.py", "tokenizers", "jinja2")
import jinja2  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

from gen_tok_fixtures import CHATML_TEMPLATE, LLAMA3_TEMPLATE  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEFAULT_TOK = os.path.join(ROOT, "tests", "fixtures", "tok")
DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures", "chat")

# The templates of tokenizer_config.json (gen_tok_fixtures.py's, the one place
# they are written) with each assistant message's content and its end marker
# inside {% generation %} ... {% endgeneration %}: ChatML's content + '<|im_end|>'
# (not the '\n' after it), Llama 3's trimmed content + '<|eot_id|>'. main() checks
# that they render exactly what the plain templates render.


def tagged(template, plain, with_generation):
    """template with its one occurrence of plain replaced."""
    assert template.count(plain) == 1, plain
    return template.replace(plain, with_generation)


GENERATION_TEMPLATES = {
    "chatml": tagged(
        CHATML_TEMPLATE,
        "    {%- if not (message['role'] == 'system' and loop.first) %}\n",
        "    {%- if message['role'] == 'assistant' %}\n"
        "        {{- '<|im_start|>' + message['role'] + '\\n' }}\n"
        "        {%- generation %}\n"
        "            {{- message['content'] + '<|im_end|>' }}\n"
        "        {%- endgeneration %}\n"
        "        {{- '\\n' }}\n"
        "    {%- elif not (message['role'] == 'system' and loop.first) %}\n",
    ),
    "llama3": tagged(
        LLAMA3_TEMPLATE,
        "'<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
        "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
        "{{ content }}",
        "'<|end_header_id|>\n\n' %}"
        "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
        "{{ content }}"
        "{% if message['role'] == 'assistant' %}"
        "{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
        "{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}",
    ),
}

# fixture name -> tokenizer directory; chatml_qwen3_5 is ChatML through the
# Qwen3.5-style tokenizer (its regex, its <think> markers as added tokens).
FAMILIES = {"chatml": "qwen2", "chatml_qwen3_5": "qwen3_5", "llama3": "llama3"}

SYS = "You are a careful assistant. Answer briefly."
LONG = ("The licenses for most software and other practical works are designed to take away "
        "your freedom to share and change the works. By contrast, the GNU General Public "
        "License is intended to guarantee your freedom to share and change all versions of a "
        "program--to make sure it remains free software for all its users.")
CODE = "def add(a, b):\n\treturn a + b\n\nprint(add(2, 3))  # 5\n"


def M(role, content):
    return {"role": role, "content": content}


def conversations():
    return [
        [M("user", "Hello!")],
        [M("user", "Hello!"), M("assistant", "Hi! How can I help?")],
        [M("system", SYS), M("user", "What is 2+2?"), M("assistant", "4")],
        [M("system", SYS), M("user", "What is 2+2?")],
        [M("system", SYS), M("user", "Name a colour."), M("assistant", "Blue."),
         M("user", "Another?"), M("assistant", "Green."), M("user", "One more."),
         M("assistant", "Red.")],
        [M("user", "Name a colour."), M("assistant", "Blue."), M("user", "Another?")],
        [M("user", "Write a function that adds two numbers."),
         M("assistant", "Here it is:\n\n```python\n" + CODE + "```\n\nCall it with two numbers.")],
        [M("user", "  padded question?  \n"), M("assistant", "\n\n  padded answer.  \n\n")],
        [M("system", "\n  System with spaces.\t\n"), M("user", "\tTabbed\t"),
         M("assistant", " leading space")],
        [M("user", "用中文回答：天空是什么颜色？"), M("assistant", "天空是蓝色的。☀️")],
        [M("user", "日本語で答えて。"), M("assistant", "はい、わかりました。"),
         M("user", "한국어로도 말해 주세요.")],
        [M("user", "React with emoji 👍"), M("assistant", "🎉🚀👩‍💻🇯🇵👍🏽")],
        [M("user", "Say nothing."), M("assistant", "")],
        [M("user", ""), M("assistant", "You sent an empty message.")],
        [M("user", "What does <|im_end|> mean?"),
         M("assistant", "It ends a turn: <|im_end|> and <|im_start|> frame messages.")],
        [M("user", "And <|eot_id|>?"),
         M("assistant", "It ends a turn in Llama 3: <|eot_id|><|start_header_id|>user<|end_header_id|>")],
        [M("user", "Print <|endoftext|> and <|begin_of_text|>."),
         M("assistant", "<|endoftext|><|begin_of_text|>")],
        [M("user", "Think first."),
         M("assistant", "<think>\nThe user wants reasoning.\n</think>\n\nDone.")],
        [M("user", "   \n  ")],
        [M("system", "Only a system prompt.")],
        [M("user", "Two answers?"), M("assistant", "First."), M("assistant", "Second.")],
        [M("user", "Hi"), M("system", "A system message after the first turn."),
         M("assistant", "Noted.")],
        [M("user", "line one\r\nline two\r\n\ttabbed\n"), M("assistant", "a\r\nb")],
        [M("user", "Render {{ messages }} and {% if true %}x{% endif %} literally."),
         M("assistant", "{{ '{{' }} is Jinja, but here it is just text: {% raw %}")],
        [M("user", "Quotes ' \" and backslashes \\n \\t \\\\"),
         M("assistant", "Escapes stay: \\n is two characters.")],
        [M("user", "Summarise the GPL preamble."), M("assistant", LONG)],
        [M("user", "\n\nLeading newlines"), M("assistant", "\n\nAnswer after blank lines")],
        [M("user", "Trailing spaces please"), M("assistant", "Sure.   ")],
        [M("tool", "{\"temperature\": 21.5, \"unit\": \"C\"}"), M("user", "Is it warm?"),
         M("assistant", "Yes, 21.5 °C.")],
        [M("user", "cafe\u0301 vs café, A\u030angstro\u0308m, ﬁ, ①"),
         M("assistant", "NFC composes e\u0301; NFKC would fold ﬁ.")],
        [M("user", "a\u00a0b\u2028c\u3000d\u200be"), M("assistant", "Odd\u00a0spaces\u2029kept.")],
    ]


def load(tok_dir):
    tok = PreTrainedTokenizerFast.from_pretrained(tok_dir)
    raw = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        template = json.load(f)["chat_template"]
    return tok, raw, template


def render_one(tok, raw, template, tagged, messages):
    text = tok.apply_chat_template(messages, tokenize=False)
    gen_text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    for agp, want in ((False, text), (True, gen_text)):
        got = tok.apply_chat_template(messages, tokenize=False, chat_template=tagged,
                                      add_generation_prompt=agp)
        if got != want:
            sys.exit(f"the {{% generation %}} template renders differently for {messages!r} "
                     f"(add_generation_prompt={agp}):\n{got!r}\n{want!r}")
    out = tok.apply_chat_template(messages, chat_template=tagged, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)
    ids = list(out["input_ids"])
    mask = list(out["assistant_masks"])
    # The ids are the rendered text's encoding without post-processing (no BOS added).
    assert ids == raw.encode(text, add_special_tokens=False).ids
    assert ids == tok.apply_chat_template(messages, tokenize=True, return_dict=False)
    gen_ids = tok.apply_chat_template(messages, tokenize=True, return_dict=False,
                                      add_generation_prompt=True)
    assert gen_ids == raw.encode(gen_text, add_special_tokens=False).ids
    sanitized = tok.apply_chat_template(messages, tokenize=True, return_dict=False,
                                        sanitize_control_tokens=True)
    rec = dict(messages=messages, text=text, ids=ids, assistant_masks=mask,
               gen_prompt_text=gen_text, gen_prompt_ids=gen_ids, ids_sanitized=sanitized)
    if messages[-1]["role"] == "assistant":
        rec["continue_text"] = tok.apply_chat_template(messages, tokenize=False,
                                                       continue_final_message=True)
        rec["continue_ids"] = tok.apply_chat_template(messages, tokenize=True, return_dict=False,
                                                      continue_final_message=True)
        assert rec["continue_ids"] == raw.encode(rec["continue_text"], add_special_tokens=False).ids
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tok", default=DEFAULT_TOK, help="tokenizer fixtures (default: tests/fixtures/tok)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: tests/fixtures/chat)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    written = []
    for name, tok_name in FAMILIES.items():
        tok, raw, template = load(os.path.join(args.tok, tok_name))
        jinja_path = os.path.join(args.out, name + ".jinja")
        with open(jinja_path, "w", encoding="utf-8", newline="") as f:
            f.write(template)
        recs = [render_one(tok, raw, template, GENERATION_TEMPLATES[name.split("_")[0]], c)
                for c in conversations()]
        path = os.path.join(args.out, name + ".jsonl")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            for r in recs:
                f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
        masked = sum(sum(r["assistant_masks"]) for r in recs)
        differ = sum(r["ids_sanitized"] != r["ids"] for r in recs)
        print(f"{name}: {len(recs)} conversations, {masked} assistant tokens, "
              f"{differ} where sanitize_control_tokens changes the ids, "
              f"{sum('continue_ids' in r for r in recs)} with continue_final_message")
        written += [jinja_path, path]

    meta = {
        "generated_by": "tests/ref/gen_chat_fixtures.py",
        "transformers_version": transformers.__version__,
        "tokenizers_version": tokenizers.__version__,
        "jinja2_version": jinja2.__version__,
        "tokenizers_from": {k: f"tests/fixtures/tok/{v}" for k, v in FAMILIES.items()},
        "jinja_environment": "transformers' ImmutableSandboxedEnvironment(trim_blocks=True, "
                             "lstrip_blocks=True), extensions: generation tag, loopcontrols",
        "generation_templates": GENERATION_TEMPLATES,
    }
    ref = os.path.join(args.out, "ref.json")
    with open(ref, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    report(args.out, [], [os.path.relpath(p, args.out) for p in written + [ref]])


if __name__ == "__main__":
    main()
