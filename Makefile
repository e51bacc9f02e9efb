# Railflow: the two commands are `make run` and `make test`. See README.md.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test test-unit cluster-up cluster-down cluster-status bench lint venv clean

# The venv is (re)built only when pyproject.toml changed since the last install.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]'
	@touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/railflow serve

# Runs every test against the real cluster. The pytest session uses the cluster if it already
# runs, else starts it (infra/, tests/conftest.py) and stops only what it started, so a shared
# cluster is never taken down under someone else. A skipped cluster test, or no test at all
# (pytest exit code 5), fails the run.
test: $(STAMP)
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
