"""A clock for tests in which time passes only while every task of the event loop waits on it.

``SteppedClock``-style clocks add each sleep to the time, so two requests that wait one second each take two: right
for one waiter, wrong for a run with many requests in flight. ``VirtualClock`` keeps the sleepers in order of their
deadlines and, once nothing else can run, moves time to the earliest one and wakes it: concurrent waits overlap as
they would on the wall clock, and a run's throughput (answers per second of this clock) is what its concurrency and
latencies make it, exactly, on a machine of any speed.

It runs in-process fakes only: a wait on a socket or a thread is not something it can see. A run that talks to the
fake servers (``FakeAnthropicServer``, ``FakeOpenAIServer``: threads behind a socket) shares a ``SharedClock`` with
them instead: time moves when the run sleeps or a server holds an answer, never because the machine was slow.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from typing import Protocol

from ctx_retrieval.pacing import Clock

_LIVENESS_S = 120.0  # a held server thread whose time never comes still ends (a test that forgot to move it)


class ServerClock(Protocol):
    """The time a fake server reads (rate-limit buckets, outages, cache ages, batch progress) and holds on."""

    def monotonic(self) -> float: ...

    def hold(self, until: float) -> None:
        """Block the calling server thread until the clock reads ``until`` (an answer's latency)."""


class WallServerClock:
    """The machine's time: what a fake server run for a benchmark or by hand uses."""

    def monotonic(self) -> float:
        return time.monotonic()

    def hold(self, until: float) -> None:
        delay = until - time.monotonic()
        if delay > 0:
            time.sleep(delay)


class SharedClock(Clock):
    """One time for a run and the fake servers it talks to, which moves only when one of them waits.

    The run sleeps on it (``ContextGenerator(clock=...)``, ``ClaudeReranker(clock=...)``): each sleep moves time on
    by its length, at once. A server holds an answer on it (``FakeAnthropicServer(clock=...)``): time moves on to
    the hold's end unless it is there already, so answers held together overlap as they would. What a test then
    sees (a bucket's refill, a retry-after, an outage's end, a cache entry's age, a batch's progress) follows from
    what the run and the server did, not from how fast the machine did it.

    ``manual=True``: a server's hold waits instead until the test moves time on (``advance``), for a test that needs
    a request held mid-way; ``held`` says how many are. ``slept`` lists the run's sleeps."""

    def __init__(self, start: float = 1000.0, *, manual: bool = False) -> None:
        self.now = start
        self.manual = manual
        self.slept: list[float] = []
        self.held = 0
        self._moved = threading.Condition()

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        """Move time on (a test waiting, as ``time.sleep`` would on the wall clock)."""
        with self._moved:
            self.now += max(0.0, seconds)
            self._moved.notify_all()

    def hold(self, until: float) -> None:
        with self._moved:
            if not self.manual:
                self.now = max(self.now, until)
                return
            self.held += 1
            try:
                if not self._moved.wait_for(lambda: self.now >= until, timeout=_LIVENESS_S):
                    raise TimeoutError(f"the clock never reached {until}: move it with advance()")
            finally:
                self.held -= 1

    def wait_for_holds(self, count: int) -> None:
        """Block until ``count`` server threads hold on this clock (a liveness bound, not a speed bound)."""
        deadline = time.monotonic() + _LIVENESS_S
        while self.held < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.held} requests held, not {count}")
            time.sleep(0.005)

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
