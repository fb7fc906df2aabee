# Two commands on a fresh machine: `make up` starts the stack, `make test` runs every test.
# Both install what they need first (a venv in .venv, generated protos in gen/).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# llama-cpp-python compiles from source: build for any x86-64, not just this CPU.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF

.PHONY: install proto up test bench clean

$(VENV)/.installed: pyproject.toml scripts/install_system_deps.sh scripts/install_extras.sh
	bash scripts/install_system_deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	bash scripts/install_extras.sh $(BIN)/python
	touch $@

proto: $(VENV)/.installed
	$(BIN)/python scripts/gen_protos.py

install: proto

up: install
	$(BIN)/trellis up

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python scripts/run_benchmarks.py

clean:
	rm -rf gen $(VENV) .pytest_cache
