"""Several workers on one context cache, each chunk paid once: a worker claims a document before writing its
contexts; the others wait for them to appear in the cache instead of paying again.

The claim is per document, not per chunk: a document's chunks all read one prompt-cache entry, which the first
request writes; split among workers, each would write it again. The lease key covers exactly the document's
chunk keys (provider, model, prompt, window, document text, chunks), so the same document under other settings is
other work. A lease lasts ``ttl_s`` and its holder renews it every third of that while it runs.

A holder checks it still holds a document before each request (``DocumentLeases.trusted``): a worker stalled past its
lease (SIGSTOP, a long GC pause, a VM migration) may have lost it to another worker, which then wrote the contexts;
on waking it learns from its clock that its hold is stale before it pays for one, re-reads the cache, and claims the
document again (or waits for the other worker). Renewals that find a key taken over end its hold at once. Only the
requests in flight when it stalled can be paid twice.

A dead holder's documents are taken over once its lease expires, or at once when the holder was a process of this
machine that no longer lives. "This machine" is the kernel's boot id and the process's PID namespace, never the host
name (a container may share the host's name while its PIDs mean nothing here); a PID whose process started at another
time was reused, and a zombie (exited, not yet reaped) is dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Protocol, runtime_checkable

from ctx_retrieval._process import dead_here, worker_id
from ctx_retrieval.contextualize._planning import Plan
from ctx_retrieval.contextualize._settings import DEFAULT_LEASE_TTL_S
from ctx_retrieval.naming import document_name
from ctx_retrieval.pacing import SYSTEM_CLOCK, Clock

logger = logging.getLogger(__name__)

# A hold is trusted without asking the store while its last confirmation is younger than this share of the TTL;
# older (the process stalled, or renewals failed), the store is asked before the next request.
TRUST_SHARE = 0.5


@runtime_checkable
class LeaseStore(Protocol):
    """The lease half of a context cache (``ContextCache``, ``PostgresContextCache``)."""

    def claim(self, key: str, owner: str, ttl_s: float) -> str | None: ...

    def take_over(self, key: str, owner: str, holder: str, ttl_s: float) -> bool: ...

    def renew(self, owner: str, ttl_s: float) -> list[str]: ...

    def release(self, key: str, owner: str) -> None: ...

    def release_owner(self, owner: str) -> None: ...


def leases_for(cache: object, ttl_s: float | None, *, clock: Clock = SYSTEM_CLOCK) -> DocumentLeases | None:
    """Leases on ``cache`` when it keeps them and they are on (``ttl_s``); None otherwise."""
    if cache is None or ttl_s is None or not isinstance(cache, LeaseStore):
        return None
    return DocumentLeases(cache, ttl_s=ttl_s, clock=clock)


class DocumentLeases:
    """This run's claims on documents in a shared cache, and when each was last confirmed (by ``clock``)."""

    def __init__(self, store: LeaseStore, *, ttl_s: float = DEFAULT_LEASE_TTL_S, poll_s: float | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.poll_s = poll_s if poll_s is not None else min(1.0, ttl_s / 20)
        self.clock = clock
        self.owner = worker_id()
        self.waited = 0  # documents another worker was writing when this run reached them
        self.rechecked = 0  # requests held back because this run's hold was no longer fresh (a stall, lost renewals)
        self._confirmed: dict[str, float] = {}  # lease key -> when this run last knew it held it

    @staticmethod
    def key(plan: Plan) -> str:
        return plan.lease_key

    def claim(self, plan: Plan) -> bool:
        """True when this run may write ``plan`` now (claimed, or taken over from a dead worker)."""
        key = self.key(plan)
        now = self.clock.monotonic()
        holder = self.store.claim(key, self.owner, self.ttl_s)
        if holder is None or (dead_here(holder) and self.store.take_over(key, self.owner, holder, self.ttl_s)):
            self._confirmed[key] = now
            return True
        return False

    def trusted(self, plan: Plan) -> bool:
        """Whether this run may send a request for ``plan`` without asking the store: its hold was confirmed (claimed
        or renewed) less than ``TRUST_SHARE`` of the TTL ago by this run's clock. False after a stall or failed
        renewals: the caller then re-reads the cache and claims again before paying (``claim``)."""
        confirmed = self._confirmed.get(self.key(plan))
        if confirmed is not None and self.clock.monotonic() - confirmed < TRUST_SHARE * self.ttl_s:
            return True
        self.rechecked += 1
        logger.info("document %s: this worker's lease was last confirmed %s ago; re-reading the shared cache and "
                    "claiming it again before the next request", document_name(plan.document),
                    "never" if confirmed is None else f"{self.clock.monotonic() - confirmed:.1f} s")
        return False

    def release(self, plan: Plan) -> None:
        key = self.key(plan)
        self._confirmed.pop(key, None)
        self.store.release(key, self.owner)

    def renewed(self, keys: Iterable[str], at: float) -> None:
        """Record a renewal made at ``at``: the keys it extended are confirmed; the others this run thought it held
        were taken over (``holds`` will say so before their next request)."""
        still = set(keys)
        for key in list(self._confirmed):
            if key in still:
                self._confirmed[key] = at
            else:
                self._confirmed.pop(key)

    @contextlib.asynccontextmanager
    async def kept_alive(self) -> AsyncIterator[DocumentLeases]:
        """Renew this run's claims in the background while the block runs; when it ends, however (finished,
        stopped, cancelled), give back every claim left, so no worker waits out a lease this run abandoned. The run
        itself holds a lease too (``run:<owner>``, renewed with the others) from its start: ``prune`` keeps what was
        written since the oldest live lease began, so nothing this run paid for is pruned under it, between its
        documents' leases as well."""
        try:
            self.store.claim(f"run:{self.owner}", self.owner, self.ttl_s)
        except Exception as exc:  # the cache is unreachable for a moment: the documents' own leases still guard
            logger.warning("could not record this run in the cache's leases (%s): a prune meanwhile keeps only what "
                           "its documents' leases cover", exc)
        renewer = asyncio.ensure_future(self.renew_forever())
        try:
            yield self
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            self._confirmed.clear()
            try:
                self.store.release_owner(self.owner)
            except Exception as exc:  # the cache is unreachable: the claims expire in ttl_s
                logger.warning("could not give back this run's document leases (%s): they expire in %.0f s",
                               exc, self.ttl_s)

    async def renew_forever(self) -> None:
        """Keep this run's claims alive while it runs (cancelled at its end)."""
        while True:
            # The wall clock's, not the run's: the shared cache expires a lease by its own (wall) time
            await asyncio.sleep(self.ttl_s / 3)
            at = self.clock.monotonic()
            try:
                self.renewed(self.store.renew(self.owner, self.ttl_s), at)
            except Exception as exc:  # the cache is unreachable for a moment: the next renewal may succeed
                logger.warning("could not renew this run's document leases (%s): if they expire, another worker "
                               "may write the same documents; each is checked before its next request", exc)
