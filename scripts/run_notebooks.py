"""Re-run the cookbook notebooks in place, offline, so their committed outputs are current.

    .venv/bin/python scripts/run_notebooks.py            # both notebooks in examples/
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from ctx_retrieval.testing.notebooks import execute_notebook

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    os.environ.pop("ANTHROPIC_API_KEY", None)  # the committed outputs are the offline run's
    with tempfile.TemporaryDirectory() as work:
        for notebook in sorted((ROOT / "examples").glob("*.ipynb")):
            print(f"running {notebook.relative_to(ROOT)}", flush=True)
            execute_notebook(notebook, cwd=work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
