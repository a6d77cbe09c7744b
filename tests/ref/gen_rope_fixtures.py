#!/usr/bin/env python3
"""Write tests/fixtures/rope/ref.json: the RoPE inverse frequencies transformers
computes for a head, per rope type and parameters, as the float32 bits of
LlamaRotaryEmbedding(config).inv_freq (the model's own table: the default
type's function, or ROPE_INIT_FUNCTIONS[rope_type]) and its attention_scaling.
tests/unit/test_rope.c holds model/rope.c to these bits exactly.

Usage: .venv/bin/python3 tests/ref/gen_rope_fixtures.py [--out DIR]
"""
import argparse
import json
import os

import torch
import transformers
from hf_env import report
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "fixtures", "rope"))

LLAMA31 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
               original_max_position_embeddings=8192)
# name -> (head_dim, rope_parameters); rope_theta in each.
CASES = {
    "default_hd16": (16, dict(rope_type="default", rope_theta=10000.0)),
    "default_hd128_theta5e5": (128, dict(rope_type="default", rope_theta=500000.0)),
    "linear_hd64": (64, dict(rope_type="linear", rope_theta=10000.0, factor=4.0)),
    "linear_hd24_factor2.5": (24, dict(rope_type="linear", rope_theta=1000000.0, factor=2.5)),
    # Llama 3.1/3.3 8B and 70B, and Llama 3.2 1B/3B (factor 32), as published.
    "llama3_1": (128, dict(rope_theta=500000.0, **LLAMA31)),
    "llama3_2": (64, dict(rope_theta=500000.0, **{**LLAMA31, "factor": 32.0})),
    # Small heads and a short original context: every band (kept, blended,
    # divided) at a tiny model's shapes.
    "llama3_small": (16, dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                              high_freq_factor=4.0, original_max_position_embeddings=32)),
    "llama3_odd": (40, dict(rope_type="llama3", rope_theta=10000.0, factor=3.0, low_freq_factor=1.5,
                            high_freq_factor=6.0, original_max_position_embeddings=100)),
    # YaRN as Qwen2.5's long-context configs set it, and its other knobs:
    # mscale with mscale_all_dim (DeepSeek's), a given attention_factor, the
    # betas, no truncation.
    "yarn_qwen2.5": (128, dict(rope_type="yarn", rope_theta=1000000.0, factor=4.0,
                               original_max_position_embeddings=32768)),
    "yarn_small": (16, dict(rope_type="yarn", rope_theta=10000.0, factor=8.0, original_max_position_embeddings=32)),
    "yarn_mscale": (64, dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, original_max_position_embeddings=4096,
                             mscale=1.0, mscale_all_dim=0.707, beta_fast=32.0, beta_slow=1.0)),
    "yarn_attention_factor": (24, dict(rope_type="yarn", rope_theta=500000.0, factor=2.0,
                                       original_max_position_embeddings=64, attention_factor=1.25,
                                       beta_fast=16.0, beta_slow=2.0, truncate=False)),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    out = {"generated_by": "tests/ref/gen_rope_fixtures.py", "transformers_version": transformers.__version__,
           "torch_version": torch.__version__,
           "inv_freq": "float32 bits (uint32) of LlamaRotaryEmbedding(config).inv_freq", "cases": {}}
    for name, (hd, rp) in CASES.items():
        cfg = LlamaConfig(hidden_size=hd * 2, num_attention_heads=2, head_dim=hd, max_position_embeddings=4096,
                          rope_parameters=dict(rp))
        emb = LlamaRotaryEmbedding(cfg)
        f = emb.inv_freq.to(torch.float32)
        bits = f.view(torch.int32).tolist()
        out["cases"][name] = {"head_dim": hd, "rope_parameters": rp,
                              "inv_freq_bits": [b & 0xffffffff for b in bits],
                              "attention_scaling": float(emb.attention_scaling)}
    path = os.path.join(args.out, "ref.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1, sort_keys=True)
        fh.write("\n")
    report(args.out, [], ["ref.json"])


if __name__ == "__main__":
    main()
