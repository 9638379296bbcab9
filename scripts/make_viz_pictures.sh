#!/usr/bin/env bash
# The visualizer's pictures in the README and docs/VISUALIZER.md, from a `tiny` DDL model trained
# on TinyShakespeare (character level) to a validation loss under 1.60:
#
#   scripts/make_viz_pictures.sh [RUN_DIR]      (default runs/viz-tiny; trained first if absent)
#
# Training: 4000 AdamW steps of 16 × 64 tokens, cosine from 3e-3 to 3e-4 over the whole run
# (4.1 M tokens: 48 minutes on lavapipe on 2 cores on 2026-12-07, with release and debug builds
# running beside it, 1300–3000 tok/s after the matmul autotune's first minutes; the 110 minutes
# written here before came from the 630 tok/s of the first 40 steps). That run's final loss was
# 1.5361, as before. The final whole-split validation loss is printed and checked (< 1.60) before
# any picture is taken. Pictures: ddl-viz in a virtual X display
# (Xvfb), one window per view, written to docs/img/viz-*.png.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
RUN="${1:-runs/viz-tiny}"
DDL="${DDL:-target/release/ddl}"
VIZ="${VIZ:-target/release/ddl-viz}"
[ -x "$DDL" ] && [ -x "$VIZ" ] || cargo build --release --workspace
if [ ! -f "$RUN/model.safetensors" ]; then
  "$DDL" train --preset tiny --variant ddl --steps 4000 --seed 1 \
    --set train.decay_steps=4000 --set train.lr=3e-3 --set train.min_lr=3e-4 --set train.warmup_steps=40 \
    --set train.batch_size=16 --set train.seq_len=64 --set train.eval_every=250 --set train.eval_batches=8 \
    --out "$RUN"
elif ! grep -q '"step": 4000' "$RUN/summary.json" 2>/dev/null; then
  "$DDL" train --resume "$RUN" --steps 4000      # an interrupted run continues
fi
# summary.json's val_loss: the final evaluation over the whole validation split.
val=$(grep -o '"val_loss": [0-9.]*' "$RUN/summary.json" | tail -1 | awk '{ print $2 }')
tokens=$(grep -o '"val_tokens": [0-9]*' "$RUN/summary.json" | tail -1 | awk '{ print $2 }')
echo "final validation loss of $RUN: $val over $tokens tokens"
awk -v v="$val" 'BEGIN { exit !(v < 1.60) }' || { echo "error: $val is not under 1.60; train longer" >&2; exit 1; }

command -v Xvfb >/dev/null || { echo "error: Xvfb not found (Debian: apt-get install xvfb)" >&2; exit 1; }
DISPLAY_NUM=:$((150 + $$ % 50))
Xvfb "$DISPLAY_NUM" -screen 0 1400x900x24 -nolisten tcp >/dev/null 2>&1 &
XPID=$!
trap 'kill $XPID 2>/dev/null' EXIT
sleep 2
XDG="$(mktemp -d)"; chmod 700 "$XDG"
shot() { # name, extra args...
  local name="$1"; shift
  env -u WAYLAND_DISPLAY DISPLAY="$DISPLAY_NUM" XDG_RUNTIME_DIR="$XDG" "$VIZ" --checkpoint "$RUN" \
    --prompt "ROMEO:" --width 1300 --height 820 --screenshot "docs/img/viz-$name.png" --exit-after-screenshot "$@"
  echo "docs/img/viz-$name.png"
}
shot beta-map --generate 60 --tab beta
shot eigen --generate 60 --tab eigen
shot kdirs --generate 60 --tab k
shot lens --generate 60 --tab lens
shot interventions --generate 60 --intervene block1.mlp:beta=0 --intervene block2.attn:k=mean --tab interventions
shot training --generate 1 --tab training
