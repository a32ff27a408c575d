#!/usr/bin/env bash
# Create .venv and install Toolscout with its pinned dependencies (CPU torch from the local wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
pip install -q --upgrade pip
# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
pip install -q torch==2.13.0
pip install -q -e ".[test]"
# Export the embedding model to ONNX once (int8, cached under the data folder): the first start skips it.
toolscout models export
