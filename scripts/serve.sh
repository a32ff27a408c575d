#!/usr/bin/env bash
# Install, then run the service on its embedded defaults (SQLite + embedded Qdrant under .toolscout/),
# with the tools of real MCP servers indexed and the demo servers started.
# Options: those of `toolscout serve`, --port P and --host H (or TOOLSCOUT_PORT, TOOLSCOUT_HOST).
set -euo pipefail
cd "$(dirname "$0")/.."
# Read before the install: `scripts/serve.sh --port 8791` used to drop the option and start on 8765.
while [ $# -gt 0 ]; do
  case "$1" in
    --port) export TOOLSCOUT_PORT="${2:?--port takes a port number}"; shift 2 ;;
    --port=*) export TOOLSCOUT_PORT="${1#--port=}"; shift ;;
    --host) export TOOLSCOUT_HOST="${2:?--host takes an address}"; shift 2 ;;
    --host=*) export TOOLSCOUT_HOST="${1#--host=}"; shift ;;
    *) echo "scripts/serve.sh: no option $1 (it takes --port P and --host H, as \`toolscout serve\` does)" >&2; exit 2 ;;
  esac
done
scripts/install.sh --if-needed
. .venv/bin/activate
PORT=${TOOLSCOUT_PORT:-8765}
HOST=${TOOLSCOUT_HOST:-127.0.0.1}
case "$HOST" in 0.0.0.0|::|"[::]") HOST=127.0.0.1 ;; esac  # every address: this machine's own is one of them
case "$HOST" in *:*) [ "${HOST#[}" = "$HOST" ] && HOST="[$HOST]" ;; esac  # an IPv6 address in a URL
# The CLI reaches the service at frontend.api_url (http://127.0.0.1:8765); elsewhere it must be told.
API_ENV=""
[ "$HOST:$PORT" = 127.0.0.1:8765 ] || API_ENV="TOOLSCOUT_FRONTEND__API_URL=http://${HOST}:${PORT} "
cat <<TXT

Toolscout is starting on http://${HOST}:${PORT} (console: http://${HOST}:${PORT}/console).
Once it says "Application startup complete", try in another terminal:

  curl -s http://${HOST}:${PORT}/search -H 'content-type: application/json' \\
       -d '{"query": "what time is it in Tokyo?", "k": 3}' | python3 -m json.tool
  ${API_ENV}.venv/bin/toolscout search "show me the last commits of the repository"

TXT
exec toolscout serve
