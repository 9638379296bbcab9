#!/usr/bin/env bash
# The GPU check: runs the engine's release build (from this bundle, made by
# `scripts/gpu-check.sh bundle`) on the machine's adapter, stage by stage, and writes
#   $OUT/summary.md       every stage with its status (pass / fail / skipped and why), time and
#                         headline numbers;
#   $OUT/results.tar.gz   the raw logs and JSON lines of every stage.
# Both are rewritten after each stage, so a run cut off by its time limit still leaves what it
# finished.
#
#   run.sh [--local] [--stages info,golden,kernels,bench,torch] [--only NAMES] [--budget SECONDS]
#          [--out DIR] [--spec FILE] [--forms SPEC]
#
# --only NAMES runs only the commands named (comma-separated, shell patterns allowed: the names
# of the raw logs, e.g. test-kernels,bench-matmul-*,torch-small-baseline-bf16-compile), in the
# stages' order, so that a rerun repeats only what failed or what changed; the info stage's own
# commands always run. A name or pattern that matches no command is refused before anything runs.
#
# --forms SPEC: every command's kernel forms start from SPEC (DDL_FORMS syntax; a command's own
# DDL_FORMS=… applies after it): `--forms measured=H200` on another card (an H100) runs the
# H200's committed forms (src/kernels/forms.rs MEASURED), so its tests and A/Bs are of that
# configuration. Without it, a DDL_FORMS in the environment is the base. Checked before anything runs.
#
# Stages, in priority order, each under its own timeout (and the whole under --budget):
#   info     adapter, driver, features, limits, subgroup sizes, cooperative matrices; nvidia-smi
#   golden   every golden file through `ddl golden` (f32, --f16-state where it applies, --precision f16)
#   kernels  the release test binaries: every kernel form against float64, decode, golden
#   bench    ddl bench copy / matmul (square, f16 operands, small-124m's products, autotuned) / train
#            (small-124m and shakespeare-char, ddl against baseline) / kernels / generate
#   torch    the PyTorch reference on the same device: float32 eager with TF32 off, then bf16
#            autocast + torch.compile, each under its own timeout
# and, only when asked for (`--stages experiment`), after them:
#   experiment  `ddl experiment --spec FILE` (default experiments/shakespeare.toml) on this
#            adapter into a fresh folder, for the rest of the budget; GRID_RUNS=DIR keeps the
#            finished runs of an earlier call (they come back as $OUT/grid.tar.gz) and
#            GRID_PARTIAL=DIR resumes its unfinished ones ($OUT/grid-partial.tar.gz: the runs the
#            budget stopped, interrupted as by Ctrl-C, with their checkpoints)
# --local runs every stage at small sizes on whatever adapter there is (lavapipe in CI) and
# skips torch when PyTorch is absent; it never touches system folders. Without --local the
# check expects a GPU: it unpacks the bundled Vulkan loader when the machine has none, and the
# info stage fails on a CPU adapter. The matmul autotune cache is shared by the calls of one
# bundle on one machine (GPU_CHECK_FRESH_CACHE=1: a fresh one; --local: always fresh). A test
# binary cut off by its timeout with failing tests listed runs those again alone
# (`test-NAME-failures.log`: libtest prints the failures' messages only at its end).
set -uo pipefail

BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCAL=0
STAGES="info,golden,kernels,bench,torch"
ONLY=""
BUDGET=""
OUTDIR="${OUT:-}"
SPEC="experiments/shakespeare.toml"
FORMS=""
FORMS_SET=0
ROOT="$PWD"
# A flag's value: a flag given last, without its value, is refused naming what it takes.
need() { # FLAG ARGS-AFTER-IT...
  [ $# -ge 2 ] && return 0
  local what
  case "$1" in
    --stages) what="a comma-separated list of info, golden, kernels, bench, torch, experiment (e.g. --stages info,golden)" ;;
    --only) what="command names or shell patterns, comma-separated (e.g. --only test-kernels,bench-matmul-*)" ;;
    --budget) what="a number of seconds (e.g. --budget 285)" ;;
    --out) what="a folder for summary.md and results.tar.gz (e.g. --out \$OUT)" ;;
    --spec) what="an experiment spec (e.g. --spec experiments/shakespeare.toml)" ;;
    --forms) what="kernel forms in DDL_FORMS syntax (e.g. --forms measured=H200)" ;;
  esac
  echo "run.sh: $1 needs a value: $what" >&2; exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --local) LOCAL=1 ;;
    --stages) need "$@"; STAGES="$2"; shift ;;
    --stages=*) STAGES="${1#*=}" ;;
    --only) need "$@"; ONLY="$2"; shift ;;
    --only=*) ONLY="${1#*=}" ;;
    --budget) need "$@"; BUDGET="$2"; shift ;;
    --budget=*) BUDGET="${1#*=}" ;;
    --out) need "$@"; OUTDIR="$2"; shift ;;
    --out=*) OUTDIR="${1#*=}" ;;
    --spec) need "$@"; SPEC="$2"; shift ;;
    --spec=*) SPEC="${1#*=}" ;;
    --forms) need "$@"; FORMS="$2"; FORMS_SET=1; shift ;;
    --forms=*) FORMS="${1#*=}"; FORMS_SET=1 ;;
    -h|--help) sed -n '2,43p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (expected --local, --stages LIST, --only NAMES, --budget SECONDS, --out DIR, --spec FILE, --forms SPEC)" >&2; exit 2 ;;
  esac
  shift
done
for s in ${STAGES//,/ }; do
  case "$s" in info|golden|kernels|bench|torch|experiment) ;; *)
    echo "run.sh: --stages: unknown stage '$s' (expected a comma-separated list of info, golden, kernels, bench, torch, experiment)" >&2; exit 2 ;;
  esac
done
if [[ ",$STAGES," == *",experiment,"* ]] && [ ! -f "$ROOT/$SPEC" ] && [ ! -f "$SPEC" ]; then
  echo "run.sh: --spec $SPEC: no such file (run.sh runs from the repository root; the default is experiments/shakespeare.toml)" >&2; exit 2
fi
# The experiment stage's GRID_RUNS, GRID_PARTIAL and GRID_JOBS: a folder misnamed there let the
# stage train the grid from step 0 (the restore's error went to its log alone) and spend the call.
if [[ ",$STAGES," == *",experiment,"* ]]; then
  for v in GRID_RUNS GRID_PARTIAL; do
    if [ -n "${!v:-}" ] && [ ! -d "${!v}" ]; then
      echo "run.sh: $v=${!v}: no such folder (the $([ $v = GRID_RUNS ] && echo grid-runs || echo grid-partial)/ of an earlier call's $([ $v = GRID_RUNS ] && echo grid.tar.gz || echo grid-partial.tar.gz), unpacked: e.g. $v=gpu-bundle/grid/$([ $v = GRID_RUNS ] && echo grid-runs || echo grid-partial); a relative path is taken from the current directory)" >&2
      exit 2
    fi
  done
  case "${GRID_JOBS:-1}" in *[!0-9]*|0*)
    echo "run.sh: GRID_JOBS=$GRID_JOBS is not a number of runs to train at once (a whole number, 1 or more; default 8 on the card, 1 with --local)" >&2; exit 2 ;;
  esac
fi
# Every --only name (or pattern) must name a command of the check: a typo would otherwise select
# nothing and spend a device call on the info stage alone. The names: the quoted command lines'
# first fields, and the info, golden, kernels and experiment stages' own.
if [ -n "$ONLY" ]; then
  KNOWN="info info-plan info-coop golden golden-f16 golden-precision-f16 test-kernels test-golden test-decode test-kernels-compile bench-gpu-args experiment $(grep -oE '^ *"[a-z0-9-]+\|' "$0" | tr -d ' "|' | sort -u | tr '\n' ' ')"
  for pat in ${ONLY//,/ }; do
    hit=0
    for k in $KNOWN; do
      # shellcheck disable=SC2053
      [[ "$k" == $pat ]] && { hit=1; break; }
    done
    [ $hit = 1 ] || { echo "run.sh: --only: '$pat' names no command of the check (the names: $KNOWN)" >&2; exit 2; }
  done
fi
if [ -z "$BUDGET" ]; then BUDGET=$([ $LOCAL = 1 ] && echo 3000 || echo 285); fi
case "$BUDGET" in ''|*[!0-9]*) echo "run.sh: --budget '$BUDGET' is not a number of seconds" >&2; exit 2 ;; esac
# The binaries come from the bundle beside this script: scripts/gpu-check/run.sh itself has none.
if ! ls "$BUNDLE"/bin/ddl.xz >/dev/null 2>&1; then
  echo "run.sh: no bin/ddl.xz beside this script ($BUNDLE): run.sh runs from a bundle. Build one with \`make gpu-bundle\` (scripts/gpu-check.sh bundle) and run \`bash gpu-bundle/run.sh\` from the repository root; \`make gpu-check-local\` builds it and runs --local here" >&2
  exit 2
fi
if [ -z "$OUTDIR" ]; then OUTDIR="$BUNDLE/out-$([ $LOCAL = 1 ] && echo local || echo gpu)"; fi
mkdir -p "$OUTDIR" || { echo "run.sh: cannot create --out $OUTDIR" >&2; exit 2; }
OUTDIR="$(cd "$OUTDIR" && pwd)"

T_START=$(date +%s)
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ddl-gpu-check.XXXXXX")"
RAW="$WORK/raw"
mkdir -p "$RAW" "$WORK/bin" "$WORK/cache" "$WORK/run"
trap 'rm -rf "$WORK"' EXIT
# The autotune cache: this card's, shared by the run.sh calls of one bundle on one machine (a
# device session's second call finds the first's tuning instead of spending a stage's timeout on
# it; run 4's cold `bench-train-small-baseline` timed out so twice), fresh otherwise, and with
# GPU_CHECK_FRESH_CACHE=1. The summary says which.
CACHE_ID="$(grep -m1 '^commit' "$BUNDLE/MANIFEST.txt" 2>/dev/null | cut -d' ' -f2 | cut -c1-12)"
if [ $LOCAL = 0 ] && [ -n "$CACHE_ID" ] && [ "${GPU_CHECK_FRESH_CACHE:-0}" != 1 ]; then
  export DDL_CACHE_DIR="${TMPDIR:-/tmp}/ddl-gpu-check-cache-$CACHE_ID"
else
  export DDL_CACHE_DIR="$WORK/cache"
fi
mkdir -p "$DDL_CACHE_DIR"
CACHE_NOTE="$(if [ -s "$DDL_CACHE_DIR/matmul-autotune.json" ]; then echo "reused from an earlier call of this bundle on this machine ($DDL_CACHE_DIR)"; else echo "fresh ($DDL_CACHE_DIR)"; fi)"
export DDL_TEST_DATA="$BUNDLE/data"         # the test binaries' golden files
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$WORK/xdg}"; mkdir -p "$XDG_RUNTIME_DIR"; chmod 700 "$XDG_RUNTIME_DIR"
: > "$RAW/status.tsv"
: > "$RAW/steps.tsv"

log() { printf '[gpu-check %4ss] %s\n' "$(( $(date +%s) - T_START ))" "$*"; }
left() { echo $(( BUDGET - ($(date +%s) - T_START) )); }
# One field of a one-line JSON object (numbers, strings, booleans; first match).
jget() { grep -o "\"$1\":[^,}]*" | head -1 | sed -e "s/^\"$1\"://" -e 's/^"//' -e 's/"$//'; }
# That field of every line.
jget_all() { grep -o "\"$1\":[^,}]*" | sed -e "s/^\"$1\"://"; }
F32_PEAK_TFLOPS="${F32_PEAK_TFLOPS:-67}"
fmt() { awk -v x="$1" -v p="${2:-1}" 'BEGIN { if (x == "" || x == "null") print "–"; else printf("%.*f", p, x) }'; }

# ---------------------------------------------------------------------------- the binaries
for f in "$BUNDLE"/bin/*.xz; do
  n="$(basename "$f" .xz)"
  xz -dc "$f" > "$WORK/bin/$n" && chmod +x "$WORK/bin/$n" || { echo "run.sh: cannot unpack $f" >&2; exit 1; }
done
DDL="$WORK/bin/ddl"
cp "$BUNDLE/MANIFEST.txt" "$RAW/" 2>/dev/null
# The base kernel forms (--forms, else DDL_FORMS from the environment), checked here without an
# adapter: a typo would otherwise fail every stage on the device.
if [ $FORMS_SET = 1 ]; then
  if [ -n "$FORMS" ]; then export DDL_FORMS="$FORMS"; else unset DDL_FORMS; fi
fi
if [ -n "${DDL_FORMS:-}" ] && ! out="$(DDL_CHECK_ARGS=1 "$DDL" info 2>&1)"; then
  echo "run.sh: --forms (DDL_FORMS) '$DDL_FORMS' is refused: $out" >&2; exit 2
fi
# A command's own DDL_FORMS=… (its first word) over the base: the `env` arguments for it.
with_base_forms() { # "DDL_FORMS=SPEC" -> "DDL_FORMS=BASE,SPEC"
  if [ -n "${DDL_FORMS:-}" ]; then echo "DDL_FORMS=$DDL_FORMS,${1#DDL_FORMS=}"; else echo "$1"; fi
}

# ---------------------------------------------------------------------------- Vulkan
have_icd() {
  local d
  for d in /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d; do
    ls "$d"/*.json >/dev/null 2>&1 && return 0
  done
  [ -n "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]
}
VK_NOTE=""
if [ $LOCAL = 0 ]; then
  if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'; then
    if ls "$BUNDLE"/debs/*.deb >/dev/null 2>&1; then
      for f in "$BUNDLE"/debs/*.deb; do dpkg -x "$f" / || echo "run.sh: dpkg -x $f failed" >&2; done
      ldconfig
      VK_NOTE="unpacked the bundled loader packages ($(cd "$BUNDLE/debs" && ls *.deb | tr '\n' ' '))"
    else
      VK_NOTE="no libvulkan.so.1 and no bundled loader packages"
    fi
  else
    VK_NOTE="the machine's own Vulkan loader"
  fi
  if ! have_icd; then
    for j in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
      if [ -f "$j" ]; then
        export VK_DRIVER_FILES="$j" VK_ICD_FILENAMES="$j"
        VK_NOTE="$VK_NOTE; VK_DRIVER_FILES=$j"
        break
      fi
    done
  fi
fi

# ---------------------------------------------------------------------------- the summary
STAGE_ROWS=""
NOTES=""
note() { NOTES="$NOTES$*"$'\n'; }
write_summary() {
  local s="$OUTDIR/summary.md.tmp"
  {
    echo "# GPU check: $([ $LOCAL = 1 ] && echo 'local (small sizes)' || echo 'device run')"
    echo
    echo "- when: $(date -u '+%Y-%m-%d %H:%M UTC'), $(( $(date +%s) - T_START )) s after the start (budget $BUDGET s)"
    echo "- bundle: $(grep -m1 '^commit' "$BUNDLE/MANIFEST.txt" 2>/dev/null | cut -d' ' -f2-)"
    echo "- matmul autotune cache: $CACHE_NOTE"
    echo "- adapter: ${ADAPTER:-not opened yet}"
    echo "- driver: ${DRIVER:-?}; ${VK_NOTE:-Vulkan as found}"
    echo "- stages asked for: $STAGES${ONLY:+; only the commands $ONLY}"
    [ -n "${DDL_FORMS:-}" ] && echo "- kernel forms over the adapter's, for every command (--forms or DDL_FORMS): $DDL_FORMS"
    echo
    echo "| stage | status | s | details |"
    echo "|---|---|---|---|"
    printf '%s' "$STAGE_ROWS"
    if [ -n "$NOTES" ]; then
      echo
      echo "## Numbers"
      echo
      printf '%s' "$NOTES"
    fi
    echo
    echo "Raw logs and JSON lines: results.tar.gz (status.tsv; steps.tsv: each command, exit code, seconds taken and allowed; one .log and .jsonl per command)."
  } > "$s" && mv "$s" "$OUTDIR/summary.md"
  cp "$OUTDIR/summary.md" "$RAW/summary.md"
  tar -C "$WORK" -czf "$OUTDIR/results.tar.gz.tmp" raw && mv "$OUTDIR/results.tar.gz.tmp" "$OUTDIR/results.tar.gz"
}
stage_row() { # stage status seconds details
  STAGE_ROWS="$STAGE_ROWS| $1 | $2 | $3 | $4 |"$'\n'
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$RAW/status.tsv"
  write_summary
  log "stage $1: $2 ($3 s) $4"
}

# Runs one command of a stage under a timeout bounded by the budget: name, seconds, command...
# Output to raw/NAME.log (JSON lines also to raw/NAME.jsonl). Returns the command's status
# (124 on a timeout).
step() {
  local name="$1" secs="$2"; shift 2
  if ! picked "$name"; then echo "not selected (--only $ONLY)" > "$RAW/$name.log"; return 126; fi
  local l; l=$(left)
  [ "$secs" -gt "$l" ] && secs=$l
  if [ "$secs" -le 2 ]; then echo "skipped: no budget left" > "$RAW/$name.log"; return 125; fi
  log "$name (timeout ${secs}s): $*"
  local t0=$(date +%s) smi=""
  # On the card, the SM clock, power and temperature every 250 ms while the command runs
  # (raw/NAME.clocks.csv): the FMA peak a rate is a fraction of depends on the clock the card
  # holds under that load (`clocks_line`).
  if [ $LOCAL = 0 ] && command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 250 \
      > "$RAW/$name.clocks.csv" 2>/dev/null &
    smi=$!
  fi
  (cd "$WORK/run" && timeout -k 5 "$secs" "$@") > "$RAW/$name.log" 2>&1
  local rc=$?
  if [ -n "$smi" ]; then kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null; fi
  # Each command's wall time (to plan the next call's budget): raw/steps.tsv.
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$secs" >> "$RAW/steps.tsv"
  grep '^{' "$RAW/$name.log" > "$RAW/$name.jsonl" 2>/dev/null || rm -f "$RAW/$name.jsonl"
  [ $rc = 124 ] || [ $rc = 137 ] && echo "TIMED OUT after ${secs}s" >> "$RAW/$name.log"
  return $rc
}
# The clocks sampled while command NAME ran (`step`), as a summary line, or nothing.
clocks_line() {
  local f="$RAW/$1.clocks.csv"
  [ -s "$f" ] || return 0
  awk -F', *' -v name="$1" -v peak="$F32_PEAK_TFLOPS" -v boost="${BOOST_MHZ:-1980}" '
    $1 ~ /^[0-9.]+$/ { n++; c[n] = $1; p[n] = $2; t = ($3 > t ? $3 : t) }
    function median(a, k,   i, j, x) {
      for (i = 2; i <= k; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
      return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
    }
    END {
      if (n == 0) exit
      cm = median(c, n); pm = median(p, n)
      printf("  - %s: SM clock median %.0f MHz (min %.0f, max %.0f), power median %.0f W, hottest %.0f C, %d samples; the f32 FMA peak at that clock %.1f TFLOP/s (%s at the %s MHz boost clock)\n",
             name, cm, c[1], c[n], pm, t, n, peak * cm / boost, peak, boost)
    }' "$f"
}
why() { case "$1" in 0) echo ok ;; 124|137) echo "timed out" ;; 125) echo "no budget left" ;; 126) echo "not selected" ;; *) echo "exit $1" ;; esac; }
# Whether --only selects the command NAME (always, without --only; info-* always).
picked() {
  [ -z "$ONLY" ] && return 0
  case "$1" in info|info-*) return 0 ;; esac
  local pat
  for pat in ${ONLY//,/ }; do
    # shellcheck disable=SC2053
    [[ "$1" == $pat ]] && return 0
  done
  return 1
}
# A stage's status from its commands' exit codes: fail if any ran and failed, skipped if none
# was selected, else pass.
settle() { # rc...
  local rc ran=0 bad=0
  for rc in "$@"; do [ "$rc" = 126 ] && continue; ran=1; [ "$rc" = 0 ] || bad=1; done
  if [ $bad = 1 ]; then echo fail; elif [ $ran = 0 ]; then echo skipped; else echo pass; fi
}

want() { [[ ",$STAGES," == *",$1,"* ]]; }

# ---------------------------------------------------------------------------- info
stage_info() {
  local t0=$(date +%s) rc st
  step info 60 "$DDL" info; rc=$?
  ADAPTER="$(grep -m1 '^adapter:' "$RAW/info.log" | sed 's/^adapter: *//')"
  DRIVER="$(grep -m1 '^driver:' "$RAW/info.log" | sed 's/^driver: *//')"
  local backend sg coop
  backend="$(grep -m1 '^backend:' "$RAW/info.log" | sed 's/^backend: *//')"
  sg="$(grep -m1 '^subgroups:' "$RAW/info.log" | sed 's/^subgroups: *//')"
  coop="$(grep -m1 '^cooperative matrices:' "$RAW/info.log" | sed 's/^cooperative matrices: *//')"
  { command -v nvidia-smi >/dev/null && nvidia-smi; uname -a; ldd --version | head -1; ldconfig -p | grep -i vulkan; env | grep -E '^VK_'; } > "$RAW/machine.log" 2>&1
  if [ $rc != 0 ]; then
    st="fail"
  elif [ $LOCAL = 0 ] && [[ "$ADAPTER" == *"(Cpu)"* ]]; then
    st="fail"; note "- info: the chosen adapter is a CPU adapter ($ADAPTER): no GPU Vulkan driver was found"
  else
    st="pass"
  fi
  local plan=""
  if [ $LOCAL = 0 ]; then
    step info-plan 20 "$DDL" info --preset small-124m --variant ddl --batch 8 --seq 1024
  else
    step info-plan 20 "$DDL" info --preset tiny --variant ddl
  fi
  plan="$(grep -m1 -i 'total' "$RAW/info-plan.log" | sed 's/  */ /g; s/^ //')"
  # The kernel forms this adapter gets (src/kernels/forms.rs): what the GPU runs by default.
  local forms
  forms="$(sed -n '/^kernel forms/,$p' "$RAW/info.log" | tail -n +2 | awk '$1 != "measured" { printf("%s%s=%s", n++ ? ", " : "", $1, $2) }')"
  [ -n "$forms" ] && note "- kernel forms chosen for this adapter: $forms"
  # The MEASURED lines applied to this adapter (docs/GPU.md), apart from the table.
  local measured
  measured="$(sed -n '/^kernel forms/,$p' "$RAW/info.log" | grep -o '^  measured on [^:]*: [^ ]*' | sed 's/^  measured on //' | tr '\n' ';' | sed 's/;$//; s/;/; /g')"
  [ -n "$measured" ] && note "- measured forms applied (forms::MEASURED): $measured"
  # Whether f16 products run on cooperative matrices here (the self-test at device creation).
  local coopmm
  coopmm="$(grep -m1 '^cooperative-matrix matmuls:' "$RAW/info.log" | sed 's/^cooperative-matrix matmuls: *//')"
  [ -n "$coopmm" ] && note "- cooperative-matrix matmuls: $coopmm"
  # The wide form's self-test runs only where the form is on: apart, so that a kernel never run
  # on a GPU before cannot fail the stage (its own log, info-coop.log).
  if [[ "$coopmm" == on* || "$coopmm" == *"self-test passed"* ]]; then
    DDL_FORMS="${DDL_FORMS:+$DDL_FORMS,}matmul_coop=1" step info-coop 60 "$DDL" info
    local wide
    wide="$(grep -m1 '^cooperative-matrix wide form' "$RAW/info-coop.log" | sed 's/^cooperative-matrix wide form *//')"
    note "- cooperative-matrix wide form ${wide:-(no answer: see info-coop.log)}"
    local wv v
    for v in coop128v coop128vq coop128v2; do
      wv="$(grep -m1 "^cooperative-matrix form $v:" "$RAW/info-coop.log" | sed "s/^cooperative-matrix form $v: *//")"
      note "- cooperative-matrix form $v: ${wv:-(no answer: see info-coop.log)}"
    done
    local wd
    wd="$(grep -m1 '^cooperative-matrix form coop128d' "$RAW/info-coop.log" | sed 's/^cooperative-matrix form coop128d: *//')"
    note "- cooperative-matrix form coop128d: ${wd:-(no answer: see info-coop.log)}"
  fi
  stage_row info "$st" $(( $(date +%s) - t0 )) "$(why $rc); $backend; subgroups ${sg:-none}; cooperative matrices: ${coop:-?}; plan: ${plan:-?}"
}

# ---------------------------------------------------------------------------- golden
stage_golden() {
  local t0=$(date +%s) rc rc16 rcp st
  local files=("$BUNDLE"/data/tests/golden/*.safetensors "$BUNDLE"/data/tests/golden/odd/*.safetensors "$BUNDLE"/data/tests/golden/t1/*.safetensors "$BUNDLE"/data/tests/golden/wide/*.safetensors "$BUNDLE"/data/tests/golden/unaligned/*.safetensors)
  step golden 90 "$DDL" golden --quiet "${files[@]}"; rc=$?
  step golden-f16 60 "$DDL" golden --quiet --f16-state "$BUNDLE"/data/tests/golden/ddl.safetensors "$BUNDLE"/data/tests/golden/ddl_vmap.safetensors; rc16=$?
  step golden-precision-f16 60 "$DDL" golden --quiet --precision f16 "$BUNDLE"/data/tests/golden/*.safetensors; rcp=$?
  # Each file ends with "PATH: N compared, M failed".
  counts() { grep -o '[0-9]* compared, [0-9]* failed' "$RAW/$1.log" 2>/dev/null | awk '{ f++; c += $1; x += $3 } END { printf("%d files, %d tensors compared, %d failed", f, c, x) }'; }
  st=$(settle $rc $rc16 $rcp)
  stage_row golden "$st" $(( $(date +%s) - t0 )) "f32 ($(why $rc)): $(counts golden) of ${#files[@]} files asked; f16 states ($(why $rc16)): $(counts golden-f16); --precision f16 ($(why $rcp)): $(counts golden-precision-f16)"
}

# ---------------------------------------------------------------------------- kernels
stage_kernels() {
  local t0=$(date +%s) st details="" b bin rc secs res failing rcs=""
  # On a GPU the test that compiles every shader variant and builds every pipeline runs last and
  # alone (`test-kernels-compile`): NVIDIA's driver compiles each pipeline, which took over
  # 110 s in GPU run 3 one after another and, inside the whole binary, cut off the other tests'
  # failure messages (since session 28 the test compiles on one thread per core).
  local compile=every_shader_variant_compiles
  for b in kernels golden decode kernels-compile; do
    bin="test-$b"; [ $b = kernels-compile ] && bin=test-kernels
    [ $b = kernels-compile ] && [ $LOCAL = 1 ] && continue
    [ -x "$WORK/bin/$bin" ] || { details="$details $b: missing from the bundle;"; rcs="$rcs 1"; continue; }
    case $b in kernels|kernels-compile) secs=$([ $LOCAL = 1 ] && echo 2400 || echo 150) ;; *) secs=$([ $LOCAL = 1 ] && echo 900 || echo 60) ;; esac
    # (GPU_CHECK_TEST_SECS=N: every test binary's timeout, for testing this stage.)
    secs=${GPU_CHECK_TEST_SECS:-$secs}
    local args=(--color never)
    [ $LOCAL = 0 ] && [ $b = kernels ] && args+=(--skip "$compile")
    [ $b = kernels-compile ] && args+=("$compile")
    # On a GPU the cooperative-matrix test must run, not skip (its adapter offers them, issue 29).
    if [ $LOCAL = 1 ]; then
      step "test-$b" "$secs" "$WORK/bin/$bin" "${args[@]}"; rc=$?
    else
      (export DDL_REQUIRE_COOP=1; step "test-$b" "$secs" "$WORK/bin/$bin" "${args[@]}"); rc=$?
    fi
    res="$(grep -E '^test result:' "$RAW/test-$b.log" | tail -1 | grep -o '[0-9]* passed; [0-9]* failed; [0-9]* ignored' | sed 's/;/,/g')"
    failing="$(grep -E '^test .* \.\.\. FAILED$' "$RAW/test-$b.log" | sed -e 's/^test //' -e 's/ \.\.\. FAILED$//' | head -20 | tr '\n' ' ')"
    rcs="$rcs $rc"
    details="$details $b: ${res:-$(why $rc)}${failing:+ — failing: $failing};"
    # libtest prints why each test failed only at its end, which a timeout cuts off (GPU run 5's
    # call 1 lost all four messages so): the failing tests again, alone, for their messages.
    if { [ $rc = 124 ] || [ $rc = 137 ]; } && [ -n "$failing" ]; then
      local again="test-$b-failures" rr
      # shellcheck disable=SC2086
      if [ $LOCAL = 1 ]; then
        ONLY="" step "$again" 60 "$WORK/bin/$bin" --color never --exact $failing; rr=$?
      else
        (export DDL_REQUIRE_COOP=1; ONLY="" step "$again" 60 "$WORK/bin/$bin" --color never --exact $failing); rr=$?
      fi
      details="$details the failing tests rerun alone ($(why $rr)): $(grep -c 'panicked at' "$RAW/$again.log" 2>/dev/null || echo 0) messages in $again.log;"
    fi
  done
  st=$(settle $rcs)
  stage_row kernels "$st" $(( $(date +%s) - t0 )) "${details# }"
}

# ---------------------------------------------------------------------------- bench
bench_line() { # raw name -> one markdown line of its headline
  local f="$RAW/$1.jsonl"
  [ -s "$f" ] || { echo "- $1: no results ($(tail -1 "$RAW/$1.log" 2>/dev/null))"; return; }
  case "$1" in
    bench-copy) echo "- copy bandwidth (read + write, $(jget mib < "$f") MiB): $(fmt "$(jget kernel_gb_per_s < "$f")" 1) GB/s by a kernel pass, $(fmt "$(jget dma_gb_per_s < "$f")" 1) GB/s by a buffer copy" ;;
    bench-matmul-*checks)
      echo "- $1 (this side's forms against --against-forms in A B B A blocks; ratio below 1: this side faster):"
      grep '"bench":"matmul"' "$f" | grep -v '"skipped"' | while read -r l; do
        echo "  - $(jget case <<<"$l") $(jget m <<<"$l")x$(jget n <<<"$l")x$(jget k <<<"$l") $(jget variant <<<"$l"): $(fmt "$(jget ms <<<"$l")" 3) ms ($(fmt "$(jget gflop_per_s <<<"$l")" 0) GFLOP/s) against $(fmt "$(jget against_ms <<<"$l")" 3) ms with $(jget against_forms <<<"$l"): ratio $(fmt "$(jget ratio_median_block <<<"$l")" 3), 95 % interval $(grep -o '"ratio_median_ci95":\[[^]]*]' <<<"$l" | sed 's/.*://' | grep . || echo 'none')"
      done ;;
    bench-matmul-*)
      echo "- $1 (GFLOP/s; the engine's pick marked *):"
      grep '"bench":"matmul"' "$f" | while read -r l; do
        local c v g a
        c="$(jget case <<<"$l") $(jget m <<<"$l")x$(jget n <<<"$l")x$(jget k <<<"$l")"
        v="$(jget variant <<<"$l")"; g="$(jget gflop_per_s <<<"$l")"; a="$(jget auto <<<"$l")"
        if [ -n "$(jget skipped <<<"$l")" ]; then echo "$c skipped"; else echo "$c $v $(fmt "$g" 0)$([ "$a" = true ] && echo '*')"; fi
      done | awk '{ key=$1; for (i=2;i<NF-1;i++) key=key" "$i; row[key]=row[key]" "$(NF-1)"="$NF; if (!(key in seen)) { seen[key]=1; order[++n]=key } }
                  END { for (i=1;i<=n;i++) print "  - " order[i] ":" row[order[i]] }'
      local best; best="$(grep '"bench":"matmul"' "$f" | jget_all gflop_per_s | sort -g | tail -1)"
      [ -n "$best" ] && echo "  - best: $(fmt "$best" 0) GFLOP/s$([ $LOCAL = 0 ] && echo " = $(awk -v g="$best" -v p="$F32_PEAK_TFLOPS" 'BEGIN { printf("%.1f", g / (10 * p)) }') % of the ${F32_PEAK_TFLOPS} TFLOP/s f32 FMA peak (H100/H200 SXM; F32_PEAK_TFLOPS overrides)")" ;;
    bench-train-*)
      local l; l="$(grep '"bench":"train_compare"' "$f" | head -1)"
      if [ -n "$l" ]; then
        local af; af="$(jget against_forms <<<"$l")"
        echo "- $1: $(jget variant <<<"$l") / $(jget against <<<"$l")$([ -n "$af" ] && [ "$af" != null ] && echo " with $af") step ratio $(fmt "$(jget ratio_median_block <<<"$l")" 3) (median of $(jget blocks <<<"$l") blocks, 95 % interval $(grep -o '"ratio_median_ci95":\[[^]]*]' <<<"$l" | sed 's/.*://' | grep . || echo 'none: fewer than 6 blocks'), best/best $(fmt "$(jget ratio_best <<<"$l")" 3)); medians $(fmt "$(jget median_step_ms <<<"$l")" 2) / $(fmt "$(jget against_median_step_ms <<<"$l")" 2) ms$(case "$(jget losses_identical <<<"$l")" in true) echo '; losses: the same bits on both sides' ;; false) echo '; losses: differ between the sides' ;; esac)"
      else
        l="$(grep '"bench":"train"' "$f" | head -1)"
        echo "- $1: $(jget variant <<<"$l") B $(jget batch <<<"$l") T $(jget seq <<<"$l"): $(fmt "$(jget step_ms <<<"$l")" 2) ms/step, $(fmt "$(jget tok_per_s <<<"$l")" 0) tok/s, MFU $(fmt "$(jget mfu <<<"$l")" 3) (of $(fmt "$(jget ceiling_gflop_per_s <<<"$l")" 0) GFLOP/s, $(jget ceiling <<<"$l")), matmul share $(fmt "$(jget matmul_share <<<"$l")" 2), $(jget submits_per_step <<<"$l") submits and $(jget readbacks_per_step <<<"$l") readbacks per step, peak/plan $(fmt "$(jget peak_over_plan <<<"$l")" 2), GPU idle between dispatches $(fmt "$(jget gpu_idle_ms <<<"$l")" 1) of $(fmt "$(jget gpu_span_ms <<<"$l")" 1) ms (profiled step)"
      fi ;;
    bench-kernels) echo "- kernels: $(grep -c '"bench":"kernel"' "$f") cases (per-kernel ms, GFLOP/s, GB/s and share of the floor in results.tar.gz); the five furthest from their floor: $(grep '"bench":"kernel"' "$f" | while read -r l; do echo "$(jget of_floor <<<"$l") $(jget name <<<"$l" | tr ' ' '_')"; done | sort -g | head -5 | awk '{ printf("%s (%.0f %%) ", $2, 100*$1) }')" ;;
    bench-attention-*|bench-state-*) echo "- $1 (ms): $(grep '"bench":"kernel"' "$f" | while read -r l; do echo -n "$(jget name <<<"$l" | cut -d' ' -f1) $(fmt "$(jget ms <<<"$l")" 3); "; done)" ;;
    bench-generate) echo "- generate: $(grep '"bench":"generate"' "$f" | while read -r l; do echo -n "context $(jget context <<<"$l"): $(fmt "$(jget cached_ms_per_token <<<"$l")" 2) ms/token cached, $(fmt "$(jget recompute_ms_per_token <<<"$l")" 2) recomputed; "; done | sed 's/; $//')" ;;
    *) echo "- $1: $(wc -l < "$f") JSON lines" ;;
  esac
}
# The device run's bench commands: NAME|SECONDS|[DDL_FORMS=… ]ARGS.
gpu_bench_cmds() {
  GPU_CMDS=(
      "bench-copy|30|bench copy --mib 1024 --reps 10 --json"
      "bench-matmul-square|60|bench matmul --sizes 1024,2048,4096 --reps 3 --json"
      "bench-matmul-f16|60|bench matmul --sizes 2048,4096 --cases nt,tn --operands rh --variants all --reps 3 --json"
      "bench-matmul-f16-coop|40|DDL_FORMS=matmul_coop=1 bench matmul --sizes 2048,4096 --operands rh --variants auto --reps 3 --json"
      "bench-matmul-coop128|40|DDL_FORMS=matmul_coop=1 bench matmul --sizes 4096,8192 --cases nn,nt,tn --operands rh --variants w128,coop,coop128 --reps 3 --json"
      "bench-matmul-coop128-checks|40|DDL_FORMS=matmul_coop=1,shader_checks=0 bench matmul --sizes 4096 --cases nn,nt,tn --operands rh --variants coop128 --against-forms shader_checks=1 --reps 6 --json"
      "bench-matmul-coop128v|50|DDL_FORMS=matmul_coop=1,shader_checks=0 bench matmul --sizes 4096 --cases nn,nt,tn --operands rh --variants w128,coop128,coop128v,coop128vq,coop128v2,coop128v:mma,coop128v:stage,coop:mma,coop:mma-b --reps 3 --json"
      "bench-matmul-coop128v-f16|40|DDL_FORMS=matmul_coop=1,shader_checks=0 bench matmul --sizes 4096 --cases nn,tn --operands f16 --variants coop128,coop128v,coop128v2,coop128d,coop128v:mma,coop128v:stage --reps 3 --json"
      "bench-train-small-f16-coop128v|60|DDL_FORMS=matmul_coop=1,matmul_coop_v=1,shader_checks=0 bench train --preset small-124m --variant baseline --precision f16 --against-forms matmul_coop_v=0 --batch 8 --seq 1024 --steps 6 --no-autotune --json"
      # Session 72: coop128v with two K slices' loads in flight, against one; and the
      # cooperative-matrix kernels at small-124m's shapes (issue 29 asks for those rates too).
      "bench-matmul-model-coop|45|DDL_FORMS=matmul_coop=1,matmul_coop_v=1,shader_checks=0 bench matmul --preset small-124m --batch 8 --seq 1024 --operands rh --variants w128,coop128v,coop128vq,coop128v2 --reps 3 --json"
      # Session 72: the token compressor's forward walks of 32 tokens, not 16 (its split against
      # bench-train-small-ddl's: scripts/gpu-check/state_split.py --step).
      "bench-train-small-ddl-conv32|45|DDL_FORMS=conv_fwd_chunk=32 bench train --preset small-124m --variant ddl --batch 8 --seq 1024 --steps 5 --dispatches --json"
      "bench-train-small-f16-coop128v2|60|DDL_FORMS=matmul_coop=1,matmul_coop_v=1,matmul_coop_v2=1,shader_checks=0 bench train --preset small-124m --variant baseline --precision f16 --against-forms matmul_coop_v2=0 --batch 8 --seq 1024 --steps 6 --no-autotune --json"
      "bench-train-small-residual-fused|60|bench train --preset small-124m --variant baseline --batch 8 --seq 1024 --against-forms residual_fused=0 --steps 6 --json"
      "bench-train-small-recompute|70|bench train --preset small-124m --variant ddl --batch 8 --seq 1024 --recompute --against ddl --steps 6 --json"
      "bench-train-small-head-chunk|60|bench train --preset small-124m --variant baseline --batch 8 --seq 1024 --head-chunk 1024 --against baseline --steps 6 --json"
      "bench-train-small-f16-acts|60|DDL_FORMS=shader_checks=0 bench train --preset small-124m --variant baseline --precision f16 --against-forms f16_acts=0 --batch 8 --seq 1024 --steps 6 --no-autotune --json"
      "bench-train-small-head-f16|60|DDL_FORMS=matmul_coop=1,matmul_coop_v=1,shader_checks=0 bench train --preset small-124m --variant baseline --precision f16 --against-forms head_f16=0 --batch 8 --seq 1024 --steps 6 --no-autotune --json"
      "bench-train-small-attn-p16|60|DDL_FORMS=shader_checks=0 bench train --preset small-124m --variant baseline --precision f16 --against-forms attn_p16=0 --batch 8 --seq 1024 --steps 6 --no-autotune --json"
      "bench-matmul-coop-halves|30|DDL_FORMS=matmul_coop=1 bench matmul --sizes 4096 --cases nn,nt --operands rh --variants w128,coop,coop64,coop:mma,coop:mma-cm,coop:stage --reps 3 --json"
      "bench-matmul-8192|30|bench matmul --sizes 8192 --variants auto --reps 5 --json"
      "bench-matmul-w128-halves|30|bench matmul --sizes 4096 --cases nt --variants w128,w128:mma,w128:stage,w128:fma,w128w,w128w:mma,w128w:stage,w128w:fma,w128k16,w128k16:mma,w128k16:stage,w64,w64:mma,w64:stage --reps 3 --json"
      "bench-matmul-model-halves|30|bench matmul --preset small-124m --batch 8 --seq 1024 --variants w128,w128:mma,w128:stage,w128w --reps 3 --json"
      "bench-matmul-checks|40|DDL_FORMS=shader_checks=0 bench matmul --sizes 4096 --cases nn,nt,tn --variants w128 --against-forms shader_checks=1 --reps 6 --json"
      "bench-matmul-model-checks|40|DDL_FORMS=shader_checks=0 bench matmul --preset small-124m --batch 8 --seq 1024 --variants auto --against-forms shader_checks=1 --reps 6 --json"
      "bench-matmul-model|60|bench matmul --preset small-124m --batch 8 --seq 1024 --tune --variants auto --reps 5 --json"
      "bench-matmul-model-split128|30|DDL_FORMS=split_k_tiles=128 bench matmul --preset small-124m --batch 8 --seq 1024 --variants auto --reps 5 --json"
      "bench-matmul-model-split512|30|DDL_FORMS=split_k_tiles=512 bench matmul --preset small-124m --batch 8 --seq 1024 --variants auto --reps 5 --json"
      "bench-matmul-model-rect|30|bench matmul --preset small-124m --batch 8 --seq 1024 --variants w128,w128x64,w64x128 --reps 5 --json"
      "bench-train-small-baseline|80|bench train --preset small-124m --variant baseline --batch 8 --seq 1024 --steps 5 --json"
      "bench-train-small-ddl|80|bench train --preset small-124m --variant ddl --batch 8 --seq 1024 --steps 5 --dispatches --json"
      "bench-train-small-causal|80|DDL_FORMS=attention=causal bench train --preset small-124m --variant baseline --batch 8 --seq 1024 --against-forms attention=blocked:256 --steps 6 --json"
      "bench-attention-causal|30|bench kernels --filter blocked,causal --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      # Session 71: the causal products over keys / queries with their tiles longest first.
      "bench-train-small-causal-lpt|60|DDL_FORMS=causal_lpt=1 bench train --preset small-124m --variant baseline --batch 8 --seq 1024 --against-forms causal_lpt=0 --steps 6 --json"
      "bench-train-small-ddl-vs-baseline|60|bench train --preset small-124m --variant ddl --against baseline --batch 8 --seq 1024 --steps 6 --json"
      "bench-train-small-checks|60|DDL_FORMS=shader_checks=0 bench train --preset small-124m --variant baseline --batch 8 --seq 1024 --against-forms shader_checks=1 --steps 6 --json"
      "bench-train-small-split512|60|DDL_FORMS=split_k_tiles=512 bench train --preset small-124m --variant baseline --batch 8 --seq 1024 --against-forms split_k_tiles=256 --steps 6 --json"
      "bench-train-small-ddl-seg32|45|DDL_FORMS=delta_seg=32 bench train --preset small-124m --variant ddl --against baseline --batch 8 --seq 1024 --steps 6 --json"
      "bench-train-small-f16-vs-f32|60|bench train --preset small-124m --variant baseline --precision f16 --against baseline --batch 8 --seq 1024 --steps 6 --no-autotune --json"
      "bench-train-small-f16-coop|60|DDL_FORMS=matmul_coop=1 bench train --preset small-124m --variant baseline --precision f16 --against baseline --batch 8 --seq 1024 --steps 6 --no-autotune --json"
      "bench-train-char-ddl-vs-baseline|30|bench train --preset shakespeare-char --variant ddl --against baseline --steps 6 --json"
      "bench-kernels|40|bench kernels --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-attention-blocked128|30|DDL_FORMS=attention=blocked:128 bench kernels --filter attention --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-attention-blocked256|30|DDL_FORMS=attention=blocked:256 bench kernels --filter attention --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-attention-tiled|30|DDL_FORMS=attention=tiled bench kernels --filter attention --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-attention-team32|20|DDL_FORMS=attn_team=32 bench kernels --filter blocked --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-attention-team64|20|DDL_FORMS=attn_team=64 bench kernels --filter blocked --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-train-small-attn-team|80|DDL_FORMS=attn_team=32 bench train --preset small-124m --variant baseline --batch 8 --seq 1024 --against-forms attn_team=0 --steps 6 --json"
      "bench-attention-blocked512|20|DDL_FORMS=attention=blocked:512 bench kernels --filter blocked --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-train-small-conv-batch|60|DDL_FORMS=conv_batch=1 bench train --preset small-124m --variant ddl --batch 8 --seq 1024 --against-forms conv_batch=0 --steps 6 --json"
      "bench-train-small-ddl-new-forms|80|DDL_FORMS=conv_batch=1,norm_vec=1 bench train --preset small-124m --variant ddl --batch 8 --seq 1024 --steps 5 --dispatches --json"
      "bench-norm-vec|20|DDL_FORMS=norm_vec=1 bench kernels --filter rmsnorm --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-train-small-norm-vec|60|DDL_FORMS=norm_vec=1 bench train --preset small-124m --variant baseline --batch 8 --seq 1024 --against-forms norm_vec=0 --steps 6 --json"
      "bench-train-small-blocked512|60|DDL_FORMS=attention=blocked:512 bench train --preset small-124m --variant baseline --batch 8 --seq 1024 --against-forms attention=blocked:256 --steps 6 --json"
      # (in --only's runs after every other train stage: the stages run in this list's order)
      # Session 69 (after GPU run 5): the GPU defaults attn_team=32 and norm_vec=1 and the H200's
      # attention=causal together against the forms before them, in both steps; every module
      # unchecked (the delta write's k stored after its writes) against the H200's line.
      "bench-train-small-new-defaults|60|bench train --preset small-124m --variant baseline --batch 8 --seq 1024 --against-forms attention=blocked:256,attn_team=0,norm_vec=0 --steps 6 --json"
      "bench-train-small-ddl-new-defaults|60|bench train --preset small-124m --variant ddl --batch 8 --seq 1024 --against-forms attention=blocked:256,attn_team=0,norm_vec=0 --steps 6 --json"
      "bench-train-small-unchecked-all|60|DDL_FORMS=unchecked=all bench train --preset small-124m --variant ddl --batch 8 --seq 1024 --against-forms unchecked=all-delta-shortconv --steps 6 --json"
      "bench-train-small-unchecked|70|DDL_FORMS=unchecked=all-delta-shortconv bench train --preset small-124m --variant ddl --batch 8 --seq 1024 --against-forms unchecked=none --steps 6 --json"
      "bench-train-small-unchecked-vs-checked|70|DDL_FORMS=unchecked=all bench train --preset small-124m --variant ddl --batch 8 --seq 1024 --against-forms unchecked=none --steps 6 --json"
      "bench-state-seg32|30|DDL_FORMS=delta_seg=32 bench kernels --filter delta_ --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-state-seg128|30|DDL_FORMS=delta_seg=128 bench kernels --filter delta_ --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-state-rows|30|DDL_FORMS=delta_rows=on,conv_quads=on,conv_sweep=on bench kernels --filter delta_,shortconv,expand --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-state-conv-quads|30|DDL_FORMS=conv_quads=on bench kernels --filter shortconv,expand --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-state-finish-channel|30|DDL_FORMS=conv_finish_wide=0 bench kernels --filter shortconv --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-state-conv-batch|30|DDL_FORMS=conv_batch=1 bench kernels --filter shortconv --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-state-finish-wide|30|DDL_FORMS=conv_finish_wide=1 bench kernels --filter shortconv --preset small-124m --batch 8 --seq 1024 --reps 5 --json"
      "bench-generate|30|bench generate --preset small-124m --variant ddl --contexts 64,512 --reps 3 --json"
  )
}
# Checks each line of the file $2 as `DDL_CHECK_ARGS=1 $1 ARGS` (parsed, forms checked, nothing
# run); prints the failures and a last line counting them.
CHECK_ARGS='
  n=0; bad=0
  while IFS="|" read -r name secs args; do
    envs=""
    case "$args" in DDL_FORMS=*) envs="${args%% *}"; args="${args#* }"
      [ -n "${DDL_FORMS:-}" ] && envs="DDL_FORMS=$DDL_FORMS,${envs#DDL_FORMS=}" ;; esac
    n=$((n + 1))
    if ! out="$(env $envs DDL_CHECK_ARGS=1 "$1" $args 2>&1)"; then
      bad=$((bad + 1)); echo "$name: $out"
    fi
  done < "$2"
  echo "$n device-run commands checked (DDL_CHECK_ARGS=1), $bad refused"
  [ $bad = 0 ]'
stage_bench() {
  local t0=$(date +%s) st details="" n rc rcs=""
  local -a cmds
  if [ $LOCAL = 1 ]; then
    # The training benchmarks here run on the heuristic's tiles (--no-autotune): timing every
    # tile variant of every product takes lavapipe minutes a model (the tiny baseline ran past
    # its 300 s in CI); bench-matmul-f16 and -model time them ("auto") at small sizes.
    cmds=(
      "bench-copy|60|bench copy --mib 16 --reps 3 --json"
      "bench-matmul-square|120|bench matmul --sizes 64,96 --reps 1 --json"
      "bench-matmul-f16|120|bench matmul --sizes 64 --operands rh --variants auto --reps 1 --json"
      "bench-matmul-model|300|bench matmul --preset tiny --batch 2 --variants auto --reps 1 --json"
      "bench-matmul-checks|120|DDL_FORMS=shader_checks=0 bench matmul --sizes 64 --cases nn --variants auto --against-forms shader_checks=1 --reps 1 --json"
      "bench-matmul-w128-halves|120|bench matmul --sizes 64 --cases nt --variants w128,w128:mma,w128:stage,w128:fma,w128w,w128w:mma --reps 1 --json"
      "bench-train-baseline|300|bench train --preset tiny --variant baseline --steps 2 --no-autotune --json"
      "bench-train-ddl|300|bench train --preset tiny --variant ddl --steps 2 --no-autotune --json"
      "bench-train-ddl-vs-baseline|600|bench train --preset tiny --variant ddl --against baseline --batch 4 --steps 1 --no-autotune --json"
      "bench-train-checks|300|DDL_FORMS=shader_checks=0 bench train --preset tiny --variant baseline --batch 2 --against-forms shader_checks=1 --steps 1 --no-autotune --json"
      "bench-train-unchecked|300|DDL_FORMS=unchecked=all-delta-shortconv bench train --preset tiny --variant baseline --batch 2 --against-forms unchecked=none --steps 1 --no-autotune --json"
      "bench-train-ddl-f16|300|bench train --preset tiny --variant ddl --precision f16 --steps 2 --no-autotune --json"
      "bench-kernels|600|bench kernels --preset tiny --batch 2 --reps 1 --json"
      "bench-attention-blocked64|300|DDL_FORMS=attention=blocked:64 bench kernels --filter attention --preset tiny --batch 2 --reps 1 --json"
      "bench-attention-team|300|DDL_FORMS=attn_team=4 bench kernels --filter blocked --preset tiny --batch 2 --reps 1 --json"
      "bench-attention-causal|300|bench kernels --filter blocked,causal --preset tiny --batch 2 --reps 1 --json"
      "bench-train-causal|300|DDL_FORMS=attention=causal bench train --preset tiny --variant baseline --batch 2 --against-forms attention=blocked:64 --steps 1 --no-autotune --json"
      "bench-state-conv-batch|300|DDL_FORMS=conv_batch=1,conv_quads=0 bench kernels --filter shortconv --preset tiny --batch 2 --reps 1 --json"
      "bench-norm-vec|300|DDL_FORMS=norm_vec=1,norm_rows=0 bench kernels --filter rmsnorm --preset tiny --batch 2 --reps 1 --json"
      "bench-generate|300|bench generate --preset tiny --variant ddl --contexts 8 --reps 1 --json"
    )
    # Every command of the device run, parsed and its forms checked, nothing run (a typo there
    # would cost device minutes): `bench-gpu-args`.
    gpu_bench_cmds
    printf '%s\n' "${GPU_CMDS[@]}" > "$WORK/gpu-cmds.txt"
    step bench-gpu-args 120 bash -c "$CHECK_ARGS" check-args "$DDL" "$WORK/gpu-cmds.txt"; rc=$?
    # (Not selected by --only: neither a problem of the stage nor a number.)
    if [ $rc != 126 ]; then
      rcs="$rcs $rc"
      [ $rc = 0 ] || details="$details bench-gpu-args: $(why $rc);"
      note "- bench-gpu-args: $(tail -1 "$RAW/bench-gpu-args.log")"
    fi
  else
    gpu_bench_cmds
    cmds=("${GPU_CMDS[@]}")
  fi
  local c name secs args envs
  for c in "${cmds[@]}"; do
    IFS='|' read -r name secs args <<<"$c"
    # A leading DDL_FORMS=… sets the kernel forms of that command alone.
    envs=""
    case "$args" in DDL_FORMS=*) envs="$(with_base_forms "${args%% *}")"; args="${args#* }" ;; esac
    # shellcheck disable=SC2086
    step "$name" "$secs" env $envs "$DDL" $args; rc=$?
    rcs="$rcs $rc"
    [ $rc = 126 ] && continue
    [ $rc = 0 ] || details="$details $name: $(why $rc);"
    note "$(bench_line "$name")"
    case "$name" in bench-matmul-*|bench-train-small-baseline|bench-train-small-ddl)
      [ -s "$RAW/$name.clocks.csv" ] && note "$(clocks_line "$name")" ;; esac
    write_summary
  done
  st=$(settle $rcs)
  details="${details# }"
  stage_row bench "$st" $(( $(date +%s) - t0 )) "${details:-every command selected ran; numbers below}"
}

# ---------------------------------------------------------------------------- torch
torch_line() {
  if [ "${1#torch-matmul}" != "$1" ]; then
    echo "- $1 (PyTorch's products, TFLOP/s$([ "${1#*bf16}" != "$1" ] && echo ', bf16 operands' || echo ', TF32 off')): $(grep '"bench":"matmul"' "$RAW/$1.jsonl" 2>/dev/null | while read -r l; do echo -n "$(jget case <<<"$l") $(jget m <<<"$l")x$(jget n <<<"$l")x$(jget k <<<"$l") $(fmt "$(jget tflops <<<"$l")" 1); "; done)"
    return
  fi
  local f="$RAW/$1.jsonl" l
  l="$(grep '"impl": *"torch"' "$f" 2>/dev/null | head -1)"
  [ -n "$l" ] || { echo "- $1: no result ($(tail -1 "$RAW/$1.log" 2>/dev/null))"; return; }
  l="$(tr -d ' ' <<<"$l")"
  echo "- $1: torch $(jget torch <<<"$l") $(jget variant <<<"$l") $(jget preset <<<"$l") B $(jget batch <<<"$l") T $(jget seq_len <<<"$l") on $(jget device_name <<<"$l"), $(jget dtype <<<"$l")$([ "$(jget compile <<<"$l")" = true ] && echo ' + compile'): $(fmt "$(jget median_ms <<<"$l")" 2) ms/step, $(fmt "$(jget tokens_per_s <<<"$l")" 0) tok/s"
}
stage_torch() {
  local t0=$(date +%s) st details="" rcs="" py script="$BUNDLE/torch/torch_reference_bench.py"
  py="$(command -v python3 || true)"
  if [ -z "$py" ] || ! "$py" -c 'import torch' >/dev/null 2>&1; then
    stage_row torch skipped 0 "PyTorch is not installed here (python3: ${py:-none}); the engine's own stages do not need it"
    return
  fi
  local dev; dev="$("$py" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")' 2>/dev/null)"
  if [ $LOCAL = 0 ] && [ "$dev" != cuda ]; then
    stage_row torch fail 0 "torch sees no CUDA device"
    return
  fi
  local -a cmds
  if [ $LOCAL = 1 ]; then
    cmds=(
      "torch-tiny-baseline-f32|120|--preset tiny --variant baseline --steps 2"
      "torch-tiny-ddl-f32|120|--preset tiny --variant ddl --steps 2"
      "torch-matmul-f32|60|@matmul --sizes 256 --reps 2"
    )
  else
    cmds=(
      "torch-small-baseline-f32|45|--preset small-124m --variant baseline --batch 8 --seq 1024 --steps 5"
      "torch-small-ddl-f32|60|--preset small-124m --variant ddl --batch 8 --seq 1024 --steps 5"
      "torch-matmul-f32|40|@matmul --sizes 4096 --model --reps 10"
      "torch-matmul-bf16|30|@matmul --sizes 4096 --model --dtype bf16 --reps 10"
      "torch-small-baseline-bf16-compile|200|--preset small-124m --variant baseline --batch 8 --seq 1024 --dtype bf16 --compile --steps 5"
      "torch-char-baseline-f32|20|--preset shakespeare-char --variant baseline --steps 10"
      "torch-char-ddl-f32|20|--preset shakespeare-char --variant ddl --steps 10"
      "torch-small-ddl-bf16-compile|240|--preset small-124m --variant ddl --batch 8 --seq 1024 --dtype bf16 --compile --steps 5"
    )
  fi
  local c name secs args rc s
  for c in "${cmds[@]}"; do
    IFS='|' read -r name secs args <<<"$c"
    # (`@matmul`: PyTorch's own products, scripts/torch_matmul_bench.py, not training steps.)
    s="$script"
    case "$args" in @matmul*) s="$BUNDLE/torch/torch_matmul_bench.py"; args="${args#@matmul}" ;; esac
    # shellcheck disable=SC2086
    step "$name" "$secs" env PYTHONUNBUFFERED=1 "$py" "$s" --device "$dev" $args --json; rc=$?
    rcs="$rcs $rc"
    [ $rc = 126 ] && continue
    [ $rc = 0 ] || details="$details $name: $(why $rc);"
    note "$(torch_line "$name")"
    [ -s "$RAW/$name.clocks.csv" ] && note "$(clocks_line "$name")"
    write_summary
  done
  compare_torch
  st=$(settle $rcs)
  stage_row torch "$st" $(( $(date +%s) - t0 )) "${details:- every run selected finished; numbers below}"
}
# The engine's training throughput over PyTorch's on the same device, where both ran.
compare_torch() {
  local pairs p e t label et tt
  if [ $LOCAL = 1 ]; then
    pairs=("bench-train-baseline|torch-tiny-baseline-f32|tiny baseline, torch float32" "bench-train-ddl|torch-tiny-ddl-f32|tiny ddl, torch float32")
  else
    pairs=("bench-train-small-baseline|torch-small-baseline-f32|small-124m baseline, torch float32 eager (TF32 off)"
           "bench-train-small-ddl|torch-small-ddl-f32|small-124m ddl, torch float32 eager (TF32 off)"
           "bench-train-small-baseline|torch-small-baseline-bf16-compile|small-124m baseline, torch bf16 + compile"
           "bench-train-small-ddl|torch-small-ddl-bf16-compile|small-124m ddl, torch bf16 + compile")
  fi
  for p in "${pairs[@]}"; do
    IFS='|' read -r e t label <<<"$p"
    et="$(grep -h '"bench":"train"' "$RAW/$e.jsonl" 2>/dev/null | head -1 | jget tok_per_s)"
    tt="$(tr -d ' ' < "$RAW/$t.jsonl" 2>/dev/null | grep -h '"impl":"torch"' | head -1 | jget tokens_per_s)"
    if [ -n "$et" ] && [ -n "$tt" ]; then
      note "- engine / PyTorch tok/s, $label: $(fmt "$et" 0) / $(fmt "$tt" 0) = $(awk -v a="$et" -v b="$tt" 'BEGIN { printf("%.2f", a / b) }')×"
    fi
  done
}

# ---------------------------------------------------------------------------- experiment
# Not a default stage: `--stages experiment [--spec FILE]` trains an experiment grid on this
# adapter (issue 30: minutes on a GPU where lavapipe takes hours), from the repository root, into
# a fresh folder, so that a GPU grid never mixes with runs made elsewhere; GRID_RUNS=DIR (finished
# runs of an earlier call, carried) resumes them. Its finished runs (result.json and config.toml
# each, as `scripts/experiment-runs.sh save` keeps them), the report, its plots and speed.jsonl
# come back as $OUT/grid.tar.gz (grid-runs/), rewritten when the stage ends, also when its time
# runs out. Then the runs in progress are interrupted as Ctrl-C would (SIGINT: each saves its
# checkpoint) and their checkpoints come back as $OUT/grid-partial.tar.gz (grid-partial/, ≈ 2 MB a
# micro run; left out, and the summary says so, above the device's 16 MiB a file); with
# GRID_PARTIAL=DIR the next call resumes them. The runs train GRID_JOBS at a time (`--jobs`, each
# on its own device: a micro model leaves a GPU mostly idle), default 8 on the card, 1 with --local.
stage_experiment() {
  local t0=$(date +%s) g="$WORK/grid" keep="$WORK/grid-runs" part="$WORK/grid-partial" rc secs n p jobs note=""
  jobs="${GRID_JOBS:-$([ $LOCAL = 1 ] && echo 1 || echo 8)}"
  : > "$RAW/experiment.log"
  local v said
  for v in GRID_RUNS GRID_PARTIAL; do
    [ -n "${!v:-}" ] || continue
    if ! said="$(bash "$ROOT/scripts/experiment-runs.sh" restore "${!v}" "$g" 2>&1)"; then
      echo "$said" >> "$RAW/experiment.log"
      stage_row experiment fail $(( $(date +%s) - t0 )) "$v=${!v} did not restore, nothing trained: $(tail -1 <<<"$said")"
      return
    fi
    echo "$said" >> "$RAW/experiment.log"
  done
  secs=$(left)
  log "experiment (timeout ${secs}s): ddl experiment --spec $SPEC --out $g --no-autotune --jobs $jobs"
  # SIGINT at the limit: every run saves its checkpoint and the grid stops; KILL 20 s later.
  (cd "$ROOT" && timeout -s INT -k 20 "$secs" "$DDL" experiment --spec "$SPEC" --out "$g" --no-autotune --jobs "$jobs") >> "$RAW/experiment.log" 2>&1
  rc=$?
  mkdir -p "$keep"
  [ -d "$g/runs" ] && bash "$ROOT/scripts/experiment-runs.sh" save "$g" "$keep" >> "$RAW/experiment.log" 2>&1
  cp "$g"/report.md "$g"/*.png "$g"/speed.jsonl "$g"/experiment.toml "$keep/" 2>/dev/null
  tar -C "$WORK" -czf "$OUTDIR/grid.tar.gz.tmp" grid-runs && mv "$OUTDIR/grid.tar.gz.tmp" "$OUTDIR/grid.tar.gz"
  rm -rf "$part" "$OUTDIR"/grid-partial.tar.gz*
  [ -d "$g/runs" ] && bash "$ROOT/scripts/experiment-runs.sh" save-partial "$g" "$part" >> "$RAW/experiment.log" 2>&1
  p=$(find "$part" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)
  if [ "$p" -gt 0 ]; then
    # ≈ 3 MB a micro run of 16 000 steps (checkpoint and metrics): over the device's 16 MiB a
    # file, the archive comes back in pieces of 15 MiB (grid-partial.tar.gz.00, .01, …; at most
    # four, beside the other four files of $OUT): `cat grid-partial.tar.gz* | tar xz` joins them.
    tar -C "$WORK" -czf "$WORK/grid-partial.tar.gz" grid-partial
    if [ "$(stat -c %s "$WORK/grid-partial.tar.gz")" -le $((16 * 1024 * 1024)) ]; then
      mv "$WORK/grid-partial.tar.gz" "$OUTDIR/grid-partial.tar.gz"
      note="; $p unfinished runs' checkpoints in grid-partial.tar.gz (GRID_PARTIAL resumes them)"
    elif [ "$(stat -c %s "$WORK/grid-partial.tar.gz")" -le $((4 * 15 * 1024 * 1024)) ]; then
      split -b 15M -d -a 2 "$WORK/grid-partial.tar.gz" "$OUTDIR/grid-partial.tar.gz."
      note="; $p unfinished runs' checkpoints in grid-partial.tar.gz.* ($(ls "$OUTDIR"/grid-partial.tar.gz.* | wc -l) pieces: cat them into one; GRID_PARTIAL resumes them)"
    else
      note="; the $p unfinished runs' checkpoints exceed 60 MiB and stay behind (fewer GRID_JOBS keeps them smaller)"
    fi
    rm -f "$WORK/grid-partial.tar.gz"
  fi
  n=$(find "$keep" -name result.json | wc -l)
  stage_row experiment "$([ $rc = 0 ] && echo pass || echo fail)" $(( $(date +%s) - t0 )) "$(why $rc); $n finished runs in grid.tar.gz ($SPEC)$note"
}

# ---------------------------------------------------------------------------- run
log "bundle $BUNDLE, out $OUTDIR, stages $STAGES, budget ${BUDGET}s$([ $LOCAL = 1 ] && echo ', local')"
write_summary
for s in info golden kernels bench torch experiment; do
  want "$s" || continue
  if [ "$(left)" -le 2 ]; then stage_row "$s" skipped 0 "no budget left"; continue; fi
  "stage_$s"
done
write_summary
echo
cat "$OUTDIR/summary.md"
# The stages as a closing line, and the exit status: 0 when no asked-for stage failed.
np=$(cut -f2 "$RAW/status.tsv" | grep -cx pass)
nf=$(cut -f2 "$RAW/status.tsv" | grep -cx fail)
ns=$(cut -f2 "$RAW/status.tsv" | grep -cx skipped)
echo
echo "gpu-check: $np passed, $nf failed, $ns skipped"
[ "$nf" = 0 ]
