"""The context cache on PostgreSQL, for workers on several machines: the same tables and semantics as the SQLite
``ContextCache`` (first answer stored wins, exact token counts, the Message Batches ledger, document leases), over
a connection pool. Select it with ``cache="postgresql://..."`` or ``$CTX_RETRIEVAL_CACHE_URL``; needs
``ctx-retrieval[postgres]`` (psycopg 3 and its pool).

Leases expire by the database server's clock (``now()``), so workers on machines whose clocks disagree still agree
on who holds a document. Every statement runs through one place (``_connection``): a connection the server dropped
(a restart, a failover) is replaced by the pool and the statement tried once more on a new one; a server that cannot
be reached within ``timeout_s`` (no pooled connection free or made in time) raises ``CacheError(transient=True)``,
which a run waits out like a provider outage (``RetryPolicy.max_outage_s``) instead of failing; every other database
error is a ``CacheError`` too, never a raw ``psycopg`` one. The URL's password never reaches a repr, a log line or a
pickle: a pickled cache carries the URL without it, and the worker that unpickles it takes the password from
``$CTX_RETRIEVAL_CACHE_URL`` (or libpq's ``$PGPASSWORD`` / ``~/.pgpass``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ctx_retrieval._optional import require
from ctx_retrieval.contextualize.cache import (
    CachedContext,
    CacheStats,
    DocumentVersion,
    by_chunk,
    prune_criteria,
)
from ctx_retrieval.errors import CacheError

CACHE_URL_ENV = "CTX_RETRIEVAL_CACHE_URL"

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS ctx_contexts (key TEXT PRIMARY KEY, raw_text TEXT NOT NULL, provider TEXT NOT NULL,
       model TEXT NOT NULL, prompt_version TEXT NOT NULL, usage TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ctx_batch_items (key TEXT PRIMARY KEY, batch_id TEXT NOT NULL,
       created_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS ctx_token_counts (model TEXT NOT NULL, digest TEXT NOT NULL, tokens INTEGER NOT NULL,
       PRIMARY KEY (model, digest))""",
    """CREATE TABLE IF NOT EXISTS ctx_leases (key TEXT PRIMARY KEY, owner TEXT NOT NULL,
       expires TIMESTAMPTZ NOT NULL)""",
    # when the holder claimed it (Unix seconds, the database's clock): prune keeps what live runs wrote since
    "ALTER TABLE ctx_leases ADD COLUMN IF NOT EXISTS started DOUBLE PRECISION NOT NULL DEFAULT 0",
    # the document a context was written for (housekeeping); rows of older caches stay NULL
    "ALTER TABLE ctx_contexts ADD COLUMN IF NOT EXISTS document_id TEXT",
    "CREATE INDEX IF NOT EXISTS ctx_contexts_document ON ctx_contexts (document_id)",
    # reuse across document versions and settings (``versions``), as in the SQLite cache
    "ALTER TABLE ctx_contexts ADD COLUMN IF NOT EXISTS chunk_key TEXT",
    "ALTER TABLE ctx_contexts ADD COLUMN IF NOT EXISTS document_digest TEXT",
    "ALTER TABLE ctx_contexts ADD COLUMN IF NOT EXISTS settings_key TEXT",
    "CREATE INDEX IF NOT EXISTS ctx_contexts_chunk ON ctx_contexts (chunk_key)",
    """CREATE TABLE IF NOT EXISTS ctx_document_versions (document_id TEXT NOT NULL, digest TEXT NOT NULL,
       chunks TEXT NOT NULL, n_chunks INTEGER NOT NULL, stale INTEGER NOT NULL, seen_at DOUBLE PRECISION NOT NULL,
       PRIMARY KEY (document_id, digest))""",
)
_COLUMNS = ("key, raw_text, provider, model, prompt_version, usage, document_id, chunk_key, document_digest, "
            "settings_key, created_at")
_IS_LATEST = "seen_at = (SELECT MAX(seen_at) FROM ctx_document_versions w WHERE w.document_id = v.document_id)"
_SCHEMA_LOCK = 0x63747872  # one advisory lock: workers creating the tables at once would race in the catalog


def is_postgres_url(value: object) -> bool:
    return isinstance(value, str) and value.startswith(("postgresql://", "postgres://"))


def redact_url(url: str) -> str:
    """``url`` without its password (for reprs, logs and pickles)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc}" if user else netloc))


class CacheURL(str):
    """A ``postgresql://`` URL held by a setting (``ContextGenerator(cache=...)``, a Ray actor's arguments): the
    full text for connecting, but its repr and its pickles carry it without the password (the receiving worker
    takes it from ``$CTX_RETRIEVAL_CACHE_URL`` or libpq's ``$PGPASSWORD`` / ``~/.pgpass``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(redact_url(str(self)))

    def __reduce__(self) -> tuple[type[CacheURL], tuple[str]]:
        return CacheURL, (redact_url(str(self)),)


def _with_password(url: str) -> str:
    """A redacted ``url`` completed from ``$CTX_RETRIEVAL_CACHE_URL`` when that names the same database."""
    env = os.environ.get(CACHE_URL_ENV)
    if env and urlsplit(url).password is None and redact_url(env) == url:
        return env
    return url


def _shut(conn: Any) -> None:
    """Shut a connection's socket from another thread (the statement waiting on it then fails at once): through a
    duplicate of its descriptor, since shutting acts on the socket, not on one descriptor."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        duplicate = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()


def _close_pool(pool: Any) -> None:
    """Close ``pool``; from another thread when called in one of the pool's own (closing joins them all)."""
    if threading.current_thread().name.startswith(f"{pool.name}-"):
        threading.Thread(target=pool.close, name="ctx-retrieval-cache-close", daemon=True).start()
    else:
        pool.close()


class PostgresContextCache:
    """The context cache in a PostgreSQL database, shared by every worker that names it."""

    read_only = False

    def __init__(self, url: str, *, min_connections: int = 1, max_connections: int = 4, timeout_s: float = 5.0):
        if not is_postgres_url(url):
            raise CacheError("a PostgreSQL cache URL starts with postgresql://", path=redact_url(str(url)))
        self._psycopg = require("psycopg", "postgres")
        pool = require("psycopg_pool", "postgres")
        self.url = redact_url(url)
        self.timeout_s = timeout_s
        self.deadline_s = max(2 * timeout_s, 1.0)  # a statement's answer, before its socket is shut (``_bounded``)
        self._pool_errors: tuple[type[BaseException], ...] = (pool.PoolTimeout, pool.TooManyRequests)
        self._pool = pool.ConnectionPool(_with_password(url), min_size=min_connections, max_size=max_connections,
                                         kwargs={"autocommit": True, "connect_timeout": max(1, round(timeout_s))},
                                         timeout=timeout_s, open=False, name="ctx-retrieval-cache")
        # A cache nobody closed closes its pool when it is collected, never through the pool's own ``__del__``: the
        # collector can run in one of the pool's threads, and that ``__del__`` would then join the thread it runs in.
        self._closer = weakref.finalize(self, _close_pool, self._pool)
        try:
            self._pool.open(wait=True, timeout=timeout_s)
            with self._connection() as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                for statement in _SCHEMA:
                    conn.execute(statement)
        except Exception as exc:
            self._closer()
            if isinstance(exc, CacheError):
                raise
            raise CacheError(f"the context cache at {self.url} cannot be used ({type(exc).__name__}: {exc}): check the "
                             "URL and that the server runs", path=self.url) from exc

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        """A pooled connection for one unit of work; its errors as ``CacheError`` (``transient`` when the server
        is unreachable or dropped the connection)."""
        psycopg = self._psycopg
        try:
            with self._pool.connection(timeout=self.timeout_s) as conn:
                yield conn
        except self._pool_errors as exc:
            raise CacheError(f"the context cache at {self.url} does not answer ({type(exc).__name__}): is the server "
                             "running? the run waits for it, then stops with this error", path=self.url,
                             transient=True) from exc
        except psycopg.OperationalError as exc:
            raise CacheError(f"the context cache at {self.url} dropped the connection ({exc}); trying again on a new "
                             "one", path=self.url, transient=True) from exc
        except psycopg.Error as exc:
            raise CacheError(f"the context cache at {self.url} refused a statement ({type(exc).__name__}: {exc})",
                             path=self.url) from exc

    def _bounded(self, conn: Any, work: Any, bounded: bool) -> Any:
        """``work(conn)``, its connection's socket shut when it has not answered within ``deadline_s`` (``bounded``):
        a frozen server (its processes stopped, its kernel still acknowledging every packet) holds a statement for
        ever, and neither the pool's timeout nor TCP's notice. Shut, it fails as an outage, which the run waits out
        for ``RetryPolicy.max_outage_s``."""
        if not bounded:
            return work(conn)
        deadline_s = self.deadline_s
        timer = threading.Timer(deadline_s, _shut, (conn,))
        timer.daemon = True
        timer.start()
        try:
            return work(conn)
        except self._psycopg.OperationalError:
            if timer.is_alive():
                raise
            raise CacheError(f"the context cache at {self.url} did not answer within {deadline_s:g} s (a server that "
                             "hangs): the run waits for it, then stops with this error", path=self.url,
                             transient=True) from TimeoutError(deadline_s)
        finally:
            timer.cancel()

    def _retried(self, work: Any, *, bounded: bool = True) -> Any:
        """``work(conn)`` on a pooled connection, within ``deadline_s`` unless not ``bounded`` (a prune may take
        long); once more on a new one when the first was dropped (a server restart leaves every pooled connection
        broken). Idempotent statements only: every one here is."""
        try:
            with self._connection() as conn:
                return self._bounded(conn, work, bounded)
        except CacheError as exc:
            if not isinstance(exc.__cause__, self._psycopg.OperationalError):
                raise  # not a dropped connection (a refused statement, no server at all): a retry would not help
        # Connections are not checked on each checkout (a round trip per statement, +0.1 ms a chunk): after a
        # dropped one, the pool drops every idle connection the server no longer answers, then the work runs again.
        self._pool.check()
        with self._connection() as conn:
            return self._bounded(conn, work, bounded)

    def __repr__(self) -> str:
        return f"PostgresContextCache(url={self.url!r})"

    def __reduce__(self) -> tuple[type[PostgresContextCache], tuple[str]]:
        return PostgresContextCache, (self.url,)  # never the password: the receiving worker supplies it

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._retried(lambda conn: conn.execute(sql, params).fetchall()))

    def _run(self, sql: str, params: Sequence[Any] = (), *, bounded: bool = True) -> int:
        return int(self._retried(lambda conn: conn.execute(sql, params).rowcount, bounded=bounded))

    # -- contexts ------------------------------------------------------------------------------------------

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedContext]:
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        rows = self._rows(f"SELECT {_COLUMNS} FROM ctx_contexts WHERE key = ANY(%s)", (wanted,))
        return dict(CachedContext.from_row(row) for row in rows)

    def get(self, key: str) -> CachedContext | None:
        return self.get_many([key]).get(key)

    def put(self, key: str, entry: CachedContext) -> None:
        self._run(f"INSERT INTO ctx_contexts ({_COLUMNS}) VALUES ({', '.join(['%s'] * 11)}) ON CONFLICT (key) DO "
                  "NOTHING", entry.values(key, time.time()))

    # -- document versions and reuse (``versions``) --------------------------------------------------------

    def previous_contexts(self, chunk_keys: Iterable[str]) -> dict[str, list[CachedContext]]:
        wanted = list(dict.fromkeys(chunk_keys))
        if not wanted:
            return {}
        return by_chunk(self._rows(f"SELECT {_COLUMNS} FROM ctx_contexts WHERE chunk_key = ANY(%s)", (wanted,)))

    def get_versions(self, versions: Iterable[tuple[str, str]]) -> dict[tuple[str, str], DocumentVersion]:
        wanted = set(versions)
        if not wanted:
            return {}
        rows = self._rows("SELECT document_id, digest, chunks, stale FROM ctx_document_versions WHERE document_id = "
                          "ANY(%s)", (list({doc for doc, _ in wanted}),))  # the primary key's first column
        found = (DocumentVersion.from_row(row) for row in rows)
        return {(v.document_id, v.digest): v for v in found if (v.document_id, v.digest) in wanted}

    def put_versions(self, versions: Sequence[DocumentVersion]) -> None:
        if not versions:
            return
        now = time.time()
        rows = [v.values(now) for v in versions]

        def put(conn: Any) -> None:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO ctx_document_versions (document_id, digest, chunks, n_chunks, stale, seen_at) VALUES "
                    "(%s, %s, %s, %s, %s, %s) ON CONFLICT (document_id, digest) DO UPDATE SET stale = excluded.stale, "
                    "seen_at = excluded.seen_at", rows)

        self._retried(put)

    def stale_documents(self) -> list[str]:
        return [str(row[0]) for row in self._rows(
            f"SELECT document_id FROM ctx_document_versions v WHERE stale > 0 AND {_IS_LATEST} ORDER BY document_id")]

    def stale_marker(self) -> str:
        written, stale = self._rows("SELECT (SELECT COUNT(*) FROM ctx_contexts), (SELECT SUM(stale) FROM "
                                    "ctx_document_versions WHERE stale > 0)")[0]
        return f"{written or 0}:{stale or 0}"

    def delete(self, keys: Sequence[str]) -> None:
        self._run("DELETE FROM ctx_contexts WHERE key = ANY(%s)", (list(keys),))

    def __len__(self) -> int:
        return int(self._rows("SELECT COUNT(*) FROM ctx_contexts")[0][0])

    # -- housekeeping ----------------------------------------------------------------------------------------

    def stats(self) -> CacheStats:
        """What the cache holds; ``bytes`` is the contexts table with its indexes and TOAST data."""
        contexts, documents, unattributed, oldest, newest, size = self._rows(
            "SELECT COUNT(*), COUNT(DISTINCT document_id), COUNT(*) FILTER (WHERE document_id IS NULL), "
            "MIN(created_at), MAX(created_at), pg_total_relation_size('ctx_contexts') FROM ctx_contexts")[0]
        by_model = dict(self._rows("SELECT model, COUNT(*) FROM ctx_contexts GROUP BY model"))
        counts = self._rows("SELECT COUNT(*) FROM ctx_token_counts")[0][0]
        batched = self._rows("SELECT COUNT(*) FROM ctx_batch_items")[0][0]
        stale, chunks = self._rows(
            f"SELECT SUM(stale), SUM(n_chunks) FROM ctx_document_versions v WHERE {_IS_LATEST}")[0]
        return CacheStats(int(contexts), int(documents), int(unattributed), {str(m): int(n) for m, n in
                          by_model.items()}, oldest, newest, int(size), int(counts), int(batched), int(stale or 0),
                          int(chunks or 0))

    def prune(self, *, keep_documents: Iterable[str] | None = None, older_than: Any = None,
              dry_run: bool = False, compact: bool = False) -> int:
        """As ``ContextCache.prune``; ``compact`` runs ``VACUUM`` on the contexts table."""
        live, cutoff = prune_criteria(keep_documents, older_than)
        params: list[Any] = [p for p in (live, cutoff) if p is not None]

        def where(date_column: str) -> str:  # contexts by created_at, versions by when a run last saw them
            parts = []
            if live is not None:
                parts.append("(document_id IS NOT NULL AND NOT document_id = ANY(%s))")
            if cutoff is not None:
                parts.append(f"{date_column} < %s")
            # nothing written since the oldest live lease began (a minute's margin for client clocks vs the database's)
            return (f"({' OR '.join(parts)}) AND {date_column} < COALESCE((SELECT MIN(started) - 60 FROM ctx_leases "
                    "WHERE expires >= now()), 1e300)")

        if dry_run:
            return int(self._rows(f"SELECT COUNT(*) FROM ctx_contexts WHERE {where('created_at')}", params)[0][0])
        deleted = self._run(f"DELETE FROM ctx_contexts WHERE {where('created_at')}", params, bounded=False)  # long
        self._run(f"DELETE FROM ctx_document_versions WHERE {where('seen_at')}", params, bounded=False)
        if compact:
            self._run("VACUUM ctx_contexts", bounded=False)
        return deleted

    def output_tokens(self, provider: str, model: str, prompt_version: str) -> tuple[float, int] | None:
        """As ``ContextCache.output_tokens``."""
        mean, n = self._rows(
            "SELECT AVG(o), COUNT(*) FROM (SELECT (usage::json->>'output_tokens')::int AS o FROM ctx_contexts "
            "WHERE provider = %s AND model = %s AND prompt_version = %s AND (usage::json->>'output_tokens')::int > 0 "
            "ORDER BY created_at DESC LIMIT 500) recent", (provider, model, prompt_version))[0]
        return (float(mean), int(n)) if n else None

    # -- exact token counts ----------------------------------------------------------------------------------

    def get_token_counts(self, model: str, digests: Iterable[str]) -> dict[str, int]:
        rows = self._rows("SELECT digest, tokens FROM ctx_token_counts WHERE model = %s AND digest = ANY(%s)",
                          (model, list(dict.fromkeys(digests))))
        return {digest: int(tokens) for digest, tokens in rows}

    def put_token_count(self, model: str, digest: str, tokens: int) -> None:
        self._run("INSERT INTO ctx_token_counts (model, digest, tokens) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                  (model, digest, tokens))

    # -- the Message Batches ledger: a collector on any machine resumes a batch instead of resubmitting -------

    def record_batch(self, batch_id: str, keys: Sequence[str]) -> None:
        def record(conn: Any) -> None:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany("INSERT INTO ctx_batch_items (key, batch_id, created_at) VALUES (%s, %s, %s) "
                                   "ON CONFLICT (key) DO UPDATE SET batch_id = excluded.batch_id, "
                                   "created_at = excluded.created_at", [(k, batch_id, time.time()) for k in keys])

        self._retried(record)

    def batches_in_flight(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for batch_id, key in self._rows("SELECT batch_id, key FROM ctx_batch_items"):
            out.setdefault(batch_id, []).append(key)
        return out

    def forget_batch(self, batch_id: str) -> None:
        self._run("DELETE FROM ctx_batch_items WHERE batch_id = %s", (batch_id,))

    # -- leases (the database's clock decides expiry) -----------------------------------------------------------

    def claim(self, key: str, owner: str, ttl_s: float) -> str | None:
        rows = self._rows(
            "INSERT INTO ctx_leases (key, owner, expires, started) VALUES (%s, %s, now() + make_interval(secs => %s), "
            "extract(epoch from now())) ON CONFLICT (key) DO UPDATE SET started = CASE WHEN ctx_leases.owner = "
            "excluded.owner THEN ctx_leases.started ELSE excluded.started END, owner = excluded.owner, "
            "expires = excluded.expires "
            "WHERE ctx_leases.expires < now() OR ctx_leases.owner = excluded.owner RETURNING owner",
            (key, owner, ttl_s))
        if rows:
            return None
        holder = self._rows("SELECT owner FROM ctx_leases WHERE key = %s", (key,))
        return str(holder[0][0]) if holder else self.claim(key, owner, ttl_s)

    def take_over(self, key: str, owner: str, holder: str, ttl_s: float) -> bool:
        return bool(self._run("UPDATE ctx_leases SET owner = %s, expires = now() + make_interval(secs => %s), "
                              "started = extract(epoch from now()) WHERE key = %s AND owner = %s",
                              (owner, ttl_s, key, holder)))

    def renew(self, owner: str, ttl_s: float) -> list[str]:
        return [str(row[0]) for row in self._rows(
            "UPDATE ctx_leases SET expires = now() + make_interval(secs => %s) WHERE owner = %s RETURNING key",
            (ttl_s, owner))]

    def release(self, key: str, owner: str) -> None:
        self._run("DELETE FROM ctx_leases WHERE key = %s AND owner = %s", (key, owner))

    def release_owner(self, owner: str) -> None:
        self._run("DELETE FROM ctx_leases WHERE owner = %s", (owner,))

    def close(self) -> None:
        self._closer()

    def __enter__(self) -> PostgresContextCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
