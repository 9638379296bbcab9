#!/usr/bin/env bash
# Builds the browser visualizer as a static site (`make web`): target/web/ with index.html, the
# wasm module and its JavaScript glue (pkg/), and the demo checkpoint (demo/). Serve the folder
# with any static server, e.g. `python3 -m http.server -d target/web 8000`, and open
# http://localhost:8000 in a browser with WebGPU.
#
# Needs the Rust target wasm32-unknown-unknown (`rustup target add wasm32-unknown-unknown`) and
# the wasm-bindgen CLI at the version web/Cargo.toml pins (installed with `cargo install` when
# missing or at another version; DDL_WEB_NO_INSTALL=1 refuses instead).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'web: %s\n' "$*"; }
# Errors go to stderr (a caller reading the site's path from stdout sees none of them).
die() { printf 'web: %s\n' "$*" >&2; exit 1; }

target_dir="${CARGO_TARGET_DIR:-target}"
out="${DDL_WEB_OUT:-$target_dir/web}"
# The Cargo profile: `web` (size-optimised, LTO: the site people get) unless DDL_WEB_PROFILE names
# another; `make test` builds its browser test's site with `web-test` (no LTO, quick to rebuild).
profile="${DDL_WEB_PROFILE:-web}"
case "$profile" in
  web|web-test) ;;
  *) die "DDL_WEB_PROFILE=$profile: expected web (the default) or web-test (Cargo.toml's profiles for the site)" ;;
esac
want="$(sed -n 's/^wasm-bindgen = "=\([0-9.]*\)".*/\1/p' web/Cargo.toml)"
[ -n "$want" ] || { die "web/Cargo.toml pins no wasm-bindgen version (wasm-bindgen = \"=X.Y.Z\")"; }

installed="$(rustup target list --installed 2>/dev/null || true)"
case "$installed" in
  *wasm32-unknown-unknown*) ;;
  *) die "the Rust target wasm32-unknown-unknown is missing: rustup target add wasm32-unknown-unknown (make setup adds it)" ;;
esac

have="$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)"
if [ "$have" != "$want" ]; then
  if [ "${DDL_WEB_NO_INSTALL:-0}" = 1 ]; then
    die "wasm-bindgen ${have:-is not installed}; this build needs $want: cargo install wasm-bindgen-cli --version $want"
  fi
  say "installing wasm-bindgen-cli $want (had: ${have:-none}); a few minutes, once"
  cargo install -q wasm-bindgen-cli --version "$want"
fi

say "building the wasm module (cargo build -p ddl-web --target wasm32-unknown-unknown --profile $profile)"
cargo build -q -p ddl-web --lib --target wasm32-unknown-unknown --profile "$profile"
wasm="$target_dir/wasm32-unknown-unknown/$profile/ddl_web.wasm"

# Assemble in a fresh folder, then swap it in: a failed build leaves the previous site intact.
tmp="$out.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp" && mkdir -p "$tmp/pkg" "$tmp/demo"
wasm-bindgen --target web --no-typescript --out-dir "$tmp/pkg" "$wasm"
cp web/static/index.html "$tmp/"
cp web/demo/model.safetensors "$tmp/demo/"
rm -rf "$out" && mv "$tmp" "$out"
trap - EXIT
size="$(du -sh "$out" | cut -f1)"
say "built $out ($size): serve it with 'python3 -m http.server -d $out 8000' and open http://localhost:8000"
