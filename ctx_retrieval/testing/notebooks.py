"""Execute the cookbook notebooks offline (``scripts/run_notebooks.py`` and the test that runs them in CI).

Cells tagged ``skip-execution`` (the ``%pip install`` cell) are not run; every other cell is, in a fresh kernel,
and its outputs are kept, so the committed notebooks show what a run prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctx_retrieval._optional import require

SKIP_TAG = "skip-execution"


def execute_notebook(path: str | Path, *, out: str | Path | None = None, timeout_s: int = 900,
                     cwd: str | Path | None = None, prelude: str | None = None) -> Any:
    """Run the notebook at ``path`` and write it, with outputs, to ``out`` (default: in place); returns it.

    ``prelude``: code the kernel runs before the first cell and that the written notebook does not hold (a test's
    smaller corpus, say); its execution count is the first, so the notebook's cells count from 2."""
    nbformat = require("nbformat", "notebooks")
    nbclient = require("nbclient", "notebooks")
    path = Path(path)
    notebook = nbformat.read(path, as_version=4)
    skipped = {}
    for n, cell in enumerate(notebook.cells):
        if SKIP_TAG in cell.get("metadata", {}).get("tags", []):
            skipped[n] = cell
    runnable = [c for n, c in enumerate(notebook.cells) if n not in skipped]
    notebook.cells = ([nbformat.v4.new_code_cell(prelude)] if prelude else []) + runnable
    client = nbclient.NotebookClient(notebook, timeout=timeout_s, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd or path.parent)}})
    client.execute()
    cells = iter(notebook.cells[1:] if prelude else notebook.cells)
    notebook.cells = [skipped[n] if n in skipped else next(cells) for n in range(len(runnable) + len(skipped))]
    for cell in skipped.values():
        cell["outputs"], cell["execution_count"] = [], None
    nbformat.write(notebook, Path(out) if out is not None else path)
    return notebook
