# xpu-diag: `make demo` and `make test` work on a fresh machine with no GPU.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# The CPU wheel first: an unpinned torch would pull gigabytes of CUDA packages.
# numpy beside it: without it torch warns on import, into our one-line errors.
TORCH  ?= torch==2.13.0

.PHONY: setup system-deps hook proto demo test test-gpu bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH) numpy
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# Debian tools the tests drive for real: network namespaces and tc, the
# headless browser for the viewer's SVG, graphviz's dot. Root only; skipped otherwise.
system-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; \
	  command -v g++ >/dev/null || missing="$$missing g++ make"; \
	  command -v ip >/dev/null || missing="$$missing iproute2"; \
	  command -v dot >/dev/null || missing="$$missing graphviz"; \
	  command -v chromium >/dev/null || missing="$$missing chromium"; \
	  command -v eu-stack >/dev/null || missing="$$missing elfutils"; \
	  command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	  command -v tmux >/dev/null || missing="$$missing tmux"; \
	  if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null) \
	      || echo "warning: could not install$$missing; the tests that need them will skip"; \
	  fi; \
	fi

hook: setup
	$(MAKE) -C kernel_hook

proto: setup
	$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=. --grpc_python_out=. --pyi_out=. protos/diag/pb/*.proto

demo: system-deps setup hook
	$(BIN)/python examples/demo.py

test: system-deps setup hook
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

bench: setup hook
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info
	$(MAKE) -C kernel_hook clean
