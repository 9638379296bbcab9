#!/usr/bin/env bash
# Carries an experiment grid's finished runs across machines and sessions through git.
#
# A grid (`ddl experiment --spec S --out OUT`) resumes from OUT/runs/NAME/: a run is finished when
# its result.json is there (its val curve, final losses and β regimes: all the report needs), and
# the speed section reads a finished run's config.toml. Those two small files per run are what
# this keeps under a tracked folder (the checkpoints stay behind: a finished run needs none).
#
#   scripts/experiment-runs.sh save    OUT KEEP   # OUT/runs/*/{result.json,config.toml} -> KEEP/
#   scripts/experiment-runs.sh restore KEEP OUT   # KEEP/* -> OUT/runs/ (never over a newer file)
#
# e.g. the TinyShakespeare grid (issue 30):
#   scripts/experiment-runs.sh restore docs/experiments/shakespeare/runs runs/shakespeare
#   ddl experiment --spec experiments/shakespeare.toml --out runs/shakespeare
#   scripts/experiment-runs.sh save runs/shakespeare docs/experiments/shakespeare/runs
set -euo pipefail

usage() {
  echo "usage: $0 save OUT KEEP | restore KEEP OUT" >&2
  exit 2
}
[ $# -eq 3 ] || usage
cmd=$1

case "$cmd" in
  save)
    out=$2 keep=$3
    [ -d "$out/runs" ] || { echo "$0: $out/runs: no such folder (the grid's --out folder has runs/NAME/ inside)" >&2; exit 1; }
    n=0
    for dir in "$out"/runs/*/; do
      name=$(basename "$dir")
      [ -f "$dir/result.json" ] || continue # unfinished: its checkpoint stays where it is
      [ -f "$dir/config.toml" ] || { echo "$0: $dir has result.json but no config.toml; not saved" >&2; continue; }
      mkdir -p "$keep/$name"
      for f in result.json config.toml; do
        # Through a temporary name in the same folder: nothing half-written is left behind.
        cp "$dir/$f" "$keep/$name/.$f.tmp" && mv "$keep/$name/.$f.tmp" "$keep/$name/$f"
      done
      n=$((n + 1))
    done
    echo "saved $n finished run(s) of $out into $keep"
    ;;
  restore)
    keep=$2 out=$3
    [ -d "$keep" ] || { echo "$0: $keep: no such folder (nothing saved yet?)" >&2; exit 1; }
    n=0
    for dir in "$keep"/*/; do
      [ -f "$dir/result.json" ] || continue
      name=$(basename "$dir")
      mkdir -p "$out/runs/$name"
      for f in result.json config.toml; do
        [ -f "$dir/$f" ] || continue
        # -u: a run finished here later (a newer file) is not overwritten.
        cp -u "$dir/$f" "$out/runs/$name/$f"
      done
      n=$((n + 1))
    done
    echo "restored $n finished run(s) from $keep into $out/runs"
    ;;
  *) usage ;;
esac
