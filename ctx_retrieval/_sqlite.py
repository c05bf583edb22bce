"""Opening and using the package's SQLite caches: WAL mode, busy retries, transactions that roll back, and clear
errors for a file that is not a cache or cannot be written.

Both caches (contexts, embeddings) open through here, so both get the same treatment: a new file switched to WAL
even when another process does the same at the same moment; a truncated, garbage, foreign or unreadable file
raised as ``CacheError`` with its path and the fix; a read-only file, or a valid cache in a read-only folder
(where SQLite cannot create the WAL index beside it), opened read-only, serving what it holds. Every statement
runs under ``guarded`` (any SQLite error is a ``CacheError``: a full disk, a file damaged while in use) and
multi-row writes under ``transaction`` (a failed batch rolls back, so it cannot leave the connection inside an
open transaction whose later writes are never committed).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from ctx_retrieval.errors import CacheError


def busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11; extended codes keep the primary code low
    if isinstance(code, int):
        return (code & 0xFF) in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
    return "locked" in str(exc) or "busy" in str(exc)


@contextlib.contextmanager
def guarded(path: Path, what: str) -> Iterator[None]:
    """Any SQLite error inside is a ``CacheError`` naming the file and the fix (``disk full`` included)."""
    try:
        yield
    except sqlite3.Error as exc:
        full = isinstance(exc, sqlite3.OperationalError) and ("full" in str(exc) or getattr(
            exc, "sqlite_errorcode", None) == 13)  # SQLITE_FULL
        fix = (f"free disk space where {path} lives, or pass another cache path" if full else _fix(path, what))
        raise CacheError(f"the {what} {path} cannot be used ({exc}): {fix}", path=str(path)) from exc


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN`` ... ``COMMIT`` on an autocommit connection, rolled back when the block fails."""
    conn.execute("BEGIN")
    try:
        yield
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _fix(path: Path, what: str) -> str:
    return (f"move {path} aside (or delete it: it only saves work) and run again, or pass cache=False to run "
            f"without the {what}")


def open_cache_database(path: Path, schema: Sequence[str], columns: Mapping[str, set[str]], *, what: str,
                        timeout_s: float = 60.0) -> tuple[sqlite3.Connection, bool]:
    """A connection to the cache at ``path`` and whether it is read-only. ``schema`` creates the tables;
    ``columns`` names the columns each must have (a file written by something else raises ``CacheError``)."""
    writable = not path.exists() or (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))
    try:
        if writable:
            conn = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None, check_same_thread=False)
        else:
            conn = _open_read_only(path, timeout_s)
        conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        if writable:
            # Switching a new file to WAL takes an exclusive lock and SQLite answers SQLITE_BUSY at once, without
            # the busy handler, when another process is doing the same: retry until the timeout.
            deadline = time.monotonic() + timeout_s
            for statement in ("PRAGMA journal_mode = WAL", "PRAGMA synchronous = NORMAL", *schema):
                while True:
                    try:
                        conn.execute(statement)
                        break
                    except sqlite3.OperationalError as exc:
                        if not busy(exc) or time.monotonic() > deadline:
                            raise
                        time.sleep(0.02)
        for table, wanted in columns.items():
            found = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if (writable or found) and not wanted <= found:
                raise CacheError(f"{path} is not a ctx-retrieval {what} (table {table!r} has columns "
                                 f"{sorted(found)}): {_fix(path, what)}", path=str(path))
    except sqlite3.DatabaseError as exc:  # not a database, malformed, unreadable
        raise CacheError(f"cannot use {path} as the {what} ({exc}): {_fix(path, what)}", path=str(path)) from exc
    return conn, not writable


def _open_read_only(path: Path, timeout_s: float) -> sqlite3.Connection:
    """A read-only connection. A WAL database needs its ``-shm`` index beside it, which SQLite cannot create in a
    read-only folder: then the file is opened ``immutable`` (no locks, no index; safe because nothing here can
    write it)."""
    uri = path.resolve().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=timeout_s, isolation_level=None,
                           check_same_thread=False)
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        conn.close()
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=timeout_s, isolation_level=None,
                           check_same_thread=False)
