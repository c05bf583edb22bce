"""One progress bar for the long steps (contexts, embedding, index builds): tqdm when installed, nothing when not
asked."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger("ctx_retrieval")


class NoBar:
    """What a step updates when no bar is shown."""

    def update(self, n: int = 1) -> None: ...

    def close(self) -> None: ...


def make_bar(total: int, desc: str, *, enabled: bool = True, unit: str = "chunk") -> Any:
    """A tqdm bar over ``total`` items when ``enabled`` and tqdm is installed, else a ``NoBar``; the caller closes
    it."""
    if enabled:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            logger.info("a progress bar needs tqdm: pip install tqdm")
        else:
            return tqdm(total=total, desc=desc, unit=unit)
    return NoBar()


@contextlib.contextmanager
def progress_bar(total: int, desc: str, *, enabled: bool = True, unit: str = "chunk") -> Iterator[Any]:
    """``make_bar`` for a ``with`` block (no bar for nothing to do), closed on exit."""
    bar = make_bar(total, desc, enabled=enabled and total > 0, unit=unit)
    try:
        yield bar
    finally:
        bar.close()


def logs_above(bar: Any) -> contextlib.AbstractContextManager[Any]:
    """While a progress bar runs, log lines go above it (through ``tqdm.write``) instead of breaking it."""
    if isinstance(bar, NoBar):
        return contextlib.nullcontext()
    from tqdm.contrib.logging import logging_redirect_tqdm

    redirect: contextlib.AbstractContextManager[Any] = logging_redirect_tqdm()
    return redirect
