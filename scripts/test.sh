#!/usr/bin/env bash
# Install everything the tests need, make sure PostgreSQL runs, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
. .venv/bin/activate
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
  for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
scripts/install-test-extras.sh
python -m pytest "$@"
# Second step: schemathesis fuzzing of the whole OpenAPI (zero 5xx, every answer documented).
python -m pytest -m fuzz -s tests/security/test_fuzz_openapi.py "$@"
