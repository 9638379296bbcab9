#!/usr/bin/env python3
"""Times PyTorch's own matrix products (cuBLAS on CUDA) at the shapes `ddl bench matmul` times,
as the point of comparison for the engine's tiles on the same card.

    python3 scripts/torch_matmul_bench.py [--sizes 4096] [--cases nn,nt,tn] [--model]
        [--dtype float32|bf16] [--device auto|cpu|cuda] [--reps 10] [--warmup 3] [--json]

--dtype float32 (the default) runs true float32 products (TF32 off, matmul precision
"highest"): the like-for-like rate against the engine's f32 tiles. bf16 runs bf16 operands with
PyTorch's own accumulation (the tensor cores), for the cooperative-matrix kernels.
Forms, as the engine names them (src/bench/mod.rs): nn C = A·B (A M×K, B K×N, both row-major),
nt C = A·Bᵀ (B stored N×K: x·Wᵀ), tn C = Aᵀ·B (A stored K×M: dYᵀ·X). --model adds the
linear-layer products of one small-124m training step (`ddl bench matmul --model`'s list:
B·T = 8192 tokens, d 768, hidden 2048, vocabulary 50304), named as the engine names them.
Each product: `--warmup` untimed runs, then `--reps` timed between CUDA events (wall clock on
the CPU); the median in ms and its TFLOP/s (2·M·N·K / time). Prints one line per product, or
JSON lines (`"impl": "torch", "bench": "matmul"`) with --json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

try:
    import torch
except ImportError:
    _help = "-h" in sys.argv or "--help" in sys.argv
    sys.exit(
        "torch_matmul_bench: PyTorch is not installed here (pip install torch; the GPU check's machine has it)"
        + ("\n\n" + (__doc__ or "") if _help else "")
    )

CASES = ("nn", "nt", "tn")


def model_products(n=8192, d=768, dq=768, f=2048, vocab=50304):
    """The engine's `model_matmuls`: (name, form, m, n, k)."""
    out = []
    for layer, fan_in, fan_out in [
        ("attn.wq/wk/wv", d, dq),
        ("attn.wo", dq, d),
        ("mlp.w_gate/w_up", d, f),
        ("mlp.w_down", f, d),
        ("lm_head", d, vocab),
    ]:
        out.append((f"{layer} fwd x·Wᵀ", "nt", n, fan_out, fan_in))
        out.append((f"{layer} dW = dYᵀ·X", "tn", fan_out, fan_in, n))
        out.append((f"{layer} dX = dY·W", "nn", n, fan_in, fan_out))
    return out


def operands(form, m, n, k, dtype, device, gen):
    """A and B stored as the engine's form stores them, and the product as a function."""
    def rnd(*shape):
        return torch.rand(*shape, generator=gen, device=device, dtype=torch.float32).sub_(0.5).to(dtype)
    if form == "nn":
        a, b = rnd(m, k), rnd(k, n)
        return lambda: a @ b
    if form == "nt":
        a, b = rnd(m, k), rnd(n, k)
        return lambda: a @ b.t()
    if form == "tn":
        a, b = rnd(k, m), rnd(k, n)
        return lambda: a.t() @ b
    raise ValueError(f"--cases: unknown form '{form}' (expected nn, nt or tn)")


def time_product(fn, device, warmup, reps):
    """Median ms of `reps` runs after `warmup`."""
    for _ in range(warmup):
        fn()
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4096", help="square sizes, comma-separated (empty: none)")
    ap.add_argument("--cases", default="nn,nt,tn", help="forms of the square products: nn, nt, tn")
    ap.add_argument("--model", action="store_true", help="also small-124m's training products")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bf16"])
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sys.stdout.reconfigure(encoding="utf-8")  # the products' names (x·Wᵀ) in any locale
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--sizes: '{args.sizes}' is not a comma-separated list of integers")
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad:
        ap.error(f"--cases: unknown form '{bad[0]}' (expected some of nn, nt, tn)")
    if args.reps < 1 or args.warmup < 0:
        ap.error("--reps must be at least 1 and --warmup at least 0")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_matmul_bench: --device cuda, but torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dtype = torch.float32 if args.dtype == "float32" else torch.bfloat16
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    products = [(c, c, s, s, s) for s in sizes for c in cases]
    if args.model:
        products += model_products()
    gen = torch.Generator(device=device).manual_seed(1234)
    for label, form, m, n, k in products:
        fn = operands(form, m, n, k, dtype, device, gen)
        ms = time_product(fn, device, args.warmup, args.reps)
        tflops = 2.0 * m * n * k / (ms * 1e-3) / 1e12
        row = dict(impl="torch", bench="matmul", case=label, form=form, m=m, n=n, k=k, dtype=args.dtype,
                   tf32=False, device=device, device_name=name, torch=torch.__version__,
                   reps=args.reps, median_ms=ms, tflops=tflops)
        if args.json:
            print(json.dumps(row, separators=(",", ":"), ensure_ascii=False), flush=True)
        else:
            print(f"{label:>28} {m}x{n}x{k} {args.dtype}: {ms:8.3f} ms  {tflops:7.2f} TFLOP/s", flush=True)
        del fn
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
