#!/usr/bin/env python3
"""Peers of the fused 8-bit AdamW pass for tests/bench/optim.sh: one optimizer
step over --tensors fp32 tensors holding --params parameters in all, with the
same thread count, one warm-up step, then --reps timed steps. Prints
"<impl>_params_per_s <median>".

impl: torch-single (torch.optim.AdamW, foreach=False), torch-foreach
(foreach=True), torch-fused (fused=True, where this torch has a CPU kernel),
deepspeed (deepspeed.ops.adam.DeepSpeedCPUAdam, adamw_mode=True: the optimizer
MegaTrain and LazyTrain run). All with fp32 state, as each ships."""
import argparse
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", required=True, choices=["torch-single", "torch-foreach", "torch-fused", "deepspeed"])
    ap.add_argument("--params", type=int, default=1 << 27)
    ap.add_argument("--tensors", type=int, default=8)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)  # DeepSpeed's kernel is OpenMP
    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    per = a.params // a.tensors
    params = []
    for _ in range(a.tensors):
        p = torch.nn.Parameter(torch.randn(per) * 0.02)
        p.grad = torch.randn(per) * 1e-3
        params.append(p)
    hp = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    if a.impl == "deepspeed":
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        opt = DeepSpeedCPUAdam(params, adamw_mode=True, **hp)
    elif a.impl == "torch-fused":
        opt = torch.optim.AdamW(params, fused=True, **hp)
    else:
        opt = torch.optim.AdamW(params, foreach=a.impl == "torch-foreach", **hp)
    rates = []
    for r in range(a.reps + 1):
        t0 = time.perf_counter()
        opt.step()
        dt = time.perf_counter() - t0
        if r:
            rates.append(per * a.tensors / dt)
    print(f"{a.impl}_threads {torch.get_num_threads()}")
    print(f"{a.impl}_params_per_s {statistics.median(rates):.4g}")


if __name__ == "__main__":
    sys.exit(main())
