#!/usr/bin/env python3
"""Write the POET-X reference fixtures: one weight (tests/fixtures/poet_linear, read by
tests/parity/test_poet_linear.c) and whole models (tests/fixtures/poet_layers, read by
tests/parity/test_poet_layer.c).

A plain-PyTorch implementation of one POET-X weight (engine/poet/poet.h gives the
parameterization; this file restates it independently with torch autograd, in
float64): random permutations, block-diagonal rotations from skew-symmetric Q by
the Cayley-Neumann series R = (I + Q)(I + Q + Q^2 + Q^3), the input-centric
chain y = P_out-gather((P_in-gather(x) . diag(R_in)) . W0^T . diag(R_out)) + bias,
and the gradients autograd gives for L = sum(y * dy). The weight is not square
(m = 96 out, n = 64 in) with block size 32, so the two sides have different block
counts. Also written: the effective weight, and the base the merge computes for
new permutations.

The model fixtures take the transformers fixture models (llama_tied, qwen2, qwen3 under
tests/fixtures, with their input_ids and labels), converted to float64, and put every
q, k, v, o, gate, up and down projection of every decoder layer under POET-X with
block size 16 (random permutations and theta), biases added after the chain as
poet.h does. transformers' own model then computes the loss; autograd gives the
gradients of every theta, of the norms, the embedding and the head. The input and
output of each decoder layer, and their gradients, are captured with hooks, so a
layer can be checked on its own. Then 10 training steps on that batch (traj.losses):
Adam on every theta at poet_lr on the lr schedule (eps 1e-6, no weight decay), AdamW on
the norms, embedding and head, clipping of the global norm with its threshold ramped
after merges, and merge-then-reinitialise every 5 updates with the new permutations
drawn as the engine draws them (common/rng.c's xoshiro256** seeded for each layer and
weight, poet/state.c's streams): the engine's run from the same state must agree.

Seeded, float64 math, stored as float32 (int32 permutations): a rerun writes the
same bytes. Usage: .venv/bin/python3 tests/ref/gen_poet_fixtures.py [--out DIR]
(DIR gets poet_linear/ and poet_layers/).
"""
import argparse
import hashlib
import json
import math
import os

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.normpath(os.path.join(HERE, "..", "fixtures"))
MODELS = ("llama_tied", "qwen2", "qwen3")
LAYER_BLOCK = 16
LAYER_THETA_SCALE = 0.05
PROJS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
         "mlp.up_proj", "mlp.down_proj")

M, N, B, T = 96, 64, 32, 40
SEED = 1601
THETA_SCALE = 0.02  # rotations well away from I (the Q^4 term shows), with a small series error


def skew(theta, b):
    """[nblk, b(b-1)/2] strict upper triangles (row-major) -> [nblk, b, b] skew Q."""
    rows, cols = torch.triu_indices(b, b, 1)
    q = theta.new_zeros(theta.shape[0], b, b)
    q[:, rows, cols] = theta
    return q - q.transpose(1, 2)


def cayley_neumann(theta, b):
    q = skew(theta, b)
    eye = torch.eye(b, dtype=theta.dtype).expand_as(q)
    q2 = q @ q
    return (eye + q) @ (eye + q + q2 + q2 @ q)


def rotate(x, r):
    """x [T, nblk*b] . diag(r) for r [nblk, b, b]."""
    t, dim = x.shape
    nblk, b, _ = r.shape
    return torch.einsum("tkc,kcd->tkd", x.view(t, nblk, b), r).reshape(t, dim)


def chain(x, w0, bias, pin, pout, r_in, r_out):
    u = x[:, pin]
    v = rotate(u, r_in)
    z = v @ w0.T
    w = rotate(z, r_out)
    return w[:, pout] + bias


def effective(w0, pin, pout, r_in, r_out):
    """The weight W with chain(x) = x . W^T + bias: the chain applied to I_n."""
    eye = torch.eye(w0.shape[1], dtype=w0.dtype)
    return chain(eye, w0, torch.zeros(w0.shape[0], dtype=w0.dtype), pin, pout, r_in, r_out).T


# The trajectory (traj.losses): the engine's spec in test_poet_model.c says the same.
TRAJ = dict(steps=10, seed=77, merge_every=5, poet_lr=2e-3, lr=1e-3, min_lr=1e-4, warmup_steps=3,
            total_steps=10, betas=(0.9, 0.95), eps=1e-8, poet_eps=1e-6, weight_decay=0.1, clip=0.5)
M64 = (1 << 64) - 1


class EngineRng:
    """common/rng.c: splitmix64 seeding, xoshiro256**, unbiased below(), Fisher-Yates."""

    def __init__(self, seed, stream):
        x = (seed ^ (stream * 0xd1342543de82ef95)) & M64
        self.s = []
        for _ in range(4):
            x = (x + 0x9e3779b97f4a7c15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
            z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
            self.s.append(z ^ (z >> 31))

    def u64(self):
        s = self.s
        rotl = lambda x, k: ((x << k) | (x >> (64 - k))) & M64
        out = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return out

    def below(self, n):
        limit = M64 - M64 % n
        while True:
            x = self.u64()
            if x < limit:
                return x % n

    def perm(self, n):
        a = list(range(n))
        for i in range(n, 1, -1):
            j = self.below(i)
            a[i - 1], a[j] = a[j], a[i - 1]
        return torch.tensor(a)


def perm_stream(merge, layer, weight):
    """poet/state.c's stream of a weight's permutations after `merge` merges."""
    return (1 << 63) | (merge << 32) | (layer << 8) | weight


def lr_at(step, lr, min_lr):
    t = TRAJ
    if step < t["warmup_steps"]:
        return lr * (step + 1) / t["warmup_steps"]
    progress = (step - t["warmup_steps"]) / (t["total_steps"] - t["warmup_steps"])
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def clip_ramp(step, merge_every):
    if step < merge_every or step % merge_every >= 10:
        return 1.0
    return 0.1 + 0.9 * (step % merge_every) / 10


class PoetLinear(torch.nn.Module):
    """A frozen nn.Linear under POET-X: chain() with trainable theta on both sides."""

    def __init__(self, lin, b, scale):
        super().__init__()
        m, n = lin.weight.shape
        tri = b * (b - 1) // 2
        self.b = b
        self.register_buffer("w0", lin.weight.detach().clone())
        self.register_buffer("bias", lin.bias.detach().clone() if lin.bias is not None else torch.zeros(m, dtype=lin.weight.dtype))
        self.register_buffer("pin", torch.randperm(n))
        self.register_buffer("pout", torch.randperm(m))
        self.theta_in = torch.nn.Parameter(torch.randn(n // b, tri, dtype=lin.weight.dtype) * scale)
        self.theta_out = torch.nn.Parameter(torch.randn(m // b, tri, dtype=lin.weight.dtype) * scale)

    @torch.no_grad()
    def merge(self, rng):
        """W0 <- the effective weight under new permutations from rng; theta <- 0."""
        w_eff = effective(self.w0, self.pin, self.pout, cayley_neumann(self.theta_in, self.b),
                          cayley_neumann(self.theta_out, self.b))
        pin, pout = rng.perm(self.w0.shape[1]), rng.perm(self.w0.shape[0])
        self.w0[pout] = w_eff[:, pin]
        self.pin.copy_(pin)
        self.pout.copy_(pout)
        self.theta_in.zero_()
        self.theta_out.zero_()

    def forward(self, x):
        shape = x.shape
        y = chain(x.reshape(-1, shape[-1]), self.w0, self.bias, self.pin, self.pout,
                  cayley_neumann(self.theta_in, self.b), cayley_neumann(self.theta_out, self.b))
        return y.reshape(*shape[:-1], y.shape[-1])


def trajectory(model, input_ids, labels):
    """TRAJ's run from the model's current state; its losses (float32)."""
    t = TRAJ
    thetas = [p for n, p in model.named_parameters() if "theta_" in n]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and "theta_" not in n]
    groups = [{"params": thetas, "weight_decay": 0.0, "eps": t["poet_eps"], "kind": "poet"},
              {"params": [p for p in rest if p.ndim >= 2], "weight_decay": t["weight_decay"], "kind": "lr"},
              {"params": [p for p in rest if p.ndim < 2], "weight_decay": 0.0, "kind": "lr"}]
    opt = torch.optim.AdamW(groups, lr=t["lr"], betas=t["betas"], eps=t["eps"], foreach=False, fused=False)
    poet = [(l, k, getattr(getattr(layer, p.split(".")[0]), p.split(".")[1]))
            for l, layer in enumerate(model.model.layers) for k, p in enumerate(PROJS)]
    losses = []
    for step in range(t["steps"]):
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g in groups for p in g["params"]],
                                       max_norm=t["clip"] * clip_ramp(step, t["merge_every"]))
        lr = lr_at(step, t["lr"], t["min_lr"])
        for g in opt.param_groups:
            g["lr"] = t["poet_lr"] * lr / t["lr"] if g["kind"] == "poet" else lr
        opt.step()
        losses.append(loss.item())
        if (step + 1) % t["merge_every"] == 0:
            merge = (step + 1) // t["merge_every"]
            for l, k, mod in poet:
                mod.merge(EngineRng(t["seed"], perm_stream(merge, l, k)))
            for p in thetas:  # Adam starts over on the new theta
                opt.state[p] = {}
    return torch.tensor(losses, dtype=torch.float32)


def gen_layers(out):
    import transformers
    from safetensors.torch import load_file

    os.makedirs(out, exist_ok=True)
    for k, name in enumerate(MODELS):
        torch.manual_seed(SEED + 1 + k)
        src = os.path.join(FIXTURES, name)
        model = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float64, attn_implementation="eager")
        ref = load_file(os.path.join(src, "ref.safetensors"))
        input_ids, labels = ref["input_ids"].long(), ref["labels"].long()
        tensors = {}
        for l, layer in enumerate(model.model.layers):
            for proj in PROJS:
                parent_name, leaf = proj.split(".")
                parent = getattr(layer, parent_name)
                setattr(parent, leaf, PoetLinear(getattr(parent, leaf), LAYER_BLOCK, LAYER_THETA_SCALE))
        for p in model.parameters():
            p.requires_grad_(False)
        trainable = {n: p for n, p in model.named_parameters()
                     if "theta_" in n or "norm" in n or "embed_tokens" in n or "lm_head" in n}
        for p in trainable.values():
            p.requires_grad_(True)
        seen = {}

        def hook(l):
            def fn(mod, args, kwargs, output):
                x = kwargs.get("hidden_states", args[0] if args else None)
                y = output[0] if isinstance(output, tuple) else output
                x.retain_grad()
                y.retain_grad()
                seen[l] = (x, y)
            return fn

        for l, layer in enumerate(model.model.layers):
            layer.register_forward_hook(hook(l), with_kwargs=True)
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        f32 = lambda t: t.detach().to(torch.float32).contiguous()
        tensors["loss"] = f32(loss.reshape(1))
        for n, p in model.named_parameters():
            if "theta_" in n:
                tensors[n] = f32(p)
            if p.requires_grad:
                tensors["grad." + n] = f32(p.grad)
        for n, b in model.named_buffers():
            if n.endswith(".pin") or n.endswith(".pout"):
                tensors[n] = b.to(torch.int32).contiguous()
        for l, (x, y) in seen.items():
            tensors[f"layer.{l}.x"], tensors[f"layer.{l}.y"] = f32(x), f32(y)
            tensors[f"layer.{l}.dx"], tensors[f"layer.{l}.dy"] = f32(x.grad), f32(y.grad)
        tensors["traj.losses"] = trajectory(model, input_ids, labels)
        save_file(tensors, os.path.join(out, f"{name}.safetensors"))
    meta = dict(models=list(MODELS), block=LAYER_BLOCK, theta_scale=LAYER_THETA_SCALE, seed=SEED, trajectory=TRAJ,
                torch=torch.__version__, series="R = (I + Q)(I + Q + Q^2 + Q^3)",
                bias="added after the chain (poet.h)", math="float64, stored as float32",
                loss="transformers' causal LM loss on the fixture's input_ids and labels",
                names="model.layers.L.<proj>.theta_in|theta_out|pin|pout; grad.<parameter>; "
                      "layer.L.x|y|dx|dy (decoder layer L's input and output and their gradients)")
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=FIXTURES)
    args = ap.parse_args()
    gen_layers(os.path.join(args.out, "poet_layers"))
    out = os.path.join(args.out, "poet_linear")
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    f64 = torch.float64
    tri = B * (B - 1) // 2
    x = torch.randn(T, N, dtype=f64)
    w0 = torch.randn(M, N, dtype=f64) / N ** 0.5
    bias = torch.randn(M, dtype=f64) * 0.1
    pin, pout = torch.randperm(N), torch.randperm(M)
    theta_in = (torch.randn(N // B, tri, dtype=f64) * THETA_SCALE).requires_grad_()
    theta_out = (torch.randn(M // B, tri, dtype=f64) * THETA_SCALE).requires_grad_()
    dy = torch.randn(T, M, dtype=f64)
    xg = x.clone().requires_grad_()

    r_in, r_out = cayley_neumann(theta_in, B), cayley_neumann(theta_out, B)
    y = chain(xg, w0, bias, pin, pout, r_in, r_out)
    (y * dy).sum().backward()

    with torch.no_grad():
        w_eff = effective(w0, pin, pout, r_in, r_out)
        assert torch.allclose(x @ w_eff.T + bias, y), "the effective weight does not reproduce the chain"
        pin2, pout2 = torch.randperm(N), torch.randperm(M)
        # The new base: with every R = I under pin2, pout2 it computes w_eff.
        w0_new = torch.empty_like(w_eff)
        w0_new[pout2] = w_eff[:, pin2]
        eye_in = torch.eye(B, dtype=f64).expand(N // B, B, B)
        eye_out = torch.eye(B, dtype=f64).expand(M // B, B, B)
        assert torch.allclose(chain(x, w0_new, bias, pin2, pout2, eye_in, eye_out), y)
        orth = lambda r: max(float(torch.linalg.matrix_norm(rk.T @ rk - torch.eye(B, dtype=f64))) for rk in r)

    f32 = lambda t: t.detach().to(torch.float32).contiguous()
    i32 = lambda t: t.to(torch.int32).contiguous()
    tensors = {
        "x": f32(x), "w0": f32(w0), "bias": f32(bias), "pin": i32(pin), "pout": i32(pout),
        "theta_in": f32(theta_in), "theta_out": f32(theta_out), "dy": f32(dy),
        "r_in": f32(r_in), "r_out": f32(r_out), "y": f32(y), "dx": f32(xg.grad),
        "dtheta_in": f32(theta_in.grad), "dtheta_out": f32(theta_out.grad),
        "w_eff": f32(w_eff), "pin2": i32(pin2), "pout2": i32(pout2), "w0_new": f32(w0_new),
        "orth_err": torch.tensor([orth(r_in.detach()), orth(r_out.detach())], dtype=torch.float32),
    }
    os.makedirs(out, exist_ok=True)
    st = os.path.join(out, "ref.safetensors")
    save_file(tensors, st)
    meta = dict(m=M, n=N, block=B, rows=T, seed=SEED, theta_scale=THETA_SCALE, torch=torch.__version__,
                series="R = (I + Q)(I + Q + Q^2 + Q^3)", loss="sum(y * dy)", math="float64, stored as float32")
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")
    files = [os.path.join(out, n) for n in ("ref.safetensors", "ref.json")]
    files += [os.path.join(args.out, "poet_layers", n) for n in [m + ".safetensors" for m in MODELS] + ["ref.json"]]
    for p in files:
        with open(p, "rb") as f:
            print(f"{p}: {os.path.getsize(p)} bytes, sha256 {hashlib.sha256(f.read()).hexdigest()[:16]}")


if __name__ == "__main__":
    main()
