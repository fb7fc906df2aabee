# Two commands on a fresh machine: `make up` starts the stack, `make test` runs every test.
# Both install what they need first (a venv in .venv, generated protos in gen/).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install proto up test bench clean

# llama-cpp-python first: the script builds it for any x86-64 CPU and rebuilds it when its flags change.
$(VENV)/.installed: pyproject.toml scripts/install_system_deps.sh scripts/install_llama_cpp.sh scripts/install_extras.sh
	bash scripts/install_system_deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	bash scripts/install_llama_cpp.sh $(BIN)/python
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
