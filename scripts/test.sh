#!/usr/bin/env bash
# The project's test command: sets up .venv, then runs lint, type checks and the test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k cache).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh" "all"
venv="${CTX_VENV:-$root/.venv}"
cd "$root"
# The shared-cache tests start a real PostgreSQL server (ctx_retrieval/testing/postgres.py, on 127.0.0.1, stopped
# after): install Debian's package when it is missing and we may (root); otherwise those tests say why they skip.
# The evaluation report's tests render it in headless Chromium (tests/integration/test_eval_report.py): Debian's
# package, installed the same way.
missing=()
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  missing+=(chromium)
fi
if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "test: installing ${missing[*]} (apt-get) for the shared-cache and report tests" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
"$venv/bin/ruff" check ctx_retrieval llama_index_ctx langchain_ctx tests benchmarks examples
"$venv/bin/mypy"
# Two pytest-xdist workers by default (CTX_TEST_WORKERS=0 runs in one process, e.g. to debug with -s or pdb); an idle
# worker takes tests queued for the other (--dist worksteal), so the run does not end on one worker's long tail
# (287 -> 268 s idle, 2 cores). Four workers on two cores were slower (323 s): the suite is CPU-bound.
if [ "${CTX_TEST_WORKERS:-2}" = 0 ]; then
  exec "$venv/bin/python" -m pytest "$@"
fi
exec "$venv/bin/python" -m pytest -n "${CTX_TEST_WORKERS:-2}" --dist worksteal "$@"
