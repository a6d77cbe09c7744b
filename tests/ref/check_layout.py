#!/usr/bin/env python3
"""Checks that an engine layout names the tensors transformers' model has, with
the same shapes. Usage: check_layout.py CLASS CONFIG.json LIST

CLASS is a transformers causal-LM class (e.g. Qwen3_5ForCausalLM); CONFIG.json is
the text model's config, given to CLASS's config class as keyword arguments; LIST
has one tensor a line, "name dim0,dim1,..." (the engine's layout). The model is
built on the meta device (no memory, so the real 27B shape is cheap). Exits 0 when
the two sets of names and shapes are equal, 1 (printing the differences and both
parameter counts) when not, 3 when torch or transformers is missing."""
import json
import sys

from hf_env import EXIT_NOT_SET_UP, require  # noqa: F401

torch, transformers = require("check_layout.py")


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    cls = getattr(transformers, sys.argv[1])
    with open(sys.argv[2]) as f:
        cfg = cls.config_class(**json.load(f))
    with torch.device("meta"):
        model = cls(cfg)
    # A tied head is the embedding's tensor, which state_dict lists twice.
    ref = {n: tuple(t.shape) for n, t in model.state_dict().items()
           if not (n == "lm_head.weight" and cfg.tie_word_embeddings)}
    got = {}
    with open(sys.argv[3]) as f:
        for line in f:
            name, shape = line.split()
            got[name] = tuple(int(x) for x in shape.split(","))
    missing = sorted(set(ref) - set(got))
    extra = sorted(set(got) - set(ref))
    wrong = sorted(n for n in set(ref) & set(got) if ref[n] != got[n])
    count = sum(torch.Size(s).numel() for s in ref.values())
    print(f"check_layout.py: {sys.argv[1]}: {len(ref)} tensors, {count} parameters in transformers; "
          f"{len(got)} tensors, {sum(torch.Size(s).numel() for s in got.values())} in the layout")
    for n in missing[:10]:
        print(f"  missing from the layout: {n} {ref[n]}")
    for n in extra[:10]:
        print(f"  not in transformers: {n} {got[n]}")
    for n in wrong[:10]:
        print(f"  shape: {n} layout {got[n]}, transformers {ref[n]}")
    return 1 if missing or extra or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
