"""A clock for tests in which time passes only while every task of the event loop waits on it.

``SteppedClock``-style clocks add each sleep to the time, so two requests that wait one second each take two: right
for one waiter, wrong for a run with many requests in flight. ``VirtualClock`` keeps the sleepers in order of their
deadlines and, once nothing else can run, moves time to the earliest one and wakes it: concurrent waits overlap as
they would on the wall clock, and a run's throughput (answers per second of this clock) is what its concurrency and
latencies make it, exactly, on a machine of any speed.

It runs in-process fakes only: a wait on a socket or a thread is not something it can see.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

from ctx_retrieval.pacing import Clock

__all__ = ["VirtualClock"]

_SETTLE = 3  # loop turns with nothing ready before time moves (a task woken may wake others in turn)


class VirtualClock(Clock):
    """Time that jumps to the next sleeper's deadline when the loop has nothing else to run."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._driver: asyncio.Task[None] | None = None

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._order), future))
        if self._driver is None or self._driver.done():
            self._driver = loop.create_task(self._drive())
        await future

    async def _drive(self) -> None:
        loop = asyncio.get_running_loop()
        while self._sleepers:
            quiet = 0
            while quiet < _SETTLE:  # let every task that can run, run, before time moves
                await asyncio.sleep(0)
                quiet = quiet + 1 if not loop._ready else 0  # type: ignore[attr-defined]  # nothing else is ready
            deadline, _, future = heapq.heappop(self._sleepers)
            self.now = max(self.now, deadline)
            if not future.done():
                future.set_result(None)
