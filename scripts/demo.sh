#!/usr/bin/env bash
# The project's demo: sets up .venv, then indexes the bundled cookbook corpus into embedded Chroma + BM25 with
# and without contexts, compares the rankings and prints the retrieval ablation for the dev queries.
# Uses Claude when ANTHROPIC_API_KEY is set, the no-LLM heuristic otherwise (it says which).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh" demo none  # only what the demo uses (scripts/test.sh adds the rest)
venv="${CTX_VENV:-$root/.venv}"
for arg in "$@"; do  # the API twin is a test helper: the command line runs with it from ctx_retrieval.testing
  if [ "$arg" = "fake" ]; then exec "$venv/bin/python" -m ctx_retrieval.testing demo "$@"; fi
done
exec "$venv/bin/ctx-retrieval" demo "$@"
