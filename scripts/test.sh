#!/usr/bin/env bash
# Install everything the tests need, make sure PostgreSQL and Redis run, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
. .venv/bin/activate
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
  for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.2; done
fi
scripts/install-test-extras.sh
# Installed now: a test that finds Chromium, Node.js or an npm tool missing fails instead of skipping.
export TOOLSCOUT_TEST_EXTRAS=required
# pytest's status 5 is "no test selected": `scripts/test.sh -k NAME` selects its tests in one step only, and the
# other step's 5 failed the whole run after its tests passed. Only both steps selecting nothing is a failure.
first=0
python -m pytest "$@" || first=$?
[ "$first" = 0 ] || [ "$first" = 5 ] || exit "$first"
# Second step, the slow suites: schemathesis over the whole OpenAPI (zero 5xx, every answer documented), the
# console in Chromium, and several replicas on PostgreSQL and Redis.
second=0
python -m pytest -m "fuzz or browser or cluster" "$@" || second=$?
[ "$second" = 0 ] || [ "$second" = 5 ] || exit "$second"
if [ "$first" = 5 ] && [ "$second" = 5 ]; then
  echo "scripts/test.sh: no test matched the arguments: $*" >&2
  exit 5
fi
