#!/usr/bin/env python3
"""Write the POET-X reference fixture that tests/parity/test_poet_linear.c reads.

A plain-PyTorch implementation of one POET-X weight (engine/poet/poet.h gives the
parameterization; this file restates it independently with torch autograd, in
float64): random permutations, block-diagonal rotations from skew-symmetric Q by
the Cayley-Neumann series R = (I + Q)(I + Q + Q^2 + Q^3), the input-centric
chain y = P_out-gather((P_in-gather(x) . diag(R_in)) . W0^T . diag(R_out)) + bias,
and the gradients autograd gives for L = sum(y * dy). The weight is not square
(m = 96 out, n = 64 in) with block size 32, so the two sides have different block
counts. Also written: the effective weight, and the base the merge computes for
new permutations.

Seeded, float64 math, stored as float32 (int32 permutations): a rerun writes the
same bytes. Usage: .venv/bin/python3 tests/ref/gen_poet_fixtures.py [--out DIR]
"""
import argparse
import hashlib
import json
import os

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "fixtures", "poet_linear"))

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
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
    os.makedirs(args.out, exist_ok=True)
    st = os.path.join(args.out, "ref.safetensors")
    save_file(tensors, st)
    meta = dict(m=M, n=N, block=B, rows=T, seed=SEED, theta_scale=THETA_SCALE, torch=torch.__version__,
                series="R = (I + Q)(I + Q + Q^2 + Q^3)", loss="sum(y * dy)", math="float64, stored as float32")
    with open(os.path.join(args.out, "ref.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")
    for name in ("ref.safetensors", "ref.json"):
        p = os.path.join(args.out, name)
        with open(p, "rb") as f:
            print(f"{p}: {os.path.getsize(p)} bytes, sha256 {hashlib.sha256(f.read()).hexdigest()[:16]}")


if __name__ == "__main__":
    main()
