"""The contextual BM25 index that lives beside a vector store: on disk, updated in place, read by many processes.

A folder (or memory, for one process) holding every chunk's indexed text (context + chunk), its id, its source
document, its filterable metadata and an opaque payload (the framework's serialized document or node, so a chunk
found by BM25 alone comes back whole). Adding, replacing and deleting chunks writes a new segment and marks
deletions, never rebuilds; any number of processes open the folder without re-tokenizing anything, and each sees
the last committed write at its next query. Writers take turns (one at a time, across processes; a busy writer is
waited for up to ``writer_timeout_s``).

The engine is tantivy (segments, deletions, background merges, a writer lock, memory-mapped readers), chosen over
our numpy index with segments and over SQLite postings by measurement (``benchmarks/bm25_engines.py``): at 1M
chunks it answers in a third of the time of an exhaustive numpy scoring (block-max WAND), and it ranks like the
numpy index and bm25s (the same failure@20 on the cookbook dev queries). It is fed the core's tokens (identifier
splitting by default, or any callable), so tokenization is ours and the same for every language issue 25 adds.
Scoring is BM25 with Lucene's idf, k1=1.2, b=0.75 (tantivy's; document lengths quantized to 256 levels).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctx_retrieval._optional import require
from ctx_retrieval.errors import InvalidInputError, SearchIndexError
from ctx_retrieval.retrieval.bm25 import ANALYSIS_VERSIONS, TOKENIZERS, resolve_tokenizer
from ctx_retrieval.retrieval.filters import compile_where
from ctx_retrieval.retrieval.fusion import chunk_key

__all__ = ["BM25Entry", "BM25Results", "BM25Store", "StoredEntry", "chunk_key"]

FORMAT = 2  # 2: a write-order field that breaks score ties
MANIFEST = "ctx_bm25.json"
_LOCK_FILE = ".ctx_bm25.lock"
_TOKENIZER = "ctx_tokens"  # tantivy's name for our pre-tokenized text: split on the spaces we join tokens with
_MAX_TOKEN_BYTES = 255  # longer tokens (base64 blobs, minified code) are dropped, as the engine cannot index them
_FILTERABLE_CHARS = 256  # string metadata longer than this is kept in the payload but not indexed for filters
_WRITER_HEAP = 64_000_000
_SAFE_KEY = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True)
class BM25Entry:
    """One chunk to index: ``text`` is what BM25 reads (context + chunk); ``ref`` its source document (for
    ``delete_refs``); ``metadata`` what filters see (scalars; longer strings are not indexed); ``payload`` what a
    hit returns (the adapter's serialized document or node)."""

    id: str
    text: str
    ref: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    payload: bytes = b""


@dataclass(frozen=True)
class StoredEntry:
    """A stored chunk, as ``get`` and ``BM25Results.entries`` return it."""

    id: str
    ref: str | None
    metadata: dict[str, Any]
    payload: bytes


class BM25Results:
    """One query's ranking: ``keys`` (``chunk_key`` of each id) and ``scores``, best first; ``entries(positions)``
    reads the stored chunks at some positions (only those a hybrid query returns are ever read)."""

    def __init__(self, keys: list[int], scores: list[float], searcher: Any = None, addresses: Sequence[Any] = (),
                 entries: Sequence[StoredEntry] | None = None) -> None:
        self.keys = keys
        self.scores = scores
        self._searcher = searcher
        self._addresses = addresses
        self._entries = entries

    def __len__(self) -> int:
        return len(self.keys)

    def entries(self, positions: Sequence[int] | None = None) -> list[StoredEntry]:
        wanted = range(len(self.keys)) if positions is None else positions
        if self._entries is not None:
            return [self._entries[p] for p in wanted]
        return [_entry(self._searcher.doc(self._addresses[p])) for p in wanted]


def _entry(document: Any) -> StoredEntry:
    fields = document.to_dict()
    meta = fields.get("meta") or [{}]
    ref = fields.get("ref") or [None]
    payload = fields.get("payload") or [b""]
    return StoredEntry(fields["id"][0], ref[0], dict(meta[0]), bytes(payload[0]))


class _NotExpressibleError(Exception):
    """A filter the engine cannot express: it is evaluated on each candidate's stored metadata instead."""


class BM25Store:
    """Contextual BM25 on disk (``path``) or in memory (``path=None``, one process), updated in place.

    Key init args:
        path: the folder (created if missing); ``None`` keeps the index in memory.
        tokenizer: ``"identifiers"`` (default), ``"parts"``, or a callable ``text -> tokens``; a folder remembers
            the tokenizer name it was built with and refuses another.
        writer_timeout_s: how long a write waits for another process's writer before ``SearchIndexError``.

    Use:
        .. code-block:: python

            store = BM25Store("index/bm25")
            store.upsert([BM25Entry("c1", "Acme's Q2 2023 report. Revenue grew 3%.", ref="acme-q2")])
            results = store.search("acme revenue", k=20, where={"year": {"$gte": 2023}})
            store.delete(["c1"]); store.delete_refs(["acme-q2"])
    """

    def __init__(self, path: str | Path | None = None, *, tokenizer: str | Callable[[str], list[str]] = "identifiers",
                 writer_timeout_s: float = 30.0) -> None:
        self._tantivy = require("tantivy", "bm25")
        self.path = Path(path) if path is not None else None
        self.tokenizer_name = tokenizer if isinstance(tokenizer, str) else _callable_name(tokenizer)
        self._tokenize = resolve_tokenizer(tokenizer)
        self.writer_timeout_s = writer_timeout_s
        self._lock = threading.Lock()  # one writer per process at a time; readers need no lock
        self._memory_writer: Any = None
        self._seq = 0
        self._schema = self._build_schema()
        self._index = self._open()

    # -- opening -----------------------------------------------------------------------------------------

    def _build_schema(self) -> Any:
        builder = self._tantivy.SchemaBuilder()
        builder.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
        builder.add_unsigned_field("key", stored=False, indexed=False, fast=True)
        builder.add_unsigned_field("seq", stored=False, indexed=False, fast=True)
        builder.add_text_field("ref", stored=True, tokenizer_name="raw", index_option="basic")
        builder.add_text_field("body", stored=False, tokenizer_name=_TOKENIZER, index_option="freq")
        builder.add_json_field("meta", stored=True, fast=True, tokenizer_name="raw", index_option="basic")
        builder.add_bytes_field("payload", stored=True, indexed=False, fast=False)
        return builder.build()

    def _open(self) -> Any:
        tantivy = self._tantivy
        if self.path is None:
            index = tantivy.Index(self._schema)
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            with _folder_lock(self.path):
                manifest = self.path / MANIFEST
                if manifest.exists():
                    _check_manifest(self.path, manifest, self.tokenizer_name)
                else:
                    if any(p.name != _LOCK_FILE for p in self.path.iterdir()):
                        raise SearchIndexError(f"{self.path} holds files but no {MANIFEST}: it is not a "
                                               "ctx-retrieval BM25 index; pass an empty or new folder",
                                               path=str(self.path))
                    # The manifest first: a crash before the engine's files exist leaves a folder that opens.
                    _write_atomic(manifest, json.dumps({"format": FORMAT, "engine": "tantivy",
                                                        "tokenizer": self.tokenizer_name,
                                                        "analysis": ANALYSIS_VERSIONS.get(self.tokenizer_name)}))
                try:
                    index = tantivy.Index(self._schema, path=str(self.path), reuse=True)
                except (OSError, ValueError) as exc:
                    raise SearchIndexError(f"the BM25 index at {self.path} cannot be opened ({exc}): delete the "
                                           "folder to rebuild it from your vector store", path=str(self.path)) from exc
        analyzer = (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace())
                    .filter(tantivy.Filter.remove_long(_MAX_TOKEN_BYTES)).build())
        index.register_tokenizer(_TOKENIZER, analyzer)
        return index

    def __repr__(self) -> str:
        where = str(self.path) if self.path is not None else "memory"
        return f"BM25Store({where!r}, tokenizer={self.tokenizer_name!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        if self.path is None:
            raise TypeError("an in-memory BM25Store cannot be sent to another process: give it a folder "
                            "(BM25Store(path)) so every process opens the same index")
        return _reopen, (str(self.path), self.tokenizer_name, self.writer_timeout_s)

    # -- writing -----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _writer(self) -> Iterator[Any]:
        """The index writer for one write: in memory, kept; on disk, taken (waiting for another process's) and
        released after its commit, so writers in several processes take turns."""
        with self._lock:
            if self.path is None:
                if self._memory_writer is None:
                    self._memory_writer = self._index.writer(_WRITER_HEAP, 1)
                yield self._memory_writer
                return
            writer = self._acquire()
            try:
                yield writer
            except BaseException:
                writer.rollback()
                raise
            finally:
                writer.wait_merging_threads()  # releases the lock once merges end

    def _acquire(self) -> Any:
        deadline = time.monotonic() + self.writer_timeout_s
        pause = 0.005
        while True:
            try:
                return self._index.writer(_WRITER_HEAP, min(2, os.cpu_count() or 1))
            except ValueError as exc:
                if "LockBusy" not in str(exc):
                    raise SearchIndexError(f"the BM25 index at {self.path} cannot be written ({exc})",
                                           path=str(self.path)) from exc
                if time.monotonic() >= deadline:
                    raise SearchIndexError(f"another process has been writing the BM25 index at {self.path} for over "
                                           f"{self.writer_timeout_s:g} s: raise writer_timeout_s, or stop the other "
                                           "writer", path=str(self.path)) from exc
                time.sleep(pause)
                pause = min(0.25, pause * 2)

    def upsert(self, entries: Iterable[BM25Entry]) -> int:
        """Add chunks, replacing any stored under the same id, in one commit; returns how many were written."""
        entries = list(entries)
        if not entries:
            return 0
        documents = [(entry, self._document(entry, self._next_seq(n))) for n, entry in enumerate(entries)]
        with self._writer() as writer:
            for entry, document in documents:
                writer.delete_documents_by_term("id", entry.id)
                writer.add_document(document)
            writer.commit()
        return len(documents)

    def delete(self, ids: Iterable[str]) -> None:
        """Delete chunks by id (unknown ids are ignored), in one commit."""
        self._delete("id", ids)

    def delete_refs(self, refs: Iterable[str]) -> None:
        """Delete every chunk of these source documents (``BM25Entry.ref``), in one commit."""
        self._delete("ref", refs)

    def _delete(self, field_name: str, values: Iterable[str]) -> None:
        values = [str(v) for v in values]
        if not values:
            return
        with self._writer() as writer:
            for value in values:
                writer.delete_documents_by_term(field_name, value)
            writer.commit()

    def clear(self) -> None:
        """Delete every chunk."""
        with self._writer() as writer:
            writer.delete_all_documents()
            writer.commit()

    def _next_seq(self, offset: int) -> int:
        """The write order, which breaks score ties as an index built in one go would (insertion order), however
        the engine split the writes into segments: nanoseconds, kept increasing within this process."""
        if offset == 0:
            self._seq = max(time.time_ns(), self._seq + 1)
        else:
            self._seq += 1
        return self._seq

    def _document(self, entry: BM25Entry, seq: int) -> Any:
        if not isinstance(entry.id, str) or not entry.id:
            raise InvalidInputError(f"a BM25 entry needs a non-empty string id, not {entry.id!r}")
        if not isinstance(entry.text, str):
            raise InvalidInputError(f"chunk {entry.id!r}: text must be str, not {type(entry.text).__name__}")
        document = self._tantivy.Document()
        document.add_text("id", entry.id)
        document.add_unsigned("key", chunk_key(entry.id))
        document.add_unsigned("seq", seq)
        if entry.ref is not None:
            document.add_text("ref", str(entry.ref))
        document.add_text("body", " ".join(self._tokens(entry.text)))
        document.add_json("meta", json.dumps(_filterable(entry.metadata), ensure_ascii=False))
        document.add_bytes("payload", bytes(entry.payload))
        return document

    def _tokens(self, text: str) -> list[str]:
        # Our tokens hold no whitespace; a callable's might: keep each one whole.
        return ["_".join(t.split()) for t in self._tokenize(text) if t and not t.isspace()]

    # -- reading -----------------------------------------------------------------------------------------

    def _searcher(self) -> Any:
        self._index.reload()  # what any process committed (a cheap check when nothing changed)
        return self._index.searcher()

    def __len__(self) -> int:
        return int(self._searcher().num_docs)

    def search(self, query: str, k: int = 10, *, where: Mapping[str, Any] | None = None,
               keep: Callable[[StoredEntry], bool] | None = None) -> BM25Results:
        """The ``k`` best chunks for ``query``, best first; chunks without any query term are not returned.

        ``where`` (a filter in the vector stores' ``where`` syntax, ``ctx_retrieval.retrieval.filters``) and
        ``keep`` (a predicate on each stored chunk) restrict the search: the ``k`` best among the chunks that
        pass, not a filtered top ``k``."""
        tantivy = self._tantivy
        terms = self._tokens(query)
        if not terms or k <= 0:
            return BM25Results([], [])
        text_query = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(self._schema, "body", t)) for t in terms])
        predicate = keep
        if where:
            try:
                restriction = _WhereQuery(tantivy, self._schema, self._index)(where)
            except _NotExpressibleError:
                matches = compile_where(where)
                predicate = (lambda e: matches(e.metadata) and keep(e)) if keep else (lambda e: matches(e.metadata))
            else:
                text_query = tantivy.Query.boolean_query([
                    (tantivy.Occur.Must, text_query),
                    (tantivy.Occur.Must, tantivy.Query.const_score_query(restriction, 0.0))])
        searcher = self._searcher()
        if predicate is None:
            return self._search_stable(searcher, text_query, k)
        return self._search_kept(searcher, text_query, k, predicate)

    def _search_stable(self, searcher: Any, query: Any, k: int) -> BM25Results:
        """The top ``k`` with ties broken by write order (as an index built in one go breaks them), not by where
        the engine keeps each chunk (its segments depend on how the index was written: one commit or many,
        merges), so indexes holding the same chunks written in the same order rank them the same. Chunks tied with
        the k-th are all read before the cut."""
        limit = k + 1
        while True:
            hits = searcher.search(query, limit, count=False).hits
            if len(hits) < limit or hits[k - 1][0] != hits[-1][0]:
                break
            limit *= 2
        addresses = [address for _, address in hits]
        if not addresses:
            return BM25Results([], [])
        keys = searcher.fast_field_values("key", addresses)
        seqs = searcher.fast_field_values("seq", addresses)
        order = sorted(range(len(hits)), key=lambda n: (-hits[n][0], seqs[n]))[:k]
        return BM25Results([keys[n] for n in order], [float(hits[n][0]) for n in order], searcher,
                           [addresses[n] for n in order])

    def _search_kept(self, searcher: Any, query: Any, k: int, keep: Callable[[StoredEntry], bool]) -> BM25Results:
        """The best ``k`` that pass ``keep``: read ever deeper (4x each time) until ``k`` pass or nothing is left."""
        limit = 4 * k
        while True:
            hits = searcher.search(query, limit, count=False).hits
            seqs = searcher.fast_field_values("seq", [a for _, a in hits]) if hits else []
            kept = [(score, seq, e) for score, seq, e in
                    ((s, q, _entry(searcher.doc(a))) for (s, a), q in zip(hits, seqs, strict=True)) if keep(e)]
            if (len(kept) > k and kept[k - 1][0] != kept[-1][0]) or len(hits) < limit:
                kept = sorted(kept, key=lambda found: (-found[0], found[1]))[:k]
                return BM25Results([chunk_key(e.id) for _, _, e in kept], [float(s) for s, _, _ in kept],
                                   entries=[e for _, _, e in kept])
            limit *= 4

    def get(self, ids: Iterable[str]) -> dict[str, StoredEntry]:
        """The stored chunks with these ids (missing ones are left out)."""
        tantivy = self._tantivy
        wanted = list(dict.fromkeys(str(i) for i in ids))
        if not wanted:
            return {}
        searcher = self._searcher()
        found: dict[str, StoredEntry] = {}
        for start in range(0, len(wanted), 1024):
            part = wanted[start:start + 1024]
            query = tantivy.Query.term_set_query(self._schema, "id", part)
            for _, address in searcher.search(query, len(part), count=False).hits:
                entry = _entry(searcher.doc(address))
                found[entry.id] = entry
        return {i: found[i] for i in wanted if i in found}

    def entries(self) -> list[StoredEntry]:
        """Every stored chunk, in one pass over the index (reads it whole)."""
        searcher = self._searcher()
        total = int(searcher.num_docs)
        if not total:
            return []
        hits = searcher.search(self._tantivy.Query.all_query(), total, count=False).hits
        return [_entry(searcher.doc(address)) for _, address in hits]

    def ids(self) -> list[str]:
        """Every stored chunk id (for reconciling with a vector store; reads the whole index)."""
        return [entry.id for entry in self.entries()]


class _WhereQuery:
    """A ``where`` filter as an engine query; ``_NotExpressibleError`` for what the engine cannot express (ranges
    over strings, keys with dots or spaces...), which is then evaluated on each candidate's stored metadata."""

    def __init__(self, tantivy: Any, schema: Any, index: Any) -> None:
        self.tantivy, self.schema, self.index = tantivy, schema, index

    def __call__(self, where: Mapping[str, Any]) -> Any:
        compile_where(where)  # malformed filters fail here, with the filter module's message
        tantivy = self.tantivy
        clauses = []
        for key, condition in where.items():
            if key in ("$and", "$or"):
                parts = [self(part) for part in condition]
                occur = tantivy.Occur.Must if key == "$and" else tantivy.Occur.Should
                clauses.append(tantivy.Query.boolean_query([(occur, part) for part in parts]))
            elif isinstance(condition, Mapping):
                clauses.extend(self._condition(key, operator, want) for operator, want in condition.items())
            else:
                clauses.append(self._condition(key, "$eq", condition))
        if len(clauses) == 1:
            return clauses[0]
        return tantivy.Query.boolean_query([(tantivy.Occur.Must, clause) for clause in clauses])

    def _condition(self, key: str, operator: str, want: Any) -> Any:
        tantivy = self.tantivy
        if not key or not set(key) <= _SAFE_KEY:
            raise _NotExpressibleError
        path = f"meta.{key}"
        if operator in ("$eq", "$ne"):
            match = self._term(path, want)
            return match if operator == "$eq" else _all_but(tantivy, match)
        if operator in ("$in", "$nin"):
            values = list(want)
            if not values:
                nothing = tantivy.Query.empty_query()
                return nothing if operator == "$in" else tantivy.Query.all_query()
            match = tantivy.Query.boolean_query([(tantivy.Occur.Should, self._term(path, v)) for v in values])
            return match if operator == "$in" else _all_but(tantivy, match)
        if not isinstance(want, (int, float)) or isinstance(want, bool) or not math.isfinite(want):
            raise _NotExpressibleError  # ranges over strings, dates, booleans: compared in Python
        symbol = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[operator]
        return self.index.parse_query(f"{path}:{symbol}{want!r}", [])

    def _term(self, path: str, value: Any) -> Any:
        if isinstance(value, str) and len(value) > _FILTERABLE_CHARS:
            raise _NotExpressibleError
        if not isinstance(value, (str, int, float, bool)) or (isinstance(value, float) and not math.isfinite(value)):
            raise _NotExpressibleError
        return self.tantivy.Query.term_query(self.schema, path, value)


def _check_manifest(folder: Path, manifest: Path, tokenizer_name: str) -> None:
    """Refuse a folder that is not ours, of another format, or built with other tokens."""
    try:
        meta = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SearchIndexError(f"{manifest} cannot be read ({exc}): delete the folder to rebuild the index",
                               path=str(folder)) from exc
    if meta.get("format") != FORMAT or meta.get("engine") != "tantivy":
        raise SearchIndexError(f"{folder} holds a BM25 index of format {meta.get('format')!r} "
                               f"({meta.get('engine')}); this version reads format {FORMAT}: delete the folder to "
                               "rebuild it", path=str(folder))
    if meta.get("tokenizer") == tokenizer_name and meta.get("analysis") != ANALYSIS_VERSIONS.get(
            tokenizer_name):
        raise SearchIndexError(f"{folder} was built with version {meta.get('analysis')} of the "
                               f"{tokenizer_name!r} tokenizer; this version tokenizes as version "
                               f"{ANALYSIS_VERSIONS.get(tokenizer_name)}: delete the folder to rebuild the "
                               "index (queries and index must be analysed alike)", path=str(folder))
    if meta.get("tokenizer") != tokenizer_name:
        raise SearchIndexError(f"{folder} was built with the {meta.get('tokenizer')!r} tokenizer, not "
                               f"{tokenizer_name!r}: pass tokenizer={meta.get('tokenizer')!r}, or delete the "
                               "folder to rebuild it with the new one", path=str(folder))


def _all_but(tantivy: Any, match: Any) -> Any:
    # Chunks without the key pass $ne / $nin, as in the filter module (and Chroma).
    return tantivy.Query.boolean_query([(tantivy.Occur.Must, tantivy.Query.all_query()),
                                        (tantivy.Occur.MustNot, match)])


def _filterable(metadata: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if isinstance(value, bool) or (isinstance(value, (int, float)) and math.isfinite(value)):
            if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
                continue  # beyond a 64-bit integer: filters cannot compare it
            out[str(key)] = value
        elif isinstance(value, str) and len(value) <= _FILTERABLE_CHARS:
            out[str(key)] = value
    return out


def _callable_name(tokenizer: Callable[[str], list[str]]) -> str:
    for name, known in TOKENIZERS.items():
        if tokenizer is known:
            return name
    return f"{getattr(tokenizer, '__module__', '?')}.{getattr(tokenizer, '__qualname__', repr(tokenizer))}"


def _reopen(path: str, tokenizer: str, writer_timeout_s: float) -> BM25Store:
    if tokenizer not in TOKENIZERS:
        import importlib

        module, _, name = tokenizer.rpartition(".")
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
        return BM25Store(path, tokenizer=found, writer_timeout_s=writer_timeout_s)
    return BM25Store(path, tokenizer=tokenizer, writer_timeout_s=writer_timeout_s)


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Serializes creating the index in ``folder`` between processes (two ingestion jobs starting together)."""
    with open(folder / _LOCK_FILE, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_atomic(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
