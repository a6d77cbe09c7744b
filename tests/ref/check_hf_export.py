#!/usr/bin/env python3
"""Check that a model directory exported by traind loads in transformers and
computes the logits our engine computed.

usage: check_hf_export.py MODEL_DIR REF_SAFETENSORS [SOURCE_DIR]

REF_SAFETENSORS holds "input_ids" (I32 [B,T]) and "logits" (F32 [B,T,V]) from the
engine. The model loads as the class its config.json names. Prints
`max|d|/max|ref| = X`; exits 0 when X <= 1e-4, 1 when larger (or when the files
do not fit together). With SOURCE_DIR, the multimodal checkpoint the export came
from, every tensor of it outside the text model (not under model.language_model.,
not lm_head: its vision tower, its MTP head) must be in the export with the same
name, dtype, shape and bytes, and no other. Exits 3 when torch/transformers/safetensors are
not importable: the tests run it on the project's venv (tests/requirements.txt),
and a machine without them is not set up, which must fail a test, not skip it.
"""
import sys

from hf_env import require

TOLERANCE = 1e-4


def outside_text_model(model_dir):
    """{name: (dtype, shape, bytes)} of the tensors of model_dir's weights that
    are not the text model's."""
    import glob
    from safetensors import safe_open
    out = {}
    for path in sorted(glob.glob(f"{model_dir}/model*.safetensors")):
        with safe_open(path, "pt") as f:
            for name in f.keys():
                if name.startswith("model.language_model.") or name == "lm_head.weight":
                    continue
                t = f.get_tensor(name)
                out[name] = (t.dtype, tuple(t.shape), t.contiguous().view(-1).view(torch_uint8()).numpy().tobytes())
    return out


def torch_uint8():
    import torch
    return torch.uint8


def same_passthrough(source_dir, model_dir):
    want, got = outside_text_model(source_dir), outside_text_model(model_dir)
    if not want:
        print(f"{source_dir}: holds no tensor outside the text model")
        return False
    if set(want) != set(got):
        print(f"tensors outside the text model: the source has {sorted(set(want) - set(got))[:5]} that the "
              f"export lacks, the export {sorted(set(got) - set(want))[:5]} that the source lacks")
        return False
    for name in sorted(want):
        if want[name] != got[name]:
            print(f"{name}: the export's differs from the source's (dtype, shape or bytes)")
            return False
    print(f"{len(want)} tensors outside the text model, bit-identical to the source's")
    return True


def main(argv):
    if len(argv) not in (3, 4):
        print("usage: check_hf_export.py MODEL_DIR REF_SAFETENSORS [SOURCE_DIR]", file=sys.stderr)
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
    config = transformers.AutoConfig.from_pretrained(model_dir)
    cls = getattr(transformers, config.architectures[0])
    model = cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    if len(argv) == 4 and not same_passthrough(argv[3], model_dir):
        return 1
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
