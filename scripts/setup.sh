#!/usr/bin/env bash
# Installs what one target needs on a fresh machine, and nothing a machine already has:
#
#   scripts/setup.sh demo        a Vulkan driver when no Vulkan device is present (Linux): Mesa's
#                                software driver lavapipe (`mesa-vulkan-drivers libvulkan1`), so
#                                everything runs on the CPU. `make demo`.
#   scripts/setup.sh bundle      demo's, and xz-utils and binutils for the GPU check's bundle
#                                (`make gpu-bundle`, `make gpu-check-local`).
#   scripts/setup.sh test        bundle's, and xvfb (a virtual display, the visualizer's window
#                                test; DDL_SETUP_XVFB=0 skips it) and Open MPI with libclang
#                                (`libopenmpi-dev openmpi-bin libclang-dev`, the data-parallel build
#                                and its test; DDL_SETUP_MPI=0 skips them), and the Rust target
#                                wasm32-unknown-unknown (rustup) with Chromium (`chromium`): the
#                                browser build and its end-to-end test (DDL_SETUP_WASM=0 skips
#                                them), and the Rust targets x86_64-pc-windows-msvc and
#                                aarch64-apple-darwin (rustup): the Windows and macOS compile check,
#                                scripts/platform-check.sh (DDL_SETUP_PLATFORMS=0 skips them).
#                                `make test` (default).
#
# macOS (Metal) and Windows (DX12) need no install for any target. First it checks that the
# installed Rust is at least Cargo.toml's rust-version (DDL_SETUP_ONLY=rust stops after that
# check). DDL_SETUP_DRY_RUN=1 prints what it would install and installs nothing;
# DDL_SETUP_PRETEND_MISSING=vulkan,xvfb,mpi,xz,binutils,wasm,chromium,platforms and DDL_SETUP_OS=Darwin
# make it act as on a machine without those (for its test). Needs root or sudo for apt-get.
set -euo pipefail

say() { printf 'setup: %s\n' "$*"; }

target="${1:-test}"
case "$target" in
  demo|bundle|test) ;;
  # The usage: this file's opening comment.
  -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
  *) say "unknown target '$target': expected demo, bundle or test (scripts/setup.sh TARGET; DDL_SETUP_DRY_RUN=1 in the environment shows what it would install without installing it; scripts/setup.sh --help lists the settings)"; exit 2 ;;
esac
missing() { case ",${DDL_SETUP_PRETEND_MISSING:-}," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

if ! command -v cargo >/dev/null 2>&1; then
  say "cargo not found. Install Rust (https://rustup.rs) and run this again."
  exit 1
fi

# The Rust the crate needs (Cargo.toml's rust-version) against the one installed.
need_rust="$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$(dirname "$0")/../Cargo.toml" | head -1)"
have_rust="$(rustc --version 2>/dev/null | sed -n 's/^rustc \([0-9][0-9.]*\).*/\1/p')"
# version_ge A B: A ≥ B, comparing dot-separated numbers (no sort -V: BSD sort may lack it).
version_ge() {
  local IFS=.
  local i a=($1) b=($2)
  for i in 0 1 2; do
    [ "${a[i]:-0}" -gt "${b[i]:-0}" ] && return 0
    [ "${a[i]:-0}" -lt "${b[i]:-0}" ] && return 1
  done
  return 0
}
if [ -n "$need_rust" ] && [ -n "$have_rust" ] && ! version_ge "$have_rust" "$need_rust"; then
  say "Rust $have_rust is installed; this crate needs Rust $need_rust or newer (Cargo.toml rust-version)."
  say "Update it with 'rustup update stable' (or install a newer Rust from https://rustup.rs) and run this again."
  exit 1
fi
[ "${DDL_SETUP_ONLY:-}" = rust ] && { say "Rust ${have_rust:-?} (needs ${need_rust:-?}): fine."; exit 0; }

os="${DDL_SETUP_OS:-$(uname -s)}"
case "$os" in
  Linux) ;;
  *) say "$os: using the system's Metal/DX12 driver; nothing to install for '$target'."; exit 0 ;;
esac

have_vulkan() {
  missing vulkan && return 1
  # The loader and at least one installable client driver (ICD) manifest.
  # (Captured first: `ldconfig -p | grep -q` fails under pipefail when grep stops reading early
  # and ldconfig gets SIGPIPE.)
  local libs
  libs="$(ldconfig -p 2>/dev/null || true)"
  case "$libs" in *libvulkan.so.1*) ;; *) return 1 ;; esac
  local d
  for d in /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d ${VK_DRIVER_FILES:+$(dirname "${VK_DRIVER_FILES%%:*}")} ${VK_ICD_FILENAMES:+$(dirname "${VK_ICD_FILENAMES%%:*}")}; do
    ls "$d"/*.json >/dev/null 2>&1 && return 0
  done
  return 1
}

pkgs=()
if have_vulkan; then
  say "a Vulkan driver is present; not installing one."
else
  say "no Vulkan device found: Mesa's software Vulkan driver (lavapipe) is needed."
  pkgs+=(mesa-vulkan-drivers libvulkan1)
fi
# The GPU check's bundle (scripts/gpu-check.sh) strips and xz-compresses the binaries.
if [ "$target" != demo ] && command -v apt-get >/dev/null 2>&1; then
  { ! missing xz && command -v xz >/dev/null 2>&1; } || pkgs+=(xz-utils)
  { ! missing binutils && command -v strip && command -v strings; } >/dev/null 2>&1 || pkgs+=(binutils)
fi
if [ "$target" = test ] && [ "${DDL_SETUP_XVFB:-1}" = 1 ] && { missing xvfb || ! command -v Xvfb >/dev/null 2>&1; }; then
  pkgs+=(xvfb)
fi
have_mpi() {
  missing mpi && return 1
  # mpirun to launch, mpicc/mpi.h to link (rsmpi's build probes them), libclang for its bindgen.
  command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1 || return 1
  ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/*/libclang*.so* >/dev/null 2>&1
}
if [ "$target" = test ] && [ "${DDL_SETUP_MPI:-1}" = 1 ] && ! have_mpi; then
  if command -v apt-get >/dev/null 2>&1; then
    pkgs+=(libopenmpi-dev openmpi-bin libclang-dev)
  else
    say "no MPI found: the data-parallel build (--features mpi) and its test need Open MPI (or MPICH) and libclang."
  fi
fi

# The browser build (`make test` compiles the library for wasm32): the target's standard library.
have_wasm() {
  missing wasm && return 1
  local t
  t="$(rustup target list --installed 2>/dev/null || true)"
  case "$t" in *wasm32-unknown-unknown*) return 0 ;; *) return 1 ;; esac
}
add_wasm=0
if [ "$target" = test ] && [ "${DDL_SETUP_WASM:-1}" = 1 ] && ! have_wasm; then
  add_wasm=1
fi
# The Windows and macOS compile check (scripts/platform-check.sh): those targets' standard libraries.
platform_targets=(x86_64-pc-windows-msvc aarch64-apple-darwin)
add_platforms=()
if [ "$target" = test ] && [ "${DDL_SETUP_PLATFORMS:-1}" = 1 ]; then
  installed="$(rustup target list --installed 2>/dev/null || true)"
  for t in "${platform_targets[@]}"; do
    if missing platforms || [[ "$installed" != *"$t"* ]]; then
      add_platforms+=("$t")
    fi
  done
fi
# The browser test drives Debian's Chromium headless (WebGPU through its SwiftShader).
if [ "$target" = test ] && [ "${DDL_SETUP_WASM:-1}" = 1 ] && command -v apt-get >/dev/null 2>&1 \
   && { missing chromium || ! [ -x /usr/bin/chromium ]; }; then
  pkgs+=(chromium)
fi

if [ "${DDL_SETUP_DRY_RUN:-0}" = 1 ]; then
  [ "$add_wasm" = 1 ] && say "'$target' would add the Rust target wasm32-unknown-unknown (rustup)"
  [ ${#add_platforms[@]} -gt 0 ] && say "'$target' would add the Rust targets ${add_platforms[*]} (rustup)"
  say "'$target' on $os would install: ${pkgs[*]:-nothing}"
  exit 0
fi
if [ "$add_wasm" = 1 ]; then
  if command -v rustup >/dev/null 2>&1; then
    rustup target add wasm32-unknown-unknown >/dev/null
    say "added the Rust target wasm32-unknown-unknown."
  else
    say "rustup not found: the browser build's check needs the Rust target wasm32-unknown-unknown; install it with your Rust's installer, or set DDL_SETUP_WASM=0 to skip the check."
    exit 1
  fi
fi
if [ ${#add_platforms[@]} -gt 0 ]; then
  if command -v rustup >/dev/null 2>&1; then
    rustup target add "${add_platforms[@]}" >/dev/null
    say "added the Rust targets ${add_platforms[*]}."
  else
    say "rustup not found: the Windows and macOS compile check needs the Rust targets ${add_platforms[*]}; install them with your Rust's installer, or set DDL_SETUP_PLATFORMS=0 to skip the check."
    exit 1
  fi
fi
if [ ${#pkgs[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    say "apt-get not found: install ${pkgs[*]} (or your distribution's equivalents) by hand."
    exit 1
  fi
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      SUDO="sudo"
    else
      say "need root to install ${pkgs[*]}: run as root or install sudo."
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  say "installed ${pkgs[*]}."
fi

if ! have_vulkan; then
  say "still no Vulkan driver after the install; see 'ddl info' for what wgpu finds."
  exit 1
fi
