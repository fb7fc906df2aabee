#!/usr/bin/env bash
# Builds llama-cpp-python (the local chat model's runtime) from source so that it runs on any x86-64 CPU.
# Usage: scripts/install_llama_cpp.sh PYTHON      (run by `make` and the Dockerfile, before the other packages)
#
# GGML_NATIVE=OFF alone still compiles AVX, AVX2, FMA and F16C into llama.cpp: on a CPU without them the
# first token dies with SIGILL. GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS build one CPU backend per x86-64
# level instead (x64, sse42, sandybridge, haswell, skylakex, ... as libggml-cpu-<level>.so), and the loader
# picks the best one this CPU runs when the model loads (services/llm_gateway/providers/llama_cpu.py points
# it at llama_cpp/lib, where GGML_BACKEND_DIR installs them; typed STRING, because CMake would turn an untyped
# relative path into one inside the temporary build tree, which pip deletes). LLAVA_BUILD=OFF: no vision
# model, so no libmtmd.
# CMAKE_ARGS in the environment overrides all of this, e.g. CMAKE_ARGS=-DGGML_CUDA=on.
#
# pip keeps an installed llama-cpp-python (and reuses a cached wheel) whatever flags built it, so the flags
# of the installed build are recorded in the venv; when they differ it is installed again, never from pip's
# cache. The wheel a build makes is kept in a cache of our own, keyed by the version and the flags
# (TRELLIS_WHEEL_CACHE, default ~/.cache/trellis/wheels): a second venv on the same machine (a fresh clone,
# `make clean`) installs it in seconds instead of compiling for most of an hour; a machine without it builds.
# --no-deps: its few requirements (numpy, jinja2, diskcache) come with the project's own install.
set -euo pipefail
py="${1:-python}"
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_BACKEND_DIR:STRING=llama_cpp/lib -DLLAVA_BUILD=OFF}"
pyproject="$(dirname "$0")/../pyproject.toml"
stamp="$("$py" -c 'import sys; print(sys.prefix)')/.llama-cpp-cmake-args"
spec="$("$py" -c 'import sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
print(next(d for d in deps if d.startswith("llama-cpp-python")))' "$pyproject")"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$CMAKE_ARGS" ]] \
   && "$py" -c 'import importlib.metadata as m; m.version("llama-cpp-python")' 2>/dev/null; then
  exit 0
fi
key="$(printf '%s\n%s' "$spec" "$CMAKE_ARGS" | sha256sum | cut -c1-16)"
cache="${TRELLIS_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trellis/wheels}/llama-cpp-python-$key"
if ! compgen -G "$cache/llama_cpp_python-*.whl" >/dev/null; then
  echo "building $spec with CMAKE_ARGS=$CMAKE_ARGS (14 CPU backends: about 10 minutes on 2 idle cores, far longer on busy ones; once per machine)"
  built="$(mktemp -d)"
  "$py" -m pip wheel --quiet --no-deps --no-cache-dir --no-binary llama-cpp-python -w "$built" "$spec"
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
printf '%s' "$CMAKE_ARGS" >"$stamp"
