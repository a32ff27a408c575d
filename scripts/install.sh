#!/usr/bin/env bash
# Create .venv and install Toolscout with its pinned dependencies (CPU torch from the local wheel).
# `--if-needed` (scripts/serve.sh) skips it all while .venv holds an install of this pyproject.toml and this script:
# reinstalling took 28 s of every start of the service.
set -euo pipefail
cd "$(dirname "$0")/.."
STAMP=.venv/.toolscout-installed
WANT=$(cat pyproject.toml scripts/install.sh | cksum)  # CRC and size: portable, and enough to see a change
if [ "${1:-}" = "--if-needed" ] && [ -x .venv/bin/toolscout ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ]; then
  echo "Toolscout is installed in .venv (pyproject.toml unchanged since; scripts/install.sh installs again)"
  exit 0
fi
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
echo "$WANT" > "$STAMP"
