#!/usr/bin/env bash
# The project's demo: sets up .venv, then contextualizes the bundled sample document.
# Uses Claude when ANTHROPIC_API_KEY is set, the no-LLM heuristic otherwise (it says which).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh" "anthropic,progress"
venv="${CTX_VENV:-$root/.venv}"
exec "$venv/bin/ctx-retrieval" demo "$@"
