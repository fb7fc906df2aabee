#!/usr/bin/env bash
# Builds llama-cpp-python (the local chat model's runtime) from source so that it runs on any x86-64 CPU.
# Usage: scripts/install_llama_cpp.sh PYTHON      (run by `make` and the Dockerfile, after the venv is synced
#        to its lock: a sync removes what the lock does not list, this package included)
#
# GGML_NATIVE=OFF alone still compiles AVX, AVX2, FMA and F16C into llama.cpp: on a CPU without them the
# first token dies with SIGILL. So every x86 extension is switched off by name: one CPU backend of the
# x86-64 baseline, linked into libggml (GGML_BACKEND_DL=OFF), that any x86-64 CPU runs. The bundled model
# is a 135M toy that shows the pipeline working, so the baseline's speed is enough; building one backend
# per x86-64 level (GGML_CPU_ALL_VARIANTS, 14 of them) took about ten of a first install's minutes on two
# cores. services/llm_gateway/providers/llama_cpu.py still checks whatever build is installed against this
# CPU. LLAVA_BUILD=OFF: no vision model, so no libmtmd.
# CMAKE_ARGS in the environment overrides all of this, e.g. CMAKE_ARGS=-DGGML_NATIVE=ON for this CPU's
# fastest build, or CMAKE_ARGS=-DGGML_CUDA=on.
#
# The release is requirements/llama-cpp-python.lock's (pyproject.toml pins it; `make lock` records its
# sdist's hash, checked here). pip keeps an installed llama-cpp-python (and reuses a cached wheel) whatever
# flags built it, so the release and flags of the installed build are recorded in the venv; when they differ
# it is installed again, never from pip's cache. The wheel a build makes is kept in a cache of our own, keyed
# by the release and the flags (TRELLIS_WHEEL_CACHE, default ~/.cache/trellis/wheels): a second venv on the
# same machine (a fresh clone, `make clean`) installs it in seconds instead of compiling; a machine without
# it builds.
# --no-deps: its few requirements (numpy, jinja2, diskcache) are in the project's locks.
set -euo pipefail
py="${1:-python}"
baseline="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=OFF"
for feature in SSE42 AVX AVX2 AVX_VNNI BMI2 FMA F16C AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8 AMX_BF16; do
  baseline+=" -DGGML_$feature=OFF"
done
export CMAKE_ARGS="${CMAKE_ARGS:-$baseline -DLLAVA_BUILD=OFF}"
lock="$(dirname "$0")/../requirements/llama-cpp-python.lock"
stamp="$("$py" -c 'import sys; print(sys.prefix)')/.llama-cpp-cmake-args"
spec="$(grep -o '^llama-cpp-python==[^ ]*' "$lock")"
key="$(printf '%s\n%s' "$spec" "$CMAKE_ARGS" | sha256sum | cut -c1-16)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$key" ]] \
   && "$py" -c 'import importlib.metadata as m; m.version("llama-cpp-python")' 2>/dev/null; then
  exit 0
fi
cache="${TRELLIS_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trellis/wheels}/llama-cpp-python-$key"
if ! compgen -G "$cache/llama_cpp_python-*.whl" >/dev/null; then
  echo "building $spec with CMAKE_ARGS=$CMAKE_ARGS (a few minutes; once per machine)"
  built="$(mktemp -d)"
  "$py" -m pip wheel --quiet --no-deps --no-cache-dir --no-binary llama-cpp-python --require-hashes -w "$built" -r "$lock"
  mkdir -p "$cache"
  mv "$built"/llama_cpp_python-*.whl "$cache"/
  rm -rf "$built"
fi
"$py" -m pip install --quiet --force-reinstall --no-deps "$cache"/llama_cpp_python-*.whl
lib="$("$py" -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("llama_cpp").origin).parent / "lib")')"
if [[ "$CMAKE_ARGS" == *GGML_CPU_ALL_VARIANTS=ON* ]] && ! compgen -G "$lib/libggml-cpu-*.so" >/dev/null; then
  echo "install_llama_cpp.sh: the build installed no CPU backend (libggml-cpu-*.so) into $lib" >&2
  exit 1
fi
printf '%s' "$key" >"$stamp"
