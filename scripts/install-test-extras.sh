#!/usr/bin/env bash
# What the tests with real parts need beyond the Python package: upstream MCP servers and Node tools.
set -euo pipefail
cd "$(dirname "$0")/.."
# Redis for the cluster tests (shared rate limits, change events); scripts/test.sh starts it.
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then apt-get install -y --no-install-recommends redis-server; else sudo apt-get install -y --no-install-recommends redis-server; fi
fi
tests/mcp/install_node_tools.sh
# Upstream MCP servers (PyPI ones in their own venv, npm ones when Node is present) for the execution tests.
.venv/bin/toolscout servers install
# wrk drives `toolscout bench load` (HTTP load from a separate process).
if ! command -v wrk >/dev/null; then
  if [ "$(id -u)" = 0 ]; then apt-get install -y -q wrk >/dev/null || { apt-get update -q && apt-get install -y -q wrk; }
  else sudo apt-get install -y -q wrk; fi
fi
# The console's browser tests: Playwright for Python drives Debian's Chromium (never `playwright install`).
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update && apt-get install -y chromium
fi
.venv/bin/pip install "playwright>=1.50,<2"
