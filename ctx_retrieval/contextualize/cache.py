"""A persistent context cache in SQLite: a run pays for each chunk once, across restarts and processes.

Every finished context is committed on its own as soon as it arrives, so a run killed mid-way loses at most
the requests in flight. The database is in WAL mode with a busy timeout, so several processes may read and
write it at once; the first context stored for a key wins (``INSERT OR IGNORE``), so two processes racing on
the same chunk never overwrite each other. Only context text, provenance and usage are stored: never API keys.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctx_retrieval._paths import cache_dir
from ctx_retrieval._sqlite import guarded, open_cache_database, transaction
from ctx_retrieval.errors import CacheError, ConfigurationError
from ctx_retrieval.types import TokenUsage

logger = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS contexts (
    key TEXT PRIMARY KEY,
    raw_text TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    usage TEXT NOT NULL,
    created_at REAL NOT NULL,
    document_id TEXT
)
"""
# Columns added since the first release: caches made before gain them, their rows stay NULL (unattributed, and not
# candidates for reuse). ``chunk_key``: the document id and chunk text (``versions.chunk_key``), shared by every
# context of a chunk; ``document_digest`` and ``settings_key``: the document version and the settings it was written
# for (``versions``).
_ADDED_COLUMNS = {"document_id": "TEXT", "chunk_key": "TEXT", "document_digest": "TEXT", "settings_key": "TEXT"}
_INDEXES = ("CREATE INDEX IF NOT EXISTS contexts_document ON contexts (document_id)",
            "CREATE INDEX IF NOT EXISTS contexts_chunk ON contexts (chunk_key)")
# The versions of each document runs saw: its chunks' digests and token counts (JSON), how many chunks serve a stale
# context, and when a run last saw it.
_VERSION_SCHEMA = """
CREATE TABLE IF NOT EXISTS document_versions (
    document_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    chunks TEXT NOT NULL,
    n_chunks INTEGER NOT NULL,
    stale INTEGER NOT NULL,
    seen_at REAL NOT NULL,
    PRIMARY KEY (document_id, digest)
)
"""
_CONTEXT_COLUMNS = "key, raw_text, provider, model, prompt_version, usage, document_id, chunk_key, document_digest, " \
                   "settings_key, created_at"
_BATCH_SCHEMA = """
CREATE TABLE IF NOT EXISTS batch_items (
    key TEXT PRIMARY KEY,
    batch_id TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""
# Exact token counts from the provider's counting endpoint (free, but a request): kept so a rerun asks again for
# nothing. Keyed by model and text digest (the endpoint identity is in ``model`` when it is not the default).
_COUNT_SCHEMA = """
CREATE TABLE IF NOT EXISTS token_counts (
    model TEXT NOT NULL,
    digest TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    PRIMARY KEY (model, digest)
)
"""
# Leases: which worker is writing which document now (owner "host:pid:nonce", expiry in wall-clock seconds, shared
# by every process on the machine). A live lease makes other workers wait for the contexts instead of paying.
_LEASE_SCHEMA = """
CREATE TABLE IF NOT EXISTS leases (
    key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires REAL NOT NULL,
    started REAL NOT NULL DEFAULT 0
)
"""

_SQLITE_MAX_VARIABLES = 500
# Stale and all chunks of each document's latest version (the one a run saw last).
_IS_LATEST = "seen_at = (SELECT MAX(seen_at) FROM document_versions w WHERE w.document_id = v.document_id)"
_LATEST_VERSIONS = f"SELECT SUM(stale), SUM(n_chunks) FROM document_versions v WHERE {_IS_LATEST}"


@dataclass(frozen=True)
class CachedContext:
    """One stored answer: the model's raw text (cleaned again on read) and what it cost when generated."""

    raw_text: str
    provider: str
    model: str
    prompt_version: str
    usage: TokenUsage
    document_id: str | None = None  # the document it was written for (housekeeping: ``prune``)
    chunk_key: str | None = None  # the chunk it situates, whatever the version or settings (``versions.chunk_key``)
    document_digest: str | None = None  # the document version it was written from
    settings_key: str | None = None  # provider, model, prompt, window and length it was written with
    created_at: float | None = field(default=None, compare=False)  # when it was stored (set on read)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> tuple[str, CachedContext]:
        """A ``_CONTEXT_COLUMNS`` row as (key, entry)."""
        key, raw, provider, model, version, usage, document_id, chunk, digest, settings, created = row
        return key, cls(raw, provider, model, version, TokenUsage.from_dict(json.loads(usage)), document_id, chunk,
                        digest, settings, created)

    def values(self, key: str, now: float) -> tuple[Any, ...]:
        """The row to insert, in ``_CONTEXT_COLUMNS`` order."""
        return (key, self.raw_text, self.provider, self.model, self.prompt_version, json.dumps(self.usage.to_dict()),
                self.document_id, self.chunk_key, self.document_digest, self.settings_key, now)


@dataclass(frozen=True)
class DocumentVersion:
    """One version of a document as a run saw it: its text digest, each chunk's digest and token count (in
    order), and how many of its chunks serve a stale context."""

    document_id: str
    digest: str
    chunks: tuple[tuple[str, int], ...]
    stale: int = 0

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> DocumentVersion:
        """A ``document_id, digest, chunks (JSON), stale`` row, as both caches store it."""
        document_id, digest, chunks, stale = row
        return cls(document_id, digest, tuple((str(d), int(t)) for d, t in json.loads(chunks)), int(stale))

    def values(self, now: float) -> tuple[Any, ...]:
        """The row to store: ``document_id, digest, chunks, n_chunks, stale, seen_at``."""
        return (self.document_id, self.digest, json.dumps(self.chunks, separators=(",", ":")), len(self.chunks),
                self.stale, now)


def by_chunk(rows: Iterable[Sequence[Any]]) -> dict[str, list[CachedContext]]:
    """``_CONTEXT_COLUMNS`` rows grouped by their chunk key (``previous_contexts`` of both caches)."""
    out: dict[str, list[CachedContext]] = {}
    for row in rows:
        _, entry = CachedContext.from_row(row)
        out.setdefault(str(entry.chunk_key), []).append(entry)
    return out


@dataclass(frozen=True)
class CacheStats:
    """What a context cache holds: contexts (by model), the documents they were written for (``unattributed``:
    contexts stored before document ids were recorded), when the oldest and newest were written (Unix time),
    its size in bytes, exact token counts and batch requests in flight."""

    contexts: int
    documents: int
    unattributed: int
    by_model: dict[str, int]
    oldest: float | None
    newest: float | None
    bytes: int
    token_counts: int
    batch_requests_in_flight: int
    stale: int = 0  # chunks of the documents' latest versions serving a stale (reused) context
    versioned_chunks: int = 0  # chunks of the documents' latest versions

    def format(self) -> str:
        import datetime

        def day(t: float | None) -> str:
            return "-" if t is None else datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
                "%Y-%m-%d %H:%M UTC")

        models = ", ".join(f"{m} {n:,}" for m, n in sorted(self.by_model.items())) or "none"
        return (f"{self.contexts:,} contexts for {self.documents:,} documents ({self.unattributed:,} from before "
                f"document ids were recorded), {self.bytes / 2**20:,.1f} MB; written {day(self.oldest)} to "
                f"{day(self.newest)}; by model: {models}; {self.token_counts:,} exact token counts, "
                f"{self.batch_requests_in_flight:,} batch requests in flight"
                + (f"; {self.stale:,} of {self.versioned_chunks:,} chunks ({self.stale / self.versioned_chunks:.1%}) "
                   "serve a stale context (refresh them: 'ctx-retrieval contextualize --refresh-stale')"
                   if self.versioned_chunks else ""))


def prune_cutoff(older_than: float | Any | None) -> float | None:
    """A ``prune`` date as Unix time: a number as it is, a ``datetime`` (naive means UTC) or ``date``."""
    import datetime

    if older_than is None or isinstance(older_than, (int, float)):
        return None if older_than is None else float(older_than)
    if isinstance(older_than, datetime.datetime):
        moment = older_than if older_than.tzinfo else older_than.replace(tzinfo=datetime.timezone.utc)
        return moment.timestamp()
    if isinstance(older_than, datetime.date):
        return datetime.datetime(older_than.year, older_than.month, older_than.day,
                                 tzinfo=datetime.timezone.utc).timestamp()
    raise TypeError(f"older_than takes a date, a datetime or Unix seconds, not {type(older_than).__name__}")


def default_cache_path() -> Path:
    """``$CTX_RETRIEVAL_CACHE_DIR/contexts.sqlite``, else under ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    return cache_dir() / "contexts.sqlite"


def _digest(*parts: str) -> str:
    """SHA-256 of length-prefixed parts (no two part lists hash alike); the cache keys' and ``versions``' digest."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def text_digest(text: str) -> str:
    """Digest of a (possibly long) text, computed once per document and reused in each chunk's key."""
    return _digest(text)


def context_cache_key(
    *,
    provider: str,
    model: str,
    prompt_fingerprint: str,
    window: str,
    document_digest: str,
    chunk_text: str,
    extra: str = "",
) -> str:
    """The cache key: every input that changes the request (never the API key)."""
    return _digest(provider, model, prompt_fingerprint, window, document_digest, chunk_text, extra)


class ContextCache:
    """SQLite-backed store of generated contexts, safe for threads and for several processes."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn, self.read_only = open_cache_database(
            self.path, (_SCHEMA, _BATCH_SCHEMA, _COUNT_SCHEMA, _LEASE_SCHEMA, _VERSION_SCHEMA),
            {"contexts": {"key", "raw_text", "provider", "model", "prompt_version", "usage"}},
            what="context cache", timeout_s=timeout_s)
        self._warned_read_only = False
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(contexts)")}
        self._has_columns = set(_ADDED_COLUMNS) <= columns
        if not self._has_columns and not self.read_only:
            for name, kind in _ADDED_COLUMNS.items():
                if name not in columns:
                    with guarded(self.path, "context cache"), contextlib.suppress(sqlite3.OperationalError):
                        self._conn.execute(f"ALTER TABLE contexts ADD COLUMN {name} {kind}")  # or another process did
            self._has_columns = True
        if not self.read_only:
            with guarded(self.path, "context cache"):
                for statement in _INDEXES:
                    self._conn.execute(statement)
                if "started" not in {row[1] for row in self._conn.execute("PRAGMA table_info(leases)")}:
                    with contextlib.suppress(sqlite3.OperationalError):  # a lease table of an earlier release
                        self._conn.execute("ALTER TABLE leases ADD COLUMN started REAL NOT NULL DEFAULT 0")

    def _writable(self) -> bool:
        """False for a read-only cache file: it serves what it holds and says, once, that it stores nothing."""
        if self.read_only and not self._warned_read_only:
            self._warned_read_only = True
            logger.warning("the context cache %s is read-only: it serves the contexts it holds but stores no new "
                           "ones (make it writable, or pass another cache path)", self.path)
        return not self.read_only

    def __repr__(self) -> str:
        return f"ContextCache(path={str(self.path)!r})"

    def __reduce__(self) -> tuple[type[ContextCache], tuple[str]]:
        return ContextCache, (str(self.path),)  # pickles as its path; the connection reopens

    def _select_in(self, select: str, column: str, values: Iterable[str], *params: object) -> list[tuple[Any, ...]]:
        """Rows of ``select ... AND column IN (values)`` (``WHERE column IN`` when no params), in slices under
        SQLite's variable limit."""
        unique = list(dict.fromkeys(values))
        rows: list[tuple[Any, ...]] = []
        joiner = " AND " if params else " WHERE "
        with self._lock, self._errors():
            for i in range(0, len(unique), _SQLITE_MAX_VARIABLES):
                batch = unique[i : i + _SQLITE_MAX_VARIABLES]
                marks = ",".join("?" * len(batch))
                rows += self._conn.execute(f"{select}{joiner}{column} IN ({marks})", [*params, *batch]).fetchall()
        return rows

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """Any SQLite error (a full disk, a file damaged while in use) is a ``CacheError`` with the path and fix."""
        return guarded(self.path, "context cache")

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedContext]:
        """The stored entries among ``keys`` (missing keys are absent from the result)."""
        return dict(CachedContext.from_row(row) for row in self._select_in(self._select(), "key", keys))

    def _select(self) -> str:
        """The context columns (a read-only cache from before the added columns reads them as NULL)."""
        if self._has_columns:
            return f"SELECT {_CONTEXT_COLUMNS} FROM contexts"
        return ("SELECT key, raw_text, provider, model, prompt_version, usage, NULL, NULL, NULL, NULL, created_at "
                "FROM contexts")

    def get(self, key: str) -> CachedContext | None:
        return self.get_many([key]).get(key)

    def put(self, key: str, entry: CachedContext) -> None:
        """Store one entry and commit at once (a crash loses nothing already answered)."""
        if not self._writable():
            return
        with self._lock, self._errors():
            self._conn.execute(f"INSERT OR IGNORE INTO contexts ({_CONTEXT_COLUMNS}) VALUES "
                               f"({','.join('?' * 11)})", entry.values(key, time.time()))

    # -- document versions and reuse (``versions``) --------------------------------------------------------

    def previous_contexts(self, chunk_keys: Iterable[str]) -> dict[str, list[CachedContext]]:
        """Every stored context of these chunks (any document version, model or prompt): chunk key -> entries."""
        if not self._has_columns:
            return {}
        return by_chunk(self._select_in(self._select(), "chunk_key", chunk_keys))

    def get_versions(self, versions: Iterable[tuple[str, str]]) -> dict[tuple[str, str], DocumentVersion]:
        """The recorded versions among ``(document id, digest)`` pairs."""
        wanted = set(versions)
        rows = self._select_in("SELECT document_id, digest, chunks, stale FROM document_versions", "document_id",
                               (doc for doc, _ in wanted))  # the primary key's first column: an index lookup
        found = (DocumentVersion.from_row(row) for row in rows)
        return {(v.document_id, v.digest): v for v in found if (v.document_id, v.digest) in wanted}

    def put_versions(self, versions: Sequence[DocumentVersion]) -> None:
        """Record the versions a run saw (or update their stale counts), all in one transaction."""
        if not versions or not self._writable():
            return
        now = time.time()
        with self._lock, self._errors(), transaction(self._conn):
            self._conn.executemany(
                "INSERT INTO document_versions (document_id, digest, chunks, n_chunks, stale, seen_at) VALUES "
                "(?, ?, ?, ?, ?, ?) ON CONFLICT (document_id, digest) DO UPDATE SET stale = excluded.stale, "
                "seen_at = excluded.seen_at", [v.values(now) for v in versions])

    def stale_documents(self) -> list[str]:
        """Ids of the documents whose latest version (the one a run saw last) has chunks serving stale contexts."""
        with self._lock, self._errors():
            rows = self._conn.execute(f"SELECT document_id FROM document_versions v WHERE stale > 0 AND "
                                      f"{_IS_LATEST} ORDER BY document_id").fetchall()
        return [str(row[0]) for row in rows]

    def stale_marker(self) -> str:
        """Changes whenever contexts are written or stale counts change, in O(1) (frameworks' caches key on it, so a
        refreshed context is never hidden behind a cached pipeline step; it must differ after a refresh from what
        it was before the run that reused, so it counts writes, not only stale contexts)."""
        with self._lock, self._errors():
            (written,) = self._conn.execute("SELECT MAX(rowid) FROM contexts").fetchone()
            (stale,) = self._conn.execute("SELECT SUM(stale) FROM document_versions WHERE stale > 0").fetchone()
        return f"{written or 0}:{stale or 0}"

    def output_tokens(self, provider: str, model: str, prompt_version: str) -> tuple[float, int] | None:
        """The mean output tokens of the most recent contexts these settings wrote, and how many (``OutputHistory``)."""
        with self._lock, self._errors():
            mean, n = self._conn.execute(
                "SELECT AVG(o), COUNT(*) FROM (SELECT json_extract(usage, '$.output_tokens') AS o FROM contexts "
                "WHERE provider = ? AND model = ? AND prompt_version = ? AND o > 0 ORDER BY created_at DESC "
                "LIMIT 500)", (provider, model, prompt_version)).fetchone()
        return (float(mean), int(n)) if n else None

    # -- exact token counts ------------------------------------------------------------------------------

    def get_token_counts(self, model: str, digests: Iterable[str]) -> dict[str, int]:
        """Stored exact counts of texts (by digest) for ``model``."""
        rows = self._select_in("SELECT digest, tokens FROM token_counts WHERE model = ?", "digest", digests, model)
        return {digest: int(tokens) for digest, tokens in rows}

    def put_token_count(self, model: str, digest: str, tokens: int) -> None:
        if not self._writable():
            return
        with self._lock, self._errors():
            self._conn.execute("INSERT OR IGNORE INTO token_counts (model, digest, tokens) VALUES (?, ?, ?)",
                               (model, digest, tokens))

    # -- Message Batches in flight: recorded as soon as submitted, so a restart collects, never resubmits --

    def record_batch(self, batch_id: str, keys: Sequence[str]) -> None:
        with self._lock, self._errors(), transaction(self._conn):
            self._conn.executemany("INSERT OR REPLACE INTO batch_items (key, batch_id, created_at) VALUES (?, ?, ?)",
                                   [(k, batch_id, time.time()) for k in keys])

    def batches_in_flight(self) -> dict[str, list[str]]:
        """Submitted batches whose results were not collected yet: batch id -> keys."""
        with self._lock, self._errors():
            rows = self._conn.execute("SELECT batch_id, key FROM batch_items").fetchall()
        out: dict[str, list[str]] = {}
        for batch_id, key in rows:
            out.setdefault(batch_id, []).append(key)
        return out

    def forget_batch(self, batch_id: str) -> None:
        with self._lock, self._errors():
            self._conn.execute("DELETE FROM batch_items WHERE batch_id = ?", (batch_id,))

    # -- leases: one worker writes a document, the others wait for its contexts -------------------------------

    def claim(self, key: str, owner: str, ttl_s: float) -> str | None:
        """Claim ``key`` for ``owner`` for ``ttl_s`` seconds (or extend its own claim): None when ``owner`` holds it
        now, else the id of the worker whose live claim stands. An expired claim (its worker died or stalled) is
        taken over. One statement, so two workers can never both hold a key."""
        if not self._writable():
            return None  # a read-only cache coordinates nothing: every worker writes its own contexts
        now = time.time()
        with self._lock, self._errors():
            claimed = self._conn.execute(
                "INSERT INTO leases (key, owner, expires, started) VALUES (?, ?, ?, ?) ON CONFLICT (key) DO UPDATE "
                "SET started = CASE WHEN leases.owner = excluded.owner THEN leases.started ELSE excluded.started END, "
                "owner = excluded.owner, expires = excluded.expires WHERE leases.expires < ? OR leases.owner = "
                "excluded.owner", (key, owner, now + ttl_s, now, now)).rowcount
            if claimed:
                return None
            row = self._conn.execute("SELECT owner FROM leases WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else self.claim(key, owner, ttl_s)  # released meanwhile: try again

    def take_over(self, key: str, owner: str, holder: str, ttl_s: float) -> bool:
        """Take ``key`` from ``holder`` (known to be dead) whatever its expiry; False if it changed hands first."""
        with self._lock, self._errors():
            now = time.time()
            return bool(self._conn.execute("UPDATE leases SET owner = ?, expires = ?, started = ? WHERE key = ? AND "
                                           "owner = ?", (owner, now + ttl_s, now, key, holder)).rowcount)

    def renew(self, owner: str, ttl_s: float) -> list[str]:
        """Extend every claim ``owner`` holds by ``ttl_s`` from now; the keys it still holds (a key taken over by
        another worker is not among them)."""
        if not self._writable():
            return []
        with self._lock, self._errors():
            rows = self._conn.execute("UPDATE leases SET expires = ? WHERE owner = ? RETURNING key",
                                      (time.time() + ttl_s, owner)).fetchall()
        return [str(row[0]) for row in rows]

    def release(self, key: str, owner: str) -> None:
        if not self._writable():
            return
        with self._lock, self._errors():
            self._conn.execute("DELETE FROM leases WHERE key = ? AND owner = ?", (key, owner))

    def release_owner(self, owner: str) -> None:
        """Give back every claim ``owner`` holds (its run ended)."""
        if not self._writable():
            return
        with self._lock, self._errors():
            self._conn.execute("DELETE FROM leases WHERE owner = ?", (owner,))

    def delete(self, keys: Sequence[str]) -> None:
        with self._lock, self._errors(), transaction(self._conn):
            self._conn.executemany("DELETE FROM contexts WHERE key = ?", [(k,) for k in keys])

    def __len__(self) -> int:
        with self._lock, self._errors():
            (n,) = self._conn.execute("SELECT COUNT(*) FROM contexts").fetchone()
        return int(n)

    # -- housekeeping ----------------------------------------------------------------------------------------

    def stats(self) -> CacheStats:
        """What the cache holds, and its size on disk (the file and its write-ahead log)."""
        with self._lock, self._errors():
            contexts, documents, unattributed, oldest, newest = self._conn.execute(
                "SELECT COUNT(*), COUNT(DISTINCT document_id), SUM(document_id IS NULL), MIN(created_at), "
                "MAX(created_at) FROM contexts").fetchone()
            by_model = dict(self._conn.execute("SELECT model, COUNT(*) FROM contexts GROUP BY model").fetchall())
            (counts,) = self._conn.execute("SELECT COUNT(*) FROM token_counts").fetchone()
            (batched,) = self._conn.execute("SELECT COUNT(*) FROM batch_items").fetchone()
            stale, chunks = self._conn.execute(_LATEST_VERSIONS).fetchone()
        size = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        return CacheStats(int(contexts), int(documents), int(unattributed or 0), {str(m): int(n) for m, n in
                          by_model.items()}, oldest, newest, size, int(counts), int(batched), int(stale or 0),
                          int(chunks or 0))

    def prune(self, *, keep_documents: Iterable[str] | None = None, older_than: Any = None,
              dry_run: bool = False, compact: bool = False) -> int:
        """Delete the contexts of documents not in ``keep_documents`` (your live document ids) and/or those
        written before ``older_than`` (a date, datetime or Unix seconds); how many were (or, ``dry_run``, would
        be) deleted. Contexts stored before document ids were recorded are pruned by date only. ``compact``
        gives the freed pages back to the file system (SQLite's VACUUM: rewrites the file). While a run holds a
        live lease, nothing written since the oldest such lease began is deleted (a live run's contexts, paid for
        minutes ago, are not pruned under it): prune again after the run ends."""
        live, cutoff = prune_criteria(keep_documents, older_than)
        if not dry_run and self.read_only:
            raise CacheError(f"the context cache {self.path} is read-only: nothing can be pruned", path=str(self.path))
        params: list[Any] = [] if cutoff is None else [cutoff]
        params.append(time.time())  # now: which leases are live

        def where(date_column: str) -> str:  # contexts by created_at, versions by when a run last saw them
            parts = []
            if live is not None:  # the live ids go into a temporary table: any number of them, one statement
                parts.append("(document_id IS NOT NULL AND document_id NOT IN (SELECT id FROM ctx_live))")
            if cutoff is not None:
                parts.append(f"{date_column} < ?")
            return (f"({' OR '.join(parts)}) AND {date_column} < COALESCE((SELECT MIN(started) FROM leases WHERE "
                    "expires >= ?), 1e300)")

        with self._lock, self._errors():
            if live is not None:
                self._conn.execute("CREATE TEMP TABLE IF NOT EXISTS ctx_live (id TEXT PRIMARY KEY)")
                self._conn.execute("DELETE FROM ctx_live")
                self._conn.executemany("INSERT INTO ctx_live VALUES (?)", [(i,) for i in live])
            try:
                if dry_run:
                    (n,) = self._conn.execute(f"SELECT COUNT(*) FROM contexts WHERE {where('created_at')}",
                                              params).fetchone()
                    return int(n)
                deleted = self._conn.execute(f"DELETE FROM contexts WHERE {where('created_at')}", params).rowcount
                self._conn.execute(f"DELETE FROM document_versions WHERE {where('seen_at')}", params)
            finally:
                if live is not None:
                    self._conn.execute("DELETE FROM ctx_live")
            if compact:
                self._conn.execute("VACUUM")
        return int(deleted)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ContextCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prune_criteria(keep_documents: Iterable[str] | None, older_than: Any) -> tuple[list[str] | None, float | None]:
    """What ``prune`` deletes, as both backends read it: the live document ids (unique, as strings) and the cutoff
    as Unix time; ``ConfigurationError`` when neither is given."""
    cutoff = prune_cutoff(older_than)
    if keep_documents is None and cutoff is None:
        raise ConfigurationError("prune needs keep_documents= (the live document ids) and/or older_than= (a date)",
                                 setting="keep_documents")
    live = None if keep_documents is None else list(dict.fromkeys(str(i) for i in keep_documents))
    return live, cutoff
