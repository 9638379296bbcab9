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
# An unfinished run's checkpoint (model, moments, config, data.json, metrics: ≈ 2 MB for the
# micro grid) can travel too, for a grid cut off on a machine that is lent by the minute (the GPU
# check's experiment stage): `save-partial OUT KEEP` keeps each unfinished run that has a
# checkpoint, and `restore` puts it back where OUT holds no newer state of that run, so that
# `ddl experiment` resumes it. Not for git: checkpoints are binary and large.
#
# e.g. the TinyShakespeare grid (issue 30):
#   scripts/experiment-runs.sh restore docs/experiments/shakespeare/runs runs/shakespeare
#   ddl experiment --spec experiments/shakespeare.toml --out runs/shakespeare
#   scripts/experiment-runs.sh save runs/shakespeare docs/experiments/shakespeare/runs
set -euo pipefail

usage() {
  echo "usage: $0 save OUT KEEP | save-partial OUT KEEP | restore KEEP OUT" >&2
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
      # The run finished: an unfinished checkpoint of it kept earlier (save-partial) is done with
      # and must not reach git beside its result.
      rm -f "$keep/$name"/{data.json,metrics.jsonl,model.safetensors,optim.safetensors,optim.prev.safetensors}
      n=$((n + 1))
    done
    echo "saved $n finished run(s) of $out into $keep"
    ;;
  save-partial)
    out=$2 keep=$3
    [ -d "$out/runs" ] || { echo "$0: $out/runs: no such folder (the grid's --out folder has runs/NAME/ inside)" >&2; exit 1; }
    mkdir -p "$keep"
    n=0 skipped=0
    for dir in "$out"/runs/*/; do
      name=$(basename "$dir")
      [ -f "$dir/result.json" ] && continue # finished: `save` keeps it
      [ -f "$dir/optim.safetensors" ] && [ -f "$dir/model.safetensors" ] && [ -f "$dir/config.toml" ] || continue
      if [ -f "$keep/$name/result.json" ]; then
        # KEEP holds this run finished (OUT was not restored from KEEP first, or is another
        # grid's): its result is never replaced by an unfinished checkpoint.
        echo "$0: $keep/$name holds a finished run (result.json): not replaced by the unfinished checkpoint of $dir (restore $keep into $out first to use the finished run there)" >&2
        skipped=$((skipped + 1))
        continue
      fi
      # The set of files is one checkpoint: gathered in a temporary folder, then renamed over
      # the kept one, so a kept checkpoint is never half of two.
      tmp="$keep/.$name.tmp"
      rm -rf "$tmp" && mkdir -p "$tmp"
      for f in config.toml data.json metrics.jsonl model.safetensors optim.safetensors optim.prev.safetensors; do
        [ -f "$dir/$f" ] && cp "$dir/$f" "$tmp/$f"
      done
      rm -rf "$keep/$name" && mv "$tmp" "$keep/$name"
      n=$((n + 1))
    done
    echo "saved $n unfinished run(s) of $out (their checkpoints) into $keep$([ $skipped -gt 0 ] && echo "; $skipped left out: finished in $keep")"
    ;;
  restore)
    keep=$2 out=$3
    # A checkpoint being copied aside when a copy fails or Ctrl-C comes is removed on the way out.
    tmp=""
    trap '[ -n "$tmp" ] && rm -rf "$tmp"' EXIT
    [ -d "$keep" ] || { echo "$0: $keep: no such folder (nothing saved yet?)" >&2; exit 1; }
    n=0 p=0
    for dir in "$keep"/*/; do
      [ -d "$dir" ] || continue
      if [ ! -f "$dir/result.json" ] && [ -f "$dir/optim.safetensors" ]; then
        # An unfinished run's checkpoint (save-partial): only into a run folder that has not
        # finished and holds no newer checkpoint; all its files together.
        run="$out/runs/$(basename "$dir")"
        [ -f "$run/result.json" ] && continue
        [ -f "$run/optim.safetensors" ] && [ ! "$dir/optim.safetensors" -nt "$run/optim.safetensors" ] && continue
        # Copied aside first (the slow part: a full disk or Ctrl-C there leaves the run's own
        # checkpoint as it was, not the new model beside the old moments), then moved in.
        tmp="$out/.restore-$(basename "$dir").tmp"
        rm -rf "$tmp" && mkdir -p "$tmp"
        for f in "$dir"/*; do cp -p "$f" "$tmp/"; done
        mkdir -p "$run"
        # An older checkpoint's earlier moments must not stay beside the newer set.
        rm -f "$run/optim.prev.safetensors"
        for f in "$tmp"/*; do mv -f "$f" "$run/"; done
        rmdir "$tmp" && tmp=""
        p=$((p + 1))
        continue
      fi
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
    if [ $n -eq 0 ] && [ $p -eq 0 ] && [ -d "$keep/runs" ]; then
      # A grid's --out folder given for KEEP: its runs are one level down.
      echo "$0: $keep holds no saved run, but $keep/runs does: $keep looks like a grid's --out folder; did you mean: $0 restore $keep/runs $out" >&2
      exit 1
    fi
    if [ $n -eq 0 ] && [ $p -eq 0 ] && { [ -d "$keep/grid-runs" ] || [ -d "$keep/grid-partial" ]; }; then
      # The folder the GPU check's grid.tar.gz and grid-partial.tar.gz were unpacked into: the
      # runs are in grid-runs/ and grid-partial/ (restored one after the other).
      echo "$0: $keep holds no saved run but grid-runs/ or grid-partial/, as the GPU check's grid.tar.gz and grid-partial.tar.gz unpack; did you mean: $0 restore $keep/grid-runs $out (and then $keep/grid-partial, its unfinished runs)" >&2
      exit 1
    fi
    echo "restored $n finished run(s)$([ $p -gt 0 ] && echo " and $p unfinished run(s) to resume") from $keep into $out/runs"
    ;;
  *) usage ;;
esac
