"""Contextual hybrid inside PostgreSQL (issue 54, first step: the core store): both sides of a chunk in one
database, written in one transaction, so no journal pairs them and every process sees a write at its next query.

One table per collection holds each chunk's id, document id, readable text, context, metadata (JSONB) and vector
(pgvector, HNSW, cosine); ``<table>_terms`` holds its BM25 terms from our analysis (the tokens ``BM25Store``
indexes, with their counts), ``<table>_df`` each term's document frequency and ``<table>_stats`` the chunk count
and total length BM25 scores with; a write of chunks updates all four in one transaction. BM25 is scored in SQL
over the postings of the query's terms, Okapi with Lucene's idf as ``BM25Store`` (k1=1.5, b=0.75; exact lengths
where the engine's are quantised), and the two rankings are fused by our RRF (``HybridRetriever``). ``where``
filters (the stores' shared syntax, ``retrieval.filters``) are SQL on the JSONB metadata on both sides. The analysis
(tokenizer, languages, the words German compounds split into) is decided at the first write and recorded in
``<table>_meta``.

Needs ``ctx-retrieval[postgres]`` and a server with pgvector >= 0.8 (``CREATE EXTENSION vector`` is run if allowed).
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctx_retrieval._optional import require
from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.language import corpus_languages
from ctx_retrieval.protocols import Embedder
from ctx_retrieval.retrieval.bm25 import ANALYSIS_VERSIONS, analyser, compound_words
from ctx_retrieval.retrieval.engine_store import EngineStore, Stored, records_of
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K
from ctx_retrieval.retrieval.hybrid import DEFAULT_CANDIDATES
from ctx_retrieval.retrieval.pairing import Record
from ctx_retrieval.retrieval.stemming import Compounds, recorded_languages, stemmed_in
from ctx_retrieval.retrieval.store import IndexedChunk

logger = logging.getLogger(__name__)

__all__ = ["PostgresStore", "recorded", "sql_where"]

_TABLE = re.compile(r"[a-z_][a-z0-9_]{0,40}")
_K1, _B = 1.5, 0.75
_ID_MAX = 1_024  # bytes: a btree entry holds at most ~2.7 kB (an id beside a term in the postings' key)
_TERM_MAX = 256  # characters (at most 1 kB): a longer token is an encoded blob no query asks for
_ORDERED = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_EQUAL = {"$eq": "=", "$ne": "IS DISTINCT FROM"}  # a missing key is distinct from any value: it passes $ne
_RECORDED = "SELECT value - 'words' FROM {}_meta WHERE key = 'analysis'"  # what a table was built with


class PostgresStore(EngineStore):
    """Chunks with their contexts in one PostgreSQL table: vectors and BM25 side by side, written together.

    Key init args:
        url: a libpq connection string (``postgresql://user@host:5432/db``).
        embedder: embeds chunks and queries (the vector column's size is its dimension).
        table: the collection's table (lower-case letters, digits and underscores; ``<table>_terms``,
            ``<table>_df``, ``<table>_stats`` and ``<table>_meta`` beside it).
        tokenizer / language: our BM25 analysis, as ``BM25Store``'s (``language="auto"``: detected from the first
            chunks written, and recorded).
        replace: drop the collection's tables first (a rebuild).

    Use:
        .. code-block:: python

            store = PostgresStore("postgresql://localhost/rag", embedder=MiniLMEmbedder())
            store.add([IndexedChunk("acme:3", "acme", "Revenue grew 3%.", "ACME's Q2 2023 filing...")],
                      metadata={"acme:3": {"tenant": "a"}})
            store.search("How did ACME's revenue change?", k=5, where={"tenant": "a"})
    """

    def __init__(self, url: str, *, embedder: Embedder, table: str = "ctx_chunks", tokenizer: str = "identifiers",
                 language: str | Sequence[str] | None = "auto", rrf_k: int = DEFAULT_RRF_K,
                 candidates: int = DEFAULT_CANDIDATES, replace: bool = False) -> None:
        psycopg = require("psycopg", "postgres")
        if not _TABLE.fullmatch(table):
            raise InvalidInputError(f"table {table!r}: use lower-case letters, digits and underscores (at most 41, "
                                    "not starting with a digit), e.g. 'ctx_chunks'")
        self.url, self.table, self.embedder, self.tokenizer_name = url, table, embedder, tokenizer
        self.rrf_k, self.candidates = rrf_k, candidates
        self._asked = None if language == "auto" else stemmed_in(language)
        self.languages: tuple[str, ...] | None = None
        self._tokenize = analyser(tokenizer, self._asked or ())
        self._conn = psycopg.connect(url, autocommit=True)
        # A rebuild (the CLI's index, an evaluation) loads first and builds the HNSW index once at the end of its
        # write (``flush``): 10,000 chunks took 29 s written into the index and 5 s loaded, then indexed.
        self._unindexed = replace
        if replace:
            t = table
            self._conn.execute(f"DROP TABLE IF EXISTS {t}_terms, {t}_df, {t}_stats, {t}_meta, {t}")
        self._adopt(self._create(len(embedder.embed_query("dimension"))))

    def __repr__(self) -> str:  # never the URL: it may hold a password
        return f"PostgresStore(table={self.table!r}, tokenizer={self.tokenizer_name!r}, languages={self.languages!r})"

    def close(self) -> None:
        self._conn.close()

    def _create(self, dimension: int) -> dict[str, Any]:
        """The collection's tables, made if missing; what it was built with, checked against this store's."""
        t = self.table
        with self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (t,))  # two jobs creating at once
            # made once (the meta table last): DDL on a table waits for every open write to it, so a service that
            # opens the collection while a job writes must not run any
            if self._conn.execute("SELECT to_regclass(%s)", (f"{t}_meta",)).fetchone()[0] is None:
                self._make(dimension)
            if self._conn.execute("SELECT to_regclass(%s)", (f"{t}_df",)).fetchone()[0] is None:
                self._make_df()
        recorded = self.recorded()
        for what, mine in (("embedder", self.embedder.model_id), ("tokenizer", self.tokenizer_name),
                           ("analysis", ANALYSIS_VERSIONS.get(self.tokenizer_name))):
            if recorded.get(what) != mine:
                raise InvalidInputError(f"the table {t!r} was indexed with {what} {recorded.get(what)!r}, not "
                                        f"{mine!r}: open it with the one it was built with, or index into another "
                                        "table (queries and the index must come from one model and one analysis)")
        # Enough HNSW candidates for a hybrid side, and filtered searches that keep scanning until they have them.
        self._conn.execute(f"SET hnsw.ef_search = {max(40, min(1000, self.candidates))}")
        self._conn.execute("SET hnsw.iterative_scan = strict_order")
        return recorded

    def _make(self, dimension: int) -> None:
        t = self.table
        self._conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {t} (id text PRIMARY KEY, document_id text NOT NULL, "
                           f"text text NOT NULL, context text, metadata jsonb NOT NULL DEFAULT '{{}}', "
                           f"payload text NOT NULL, embedding vector({dimension}) NOT NULL, length int NOT NULL)")
        self._conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_document ON {t} (document_id)")
        if not self._unindexed:
            self._index()
        # A posting carries its chunk's length: a query reads postings alone (an index-only scan) unless it
        # filters (measured: 2.2x faster than joining every posting to its chunk, at 10,000 chunks)
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {t}_terms (term text NOT NULL, id text NOT NULL, "
                           "tf integer NOT NULL, length integer NOT NULL, PRIMARY KEY (term, id) INCLUDE (tf, length))")
        self._conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_terms_id ON {t}_terms (id)")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {t}_stats (one boolean PRIMARY KEY DEFAULT true, "
                           "chunks bigint NOT NULL, length bigint NOT NULL)")
        self._conn.execute(f"INSERT INTO {t}_stats VALUES (true, 0, 0) ON CONFLICT DO NOTHING")
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {t}_meta (key text PRIMARY KEY, value jsonb NOT NULL)")
        self._conn.execute(f"INSERT INTO {t}_meta VALUES ('analysis', %s) ON CONFLICT DO NOTHING", (json.dumps(
            {"embedder": self.embedder.model_id, "tokenizer": self.tokenizer_name,
             "analysis": ANALYSIS_VERSIONS.get(self.tokenizer_name)}),))

    def _make_df(self) -> None:
        """Each term's document frequency, kept with the postings in every write: a query reads a term's row
        instead of counting its postings (10,000 chunks: the BM25 side 9.0-13.0 -> 6.4-9.6 ms p50). A table made
        before it gets it counted once, here."""
        t = self.table
        self._conn.execute(f"CREATE TABLE {t}_df (term text PRIMARY KEY, df integer NOT NULL)")
        self._conn.execute(f"INSERT INTO {t}_df SELECT term, count(*) FROM {t}_terms GROUP BY term")

    def _index(self) -> None:
        """The HNSW index over the table. pgvector builds the graph in memory while it fits in
        ``maintenance_work_mem`` and far slower once it does not (its README, "Index Build Time"): a build raises
        the setting for its own transaction to the graph's size (rows x (8 x dimensions + 2 kB), at most 1 GB, never
        lowering the server's). 100,000 chunks of 384 dimensions on 2 cores, the server's settings otherwise as
        shipped (two parallel workers): 212.7 s -> 62.2 s (without workers: 395 s at 64 MB, 108 s at 1 GB). A parallel
        build holds the graph in shared memory; where that is too small (a container's 64 MB ``/dev/shm``) the build
        runs again without workers, with a warning naming the fix."""
        errors = require("psycopg", "postgres").errors
        t = self.table
        for serial in (False, True):
            try:
                with self._conn.transaction():
                    rows, dimension, current = self._conn.execute(
                        f"SELECT (SELECT count(*) FROM {t}), (SELECT atttypmod FROM pg_attribute WHERE attrelid = "
                        "%s::regclass AND attname = 'embedding'), "
                        "pg_size_bytes(current_setting('maintenance_work_mem'))",
                        (t,)).fetchone()
                    wanted = min(rows * (8 * max(dimension, 1) + 2048), 1 << 30)
                    if wanted > current:
                        self._conn.execute(f"SET LOCAL maintenance_work_mem = '{wanted // 1024}kB'")
                    if serial:
                        self._conn.execute("SET LOCAL max_parallel_maintenance_workers = 0")
                    self._conn.execute(f"CREATE INDEX IF NOT EXISTS {t}_hnsw ON {t} USING hnsw "
                                       "(embedding vector_cosine_ops)")
                return
            except (errors.DiskFull, errors.OutOfMemory) as exc:
                if serial:
                    raise
                logger.warning("the HNSW index of %s could not be built by parallel workers (%s): building it "
                               "without them, slower; give the server more shared memory (Docker: --shm-size)",
                               t, str(exc).strip())

    def flush(self) -> None:
        """The end of a write: a rebuild's HNSW index is built now, over everything it loaded."""
        if self._unindexed:
            self._index()
            self._unindexed = False

    def recorded(self) -> dict[str, Any]:
        """What the table was built with (``embedder``, ``tokenizer``, ``analysis``, ``languages``)."""
        row = self._conn.execute(_RECORDED.format(self.table)).fetchone()
        return dict(row[0]) if row else {}

    def _adopt(self, recorded: Mapping[str, Any]) -> None:
        found = recorded_languages(recorded.get("languages"), self._asked, f"the table {self.table!r}")
        if found is None:
            return
        row = self._conn.execute(f"SELECT value -> 'words' FROM {self.table}_meta WHERE key = 'analysis'").fetchone()
        words = frozenset(row[0] or ()) if row else frozenset()
        self.languages = found
        self._tokenize = analyser(self.tokenizer_name, found, Compounds(words) if words else None)

    def _decide(self, texts: Sequence[str]) -> None:
        """The first write decides the analysis's languages and compound words and records them (the meta row
        locked in the caller's transaction: a writer that decided first wins)."""
        row = self._conn.execute(f"SELECT value FROM {self.table}_meta WHERE key = 'analysis' FOR UPDATE").fetchone()
        if row and row[0].get("languages") is None:
            found = corpus_languages(texts) if self._asked is None else self._asked
            value = {**row[0], "languages": list(found), "words": sorted(compound_words(texts, found))}
            self._conn.execute(f"UPDATE {self.table}_meta SET value = %s WHERE key = 'analysis'", (json.dumps(value),))
        self._adopt(self.recorded())

    # -- writes: each call one transaction ------------------------------------------------------------------

    def replace_documents(self, chunks: Iterable[IndexedChunk], *,
                          metadata: Mapping[str, Mapping[str, Any]] | None = None,
                          vectors: Sequence[Sequence[float]] | None = None) -> int:
        """Replace whole documents: every chunk the store holds of the documents these chunks belong to is deleted
        and these are written, in one transaction, so every reader sees each document's old version or its new
        one (chunks the new version dropped included). Returns how many chunks were written."""
        records = records_of(chunks, metadata)
        written = len(self.add_records(records, vectors, documents=sorted({r.ref or "" for r in records})))
        self.flush()
        return written

    def add_records(self, records: Sequence[Record], vectors: Sequence[Sequence[float]] | None = None, *,
                    documents: Sequence[str] = ()) -> list[str]:
        """As ``EngineStore.add_records``: every record's row and BM25 terms, the statistics with them, in one
        transaction (a job killed mid-call leaves the rows as they were); ``documents``: document ids whose chunks
        are deleted first, in the same transaction (``replace_documents``)."""
        records = list(records)
        if not records:
            return []
        _check(records)
        if vectors is None:
            vectors = self.embedder.embed([r.text for r in records])
        elif len(vectors) != len(records):
            raise InvalidInputError(f"{len(vectors)} vectors for {len(records)} chunks: pass one vector per chunk")
        t = self.table
        if self.languages is None:
            with self._conn.transaction():
                self._decide([r.text for r in records])
        counts = [Counter(self._tokenize(r.text)) for r in records]  # before the transaction: it holds row locks
        lengths = [sum(terms.values()) for terms in counts]
        texts = _vectors(vectors)
        with self._conn.transaction():
            removed, removed_length, df = self._remove([r.id for r in records], list(documents))
            with self._conn.cursor() as cursor:
                with cursor.copy(f"COPY {t} (id, document_id, text, context, metadata, payload, embedding, length) "
                                 "FROM STDIN") as copy:
                    for r, vector, length in zip(records, texts, lengths, strict=True):
                        meta = json.dumps({**dict(r.metadata), "document_id": r.ref or ""}, ensure_ascii=False,
                                          default=str)
                        copy.write_row((r.id, r.ref or "", r.chunk, r.context, meta,
                                        r.payload.decode("utf-8", "surrogatepass"), vector, length))
                with cursor.copy(f"COPY {t}_terms (term, id, tf, length) FROM STDIN") as copy:
                    for r, terms, length in zip(records, counts, lengths, strict=True):
                        for term, tf in terms.items():
                            if len(term) <= _TERM_MAX:  # longer: no query matches it (queries drop them too)
                                copy.write_row((term, r.id, tf, length))
                                df[term] += 1
            self._count(df, len(records) - removed, sum(lengths) - removed_length)
        return [r.id for r in records]

    def delete(self, chunk_ids: Sequence[str]) -> None:
        """Delete chunks by id (unknown ids are ignored), both sides in one transaction."""
        self._delete([str(i) for i in chunk_ids], [])

    def delete_documents(self, document_ids: Sequence[str]) -> None:
        """Delete every chunk of these documents, both sides in one transaction."""
        self._delete([], [str(i) for i in document_ids])

    def _delete(self, ids: list[str], documents: list[str]) -> None:
        if not ids and not documents:
            return
        with self._conn.transaction():
            removed, length, df = self._remove(ids, documents)
            self._count(df, -removed, -length)

    def _remove(self, ids: list[str], documents: list[str]) -> tuple[int, int, Counter[str]]:
        """Delete the rows with one of these ids or of one of these documents, and their postings, in the caller's
        transaction (the store deletes postings itself: no foreign key checks every posting written); how many
        rows, their total length, and each of their terms' document frequency change."""
        t = self.table
        removed = self._conn.execute(f"DELETE FROM {t} WHERE id = ANY(%s) OR document_id = ANY(%s) "
                                     "RETURNING id, length", (ids, documents)).fetchall()
        df: Counter[str] = Counter()
        if removed:
            df.subtract(dict(self._conn.execute(f"WITH d AS (DELETE FROM {t}_terms WHERE id = ANY(%s) RETURNING term) "
                                                "SELECT term, count(*) FROM d GROUP BY term",
                                                ([r[0] for r in removed],)).fetchall()))
        return len(removed), sum(r[1] for r in removed), df

    def _count(self, df: Counter[str], chunks: int, length: int) -> None:
        """A write's change to the terms' document frequencies and the collection's statistics, last in its
        transaction. Terms are locked in one order (sorted) and the statistics row after them, so two writers
        never wait for each other in a circle."""
        t = self.table
        changed = sorted((term, n) for term, n in df.items() if n)
        if changed:
            self._conn.execute(f"INSERT INTO {t}_df SELECT * FROM unnest(%s::text[], %s::int[]) ORDER BY 1 "
                               f"ON CONFLICT (term) DO UPDATE SET df = {t}_df.df + excluded.df",
                               ([c[0] for c in changed], [c[1] for c in changed]))
        self._conn.execute(f"UPDATE {t}_stats SET chunks = chunks + %s, length = length + %s", (chunks, length))

    def __len__(self) -> int:
        return int(self._conn.execute(f"SELECT chunks FROM {self.table}_stats").fetchone()[0])

    # -- reads ----------------------------------------------------------------------------------------------

    def _side_ids(self, side: str, query: str, k: int, where: Mapping[str, Any] | None,
                  vector: Sequence[float] | None) -> list[str]:
        """One side's (``vector`` or ``bm25``) ``k`` best chunk ids for ``query`` under ``where``, best first;
        ``vector``: the query's, when it was embedded already."""
        condition, params = sql_where(where, "c.metadata")
        t = self.table
        if side == "vector":
            found = self.embedder.embed_query(query) if vector is None else vector
            rows = self._conn.execute(f"SELECT c.id FROM {t} c WHERE {condition} ORDER BY c.embedding <=> %s::vector "
                                      "LIMIT %s", (*params, _vector(found), k)).fetchall()
            return [r[0] for r in rows]
        if self.languages is None:  # another process's first write decides the analysis
            self._adopt(self.recorded())
        counts = Counter(token for token in self._tokenize(query) if len(token) <= _TERM_MAX)
        if not counts or k <= 0:
            return []
        # Each query term's weight first (its document frequency, kept by the writes: before any filter), then one
        # pass over the postings: against a window counting postings in the scoring pass, 25 -> 14 ms at 10,000
        # chunks. float8 throughout (numeric literals would make PostgreSQL compute in arbitrary precision).
        joined = f"JOIN {t} c ON c.id = p.id WHERE {condition}" if where else ""
        rows = self._conn.execute(
            f"WITH q (term, times) AS (SELECT * FROM unnest(%s::text[], %s::int[])), "
            f"w AS MATERIALIZED (SELECT q.term, q.times * {_K1 + 1}::float8 * ln(1 + ((SELECT chunks::float8 FROM "
            f"{t}_stats) - d.df + 0.5::float8) / (d.df + 0.5::float8)) AS weight FROM q CROSS JOIN LATERAL "
            f"(SELECT coalesce((SELECT df FROM {t}_df f WHERE f.term = q.term), 0)::float8 AS df) d) "
            f"SELECT p.id, sum(w.weight * p.tf / (p.tf + {_K1}::float8 * ({1 - _B}::float8 + {_B}::float8 * p.length "
            f"/ (SELECT greatest(length::float8 / greatest(chunks, 1), 1e-9) FROM {t}_stats)))) AS score "
            f"FROM w JOIN {t}_terms p USING (term) {joined} GROUP BY p.id ORDER BY score DESC, p.id LIMIT %s",
            (list(counts), list(counts.values()), *params, k)).fetchall()
        return [r[0] for r in rows]

    def _stored(self, ids: list[str], *, payload: bool = True) -> list[Stored]:
        if not ids:
            return []
        read = "payload" if payload else "''"
        rows = self._conn.execute(f"SELECT id, document_id, text, context, metadata, {read} FROM {self.table} "
                                  "WHERE id = ANY(%s)", (ids,)).fetchall()
        found = {r[0]: Stored(IndexedChunk(r[0], r[1], r[2], r[3]), r[4], r[5].encode("utf-8", "surrogatepass"))
                 for r in rows}
        return [found[i] for i in ids if i in found]


def recorded(url: str, table: str = "ctx_chunks") -> dict[str, Any]:
    """What a collection was built with (``embedder``, ``tokenizer``, ``languages``), read without an embedder (the
    CLI's ``query`` embeds with the model the chunks were embedded with); empty for a table that does not exist."""
    psycopg = require("psycopg", "postgres")
    if not _TABLE.fullmatch(table):
        raise InvalidInputError(f"table {table!r}: use lower-case letters, digits and underscores")
    with psycopg.connect(url) as conn:
        if conn.execute("SELECT to_regclass(%s)", (f"{table}_meta",)).fetchone()[0] is None:
            return {}
        row = conn.execute(_RECORDED.format(table)).fetchone()
    return dict(row[0]) if row else {}


def sql_where(where: Mapping[str, Any] | None, column: str) -> tuple[str, list[Any]]:
    """A ``where`` filter (``retrieval.filters``' syntax and meaning) as a SQL condition on the JSONB ``column`` and
    its parameters: every key and value is a parameter, never SQL. A missing key passes ``$ne`` and ``$nin`` and
    fails the rest; an ordering compares numbers with numbers and strings with strings (by code point), else fails."""
    if not where:
        return "true", []
    from ctx_retrieval.retrieval.filters import compile_where

    compile_where(where)  # malformed filters fail here, with the stores' own messages, once for the whole filter
    return _sql(where, column)


def _sql(where: Mapping[str, Any], column: str) -> tuple[str, list[Any]]:
    parts: list[str] = []
    params: list[Any] = []
    for key, value in where.items():
        if key in ("$and", "$or"):
            inner = [_sql(part, column) for part in value]
            parts.append("(" + (" AND " if key == "$and" else " OR ").join(f"({s})" for s, _ in inner) + ")")
            params += [p for _, ps in inner for p in ps]
            continue
        for operator, want in (value.items() if isinstance(value, Mapping) else [("$eq", value)]):
            field = f"({column} -> %s)"
            if operator in _EQUAL:
                parts.append(f"{field} {_EQUAL[operator]} %s::jsonb")
                params += [key, json.dumps(want)]
            elif operator in ("$in", "$nin"):
                test = f"COALESCE({field} = ANY(%s::jsonb[]), false)"
                parts.append(test if operator == "$in" else f"NOT {test}")
                params += [key, [json.dumps(w) for w in want]]
            elif isinstance(want, bool) or not isinstance(want, (int, float, str)):
                raise InvalidInputError(f"{operator} on {key!r} compares numbers or strings, not {want!r}")
            else:
                kind, read = ("string", ' COLLATE "C"') if isinstance(want, str) else ("number", "::numeric")
                parts.append(f"(jsonb_typeof({field}) = '{kind}' AND ({column} ->> %s){read} "
                             f"{_ORDERED[operator]} %s)")
                params += [key, key, want]
    return " AND ".join(parts) or "true", params


def _check(records: Sequence[Record]) -> None:
    """What PostgreSQL would refuse mid-transaction, refused first with the fix: repeated or huge ids, NUL
    characters (text and JSONB cannot hold them)."""
    if len({r.id for r in records}) != len(records):
        raise InvalidInputError("the chunks repeat an id; each chunk is stored once under its id")
    for r in records:
        for what, value in (("id", r.id), ("document id", r.ref or "")):
            if len(value.encode("utf-8", "surrogatepass")) > _ID_MAX:
                raise InvalidInputError(f"a chunk's {what} is over {_ID_MAX} bytes ({value[:40]!r}...): use a "
                                        "shorter one (a digest of it, say)")
        if any("\x00" in v for v in (r.id, r.ref or "", r.text, r.context or "")) or "\\u0000" in json.dumps(
                dict(r.metadata), default=str):
            raise InvalidInputError(f"chunk {r.id[:80]!r} holds a NUL character, which PostgreSQL text cannot store: "
                                    "remove it from the text, ids and metadata before indexing")


def _vector(values: Sequence[float]) -> str:
    """A vector as pgvector's text form (what ``COPY`` and a ``::vector`` parameter read)."""
    return _vectors([values])[0]


def _vectors(vectors: Sequence[Sequence[float]]) -> list[str]:
    """Vectors in pgvector's text form, formatted by numpy: nine significant digits, which is every digit a float4
    (what pgvector stores) holds (1.8 s for 10,000 vectors of 384 against 3.2 s by ``repr``)."""
    import io

    import numpy as np

    out = io.StringIO()
    np.savetxt(out, np.asarray(vectors, dtype=np.float64).reshape(len(vectors), -1), fmt="%.9g", delimiter=",")
    return [f"[{line}]" for line in out.getvalue().splitlines()]
