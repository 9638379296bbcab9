#!/usr/bin/env python3
"""Times full training steps of the PyTorch reference model (shared/reference/ddl_torch.py), on
the CPU or a CUDA GPU, as the point of comparison for the engine on the same machine.

A step = zero_grad, forward on random int tokens (fixed seed), cross-entropy loss, backward,
global grad-norm clip 1.0 (torch.nn.utils.clip_grad_norm_), torch.optim.AdamW step
(lr 1e-4, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1 on the spec's decayed tensors only,
i.e. ddl_torch.decayed_names; the rest in a weight_decay 0 group; fused on CUDA). Untimed
warm-up steps (more with --compile, whose first steps compile), then N timed steps; reports
the median step time and tokens/s (B*T / median). On CUDA each step is timed between two
device synchronisations, and the peak allocated memory is reported.

Precision: --dtype float32 runs every matmul in true float32 (TF32 off: the engine computes in
f32, so this is the like-for-like baseline); --dtype bf16 runs the forward under
torch.autocast(bfloat16) with float32 master parameters, as mixed-precision training does.
--compile wraps the loss (forward) in torch.compile.

Usage:
    python3 scripts/torch_reference_bench.py --preset tiny|shakespeare-char|small-124m|medium-353m \
        --variant baseline|ddl_v1|ddl|ddl_ec|ddl_cc|ddl_ccec|ddl_v1_vmap|ddl_vmap \
        [--batch B] [--seq T] [--device auto|cpu|cuda] [--dtype float32|bf16] [--compile] \
        --steps N [--warmup W] [--threads 2] [--attn sdpa|explicit] [--json]

--attn picks ddl_torch.ATTN_IMPL: "sdpa" (default; the reference's fast path for benchmarks,
F.scaled_dot_product_attention with is_causal) or "explicit" (the golden einsum/mask path).
The reference model is found through DDL_TORCH_REFERENCE, ../shared/reference beside the
checkout, or reference/ beside this script (the GPU-check bundle's layout).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

try:
    import torch
except ImportError:
    _help = "-h" in sys.argv or "--help" in sys.argv
    sys.exit(
        "torch_reference_bench: PyTorch is not installed here (pip install torch; the GPU check's machine has it)"
        + ("\n\n" + (__doc__ or "") if _help else "")
    )

HERE = os.path.dirname(os.path.abspath(__file__))
REF_CANDIDATES = [
    os.environ.get("DDL_TORCH_REFERENCE", ""),
    os.path.join(HERE, "reference"),
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

# The engine's presets (src/model/config.rs, src/train/config.rs): model shapes and the
# training batch. d_v, kernels and the rest are the reference's defaults, which match the
# engine's (d_v = 4, K_s = K_e = 4, mlp_hidden = floor(8d/3)).
PRESETS = {
    "tiny": dict(model=dict(vocab_size=65, d_model=128, n_layers=4, n_heads=4, head_dim=32),
                 batch=12, seq_len=64),
    "shakespeare-char": dict(model=dict(vocab_size=65, d_model=384, n_layers=6, n_heads=6, head_dim=64),
                             batch=8, seq_len=256),
    "small-124m": dict(model=dict(vocab_size=50304, d_model=768, n_layers=12, n_heads=6, head_dim=128),
                       batch=8, seq_len=1024),
    "medium-353m": dict(model=dict(vocab_size=50304, d_model=1024, n_layers=24, n_heads=8, head_dim=128),
                        batch=8, seq_len=1024),
}
SEED = 1234

_ROPE_CACHE: dict = {}


def rope_on_device(x, base):
    """ddl_torch.rope with its angle tables made once per (T, h, device, dtype) on x's device
    (the reference builds them on the CPU, which a CUDA tensor cannot multiply). Same math."""
    T, h = x.shape[1], x.shape[-1]
    half = h // 2
    key = (T, h, float(base), x.device, x.dtype)
    if key not in _ROPE_CACHE:
        inv = base ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / h)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        _ROPE_CACHE[key] = (ang.cos().to(device=x.device, dtype=x.dtype)[None, :, None, :],
                            ang.sin().to(device=x.device, dtype=x.dtype)[None, :, None, :])
    cos, sin = _ROPE_CACHE[key]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--variant", choices=D.VARIANTS, default="baseline")
    ap.add_argument("--batch", type=int, help="batch size (default: the preset's)")
    ap.add_argument("--seq", type=int, help="sequence length (default: the preset's)")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="auto: cuda when torch sees a GPU, else cpu")
    ap.add_argument("--dtype", choices=("float32", "bf16"), default="float32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the forward/loss")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (after the warm-up)")
    ap.add_argument("--warmup", type=int, help="untimed warm-up steps (default 1, 3 with --compile)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--attn", choices=("sdpa", "explicit"), default="sdpa")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.steps < 1:
        ap.error("--steps must be >= 1")
    for name in ("batch", "seq"):
        v = getattr(a, name)
        if v is not None and v < 1:
            ap.error(f"--{name} must be >= 1, got {v}")
    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_reference_bench: --device cuda but torch sees no CUDA device "
                 f"(torch {torch.__version__}); use --device cpu")
    warmup = a.warmup if a.warmup is not None else (3 if a.compile else 1)

    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        # Like for like with the engine's f32: no TF32 in float32 matmuls or convolutions.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    D.ATTN_IMPL = a.attn
    D.rope = rope_on_device
    pre = PRESETS[a.preset]
    B, T = a.batch or pre["batch"], a.seq or pre["seq_len"]
    # ddl_v1 / ddl_v1_vmap force d_v = 1 and baseline d_v = 0 in Config.__post_init__.
    # CC variants need state_kernel == d_v (4 == 4 here).
    cfg = D.Config(variant=a.variant, batch=B, seq_len=T, **pre["model"])

    gen = torch.Generator().manual_seed(SEED)
    P0 = D.init_params(cfg, gen, dtype=torch.float32)
    params = {n: torch.nn.Parameter(p.to(dev).contiguous()) for n, p in P0.items()}
    decay = set(D.decayed_names(cfg))
    groups = [
        {"params": [p for n, p in params.items() if n in decay], "weight_decay": 0.1},
        {"params": [p for n, p in params.items() if n not in decay], "weight_decay": 0.0},
    ]
    opt_kw = dict(fused=True) if dev.type == "cuda" else {}
    opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **opt_kw)
    # random tokens, next-token targets
    seq = torch.randint(0, cfg.vocab_size, (B, T + 1), generator=gen)
    tokens, targets = seq[:, :-1].contiguous().to(dev), seq[:, 1:].contiguous().to(dev)
    plist = list(params.values())

    def loss_fn(P, x, y):
        return D.forward(cfg, P, x, y)["loss"]

    fwd = torch.compile(loss_fn) if a.compile else loss_fn
    amp = (torch.autocast(device_type=dev.type, dtype=torch.bfloat16) if a.dtype == "bf16"
           else torch.autocast(device_type=dev.type, enabled=False))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def step():
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = fwd(params, tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, 1.0)
        opt.step()
        return loss.detach()

    t0 = time.perf_counter()
    loss0 = None
    for _ in range(warmup):
        loss0 = float(step())
    sync()
    warm_ms = (time.perf_counter() - t0) * 1e3
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for _ in range(a.steps):
        sync()
        t0 = time.perf_counter()
        losses.append(step())
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    losses = [float(x) for x in losses]
    med = statistics.median(times)
    tok_s = B * T / (med / 1e3)
    n_params = sum(p.numel() for p in plist)
    out = {
        "impl": "torch", "torch": torch.__version__, "preset": a.preset, "variant": a.variant,
        "batch": B, "seq_len": T, "device": a.device,
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "threads": a.threads, "attn": a.attn, "dtype": a.dtype, "compile": a.compile,
        "tf32": False if dev.type == "cuda" else None,
        "steps": a.steps, "warmup_steps": warmup, "median_ms": med, "tokens_per_s": tok_s,
        "min_ms": min(times), "max_ms": max(times), "step_ms": times, "warmup_ms": warm_ms,
        "loss_first": loss0, "loss_last": losses[-1],
        # 6·N·(B·T) FLOPs for the parameters' matmuls, the usual MFU numerator
        "model_tflop_per_step": 6.0 * n_params * B * T / 1e12,
        "peak_mem_bytes": torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None,
        "n_params": n_params, "config": json.loads(cfg.to_json()),
    }
    if a.json:
        print(json.dumps(out))
    else:
        extra = f", peak {out['peak_mem_bytes'] / 2**30:.2f} GiB" if out["peak_mem_bytes"] else ""
        print(f"torch {a.variant} {a.preset} B={B} T={T} on {out['device_name']} {a.dtype}"
              f"{' compiled' if a.compile else ''}: {med:.1f} ms/step, {tok_s:.0f} tok/s{extra} "
              f"(torch {torch.__version__})")


if __name__ == "__main__":
    main()
