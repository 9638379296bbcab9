"""Golden files of the public set with β interventions (issue #32): the reference model of
../shared/reference (ddl_torch.py, float64) with the gate of chosen delta writes set to a constant,
written by make_golden.py's own build_case (same parameters, batch and format as the public
goldens), plus the intervention spec in the metadata ("interventions", the `--intervene` syntax).
The engine's decode path must reproduce their logits (tests/decode.rs). Made once:

    python3 scripts/make_override_goldens.py --reference ../shared/reference --out tests/golden/override
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
from safetensors.torch import save_file

# Each case: variant, specs (target: all | blockN | blockN.attn | blockN.mlp, action beta=V), file name.
CASES = [
    ("ddl", ["block1.mlp:beta=0"], "ddl_block1mlp_beta0"),
    ("ddl", ["all:beta=1"], "ddl_all_beta1"),
    ("ddl", ["block0.attn:beta=2", "block1.attn:beta=0"], "ddl_attn_beta2_beta0"),
    ("ddl_cc", ["block0.mlp:beta=2"], "ddl_cc_block0mlp_beta2"),
    ("ddl_cc", ["all:beta=0"], "ddl_cc_all_beta0"),
    ("ddl_cc", ["block1:beta=1"], "ddl_cc_block1_beta1"),
]


def targets(specs, n_layers):
    """{delta-write prefix: β} from `--intervene` specs with `beta=V` actions (later ones win)."""
    out = {}
    for spec in specs:
        target, action = spec.split(":")
        assert action.startswith("beta="), spec
        value = float(action[len("beta="):])
        for i in range(n_layers):
            for s in ("attn", "mlp"):
                if target in ("all", f"block{i}", f"block{i}.{s}"):
                    out[f"blocks.{i}.{s}_delta."] = value
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", required=True, help="the folder of ddl_torch.py and make_golden.py")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.reference))
    import ddl_torch as D  # noqa: E402
    import make_golden as MG  # noqa: E402

    original = D.delta_write
    active = {}

    def delta_write(cfg, P, pre, X, k_raw, a_, c):
        """ddl_torch.delta_write with β replaced by a constant for the prefixes in `active`."""
        if pre not in active:
            return original(cfg, P, pre, X, k_raw, a_, c)
        n = torch.sqrt(k_raw.pow(2).sum(-1, keepdim=True) + cfg.k_eps ** 2)
        k = k_raw / n
        # The gate stays in the graph with weight 0 (its parameters get zero gradients, not none).
        gate = 2.0 * torch.sigmoid(c @ P[pre + "w_beta"].T + P[pre + "b_beta"])[..., 0]
        beta = torch.full(k.shape[:-1], active[pre], dtype=k.dtype) + 0.0 * gate
        v = D.value_act(cfg, a_ @ P[pre + "w_v"].T + P[pre + "b_v"])
        p = torch.einsum("btd,btdm->btm", k, X)
        Xn = X + beta[..., None, None] * k[..., :, None] * (v - p)[..., None, :]
        return Xn, beta, k, v

    D.delta_write = delta_write
    torch.set_num_threads(min(2, torch.get_num_threads()))
    os.makedirs(a.out, exist_ok=True)
    spec = dict(MG.PUBLIC)
    for variant, specs, name in CASES:
        model = dict(spec["model"], **spec.get("variant_overrides", {}).get(variant, {}))
        active.clear()
        active.update(targets(specs, model["n_layers"]))
        T, meta, st = MG.build_case(spec, variant, list(D.VARIANTS).index(variant))
        meta["interventions"] = "; ".join(specs)
        path = os.path.join(a.out, f"{name}.safetensors")
        save_file(T, path, metadata=meta)
        print(f"{name:24s} {os.path.getsize(path):8d} B  loss {st['loss']:.6f}  beta {st['beta_range']}")


if __name__ == "__main__":
    main()
