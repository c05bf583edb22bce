"""The provider interface: one context request in, one answer and its usage out.

A provider does no retrying and no scheduling (the generator owns both); it turns a ``ContextRequest`` into
an API call and classifies the exceptions its SDK raises by type, so the generator can decide what to do.

What one answer may take is bounded (``SDKProvider.bounded``): in time, ``timeout_s`` for the whole request, not
only for each read (a server dripping a byte a second reset the SDK's read timeout for ~41 s at ``timeout_s=3``);
in bytes, ``MAX_ANSWER_BYTES`` of body, counted after decompression, so an endless body or a gzip bomb is cut off,
not read into memory.

Where a provider can (``SDKProvider.in_thread``), its requests are sent and read by threads of their own with the
SDK's synchronous client, not by the event loop: the loop only paces, plans and records. On a machine whose cores
other processes keep busy, one loop thread is one runnable thread among them and gets that share of a core; the
cookbook's 32 threads got 32 shares. Beside 20 busy processes on 2 cores (``benchmarks/ingestion_throughput.py
--busy 20``) the cookbook's 32 threads took 12.7-13.3 s, ours from the loop 12.6-15.5 s, ours from threads 8.9-10.2 s
(the rate limit's bound: 6.22 s); on an idle machine threads cost ~0.1 s of 6.8 (1.09-1.11x the bound, 1.07-1.08x
from the loop). ``request_threads=0`` sends from the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable
from urllib.parse import urlsplit

from ctx_retrieval.errors import CtxRetrievalError
from ctx_retrieval.models import ModelInfo
from ctx_retrieval.types import (
    ContextRequest,
    ErrorDecision,
    ProviderResponse,
)

# A context answer is a few hundred bytes of JSON; thinking blocks and usage keep it well under this.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
# A server that ran past a deadline gets twice the time on the next request, up to this factor (a slow local
# machine): a retry sent too soon would only queue behind the abandoned answer on a one-slot server.
MAX_DEADLINE_FACTOR = 16
TWIN_SERVER = "ctx-retrieval-twin"  # the Server header of every answer of the API twin (ctx_retrieval.testing)
DEADLINE_GRACE_S = 0.5
# Threads a provider may send requests from (made as requests need them, never more than are in flight): the most
# requests a run keeps in flight when it finds its own concurrency (``contextualize._scheduling.AUTO_MAX_CONCURRENCY``).
DEFAULT_REQUEST_THREADS = 256
_POOL_LOCK = threading.Lock()  # two runs starting at once on one provider make one pool


class AnswerTooLarge(ValueError):  # noqa: N818 - a condition of an answer, classified, never raised to users
    """An answer body over ``MAX_ANSWER_BYTES`` (after decompression): a broken proxy or a hostile server."""


async def read_capped(chunks: AsyncIterator[bytes], limit: int = MAX_ANSWER_BYTES) -> bytes:
    """The body from ``chunks`` (decoded bytes), or ``AnswerTooLarge`` as soon as it passes ``limit``."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise AnswerTooLarge(f"the answer is over {limit:,} bytes: cut off")
    return bytes(body)


def read_capped_in_thread(chunks: Iterator[bytes], until: float, limit: int = MAX_ANSWER_BYTES) -> bytes:
    """``read_capped`` for a request thread: also ``TimeoutError`` once ``time.monotonic()`` passes ``until`` (the
    event loop has stopped waiting by then; a server dripping its answer would otherwise hold the thread)."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise AnswerTooLarge(f"the answer is over {limit:,} bytes: cut off")
        if time.monotonic() > until:
            raise TimeoutError("the answer was still arriving at the request's deadline")
    return bytes(body)


def parse_json_answer(body: bytes) -> Any:
    """A JSON answer body, or ``MalformedAnswer`` (retried, then the chunk fails) when it is not JSON."""
    from ctx_retrieval.providers.generic import MalformedAnswer

    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedAnswer(f"an answer that is not JSON ({type(exc).__name__})") from exc


def endpoint_identity(url: str) -> str:
    """An endpoint URL as it goes into a context-cache key: scheme, host, port and path; any credentials or
    query string in the URL are left out (a key must never reach the cache)."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.hostname:
        return url.strip()
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return f"{parts.scheme}://{host}{parts.path.rstrip('/')}"


@runtime_checkable
class Provider(Protocol):
    """What the generator needs from an LLM provider."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def model_info(self) -> ModelInfo | None:
        """Limits and prices, or None when unknown (costs are then reported as unknown)."""
        ...

    @property
    def cache_namespace(self) -> str:
        """Provider identity for the context-cache key (name, and endpoint when not the default)."""
        ...

    @property
    def supports_prompt_caching(self) -> bool: ...

    @property
    def cache_ttl(self) -> str: ...

    def check_ready(self) -> None:
        """Raise a typed error (missing or malformed key, ...) before any work starts."""
        ...

    async def agenerate(self, request: ContextRequest) -> ProviderResponse: ...

    def classify_error(self, exc: BaseException) -> ErrorDecision | None:
        """The decision for ``exc``, or None if it is not a provider error (it then propagates)."""
        ...

    def run_error(self, decision: ErrorDecision, exc: BaseException) -> CtxRetrievalError:
        """The typed error that stops the run for a ``fail_run`` decision."""
        ...

    async def aclose(self) -> None:
        """Release clients opened for the current event loop."""
        ...


class ProviderBase:
    """What every provider here shares: model identity and limits, and pickling without credentials or
    clients (the attributes named in ``_unpicklable`` are dropped; keys are re-read from the environment)."""

    _model: str
    _model_info: ModelInfo | None
    _unpicklable: tuple[str, ...] = ()

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state.update(dict.fromkeys(self._unpicklable))
        return state

    @property
    def model(self) -> str:
        return self._model

    @property
    def model_info(self) -> ModelInfo | None:
        return self._model_info

    @property
    def cache_ttl(self) -> str:
        return "5m"

    @property
    def supports_prompt_caching(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None


ClientT = TypeVar("ClientT")


class SDKProvider(ProviderBase, Generic[ClientT]):
    """What the SDK-backed providers (Anthropic, OpenAI-compatible) share: the key, read from the environment when
    not given and never pickled; one async client per event loop (a client belongs to the loop it was made on,
    and each synchronous call runs its own); ``aclose``; and the generic ``ProviderRequestError`` ending
    ``run_error``. A client the user passes is used as it is and never closed here."""

    name: str
    _key_env: str = ""
    _unpicklable: tuple[str, ...] = ("_api_key", "_user_client", "_client", "_client_loop", "_retired",
                                     "_sync_client", "_pool")  # never keys, nor threads
    request_threads: int = 0

    def _init_client(self, api_key: str | None, client: ClientT | None, *, request_threads: int = 0) -> None:
        if isinstance(request_threads, bool) or not isinstance(request_threads, int) or request_threads < 0:
            from ctx_retrieval.errors import ConfigurationError

            raise ConfigurationError(f"request_threads must be a whole number >= 0 (0: send from the event loop), "
                                     f"got {request_threads!r}", setting="request_threads")
        self._api_key = api_key
        self._user_client = client
        self._client: ClientT | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._retired: list[Any] = []  # clients given up after a deadline, closed by aclose
        self.request_threads = request_threads if client is None else 0  # a client the user passes is async
        self._sync_client: Any = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def _new_sync_client(self) -> Any:  # pragma: no cover - each SDK provider that sends from threads makes its own
        raise NotImplementedError

    def _thread_client(self) -> Any:
        """The synchronous client the request threads share (thread-safe: one connection pool)."""
        client = self._sync_client
        if client is None:
            client = self._sync_client = self._new_sync_client()
        return client

    async def in_thread(self, call: Callable[[], Any]) -> Any:
        """``call()`` in one of the request threads; the loop waits without holding a core."""
        pool = self._pool
        if pool is None:
            with _POOL_LOCK:
                if self._pool is None:
                    self._pool = concurrent.futures.ThreadPoolExecutor(self.request_threads,
                                                                       thread_name_prefix=f"{self.name}-request")
                pool = self._pool
        # The caller's context goes with the call (as asyncio.to_thread does): pacing's ``departing`` reads it there.
        return await asyncio.get_running_loop().run_in_executor(pool, contextvars.copy_context().run, call)

    def _resolved_key(self) -> str | None:
        return self._api_key if self._api_key is not None else os.environ.get(self._key_env)

    def _new_client(self) -> ClientT:  # pragma: no cover - each SDK provider makes its own
        raise NotImplementedError

    def _get_client(self) -> ClientT:
        if self._user_client is not None:
            return self._user_client
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client, self._client_loop = self._new_client(), loop
        return self._client

    def _retire_client(self) -> None:
        """Stop handing out the current clients (requests still on them finish); ``aclose`` closes them."""
        if self._user_client is None:
            self._retired = [*(self._retired or []),  # None in a provider unpickled
                             *(c for c in (self._client, self._sync_client) if c is not None)]
            self._client, self._client_loop, self._sync_client = None, None, None

    async def aclose(self) -> None:
        """Close the clients; request threads still answering a request the run gave up on end with it."""
        clients = [c for c in (self._client, self._sync_client) if c is not None]
        self._client, self._client_loop, self._sync_client = None, None, None
        retired, self._retired = self._retired or [], []
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
        for old in [*retired, *clients]:
            closing = old.close()
            if asyncio.iscoroutine(closing):
                await closing

    timeout_s: float
    _deadline_factor: float = 1.0

    def deadline_s(self) -> float:
        """The most one request may take, sending to last byte: ``timeout_s``, times the factor a slow server
        earned by running past it."""
        return self.timeout_s * self._deadline_factor

    async def bounded(self, send: Callable[[float], Awaitable[tuple[bytes, Any]]]) -> tuple[bytes, Any]:
        """``send(deadline)`` (which reads the body with ``read_capped``) within the request's deadline;
        ``TimeoutError`` past it (retried). A server that ran past it gets twice the time on the next request (up
        to ``MAX_DEADLINE_FACTOR``), so a slow machine is not asked again before it can answer; a one-slot server
        keeps generating an abandoned answer (llama.cpp has no cancel for a non-streamed request), and the retry
        waits behind it."""
        deadline = self.deadline_s()
        try:
            # The SDK's own timeout (``deadline`` per read) ends a request that stops sending, closing its
            # connection; the overall one, a little later, ends one that drips past it while reading the body.
            # Cancelling a request still waiting for its headers could leave the connection to answer the next.
            return await asyncio.wait_for(send(deadline), deadline + DEADLINE_GRACE_S)
        except asyncio.TimeoutError:
            self._retire_client()  # its connections may hold a half-read answer: none of them is reused
            self._deadline_factor = min(MAX_DEADLINE_FACTOR, self._deadline_factor * 2)
            raise TimeoutError(f"no whole answer within the request's deadline ({deadline:.1f} s; the next request "
                               f"gets {self.deadline_s():.1f} s)") from None

    def _request_failed(self, decision: ErrorDecision, exc: BaseException, what: str) -> CtxRetrievalError:
        """The run's error for a fatal decision no specific error covers: the server's reason kept once."""
        from ctx_retrieval.errors import ProviderRequestError
        from ctx_retrieval.pacing import server_message
        from ctx_retrieval.providers.generic import server_error_type

        said = server_message(exc)
        return ProviderRequestError(f"{what}: {type(exc).__name__}" + (f": {said}" if said else ""),
                                    provider=self.name, status_code=decision.status_code,
                                    error_type=server_error_type(exc))
