"""Several workers on one context cache, each chunk paid once: a worker claims a document before writing its
contexts; the others wait for them to appear in the cache instead of paying again.

The claim is per document, not per chunk: a document's chunks all read one prompt-cache entry, which the first
request writes; split among workers, each would write it again. The lease key covers exactly the document's
chunk keys (provider, model, prompt, window, document text, chunks), so the same document under other settings is
other work. A lease lasts ``ttl_s`` and its holder renews it every third of that while it runs: a worker that
dies stops renewing and its documents are taken over once the lease expires, or at once when the holder was a
process on this machine that no longer exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from ctx_retrieval.contextualize.cache import text_digest
from ctx_retrieval.contextualize.planning import Plan

__all__ = ["DEFAULT_LEASE_TTL_S", "DocumentLeases", "LeaseStore", "leases_for"]

logger = logging.getLogger(__name__)

DEFAULT_LEASE_TTL_S = 60.0


@runtime_checkable
class LeaseStore(Protocol):
    """The lease half of a context cache (``ContextCache``, ``PostgresContextCache``)."""

    def claim(self, key: str, owner: str, ttl_s: float) -> str | None: ...

    def take_over(self, key: str, owner: str, holder: str, ttl_s: float) -> bool: ...

    def renew(self, owner: str, ttl_s: float) -> int: ...

    def release(self, key: str, owner: str) -> None: ...


def worker_id() -> str:
    """``host:pid:nonce``: unique per run, and enough to tell whether a holder on this machine still lives."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _dead_here(holder: str) -> bool:
    """True when ``holder`` ran on this machine and its process is gone (killed): no need to wait out its lease."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


def leases_for(cache: object, ttl_s: float | None) -> DocumentLeases | None:
    """Leases on ``cache`` when it keeps them and they are on (``ttl_s``); None otherwise."""
    if cache is None or ttl_s is None or not isinstance(cache, LeaseStore):
        return None
    return DocumentLeases(cache, ttl_s=ttl_s)


class DocumentLeases:
    """This run's claims on documents in a shared cache."""

    def __init__(self, store: LeaseStore, *, ttl_s: float = DEFAULT_LEASE_TTL_S, poll_s: float | None = None) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.poll_s = poll_s if poll_s is not None else min(1.0, ttl_s / 20)
        self.owner = worker_id()
        self.waited = 0  # documents another worker was writing when this run reached them

    @staticmethod
    def key(plan: Plan) -> str:
        return "doc:" + text_digest("\x00".join(k for k in plan.keys if k is not None))

    def claim(self, plan: Plan) -> bool:
        """True when this run may write ``plan`` now (claimed, or taken over from a dead worker)."""
        key = self.key(plan)
        holder = self.store.claim(key, self.owner, self.ttl_s)
        if holder is None:
            return True
        return _dead_here(holder) and self.store.take_over(key, self.owner, holder, self.ttl_s)

    def release(self, plan: Plan) -> None:
        self.store.release(self.key(plan), self.owner)

    @contextlib.asynccontextmanager
    async def kept_alive(self) -> AsyncIterator[DocumentLeases]:
        """Renew this run's claims in the background while the block runs."""
        renewer = asyncio.ensure_future(self.renew_forever())
        try:
            yield self
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def renew_forever(self) -> None:
        """Keep this run's claims alive while it runs (cancelled at its end)."""
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            try:
                self.store.renew(self.owner, self.ttl_s)
            except Exception as exc:  # the cache is unreachable for a moment: the next renewal may succeed
                logger.warning("could not renew this run's document leases (%s): if they expire, another worker "
                               "may write the same documents", exc)
