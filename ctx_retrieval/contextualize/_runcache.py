"""The cache side of a run: reading what is stored, storing each answer, and the shared-cache leases, so that a
cache outage is survived like a provider outage and a paid answer is never thrown away.

- Storing an answer never ends a run. If the cache cannot take it (a full disk, a database server restarting), the
  answer is still this run's result, kept in memory, stored as soon as the cache takes writes again, and counted
  in ``RunReport.unstored`` if it never does (said once, as a warning).
- A read or a lease call that fails because the cache is unreachable for a moment (``CacheError.transient``: a
  PostgreSQL restart) pauses the document that needed it, holding no slot, and is tried again with backoff for up
  to ``RetryPolicy.max_outage_s``; the pause and the recovery are logged. Past that, or on an error retrying cannot
  fix, the run stops with the ``CacheError``, its report and every result so far (``error.run``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from ctx_retrieval.contextualize.cache import CachedContext, ContextCache
from ctx_retrieval.errors import CacheError
from ctx_retrieval.naming import document_name
from ctx_retrieval.types import TokenUsage

if TYPE_CHECKING:
    from ctx_retrieval.contextualize._planning import Plan, Planner
    from ctx_retrieval.contextualize._settings import RunSettings
    from ctx_retrieval.contextualize.leases import DocumentLeases
    from ctx_retrieval.pacing import Clock, Pacer
    from ctx_retrieval.types import ProviderResponse, ResultStatus
    from ctx_retrieval.usage import RunReport


logger = logging.getLogger(__name__)

T = TypeVar("T")


class RunHost(Protocol):
    """What the cache side reads of the run it serves (``_run.Run``)."""

    settings: RunSettings
    planner: Planner
    report: RunReport
    pacer: Pacer
    clock: Clock
    stop: bool

    def set(self, plan: Plan, i: int, context: str | None, status: ResultStatus, usage: TokenUsage) -> None: ...


class RunCache:
    """One run's dealings with its context cache (``Run.cache``)."""

    def __init__(self, run: RunHost) -> None:
        # The run owns this object: a strong reference back would make a cycle that keeps each finished run (its
        # plans and results) alive until the garbage collector's next pass (+9 MB over 10,000 chunks).
        self.run = cast(RunHost, weakref.proxy(run))
        self.unstored: dict[str, CachedContext] = {}  # answers paid for that the cache has not taken yet
        self._warned_store = False
        self._store_failures = 0
        self._store_retry_at = -math.inf  # after a failed store, later ones wait (in memory) until then
        self._flushing = asyncio.Lock()
        self._outage_since: float | None = None
        self._threads = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="ctx-cache")
        self._local = isinstance(run.settings.cache, ContextCache)

    # -- storing ---------------------------------------------------------------------------------------

    async def store(self, key: str, response: ProviderResponse, plan: Plan | None, i: int = 0) -> None:
        """Commit an answer to the context cache at once (a killed run never pays for it again); when the cache
        cannot take it, keep it for later. Never raises: the answer is the run's result either way. ``plan`` and
        ``i``: the chunk it answers (None: a chunk of an earlier run's batch that this run does not hold)."""
        s = self.run.settings
        if s.cache is None:
            return
        if plan is None:
            entry = CachedContext(response.text, s.traits.name, s.traits.model, s.prompt.version, response.usage)
        else:
            entry = CachedContext(response.text, s.traits.name, s.traits.model, plan.prompt.version,
                                  response.usage, plan.document.id, plan.chunk_keys[i], plan.digest, plan.settings_key)
        self.unstored[key] = entry
        await self.flush()

    async def flush(self, *, force: bool = False) -> None:
        """Store the answers the cache did not take yet, oldest first, off the event loop (a slow or unreachable
        database never stalls the requests in flight); after a failure, wait with backoff before trying again."""
        cache = self.run.settings.cache
        clock = self.run.clock
        if cache is None or not self.unstored or (not force and clock.monotonic() < self._store_retry_at):
            return
        async with self._flushing:
            if not force and clock.monotonic() < self._store_retry_at:
                return  # another store failed while this one waited for the lock
            for key in list(self.unstored):
                entry = self.unstored.get(key)
                if entry is None:
                    continue
                try:
                    await self.in_thread(functools.partial(cache.put, key, entry))
                except CacheError as exc:
                    self._store_failures += 1
                    self._store_retry_at = clock.monotonic() + self.run.settings.retry.backoff(
                        self._store_failures, self.run.pacer.rng)
                    if not self._warned_store:
                        self._warned_store = True
                        message = (f"the context cache cannot store answers ({exc}); they are kept in this run's "
                                   "results and stored when it takes writes again")
                        logger.warning("%s", message)
                        self.run.report.warnings.append(message)
                    return
                self.unstored.pop(key, None)
                self._store_failures = 0

    async def finish(self) -> None:
        """Last attempt to store what is left; the report counts what could not be."""
        await self.flush(force=True)
        self._threads.shutdown(wait=False)
        report = self.run.report
        report.unstored = len(self.unstored)
        if self.unstored:
            message = (f"{len(self.unstored)} contexts were paid for and are in this run's results, but the context "
                       "cache could not store them: a rerun would pay for them again")
            logger.warning("%s", message)
            report.warnings.append(message)

    # -- reads and leases, with outage pauses -----------------------------------------------------------

    async def in_thread(self, fn: Callable[[], T], *, if_abandoned: Callable[[T], None] | None = None) -> T:
        """``fn()`` on a worker thread, so a slow or unreachable database never stalls the event loop (the local
        SQLite file runs on the loop: no wait to hide, and no gap opened between a document's requests). The
        thread finishes its statement even if the caller is cancelled meanwhile; ``if_abandoned`` then receives
        its result there (a lease claimed for a run that is gone is released at once)."""
        if self._local:  # the SQLite file: a statement takes well under a millisecond, so it runs on the loop
            return fn()
        job = self._threads.submit(fn)
        try:
            return await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            if if_abandoned is not None:
                def undo(done: concurrent.futures.Future[T]) -> None:
                    if not done.cancelled() and done.exception() is None:
                        if_abandoned(done.result())

                job.add_done_callback(undo)
            raise

    async def call(self, what: str, fn: Callable[[], T], *,
                   if_abandoned: Callable[[T], None] | None = None) -> T:
        """``fn()`` (a cache read or lease call) off the event loop, waiting out a transient outage for up to
        ``max_outage_s``."""
        run = self.run
        retry, clock = run.settings.retry, run.clock
        failures = 0
        while True:
            try:
                result = await self.in_thread(fn, if_abandoned=if_abandoned)
            except CacheError as exc:
                if not exc.transient:
                    raise
                now = clock.monotonic()
                if self._outage_since is None:
                    self._outage_since = now
                    logger.warning("the context cache is unreachable (%s): %s waits, retrying for up to %.0f s "
                                   "(RetryPolicy.max_outage_s)", exc, what, retry.max_outage_s)
                if now - self._outage_since > retry.max_outage_s:
                    raise
                failures += 1
                await clock.sleep(retry.backoff(failures, run.pacer.rng))
                continue
            if self._outage_since is not None:
                logger.warning("the context cache answers again after %.1f s", clock.monotonic() - self._outage_since)
                self._outage_since = None
                await self.flush(force=True)
            return result

    async def still_missing(self, plan: Plan, pending: list[int]) -> list[int]:
        """``pending`` less the chunks whose contexts reached the cache since the run began (another worker
        wrote them): those are results now, never requests."""
        found = await self.call(f"document {document_name(plan.document)}", lambda: self.run.planner.lookup([plan]))
        for i in [i for i in pending if plan.keys[i] in found]:
            self.run.set(plan, i, found[str(plan.keys[i])], "cached", TokenUsage())
        return [i for i in pending if plan.keys[i] not in found]

    async def claim(self, leases: DocumentLeases, plan: Plan) -> bool:
        def abandoned(claimed: bool) -> None:
            if claimed:
                self.release(leases, plan)

        return await self.call(f"document {document_name(plan.document)}", lambda: leases.claim(plan),
                               if_abandoned=abandoned)

    def release(self, leases: DocumentLeases, plan: Plan) -> None:
        """Give the document back, at once, also when the run is being cancelled (one short statement, so it is
        not sent to a thread a cancelled task may no longer wait for); if the cache cannot be told, the lease
        simply expires (``ttl_s``)."""
        try:
            leases.release(plan)
        except CacheError as exc:
            logger.warning("could not release the lease of document %s (%s): it expires in %.0f s",
                           document_name(plan.document), exc, leases.ttl_s)

    async def wait_for_other_worker(self, leases: DocumentLeases, plan: Plan, pending: list[int], *,
                                    count: bool = True) -> list[int]:
        """Take the document's contexts from the cache as the other worker stores them; what is left when its
        lease ends (it finished, failed or died) is this run's to write, claimed."""
        run = self.run
        leases.waited += count
        while not run.stop:
            pending = await self.still_missing(plan, pending)
            if not pending:
                return []
            if await self.claim(leases, plan):
                return await self.still_missing(plan, pending)
            await asyncio.sleep(leases.poll_s)
        for i in pending:
            run.set(plan, i, None, "not_attempted", TokenUsage())
        return []
