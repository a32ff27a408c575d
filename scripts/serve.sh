#!/usr/bin/env bash
# Install, then run the service on its embedded defaults (SQLite + embedded Qdrant under .toolscout/),
# with the tools of real MCP servers indexed and the demo servers started.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --if-needed
. .venv/bin/activate
PORT=${TOOLSCOUT_PORT:-8765}
# The CLI reaches the service at frontend.api_url (port 8765); on another port it must be told.
API_ENV=""
[ "$PORT" = 8765 ] || API_ENV="TOOLSCOUT_FRONTEND__API_URL=http://127.0.0.1:${PORT} "
cat <<TXT

Toolscout is starting on http://127.0.0.1:${PORT} (console: http://127.0.0.1:${PORT}/console).
Once it says "Application startup complete", try in another terminal:

  curl -s http://127.0.0.1:${PORT}/search -H 'content-type: application/json' \\
       -d '{"query": "what time is it in Tokyo?", "k": 3}' | python3 -m json.tool
  ${API_ENV}.venv/bin/toolscout search "show me the last commits of the repository"

TXT
exec toolscout serve
