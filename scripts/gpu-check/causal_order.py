#!/usr/bin/env python3
"""How long the causal attention's ragged products wait for their last tiles, by tile order.

The causal method's products over keys (O = P·V, dQ = dS·K) and over queries (dV = Pᵀ·dO,
dK = dSᵀ·Q) give a tile of rows in granule g (of T/128) a K range of g + 1 granules (over keys)
or T/128 − g (over queries). A GPU hands out workgroups in the order of their index to the
slots that free up (list scheduling). In the grid's own order (tiles along N, then M, then
batch) the longest tiles of the last batches start last; longest first (form `causal_lpt`,
src/kernels/matmul/mod.rs `CAUSAL_LONGEST_FIRST`) the dispatch ends with the shortest.

This counts the dispatch's span in granules of K (a tile's start and stores as `--overhead`
granules) for both orders against the perfectly balanced span (work / slots), for a few
numbers of resident workgroups. A model of the scheduling, not a measurement: the GPU check's
`bench-train-small-causal-lpt` measures it.

    python3 scripts/gpu-check/causal_order.py                 # small-124m: B 8 × 6 heads, T 1024
    python3 scripts/gpu-check/causal_order.py --tile-rows 64 --tiles-n 2 --slots 264,528
    python3 scripts/gpu-check/causal_order.py --results RESULTS.tar.gz …  # a profiled step's

With --results, the attention's products of the first profiled step (`bench train
--dispatches`, e.g. the check's `bench-train-small-ddl`) in those archives, per entry point and
grid: under the causal form `wm_kk` are the score products (equal tiles), `wm_kn` the products
over keys and `wm_mn` those over queries (ragged K ranges); their rates side by side are what
the count above is a model of.
"""

import argparse
import heapq


def span(works, slots):
    """The end of list scheduling `works` in order on `slots` identical slots."""
    free = [0.0] * slots
    for w in works:
        t = heapq.heappop(free)
        heapq.heappush(free, t + w)
    return max(free)


def tiles(batches, t, tile_rows, tiles_n, overhead, over_keys, gran=128):
    """Each tile's work in the grid's order (N fastest, then M, then batch), in granules."""
    tiles_m = -(-t // tile_rows)
    ng = -(-t // gran)
    out = []
    for _ in range(batches):
        for tm in range(tiles_m):
            g = tm * tile_rows // gran
            k = min(t, (g + 1) * gran) if over_keys else t - g * gran
            out += [k / gran + overhead] * tiles_n
    assert all(w > 0 for w in out) and ng > 0
    return out


def measured(paths):
    """The attention's products of the first profiled step in the results archives `paths`."""
    import os
    import statistics
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from verdicts import load

    lines, _ = load(paths)
    for stage, rows in sorted(lines.items()):
        ds = [r for r in rows if "kernel" in r and str(r["kernel"]).startswith("attention:")]
        if not ds:
            continue
        forms = next((r for r in rows if r.get("bench") == "forms"), {})
        print(f"{stage} (attention={forms.get('attention', '?')}, causal_lpt={forms.get('causal_lpt', 'off')}):")
        print("| products | workgroups | dispatches | median ms | ms a step | TFLOP/s |")
        print("|---|---|---|---|---|---|")
        groups = {}
        for r in ds:
            groups.setdefault((r["kernel"], tuple(r["workgroups"])), []).append(r)
        for (kernel, wg), rs in sorted(groups.items()):
            ms = sum(r["ms"] for r in rs)
            gf = sum(r.get("gflop") or 0.0 for r in rs)
            rate = f"{gf / ms:.1f}" if ms > 0 and gf > 0 else "-"
            med = statistics.median(r["ms"] for r in rs)
            print(f"| {kernel} | {' × '.join(map(str, wg))} | {len(rs)} | {med:.3f} | {ms:.2f} | {rate} |")
        return
    sys.exit("causal_order.py: no profiled step with attention products in " + ", ".join(paths)
             + " (expected a results*.tar.gz with a `bench train --dispatches` stage)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=48, help="batch × heads (small-124m: 8 × 6)")
    ap.add_argument("--t", type=int, default=1024, help="sequence length")
    ap.add_argument("--tile-rows", type=int, default=128, help="rows of C per tile (divides 128)")
    ap.add_argument("--tiles-n", type=int, default=1, help="tiles along N (head dim 128: 1 for 128-wide tiles)")
    ap.add_argument("--overhead", type=float, default=0.5, help="a tile's start and stores, in granules of K")
    ap.add_argument("--slots", default="132,264,396", help="resident workgroups (H200: 132 multiprocessors × 1, 2, 3)")
    ap.add_argument("--results", nargs="+", metavar="TAR", help="a GPU check's results archives: "
                    "the attention's products of their profiled step instead of the count")
    a = ap.parse_args()
    if a.results:
        measured(a.results)
        return
    if a.tile_rows <= 0 or 128 % a.tile_rows:
        ap.error(f"--tile-rows {a.tile_rows}: expected a divisor of 128 (the causal granule)")
    print(f"{a.batches} batches, T {a.t}, tiles of {a.tile_rows} rows × {a.tiles_n} along N, "
          f"overhead {a.overhead} granule a tile; spans in granules of K")
    print("| product | slots | balanced | grid order | longest first | longest first / grid |")
    print("|---|---|---|---|---|---|")
    for over_keys, name in [(True, "over keys (P·V, dS·K)"), (False, "over queries (Pᵀ·dO, dSᵀ·Q)")]:
        grid = tiles(a.batches, a.t, a.tile_rows, a.tiles_n, a.overhead, over_keys)
        lpt = sorted(grid, reverse=True)
        for slots in [int(s) for s in a.slots.split(",")]:
            g, l = span(grid, slots), span(lpt, slots)
            print(f"| {name} | {slots} | {sum(grid) / slots:.2f} | {g:.2f} | {l:.2f} | {l / g:.3f} |")


if __name__ == "__main__":
    main()
