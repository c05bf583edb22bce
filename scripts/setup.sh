#!/usr/bin/env bash
# Creates .venv (or $CTX_VENV) and installs the project with the given extras (default: all) and, unless the second
# argument is "none", the dev group (the test tools). Idempotent: installs again only when pyproject.toml changes or
# the extras asked for were never installed (the "all" install with the dev group covers every other).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
extras="${1:-all}"
group="${2:-dev}"
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
key="$(sha256sum < "$root/pyproject.toml" | cut -c1-16)"
stamp="$venv/.ctx-setup-$key-$extras-$group"
if [ ! -f "$stamp" ] && [ ! -f "$venv/.ctx-setup-$key-all-dev" ]; then
  pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
  if [ "$group" = none ]; then
    echo "setup: installing ctx-retrieval[$extras] into $venv" >&2
    (cd "$root" && "${pip[@]}" -e ".[$extras]")
  else
    echo "setup: installing ctx-retrieval[$extras] and the $group tools into $venv" >&2
    "${pip[@]}" --upgrade "pip>=25.1"  # dependency groups (--group) need pip 25.1
    (cd "$root" && "${pip[@]}" -e ".[$extras]" --group "$group")
  fi
  find "$venv" -maxdepth 1 -name '.ctx-setup-*' ! -name ".ctx-setup-$key-*" -delete  # another pyproject.toml's
  touch "$stamp"
fi
