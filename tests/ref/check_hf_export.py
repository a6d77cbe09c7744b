#!/usr/bin/env python3
"""Check that a model directory exported by traind loads in transformers and
computes the logits our engine computed.

usage: check_hf_export.py MODEL_DIR REF_SAFETENSORS

REF_SAFETENSORS holds "input_ids" (I32 [B,T]) and "logits" (F32 [B,T,V]) from the
engine. Prints `max|d|/max|ref| = X`; exits 0 when X <= 1e-4, 1 when larger (or
when the files do not fit together), 3 when torch/transformers/safetensors are
not importable: the tests run it on the project's venv (tests/requirements.txt),
and a machine without them is not set up, which must fail a test, not skip it.
"""
import sys

from hf_env import require

TOLERANCE = 1e-4


def main(argv):
    if len(argv) != 3:
        print("usage: check_hf_export.py MODEL_DIR REF_SAFETENSORS", file=sys.stderr)
        return 2
    model_dir, ref_path = argv[1], argv[2]

    torch, transformers = require("check_hf_export.py", "safetensors")
    from safetensors.torch import load_file

    ref = load_file(ref_path)
    for key in ("input_ids", "logits"):
        if key not in ref:
            print(f"{ref_path}: no tensor named {key!r}")
            return 1
    input_ids = ref["input_ids"].to(torch.long)
    ref_logits = ref["logits"].to(torch.float32)

    # fp32 and eager attention: the same reference the fixtures were made with,
    # whatever dtype the export was written in.
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits.float()

    if logits.shape != ref_logits.shape:
        print(f"shape mismatch: transformers gives {tuple(logits.shape)}, "
              f"{ref_path} holds {tuple(ref_logits.shape)}")
        return 1

    scale = ref_logits.abs().max().item()
    diff = (logits - ref_logits).abs().max().item()
    ratio = diff / scale if scale > 0 else diff
    ok = ratio <= TOLERANCE  # also false for NaN
    print(f"max|d|/max|ref| = {ratio:.3e}" + ("" if ok else f"  (above {TOLERANCE:g})"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
