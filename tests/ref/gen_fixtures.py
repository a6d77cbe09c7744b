#!/usr/bin/env python3
"""Write the numerical reference fixtures that traind's C tests compare against.

Each fixture is a tiny randomly initialised Hugging Face model saved the way
transformers saves it (config.json + model.safetensors), plus ref.safetensors with
the logits, loss, gradients and a 10-step AdamW trajectory that transformers and
torch compute for it, and ref.json with every hyperparameter the C test needs.
The C tests read these files and never import torch. One more fixture, llama_tok,
is a model directory with a real tokenizer, the source of the export tests.

Everything is seeded and runs on one CPU thread in fp32 with eager attention, so a
rerun on the same machine (and the same torch/transformers) rewrites identical
bytes. See tests/ref/README.md.
"""
import argparse
import contextlib
import json
import math
import os
import shutil
import sys

import tokenizers
import torch
import transformers
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from deltarule64 import gated_delta_rule64
from hf_env import report
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3_5ForCausalLM,
    Qwen3_5TextConfig,
)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "fixtures"))

# Shared shape of every fixture model: small enough that a fixture is ~2 MB and a
# C test runs it in milliseconds, yet with GQA (4 heads over 2 kv heads) and an
# FFN width that is not a multiple of the hidden size.
COMMON = dict(
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=176,
    max_position_embeddings=128,
    rms_norm_eps=1e-6,
    initializer_range=0.02,
)

# name -> (config class, model class, arch-specific config, model seed)
MODELS = {
    "llama_tied": (LlamaConfig, LlamaForCausalLM,
                   dict(tie_word_embeddings=True, rope_theta=10000.0), 1001),
    # Llama 3.1's RoPE (rope_type llama3, its published factors) with an
    # original context of 32: the batch's 64 positions run past it, and head_dim
    # 16's frequencies fall in each of its bands (kept, blended, divided).
    "llama31": (LlamaConfig, LlamaForCausalLM,
                dict(tie_word_embeddings=False,
                     rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 32}), 1009),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM,
              dict(tie_word_embeddings=False, rope_theta=1000000.0), 1002),
    # YaRN as Qwen2.5's long-context configs set it, an original context of
    # 32 under the batch's 64 positions; its attention factor (0.1·ln 4 + 1)
    # scales cos and sin.
    "qwen2_yarn": (Qwen2Config, Qwen2ForCausalLM,
                   dict(tie_word_embeddings=False,
                        rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                                         "original_max_position_embeddings": 32}), 1010),
    # Mistral: Llama's layer with a head_dim of its own (24: 96 query dims
    # for a hidden 64), no window (null, as Mistral 7B v0.2 and later write).
    "mistral": (MistralConfig, MistralForCausalLM,
                dict(tie_word_embeddings=False, head_dim=24, sliding_window=None,
                     rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), 1011),
    # Mistral v0.1's kind: a sliding window (24 keys) well under the batch's
    # 64 tokens (test_kernels has windows that skip whole key tiles).
    "mistral_window": (MistralConfig, MistralForCausalLM,
                       dict(tie_word_embeddings=False, sliding_window=24,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), 1012),
    # head_dim 32 makes heads*head_dim (128) differ from hidden (64), which
    # catches code that assumes the two are equal.
    "qwen3": (Qwen3Config, Qwen3ForCausalLM,
              dict(tie_word_embeddings=False, rope_theta=1000000.0, head_dim=32), 1003),
    # tie_word_embeddings true, yet the file holds an lm_head.weight of its own
    # (add_distinct_head): transformers warns and loads the two untied.
    "qwen3_tied_head": (Qwen3Config, Qwen3ForCausalLM,
                        dict(tie_word_embeddings=True, rope_theta=1000000.0, head_dim=32), 1004),
    # Qwen3.5's hybrid: a Gated DeltaNet layer, then a gated full-attention one;
    # 3 value heads per key head of other dims than the attention's, a quarter
    # of head_dim rotated.
    "qwen3_5": (Qwen3_5TextConfig, Qwen3_5ForCausalLM,
                dict(tie_word_embeddings=False, head_dim=32, layer_types=["linear_attention", "full_attention"],
                     linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=12,
                     linear_value_head_dim=10, linear_conv_kernel_dim=4,
                     rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                      "partial_rotary_factor": 0.25}), 1006),
}
DISTINCT_HEAD = {"qwen3_tied_head"}

BATCH = dict(B=2, T=64, ignore_index=-100, masked_prefix_row0=10, masked_fraction=0.1)

# Optimizer run recorded as adamw.losses / adamw.grad_norms.
ADAMW = dict(
    steps=10,
    betas=[0.9, 0.95],
    eps=1e-8,
    weight_decay=0.1,
    clip_max_norm=0.5,
    schedule=dict(kind="warmup_linear_cosine", max_lr=1e-3, min_lr=1e-4,
                  warmup_steps=3, total_steps=10),
)

# Separate seeds per purpose, so changing one kind of randomness (say the batch)
# does not shift another (the weights).
SEED_BATCH_OFFSET = 100   # batch seed = model seed + 100
SEED_PERTURB_OFFSET = 200  # perturbation seed = model seed + 200
SEED_HEAD_OFFSET = 300     # distinct head seed = model seed + 300


def lr_at(step):
    """Linear warmup to max_lr, then cosine from max_lr down to min_lr."""
    s = ADAMW["schedule"]
    if step < s["warmup_steps"]:
        return s["max_lr"] * (step + 1) / s["warmup_steps"]
    progress = (step - s["warmup_steps"]) / (s["total_steps"] - s["warmup_steps"])
    return s["min_lr"] + 0.5 * (s["max_lr"] - s["min_lr"]) * (1.0 + math.cos(math.pi * progress))


def make_config(name):
    config_cls, _, arch, _ = MODELS[name]
    cfg = config_cls(**COMMON, **arch, attn_implementation="eager")
    assert cfg.attention_dropout == 0.0, "dropout would make the reference random"
    return cfg


def perturb(model, seed):
    """transformers initialises norm weights to 1 (Qwen3.5's zero-centred ones to 0)
    and biases to 0; a bug that drops one of them would then go unnoticed. Give each a
    distinct random value; Qwen3.5's A_log and dt_bias too."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # fixed order: module definition order
            if p.ndim != 1:
                continue
            if name.endswith(".bias"):
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
            elif name.endswith(("A_log", "dt_bias")) or not p.any():  # the last: zero-centred norms
                p.add_(0.1 * torch.randn(p.shape, generator=g))
            else:
                assert "norm" in name, f"unexpected 1-d parameter {name}"
                p.mul_(1.0 + 0.1 * torch.randn(p.shape, generator=g))


def add_distinct_head(fdir, seed):
    """Writes an lm_head.weight unlike the embedding into a tied model's file, as
    checkpoints exported by some tools have it."""
    path = os.path.join(fdir, "model.safetensors")
    tensors = load_file(path)
    assert "lm_head.weight" not in tensors, "save_pretrained stores a tied head once"
    shape = tensors["model.embed_tokens.weight"].shape
    g = torch.Generator().manual_seed(seed)
    tensors["lm_head.weight"] = COMMON["initializer_range"] * torch.randn(shape, generator=g)
    save_file(tensors, path, metadata={"format": "pt"})
    return tensors["lm_head.weight"]


def make_batch(seed):
    g = torch.Generator().manual_seed(seed)
    B, T, V = BATCH["B"], BATCH["T"], COMMON["vocab_size"]
    input_ids = torch.randint(0, V, (B, T), generator=g)
    labels = input_ids.clone()
    labels[torch.rand((B, T), generator=g) < BATCH["masked_fraction"]] = BATCH["ignore_index"]
    labels[0, : BATCH["masked_prefix_row0"]] = BATCH["ignore_index"]
    return input_ids, labels


def load_fp32(model_dir):
    # transformers 5 loads in the checkpoint's dtype by default; the reference is fp32.
    return transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager")


def logits_of(model, input_ids):
    with torch.no_grad():
        return model(input_ids=input_ids).logits.float().contiguous()


def adamw_run(model, loss_of, steps):
    """The recorded optimizer trajectory of loss_of(model); returns (losses,
    pre-clip grad norms)."""
    params = list(model.named_parameters())
    groups = [
        {"params": [p for _, p in params if p.ndim >= 2], "weight_decay": ADAMW["weight_decay"]},
        {"params": [p for _, p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=lr_at(0), betas=tuple(ADAMW["betas"]),
                            eps=ADAMW["eps"], foreach=False, fused=False)
    losses, norms = [], []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=ADAMW["clip_max_norm"])
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    return (torch.tensor(losses, dtype=torch.float32),
            torch.tensor(norms, dtype=torch.float32))


def write_ref(path, tensors):
    # Contiguous, owned tensors: safetensors refuses views that share storage.
    save_file({k: v.detach().contiguous().clone() for k, v in tensors.items()}, path)


def fresh_dir(path):
    # Stale files from an older layout must not survive a regeneration.
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)


def gen_fp32_fixture(out, name):
    _, model_cls, _, seed = MODELS[name]
    fdir = os.path.join(out, name)
    fresh_dir(fdir)

    torch.manual_seed(seed)  # transformers' own init draws from the global generator
    model = model_cls(make_config(name))
    perturb(model, seed + SEED_PERTURB_OFFSET)
    model.save_pretrained(fdir, safe_serialization=True)
    head = add_distinct_head(fdir, seed + SEED_HEAD_OFFSET) if name in DISTINCT_HEAD else None

    # Work from what was saved, so the reference is exactly the files a C test loads.
    model = load_fp32(fdir)
    if head is not None:
        # What the C test holds the engine to: transformers keeps the file's head.
        assert model.lm_head.weight is not model.model.embed_tokens.weight
        assert torch.equal(model.lm_head.weight, head), "transformers did not load the file's head"
    model.train()  # dropout is 0, so train mode only matters for being honest
    input_ids, labels = make_batch(seed + SEED_BATCH_OFFSET)

    logits = logits_of(model, input_ids)
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=input_ids, labels=labels).loss
    loss.backward()
    # named_parameters() lists a tied weight once, under the embedding's name, and its
    # .grad already holds the lm_head's contribution.
    grads = {f"grad.{n}": p.grad for n, p in model.named_parameters()}
    if name in F64_GRADS:
        grads = f64_grads(fdir, input_ids, labels, grads)

    # The optimizer run starts again from the saved weights.
    adamw_model = load_fp32(fdir)
    adamw_model.train()
    losses, norms = adamw_run(adamw_model, lambda m: m(input_ids=input_ids, labels=labels).loss,
                              ADAMW["steps"])
    assert losses[0].item() == loss.item(), "step-0 loss must equal the recorded loss"

    tensors = {
        "input_ids": input_ids.to(torch.int32),
        "labels": labels.to(torch.int32),
        "logits": logits,
        "loss": loss.detach().reshape(1).float(),
        **grads,
        "adamw.losses": losses,
        "adamw.grad_norms": norms,
    }
    write_ref(os.path.join(fdir, "ref.safetensors"), tensors)

    counted = int((labels[:, 1:] != BATCH["ignore_index"]).sum())
    meta = {
        "fixture": name,
        "model_class": model_cls.__name__,
        "generated_by": "tests/ref/gen_fixtures.py",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "seeds": {"model_init": seed, "perturb": seed + SEED_PERTURB_OFFSET,
                  "batch": seed + SEED_BATCH_OFFSET},
        "perturbation": "after transformers' init: norm weights *= 1 + 0.1*randn; biases = 0.02*randn; "
                        "zero-centred norms, A_log, dt_bias += 0.1*randn",
        "gradients": "float64 (transformers' model in float64, its delta rule token by token in float64)"
                     if name in F64_GRADS else "float32",
        "attn_implementation": "eager",
        "dtype": "float32",
        "batch": BATCH,
        "loss": {
            "kind": "causal LM cross-entropy; labels shifted inside (position t predicts labels[t+1]); "
                    "ignore_index skipped; mean over counted tokens",
            "counted_tokens": counted,
        },
        "adamw": {
            **ADAMW,
            "lr_per_step": [lr_at(s) for s in range(ADAMW["steps"])],
            "weight_decay_rule": "weight_decay applies to parameters with ndim >= 2; "
                                 "0 for ndim < 2 (norm weights, biases)",
            "weight_decay_form": "decoupled (torch.optim.AdamW): p *= 1 - lr*wd before the Adam step",
            "adam_form": "torch.optim.AdamW foreach=False, t = step+1: m = m + (1-b1)*(g-m) (lerp); "
                         "v = v*b2 + (1-b2)*g*g; p -= (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps); "
                         "m, v start at 0",
            "clip_form": "torch.nn.utils.clip_grad_norm_: total = L2 norm of the per-tensor L2 norms; "
                         "grads *= min(1, max_norm/(total + 1e-6)); grad_norms are the pre-clip totals",
            "order_per_step": "zero grads; loss = forward(labels); backward; clip; lr = schedule(step); "
                              "AdamW update; losses[step] is the loss before the update",
            "start": "the saved model.safetensors, fresh optimizer state",
        },
        "tensors": sorted(tensors),
    }
    if head is not None:
        meta["lm_head"] = ("config.json ties it (tie_word_embeddings true), but model.safetensors "
                           "holds an lm_head.weight of its own, initializer_range*randn from seed "
                           f"{seed + SEED_HEAD_OFFSET}; transformers loads it untied with that head")
    with open(os.path.join(fdir, "ref.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")


# Fixtures whose gradients come from a float64 run of transformers' model.
# transformers' chunked delta rule computes in float32, and its error shows in
# the small gradients of the decay parameters (A_log, dt_bias: 1.1e-4 of their
# largest entry); in float64, with the rule taken token by token in float64
# (deltarule64.py, which gen_hybrid_fixtures.py checks against transformers'),
# the reference is exact to far below what a test measures.
F64_GRADS = {"qwen3_5"}


@contextlib.contextmanager
def delta_rule64():
    """transformers' Qwen3.5 models with their delta rule taken token by token in
    float64 (deltarule64.py) while inside."""
    import transformers.models.qwen3_5.modeling_qwen3_5 as qwen3_5
    chunked = qwen3_5.torch_chunk_gated_delta_rule
    qwen3_5.torch_chunk_gated_delta_rule = gated_delta_rule64
    try:
        yield
    finally:
        qwen3_5.torch_chunk_gated_delta_rule = chunked


def write_trained_ref(fdir, batch, logits, loss64, grads, adamw, meta):
    """ref.safetensors (the batch's tensors, logits, the float64 loss and
    gradients, the AdamW run's losses and norms) and ref.json (meta and what
    every fixture's says) of a hybrid fixture."""
    tensors = {**batch, "logits": logits, "loss": torch.tensor([loss64], dtype=torch.float32), **grads,
               "adamw.losses": adamw[0], "adamw.grad_norms": adamw[1]}
    write_ref(os.path.join(fdir, "ref.safetensors"), tensors)
    meta = {"generated_by": "tests/ref/gen_fixtures.py", "torch_version": torch.__version__,
            "transformers_version": transformers.__version__, **meta, "tensors": sorted(tensors)}
    with open(os.path.join(fdir, "ref.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")


def f64_grads(fdir, input_ids, labels, grads32):
    with delta_rule64():
        model = transformers.AutoModelForCausalLM.from_pretrained(fdir, dtype=torch.float64,
                                                                  attn_implementation="eager")
        model.train()
        model(input_ids=input_ids, labels=labels, use_cache=False).loss.backward()
    grads = {f"grad.{n}": p.grad.float() for n, p in model.named_parameters()}
    for n, g in grads.items():  # float32 transformers agrees to its own precision
        err = ((g - grads32[n]).norm() / g.norm()).item()
        assert err < 1e-3, f"{n}: float32 and float64 gradients differ by {err:.3g}"
    return grads


def gen_bf16_fixture(out, src_name, name):
    """The fp32 fixture's weights rounded to bf16 and saved in bf16; the reference
    logits are the fp32 forward of those rounded weights."""
    _, _, _, seed = MODELS[src_name]
    fdir = os.path.join(out, name)
    fresh_dir(fdir)

    model = load_fp32(os.path.join(out, src_name))
    model.to(torch.bfloat16)
    model.save_pretrained(fdir, safe_serialization=True)

    input_ids, _ = make_batch(seed + SEED_BATCH_OFFSET)
    loaded = load_fp32(fdir)
    logits = logits_of(loaded, input_ids)

    # Independent path: round the fp32 parameters in place. It must agree bit for bit,
    # which shows the saved bf16 file holds exactly the rounded weights. (Upcasting
    # the bf16 model instead would not do: .to() also rounds the rotary inv_freq
    # buffer, which a loaded model recomputes in fp32.)
    rounded = load_fp32(os.path.join(out, src_name))
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    if not torch.equal(logits, logits_of(rounded, input_ids)):
        sys.exit(f"{name}: logits of the reloaded bf16 model differ from the upcast model")

    tensors = {"input_ids": input_ids.to(torch.int32), "logits": logits}
    write_ref(os.path.join(fdir, "ref.safetensors"), tensors)
    meta = {
        "fixture": name,
        "source_fixture": src_name,
        "generated_by": "tests/ref/gen_fixtures.py",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "seeds": {"batch": seed + SEED_BATCH_OFFSET},
        "weights": "the source fixture's fp32 weights rounded to bfloat16 (round to nearest even) "
                   "and saved in BF16",
        "reference": "logits = fp32 eager forward of the bf16 weights upcast to fp32",
        "attn_implementation": "eager",
        "batch": {"B": BATCH["B"], "T": BATCH["T"]},
        "tensors": sorted(tensors),
    }
    with open(os.path.join(fdir, "ref.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")


# Qwen3.5's hybrid at odd shapes, saved in bf16 and trained on packed rows:
# four layers (three Gated DeltaNet, then gated full attention, as the real
# models interleave them), 2 linear value heads per key head of dims (10, 14),
# a conv kernel of 3, head_dim 24 (a rotary dim of 6), tied embeddings, and a
# sequence length (100) past one delta-rule chunk and not a multiple of it.
# Row 0 packs three records; transformers (which has no packing for its delta
# rule) runs each record on its own, and the loss is their tokens' mean.
PACKED = dict(
    name="qwen3_5_packed",
    seed=1007,
    config=dict(COMMON, hidden_size=48, num_hidden_layers=4, num_attention_heads=3,
                num_key_value_heads=1, head_dim=24, intermediate_size=72,
                tie_word_embeddings=True, full_attention_interval=4,
                linear_num_key_heads=3, linear_num_value_heads=6, linear_key_head_dim=10,
                linear_value_head_dim=14, linear_conv_kernel_dim=3,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                 "partial_rotary_factor": 0.25}),
    B=2, T=100,
    records=[[0, 37, 87, 100], [0, 100]],  # per row: record starts, then T
    adamw_steps=3,
)


def packed_batch(seed):
    """ids, labels and position ids; each record's first label is -100 (the
    engine's callers mask it, as it would be predicted from the record before)."""
    g = torch.Generator().manual_seed(seed)
    B, T, V = PACKED["B"], PACKED["T"], PACKED["config"]["vocab_size"]
    input_ids = torch.randint(0, V, (B, T), generator=g)
    labels = input_ids.clone()
    labels[torch.rand((B, T), generator=g) < BATCH["masked_fraction"]] = BATCH["ignore_index"]
    pos = torch.zeros(B, T, dtype=torch.int32)
    for b, cuts in enumerate(PACKED["records"]):
        for s, e in zip(cuts, cuts[1:]):
            pos[b, s:e] = torch.arange(e - s, dtype=torch.int32)
            labels[b, s] = BATCH["ignore_index"]
    return input_ids, labels, pos


def packed_forward(model, input_ids, labels):
    """(mean loss over the batch's counted tokens, logits [B, T, V]): each
    record through the model on its own."""
    total, count, rows = 0.0, 0, []
    for b, cuts in enumerate(PACKED["records"]):
        parts = []
        for s, e in zip(cuts, cuts[1:]):
            logits = model(input_ids=input_ids[b:b + 1, s:e], use_cache=False).logits[0]
            target = labels[b, s + 1:e]
            total = total + torch.nn.functional.cross_entropy(
                logits[:-1].float(), target, ignore_index=BATCH["ignore_index"], reduction="sum")
            count += int((target != BATCH["ignore_index"]).sum())
            parts.append(logits)
        rows.append(torch.cat(parts))
    return total / count, torch.stack(rows)


def gen_packed_fixture(out):
    name, seed = PACKED["name"], PACKED["seed"]
    fdir = os.path.join(out, name)
    fresh_dir(fdir)
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**PACKED["config"], attn_implementation="eager"))
    perturb(model, seed + SEED_PERTURB_OFFSET)
    model.to(torch.bfloat16).save_pretrained(fdir, safe_serialization=True)

    # The reference works on the saved bf16 weights, upcast to fp32.
    input_ids, labels, pos = packed_batch(seed + SEED_BATCH_OFFSET)
    model = load_fp32(fdir)
    model.train()
    loss, logits = packed_forward(model, input_ids, labels)
    logits = logits.detach().contiguous()

    with delta_rule64():
        model64 = transformers.AutoModelForCausalLM.from_pretrained(fdir, dtype=torch.float64,
                                                                    attn_implementation="eager")
        model64.train()
        loss64, _ = packed_forward(model64, input_ids, labels)
        loss64.backward()
    grads = {f"grad.{n}": p.grad.float() for n, p in model64.named_parameters()}
    assert abs(loss64.item() - loss.item()) < 1e-5 * abs(loss64.item())

    adamw = adamw_run(model, lambda m: packed_forward(m, input_ids, labels)[0], PACKED["adamw_steps"])
    write_trained_ref(fdir, {"input_ids": input_ids.to(torch.int32), "labels": labels.to(torch.int32),
                             "pos": pos}, logits, loss64.item(), grads, adamw, {
        "fixture": name,
        "model_class": "Qwen3_5ForCausalLM",
        "seeds": {"model_init": seed, "perturb": seed + SEED_PERTURB_OFFSET,
                  "batch": seed + SEED_BATCH_OFFSET},
        "dtype": "bfloat16 file; references from its weights upcast to float32",
        "batch": {"B": PACKED["B"], "T": PACKED["T"], "records": PACKED["records"],
                  "rule": "pos restarts at 0 at each record; each record's first label is -100; "
                          "transformers runs each record on its own"},
        "loss": "causal LM cross-entropy summed over every record's counted targets, "
                "divided by their number (float64 run)",
        "gradients": "float64 (transformers' model in float64, its delta rule token by token)",
        "logits": "float32 run, record by record",
        "adamw": {**ADAMW, "steps": PACKED["adamw_steps"],
                  "lr_per_step": [lr_at(s) for s in range(PACKED["adamw_steps"])],
                  "run": "float32, as gen_fixtures.py's adamw_run but over the packed loss"},
    })


# Qwen3.6-27B as published is a Qwen3_5ForConditionalGeneration: the hybrid
# text model under model.language_model., a vision tower (model.visual.*), and
# multi-token-prediction tensors (mtp.*) that transformers does not load. A
# small one: a text model at odd shapes of its own (5 layers, full attention
# every 3rd: DN DN attn DN DN; 80 tokens), a 2-block vision tower, MTP tensors
# named as the real checkpoints name them, in small shards with the MTP in a
# file of its own; fp32.
VLM = dict(
    name="qwen3_5_vlm",
    seed=1008,
    text=dict(COMMON, hidden_size=56, num_hidden_layers=5, head_dim=16, intermediate_size=88,
              full_attention_interval=3, linear_num_key_heads=2, linear_num_value_heads=4,
              linear_key_head_dim=8, linear_value_head_dim=12, linear_conv_kernel_dim=4,
              rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                               "partial_rotary_factor": 0.25, "mrope_interleaved": True,
                               "mrope_section": [1, 1, 0]}),
    vision=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=4,
                temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16),
    shard="120KB",
    B=2, T=80,
    adamw_steps=3,
)


def vlm_mtp_tensors(cfg, g):
    """MTP tensors as the published checkpoints name them: one full-attention
    decoder layer with its norms, the fc over [embedding, hidden], three norms."""
    d, ff, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    shapes = {
        "mtp.fc.weight": (d, 2 * d),
        "mtp.pre_fc_norm_embedding.weight": (d,),
        "mtp.pre_fc_norm_hidden.weight": (d,),
        "mtp.norm.weight": (d,),
        "mtp.layers.0.input_layernorm.weight": (d,),
        "mtp.layers.0.post_attention_layernorm.weight": (d,),
        "mtp.layers.0.self_attn.q_proj.weight": (2 * q, d),
        "mtp.layers.0.self_attn.k_proj.weight": (kv, d),
        "mtp.layers.0.self_attn.v_proj.weight": (kv, d),
        "mtp.layers.0.self_attn.o_proj.weight": (d, q),
        "mtp.layers.0.self_attn.q_norm.weight": (hd,),
        "mtp.layers.0.self_attn.k_norm.weight": (hd,),
        "mtp.layers.0.mlp.gate_proj.weight": (ff, d),
        "mtp.layers.0.mlp.up_proj.weight": (ff, d),
        "mtp.layers.0.mlp.down_proj.weight": (d, ff),
    }
    return {k: (0.02 * torch.randn(v, generator=g)).to(torch.bfloat16) for k, v in shapes.items()}


def gen_vlm_fixture(out):
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration
    name, seed = VLM["name"], VLM["seed"]
    fdir = os.path.join(out, name)
    fresh_dir(fdir)
    torch.manual_seed(seed)
    cfg = Qwen3_5Config(text_config=VLM["text"], vision_config={**VLM["vision"],
                        "out_hidden_size": VLM["text"]["hidden_size"]}, tie_word_embeddings=False)
    model = Qwen3_5ForConditionalGeneration(cfg)
    perturb(model, seed + SEED_PERTURB_OFFSET)
    model.save_pretrained(fdir, safe_serialization=True, max_shard_size=VLM["shard"])
    index_path = os.path.join(fdir, "model.safetensors.index.json")
    with open(index_path) as f:
        index = json.load(f)
    mtp = vlm_mtp_tensors(cfg.text_config, torch.Generator().manual_seed(seed + SEED_HEAD_OFFSET))
    save_file(mtp, os.path.join(fdir, "model-mtp.safetensors"), metadata={"format": "pt"})
    index["weight_map"].update({k: "model-mtp.safetensors" for k in mtp})
    index["metadata"]["total_size"] += sum(t.numel() * 2 for t in mtp.values())
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")

    def load(dtype):
        m = Qwen3_5ForConditionalGeneration.from_pretrained(fdir, dtype=dtype, attn_implementation="eager")
        m.train()
        return m

    g = torch.Generator().manual_seed(seed + SEED_BATCH_OFFSET)
    B, T, V = VLM["B"], VLM["T"], VLM["text"]["vocab_size"]
    input_ids = torch.randint(0, V, (B, T), generator=g)
    labels = input_ids.clone()
    labels[torch.rand((B, T), generator=g) < BATCH["masked_fraction"]] = BATCH["ignore_index"]

    model = load(torch.float32)
    logits = logits_of(model, input_ids)
    with delta_rule64():
        model64 = load(torch.float64)
        loss64 = model64(input_ids=input_ids, labels=labels, use_cache=False).loss
        loss64.backward()
    # The vision tower gets no gradient from text; the engine does not train it.
    grads = {f"grad.{n}": p.grad.float() for n, p in model64.named_parameters() if p.grad is not None}
    assert all(n.startswith(("grad.model.language_model.", "grad.lm_head.")) for n in grads)
    adamw = adamw_run(model, lambda m: m(input_ids=input_ids, labels=labels, use_cache=False).loss,
                      VLM["adamw_steps"])
    write_trained_ref(fdir, {"input_ids": input_ids.to(torch.int32), "labels": labels.to(torch.int32)},
                      logits, loss64.item(), grads, adamw, {
        "fixture": name,
        "model_class": "Qwen3_5ForConditionalGeneration",
        "seeds": {"model_init": seed, "perturb": seed + SEED_PERTURB_OFFSET,
                  "batch": seed + SEED_BATCH_OFFSET, "mtp": seed + SEED_HEAD_OFFSET},
        "dtype": "float32 (the MTP tensors bfloat16)",
        "files": f"save_pretrained with max_shard_size {VLM['shard']}, then model-mtp.safetensors "
                 "(mtp.*, 0.02*randn in bf16) added to the index",
        "batch": {"B": B, "T": T},
        "loss": "causal LM cross-entropy of the text-only forward (float64 run)",
        "gradients": "float64, of the text model's parameters and lm_head (the vision tower gets none)",
        "adamw": {**ADAMW, "steps": VLM["adamw_steps"],
                  "lr_per_step": [lr_at(s) for s in range(VLM["adamw_steps"])]},
    })


# A model directory as users have them: a small Llama with a real byte-level
# BPE tokenizer trained on the demo text, bos/eos/pad token ids (eos a list,
# as Llama 3 and Qwen have it) and the files save_pretrained writes for both.
TOKENIZER = dict(vocab_size=384, text="data/demo/licenses.txt",
                 special_tokens=["<pad>", "<s>", "</s>", "<|im_end|>"],
                 chat_template="{% for m in messages %}{{ m['content'] }}<|im_end|>{% endfor %}")
TOK_MODEL = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                 intermediate_size=64, max_position_embeddings=128, rms_norm_eps=1e-6,
                 tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=[2, 3])
TOK_SEED = 1005


def gen_tokenizer_fixture(out, name):
    fdir = os.path.join(out, name)
    fresh_dir(fdir)
    with open(os.path.join(HERE, "..", "..", TOKENIZER["text"]), encoding="utf-8") as f:
        text = f.read()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER["vocab_size"],
                                  special_tokens=TOKENIZER["special_tokens"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([text], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>")
    fast.chat_template = TOKENIZER["chat_template"]
    fast.save_pretrained(fdir)
    # The special tokens' ids must be the ones config.json names.
    assert [fast.pad_token_id, fast.bos_token_id, fast.eos_token_id] == [0, 1, 2]

    torch.manual_seed(TOK_SEED)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(fast), **TOK_MODEL,
                                         attn_implementation="eager"))
    model.save_pretrained(fdir, safe_serialization=True)
    meta = {
        "fixture": name,
        "generated_by": "tests/ref/gen_fixtures.py",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "tokenizers_version": tokenizers.__version__,
        "seeds": {"model_init": TOK_SEED},
        "tokenizer": {k: v for k, v in TOKENIZER.items() if k != "chat_template"},
        "model": {"class": "LlamaForCausalLM", **TOK_MODEL},
        "use": "a source directory for exports: its tokenizer files and token ids must survive",
    }
    with open(os.path.join(fdir, "ref.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="fixtures directory (default: tests/fixtures)")
    args = ap.parse_args()

    # One thread and deterministic kernels: the same bytes on every rerun.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    os.makedirs(args.out, exist_ok=True)
    for name in MODELS:
        gen_fp32_fixture(args.out, name)
    gen_bf16_fixture(args.out, "qwen3", "qwen3_bf16")
    gen_packed_fixture(args.out)
    gen_vlm_fixture(args.out)
    gen_tokenizer_fixture(args.out, "llama_tok")
    report(args.out, list(MODELS) + ["qwen3_bf16", PACKED["name"], VLM["name"], "llama_tok"])


if __name__ == "__main__":
    main()
