# The two commands a user needs: `make demo` and `make test`.
# Both install what they need (Python venv, toolchain) and are idempotent.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN_DIR := $(shell bash tools/build.sh --bin-dir)
DEMO_STATE := .state/demo
DEMO_HA_STATE := .state/demo-ha
export PATH := $(BIN_DIR):$(PATH)

.PHONY: demo demo-ha demo-down test lint typecheck unit integration tools venv clean

demo: venv tools
	@bash scripts/demo.sh $(DEMO_STATE)

# The HA layout (deploy/ha: two operator pods, PostgreSQL on this machine, Redis).
demo-ha: venv tools
	@bash scripts/demo.sh $(DEMO_HA_STATE) ha

# Stops both demos (whichever ran): the host processes they started, then the cluster.
demo-down: venv
	@for state in $(DEMO_STATE) $(DEMO_HA_STATE); do \
		[ -d $$state ] || continue; \
		for pid in origin postgres; do \
			if [ -f $$state/$$pid.pid ]; then kill $$(cat $$state/$$pid.pid) 2>/dev/null || true; rm -f $$state/$$pid.pid; fi; \
		done; \
		$(PY) -m egress_proxies.cli dev-cluster down --state-dir $$state; \
	done

# Three workers, each with its own dev cluster and a balanced share of its modules,
# the rest shared (harness/workers.py; docs/development.md).
PYTEST_WORKERS ?= 3

test: venv tools lint typecheck
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q tests/kube/test_kube_addressing.py tests/house/test_env_access.py

typecheck: venv
	$(VENV)/bin/mypy

unit: venv
	$(PY) -m pytest -m unit

tools:
	@bash tools/build.sh
	@bash tools/images.sh

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt clients/python/pyproject.toml
	@echo "[venv] installing Python dependencies into $(VENV) (first run takes a minute)"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -c constraints.txt -e '.[dev]'
	$(VENV)/bin/pip install --quiet -c constraints.txt -e 'clients/python[scrapy]'
	@touch $@

clean:
	rm -rf $(VENV) .state .mypy_cache .ruff_cache .pytest_cache
