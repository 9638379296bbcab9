#!/usr/bin/env bash
# Issue 30's length criterion on lavapipe: do other settings of the micro grid flatten sooner?
# Five single runs of the baseline (seed 1), each with a cosine decay over its whole run, and
# how much each run's validation loss (the 8-batch subset every evaluation covers) still falls
# over its last 20 % of steps. The first is the grid's own setting (the same bits as the grid's
# run baseline-seed1 in docs/experiments/shakespeare/runs/); the others change one or two things
# at the same count of tokens (2000 × 16 × 64). ≈ 5 minutes a run alone on 2 cores; runs already
# finished in OUT are kept.
#
#   experiments/length-probes.sh [OUT]        (default runs/length-probes; DDL=path/to/ddl)
#
# Prints a markdown table: probe, width, lr, steps × batch, loss at 80 % and at the end of the
# run (subset), their difference, and the final loss over the whole validation split.
set -euo pipefail
out=${1:-runs/length-probes}
ddl=${DDL:-ddl}
corpus=${CORPUS:-assets/tinyshakespeare.txt}
[ -f "$corpus" ] || { echo "length-probes: corpus '$corpus' not found (run from the repository root or set CORPUS=...)" >&2; exit 2; }
mkdir -p "$out"

# name d_model lr steps batch
probes=(
  "grid(control) 64 0.003 2000 16"
  "lr-1e-2 64 0.01 2000 16"
  "d32 32 0.003 2000 16"
  "d32,lr-1e-2 32 0.01 2000 16"
  "batch-32,lr-1e-2 64 0.01 1000 32"
)

# The subset validation loss at STEP in RUN's metrics.jsonl (the final step's line has it as
# val_subset_loss beside the whole split's val_loss).
subset() {
  local line
  line=$(grep "^{\"step\":$2,\"val_full\"" "$1/metrics.jsonl" | tail -1)
  if [[ $line == *val_subset_loss* ]]; then
    sed 's/.*"val_subset_loss":\([-0-9.e]*\).*/\1/' <<<"$line"
  else
    sed 's/.*"val_loss":\([-0-9.e]*\).*/\1/' <<<"$line"
  fi
}
whole() { grep "\"val_full\":true" "$1/metrics.jsonl" | tail -1 | sed 's/.*"val_loss":\([-0-9.e]*\).*/\1/'; }

echo "| probe | d | lr | steps × batch | subset loss at 80 % | at the end | last-20 % change | whole split at the end |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for p in "${probes[@]}"; do
  read -r name d lr steps batch <<<"$p"
  dir="$out/$(tr '(),' '___' <<<"$name")"
  if [ ! -f "$dir/done" ]; then
    echo "training $name -> $dir" >&2
    "$ddl" train --preset tiny --variant baseline --seed 1 --corpus "$corpus" --tokenizer char \
      --set model.d_model="$d" --set model.n_layers=2 --set model.n_heads=2 \
      --set train.batch_size="$batch" --set train.seq_len=64 --set train.lr="$lr" \
      --set train.min_lr="$(awk "BEGIN{print $lr/10}")" --set train.warmup_steps=40 \
      --set train.decay_steps="$steps" --set train.eval_every=$((steps / 20)) --set train.eval_batches=8 \
      --set train.weight_decay=0.1 --set train.checkpoint_every=0 --set train.log_every=100 \
      --steps "$steps" --out "$dir" --overwrite >"$dir.log" 2>&1 || { echo "length-probes: $name failed, see $dir.log" >&2; exit 1; }
    touch "$dir/done"
  fi
  from=$((steps * 4 / 5))
  a=$(subset "$dir" "$from")
  b=$(subset "$dir" "$steps")
  printf '| %s | %s | %s | %s × %s | %.4f | %.4f | %+.4f | %.4f |\n' \
    "$name" "$d" "$lr" "$steps" "$batch" "$a" "$b" "$(awk "BEGIN{print $a-$b}")" "$(whole "$dir")"
done
