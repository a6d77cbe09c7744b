#!/usr/bin/env python3
"""PyTorch peer of traind's CPU training benchmark.

Trains a randomly initialised transformers model (fp32, SDPA attention, no
torch.compile) on random tokens with full optimizer steps: forward with labels,
backward, clip_grad_norm_(1.0), AdamW step, zero_grad. Prints the time of every
step, then

    torch_tokens_per_s <median tokens/s over the measured steps>
    torch_params <parameter count>

for the benchmark driver to parse.
"""
import argparse
import statistics
import sys
import time

try:
    import torch
    import transformers
except ImportError as e:
    print(f"skipped: torch and transformers are needed ({e})")
    sys.exit(77)


def build_model(args):
    common = dict(
        vocab_size=args.vocab,
        hidden_size=args.d,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv,
        intermediate_size=args.ffn,
        max_position_embeddings=args.seq,
        # Qwen3's config defaults head_dim to 128; both archs get d/heads here so
        # the two match our engine's shapes.
        head_dim=args.d // args.heads,
        tie_word_embeddings=args.tie,
        attn_implementation="sdpa",  # the fastest attention transformers has on CPU
    )
    if args.arch == "llama":
        config = transformers.LlamaConfig(**common)
        return transformers.LlamaForCausalLM(config)
    if args.arch == "qwen3_5":
        # traind-train's hybrid40m: Gated DeltaNet layers of --dn-heads key and
        # twice as many value heads of head_dim, conv 4, full attention every
        # --full-every-th layer rotating a quarter of head_dim. Without
        # flash-linear-attention (not installed) transformers runs its delta
        # rule in plain PyTorch (torch_chunk_gated_delta_rule).
        hd = args.d // args.heads
        config = transformers.Qwen3_5TextConfig(
            **common, full_attention_interval=args.full_every, linear_num_key_heads=args.dn_heads,
            linear_num_value_heads=2 * args.dn_heads, linear_key_head_dim=hd, linear_value_head_dim=hd,
            linear_conv_kernel_dim=4,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})
        return transformers.Qwen3_5ForCausalLM(config)
    config = transformers.Qwen3Config(**common)
    return transformers.Qwen3ForCausalLM(config)


def main():
    ap = argparse.ArgumentParser(description="PyTorch CPU training throughput")
    ap.add_argument("--arch", choices=["llama", "qwen3", "qwen3_5"], default="qwen3")
    ap.add_argument("--full-every", type=int, default=4, help="qwen3_5: full attention every N-th layer")
    ap.add_argument("--dn-heads", type=int, default=4, help="qwen3_5: linear attention key heads")
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=688)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5, help="measured steps")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured steps first")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tie", action="store_true", help="tie embedding and head")
    # On the 5M config with 2 threads clip+AdamW took ~17.5 ms either way (about 5%
    # of a step); foreach=False came out marginally ahead, so it is the default.
    # --foreach lets a run check that again on another machine.
    ap.add_argument("--foreach", action="store_true", help="AdamW(foreach=True)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.d % args.heads or args.heads % args.kv:
        ap.error("--d must divide by --heads and --heads by --kv")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    transformers.logging.set_verbosity_error()

    model = build_model(args)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, foreach=args.foreach, fused=False)

    tokens = args.batch * args.seq
    g = torch.Generator().manual_seed(args.seed + 1)
    times = []
    for step in range(args.warmup + args.steps):
        # A fresh batch each step, drawn outside the timed region.
        ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        measured = step >= args.warmup
        if measured:
            times.append(dt)
        print(f"step {step} {'measured' if measured else 'warmup  '} "
              f"{dt * 1e3:9.1f} ms  {tokens / dt:10.1f} tok/s  loss {loss.item():.4f}",
              flush=True)

    if not times:
        ap.error("--steps must be at least 1")
    median = statistics.median(times)
    print(f"torch_step_ms {median * 1e3:.1f}")
    print(f"torch_tokens_per_s {tokens / median:.1f}")
    print(f"torch_params {n_params}")


if __name__ == "__main__":
    main()
