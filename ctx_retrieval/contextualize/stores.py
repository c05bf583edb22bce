"""Which context cache a setting names, and what every cache offers a run (``ContextStore``): the SQLite
``ContextCache`` on one machine, ``PostgresContextCache`` shared by machines, or a store of yours."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from ctx_retrieval.contextualize.cache import CachedContext, ContextCache, default_cache_path
from ctx_retrieval.contextualize.cache_postgres import CACHE_URL_ENV, PostgresContextCache, is_postgres_url
from ctx_retrieval.errors import CacheError

OUTPUT_HISTORY = 500  # the most recent contexts an estimate reads their output lengths from


@runtime_checkable
class OutputHistory(Protocol):
    """A cache that says how long the contexts a model and prompt wrote were (both caches here): estimates price
    the output from them instead of a guess."""

    def output_tokens(self, provider: str, model: str, prompt_version: str) -> tuple[float, int] | None:
        """The mean output tokens of the most recent ``OUTPUT_HISTORY`` contexts written with these settings, and
        how many those were; None when there are none."""
        ...


@runtime_checkable
class ContextStore(Protocol):
    """What a run needs of a context cache: ``ContextCache`` (SQLite, one machine) and ``PostgresContextCache``
    (shared by machines) both are one; so is a store of yours with these methods."""

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedContext]: ...

    def put(self, key: str, entry: CachedContext) -> None: ...

    def get_token_counts(self, model: str, digests: Iterable[str]) -> dict[str, int]: ...

    def put_token_count(self, model: str, digest: str, tokens: int) -> None: ...

    def record_batch(self, batch_id: str, keys: Sequence[str]) -> None: ...

    def batches_in_flight(self) -> dict[str, list[str]]: ...

    def forget_batch(self, batch_id: str) -> None: ...

    def close(self) -> None: ...


def open_context_cache(setting: object) -> ContextStore:
    """The cache a setting names: a store as given; a ``postgresql://`` URL; a path (SQLite); ``True``: the URL in
    ``$CTX_RETRIEVAL_CACHE_URL`` when set, else the default SQLite file (``default_cache_path``)."""
    if isinstance(setting, ContextStore):
        return setting
    if setting is True:
        setting = os.environ.get(CACHE_URL_ENV) or default_cache_path()
    if is_postgres_url(setting):
        return PostgresContextCache(str(setting))
    if isinstance(setting, (str, os.PathLike)):
        return ContextCache(setting)
    raise CacheError(f"cache= takes True, False, a path, a postgresql:// URL or a ContextCache, not "
                     f"{type(setting).__name__}", path=str(setting))
