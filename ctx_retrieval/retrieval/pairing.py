"""One truth across the vector side and BM25: every write to both planned here, in an order no failure can turn
into a wrong answer, and every query screened against what the two sides hold.

The core store, the CLI's ``index`` and both adapters' ``ContextualVectorStore`` write through a ``Pairing``; they
convert their items to ``Record``s and do their framework's I/O (``VectorRows``), nothing else.

Order of operations, each step written to a journal before it starts::

    add     journal "add ids"    -> vector store add  -> BM25 upsert             -> journal done
    delete  journal "delete ids" -> BM25 delete       -> vector store delete     -> journal done

So BM25 never holds a chunk the vector store lacks (it is written after and deleted before), and a chunk being
deleted is dropped from every query from the moment its deletion is journaled, whichever step then fails. A write
that fails leaves its journal entry: the next write, ``sync()`` or the next open finishes it (a delete is done again;
an add is rolled forward from what the vector store holds, or back where the store cannot be read). The journal is
a folder of small files beside the BM25 index (memory for an in-memory one), so a query process sees another
process's pending deletes at its next query.

Queries are screened (``QueryGuard``): vector candidates that BM25 does not know mean BM25 is behind (a write that
crashed between the two, or chunks written to the vector store directly): they are added to BM25 from the vector
store's own items (the contextualized text is there), with one warning naming the fix, and BM25 is asked again, so
they are ranked by both sides at this very query. Over a store that others write directly (``follow=True``), a BM25
hit the vector store no longer holds is dropped and deleted from BM25, and a change in the store's size starts a
reconciliation.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import math
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

from ctx_retrieval._paths import cache_dir
from ctx_retrieval._process import dead_here, same_process, worker_id
from ctx_retrieval.errors import (
    ConfigurationError,
    CtxRetrievalError,
    InvalidInputError,
    SearchIndexError,
    SharedStoreError,
)
from ctx_retrieval.retrieval.bm25_store import BM25Entry, BM25Store, StoredEntry, text_version
from ctx_retrieval.retrieval.fusion import chunk_key
from ctx_retrieval.retrieval.hybrid import IdentifiedRanking
from ctx_retrieval.retrieval.layout import EMBED_LAYOUTS, EmbedLayout, chunk_windows
from ctx_retrieval.text import indexed_text

logger = logging.getLogger(__name__)

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)
_WINDOW = re.compile(r"#w(\d+)$")
JOURNAL = ".pairing"  # the folder, in a BM25 index's, of the writes in progress
_OPENERS = ".openers"
_FILL_BATCH = 10_000  # rows a commit when BM25 is filled from the vector store
_INTENT_TTL_S = 900.0  # a write's entry another machine may finish after this (its writer's life cannot be seen)
_STALE_TMP_S = 60.0  # an entry file never named after this long belongs to a write that never began
_FILLING = ".filling"  # in the BM25 folder while it is filled: the next open finishes a fill a kill cut short
BM25Fill = Literal["wait", "background"]


def row_id(chunk_id: str, window: int) -> str:
    """The vector-store id of a chunk's ``window``-th window (``embed_layout="windows"``)."""
    return f"{chunk_id}#w{window}"


def chunk_of(row: str) -> str:
    """The chunk a vector-store row belongs to (a window id without its ``#w<n>``, else itself)."""
    return _WINDOW.sub("", row)


def window_of(row: str) -> int:
    found = _WINDOW.search(row)
    return int(found.group(1)) if found else 0


@dataclass(frozen=True)
class Record:
    """One chunk as both indexes hold it: ``text`` is the indexed text (context + chunk), ``chunk`` the chunk alone
    (the windows layout cuts it), ``payload`` the adapter's serialized item, ``item`` the framework object itself
    (for the vector store's write; never compared)."""

    id: str
    text: str
    chunk: str
    context: str | None = None
    ref: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    payload: bytes = b""
    item: Any = field(default=None, compare=False, repr=False)

    def entry(self, rows: int = 1) -> BM25Entry:
        return BM25Entry(self.id, self.text, ref=self.ref, metadata=self.metadata, payload=self.payload, rows=rows)


@dataclass(frozen=True)
class Row:
    """One vector-store row: the whole chunk (``window is None``) or one of its ``windows`` windows; ``item`` is
    the framework's own row when the framework made it (LlamaIndex embeds its nodes before the store sees them)."""

    id: str
    text: str
    record: Record
    window: int | None = None
    windows: int = 1
    item: Any = field(default=None, compare=False, repr=False)
    part: str | None = None  # the window of the chunk this row holds (``None``: the whole chunk)


@dataclass(frozen=True)
class StoreFacts:
    """What a vector store is, for the rule of where BM25 lives: ``memory`` (gone with the process), ``local`` (a
    folder ``path`` on this machine that a second process cannot follow: Chroma's ``PersistentClient``), ``server``
    (``identity`` names the server and collection), or ``unknown``."""

    kind: Literal["memory", "local", "server", "unknown"]
    path: Path | None = None
    collection: str | None = None
    identity: str | None = None


@runtime_checkable
class VectorRows(Protocol):
    """A framework's vector store as the pairing writes it: rows in, rows out by id."""

    def facts(self) -> StoreFacts: ...

    def add_rows(self, rows: Sequence[Row]) -> None: ...

    def delete_rows(self, ids: Sequence[str]) -> None: ...

    async def aadd_rows(self, rows: Sequence[Row]) -> None: ...

    async def adelete_rows(self, ids: Sequence[str]) -> None: ...


@runtime_checkable
class RefDeleting(Protocol):
    """A store that deletes a source document's rows itself (LlamaIndex ``delete(ref_doc_id)``)."""

    def delete_refs(self, refs: Sequence[str]) -> None: ...

    async def adelete_refs(self, refs: Sequence[str]) -> None: ...


@runtime_checkable
class RowReading(Protocol):
    """A store that reads rows back by id: whole records (windows joined) for chunk ids it holds."""

    def records(self, chunk_ids: Sequence[str]) -> dict[str, Record]: ...


@runtime_checkable
class RowListing(Protocol):
    """A store that lists every chunk it holds (a page at a time) and counts its rows."""

    def iter_records(self) -> Iterator[Record]: ...

    def count_rows(self) -> int: ...


@runtime_checkable
class VisibilityChecking(Protocol):
    """A local store that can tell whether this process's search sees rows it lists (Chroma's embedded client lists
    rows another process wrote, from its SQLite file, but its vector index in this process never holds them)."""

    def searchable(self, ids: Sequence[str]) -> bool: ...


@runtime_checkable
class ItemCodec(Protocol[T_contra]):
    """How the query guard reads a vector side's item: its chunk id and the record BM25 would hold for it."""

    def chunk_id(self, item: T_contra) -> str: ...

    def record(self, item: T_contra) -> Record: ...


@dataclass(frozen=True)
class SyncReport:
    """What ``sync()`` changed: chunks added to BM25 (the vector store held them), removed from BM25 (it no longer
    does), interrupted writes finished, and chunks BM25 held in another version than the store's, written anew."""

    added: int
    removed: int
    finished: int
    updated: int = 0

    def __str__(self) -> str:
        return (f"{self.added} chunks added to BM25, {self.removed} removed, {self.updated} updated, {self.finished} "
                "interrupted writes finished")


def bm25_place(value: Any, wrapped: object | None = None) -> tuple[BM25Store | str | Path | None, Any]:
    """A retriever's ``bm25=`` as (where BM25 lives, which retriever to ask): a folder or a ``BM25Store`` is a place,
    as a ``ContextualVectorStore``'s ``bm25=`` is; anything else another keyword retriever. ``wrapped``: the store
    the retriever was given when it has its BM25 already (a ``ContextualVectorStore``, an engine's store), beside
    which a place is refused."""
    if not isinstance(value, str | Path | BM25Store):
        return None, value
    if wrapped is not None:
        raise ConfigurationError(f"bm25={value!r} says where a plain store's BM25 lives; this "
                                 f"{type(wrapped).__name__} has its own: drop bm25=", setting="bm25")
    return value, None


def bm25_beside(facts: StoreFacts) -> Path | None:
    """Where BM25 lives beside a vector store, the one rule the wrapper and the retriever both follow: beside a store
    on local disk (``<path>/ctx_bm25/<collection>``); for a server, under this machine's cache folder, by server and
    collection (a cache the query side reconciles with the server); in memory beside an in-memory store. ``None`` is
    memory. A store of unknown kind keeps BM25 in memory, filled from the store at open (it must list its rows)."""
    if facts.kind == "local" and facts.path is not None:
        return facts.path / "ctx_bm25" / (facts.collection or "default")
    if facts.kind == "server" and facts.identity:
        return cache_dir() / "bm25" / re.sub(r"[^A-Za-z0-9._-]+", "_", facts.identity)
    return None


class _DamagedEntryError(ValueError):
    """A journal entry that does not read as one (cut short, edited, of another version)."""


class _Intent:
    """One write in progress, as the journal holds it; an entry is checked field by field when read."""

    def __init__(self, name: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise _DamagedEntryError("not a JSON object")
        self.name = name
        self.op: str = data.get("op")  # type: ignore[assignment]
        if self.op not in ("add", "delete"):
            raise _DamagedEntryError(f"unknown op {self.op!r}")
        self.ids, self.refs, self.rows = (_strings(data, key) for key in ("ids", "refs", "rows"))
        self.writer: str = data.get("writer")  # type: ignore[assignment]
        if not isinstance(self.writer, str) or not self.writer:
            raise _DamagedEntryError("no writer")
        self.failed = data.get("failed", False)
        self.expires = data.get("expires", 0.0)
        if not isinstance(self.failed, bool) or isinstance(self.expires, bool) or \
                not isinstance(self.expires, (int, float)) or not math.isfinite(self.expires):
            raise _DamagedEntryError("failed or expires of the wrong type")

    def data(self) -> dict[str, Any]:
        return {"op": self.op, "ids": self.ids, "refs": self.refs, "rows": self.rows, "writer": self.writer,
                "failed": self.failed, "expires": self.expires}

    @property
    def open(self) -> bool:
        """Whether it may be finished now: it failed, its writer is dead, or it is past its expiry and its writer
        is not this process (another machine or container, whose liveness cannot be seen from here)."""
        if self.failed or dead_here(self.writer):
            return True
        if same_process(self.writer):
            return self.writer not in _LIVE
        return time.time() > float(self.expires)


def _strings(data: Mapping[str, Any], key: str) -> list[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _DamagedEntryError(f"{key} is not a list of strings")
    return list(value)


_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _salvage(text: str) -> dict[str, Any] | None:
    """What a cut-short entry still says: its op and the ids, refs and rows written in full before the cut."""
    op = re.search(r'"op":\s*"(add|delete)"', text)
    if op is None:
        return None
    found: dict[str, Any] = {"op": op.group(1), "writer": "salvaged", "failed": True}
    for key in ("ids", "refs", "rows"):
        start = re.search(f'"{key}":\\s*\\[', text)
        if start is not None:
            body = text[start.end():].split("]", 1)[0]
            with contextlib.suppress(ValueError):
                found[key] = [json.loads(f'"{m}"') for m in _STRING.findall(body)]
    return found if found.get("ids") or found.get("refs") else None


_LIVE: set[str] = set()  # writer ids of writes running in this process right now
_LIVE_LOCK = threading.Lock()


class _Journal:
    """Writes in progress: one JSON file each in ``<bm25 folder>/.pairing/`` (or in memory), written (and synced to
    disk) before the first step and removed after the last; a query reads the folder again only when its listing
    changed (names, inodes, sizes: not timestamps alone, which a coarse filesystem may not move)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder / JOURNAL if folder is not None else None
        self._memory: dict[str, _Intent] = {}
        self._seen: tuple[Any, list[_Intent]] | None = None
        if self.folder is not None:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise self._not_a_folder() from None

    def _not_a_folder(self) -> SearchIndexError:
        return SearchIndexError(f"{self.folder} is a file, where the journal of writes in progress keeps its folder: "
                                "move the file away (the journal starts empty) and run sync() to reconcile both "
                                "sides", path=str(self.folder))

    def begin(self, op: str, ids: Sequence[str], refs: Sequence[str] = (), rows: Sequence[str] = ()) -> _Intent:
        intent = _Intent(f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json",
                         {"op": op, "ids": list(ids), "refs": list(refs), "rows": list(rows), "writer": worker_id(),
                          "expires": time.time() + _INTENT_TTL_S})
        with _LIVE_LOCK:
            _LIVE.add(intent.writer)
        self._write(intent)
        return intent

    def _write(self, intent: _Intent) -> None:
        if self.folder is None:
            self._memory[intent.name] = intent
            return
        temporary = self.folder / f".{intent.name}.tmp"
        with temporary.open("w", encoding="utf-8") as file:
            file.write(json.dumps(intent.data()))
            file.flush()
            os.fsync(file.fileno())  # a crash of the machine cannot leave the entry cut short
        os.replace(temporary, self.folder / intent.name)

    def fail(self, intent: _Intent) -> None:
        """The write stopped at an error: it may be finished by anyone from now on."""
        intent.failed = True
        with contextlib.suppress(OSError):
            self._write(intent)
        self.done(intent, remove=False)

    def done(self, intent: _Intent, *, remove: bool = True) -> None:
        with _LIVE_LOCK:
            _LIVE.discard(intent.writer)
        if not remove:
            return
        if self.folder is None:
            self._memory.pop(intent.name, None)
        else:
            with contextlib.suppress(FileNotFoundError):
                (self.folder / intent.name).unlink()

    def pending(self) -> list[_Intent]:
        if self.folder is None:
            return list(self._memory.values())
        try:
            with os.scandir(self.folder) as listing:
                entries = sorted((e.name, e.inode(), e.stat().st_size, e.stat().st_mtime) for e in listing
                                 if e.is_file())
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            raise self._not_a_folder() from None
        if self._seen is not None and self._seen[0] == entries:
            return self._seen[1]
        found = []
        for name, _, _, modified in entries:
            path = self.folder / name
            if name.endswith(".json.tmp"):  # a kill between writing an entry and naming it: its write never began
                if time.time() - modified > _STALE_TMP_S:
                    with contextlib.suppress(OSError):
                        path.unlink()
                continue
            if not name.endswith(".json"):
                continue
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:  # finished meanwhile
                continue
            try:
                found.append(_Intent(name, json.loads(text)))
            except (ValueError, RecursionError) as exc:
                intent = self._quarantine(path, text, exc)
                if intent is not None:
                    found.append(intent)
        self._seen = (entries, found)
        return found

    def _quarantine(self, path: Path, text: str, why: Exception) -> _Intent | None:
        """Move a damaged entry to ``.pairing/damaged/`` (one warning); what it still says of a delete or an add is
        kept as a failed write, so its chunks are dropped from queries and the next write or ``sync()`` finishes it."""
        assert self.folder is not None
        salvaged = _salvage(text)
        damaged = self.folder / "damaged"
        with contextlib.suppress(OSError):
            damaged.mkdir(exist_ok=True)
            os.replace(path, damaged / path.name)
        intent = None
        if salvaged is not None:
            intent = _Intent(path.name, salvaged)
            with contextlib.suppress(OSError):
                self._write(intent)
        logger.warning("a damaged entry of the pairing journal (%s: %s) was moved to %s; %s. Run sync() to "
                       "reconcile both sides", path.name, why, damaged,
                       f"it still names a {intent.op} of {len(intent.ids)} chunks and {len(intent.refs)} documents, "
                       "kept to be finished" if intent is not None else "nothing in it could be read")
        return intent


class _Openers:
    """Processes that have a single-process store (a local Chroma folder) open: a second live one is refused, since
    it would never see the first one's new vectors."""

    def __init__(self, path: Path) -> None:
        self.folder = path / "ctx_bm25" / _OPENERS
        self.me = worker_id()
        self.file = self.folder / self.me.replace("|", "_").replace("/", "-")

    def register(self, what: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for other in self.folder.iterdir():
            try:
                holder = other.read_text(encoding="utf-8").strip()
            except OSError:
                continue
            if same_process(holder):
                continue
            if dead_here(holder):
                with contextlib.suppress(OSError):
                    other.unlink()
                continue
            pid = holder.split("|")[2] if holder.count("|") == 4 else "?"
            raise SharedStoreError(
                f"{what} is already open in another process (pid {pid}): Chroma's PersistentClient keeps its vectors "
                "in the process that opened it, so a second process (an ingestion job beside a query service) "
                "would never see the other's new vectors. Serve the folder with a Chroma server (chroma run --path "
                f"{self.folder.parent.parent}) and pass chromadb.HttpClient(host, port) in both processes, or stop "
                "the other process first", path=str(self.folder.parent.parent), other=holder)
        self.file.write_text(self.me, encoding="utf-8")
        atexit.register(self.close)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.unlink()


@dataclass
class _Call:
    """One step of a write: a method of the vector store (``target``) or of BM25 (local, run in a thread when the
    write is async)."""

    target: Any
    method: str
    args: tuple[Any, ...]
    local: bool = False


class Pairing:
    """The vector store and the BM25 index beside it, written together (see the module docstring for the order).

    Key init args:
        vectors: the framework's store as ``VectorRows`` (its other capabilities, ``RowReading``, ``RowListing``,
            ``RefDeleting``, are checked here, once).
        bm25: the ``BM25Store`` (``open_bm25`` applies the rule of where it lives).
        layout: ``"whole"`` (one row per chunk) or ``"windows"`` (a chunk that overflows the embedder is several
            rows, ``row_id(chunk, n)``), with ``count_tokens`` the embedder's own counter.
        also: more vector stores written with every chunk (a second embedder), under the same row ids.
        follow: others write to the vector store directly (a plain store handed to a retriever): queries then
            check BM25-only hits against it and reconcile when its size changes.
    """

    def __init__(self, vectors: VectorRows, bm25: BM25Store, *, layout: EmbedLayout = "whole",
                 count_tokens: Callable[[str], int] | None = None, also: Sequence[VectorRows] = (),
                 follow: bool = False) -> None:
        if not isinstance(vectors, VectorRows):
            raise ConfigurationError(f"{type(vectors).__name__} is not a VectorRows (facts, add_rows, delete_rows and "
                                     "their async twins)", setting="vectors")
        if layout not in EMBED_LAYOUTS:
            raise ConfigurationError(f"embed_layout must be 'whole' or 'windows', not {layout!r}",
                                     setting="embed_layout")
        if layout == "windows" and count_tokens is None:
            raise ConfigurationError("embed_layout='windows' needs the embedder's token counter (count_tokens=)",
                                     setting="embed_layout")
        if also and layout == "windows":
            raise ConfigurationError("also= (more vector stores) and the windows layout do not go together: each "
                                     "embedder would cut its own windows", setting="also")
        self.vectors = vectors
        self.bm25 = bm25
        self.layout: EmbedLayout = layout
        self.count_tokens = count_tokens
        self.also = list(also)
        self.follow = follow
        self.journal = _Journal(bm25.path)
        self._reader = vectors if isinstance(vectors, RowReading) else None
        self._lister = vectors if isinstance(vectors, RowListing) else None
        self._warned: set[str] = set()
        self._added: list[str] = []  # what the last sync added to BM25
        self._follow_seen: tuple[int, int] | None = None
        self._local_stamp: tuple[int, int] | None = None  # the local Chroma file as the last query saw it
        self._filled = threading.Event()  # cleared while BM25 is filled in the background
        self._filled.set()
        self._fill_failed = False
        facts = self.facts = vectors.facts()
        self._openers: _Openers | None = None
        if facts.kind == "local" and facts.path is not None:
            self._openers = _Openers(facts.path)
            self._openers.register(f"the Chroma folder {facts.path}")
        try:
            self.recover()
        except Exception as exc:  # the open still succeeds: the next write or sync() finishes them
            logger.warning("interrupted writes beside %s could not be finished yet (%s); queries drop what they "
                           "delete, and the next write or sync() finishes them", bm25, exc)

    @classmethod
    def beside(cls, vectors: VectorRows, bm25: BM25Store | str | Path | None, *, tokenizer: Any,
               owner: Mapping[str, str], layout: EmbedLayout = "whole", fill: BM25Fill = "wait",
               **kwargs: Any) -> Pairing:
        """The pairing of a framework's store with the BM25 index where the rule puts it (``open_bm25``; ``owner``
        names the adapter's item format and ``layout`` is recorded with it), filled from the store's rows once when
        it is empty and the store lists them (a second machine's service, a store indexed before BM25 lived
        beside it). ``fill="wait"`` fills it before returning; ``"background"`` returns at once and fills it on a
        thread, queries meanwhile answered by the vectors alone (said once) and writes waiting for it."""
        if fill not in ("wait", "background"):
            raise ConfigurationError(f"bm25_fill must be 'wait' or 'background', not {fill!r}", setting="bm25_fill")
        store = open_bm25(bm25, vectors.facts(), tokenizer=tokenizer, owner={**owner, "layout": layout},
                          listable=isinstance(vectors, RowListing))
        pairing = cls(vectors, store, layout=layout, **kwargs)
        unfinished = store.path is not None and (store.path / _FILLING).exists()  # a fill cut short by a kill
        rows = pairing._lister.count_rows() if (unfinished or not len(store)) and pairing._lister is not None else 0
        if not rows:
            return pairing
        logger.warning("BM25 at %s is %s beside %d rows in the vector store: filling it from them once, %s",
                       store, "part-filled (a fill was cut short)" if unfinished else "empty", rows,
                       "before the first query" if fill == "wait" else
                       "in the background (queries meanwhile are answered by the vectors alone)")
        if fill == "wait":
            pairing._refill(rows)
        else:
            pairing._filled.clear()
            threading.Thread(target=pairing._refill, args=(rows,), name="ctx-bm25-fill", daemon=True).start()
        return pairing

    def _refill(self, rows: int) -> None:
        """Fill BM25 from the vector store's rows, a progress line a batch (on the fill thread in the background)."""
        started = time.monotonic()
        mark = self.bm25.path / _FILLING if self.bm25.path is not None else None
        if mark is not None:
            mark.touch()

        def progress(read: int) -> None:
            logger.warning("BM25 at %s: %d of %d rows read and indexed (%.0f s)", self.bm25, read, rows,
                           time.monotonic() - started)

        try:
            report = self._sync(progress if rows > _FILL_BATCH else None)
            logger.warning("BM25 at %s filled with %d chunks in %.1f s", self.bm25, report.added,
                           time.monotonic() - started)
            if mark is not None:
                mark.unlink(missing_ok=True)
        except Exception as exc:
            if self._filled.is_set():
                raise
            logger.error("BM25 at %s could not be filled in the background (%s): queries stay on the vectors alone "
                         "until sync() succeeds", self.bm25, exc)
            self._fill_failed = True
        finally:
            self._filled.set()

    def wait_filled(self, timeout: float | None = None) -> bool:
        """Wait for a background fill of BM25 (``bm25_fill="background"``); True once it has ended."""
        return self._filled.wait(timeout)

    @property
    def filling(self) -> bool:
        """Whether BM25 is being filled in the background (queries are then answered by the vectors alone)."""
        return not self._filled.is_set() or self._fill_failed

    def __repr__(self) -> str:
        return f"Pairing({type(self.vectors).__name__}, {self.bm25!r}, layout={self.layout!r})"

    def close(self) -> None:
        """Let another process open a single-process store this pairing had open."""
        if self._openers is not None:
            self._openers.close()

    # -- planning --------------------------------------------------------------------------------------------

    def rows(self, records: Sequence[Record]) -> list[Row]:
        """The vector-store rows for ``records`` under this layout."""
        if self.layout == "whole":
            return [Row(r.id, r.text, r) for r in records]
        assert self.count_tokens is not None
        out = []
        for record in records:
            parts = chunk_windows(record.chunk, record.context, self.count_tokens)
            if len(parts) == 1:
                out.append(Row(record.id, record.text, record))
                continue
            out.extend(Row(row_id(record.id, n), indexed_text(part, record.context), record, n, len(parts), part=part)
                       for n, part in enumerate(parts))
        return out

    def row_ids(self, chunk_ids: Sequence[str]) -> list[str]:
        """The vector-store row ids of these chunks (themselves, or their windows as BM25 recorded them)."""
        return self._rows_of(self.bm25.get(chunk_ids), chunk_ids) if self.layout == "windows" else list(chunk_ids)

    def _rows_of(self, stored: Mapping[str, StoredEntry], ids: Iterable[str]) -> list[str]:
        """The row ids the vector store holds for these chunks (their windows), as BM25 recorded them."""
        out = []
        for chunk_id in ids:
            count = stored[chunk_id].rows if chunk_id in stored else 1
            out.extend([chunk_id] if count == 1 else [row_id(chunk_id, n) for n in range(count)])
        return out

    def _add(self, records: Sequence[Record], rows: Sequence[Row] | None) -> Generator[_Call, Any, list[str]]:
        if not self._filled.is_set():
            yield _Call(self, "wait_filled", (), local=True)
        yield from self._finish_open(mine_only=True)
        records = list(records)
        ids = [r.id for r in records]
        if len(set(ids)) != len(ids):
            raise InvalidInputError("the chunks repeat an id; each chunk is stored once under its id")
        rows = list(rows) if rows is not None else self.rows(records)
        counts: dict[str, int] = {}
        for row in rows:
            counts[row.record.id] = max(counts.get(row.record.id, 1), row.windows)
        stale: list[str] = []
        if self.layout == "windows" and records:  # a chunk replaced by fewer windows leaves none behind
            stale = sorted(set(self._rows_of(self.bm25.get(ids), ids)) - {r.id for r in rows})
        if not records:
            return ids
        intent = self.journal.begin("add", ids, rows=[r.id for r in rows])
        try:
            if stale:
                for store in (self.vectors, *self.also):
                    yield _Call(store, "delete_rows", (stale,))
            for store in (self.vectors, *self.also):
                yield _Call(store, "add_rows", (rows,))
            yield _Call(self.bm25, "upsert", ([r.entry(counts.get(r.id, 1)) for r in records],), local=True)
        except BaseException:
            self.journal.fail(intent)
            raise
        self.journal.done(intent)
        return ids

    def _delete(self, ids: Sequence[str], refs: Sequence[str] = ()) -> Generator[_Call, Any, None]:
        if not self._filled.is_set():
            yield _Call(self, "wait_filled", (), local=True)
        yield from self._finish_open(mine_only=True)
        ids = list(dict.fromkeys([*(str(i) for i in ids), *self.bm25.ids_of_refs(refs)]))
        refs = [str(r) for r in refs]
        if not ids and not refs:
            return
        rows = self._rows_of(self.bm25.get(ids), ids) if self.layout == "windows" else ids
        intent = self.journal.begin("delete", ids, refs, rows)
        try:
            yield from self._delete_steps(ids, refs, rows)
        except BaseException:
            self.journal.fail(intent)
            raise
        self.journal.done(intent)

    def _delete_steps(self, ids: Sequence[str], refs: Sequence[str], rows: Sequence[str]) -> Iterator[_Call]:
        if ids:
            yield _Call(self.bm25, "delete", (list(ids),), local=True)
        if refs:
            yield _Call(self.bm25, "delete_refs", (list(refs),), local=True)
        for store in (self.vectors, *self.also):
            if refs and isinstance(store, RefDeleting):
                yield _Call(store, "delete_refs", (list(refs),))
            if rows:
                yield _Call(store, "delete_rows", (list(rows),))

    def _finish_open(self, *, mine_only: bool = False) -> Generator[_Call, Any, int]:
        """Finish the journal's open writes (failed, or of a dead writer): deletes again; adds rolled forward from
        what the vector store holds, or back when it cannot be read. ``mine_only``: only this process's."""
        finished = 0
        for intent in self.journal.pending():
            if not intent.open or (mine_only and not same_process(intent.writer)):
                continue
            if intent.op == "delete":
                rows = list(dict.fromkeys([*intent.rows, *self.row_ids(intent.ids)]))  # a salvaged entry lacks some
                yield from self._delete_steps(intent.ids, intent.refs, rows)
            elif self._reader is not None:
                held = self._reader.records(intent.ids)
                if held:
                    yield _Call(self.bm25, "upsert", ([self._entry(r) for r in held.values()],), local=True)
                missing = [i for i in intent.ids if i not in held]
                if missing:
                    yield _Call(self.bm25, "delete", (missing,), local=True)
            else:  # a store that cannot be read by id: what it holds (an old version, or the new one) stays, and
                # BM25 forgets these chunks until a query finds them (rolled back as a delete, an update lost both)
                yield _Call(self.bm25, "delete", (list(intent.ids),), local=True)
            self.journal.done(intent)
            finished += 1
            logger.info("finished an interrupted %s of %d chunks (%s)", intent.op, len(intent.ids), self.bm25)
        return finished

    def _entry(self, record: Record) -> BM25Entry:
        return record.entry(len(self.rows([record])) if self.layout == "windows" else 1)

    # -- running a plan, sync or async (only the I/O differs) ----------------------------------------------------

    @staticmethod
    def _run(steps: Generator[_Call, Any, T]) -> T:
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                call = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            value, error = None, None
            try:
                value = getattr(call.target, call.method)(*call.args)
            except BaseException as exc:  # handed to the plan, which journals the failure and re-raises it
                error = exc

    @staticmethod
    async def _arun(steps: Generator[_Call, Any, T]) -> T:
        import asyncio

        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                call = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            value, error = None, None
            try:
                method = getattr(call.target, call.method if call.local else "a" + call.method)
                value = await (asyncio.to_thread(method, *call.args) if call.local else method(*call.args))
            except BaseException as exc:
                error = exc

    # -- the writes ----------------------------------------------------------------------------------------------

    def add(self, records: Sequence[Record], rows: Sequence[Row] | None = None) -> list[str]:
        """Add (or replace, by id) chunks on both sides; ``rows`` when the framework made them (embedded already)."""
        return self._run(self._add(records, rows))

    async def aadd(self, records: Sequence[Record], rows: Sequence[Row] | None = None) -> list[str]:
        return await self._arun(self._add(records, rows))

    def delete(self, ids: Sequence[str]) -> None:
        """Delete chunks by id from both sides (their windows too)."""
        self._run(self._delete(ids))

    async def adelete(self, ids: Sequence[str]) -> None:
        await self._arun(self._delete(ids))

    def delete_refs(self, refs: Sequence[str]) -> None:
        """Delete every chunk of these source documents from both sides."""
        self._run(self._delete((), refs))

    async def adelete_refs(self, refs: Sequence[str]) -> None:
        await self._arun(self._delete((), refs))

    def recover(self) -> int:
        """Finish the writes a crashed (or failed) writer left in the journal; returns how many."""
        return self._run(self._finish_open())

    def sync(self) -> SyncReport:
        """Reconcile both ways: finish interrupted writes, add to BM25 what the vector store holds and BM25 lacks,
        remove from BM25 what the vector store no longer holds. Needs a store that lists its rows (and waits for a
        background fill)."""
        self.wait_filled()
        report = self._sync(None)
        self._fill_failed = False
        return report

    def _sync(self, progress: Callable[[int], None] | None) -> SyncReport:
        finished = self.recover()
        if self._lister is None:
            raise ConfigurationError(f"{type(self.vectors).__name__} cannot list its rows, so BM25 cannot be "
                                     "reconciled with it: write every chunk through ContextualVectorStore",
                                     setting="vector_store")
        busy = {i for intent in self.journal.pending() if not intent.open for i in intent.ids}
        have = set(self.bm25.ids())
        held: set[str] = set()
        batch: list[BM25Entry] = []
        known: list[BM25Entry] = []  # entries BM25 holds under these ids: compared with its copy a batch at a time
        updated = 0
        self._added = []

        def changed() -> list[BM25Entry]:  # another text than BM25's copy: written anew
            nonlocal updated
            stored = self.bm25.get([e.id for e in known])
            found = [e for e in known if e.id in stored and stored[e.id].version not in (None, text_version(e.text))]
            known.clear()
            updated += len(found)
            return found

        for record in self._lister.iter_records():
            held.add(record.id)
            if record.id in busy:
                continue
            if record.id not in have:
                batch.append(self._entry(record))
                self._added.append(record.id)
            else:
                known.append(self._entry(record))
                if len(known) >= 1000:
                    batch += changed()
            if len(batch) >= _FILL_BATCH:  # a commit a batch: other writers get their turn
                self.bm25.upsert(batch)
                batch = []
                if progress is not None:
                    progress(len(held))
        self.bm25.upsert(batch + changed())
        gone = sorted(have - held - busy)
        self.bm25.delete(gone)
        self._follow_seen = None
        return SyncReport(len(self._added), len(gone), finished, updated)

    # -- queries -------------------------------------------------------------------------------------------------

    def guard(self, codec: ItemCodec[Any]) -> QueryGuard[Any]:
        """The screen a hybrid query over this pairing runs (``HybridRetriever(..., guard=pairing.guard(codec))``)."""
        return QueryGuard(self, codec)

    def _backfill(self, records: Sequence[Record], why: str) -> int:
        """Add to BM25 chunks the vector store holds and BM25 lacks; a failure (read-only folder, a writer that
        never lets go) is logged, never raised to the query."""
        try:
            written = self.bm25.upsert(self._entry(r) for r in records)
            # A delete may have finished between the query's vector search and this write: what it deleted, or a
            # delete journaled meanwhile names, leaves BM25 again (else it would be served from BM25 from now on).
            ids = {r.id for r in records}
            deleted = {i for intent in self.journal.pending() if intent.op == "delete" for i in intent.ids} & ids
            if self._reader is not None and self.layout == "whole":
                deleted |= ids - set(self._reader.records(list(ids)))
            if deleted:
                self.bm25.delete(sorted(deleted))
                written -= len(deleted)
        except CtxRetrievalError as exc:
            logger.warning("%d chunks the vector store holds could not be added to %s (%s): they are found by "
                           "vectors only until sync() succeeds", len(records), self.bm25, exc)
            return 0
        self._warn_once(why, "%s: BM25 (%s) lacked %d chunks the vector store holds and now has them (a write "
                        "interrupted between the two, or chunks written to the vector store directly: write through "
                        "ContextualVectorStore, the retriever's vectorstore, so both sides are written together)",
                        why, self.bm25, written)
        return written

    def _follow_changes(self) -> bool:
        """Over a store others write directly: reconcile when its row count is not BM25's; True when BM25 changed."""
        if not (self.follow or self.facts.kind == "local") or self._lister is None or self.layout != "whole":
            return False  # a local folder another process writes is refused at the next query: see below
        if not self.follow and self.facts.path is not None:  # a stat, not a count, while the folder is unchanged
            with contextlib.suppress(OSError):
                found = os.stat(self.facts.path / "chroma.sqlite3")
                stamp = (found.st_mtime_ns, found.st_size)
                if stamp == self._local_stamp:
                    return False
                self._local_stamp = stamp
        rows, chunks = self._lister.count_rows(), len(self.bm25)
        if rows == chunks or self._follow_seen == (rows, chunks):
            return False
        report = self.sync()
        self._follow_seen = (self._lister.count_rows(), len(self.bm25))
        facts = self.vectors.facts()
        if report.added and facts.kind == "local" and isinstance(self.vectors, VisibilityChecking) and \
                not self.vectors.searchable(self._added[:3]):
            raise SharedStoreError(
                f"the Chroma folder {facts.path} was written by another process, and this process's Chroma client "
                "never sees the new vectors (its PersistentClient keeps the vector index in the process that "
                f"opened it): serve the folder with a Chroma server (chroma run --path {facts.path}) and pass "
                "chromadb.HttpClient(host, port) in both processes", path=str(facts.path), other="unknown")
        if report.added or report.removed:
            self._warn_once("direct", "the vector store was written directly (%s): BM25 followed it at this query; "
                            "write through ContextualVectorStore (the retriever's vectorstore) so both sides are "
                            "written together, without this check", report)
        return bool(report.added or report.removed)

    def _warn_once(self, what: str, message: str, *args: Any) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.warning(message, *args)


class _Screened(Generic[T]):
    """A ranking without some of its positions (chunks being deleted), keeping the items' positions."""

    def __init__(self, inner: Any, keep: list[int]) -> None:
        self._inner, self._keep = inner, keep
        self.keys = [inner.keys[p] for p in keep]
        ids = inner.ids if isinstance(inner, IdentifiedRanking) else None
        self.ids = [ids[p] for p in keep] if ids is not None else None

    def items(self, positions: Sequence[int]) -> Sequence[T]:
        return self._inner.items([self._keep[p] for p in positions])  # type: ignore[no-any-return]


class QueryGuard(Generic[T]):
    """Screens one pairing's queries: chunks being deleted are dropped; vector candidates BM25 does not know are
    added to it (and BM25 asked again); over a followed store, BM25-only hits the store lost are dropped."""

    def __init__(self, pairing: Pairing, codec: ItemCodec[T]) -> None:
        if not isinstance(codec, ItemCodec):
            raise ConfigurationError(f"{type(codec).__name__} is not an ItemCodec (chunk_id, record)",
                                     setting="codec")
        self.pairing = pairing
        self.codec = codec

    def prepare(self) -> None:
        if not self.pairing.filling:
            self.pairing._follow_changes()

    def screen(self, vectors: list[Any], bm25: Any, again: Callable[[], Any] | None) -> tuple[list[Any], Any]:
        pairing = self.pairing
        if pairing.filling:  # a partial BM25 ranking would favour what was read first: the vectors answer alone
            pairing._warn_once("filling", "BM25 at %s is being filled from the vector store: queries are answered "
                               "by the vectors alone until it is whole (bm25_fill='wait' waits for it instead)",
                               pairing.bm25)
            bm25 = again = None
        pending = pairing.journal.pending()
        deleting = {chunk_key(i) for intent in pending if intent.op == "delete" for i in intent.ids}
        deleting_refs = {r for intent in pending if intent.op == "delete" for r in intent.refs}
        adding = {i for intent in pending if intent.op == "add" and not intent.open for i in intent.ids}
        if bm25 is not None and vectors:
            known = set(bm25.keys)
            unknown: dict[str, tuple[int, int, int]] = {}  # chunk id -> (its key, which ranking, position in it)
            for side, ranking in enumerate(vectors):
                for position, (key, chunk_id) in enumerate(zip(ranking.keys, ranking.ids, strict=True)):
                    if key not in known and key not in deleting and chunk_id not in adding:
                        unknown.setdefault(chunk_id, (key, side, position))
            if unknown:
                held = pairing.bm25.held(unknown)
                missing = {i: (side, at) for i, (_, side, at) in unknown.items() if i not in held}
                if missing and self._fill(vectors, missing, deleting_refs) and again is not None:
                    bm25 = again()
        if deleting or deleting_refs:
            vectors = [self._without(r, deleting, deleting_refs) for r in vectors]
            bm25 = self._without(bm25, deleting, set()) if bm25 is not None else None
        return vectors, bm25

    def _fill(self, vectors: list[Any], missing: dict[str, tuple[int, int]], refs: set[str]) -> int:
        pairing = self.pairing
        if pairing.layout == "windows":  # a window is part of a chunk: the store joins the chunk's windows
            if pairing._reader is None:
                return 0
            records = list(pairing._reader.records(list(missing)).values())
        else:
            records = []
            for side, ranking in enumerate(vectors):
                positions = [position for s, position in missing.values() if s == side]
                # an item without an id or a text names no chunk: given one at random, it would be added anew at
                # every query
                records.extend(self.codec.record(item) for item in (ranking.items(positions) if positions else [])
                               if self.codec.chunk_id(item))
        records = [r for r in records if r.ref not in refs]
        return pairing._backfill(records, "vector candidates BM25 did not know") if records else 0

    def _without(self, ranking: Any, keys: set[int], refs: set[str]) -> Any:
        keep = [p for p, key in enumerate(ranking.keys) if key not in keys]
        if refs:
            items = ranking.items(keep)
            keep = [p for p, item in zip(keep, items, strict=True) if self.codec.record(item).ref not in refs]
        return ranking if len(keep) == len(ranking.keys) else _Screened(ranking, keep)

    def confirm(self, hits: Sequence[Any]) -> bool:
        """Over a store others write (followed, or a server other machines write with their own BM25 copies):
        every hit BM25 found is checked against the store in one read, by id and by text; a chunk the store no
        longer holds is deleted from BM25, one it holds in another version is replaced by it. True when BM25
        changed, and the query should run again."""
        pairing = self.pairing
        if not (pairing.follow or pairing.facts.kind == "server") or pairing._reader is None:
            return False
        found = {self.codec.chunk_id(h.item): h.item for h in hits if h.bm25_rank is not None}
        if not found:
            return False
        held = pairing._reader.records(list(found))  # one read for every hit, not one a hit
        gone = [i for i in found if i not in held]
        changed = [held[i] for i, item in found.items() if i in held and held[i].text != self.codec.record(item).text]
        if not gone and not changed:
            return False
        pairing._warn_once("behind", "BM25 at %s was behind the vector store (%d hits deleted from it, %d written "
                           "anew, by another process or machine): repaired at this query, and from now on for each "
                           "hit; sync() reconciles every chunk at once", pairing.bm25, len(gone), len(changed))
        try:
            pairing.bm25.delete(gone)
            pairing.bm25.upsert(pairing._entry(r) for r in changed)
        except CtxRetrievalError as exc:
            logger.warning("could not repair %s (%s)", pairing.bm25, exc)
            return False
        return True


def open_bm25(bm25: BM25Store | str | Path | None, facts: StoreFacts, *, tokenizer: Any, owner: Mapping[str, str],
              listable: bool) -> BM25Store:
    """The BM25 index beside a vector store: the one given, a folder given, or by the rule (``bm25_beside``); a
    store of unknown kind that cannot list its rows is refused without an explicit folder (its BM25 could never be
    rebuilt)."""
    if isinstance(bm25, BM25Store):
        return bm25
    if bm25 is not None:
        return BM25Store(bm25, tokenizer=tokenizer, owner=owner)
    if facts.kind == "unknown" and not listable:
        raise ConfigurationError("this vector store cannot list its rows, so a BM25 index in memory could not be "
                                 "refilled from it: pass bm25='a folder' (kept on disk beside your store)",
                                 setting="bm25")
    return BM25Store(bm25_beside(facts), tokenizer=tokenizer, owner=owner)
