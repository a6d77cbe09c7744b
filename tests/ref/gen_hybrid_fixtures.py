#!/usr/bin/env python3
"""Write the gated delta rule's reference fixture (tests/fixtures/hybrid_blocks, read by
tests/parity/test_hybrid_blocks.c): transformers' own torch_chunk_gated_delta_rule
(Qwen3.5's linear attention, transformers/models/qwen3_5/modeling_qwen3_5.py) on
shapes the model tests do not use: 3 value heads per key head, key and value head
dims that differ and are not powers of two, a sequence that is not a multiple of
the chunk (64), and a packed row.

Beside it, the layer's other blocks through transformers' own code (blocks()).

Inputs are leaves as the kernel takes them: q and k already L2-normalised (the
layer normalises them before the rule), g = -exp(A_log)·softplus(a + dt_bias)
as the layer forms it, beta = sigmoid(b). The output and, for
L = sum(out · dout), autograd's gradients of q, k, v, g and beta. Row 0 of the
batch is packed: three records, each run through transformers on its own (its
state starts at zero, as the engine's does at a record start) and concatenated;
row 1 is one sequence. pos gives the position ids the engine reads.

A float64 recurrence written here checks transformers' float32 chunked output
before anything is written. Seeded: a rerun writes the same bytes.
Usage: .venv/bin/python3 tests/ref/gen_hybrid_fixtures.py [--out DIR]
"""
import argparse
import os

from deltarule64 import gated_delta_rule64
from hf_env import require, report

torch, transformers = require("gen_hybrid_fixtures.py", "safetensors")
from safetensors.torch import save_file  # noqa: E402
from transformers.models.qwen3_5.modeling_qwen3_5 import (  # noqa: E402
    Qwen3_5DecoderLayer, Qwen3_5RMSNormGated, Qwen3_5TextConfig, Qwen3_5TextRotaryEmbedding, apply_rotary_pos_emb, causal_conv1d_fn,
    l2norm, torch_chunk_gated_delta_rule)

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.normpath(os.path.join(HERE, "..", "fixtures"))
B, T, HK, HV, KD, VD = 2, 150, 2, 6, 12, 10
CONV = 2 * HK * KD + HV * VD  # the conv's channels: q|k|v
ROPE_HD = 24
DN_D = 40
RECORDS = (0, 37, 101)  # record starts of row 0
SEED = 3501


def blocks(randn, gen, pos):
    """The layer's other blocks, each through transformers' own function or module on
    the same [B, T] rows (row 0's records run on their own, as above): the causal
    depthwise conv with SiLU (CONV channels, kernel 4), the L2 norm of heads of KD,
    and the gated RMSNorm over heads of VD; and the full-attention layer's partial
    RoPE and output gate. Names: conv.*, l2.*, gnorm.*, rope.*, gate.*."""
    out = {}
    bounds = list(RECORDS) + [T]
    segments = [(0, s, e) for s, e in zip(bounds, bounds[1:])] + [(1, 0, T)]

    x = randn(B, T, CONV).requires_grad_()
    w = (randn(CONV, 4) * 0.5).requires_grad_()
    dy = randn(B, T, CONV)
    rows = {0: [], 1: []}
    for b, s, e in segments:  # the conv takes [batch, channels, time]
        rows[b].append(causal_conv1d_fn(x[b:b + 1, s:e].transpose(1, 2), w, None, activation="silu")[0].T)
    y = torch.stack([torch.cat(rows[0]), torch.cat(rows[1])])
    (y * dy).sum().backward()
    out.update({"conv.x": x, "conv.w": w, "conv.dy": dy, "conv.y": y, "conv.dx": x.grad, "conv.dw": w.grad})

    x = (randn(B * T, HK, KD) * 3).requires_grad_()
    dy = randn(B * T, HK, KD)
    y = l2norm(x, dim=-1, eps=1e-6)
    (y * dy).sum().backward()
    out.update({"l2.x": x, "l2.dy": dy, "l2.y": y, "l2.dx": x.grad})

    norm = Qwen3_5RMSNormGated(VD, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.3 * randn(VD))
    x = randn(B * T, HV, VD).requires_grad_()
    z = randn(B * T, HV, VD).requires_grad_()
    dy = randn(B * T, HV, VD)
    y = norm(x, z)
    (y * dy).sum().backward()
    out.update({"gnorm.x": x, "gnorm.z": z, "gnorm.w": norm.weight, "gnorm.dy": dy, "gnorm.y": y,
                "gnorm.dx": x.grad, "gnorm.dz": z.grad, "gnorm.dw": norm.weight.grad})
    # The full-attention layer's partial RoPE (a quarter of head_dim 24: 6
    # rotated values per head) through transformers' rotary module, with the
    # packed row's position ids, and its output gate: y = att·sigmoid(gate).
    cfg = Qwen3_5TextConfig(hidden_size=48, num_attention_heads=2, num_key_value_heads=1, head_dim=ROPE_HD,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                             "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 1],
                                             "mrope_interleaved": True})
    rotary = Qwen3_5TextRotaryEmbedding(cfg)
    x = randn(B, T, HK, ROPE_HD).requires_grad_()
    dy = randn(B, T, HK, ROPE_HD)
    cos, sin = rotary(x, pos.long())
    y, _ = apply_rotary_pos_emb(x, x.detach(), cos, sin, unsqueeze_dim=2)
    (y * dy).sum().backward()
    out.update({"rope.x": x, "rope.dy": dy, "rope.y": y, "rope.dx": x.grad})

    att = randn(B * T, HV, VD).requires_grad_()
    gate = (randn(B * T, HV, VD) * 2).requires_grad_()
    dy = randn(B * T, HV, VD)
    y = att * torch.sigmoid(gate)
    (y * dy).sum().backward()
    out.update({"gate.x": att, "gate.g": gate, "gate.dy": dy, "gate.y": y, "gate.dx": att.grad, "gate.dg": gate.grad})
    return out


def randomize(layer, randn, gen):
    """Random weights for a Qwen3.5 decoder layer: the zero-centred norms too, the
    gated norm near 1, A_log and dt_bias in their ranges."""
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty(p.shape).uniform_(0.5, 8, generator=gen)))
            elif name.endswith("dt_bias"):
                p.copy_(randn(*p.shape) * 0.5)
            elif name == "linear_attn.norm.weight":
                p.copy_(1 + 0.3 * randn(*p.shape))
            elif p.dim() == 1:  # the zero-centred norms
                p.copy_(0.3 * randn(*p.shape))
            else:
                p.copy_(randn(*p.shape) * (0.5 if "conv1d" in name else 0.15))


def layer_fixture(prefix, layer, randn, pos, rotary=None):
    """The layer on the rows (row 0's records each on their own, their positions
    from 0), L = Σ y·dy: prefix + x, dy, y, dx, w.<name>, grad.<name>."""
    x = randn(B, T, DN_D).requires_grad_()
    dy = randn(B, T, DN_D)
    bounds = list(RECORDS) + [T]
    segments = [(0, s, e) for s, e in zip(bounds, bounds[1:])] + [(1, 0, T)]
    rows = {0: [], 1: []}
    for b, s, e in segments:
        pe = rotary(x, pos[b:b + 1, s:e].long()) if rotary else None
        rows[b].append(layer(x[b:b + 1, s:e], position_embeddings=pe)[0])
    y = torch.stack([torch.cat(rows[0]), torch.cat(rows[1])])
    (y * dy).sum().backward()
    out = {prefix + "x": x, prefix + "dy": dy, prefix + "y": y, prefix + "dx": x.grad}
    for name, p in layer.named_parameters():
        out[prefix + "w." + name] = p
        out[prefix + "grad." + name] = p.grad
    return out


def attn_layer(randn, gen, pos):
    """A whole gated full-attention decoder layer (Qwen3_5DecoderLayer,
    full_attention): hidden 40, 4 heads of 16 over 2 kv heads (head_dim
    independent of hidden), a quarter of each head rotated (theta 10000), MLP 56,
    random weights, sdpa (causal). Names: ga.*, as dn_layer's."""
    cfg = Qwen3_5TextConfig(hidden_size=DN_D, intermediate_size=56, num_hidden_layers=1,
                            layer_types=["full_attention"], num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                            rms_norm_eps=1e-6, attn_implementation="sdpa",
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                             "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0],
                                             "mrope_interleaved": True})
    layer = Qwen3_5DecoderLayer(cfg, 0).float()
    randomize(layer, randn, gen)
    return layer_fixture("ga.", layer, randn, pos, Qwen3_5TextRotaryEmbedding(cfg))


def dn_layer(randn, gen, pos):
    """A whole Gated DeltaNet decoder layer (Qwen3_5DecoderLayer, linear_attention):
    hidden 40, 2 key heads of 6, 4 value heads of 10, conv 4, MLP 56, random weights
    (the zero-centred norms too), on the same rows (row 0's records each through the
    layer on its own). Names: dn.x, dn.dy, dn.y, dn.dx, dn.w.<name> and
    dn.grad.<name> for each of the layer's parameters."""
    cfg = Qwen3_5TextConfig(hidden_size=DN_D, intermediate_size=56, num_hidden_layers=1,
                            layer_types=["linear_attention"], linear_num_key_heads=2, linear_num_value_heads=4,
                            linear_key_head_dim=6, linear_value_head_dim=10, linear_conv_kernel_dim=4,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-6)
    layer = Qwen3_5DecoderLayer(cfg, 0).float()
    randomize(layer, randn, gen)
    return layer_fixture("dn.", layer, randn, pos)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=FIXTURES)
    args = ap.parse_args()
    torch.set_num_threads(1)  # the same sums in the same order on every run
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(SEED)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float32)

    def l2(x):
        return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)

    q = l2(randn(B, T, HK, KD)).requires_grad_()
    k = l2(randn(B, T, HK, KD)).requires_grad_()
    v = randn(B, T, HV, VD).requires_grad_()
    a_log = torch.log(torch.empty(HV).uniform_(0.5, 8, generator=gen))
    g = (-a_log.exp() * torch.nn.functional.softplus(randn(B, T, HV) + 1.0)).requires_grad_()
    beta = torch.sigmoid(randn(B, T, HV)).requires_grad_()
    dout = randn(B, T, HV, VD)

    pos = torch.zeros(B, T, dtype=torch.int32)
    pos[1] = torch.arange(T, dtype=torch.int32)
    bounds = list(RECORDS) + [T]
    for s, e in zip(bounds, bounds[1:]):
        pos[0, s:e] = torch.arange(e - s, dtype=torch.int32)
    segments = [(0, s, e) for s, e in zip(bounds, bounds[1:])] + [(1, 0, T)]

    rows = {0: [], 1: []}
    for b, s, e in segments:
        o, _ = torch_chunk_gated_delta_rule(q[b:b + 1, s:e], k[b:b + 1, s:e], v[b:b + 1, s:e], g=g[b:b + 1, s:e],
                                            beta=beta[b:b + 1, s:e], chunk_size=64, use_qk_l2norm_in_kernel=False)
        ref, _ = gated_delta_rule64(q[b:b + 1, s:e].detach(), k[b:b + 1, s:e].detach(), v[b:b + 1, s:e].detach(),
                                    g[b:b + 1, s:e].detach(), beta[b:b + 1, s:e].detach())
        ref = ref[0].double()
        err = (o[0].double() - ref).abs().max() / ref.abs().max()
        assert err < 1e-5, f"transformers' chunked rule and the float64 recurrence differ by {err:.3g} (row {b}, {s}:{e})"
        rows[b].append(o[0])
    out = torch.stack([torch.cat(rows[0]), torch.cat(rows[1])])
    (out * dout).sum().backward()

    tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "dout": dout, "out": out,
               "dq": q.grad, "dk": k.grad, "dv": v.grad, "dg": g.grad, "dbeta": beta.grad}
    tensors.update(blocks(randn, gen, pos))
    tensors.update(dn_layer(randn, gen, pos))
    tensors.update(attn_layer(randn, gen, pos))
    tensors = {n: t.detach().contiguous().float() for n, t in tensors.items()}
    tensors["pos"] = pos
    d = os.path.join(args.out, "hybrid_blocks")
    os.makedirs(d, exist_ok=True)
    save_file(tensors, os.path.join(d, "ref.safetensors"))  # no metadata: safetensors writes it in hash order
    report(args.out, ["hybrid_blocks"])


if __name__ == "__main__":
    main()
