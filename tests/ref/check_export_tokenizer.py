#!/usr/bin/env python3
"""Check that a model directory traind exported from SOURCE_DIR can be prompted
the way SOURCE_DIR could: the tokenizer and generation files came along byte for
byte, config.json keeps the source's token ids, and transformers' AutoTokenizer
and AutoModelForCausalLM load the export and generate greedily.

usage: check_export_tokenizer.py EXPORT_DIR SOURCE_DIR

Prints what it checked; exits 0 when everything holds, 1 otherwise, and 3 when
torch or transformers cannot be imported (hf_env.py): the test must not pass
untested.
"""
import filecmp
import json
import os
import sys

from hf_env import require

# The files engine/model/hf_io.c copies, when the source has them.
SIDE_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
              "merges.txt", "tokenizer.model", "added_tokens.json", "generation_config.json",
              "chat_template.jinja")
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")
PROMPT = "This program is free software"
NEW_TOKENS = 4


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def greedy(model, ids, eos, steps):
    """Greedy decoding by hand, to hold generate() to: argmax of the last logits,
    stopping after an eos token."""
    import torch
    for _ in range(steps):
        with torch.no_grad():
            nxt = model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        if nxt.item() in eos:
            break
    return ids


def main(argv):
    if len(argv) != 3:
        print("usage: check_export_tokenizer.py EXPORT_DIR SOURCE_DIR", file=sys.stderr)
        return 2
    export, source = argv[1], argv[2]
    torch, transformers = require("check_export_tokenizer.py")
    failed = []

    copied = [n for n in SIDE_FILES if os.path.exists(os.path.join(source, n))]
    for name in copied:
        out = os.path.join(export, name)
        if not os.path.isfile(out) or not filecmp.cmp(os.path.join(source, name), out, shallow=False):
            failed.append(f"{name}: not copied byte for byte")
    if "tokenizer.json" not in copied:
        failed.append(f"{source} has no tokenizer.json: nothing to check")

    src_cfg = read_json(os.path.join(source, "config.json"))
    out_cfg = read_json(os.path.join(export, "config.json"))
    config = transformers.AutoConfig.from_pretrained(export)
    for key in TOKEN_IDS:
        if out_cfg.get(key) != src_cfg.get(key) or getattr(config, key, None) != src_cfg.get(key):
            failed.append(f"config.json {key}: {out_cfg.get(key)!r} (transformers reads "
                          f"{getattr(config, key, None)!r}), the source has {src_cfg.get(key)!r}")

    tok = transformers.AutoTokenizer.from_pretrained(export)
    ref_tok = transformers.AutoTokenizer.from_pretrained(source)
    enc = tok(PROMPT, return_tensors="pt")
    if enc.input_ids.tolist() != ref_tok(PROMPT, return_tensors="pt").input_ids.tolist():
        failed.append("the exported tokenizer encodes the prompt differently")
    chat = [{"role": "user", "content": PROMPT}]
    if ref_tok.chat_template and (tok.apply_chat_template(chat, tokenize=False) !=
                                  ref_tok.apply_chat_template(chat, tokenize=False)):
        failed.append("the exported chat template differs")

    model = transformers.AutoModelForCausalLM.from_pretrained(
        export, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    # generate() takes its ids from generation_config.json, or from config.json without one.
    gen_path = os.path.join(source, "generation_config.json")
    src_gen = read_json(gen_path) if os.path.exists(gen_path) else src_cfg
    for key in TOKEN_IDS:
        if getattr(model.generation_config, key, None) != src_gen.get(key):
            failed.append(f"generate's {key} is {getattr(model.generation_config, key, None)!r}, "
                          f"the source's {src_gen.get(key)!r}")
    eos = src_gen.get("eos_token_id")
    eos = eos if isinstance(eos, list) else [eos]
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=NEW_TOKENS, do_sample=False)
    want = greedy(model, enc.input_ids, eos, NEW_TOKENS)
    n = enc.input_ids.shape[1]
    if out.tolist() != want.tolist():
        failed.append(f"generate gave {out[0, n:].tolist()}, greedy decoding {want[0, n:].tolist()}")
    if out.shape[1] <= n:
        failed.append("generate added no token")
    text = tok.decode(out[0, n:], skip_special_tokens=False)

    print(f"{export}: copied {', '.join(copied)}; token ids "
          + ", ".join(f"{k}={out_cfg.get(k)!r}" for k in TOKEN_IDS)
          + f"; greedy continuation of {PROMPT!r}: {out[0, n:].tolist()} = {text!r}")
    for f in failed:
        print(f"failed: {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
