"""Running the async engine from synchronous code, including inside an already running event loop."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion: on a fresh loop, or on a helper thread when a loop is already running
    (Jupyter, async web handlers), so sync callers never see "event loop is already running"."""
    try:
        asyncio.get_running_loop()
        running = True
    except RuntimeError:
        running = False
    if not running:  # outside the except: an error of the run is not chained to "no running event loop"
        return asyncio.run(coro)
    box: dict[str, Any] = {}
    context = contextvars.copy_context()  # the caller's context variables (tracing, OpenTelemetry) go along

    def target() -> None:
        try:
            box["value"] = context.run(asyncio.run, coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="ctx-retrieval-sync", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
