"""Every example runs top to bottom, offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(example: Path, tmp_path: Path) -> None:
    env = {**os.environ, "CTX_RETRIEVAL_CACHE_DIR": str(tmp_path)}
    env.pop("ANTHROPIC_API_KEY", None)
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip()


def test_there_are_examples() -> None:
    assert EXAMPLES
