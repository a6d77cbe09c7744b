"""The gated delta rule token by token in float64: the reference that checks
transformers' float32 chunked form (gen_hybrid_fixtures.py) and stands in for it
where a model's gradients are wanted in float64 (gen_fixtures.py's qwen3_5)."""
import torch


def gated_delta_rule64(query, key, value, g, beta, use_qk_l2norm_in_kernel=False, **_):
    """transformers' torch_chunk_gated_delta_rule's contract ([B, T, heads, dim]
    tensors; value head h reads key head h // (Hv / Hk)), in float64 by recurrence:
    S = exp(g)·S; w = v − Sᵀk; S += k·(β·w)ᵀ; o = Sᵀq/√dk. Returns (out, None) in
    value's dtype."""
    dt = torch.float64
    q, k = query.to(dt), key.to(dt)
    if use_qk_l2norm_in_kernel:
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    per = value.shape[2] // key.shape[2]
    q = q.repeat_interleave(per, 2) * key.shape[-1] ** -0.5
    k = k.repeat_interleave(per, 2)
    v, g, beta = value.to(dt), g.to(dt), beta.to(dt)
    B, T, H, dk = k.shape
    S = torch.zeros(B, H, dk, v.shape[-1], dtype=dt)
    outs = []
    for t in range(T):
        S = S * torch.exp(g[:, t])[..., None, None]
        w = v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t])
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], beta[:, t][..., None] * w)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outs, 1).to(value.dtype), None
