"""Opening the package's SQLite caches: WAL mode, busy retries, and clear errors for a file that is not a cache.

Both caches (contexts, embeddings) open through here, so both get the same treatment: a new file switched to WAL
even when another process does the same at the same moment; a truncated, garbage, foreign or unreadable file
raised as ``CacheError`` with its path and the fix; a read-only file opened read-only, serving what it holds.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ctx_retrieval.errors import CacheError

__all__ = ["busy", "open_cache_database"]


def busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11; extended codes keep the primary code low
    if isinstance(code, int):
        return (code & 0xFF) in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
    return "locked" in str(exc) or "busy" in str(exc)


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
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout_s, isolation_level=None,
                                   check_same_thread=False)
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
