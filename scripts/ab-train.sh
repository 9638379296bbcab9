#!/usr/bin/env bash
# Two `ddl` binaries' training steps, interleaved A B A B (so that a machine whose speed drifts
# skews both alike): `ddl bench train` PAIRS times each, then the median new/old ratio of the
# median step times with the range.
#   scripts/ab-train.sh OLD_DDL NEW_DDL PRESET [PAIRS=6] [VARIANT=ddl] [STEPS=5]
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: scripts/ab-train.sh OLD_DDL NEW_DDL PRESET [PAIRS] [VARIANT] [STEPS]" >&2; exit 2; }
old="$1" new="$2" preset="$3" pairs="${4:-6}" variant="${5:-ddl}" steps="${6:-5}"
for b in "$old" "$new"; do [ -x "$b" ] || { echo "ab-train: $b is not an executable" >&2; exit 2; }; done
export DDL_CACHE_DIR="${DDL_CACHE_DIR:-$(mktemp -d)}" XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/ddl-xdg}"
mkdir -p "$XDG_RUNTIME_DIR"; chmod 700 "$XDG_RUNTIME_DIR"
step_ms() { "$1" bench train --preset "$preset" --variant "$variant" --steps "$steps" --json 2>/dev/null \
  | grep '"bench":"train"' | grep -o '"step_ms":[0-9.e+-]*' | cut -d: -f2; }
ratios=()
for i in $(seq "$pairs"); do
  a=$(step_ms "$old"); b=$(step_ms "$new")
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf("%.4f", b / a) }')
  ratios+=("$r")
  echo "pair $i: old $a ms, new $b ms, new/old $r"
done
printf '%s\n' "${ratios[@]}" | sort -g | awk -v p="$preset" -v v="$variant" '{ r[NR] = $1 } END {
  m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2;
  printf("%s %s: median new/old step ratio %.4f over %d pairs (range %.4f-%.4f)\n", p, v, m, NR, r[1], r[NR]) }'
