#!/usr/bin/env bash
# Two `ddl` binaries' training steps, interleaved A B A B (so that a machine whose speed drifts
# skews both alike): `ddl bench train` PAIRS times each, then the median new/old ratio of the
# median step times with the range, and their geometric mean with its 95 % t-interval (the mean
# of the log ratios ± t(0.975, PAIRS−1) standard errors, exponentiated; PAIRS ≥ 2).
#   scripts/ab-train.sh OLD_DDL NEW_DDL PRESET [PAIRS=6] [VARIANT=ddl] [STEPS=5]
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: scripts/ab-train.sh OLD_DDL NEW_DDL PRESET [PAIRS] [VARIANT] [STEPS]" >&2; exit 2; }
old="$1" new="$2" preset="$3" pairs="${4:-6}" variant="${5:-ddl}" steps="${6:-5}"
[[ "$pairs" =~ ^[1-9][0-9]*$ ]] || { echo "ab-train: PAIRS '$pairs': expected a whole number ≥ 1 (≥ 2 for the interval), e.g. 6" >&2; exit 2; }
for b in "$old" "$new"; do
  [ -f "$b" ] && [ -x "$b" ] || { echo "ab-train: $b is not an executable file (give two ddl binaries, e.g. target/release/ddl)" >&2; exit 2; }
done
export DDL_CACHE_DIR="${DDL_CACHE_DIR:-$(mktemp -d)}" XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/ddl-xdg}"
mkdir -p "$XDG_RUNTIME_DIR"; chmod 700 "$XDG_RUNTIME_DIR"
# The median step time of one run; a run that fails or prints no train row stops the script with
# the command and its last lines (it stopped with no word).
step_ms() {
  local out ms
  out=$("$1" bench train --preset "$preset" --variant "$variant" --steps "$steps" --json 2>&1) || true
  ms=$(grep '"bench":"train"' <<<"$out" | grep -o '"step_ms":[0-9.e+-]*' | cut -d: -f2) || true
  if [ -z "$ms" ]; then
    echo "ab-train: \`$1 bench train --preset $preset --variant $variant --steps $steps --json\` gave no step time:" >&2
    tail -n 5 <<<"$out" >&2
    exit 1
  fi
  echo "$ms"
}
ratios=()
for i in $(seq "$pairs"); do
  a=$(step_ms "$old") || exit 1; b=$(step_ms "$new") || exit 1
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf("%.4f", b / a) }')
  ratios+=("$r")
  echo "pair $i: old $a ms, new $b ms, new/old $r"
done
printf '%s\n' "${ratios[@]}" | sort -g | awk -v p="$preset" -v v="$variant" '{ r[NR] = $1 } END {
  m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2;
  printf("%s %s: median new/old step ratio %.4f over %d pairs (range %.4f-%.4f)\n", p, v, m, NR, r[1], r[NR]);
  if (NR < 2) exit;
  # t(0.975, df) for df 1..30, then the normal 1.96.
  split("12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160 2.145 2.131 2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 2.060 2.056 2.052 2.048 2.045 2.042", t, " ");
  df = NR - 1; q = (df <= 30) ? t[df] : 1.96;
  for (i = 1; i <= NR; i++) s += log(r[i]); mu = s / NR;
  for (i = 1; i <= NR; i++) ss += (log(r[i]) - mu) ^ 2; se = sqrt(ss / df / NR);
  lo = exp(mu - q * se); hi = exp(mu + q * se);
  printf("%s %s: geometric mean new/old %.3f, 95 %% t-interval [%.3f, %.3f] (log ratios, df %d): %s\n", p, v, exp(mu), lo, hi, df,
    (lo > 1 || hi < 1) ? "a significant difference" : "not distinguishable") }'
