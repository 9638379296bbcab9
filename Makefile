# The two commands of the README: `make demo` and `make test`. Both install what they need first.
CARGO ?= cargo
export XDG_RUNTIME_DIR ?= /tmp/ddl-xdg

.PHONY: setup demo test bench fmt

setup:
	@bash scripts/setup.sh

## Main job: show the adapter, then measure the matmul kernels on it.
demo: setup
	$(CARGO) run --release --bin ddl -- info
	$(CARGO) run --release --bin ddl -- bench matmul --sizes 256,512,1024

## Every test: shader portability (no GPU needed), kernels vs float64 on the Vulkan adapter, CLI.
test: setup
	@# lavapipe's window-system code complains without a runtime dir; compute does not need one.
	@mkdir -p /tmp/ddl-xdg && chmod 700 /tmp/ddl-xdg
	$(CARGO) test --workspace --no-fail-fast

fmt:
	$(CARGO) fmt --all
