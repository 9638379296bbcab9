#!/usr/bin/env bash
# The GPU check's bundle: everything a machine with a GPU (and no Rust, no network) needs to
# check and time the engine in one command.
#
#   scripts/gpu-check.sh bundle [DIR]   build it into DIR (default gpu-bundle/, which git ignores)
#   scripts/gpu-check.sh local  [DIR]   build it, then run DIR/run.sh --local here (what CI does)
#
# The bundle holds: the release `ddl` (default features, no MPI) and the release test binaries
# of the kernel, golden and decode tests, stripped and xz-compressed (bin/); the golden files
# (data/tests/golden/, found by the test binaries through DDL_TEST_DATA); the Vulkan loader
# packages for machines without one (debs/: libvulkan1 and the GL dispatch libraries, amd64);
# the PyTorch benchmark script and the reference model (torch/); run.sh; MANIFEST.txt (commit,
# toolchain, sizes, checksums). The build fails when the repository plus the bundle would
# exceed the 64 MiB that travel to the device machine.
#
# On the device machine, from the repository root:   bash gpu-bundle/run.sh
# (carry gpu-bundle; run.sh --help lists the stages and options). Environment:
#   CARGO_TARGET_DIR   where cargo builds (default target/)
#   DDL_BUNDLE_DEBS=0  leave the loader packages out (a machine that has libvulkan1)
set -euo pipefail
say() { printf 'gpu-check: %s\n' "$*"; }
die() { printf 'gpu-check: error: %s\n' "$*" >&2; exit 1; }

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
cmd="${1:-}"
case "$cmd" in
  bundle|local) ;;
  *) die "usage: scripts/gpu-check.sh bundle|local [DIR] (got '${cmd}')" ;;
esac
DIR="${2:-gpu-bundle}"
LIMIT=$((64 * 1024 * 1024))
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
CARGO="${CARGO:-cargo}"
for t in xz strip tar sha256sum; do
  command -v "$t" >/dev/null || die "'$t' not found: install it (Debian: apt-get install xz-utils binutils coreutils tar)"
done

# ------------------------------------------------------------------ build
say "building the release ddl and test binaries (cargo build --release; cargo test --release --no-run)"
"$CARGO" build --release --bin ddl
# The test executables' paths, from cargo's JSON messages.
mapfile -t tests < <("$CARGO" test --release --no-run --test kernels --test golden --test decode --message-format=json \
  | grep '"kind":\["test"\]' | grep '"executable":"' | grep -o '"executable":"[^"]*"' | sed -e 's/^"executable":"//' -e 's/"$//')
[ ${#tests[@]} = 3 ] || die "expected 3 test executables from cargo (kernels, golden, decode), got ${#tests[@]}: ${tests[*]}"

# ------------------------------------------------------------------ assemble (in a temporary folder, renamed at the end)
[ "$DIR" != "/" ] && [ -n "$DIR" ] || die "refusing bundle folder '$DIR'"
STAGE="$DIR.tmp.$$"
rm -rf "$STAGE"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/data/tests" "$STAGE/torch/reference" "$STAGE/debs"
pack() { # src name
  strip -o "$STAGE/bin/$2" "$1"
  xz -T0 -9 -c "$STAGE/bin/$2" > "$STAGE/bin/$2.xz"
  rm "$STAGE/bin/$2"
}
pack "$TARGET/release/ddl" ddl
for t in "${tests[@]}"; do
  n="$(basename "$t")"; n="${n%-*}"          # kernels-0123abcd -> kernels
  pack "$t" "test-$n"
done
cp -r tests/golden "$STAGE/data/tests/golden"
cp scripts/gpu-check/run.sh "$STAGE/run.sh"
chmod +x "$STAGE/run.sh"
cp scripts/torch_reference_bench.py scripts/torch_matmul_bench.py "$STAGE/torch/"
REF=""
for d in "${DDL_TORCH_REFERENCE:-}" "$ROOT/../shared/reference" "$ROOT/shared/reference"; do
  if [ -n "$d" ] && [ -f "$d/ddl_torch.py" ]; then REF="$d"; break; fi
done
[ -n "$REF" ] || die "the PyTorch reference model ddl_torch.py was not found in ../shared/reference (set DDL_TORCH_REFERENCE to its folder)"
cp "$REF/ddl_torch.py" "$STAGE/torch/reference/"

# The Vulkan loader and GL dispatch packages (amd64), as the device README asks; reused from an
# earlier bundle when present.
if [ "${DDL_BUNDLE_DEBS:-1}" = 1 ]; then
  pkgs=(libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
  if [ -d "$DIR/debs" ] && [ "$(ls "$DIR"/debs/*.deb 2>/dev/null | wc -l)" = "${#pkgs[@]}" ]; then
    cp "$DIR"/debs/*.deb "$STAGE/debs/"
  else
    command -v apt-get >/dev/null || die "apt-get not found: cannot download ${pkgs[*]} (DDL_BUNDLE_DEBS=0 leaves them out)"
    lists="${TMPDIR:-/tmp}/ddl-apt-amd64"
    mkdir -p "$lists/partial"
    o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$lists")
    say "downloading ${pkgs[*]} (amd64)"
    apt-get "${o[@]}" update -qq >/dev/null 2>&1 || die "apt-get update failed (network?); DDL_BUNDLE_DEBS=0 leaves the loader packages out"
    (cd "$STAGE/debs" && apt-get "${o[@]}" download "${pkgs[@]}" >/dev/null 2>&1) \
      || die "apt-get download ${pkgs[*]} failed; DDL_BUNDLE_DEBS=0 leaves the loader packages out"
  fi
fi

{
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m), $(ldd --version | head -1)"
  echo "rustc $(rustc --version 2>/dev/null)"
  echo "glibc symbols needed (newest): $(for f in "$STAGE"/bin/*.xz; do xz -dc "$f" | strings | grep -o 'GLIBC_2\.[0-9]*' ; done | sort -t. -k2 -n -u | tail -1)"
  echo
  (cd "$STAGE" && find . -type f ! -name MANIFEST.txt | sort | xargs sha256sum)
} > "$STAGE/MANIFEST.txt"

# ------------------------------------------------------------------ the 64 MiB that travel
bundle_bytes=$(du -sb "$STAGE" | cut -f1)
repo_bytes=$(git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
total=$((bundle_bytes + repo_bytes))
mib() { awk -v b="$1" 'BEGIN { printf("%.1f MiB", b / 1048576) }'; }
say "bundle $(mib $bundle_bytes) + repository $(mib $repo_bytes) = $(mib $total) of the $(mib $LIMIT) a device call carries"
if [ "$total" -gt "$LIMIT" ]; then
  die "repository plus bundle would exceed $(mib $LIMIT) ($(mib $total)): shrink the bundle or the tracked files"
fi

rm -rf "$DIR"
mv "$STAGE" "$DIR"
trap - EXIT
say "bundle ready in $DIR ($(ls "$DIR"/bin | tr '\n' ' '))"
say "on the device machine: bash $DIR/run.sh   (carry $DIR; see run.sh --help)"

if [ "$cmd" = local ]; then
  say "running $DIR/run.sh --local"
  bash "$DIR/run.sh" --local
  # A name --only does not know is refused before anything runs (exit 2, naming it).
  if out="$(bash "$DIR/run.sh" --local --only 'bench-no-such-command' 2>&1)" || ! grep -q "'bench-no-such-command' names no command" <<<"$out"; then
    die "run.sh --only accepted a name that matches no command: $out"
  fi
  # --forms: a spec that names no form is refused before anything runs; with the H200's
  # committed forms as the base (the H100 plan of docs/GPU.md "Next run"), every device command
  # still parses and its forms check, and the summary says what the base was.
  if out="$(bash "$DIR/run.sh" --local --forms 'no_such_form=1' 2>&1)" || ! grep -q "unknown form 'no_such_form'" <<<"$out"; then
    die "run.sh --forms accepted a form that does not exist: $out"
  fi
  F="$(mktemp -d "${TMPDIR:-/tmp}/ddl-forms-check.XXXXXX")"
  bash "$DIR/run.sh" --local --stages bench --only bench-gpu-args --forms measured=H200 --out "$F" > "$F/log" 2>&1 \
    || { cat "$F/log" "$F/summary.md"; die "run.sh --forms measured=H200: the device run's commands did not check"; }
  grep -q "for every command (--forms or DDL_FORMS): measured=H200" "$F/summary.md" \
    || { cat "$F/summary.md"; die "run.sh --forms: the summary does not name the base forms"; }
  rm -rf "$F"
  # The experiment stage cut off by its budget, then resumed from what came back (the device
  # machine is lent by the minute: a grid must continue where a call stopped it).
  say "the experiment stage, cut off and resumed (scripts/gpu-check/resume-check.toml)"
  R="$(mktemp -d "${TMPDIR:-/tmp}/ddl-resume-check.XXXXXX")"
  trap 'rm -rf "$R"' EXIT
  # The cut must fall inside training, wherever this machine's speed puts it: the first call
  # gets 20 s, and again 35 and 60 s while nothing came back (the budget ended before training
  # began: device creation and pipelines come first).
  partial=0
  for budget in 20 35 60; do
    rm -rf "$R/out1" "$R/back" && mkdir -p "$R/out1" "$R/back"
    GRID_JOBS=2 bash "$DIR/run.sh" --local --stages experiment --spec scripts/gpu-check/resume-check.toml \
      --budget "$budget" --out "$R/out1" > "$R/call1.log" 2>&1 || true
    [ -f "$R/out1/grid.tar.gz" ] || { cat "$R/call1.log"; die "resume check: the cut-off call returned no grid.tar.gz"; }
    tar -C "$R/back" -xzf "$R/out1/grid.tar.gz"
    # One archive, or pieces of one (grid-partial.tar.gz.00, …) when it is large.
    if ls "$R/out1"/grid-partial.tar.gz* > /dev/null 2>&1; then cat "$R/out1"/grid-partial.tar.gz* | tar -C "$R/back" -xz; fi
    partial=$( (find "$R/back/grid-partial" -mindepth 1 -maxdepth 1 -type d 2>/dev/null || true) | wc -l)
    finished=$( (find "$R/back/grid-runs" -name result.json 2>/dev/null || true) | wc -l)
    [ "$finished" = 0 ] || { cat "$R/call1.log"; die "resume check: a run finished within ${budget} s (a machine this fast needs more steps in scripts/gpu-check/resume-check.toml)"; }
    [ "$partial" = 0 ] || break
    say "resume check: nothing to resume after ${budget} s (the budget ended before training began); again with more"
  done
  [ "$partial" -gt 0 ] || { cat "$R/call1.log"; die "resume check: no unfinished run came back from the cut-off calls"; }
  GRID_JOBS=2 GRID_RUNS="$R/back/grid-runs" GRID_PARTIAL="$R/back/grid-partial" bash "$DIR/run.sh" --local \
    --stages experiment --spec scripts/gpu-check/resume-check.toml --budget 600 --out "$R/out2" > "$R/call2.log" 2>&1 \
    || { cat "$R/call2.log"; die "resume check: the resuming call failed"; }
  mkdir -p "$R/back2" && tar -C "$R/back2" -xzf "$R/out2/grid.tar.gz" && tar -C "$R/back2" -xzf "$R/out2/results.tar.gz"
  grep -q "resuming" "$R/back2/raw/experiment.log" || { cat "$R/back2/raw/experiment.log"; die "resume check: the second call did not resume the unfinished runs"; }
  n=$( (find "$R/back2/grid-runs" -name result.json 2>/dev/null || true) | wc -l)
  [ "$n" = 2 ] || { cat "$R/back2/raw/experiment.log"; die "resume check: $n of 2 runs finished after resuming"; }
  say "resume check passed: $partial unfinished run(s) came back, resumed and finished"
fi
