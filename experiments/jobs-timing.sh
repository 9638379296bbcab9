#!/usr/bin/env bash
# How much `ddl experiment --jobs 2` shortens a grid on this machine: the two-run grid
# experiments/jobs-timing.toml trained with --jobs 1 and --jobs 2, alternated N times (default 5),
# each into a fresh folder under OUT; prints each pair's wall times and ratio, and the geometric
# mean of the ratios with a 95 % t-interval on their logarithms (n − 1 degrees of freedom).
#
#   experiments/jobs-timing.sh [OUT] [N]      (default runs/jobs-timing 5; DDL=path/to/ddl)
set -euo pipefail
out=${1:-runs/jobs-timing}
n=${2:-5}
ddl=${DDL:-ddl}
spec=experiments/jobs-timing.toml
[ -f "$spec" ] || { echo "jobs-timing: $spec not found (run from the repository root)" >&2; exit 2; }
[ "$n" -ge 2 ] 2>/dev/null || { echo "jobs-timing: N = '$n': expected a whole number ≥ 2 (pairs to alternate)" >&2; exit 2; }
mkdir -p "$out"
ratios=()
echo "| pair | --jobs 1 (s) | --jobs 2 (s) | ratio |"
echo "|---:|---:|---:|---:|"
for rep in $(seq 1 "$n"); do
  declare -A t
  for j in 1 2; do
    dir="$out/jobs$j-$rep"
    rm -rf "$dir"
    s=$(date +%s.%N)
    "$ddl" experiment --spec "$spec" --out "$dir" --jobs "$j" >"$dir.log" 2>&1 || { echo "jobs-timing: --jobs $j failed, see $dir.log" >&2; exit 1; }
    e=$(date +%s.%N)
    t[$j]=$(awk "BEGIN{print $e - $s}")
  done
  r=$(awk "BEGIN{print ${t[1]} / ${t[2]}}")
  ratios+=("$r")
  printf '| %d | %.1f | %.1f | %.3f |\n' "$rep" "${t[1]}" "${t[2]}" "$r"
done
# Student's t quantile (97.5 %) for n − 1 degrees of freedom, 1 … 30 (beyond: 2.0).
printf '%s\n' "${ratios[@]}" | awk -v n="$n" '
  BEGIN { split("12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160 2.145 2.131 2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 2.060 2.056 2.052 2.048 2.045 2.042", q, " ") }
  { l[NR] = log($1); s += l[NR] }
  END {
    m = s / n; for (i = 1; i <= n; i++) v += (l[i] - m) ^ 2; sd = sqrt(v / (n - 1))
    tq = (n - 1 <= 30) ? q[n - 1] : 2.0; h = tq * sd / sqrt(n)
    printf "\n--jobs 1 time / --jobs 2 time: geometric mean %.3f, 95 %% interval %.3f–%.3f (n = %d pairs)\n", exp(m), exp(m - h), exp(m + h), n
  }'
