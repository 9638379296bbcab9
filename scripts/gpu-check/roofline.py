#!/usr/bin/env python3
"""The roofline table of a GPU check's `bench kernels` (docs/GPU.md): one markdown row per kernel
case with its time, FLOPs and bytes against the floors the run measured (bytes at the copy
bandwidth, FLOPs at the engine's best matmul rate, as `ddl bench kernels` computes them).

    python3 scripts/gpu-check/roofline.py docs/gpu-runs/2026-11-27-h200-c/results-2.tar.gz

Reads raw/bench-kernels.jsonl from the archive (or a .jsonl file given directly); rows sorted by
time, largest first. Only the standard library.
"""
import json
import sys

from verdicts import open_results


def rows(path):
    if path.endswith(".jsonl"):
        try:
            with open(path, encoding="utf-8") as f:
                return [json.loads(l) for l in f if l.startswith("{")]
        except OSError as e:
            sys.exit(f"roofline.py: cannot read {path}: {e} (expected bench-kernels.jsonl or a results*.tar.gz)")
    with open_results(path) as t:
        for m in t.getmembers():
            if m.name.endswith("raw/bench-kernels.jsonl"):
                return [json.loads(l) for l in t.extractfile(m).read().decode().splitlines() if l.startswith("{")]
    sys.exit(f"{path}: no raw/bench-kernels.jsonl in it (a GPU check's results.tar.gz whose bench-kernels ran?)")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rs = rows(sys.argv[1])
    ks = [r for r in rs if r.get("bench") == "kernel"]
    if not ks:
        sys.exit(f"{sys.argv[1]}: no kernel rows")
    gbs = next((r["kernel_gb_per_s"] for r in rs if r.get("bench") == "copy" and "kernel_gb_per_s" in r), None)
    print("| kernel | ms | GFLOP/s | GB/s | bound | floor ms | of floor |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(ks, key=lambda r: -r["ms"]):
        print(f"| {r['name']} | {r['ms']:.3f} | {r['gflop_per_s']:.0f} | {r['gb_per_s']:.0f} | {r['bound']} "
              f"| {r['floor_ms']:.3f} | {100 * r['of_floor']:.0f} % |")
    total = sum(r["ms"] for r in ks)
    floor = sum(r["floor_ms"] for r in ks)
    print(f"\n{len(ks)} cases, {total:.2f} ms in all against floors of {floor:.2f} ms ({100 * floor / total:.0f} %)"
          + (f"; copy bandwidth {gbs:.0f} GB/s" if gbs else ""))


if __name__ == "__main__":
    main()
