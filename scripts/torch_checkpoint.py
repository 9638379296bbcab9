#!/usr/bin/env python3
"""ddl checkpoints in PyTorch: load one into the PyTorch reference model (shared/reference/ddl_torch.py)
and evaluate it there, or write a ddl checkpoint from PyTorch parameters; `check` shows that both
directions agree with `ddl eval`.

A ddl checkpoint's `model.safetensors` holds every parameter under the spec's names (float32), the
model config, the tokenizer and the step as metadata (docs/TRAINING.md, "Checkpoints in PyTorch").
As a library:

    import torch_checkpoint as tc
    ck = tc.load("runs/a")                           # run folder, checkpoint folder or model.safetensors
    ids = tc.encode(ck.tokenizer, "ROMEO:")          # the checkpoint's tokenizer (char or BPE)
    out = ddl_torch.forward(ck.cfg, ck.params, torch.tensor([ids]))   # float64 by default
    tc.save("runs/torch", ck.cfg, ck.params, ck.tokenizer, max_seq_len=ck.max_seq_len, step=0)

From the command line:

    python3 scripts/torch_checkpoint.py eval runs/a --text play.txt [--seq-len T] [--batches N] [--json]
        # loss, perplexity, tokens, windows: the windows `ddl eval --checkpoint runs/a --text play.txt`
        # evaluates (consecutive, non-overlapping, window w predicting tokens w·T+1 … w·T+T; T and
        # the batch the run's train.seq_len and train.batch_size, as there)
    python3 scripts/torch_checkpoint.py init --like runs/a --out runs/t [--variant ddl_cc] [--seed 1]
        # a ddl checkpoint (step 0) of the PyTorch reference's spec init, with runs/a's config and
        # tokenizer (another --variant: what that variant decides derived anew); `ddl train
        # --init-from runs/t` trains from it
    python3 scripts/torch_checkpoint.py check --ddl target/release/ddl [--variants ddl,baseline] [--out DIR]
        # every variant (and `ddl` with a byte-level BPE tokenizer): a model trained a few steps by
        # ddl, evaluated by ddl and by PyTorch (float64); a model initialised by PyTorch, evaluated by
        # both; prints the relative differences, exit 1 above --tol

The reference model is found through DDL_TORCH_REFERENCE, reference/ beside this script, or
shared/reference beside the checkout (as scripts/torch_reference_bench.py finds it). Needs torch and
safetensors (and tokenizers for a BPE checkpoint).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, fields

try:
    import torch
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import save_file
except ImportError as e:
    _help = "-h" in sys.argv or "--help" in sys.argv
    sys.exit(
        f"torch_checkpoint: {e.name} is not installed here (pip install torch safetensors)"
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
    sys.exit("torch_checkpoint: ddl_torch.py not found (set DDL_TORCH_REFERENCE to its folder)")
import ddl_torch as D  # noqa: E402

FORMAT = "ddl-checkpoint-1"
VERSION = "1"
# The fields of ddl's model config (src/model/config.rs, which refuses any other), in its order.
DDL_FIELDS = (
    "variant", "vocab_size", "d_model", "n_layers", "n_heads", "head_dim", "mlp_hidden", "d_v",
    "state_kernel", "embed_kernel", "beta_init", "k_eps", "norm_eps", "rope_base", "v_act",
    "k_mlp_hidden", "k_rezero_scale", "label_smoothing", "embed_init_std", "init_std_factor",
    "max_seq_len",
)


class Bad(Exception):
    """A user's mistake, said with what to do; the command exits 2 with it."""


@dataclass
class Checkpoint:
    cfg: "D.Config"
    params: dict            # name -> tensor (the dtype asked for)
    tokenizer: str          # the checkpoint's tokenizer, as ddl stores it (JSON)
    step: int
    max_seq_len: int
    path: str               # the model.safetensors read


def model_file(path: str) -> str:
    """The model.safetensors of a run folder, a checkpoint folder or the file itself."""
    p = os.path.join(path, "model.safetensors") if os.path.isdir(path) else path
    if not os.path.isfile(p):
        where = f"'{path}' has no model.safetensors" if os.path.isdir(path) else f"'{path}' does not exist"
        raise Bad(f"{where}: give a run folder (runs/a), a checkpoint folder (runs/a/checkpoints/step-00000300) "
                  "or a model.safetensors")
    return p


def torch_config(cfg_json: str) -> tuple["D.Config", int]:
    """The reference's Config of a ddl config (JSON), and the ddl config's max_seq_len."""
    c = json.loads(cfg_json)
    known = {f.name for f in fields(D.Config)}
    return D.Config(**{k: v for k, v in c.items() if k in known}), int(c.get("max_seq_len", 0))


def load(path: str, dtype=torch.float64) -> Checkpoint:
    """A ddl checkpoint's parameters (as `dtype`), config, tokenizer and step."""
    p = model_file(path)
    try:
        return _load(p, dtype)
    except SafetensorError as e:
        raise Bad(f"'{p}' is not a valid safetensors file (truncated or corrupt): {e}")


def _load(p: str, dtype) -> Checkpoint:
    with safe_open(p, "pt") as f:
        meta = f.metadata() or {}
        if meta.get("format") != FORMAT:
            raise Bad(f"'{p}' is not a ddl checkpoint (its metadata 'format' is {meta.get('format')!r}, "
                      f"not {FORMAT!r})")
        cfg, max_seq_len = torch_config(meta["config"])
        want = {name: shape for name, shape, _, _ in D.param_specs(cfg)}
        have = set(f.keys())
        if set(want) - have:
            raise Bad(f"'{p}' lacks {sorted(set(want) - have)[:3]}… that a {cfg.variant} model has")
        params = {}
        for name, shape in want.items():
            t = f.get_tensor(name)
            if tuple(t.shape) != tuple(shape):
                raise Bad(f"'{p}': {name} has shape {tuple(t.shape)}, the config says {tuple(shape)}")
            params[name] = t.to(dtype)
    return Checkpoint(cfg, params, meta["tokenizer"], int(meta.get("step", "0")), max_seq_len, p)


def save(dir: str, cfg: "D.Config", params: dict, tokenizer: str, max_seq_len: int, step: int = 0) -> str:
    """Writes `dir/model.safetensors`, a checkpoint every ddl command reads (float32 tensors under
    the spec's names, the config, tokenizer and step as metadata); returns its path. The file is
    written under a temporary name and renamed into place."""
    c = {k: v for k, v in vars(cfg).items()}
    c["max_seq_len"] = int(max_seq_len)
    missing = [k for k in DDL_FIELDS if k not in c]
    if missing:
        raise Bad(f"the config lacks {missing}")
    if cfg.variant not in D.VARIANTS:
        raise Bad(f"variant {cfg.variant!r} is not one of {D.VARIANTS}")
    if not 1 <= c["max_seq_len"] <= 1 << 24:
        raise Bad(f"max_seq_len {max_seq_len}: expected the model's context, 1 … 16777216 tokens")
    try:
        kind = json.loads(tokenizer).get("kind")
    except (ValueError, AttributeError):
        kind = None
    if kind not in ("char", "bpe"):
        raise Bad("the tokenizer is not one a ddl checkpoint holds (JSON with kind 'char' or 'bpe': take it from "
                  "load(...).tokenizer)")
    for name, t in params.items():
        if not isinstance(t, torch.Tensor):
            raise Bad(f"{name} is a {type(t).__name__}, not a torch.Tensor")
        if not torch.isfinite(t).all():
            raise Bad(f"{name} holds a non-finite value (NaN or Inf): ddl refuses such a checkpoint")
    want = {name: tuple(shape) for name, shape, _, _ in D.param_specs(cfg)}
    if set(want) != set(params):
        raise Bad(f"the parameters are not those of a {cfg.variant} model: missing {sorted(set(want) - set(params))[:3]}, "
                  f"extra {sorted(set(params) - set(want))[:3]}")
    for name, shape in want.items():
        if tuple(params[name].shape) != shape:
            raise Bad(f"{name} has shape {tuple(params[name].shape)}, a {cfg.variant} model's is {shape}")
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "config": json.dumps({k: c[k] for k in DDL_FIELDS}, separators=(",", ":")),
        "tokenizer": tokenizer,
        "step": str(int(step)),
    }
    os.makedirs(dir, exist_ok=True)
    out = os.path.join(dir, "model.safetensors")
    fd, tmp = tempfile.mkstemp(prefix=".model.", suffix=".tmp", dir=dir)
    os.close(fd)
    try:
        save_file({k: v.detach().to(torch.float32).contiguous().cpu() for k, v in params.items()}, tmp, metadata=meta)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return out


def encode(tokenizer: str, text: str) -> list[int]:
    """`text`'s token ids with a checkpoint's tokenizer, as ddl encodes it (no special tokens added)."""
    t = json.loads(tokenizer)
    if t.get("kind") == "char":
        ids = {ch: i for i, ch in enumerate(t["chars"])}
        out = []
        for pos, ch in enumerate(text):
            if ch not in ids:
                raise Bad(f"character {ch!r} at character {pos} is not among the {len(ids)} characters of the "
                          "checkpoint's char tokenizer")
            out.append(ids[ch])
        return out
    if t.get("kind") == "bpe":
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise Bad("a BPE checkpoint needs Python's tokenizers (pip install tokenizers)")
        return Tokenizer.from_str(json.dumps(t["tokenizer"])).encode(text, add_special_tokens=False).ids
    raise Bad(f"unknown tokenizer kind {t.get('kind')!r}")


@torch.no_grad()
def evaluate(cfg: "D.Config", params: dict, ids: list[int], seq_len: int, batch_size: int = 16,
             batches: int | None = None) -> dict:
    """Mean cross-entropy (nats per predicted token, label smoothing off) over consecutive
    non-overlapping windows of `seq_len` (window w predicts tokens w·T+1 … w·T+T), as `ddl eval`
    computes it; only the first `batches` batches of `batch_size` windows if given."""
    windows = max(len(ids) - 1, 0) // seq_len
    if windows == 0:
        raise Bad(f"the text has {len(ids)} tokens: fewer than a window of {seq_len} + 1")
    if batches is not None:
        windows = min(windows, batches * batch_size)
    plain = D.Config(**{**vars(cfg), "label_smoothing": 0.0})
    data = torch.tensor(ids[: windows * seq_len + 1], dtype=torch.int64)
    total, n = 0.0, 0
    for w0 in range(0, windows, batch_size):
        w1 = min(w0 + batch_size, windows)
        x = torch.stack([data[w * seq_len: w * seq_len + seq_len] for w in range(w0, w1)])
        y = torch.stack([data[w * seq_len + 1: w * seq_len + seq_len + 1] for w in range(w0, w1)])
        loss = D.forward(plain, params, x, y)["loss"]
        total += float(loss) * y.numel()
        n += y.numel()
    loss = total / n
    return {"loss": loss, "perplexity": math.exp(loss), "tokens": n, "windows": windows, "seq_len": seq_len}


def read_text(path: str) -> str:
    if os.path.isdir(path):
        # As ddl joins a folder's .txt files: sorted by name, each file once (a link to another
        # counts once), a newline between them.
        names = sorted(n for n in os.listdir(path) if n.endswith(".txt") and os.path.isfile(os.path.join(path, n)))
        seen, text = set(), ""
        for n in names:
            real = os.path.realpath(os.path.join(path, n))
            if real in seen:
                continue
            seen.add(real)
            part = read_text(os.path.join(path, n))
            text = text + "\n" + part if text else part
        if not seen:
            raise Bad(f"--text '{path}' is a folder without .txt files")
        return text
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except FileNotFoundError:
        raise Bad(f"--text '{path}' does not exist")
    except UnicodeDecodeError as e:
        raise Bad(f"--text '{path}' is not UTF-8 (byte {e.start})")


def run_defaults(ck: Checkpoint) -> tuple[int, int]:
    """The window length and batch size `ddl eval` takes for this checkpoint: its run's
    `train.seq_len` and `train.batch_size` (config.toml beside it), else the model's context and 8."""
    cfg = os.path.join(os.path.dirname(ck.path), "config.toml")
    try:
        import tomllib
        with open(cfg, "rb") as f:
            t = tomllib.load(f).get("train", {})
        return int(t["seq_len"]), int(t["batch_size"])
    except (OSError, KeyError, ValueError, ImportError):
        return ck.max_seq_len, 8


def cmd_eval(a) -> int:
    dtype = {"float64": torch.float64, "float32": torch.float32}[a.dtype]
    ck = load(a.checkpoint, dtype)
    run_seq, run_batch = run_defaults(ck)
    seq_len = a.seq_len if a.seq_len is not None else run_seq
    batch_size = a.batch_size if a.batch_size is not None else run_batch
    if not 1 <= seq_len <= ck.max_seq_len:
        raise Bad(f"--seq-len {seq_len}: the model's windows are 1 … {ck.max_seq_len} tokens (max_seq_len)")
    r = evaluate(ck.cfg, ck.params, encode(ck.tokenizer, read_text(a.text)), seq_len, batch_size, a.batches)
    r.update(step=ck.step, checkpoint=ck.path, dtype=a.dtype)
    if a.json:
        print(json.dumps(r))
    else:
        print(f"loss {r['loss']:.6f} (perplexity {r['perplexity']:.3f}) over {r['windows']} windows of {seq_len}: "
              f"{r['tokens']} tokens, {ck.cfg.variant} checkpoint step {ck.step}, PyTorch {a.dtype}")
    return 0


def cmd_init(a) -> int:
    like = load(a.like)
    out_model = os.path.join(a.out, "model.safetensors")
    if os.path.exists(out_model) and not a.overwrite:
        raise Bad(f"'{out_model}' exists: --out names a new (or empty) folder; --overwrite replaces that model "
                  "(a run's other files stay and no longer match it)")
    c = {k: v for k, v in vars(like.cfg).items()}
    if a.variant and a.variant != like.cfg.variant:
        c["variant"] = a.variant
        # What a variant decides, derived again by the reference for the new one (v_act and the
        # k-MLP of v-Map, d_v of the d_v = 1 variants); an expanded state of width ≥ 2 (4 where the
        # source had none); the value-axis compressor's K_c = d_v.
        for k in ("v_act", "k_mlp_hidden"):
            c[k] = D.Config.__dataclass_fields__[k].default
        if a.variant in ("ddl", "ddl_ec", "ddl_cc", "ddl_ccec", "ddl_vmap") and c["d_v"] < 2:
            c["d_v"] = 4
        if a.variant in ("ddl_cc", "ddl_ccec"):
            c["state_kernel"] = c["d_v"]
    try:
        cfg = D.Config(**c)
    except ValueError as e:
        raise Bad(f"a {c['variant']} model of {a.like}'s shape: {e}")
    gen = torch.Generator().manual_seed(a.seed)
    params = D.init_params(cfg, gen)
    out = save(a.out, cfg, params, like.tokenizer, like.max_seq_len, step=0)
    print(f"{out}: a {cfg.variant} model of {D.param_count(cfg)} parameters, the reference's spec init (seed {a.seed})")
    return 0


def cmd_check(a) -> int:
    """Both directions for every variant: ddl trains, both evaluate; PyTorch initialises, both evaluate."""
    a.ddl = os.path.abspath(a.ddl)
    if not (os.path.isfile(a.ddl) and os.access(a.ddl, os.X_OK)):
        raise Bad(f"--ddl '{a.ddl}' is not an executable file: build it (cargo build --release --bin ddl) and pass "
                  "its path")
    unknown = [v for v in a.variants.split(",") if v and v not in D.VARIANTS] + (
        [a.bpe] if a.bpe and a.bpe not in D.VARIANTS else [])
    if unknown:
        raise Bad(f"unknown variant(s) {unknown}: expected some of {', '.join(D.VARIANTS)}")
    src = a.corpus or os.path.join(HERE, "..", "assets", "tinyshakespeare.txt")
    if not os.path.isfile(src):
        raise Bad(f"the corpus '{src}' does not exist: pass --corpus FILE (a UTF-8 text)")
    work = a.out or tempfile.mkdtemp(prefix="ddl-torch-check-")
    os.makedirs(work, exist_ok=True)
    env = {**os.environ, "DDL_CACHE_DIR": os.environ.get("DDL_CACHE_DIR", os.path.join(work, "cache"))}
    corpus = os.path.join(work, "corpus.txt")
    text = os.path.join(work, "text.txt")
    with open(src, encoding="utf-8") as f:
        body = f.read()
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(body[:200_000])
    with open(text, "w", encoding="utf-8") as f:
        f.write(body[-a.text_chars:])
    shape = ["--set", "model.d_model=64", "--set", "model.n_layers=2", "--set", "model.n_heads=2",
             "--set", "train.batch_size=8", "--set", "train.seq_len=32"]

    def ddl_eval(ck: str) -> float:
        o = subprocess.run([a.ddl, "eval", "--checkpoint", ck, "--text", text, "--seq-len", str(a.seq_len), "--json"],
                           env=env, capture_output=True, text=True)
        if o.returncode != 0:
            raise Bad(f"ddl eval {ck} failed: {o.stderr.strip()[-2000:]}")
        try:
            return json.loads(o.stdout)["loss"]
        except (ValueError, KeyError, TypeError):
            raise Bad(f"ddl eval {ck} printed no loss (is --ddl '{a.ddl}' ddl?): {o.stdout.strip()[:200]!r}")

    def run_ddl(what: str, args: list[str]):
        o = subprocess.run([a.ddl, *args], env=env, capture_output=True, text=True)
        if o.returncode != 0:
            raise Bad(f"ddl {what} failed: {o.stderr.strip()[-2000:]}")

    # The variants with the char tokenizer; then one with a byte-level BPE (Python's tokenizers
    # encodes the text there), when `--bpe` names a variant.
    cases = [(v, "char") for v in a.variants.split(",") if v] + ([(a.bpe, "bpe")] if a.bpe else [])
    bpe = os.path.join(work, "bpe.json")
    if a.bpe:
        run_ddl("tokenizer train", ["tokenizer", "train", "--corpus", corpus, "--vocab-size", "400", "--out", bpe])
    worst = 0.0
    print(f"{'variant':<12} {'tokenizer':<9} {'direction':<28} {'ddl eval':>10} {'PyTorch f64':>12} {'rel. diff':>10}")
    for v, kind in cases:
        run = os.path.join(work, v + ("-bpe" if kind == "bpe" else ""))
        tok = ["--tokenizer", bpe] if kind == "bpe" else []
        run_ddl(f"train {v}", ["--no-autotune", "train", "--preset", "tiny", "--variant", v, "--steps", str(a.steps),
                               "--corpus", corpus, "--out", run, "--overwrite", *tok, *shape])
        init = run + "-torch-init"
        for direction, ck in ((f"trained by ddl ({a.steps} steps)", run), ("initialised by PyTorch", init)):
            if ck == init:
                like = load(run)
                g = torch.Generator().manual_seed(7)
                save(init, like.cfg, D.init_params(like.cfg, g), like.tokenizer, like.max_seq_len)
            theirs = ddl_eval(ck)
            c = load(ck)
            ours = evaluate(c.cfg, c.params, encode(c.tokenizer, read_text(text)), a.seq_len)["loss"]
            rel = abs(theirs - ours) / abs(ours)
            worst = max(worst, rel)
            print(f"{v:<12} {kind:<9} {direction:<28} {theirs:>10.6f} {ours:>12.6f} {rel:>10.2e}")
    ok = worst <= a.tol
    print(f"largest relative difference {worst:.2e}: {'within' if ok else 'ABOVE'} --tol {a.tol:.0e} (files in {work})")
    return 0 if ok else 1


def positive(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, got {s!r}")
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, got {v}")
    return v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("eval", help="evaluate a ddl checkpoint with the PyTorch reference")
    e.add_argument("checkpoint")
    e.add_argument("--text", required=True, help="a UTF-8 text file or a folder of .txt files")
    e.add_argument("--seq-len", type=positive, default=None,
                   help="window length (default: the run's train.seq_len, as ddl eval; else the model's max_seq_len)")
    e.add_argument("--batch-size", type=positive, default=None,
                   help="windows per batch (default: the run's train.batch_size, else 8; matters with --batches)")
    e.add_argument("--batches", type=positive, default=None, help="only the first N batches of windows")
    e.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    e.add_argument("--json", action="store_true")
    i = sub.add_parser("init", help="a ddl checkpoint of the reference's spec init")
    i.add_argument("--like", required=True, help="a ddl checkpoint whose config and tokenizer to take")
    i.add_argument("--out", required=True)
    i.add_argument("--variant", choices=D.VARIANTS)
    i.add_argument("--seed", type=int, default=0)
    i.add_argument("--overwrite", action="store_true", help="replace a model.safetensors already in --out")
    c = sub.add_parser("check", help="ddl eval against PyTorch float64, both directions, every variant")
    c.add_argument("--ddl", required=True, help="the ddl binary (target/release/ddl)")
    c.add_argument("--variants", default=",".join(D.VARIANTS))
    c.add_argument("--bpe", default="ddl", help="also this variant with a byte-level BPE tokenizer ('' for none)")
    c.add_argument("--steps", type=positive, default=10)
    c.add_argument("--seq-len", type=positive, default=32)
    c.add_argument("--text-chars", type=positive, default=20_000)
    c.add_argument("--corpus", help="default: assets/tinyshakespeare.txt")
    c.add_argument("--out", help="a folder for the runs (default: a new temporary folder)")
    c.add_argument("--tol", type=float, default=1e-5, help="largest relative loss difference accepted")
    a = ap.parse_args()
    try:
        return {"eval": cmd_eval, "init": cmd_init, "check": cmd_check}[a.cmd](a)
    except Bad as err:
        print(f"torch_checkpoint: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
