#!/usr/bin/env bash
# Two `ddl` binaries' `ddl data prepare`, interleaved A B A B: the process CPU time (user + sys)
# of each, the median new/old ratio with its range, and a check that both wrote the same shards.
# (docs/SETUP.md: the default build against the pure-Rust regex build.)
#   scripts/ab-prepare.sh OLD_DDL NEW_DDL TOKENIZER_JSON CORPUS [PAIRS=6]
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: scripts/ab-prepare.sh OLD_DDL NEW_DDL TOKENIZER_JSON CORPUS [PAIRS]" >&2; exit 2; }
old="$1" new="$2" tok="$3" corpus="$4" pairs="${5:-6}"
for b in "$old" "$new"; do [ -x "$b" ] || { echo "ab-prepare: $b is not an executable" >&2; exit 2; }; done
for f in "$tok" "$corpus"; do [ -e "$f" ] || { echo "ab-prepare: $f does not exist" >&2; exit 2; }; done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cpu_s() { # binary, out folder: CPU seconds of one `data prepare`
  rm -rf "$2"
  /usr/bin/time -f '%U %S' -o "$work/time" "$1" data prepare --tokenizer "$tok" --out "$2" "$corpus" >/dev/null 2>&1
  awk '{ printf("%.3f", $1 + $2) }' "$work/time"
}
ratios=()
for i in $(seq "$pairs"); do
  a=$(cpu_s "$old" "$work/a"); b=$(cpu_s "$new" "$work/b")
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf("%.4f", b / a) }')
  ratios+=("$r")
  echo "pair $i: old $a s, new $b s CPU, new/old $r"
done
if (cd "$work/a" && sha256sum ./*.bin) | diff - <(cd "$work/b" && sha256sum ./*.bin) >/dev/null; then
  echo "shards: identical"
else
  echo "shards: DIFFERENT"; exit 1
fi
printf '%s\n' "${ratios[@]}" | sort -g | awk '{ r[NR] = $1 } END {
  m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2;
  printf("median new/old CPU ratio %.4f over %d pairs (range %.4f-%.4f)\n", m, NR, r[1], r[NR]) }'
