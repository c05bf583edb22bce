#!/usr/bin/env bash
# The project's test command: sets up .venv, then runs lint, type checks and the test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k cache).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh" "all"
venv="${CTX_VENV:-$root/.venv}"
cd "$root"
"$venv/bin/ruff" check ctx_retrieval llama_index_ctx langchain_ctx tests benchmarks examples
"$venv/bin/mypy"
exec "$venv/bin/python" -m pytest "$@"
