#!/usr/bin/env bash
# Compiles the engine, the `ddl` command, the visualizer and every test for the laptops' platforms
# this Linux machine cannot run: Windows (DX12) and macOS on Apple silicon (Metal). `cargo check`
# only (type-checks, no linking, no device), with warnings as errors in this workspace's crates,
# so platform-specific code (`cfg(unix)`, paths, signals) cannot break those builds unseen.
#
#   scripts/platform-check.sh [TARGET ...]   default: x86_64-pc-windows-msvc aarch64-apple-darwin
#
# The crates are checked without the `onig` feature (Oniguruma is C, which cannot be compiled for
# another platform here; `native` alone uses the pure-Rust regexes, the same tokens). `make test`
# runs it (DDL_SETUP_PLATFORMS=0 skips it); scripts/setup.sh test adds the Rust targets (rustup).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'platform-check: %s\n' "$*"; }

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(x86_64-pc-windows-msvc aarch64-apple-darwin)

installed="$(rustup target list --installed 2>/dev/null || true)"
for t in "${targets[@]}"; do
  case "$installed" in
    *"$t"*) ;;
    *)
      say "the Rust target $t is not installed: rustup target add $t (scripts/setup.sh test adds it), or DDL_SETUP_PLATFORMS=0 to skip this check"
      exit 1
      ;;
  esac
done

# (Warnings of dependencies are capped by cargo; only this workspace's become errors.)
export RUSTFLAGS="${RUSTFLAGS:-} -D warnings"
for t in "${targets[@]}"; do
  start=$(date +%s)
  say "$t: cargo check --all-targets -p ddl --no-default-features --features native"
  cargo check -q --target "$t" --all-targets -p ddl --no-default-features --features native
  say "$t: cargo check --all-targets -p ddl-viz --no-default-features"
  cargo check -q --target "$t" --all-targets -p ddl-viz --no-default-features
  say "$t: compiles ($(( $(date +%s) - start )) s)"
done
