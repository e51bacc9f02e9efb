# Railflow: the two commands are `make run` and `make test`. See README.md.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test test-unit cluster-up cluster-down cluster-status bench lint venv clean console browser

# The metrics engine's native core (Rust, PyO3 + maturin); cargo fetches crates from crates.io.
NATIVE := metrics_engine/native
NATIVE_SRC := $(NATIVE)/Cargo.toml $(NATIVE)/Cargo.lock $(NATIVE)/pyproject.toml $(wildcard $(NATIVE)/src/*.rs)
# The native HTTP front end (runner/api/native.py), the same way.
HTTP_NATIVE := runner/native
HTTP_NATIVE_SRC := $(HTTP_NATIVE)/Cargo.toml $(HTTP_NATIVE)/Cargo.lock $(HTTP_NATIVE)/pyproject.toml \
  $(wildcard $(HTTP_NATIVE)/src/*.rs)

# The venv is (re)built only when pyproject.toml or the native crate changed since the last
# install. The crate builds in its own target/ so a rebuild is incremental.
$(STAMP): pyproject.toml $(NATIVE_SRC) $(HTTP_NATIVE_SRC)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]'
	CARGO_TARGET_DIR=$(abspath $(NATIVE)/target) $(PY) -m pip install -q ./$(NATIVE)
	CARGO_TARGET_DIR=$(abspath $(HTTP_NATIVE)/target) $(PY) -m pip install -q ./$(HTTP_NATIVE)
	@touch $(STAMP)

venv: $(STAMP)

run: $(STAMP) console
	$(VENV)/bin/railflow serve

# The web console (console/), rebuilt only when its sources changed. Without npm the API
# still serves and /console says how to build it.
CONSOLE_STAMP := console/dist/.built
CONSOLE_SRC := $(shell find console/src console/index.html console/package.json \
  console/package-lock.json console/vite.config.ts console/tsconfig.json console/openapi.json \
  -type f ! -name schema.d.ts 2>/dev/null)
console: $(CONSOLE_STAMP)
$(CONSOLE_STAMP): $(CONSOLE_SRC)
	@if command -v npm >/dev/null 2>&1; then \
	  cd console && npm ci --no-audit --no-fund && npm run build && touch dist/.built; \
	else echo "npm not found: the console is not built (needs Node 20); the API still serves"; fi

# Debian's Chromium for the browser tests (never a browser download of Playwright's own).
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium; }

# Runs every test against the real cluster. The pytest session uses the cluster if it already
# runs, else starts it (infra/, tests/conftest.py) and stops only what it started, so a shared
# cluster is never taken down under someone else. A skipped cluster test, or no test at all
# (pytest exit code 5), fails the run.
test: $(STAMP) console browser
	@set +e; RAILFLOW_REQUIRE_CLUSTER=1 $(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; \
	  exit $$rc

# Tests that need no cluster (fast feedback while editing).
test-unit: $(STAMP)
	$(PY) -m pytest -m "not cluster" $(PYTEST_ARGS)

cluster-up: $(STAMP)
	$(PY) -m infra up

cluster-down: $(STAMP)
	$(PY) -m infra down

cluster-status: $(STAMP)
	$(PY) -m infra status

bench: $(STAMP)
	@set -e; for b in bench/[a-z]*.py; do \
	  [ "$$b" = bench/harness.py ] && continue; echo "== $$b"; $(PY) $$b --quick; done

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy workflows replog checkpoints metrics_engine

clean:
	rm -rf $(VENV) .railflow bench/results

# Three runner nodes (ports 8001-8003) on the infra/ cluster: Kafka log, ZooKeeper election,
# HBase run store, S3 checkpoints. Ctrl-C stops the nodes (not the cluster).
.PHONY: cluster-nodes
cluster-nodes: $(STAMP)
	$(PY) -m infra up
	$(PY) -m runner.nodes up --nodes 3

# The open-loop load generator of bench/api_w3.py (Rust, pinned by its Cargo.lock).
LOADGEN := bench/loadgen/target/release/railflow-loadgen
.PHONY: loadgen
loadgen: $(LOADGEN)
$(LOADGEN): bench/loadgen/Cargo.toml bench/loadgen/Cargo.lock bench/loadgen/src/main.rs
	CARGO_TARGET_DIR=bench/loadgen/target cargo build -q --release --locked \
	  --manifest-path bench/loadgen/Cargo.toml

# The nemesis soak against the real cluster (bench/soak.py): three nodes, 10 minutes at 300
# orders/s under kill -9, SIGSTOP past the session timeout and Kafka/ZooKeeper restarts; a
# checker decides from the history. Not part of `make test`: it restarts the shared servers.
.PHONY: soak
soak: $(STAMP)
	$(PY) bench/soak.py --duration 600 --rate 300
