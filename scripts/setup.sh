#!/usr/bin/env bash
# Creates .venv (or $CTX_VENV) and installs the project with the given extras and the dev group.
# Idempotent: re-installs only when pyproject.toml or the extras change.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
extras="${1:-all}"
venv="${CTX_VENV:-$root/.venv}"
python="${PYTHON:-python3}"

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "ctx-retrieval needs Python >= 3.10; set PYTHON=/path/to/python3.x" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv" >&2
  "$python" -m venv "$venv"
fi
stamp="$venv/.ctx-setup-$( (cat "$root/pyproject.toml"; echo "$extras") | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing ctx-retrieval[$extras] and the dev tools into $venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "pip>=25.1"
  (cd "$root" && "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      -e ".[$extras]" --group dev)
  rm -f "$venv"/.ctx-setup-*
  touch "$stamp"
fi
