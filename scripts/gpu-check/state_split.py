#!/usr/bin/env python3
"""The state kernels' bandwidth in a profiled training step, against the copy rate: issue 26's
target "the state-heavy kernels (delta write, compressors, readout) reach >= 60 % of the copy
bandwidth `ddl bench copy` measures", judged on the step's own timing of each dispatch.

    python3 scripts/gpu-check/state_split.py RESULTS.tar.gz [MORE.tar.gz ...]
        [--step bench-train-small-ddl] [--bytes ARCHIVE] [--copy-gbs GB/S] [--target 0.6]

Reads the raw JSON lines `run.sh` wrote (a later archive's stage replaces an earlier one's):
the profiled step's dispatches (`train_dispatch` rows of stage `--step`, `ddl bench train
--dispatches`), grouped into the state operations one call of the model runs — the delta
write's forward (`delta::delta_forward`), its backward (`delta::delta_backward` with
`delta::delta_heads`), the token compressor's forward (`shortconv::token_forward*`) and backward
(the walk `shortconv::token_backward*` with its finish, `token_finish_*` and `reduce_drho`) —
and the bytes one such call moves from a `bench kernels` run at the same shapes (`--bytes`,
default the H200 run 4 archive: small-124m, B 8 x T 1024, d 768, m 4; the bytes depend on the
shapes only). The copy rate: `--copy-gbs`, else a `bench copy` row in the archives, else run
3's 2331 GB/s (a kernel's read + write pass of 1 GiB on an H200). Prints per operation the calls,
ms a step and a call, MB and GB/s a call, the share of the copy rate, and whether it reaches
`--target`. The bench's cases time whole operations (the backward's walk and finish together),
so the step's dispatches are summed the same way. Python's standard library only.
"""

import argparse
import os
import sys

from verdicts import load

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BYTES = os.path.join(HERE, "..", "..", "docs", "gpu-runs", "2026-11-28-h200-d", "results-1.tar.gz")
RUN3_COPY_GBS = 2331.0

# operation: (the bench kernels case name's start, kernels whose dispatches it sums, the kernel
# whose dispatch count is the number of calls). A state stored in f16 has its own cases.
OPS = [
    ("delta write forward", "delta_forward N=", ("delta::delta_forward",), "delta::delta_forward"),
    ("delta write backward", "delta_backward N=", ("delta::delta_backward", "delta::delta_heads"),
     "delta::delta_backward"),
    ("token compressor forward", "shortconv token_forward B=", ("shortconv::token_forward",),
     "shortconv::token_forward"),
    ("token compressor backward", "shortconv token_backward B=",
     ("shortconv::token_backward", "shortconv::token_finish", "shortconv::reduce_drho"),
     "shortconv::token_backward"),
]


def kernel_name(row):
    """`module::entry` of a dispatch row (`attention:matmul[w128]::wm_kk` -> `attention:matmul::wm_kk`)."""
    k = row.get("kernel", "")
    head, _, entry = k.rpartition("::")
    return head.split("[", 1)[0] + "::" + entry


def case_bytes(rows, start, f16):
    """Bytes of the `bench kernels` case whose name starts with `start` (the f16-state case with
    `f16`), or None."""
    for r in rows:
        if r.get("bench") != "kernel" or not r.get("name", "").startswith(start):
            continue
        if r["name"].endswith("f16 state") == f16 and " m=4" in r["name"]:
            return r["bytes"]
    return None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="results*.tar.gz of the GPU check")
    ap.add_argument("--step", default="bench-train-small-ddl", help="the stage whose profiled step is read")
    ap.add_argument("--bytes", default=DEFAULT_BYTES, help="an archive with a bench-kernels stage at the step's shapes")
    ap.add_argument("--copy-gbs", type=float, help="the copy rate in GB/s (default: the archives' bench copy)")
    ap.add_argument("--target", type=float, default=0.6, help="the share of the copy rate to reach")
    a = ap.parse_args(argv)

    lines, _ = load(a.results)
    step = lines.get(a.step)
    if not step:
        sys.exit(f"state_split.py: no stage {a.step} in {', '.join(a.results)} (run.sh's profiled ddl step)")
    ds = [r for r in step if r.get("bench") == "train_dispatch"]
    if not ds:
        sys.exit(f"state_split.py: stage {a.step} has no dispatch rows (was it run with --dispatches?)")
    train = next((r for r in step if r.get("bench") == "train"), {})
    f16 = bool(train.get("state_f16"))
    blines, _ = load([a.bytes])
    kernels = blines.get("bench-kernels", [])
    if not kernels:
        sys.exit(f"state_split.py: no bench-kernels stage in {a.bytes} (--bytes: an archive whose bench-kernels ran)")

    copy = a.copy_gbs
    where = "--copy-gbs"
    if copy is None:
        for stage, rows in lines.items():
            for r in rows:
                if r.get("bench") == "copy" and r.get("kernel_gb_per_s"):
                    copy, where = r["kernel_gb_per_s"], f"the copy row of stage {stage}"
    if copy is None:
        copy, where = RUN3_COPY_GBS, "run 3's bench copy (none in the archives)"

    print(f"{a.step}: {train.get('variant', '?')} B {train.get('batch', '?')} T {train.get('seq', '?')}, "
          f"{'f16' if f16 else 'f32'} state, step {train.get('step_ms', float('nan')):.1f} ms; "
          f"copy rate {copy:.0f} GB/s ({where}); bytes from {os.path.relpath(a.bytes)}")
    print()
    print("| operation | calls | ms a step | ms a call | MB a call | GB/s | of copy | >= target |")
    print("|---|---|---|---|---|---|---|---|")
    total_ms, total_bytes, short = 0.0, 0.0, []
    for name, start, prefixes, counter in OPS:
        mine = [d for d in ds if kernel_name(d).startswith(prefixes)]
        calls = sum(1 for d in mine if kernel_name(d).startswith(counter))
        if not calls:
            print(f"| {name} | 0 | | | | | | (not in this step) |")
            continue
        ms = sum(d["ms"] for d in mine)
        b = case_bytes(kernels, start, f16)
        if b is None:
            print(f"| {name} | {calls} | {ms:.2f} | {ms / calls:.3f} | ? | | | (no bench case '{start}…') |")
            continue
        gbs = b * calls / (ms * 1e6)
        share = gbs / copy
        ok = share >= a.target
        if not ok:
            short.append(name)
        total_ms += ms
        total_bytes += b * calls
        print(f"| {name} | {calls} | {ms:.2f} | {ms / calls:.3f} | {b / 1e6:.1f} | {gbs:.0f} | "
              f"{100 * share:.0f} % | {'yes' if ok else 'no'} |")
    if total_ms:
        print(f"\nTogether {total_ms:.2f} ms a step, {total_bytes / (total_ms * 1e6):.0f} GB/s, "
              f"{100 * total_bytes / (total_ms * 1e6) / copy:.0f} % of the copy rate; "
              + (f"below {100 * a.target:.0f} %: {', '.join(short)}" if short else
                 f"every operation at {100 * a.target:.0f} % or more"))


if __name__ == "__main__":
    main(sys.argv[1:])
