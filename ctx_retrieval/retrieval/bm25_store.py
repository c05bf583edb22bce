"""The contextual BM25 index that lives beside a vector store: on disk, updated in place, read by many processes.

A folder (or memory, for one process) holding every chunk's indexed text (context + chunk), its id, its source
document, its filterable metadata, how many vector-store rows hold it (1, or its windows) and an opaque payload
(the framework's serialized document or node, so a chunk found by BM25 alone comes back whole). Adding, replacing
and deleting chunks writes a new segment and marks deletions, never rebuilds; any number of processes open the
folder without re-tokenizing anything, and each sees the last committed write at its next query. Writers take turns
(one at a time, across processes; a busy writer is waited for up to ``writer_timeout_s``).

The engine is tantivy (segments, deletions, background merges, a writer lock, memory-mapped readers), chosen over
our numpy index with segments and over SQLite postings by measurement (``benchmarks/bm25_backends.py``): at 1M
chunks it answers in a third of the time of an exhaustive numpy scoring (block-max WAND), and it ranks like the
numpy index and bm25s (the same failure@20 on the cookbook dev queries). It is fed the core's tokens (identifier
splitting by default, or any callable), so tokenization is ours and the same for every language.
Scoring is BM25 with Lucene's idf, k1=1.2, b=0.75 (tantivy's; document lengths quantized to 256 levels).

Filters give exactly what ``ctx_retrieval.retrieval.filters`` gives on the stored metadata: strings are matched as
terms; every number and boolean is also indexed as a float (``nums``), so a numeric bound compares with ints, floats
and booleans alike (``True == 1``, as in Python); a bound the float index cannot decide exactly (beyond 2**53, not a
float) and anything else the engine cannot express is evaluated on each candidate's stored metadata.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import math
import numbers
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from ctx_retrieval._optional import require
from ctx_retrieval.errors import InvalidInputError, SearchIndexError
from ctx_retrieval.language import corpus_languages
from ctx_retrieval.retrieval.bm25 import ANALYSIS_VERSIONS, TOKENIZERS, analyser, compound_words
from ctx_retrieval.retrieval.filters import compile_where
from ctx_retrieval.retrieval.fusion import chunk_key
from ctx_retrieval.retrieval.stemming import Compounds, compounding, recorded_languages, said, stemmed_in

logger = logging.getLogger(__name__)

FORMAT = 3  # 2: a write-order field that breaks score ties; 3: numbers as floats, row counts, hashed long terms
MANIFEST = "ctx_bm25.json"
_ENGINE_META = "meta.json"  # tantivy's own list of segments: without it the engine would start an empty index
_LOCK_FILE = ".ctx_bm25.lock"
_TOKENIZER = "ctx_tokens"  # tantivy's name for our pre-tokenized text: split on the spaces we join tokens with
_MAX_TOKEN_BYTES = 255  # longer tokens (base64 blobs, minified code) are dropped, as the engine cannot index them
_MAX_TERM_BYTES = 1024  # longer ids and refs are indexed by their digest (the engine's terms end at 65,530 bytes)
_FILTERABLE_CHARS = 256  # string metadata longer than this is kept in the payload but not indexed for filters
_EXACT_FLOAT = 2.0**53  # floats hold every integer below this, so a bound under it compares exactly
_WRITER_HEAP = 64_000_000
_SPACE = re.compile(r"\s")
_VERSION_KEY = "ctx_text_version"  # kept beside the filterable metadata (no schema change), read back apart
_HELD_KEPT = 200_000  # ids remembered as held per searcher (about 20 MB at most)
_BATCH = 5000  # documents built and handed to the writer at a time (a million chunks never sit in memory at once)
_WORDS = "compound_words.txt"  # the words a German index splits compounds into (learnt from its first chunks)
_SAFE_KEY = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_DISK_ERRORS = ("No space left", "Disk quota", "File too large", "os error 28", "os error 27", "os error 122")


@dataclass(frozen=True)
class BM25Entry:
    """One chunk to index: ``text`` is what BM25 reads (context + chunk); ``ref`` its source document (for
    ``delete_refs``); ``metadata`` what filters see (scalars; longer strings are not indexed); ``rows`` how many
    vector-store rows hold the chunk (its windows); ``payload`` what a hit returns (the adapter's serialized item)."""

    id: str
    text: str
    ref: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    payload: bytes = b""
    rows: int = 1


@dataclass(frozen=True)
class StoredEntry:
    """A stored chunk, as ``get`` and ``BM25Results.entries`` return it."""

    id: str
    ref: str | None
    metadata: dict[str, Any]
    payload: bytes
    rows: int = 1
    version: str | None = None  # ``text_version`` of the text indexed (None: written before versions were kept)


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


def text_version(text: str) -> str:
    """A short digest of a chunk's indexed text: what tells two versions of one chunk apart."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _entry(document: Any) -> StoredEntry:
    fields = document.to_dict()
    meta = dict((fields.get("meta") or [{}])[0])
    version = meta.pop(_VERSION_KEY, None)
    ref = fields.get("ref") or [None]
    payload = fields.get("payload") or [b""]
    rows = fields.get("rows") or [1]
    return StoredEntry(fields["id"][0], ref[0], meta, bytes(payload[0]), int(rows[0]),
                       version if isinstance(version, str) else None)


def _term(value: str) -> str:
    """The indexed term of an id or a ref: itself, or for a long one its digest (stored in full either way)."""
    if len(value) * 4 <= _MAX_TERM_BYTES:  # a UTF-8 character is at most 4 bytes
        return value
    data = value.encode("utf-8")
    return value if len(data) <= _MAX_TERM_BYTES else "sha256:" + hashlib.sha256(data).hexdigest()


def _checked_text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"a BM25 entry needs a non-empty string {what}, not {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"the {what} {value.encode('utf-8', 'backslashreplace').decode()[:80]!r} holds a "
                                "lone surrogate (text decoded wrongly): read the source with errors='replace'",
                                chunk_id=value if what == "id" else None) from None
    return value


class _NotExpressibleError(Exception):
    """A filter the engine cannot express: it is evaluated on each candidate's stored metadata instead."""


class BM25Store:
    """Contextual BM25 on disk (``path``) or in memory (``path=None``, one process), updated in place.

    Key init args:
        path: the folder (created if missing); ``None`` keeps the index in memory.
        tokenizer: ``"identifiers"`` (default), ``"folded"``, ``"thai"``, ``"parts"``, or a callable ``text ->
            tokens``; a folder remembers the tokenizer it was built with and refuses another.
        language: the Latin-script languages words are stemmed in, chunks and queries alike (``"german"``, or
            several: ``("german", "french")``; ``None``: none, as English and code); ``"auto"`` (default): detected
            from the first chunks written (``ctx_retrieval.language.corpus_languages``). A folder remembers them.
        writer_timeout_s: how long a write waits for another process's writer before ``SearchIndexError``.
        owner: what wrote the folder's payloads (a framework's item format and the embedding layout); a folder
            written by another owner is refused, so two adapters never read each other's payloads.

    Use:
        .. code-block:: python

            store = BM25Store("index/bm25")
            store.upsert([BM25Entry("c1", "Acme's Q2 2023 report. Revenue grew 3%.", ref="acme-q2")])
            results = store.search("acme revenue", k=20, where={"year": {"$gte": 2023}})
            store.delete(["c1"]); store.delete_refs(["acme-q2"])
    """

    def __init__(self, path: str | Path | None = None, *, tokenizer: str | Callable[[str], list[str]] = "identifiers",
                 language: str | Sequence[str] | None = "auto", writer_timeout_s: float = 30.0,
                 owner: Mapping[str, str] | None = None) -> None:
        self._tantivy = require("tantivy", "bm25")
        self.path = Path(path) if path is not None else None
        self.tokenizer_name = tokenizer if isinstance(tokenizer, str) else _callable_name(tokenizer)
        self._tokenizer = tokenizer
        self._asked = None if language == "auto" else stemmed_in(language)
        self._decided = False  # the languages and compound words are final once the first write (or the folder) says
        self._tokenize = self._analysis(self._asked)  # an unknown tokenizer is refused here, not at the first write
        self.writer_timeout_s = writer_timeout_s
        self.owner = dict(owner) if owner else None
        self._lock = threading.Lock()  # one writer per process at a time; readers need no lock
        self._memory_writer: Any = None
        self._seq = 0
        self._commits = 0  # this object's commits: an in-memory index changes only through them
        self._stamp: Any = None
        self._cached: Any = None
        self._held: set[str] = set()  # ids this searcher was found to hold (cleared with it: a commit may delete)
        self._schema = self._build_schema()
        self._index = self._open()

    # -- opening -----------------------------------------------------------------------------------------

    def _build_schema(self) -> Any:
        builder = self._tantivy.SchemaBuilder()
        builder.add_text_field("id", stored=True, index_option="basic", tokenizer_name="raw", fast=False)
        builder.add_text_field("id_term", stored=False, tokenizer_name="raw", index_option="basic")
        builder.add_unsigned_field("key", stored=False, indexed=False, fast=True)
        builder.add_unsigned_field("seq", stored=False, indexed=False, fast=True)
        builder.add_unsigned_field("rows", stored=True, indexed=False, fast=False)
        builder.add_text_field("ref", stored=True, tokenizer_name="raw", index_option="basic")
        builder.add_text_field("ref_term", stored=False, tokenizer_name="raw", index_option="basic")
        builder.add_text_field("body", stored=False, tokenizer_name=_TOKENIZER, index_option="freq")
        builder.add_json_field("meta", stored=True, fast=True, tokenizer_name="raw", index_option="basic")
        builder.add_json_field("nums", stored=False, fast=True, tokenizer_name="raw", index_option="basic")
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
                meta = _check_manifest(self.path, manifest, self.tokenizer_name, self.owner) if manifest.exists() \
                    else None
                if meta is None:
                    if any(p.name != _LOCK_FILE and not p.name.startswith(".") for p in self.path.iterdir()):
                        raise SearchIndexError(f"{self.path} holds files but no {MANIFEST}: it is not a "
                                               "ctx-retrieval BM25 index; pass an empty or new folder",
                                               path=str(self.path))
                    # The manifest first: a crash before the engine's files exist leaves a folder that opens.
                    meta = {"format": FORMAT, "engine": "tantivy", "tokenizer": self.tokenizer_name,
                            "analysis": ANALYSIS_VERSIONS.get(self.tokenizer_name), "engine_files": False,
                            **({"owner": self.owner} if self.owner else {})}
                    _write_atomic(manifest, json.dumps(meta))
                else:
                    self._adopt(meta)
                    if meta.get("engine_files") and not (self.path / _ENGINE_META).exists():
                        raise SearchIndexError(f"{self.path} lost the engine's {_ENGINE_META} (its list of segments): "
                                               "the index cannot be read; delete the folder to rebuild it from your "
                                               "vector store (the next open refills it)", path=str(self.path))
                try:
                    index = tantivy.Index(self._schema, path=str(self.path), reuse=True)
                except (OSError, ValueError) as exc:
                    raise SearchIndexError(f"the BM25 index at {self.path} cannot be opened ({exc}): delete the "
                                           "folder to rebuild it from your vector store", path=str(self.path)) from exc
                updates = {k: v for k, v in (("engine_files", True), ("owner", self.owner)) if v and not meta.get(k)}
                if updates:  # the engine's files exist now; an owner-less folder is claimed by its first owner
                    _write_atomic(manifest, json.dumps({**meta, **updates}))
        analyzer = (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace())
                    .filter(tantivy.Filter.remove_long(_MAX_TOKEN_BYTES)).build())
        index.register_tokenizer(_TOKENIZER, analyzer)
        return index

    def _analysis(self, languages: tuple[str, ...] | None, words: frozenset[str] = frozenset()
                  ) -> Callable[[str], list[str]]:
        """What every text is analysed with once the index's languages (and the words its compounds split into)
        are known; before, none is stemmed, and nothing is indexed yet."""
        self.languages = languages
        return analyser(self._tokenizer, languages or (), Compounds(words) if words else None)

    def _words(self, languages: tuple[str, ...]) -> frozenset[str]:
        """The compound words a folder learnt with its languages (none where they do not compound)."""
        if self.path is None or not compounding(languages):
            return frozenset()
        try:
            return frozenset((self.path / _WORDS).read_text(encoding="utf-8").split())
        except OSError as exc:
            raise SearchIndexError(f"{self.path} lost {_WORDS}, the words its German compounds were split into "
                                   f"({exc}): delete the folder to rebuild it", path=str(self.path)) from exc

    def _adopt(self, meta: Mapping[str, Any]) -> None:
        """The languages (and compound words) a folder was built with, checked against those asked for."""
        recorded = recorded_languages(meta.get("languages"), self._asked, str(self.path))
        if recorded is not None:
            self._tokenize = self._analysis(recorded, self._words(recorded))
            self._decided = True

    def _decide(self, texts: Sequence[str]) -> None:
        """The first write of an ``"auto"`` index decides its languages from its chunks and records them; another
        process that decided first wins (its chunks are already analysed so)."""
        found = corpus_languages(texts) if self._asked is None else self._asked
        words = compound_words(texts, found)
        if self.path is None:
            self._tokenize = self._analysis(found, words)
            self._decided = True
            return
        with _folder_lock(self.path):
            manifest = self.path / MANIFEST
            meta = json.loads(manifest.read_text(encoding="utf-8"))
            if meta.get("languages") is None:
                if words:  # before the manifest names the languages: a reader that sees them finds the words
                    _write_atomic(self.path / _WORDS, "\n".join(sorted(words)))
                _write_atomic(manifest, json.dumps({**meta, "languages": list(found)}))
                meta["languages"] = list(found)
            self._adopt(meta)
        logger.info("BM25 index at %s stems %s (%s), %d compound words learnt", self.path, said(self.languages or ()),
                    "as asked" if self._asked is not None else f"detected from its first {len(texts)} chunks",
                    len(words))

    def __repr__(self) -> str:
        where = str(self.path) if self.path is not None else "memory"
        return f"BM25Store({where!r}, tokenizer={self.tokenizer_name!r}, languages={self.languages!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        if self.path is None:
            raise TypeError("an in-memory BM25Store cannot be sent to another process: give it a folder "
                            "(BM25Store(path)) so every process opens the same index")
        return _reopen, (str(self.path), self.tokenizer_name, self.writer_timeout_s, self.owner)

    # -- writing -----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _writer(self) -> Iterator[Any]:
        """The index writer for one write: in memory, kept; on disk, taken (waiting for another process's) and
        released after its commit, so writers in several processes take turns. A full disk is a
        ``SearchIndexError`` that says so (the engine reports it from a writer thread as a bare ``ValueError``)."""
        with self._lock:
            try:
                if self.path is None:
                    if self._memory_writer is None:
                        self._memory_writer = self._index.writer(_WRITER_HEAP, 1)
                    try:
                        yield self._memory_writer
                    finally:
                        self._commits += 1
                    return
                writer = self._acquire()
                self._commits += 1
                try:
                    yield writer
                except BaseException:
                    with contextlib.suppress(Exception):
                        writer.rollback()
                    raise
                finally:
                    with contextlib.suppress(Exception):
                        writer.wait_merging_threads()  # releases the lock once merges end
            except (OSError, ValueError) as exc:
                if self._disk_full(exc):
                    raise SearchIndexError(f"the disk holding the BM25 index at {self.path} is full ({exc}): free "
                                           "space there (or move the index to another disk: bm25=another folder); "
                                           "nothing of this write was committed", path=str(self.path)) from exc
                if isinstance(exc, SearchIndexError):
                    raise
                raise SearchIndexError(f"the BM25 index at {self.path or 'memory'} cannot be written ({exc})",
                                       path=str(self.path)) from exc

    def _disk_full(self, exc: BaseException) -> bool:
        """Whether a failed write ran out of disk: the error says so, or a writer thread died (the engine then says
        only that) where the folder's disk has less room left than one writer's buffer."""
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            return True
        if any(marker in str(exc) for marker in _DISK_ERRORS):
            return True
        if self.path is not None and "killed" in str(exc):
            with contextlib.suppress(OSError):
                return shutil.disk_usage(self.path).free < _WRITER_HEAP
        return False

    def _acquire(self) -> Any:
        deadline = time.monotonic() + self.writer_timeout_s
        pause = 0.005
        while True:
            try:
                return self._index.writer(_WRITER_HEAP, min(2, os.cpu_count() or 1))
            except ValueError as exc:
                if "LockBusy" not in str(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise SearchIndexError(f"another process has been writing the BM25 index at {self.path} for over "
                                           f"{self.writer_timeout_s:g} s: raise writer_timeout_s, or stop the other "
                                           "writer", path=str(self.path)) from exc
                time.sleep(pause)
                pause = min(0.25, pause * 2)

    def upsert(self, entries: Iterable[BM25Entry]) -> int:
        """Add chunks, replacing any stored under the same id, in one commit; returns how many were written.
        Entries are read a batch at a time, so an iterator of a million chunks never sits in memory whole."""
        iterator = iter(entries)
        first = list(_take(iterator, _BATCH))
        if not first:
            return 0
        if not self._decided:
            self._decide([entry.text for entry in first if isinstance(entry.text, str)])
        written = 0
        batch = [(entry, self._document(entry, self._next_seq(n))) for n, entry in enumerate(first)]
        with self._writer() as writer:
            while batch:
                for entry, document in batch:
                    writer.delete_documents_by_term("id_term", _term(entry.id))
                    writer.add_document(document)
                written += len(batch)
                batch = [(entry, self._document(entry, self._next_seq(1))) for entry in _take(iterator, _BATCH)]
            writer.commit()
        return written

    def delete(self, ids: Iterable[str]) -> None:
        """Delete chunks by id (unknown ids are ignored), in one commit."""
        self._delete("id_term", ids)

    def delete_refs(self, refs: Iterable[str]) -> None:
        """Delete every chunk of these source documents (``BM25Entry.ref``), in one commit."""
        self._delete("ref_term", refs)

    def _delete(self, field_name: str, values: Iterable[str]) -> None:
        terms = [_term(str(v)) for v in values]
        if not terms:
            return
        with self._writer() as writer:
            for term in terms:
                writer.delete_documents_by_term(field_name, term)
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
        chunk_id = _checked_text(entry.id, "id")
        if not isinstance(entry.text, str):
            raise InvalidInputError(f"chunk {entry.id!r}: text must be str, not {type(entry.text).__name__}",
                                    chunk_id=chunk_id)
        document = self._tantivy.Document()
        document.add_text("id", chunk_id)
        document.add_text("id_term", _term(chunk_id))
        document.add_unsigned("key", chunk_key(chunk_id))
        document.add_unsigned("seq", seq)
        document.add_unsigned("rows", max(1, int(entry.rows)))
        if entry.ref is not None:
            ref = _checked_text(str(entry.ref), "ref")
            document.add_text("ref", ref)
            document.add_text("ref_term", _term(ref))
        document.add_text("body", " ".join(self._tokens(entry.text)))
        filterable = _filterable(entry.metadata)
        document.add_json("meta", json.dumps({**filterable, _VERSION_KEY: text_version(entry.text)},
                                             ensure_ascii=False))
        document.add_json("nums", json.dumps({k: float(v) for k, v in filterable.items() if not isinstance(v, str)}))
        document.add_bytes("payload", bytes(entry.payload))
        return document

    def _tokens(self, text: str) -> list[str]:
        # Our tokens hold no whitespace; a callable's might: keep each one whole. A lone surrogate (text decoded
        # wrongly) cannot enter the engine: it reads as U+FFFD, in the index and in queries alike.
        tokens = self._tokenize(text)
        joined = "".join(tokens)
        if all(tokens) and not _SPACE.search(joined) and _encodable(joined):
            return tokens  # what follows would return them as they are (checked on the whole, once)
        tokens = ["_".join(t.split()) for t in tokens if t and not t.isspace()]
        return [t.encode("utf-8", "replace").decode("utf-8") if not _encodable(t) else t for t in tokens]

    # -- reading -----------------------------------------------------------------------------------------

    def _searcher(self) -> Any:
        """A searcher over the last commit of any process: the engine reloads only when its segment list changed
        (a stat of ``meta.json``: reloading costs 0.1-0.2 ms even when nothing changed, three times a query)."""
        if self.path is None:
            stamp: Any = self._commits
        else:
            try:
                found = os.stat(self.path / _ENGINE_META)
                stamp = (found.st_mtime_ns, found.st_size, found.st_ino)
            except OSError:
                stamp = None
        if stamp is None or stamp != self._stamp or self._cached is None:
            if not self._decided and self.path is not None:  # another process's first write decides them
                with contextlib.suppress(OSError, ValueError):
                    self._adopt(json.loads((self.path / MANIFEST).read_text(encoding="utf-8")))
            self._index.reload()
            self._cached, self._stamp = self._index.searcher(), stamp
            self._held = set()
        return self._cached

    def __len__(self) -> int:
        return int(self._searcher().num_docs)

    def search(self, query: str, k: int = 10, *, where: Mapping[str, Any] | None = None,
               keep: Callable[[StoredEntry], bool] | None = None) -> BM25Results:
        """The ``k`` best chunks for ``query``, best first; chunks without any query term are not returned.

        ``where`` (a filter in the vector stores' ``where`` syntax, ``ctx_retrieval.retrieval.filters``) and
        ``keep`` (a predicate on each stored chunk) restrict the search: the ``k`` best among the chunks that
        pass, not a filtered top ``k``. ``k`` beyond the index's size is the index's size."""
        tantivy = self._tantivy
        terms = self._tokens(query)
        searcher = self._searcher()
        k = min(int(k), int(searcher.num_docs))
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
        try:
            if predicate is None:
                return self._search_stable(searcher, text_query, k)
            return self._search_kept(searcher, text_query, k, predicate)
        except ValueError as exc:
            if "corrupt" not in str(exc).lower():
                raise
            raise SearchIndexError(f"the BM25 index at {self.path} is damaged ({exc}): delete its files but the "
                                   "pairing journal (.pairing) and open the store again: the next open refills it "
                                   "from the vector store", path=str(self.path)) from exc

    def _search_stable(self, searcher: Any, query: Any, k: int) -> BM25Results:
        """The top ``k`` with ties broken by write order (as an index built in one go breaks them), not by where
        the engine keeps each chunk (its segments depend on how the index was written: one commit or many,
        merges), so indexes holding the same chunks written in the same order rank them the same. Chunks tied with
        the k-th are all read before the cut."""
        limit = k + 1
        total = int(searcher.num_docs)
        while True:
            hits = searcher.search(query, limit, count=False).hits
            if len(hits) < limit or hits[k - 1][0] != hits[-1][0] or limit > total:
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
        total = int(searcher.num_docs)
        while True:
            hits = searcher.search(query, min(limit, total), count=False).hits
            seqs = searcher.fast_field_values("seq", [a for _, a in hits]) if hits else []
            kept = [(score, seq, e) for score, seq, e in
                    ((s, q, _entry(searcher.doc(a))) for (s, a), q in zip(hits, seqs, strict=True)) if keep(e)]
            if (len(kept) > k and kept[k - 1][0] != kept[-1][0]) or len(hits) < limit or limit >= total:
                kept = sorted(kept, key=lambda found: (-found[0], found[1]))[:k]
                return BM25Results([chunk_key(e.id) for _, _, e in kept], [float(s) for s, _, _ in kept],
                                   entries=[e for _, _, e in kept])
            limit *= 4

    def _matching(self, searcher: Any, field_name: str, values: Sequence[str]) -> list[Any]:
        """The addresses of the documents whose ``field_name`` term is one of ``values``: a term query each (ten
        of them cost a tenth of one term-set query of ten in the engine's Python binding)."""
        tantivy, schema = self._tantivy, self._schema
        limit = 1 if field_name == "id_term" else max(1, int(searcher.num_docs))
        return [address for value in values for _, address in searcher.search(
            tantivy.Query.term_query(schema, field_name, _term(value)), limit, count=False).hits]

    def get(self, ids: Iterable[str]) -> dict[str, StoredEntry]:
        """The stored chunks with these ids (missing ones are left out)."""
        wanted = list(dict.fromkeys(str(i) for i in ids))
        if not wanted:
            return {}
        searcher = self._searcher()
        found = {e.id: e for e in (_entry(searcher.doc(a)) for a in self._matching(searcher, "id_term", wanted))}
        return {i: found[i] for i in wanted if i in found}

    def held(self, ids: Iterable[str]) -> set[str]:
        """Which of these ids the index holds, from the term dictionary alone (no search, no document read; a chunk
        deleted since the engine last merged its segment still counts, until the merge)."""
        searcher = self._searcher()
        known = self._held  # a query asks about the vector side's candidates, which recur from query to query
        found = {i for i in dict.fromkeys(str(i) for i in ids) if i in known or searcher.doc_freq("id_term", _term(i))}
        if len(known) < _HELD_KEPT:
            known.update(found)
        return found

    def ids_of_refs(self, refs: Iterable[str]) -> list[str]:
        """The ids of every chunk of these source documents."""
        wanted = list(dict.fromkeys(str(r) for r in refs))
        if not wanted:
            return []
        searcher = self._searcher()
        return [str(searcher.doc(a)["id"][0]) for a in self._matching(searcher, "ref_term", wanted)]

    def iter_entries(self, batch: int = _BATCH) -> Iterator[StoredEntry]:
        """Every stored chunk, a batch at a time (the searcher is a snapshot: writes meanwhile are not seen)."""
        searcher = self._searcher()
        total = int(searcher.num_docs)
        if not total:
            return
        hits = searcher.search(self._tantivy.Query.all_query(), total, count=False).hits
        for start in range(0, len(hits), batch):
            yield from (_entry(searcher.doc(address)) for _, address in hits[start:start + batch])

    def entries(self) -> list[StoredEntry]:
        """Every stored chunk (reads the index whole)."""
        return list(self.iter_entries())

    def ids(self) -> list[str]:
        """Every stored chunk id (for reconciling with a vector store)."""
        searcher = self._searcher()
        total = int(searcher.num_docs)
        if not total:
            return []
        hits = searcher.search(self._tantivy.Query.all_query(), total, count=False).hits
        return [str(searcher.doc(address)["id"][0]) for _, address in hits]


class _WhereQuery:
    """A ``where`` filter as an engine query; ``_NotExpressibleError`` for what the engine cannot express (ranges
    over strings, keys with dots or spaces, bounds a float cannot hold exactly...), which is then evaluated on each
    candidate's stored metadata."""

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
        if operator in ("$eq", "$ne"):
            match = self._equal(key, want)
            return match if operator == "$eq" else _all_but(tantivy, match)
        if operator in ("$in", "$nin"):
            values = list(want)
            if not values:
                nothing = tantivy.Query.empty_query()
                return nothing if operator == "$in" else tantivy.Query.all_query()
            match = tantivy.Query.boolean_query([(tantivy.Occur.Should, self._equal(key, v)) for v in values])
            return match if operator == "$in" else _all_but(tantivy, match)
        symbol = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[operator]
        return self.index.parse_query(f"nums.{key}:{symbol}{_float_literal(want)}", [])

    def _equal(self, key: str, value: Any) -> Any:
        if isinstance(value, str):
            if len(value) > _FILTERABLE_CHARS or not _encodable(value):
                raise _NotExpressibleError
            return self.tantivy.Query.term_query(self.schema, f"meta.{key}", value)
        literal = _float_literal(value)  # numbers and booleans: equal as Python compares them (True == 1 == 1.0)
        return self.index.parse_query(f"nums.{key}:[{literal} TO {literal}]", [])


def _float_literal(value: Any) -> str:
    """``value`` as the engine's float literal, when a float comparison decides exactly what Python's would:
    a real number a float holds exactly, below 2**53 in size (so no stored integer rounds across it)."""
    if not isinstance(value, numbers.Real):
        raise _NotExpressibleError  # strings, dates, None: compared in Python
    try:
        as_float = float(value)
    except (OverflowError, ValueError):
        raise _NotExpressibleError from None
    if not math.isfinite(as_float) or as_float != value or abs(as_float) >= _EXACT_FLOAT:
        raise _NotExpressibleError
    text = format(Decimal(as_float), "f")  # the float's exact decimal expansion, never an exponent
    return text if "." in text else text + ".0"


def _check_manifest(folder: Path, manifest: Path, tokenizer_name: str,
                    owner: Mapping[str, str] | None) -> dict[str, Any]:
    """Refuse a folder that is not ours, of another format, built with other tokens or for another owner."""
    try:
        meta = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SearchIndexError(f"{manifest} cannot be read ({exc}): delete the folder to rebuild the index",
                               path=str(folder)) from exc
    if not isinstance(meta, dict):
        raise SearchIndexError(f"{manifest} is not a BM25 manifest (a JSON {type(meta).__name__}, not an object): "
                               "delete the folder to rebuild the index", path=str(folder))
    if meta.get("format") != FORMAT or meta.get("engine") != "tantivy":
        raise SearchIndexError(f"{folder} holds a BM25 index of format {meta.get('format')!r} "
                               f"({meta.get('engine')}); this version reads format {FORMAT}: delete the folder to "
                               "rebuild it (the vector store holds every chunk: the next open refills it)",
                               path=str(folder))
    if meta.get("tokenizer") == tokenizer_name and meta.get("analysis") != ANALYSIS_VERSIONS.get(tokenizer_name):
        raise SearchIndexError(f"{folder} was built with version {meta.get('analysis')} of the "
                               f"{tokenizer_name!r} tokenizer; this version tokenizes as version "
                               f"{ANALYSIS_VERSIONS.get(tokenizer_name)}: delete the folder to rebuild the "
                               "index (queries and index must be analysed alike)", path=str(folder))
    if meta.get("tokenizer") != tokenizer_name:
        raise SearchIndexError(f"{folder} was built with the {meta.get('tokenizer')!r} tokenizer, not "
                               f"{tokenizer_name!r}: pass tokenizer={meta.get('tokenizer')!r}, or delete the "
                               "folder to rebuild it with the new one", path=str(folder))
    written_by = meta.get("owner")
    if owner and isinstance(written_by, dict) and written_by != dict(owner):
        raise SearchIndexError(f"{folder} was written by {_describe(written_by)}, not {_describe(owner)}: they "
                               "cannot read each other's chunks; give this one its own folder (bm25=...) or its own "
                               "collection", path=str(folder))
    return meta


def _describe(owner: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(owner.items()))


def _all_but(tantivy: Any, match: Any) -> Any:
    # Chunks without the key pass $ne / $nin, as in the filter module (and Chroma).
    return tantivy.Query.boolean_query([(tantivy.Occur.Must, tantivy.Query.all_query()),
                                        (tantivy.Occur.MustNot, match)])


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _filterable(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata filters can see: booleans, finite numbers within 64 bits (numpy's and enums' as Python's),
    strings up to ``_FILTERABLE_CHARS`` that are valid text."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if isinstance(value, bool):
            out[str(key)] = value
        elif isinstance(value, numbers.Integral):
            if -2**63 <= int(value) < 2**63:  # beyond a 64-bit integer the engine cannot store it
                out[str(key)] = int(value)
        elif isinstance(value, numbers.Real):
            if math.isfinite(float(value)):
                out[str(key)] = float(value)
        elif isinstance(value, str) and len(value) <= _FILTERABLE_CHARS and _encodable(value):
            out[str(key)] = value
    return {k: v for k, v in out.items() if _encodable(k)}


def _callable_name(tokenizer: Callable[[str], list[str]]) -> str:
    """A tokenizer callable's name as a folder records it: a named tokenizer by its name; any other by its module
    and qualified name plus a digest of its code, so two lambdas (or two versions of one function) are two
    tokenizers, never taken for one."""
    for name, known in TOKENIZERS.items():
        if tokenizer is known:
            return name
    base = f"{getattr(tokenizer, '__module__', '?')}.{getattr(tokenizer, '__qualname__', type(tokenizer).__name__)}"
    code = getattr(tokenizer, "__code__", None)
    if code is None:
        return base
    digest = hashlib.sha256(repr((code.co_code, code.co_consts, code.co_names, code.co_varnames)).encode())
    return f"{base}#{digest.hexdigest()[:12]}"


def _reopen(path: str, tokenizer: str, writer_timeout_s: float, owner: Mapping[str, str] | None) -> BM25Store:
    if tokenizer not in TOKENIZERS:
        import importlib

        module, _, name = tokenizer.split("#", 1)[0].rpartition(".")
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
        return BM25Store(path, tokenizer=found, writer_timeout_s=writer_timeout_s, owner=owner)
    return BM25Store(path, tokenizer=tokenizer, writer_timeout_s=writer_timeout_s, owner=owner)


def _take(iterator: Iterator[BM25Entry], n: int) -> Iterator[BM25Entry]:
    for _ in range(n):
        try:
            yield next(iterator)
        except StopIteration:
            return


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
