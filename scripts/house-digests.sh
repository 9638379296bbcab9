#!/usr/bin/env bash
# Digests of what the engine computes, for refactors that must not change results (issue 28):
# the loss of every step and a digest of the final parameters of 20-step fixed-seed `ddl train`
# runs of tiny ddl and ddl_ccec (every variant with VARIANTS=all), of a run stopped at step 10 and
# resumed to 20, and of the trace of a greedy `ddl generate` (of ddl_ccec too with VARIANTS=all). Same binary, same adapter => the same lines; compare two trees'
# outputs with diff.
#   scripts/house-digests.sh [DDL_BINARY] > digests.txt
set -euo pipefail
# A binary given by a relative path is taken from the current directory (before the cd below).
DDL="${1:-target/release/ddl}"
[ $# -ge 1 ] && [ "${DDL#/}" = "$DDL" ] && DDL="$PWD/$DDL"
cd "$(dirname "$0")/.."
[ -f "$DDL" ] && [ -x "$DDL" ] || { echo "house-digests: $DDL is not an executable file (build with cargo build --release)" >&2; exit 1; }
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
# `ddl_to FILE ARGS…`: ddl ARGS with its standard output in FILE and its messages in $W/log; a
# failure stops the script with the command and the messages' last lines (it stopped with no word).
ddl_to() {
  local out="$1"; shift
  "$DDL" "$@" >"$out" 2>"$W/log" || { echo "house-digests: \`$DDL $*\` failed:" >&2; tail -n 5 "$W/log" >&2; exit 1; }
}
export DDL_CACHE_DIR="${DDL_CACHE_DIR:-$W/cache}" XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$W/xdg}"
mkdir -p "$XDG_RUNTIME_DIR"; chmod 700 "$XDG_RUNTIME_DIR"
losses() { grep -o '"loss":[^,}]*' "$1/metrics.jsonl" | tr '\n' ' '; }
# A safetensors file's tensors in name order (name, dtype, shape, bytes): writers may lay the
# tensors out in any order (a hash map's), so the file's own bytes can differ for the same content.
tensors() { python3 - "$1" 2>/dev/null <<'PY' || { sha256sum "$1" | cut -c1-16; echo "(file bytes: python3 missing)"; }
import hashlib, json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
head, data, h = json.loads(b[8:8 + n]), b[8 + n:], hashlib.sha256()
for name in sorted(k for k in head if k != "__metadata__"):
    t = head[name]
    s, e = t["data_offsets"]
    h.update(json.dumps([name, t["dtype"], t["shape"]]).encode())
    h.update(data[s:e])
print(h.hexdigest()[:16], "(tensors by name)")
PY
}
params() { tensors "$1/model.safetensors"; }
case "${VARIANTS:-}" in
  "") VARIANTS="ddl ddl_ccec" ;;
  all) VARIANTS="baseline ddl_v1 ddl ddl_ec ddl_cc ddl_ccec ddl_v1_vmap ddl_vmap" ;;
esac
for v in $VARIANTS; do
  ddl_to /dev/null train --preset tiny --variant "$v" --steps 20 --seed 7 --out "$W/$v"
  echo "$v losses: $(losses "$W/$v")"
  echo "$v params: $(params "$W/$v")"
done
ddl_to /dev/null train --preset tiny --variant ddl --steps 10 --seed 7 --out "$W/resumed"
ddl_to /dev/null train --resume "$W/resumed" --steps 20
echo "ddl resumed 10 -> 20 params: $(params "$W/resumed")"
ddl_to "$W/gen.txt" generate --checkpoint "$W/ddl" --prompt "ROMEO:" --max-tokens 40 --temperature 0 --trace "$W/trace.safetensors"
echo "generate text: $(sha256sum < "$W/gen.txt" | cut -c1-16)"
echo "generate trace: $(tensors "$W/trace.safetensors")"
if [ -d "$W/ddl_ccec" ] && [ "${VARIANTS}" != "ddl ddl_ccec" ]; then
  ddl_to "$W/gen2.txt" generate --checkpoint "$W/ddl_ccec" --prompt "ROMEO:" --max-tokens 24 --temperature 0 --trace "$W/trace2.safetensors"
  echo "generate ddl_ccec text: $(sha256sum < "$W/gen2.txt" | cut -c1-16)"
  echo "generate ddl_ccec trace: $(tensors "$W/trace2.safetensors")"
fi
