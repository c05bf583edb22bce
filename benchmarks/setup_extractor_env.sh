#!/usr/bin/env bash
# A separate environment for LlamaIndex's DocumentContextExtractor: llama-index-llms-anthropic 0.12.x fails
# with current anthropic releases, so it gets the last 0.x SDK here, away from the project's .venv.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-extractor"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "llama-index-core>=0.14,<0.15" "llama-index-llms-anthropic>=0.12,<0.13" "anthropic==0.125.0"
