# The two commands of the README: `make demo` and `make test`. Both install what they need first.
CARGO ?= cargo
export XDG_RUNTIME_DIR ?= /tmp/ddl-xdg

.PHONY: setup setup-demo setup-bundle demo test bench fmt gpu-bundle gpu-check-local web bench-web

## What each target installs (only what is missing; nothing on macOS/Windows): docs/SETUP.md.
setup:
	@bash scripts/setup.sh test
setup-demo:
	@bash scripts/setup.sh demo
setup-bundle:
	@bash scripts/setup.sh bundle

## Main job: show the adapter, train the tiny DDL model on TinyShakespeare for a few minutes,
## then print the validation loss, the loss plot's path and a generated sample.
DEMO_STEPS ?= 300
demo: setup-demo
	$(CARGO) run --release --bin ddl -- info
	$(CARGO) run --release --bin ddl -- train --preset tiny --variant ddl --steps $(DEMO_STEPS) --set train.decay_steps=$(DEMO_STEPS) --out runs/demo --overwrite --sample 300

## Every test: shader portability (no GPU needed), kernels vs float64 on the Vulkan adapter, CLI,
## (when mpirun is installed) data-parallel training with 2 MPI ranks, and the Windows and macOS
## compile check.
# When mpirun is installed (scripts/setup.sh installs Open MPI on Debian/Ubuntu unless
# DDL_SETUP_MPI=0), every test is built with `ddl`'s MPI feature, so tests/mpi.rs runs in the same
# pass and the same binaries serve the reruns: built separately (`-p ddl --features mpi`) its
# bindgen build dependency changed the host crates' features and recompiled most dependencies,
# 7 min 45 s on 2 cores. (Expanded when the recipe runs, after `setup` has installed MPI.)
TEST_FEATURES = $(shell command -v mpirun >/dev/null 2>&1 && echo --features ddl/mpi)
# The browser test's site, in its own folder: built with the `web-test` profile (Cargo.toml says
# why); `make web` builds the site people get.
WEB_TEST_DIR = $(abspath $(or $(CARGO_TARGET_DIR),target))/web-test
test: setup
	@# lavapipe's window-system code complains without a runtime dir; compute does not need one.
	@mkdir -p /tmp/ddl-xdg && chmod 700 /tmp/ddl-xdg
	@# Tests get an empty cache dir: matmul autotune choices and token caches left by earlier
	@# benchmarks or training runs on this machine must not change what the tests run.
	@# The browser site first (wasm32, WebGPU): web/tests/browser.rs opens it in headless
	@# Chromium. DDL_SETUP_WASM=0 skips both (the browser test is then left out).
	@# (Each cache dir is removed when its command ends.)
	@c=$$(mktemp -d); trap 'rm -rf "$$c"' EXIT; \
	if [ "$${DDL_SETUP_WASM:-1}" = 0 ]; then \
		echo "DDL_SETUP_WASM=0: not building the browser site nor running its test"; \
		DDL_CACHE_DIR=$$c $(CARGO) test --workspace $(TEST_FEATURES) --no-fail-fast --exclude ddl-web; \
	else \
		DDL_WEB_PROFILE=web-test DDL_WEB_OUT=$(WEB_TEST_DIR) bash scripts/web.sh && \
		DDL_WEB_DIR=$(WEB_TEST_DIR) DDL_CACHE_DIR=$$c $(CARGO) test --workspace $(TEST_FEATURES) --no-fail-fast; \
	fi
	@if [ -n "$(TEST_FEATURES)" ]; then echo "(mpirun found: tests/mpi.rs ran above, 2 MPI ranks against one process)"; \
	elif [ "$${DDL_SETUP_MPI:-1}" = 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
		echo "no mpirun (DDL_SETUP_MPI=0, or not a Debian/Ubuntu machine): the MPI test did not run"; \
	else \
		echo "mpirun not found although scripts/setup.sh should have installed Open MPI: the MPI test cannot run (set DDL_SETUP_MPI=0 to opt out)"; \
		exit 1; \
	fi
	@# The model again on llvmpipe at other vector widths, i.e. other subgroup sizes: 128 bits,
	@# subgroups of 4 (an ARM64 (NEON) host's lavapipe), 1024 bits, 32 (NVIDIA's and Apple's
	@# size), 2048 bits, 64 (AMD's wave64), the kernel suite too at 64 and with workgroup memory
	@# poisoned (DDL_FORMS=wg_poison=1: no kernel may read what it has not written; docs/TESTING.md,
	@# "Other subgroup sizes" and "Workgroup memory").
	@# (--workspace: the binaries the run above built, nothing rebuilt; the CLI it built says
	@# which adapter and subgroups each rerun has.) Left out of the reruns, having run once above:
	@# the grids of more than 65,535 workgroups (how a grid spills into y does not depend on the
	@# subgroup size, and its kernels run poisoned in the smaller tests), the compilation of every
	@# shader variant (each kernel the reruns run is compiled at that width all the same): 160 s
	@# of the kernel rerun's 330.
	@bin="$${CARGO_TARGET_DIR:-target}/debug/ddl"; c=$$(mktemp -d); trap 'rm -rf "$$c"' EXIT; \
	if [ -x "$$bin" ] && ! "$$bin" info 2>/dev/null | grep -q '^adapter: *llvmpipe'; then \
		echo "the adapter is not lavapipe: no reruns at other subgroup sizes"; exit 0; \
	fi; \
	for w in 128 1024 2048; do \
		[ -x "$$bin" ] && LP_NATIVE_VECTOR_WIDTH=$$w "$$bin" info 2>/dev/null | grep -E '^(adapter|subgroups):' || true; \
		extra=""; forms="$${DDL_FORMS:-}"; \
		if [ $$w = 2048 ]; then extra="--test kernels"; forms="$${forms:+$$forms,}wg_poison=1"; fi; \
		skip="--skip more_than_65535_workgroups --skip every_shader_variant_compiles"; \
		echo "LP_NATIVE_VECTOR_WIDTH=$$w DDL_FORMS=$$forms $(CARGO) test --workspace $(TEST_FEATURES) --test golden --test decode $$extra -- $$skip"; \
		LP_NATIVE_VECTOR_WIDTH=$$w DDL_FORMS=$$forms DDL_CACHE_DIR=$$c/$$w $(CARGO) test --workspace $(TEST_FEATURES) --test golden --test decode $$extra -- $$skip || exit 1; \
	done
	@# Windows (DX12) and macOS (Metal) builds: every crate and test compiled for them, no
	@# linking, warnings as errors (scripts/platform-check.sh; Linux only, DDL_SETUP_PLATFORMS=0
	@# skips it).
	@if [ "$${DDL_SETUP_PLATFORMS:-1}" = 0 ] || [ "$$(uname -s)" != Linux ]; then \
		echo "DDL_SETUP_PLATFORMS=0 or not Linux: not compiling for Windows and macOS"; \
	else \
		bash scripts/platform-check.sh; \
	fi

fmt:
	$(CARGO) fmt --all

## The GPU check (docs/GPU.md): gpu-bundle builds gpu-bundle/ (release binaries, golden files,
## Vulkan loader packages, the PyTorch benchmark, run.sh) for a GPU machine without Rust;
## gpu-check-local builds it and runs every stage here at small sizes (CI runs it).
# The browser visualizer as a static site in target/web/ (scripts/web.sh; serve it with any static
# server). Needs the wasm32 target (make setup adds it) and installs the pinned wasm-bindgen CLI.
web:
	@bash scripts/web.sh

# Browser vs native generation speed on this machine (docs/WEB.md): builds the site, then runs
# web/benches/generate.rs (headless Chromium; ARGS="--blocks 10 --out f.jsonl" passes options).
bench-web: web
	$(CARGO) bench -p ddl-web --bench generate -- $(ARGS)

gpu-bundle: setup-bundle
	bash scripts/gpu-check.sh bundle

gpu-check-local: setup-bundle
	@mkdir -p /tmp/ddl-xdg && chmod 700 /tmp/ddl-xdg
	bash scripts/gpu-check.sh local
