"""One progress bar for the long steps (index builds, embedding): tqdm when installed, nothing when not asked."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger("ctx_retrieval")


class _NoBar:
    def update(self, n: int = 1) -> None: ...


@contextlib.contextmanager
def progress_bar(total: int, desc: str, *, enabled: bool = True, unit: str = "chunk") -> Iterator[Any]:
    """A bar over ``total`` items when ``enabled`` (and tqdm is installed), else an object whose ``update`` does
    nothing; closed on exit."""
    if not enabled or total <= 0:
        yield _NoBar()
        return
    try:
        from tqdm.auto import tqdm
    except ImportError:
        logger.info("a progress bar needs tqdm: pip install tqdm")
        yield _NoBar()
        return
    bar = tqdm(total=total, desc=desc, unit=unit)
    try:
        yield bar
    finally:
        bar.close()
