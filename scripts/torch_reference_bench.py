#!/usr/bin/env python3
"""Times full training steps of the PyTorch reference model (shared/reference/ddl_torch.py)
on the CPU in float32, as a point of comparison for the port.

A step = zero_grad, forward on random int tokens (fixed seed), cross-entropy loss, backward,
global grad-norm clip 1.0 (torch.nn.utils.clip_grad_norm_), torch.optim.AdamW step
(lr 1e-4, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1 on the spec's decayed tensors only,
i.e. ddl_torch.decayed_names; the rest in a weight_decay 0 group). One untimed warm-up step,
then N timed steps; reports the median step time and tokens/s (B*T / median).

Usage:
    python3 scripts/torch_reference_bench.py --preset tiny|shakespeare-char \
        --variant baseline|ddl_v1|ddl|ddl_ec|ddl_cc|ddl_ccec|ddl_v1_vmap|ddl_vmap \
        --steps N [--threads 2] [--attn sdpa|explicit] [--json]

--attn picks ddl_torch.ATTN_IMPL: "sdpa" (default; the reference's fast path for benchmarks,
F.scaled_dot_product_attention with is_causal) or "explicit" (the golden einsum/mask path).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REF_CANDIDATES = [
    os.environ.get("DDL_TORCH_REFERENCE", ""),
    os.path.join(HERE, "..", "..", "shared", "reference"),
    os.path.join(HERE, "..", "shared", "reference"),
    "/work/shared/reference",
]
for _d in REF_CANDIDATES:
    if _d and os.path.isfile(os.path.join(_d, "ddl_torch.py")):
        sys.path.insert(0, os.path.abspath(_d))
        break
else:
    sys.exit("torch_reference_bench: ddl_torch.py not found (set DDL_TORCH_REFERENCE to its folder)")
import ddl_torch as D  # noqa: E402

PRESETS = {
    "tiny": dict(model=dict(vocab_size=65, d_model=128, n_layers=4, n_heads=4, head_dim=32,
                            mlp_hidden=(8 * 128) // 3, d_v=4, state_kernel=4, embed_kernel=4),
                 batch=12, seq_len=64),
    "shakespeare-char": dict(model=dict(vocab_size=65, d_model=384, n_layers=6, n_heads=6, head_dim=64,
                                        mlp_hidden=(8 * 384) // 3, d_v=4, state_kernel=4, embed_kernel=4),
                             batch=8, seq_len=256),
}
SEED = 1234


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--variant", choices=D.VARIANTS, default="baseline")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (after one untimed warm-up)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--attn", choices=("sdpa", "explicit"), default="sdpa")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.steps < 1:
        ap.error("--steps must be >= 1")

    torch.set_num_threads(a.threads)
    D.ATTN_IMPL = a.attn
    pre = PRESETS[a.preset]
    B, T = pre["batch"], pre["seq_len"]
    # ddl_v1 / ddl_v1_vmap force d_v = 1 and baseline d_v = 0 in Config.__post_init__.
    # CC variants need state_kernel == d_v (4 == 4 here).
    cfg = D.Config(variant=a.variant, batch=B, seq_len=T, **pre["model"])

    gen = torch.Generator().manual_seed(SEED)
    P0 = D.init_params(cfg, gen, dtype=torch.float32)
    params = {n: torch.nn.Parameter(p.contiguous()) for n, p in P0.items()}
    decay = set(D.decayed_names(cfg))
    groups = [
        {"params": [p for n, p in params.items() if n in decay], "weight_decay": 0.1},
        {"params": [p for n, p in params.items() if n not in decay], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    # random tokens, next-token targets
    seq = torch.randint(0, cfg.vocab_size, (B, T + 1), generator=gen)
    tokens, targets = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    plist = list(params.values())

    def step():
        opt.zero_grad(set_to_none=True)
        loss = D.forward(cfg, params, tokens, targets)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, 1.0)
        opt.step()
        return float(loss.detach())

    t0 = time.perf_counter()
    loss0 = step()                                  # warm-up, untimed
    warm_ms = (time.perf_counter() - t0) * 1e3
    times, losses = [], []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        losses.append(step())
        times.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(times)
    tok_s = B * T / (med / 1e3)

    if a.json:
        print(json.dumps({
            "impl": "torch", "torch": torch.__version__, "preset": a.preset, "variant": a.variant,
            "batch": B, "seq_len": T, "threads": a.threads, "attn": a.attn, "dtype": "float32",
            "steps": a.steps, "median_ms": med, "tokens_per_s": tok_s,
            "min_ms": min(times), "max_ms": max(times), "step_ms": times, "warmup_ms": warm_ms,
            "loss_first": loss0, "loss_last": losses[-1],
            "n_params": sum(p.numel() for p in plist), "config": json.loads(cfg.to_json()),
        }))
    else:
        print(f"torch {a.variant} {a.preset} B={B} T={T}: {med:.1f} ms/step, {tok_s:.0f} tok/s "
              f"(threads {a.threads}, torch {torch.__version__})")


if __name__ == "__main__":
    main()
