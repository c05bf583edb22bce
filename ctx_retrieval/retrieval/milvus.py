"""Contextual hybrid retrieval inside Milvus (issue 37, first step): one collection holds each chunk's contextualized
text, its vector and the engine's own BM25 over it, so there is one index to keep true and nothing to pair.

The BM25 side is Milvus's BM25 function fed our analysis: the analysed field holds the chunk's tokens as our
tokenizer makes them (identifier parts and wholes, CJK bigrams, folded forms, stems), each written as a short digest
that the engine's standard analyzer keeps whole (Milvus Lite offers only its standard and jieba tokenizers, which
would cut them apart again); queries are tokenized the same way. So contextual BM25 in Milvus ranks the tokens
``BM25Store`` ranks, with Milvus's scoring (k1 1.2, b 0.75, as tantivy's). The vector side is a dense field of the
same rows (cosine). Queries run as our ``HybridRetriever`` over the two engine sides (``engine_fusion=False``, the
default: each hit carries both sides' ranks, filters go to both), or as one ``hybrid_search`` in the engine with its
RRF (``engine_fusion=True``: one round trip, fused scores only).

``uri`` is Milvus's own: a ``.db`` file for Milvus Lite (in-process: one process at a time), ``http://host:19530``
for a server or cluster, or a ``milvus-lite server`` on loopback (what the two-process tests use): the same code.
Filters are our ``where`` dicts (``{"tenant": "a"}``, ``$gte``, ``$in``, ``$and``...), translated to Milvus expressions
over a JSON metadata field. Needs ``ctx-retrieval[milvus]``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ctx_retrieval._optional import require
from ctx_retrieval.errors import ConfigurationError, InvalidInputError
from ctx_retrieval.language import corpus_languages
from ctx_retrieval.protocols import Embedder
from ctx_retrieval.retrieval.bm25 import analyser
from ctx_retrieval.retrieval.engine_store import EngineStore, Fusion, Stored
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K, chunk_key, side_weights
from ctx_retrieval.retrieval.hybrid import DEFAULT_CANDIDATES, Hit
from ctx_retrieval.retrieval.pairing import Record
from ctx_retrieval.retrieval.stemming import recorded_languages, stemmed_in
from ctx_retrieval.retrieval.store import IndexedChunk

__all__ = ["EngineFusion", "MilvusStore", "milvus_filter", "recorded"]

T = TypeVar("T")


_TEXT_MAX = 65_535
_ID_MAX = 1_024
_BATCH = 500
ENGINE = "engine"  # tokenizer: the engine's own analyzer over the readable text
_WORD_BYTES = 10  # 80 bits: two tokens of a corpus collide with odds far below one in a billion


def _word(token: str) -> str:
    digest = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=_WORD_BYTES).digest()
    return "t" + base64.b32encode(digest).decode("ascii").lower().rstrip("=")


_OPS = {"$eq": "==", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _literal(value: Any) -> str:
    """A value as a Milvus expression literal: JSON with every character written as it is (Milvus's parser reads
    ``\\"``, ``\\\\``, ``\\n`` and ``\\t`` but no ``\\u`` escape: ``café``, ``東京`` and emoji go in as they are)."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInputError(f"a filter value must be a finite number, not {value}")
    if isinstance(value, str) and any((c < " " and c not in "\n\t\r") or "\ud800" <= c <= "\udfff" for c in value):
        raise InvalidInputError(f"the filter value {value[:40]!r} holds control characters or a lone surrogate, "
                                "which Milvus expressions cannot write: filter on a value without them")
    return json.dumps(value, ensure_ascii=False)


def _ids(values: Sequence[str], what: str) -> list[str]:
    """Ids as Milvus can hold them (its id fields end at 1,024 bytes)."""
    out = [str(v) for v in values]
    for value in out:
        if len(value.encode("utf-8", "surrogatepass")) > _ID_MAX:
            raise InvalidInputError(f"a {what} of {len(value)} characters is over Milvus's {_ID_MAX}-byte id field: "
                                    "use shorter ids (a digest of a long one)")
    return out


def milvus_filter(where: Mapping[str, Any] | None) -> str:
    """Our ``where`` dict as a Milvus boolean expression over the ``meta`` JSON field (``""``: no filter)."""
    if not where:
        return ""
    if not isinstance(where, Mapping):
        raise InvalidInputError(f"a metadata filter is a dict such as {{'tenant': 'a'}}, not {type(where).__name__}")
    parts = []
    for key, value in where.items():
        if key in ("$and", "$or"):
            inner = [f"({milvus_filter(w)})" for w in value]
            parts.append(f" {key[1:]} ".join(inner))
            continue
        field = f"meta[{_literal(str(key))}]"
        tests = value if isinstance(value, Mapping) else {"$eq": value}
        for op, operand in tests.items():
            if op in _OPS:
                parts.append(f"{field} {_OPS[op]} {_literal(operand)}")
            elif op in ("$in", "$nin"):  # as == or != each value: Milvus refuses ``in`` on a JSON field's key
                values = [_literal(v) for v in operand]
                if op == "$in":
                    parts.append(" or ".join(f"{field} == {v}" for v in values) or f"{field} == 0 and {field} != 0")
                elif values:
                    parts.append(" and ".join(f"{field} != {v}" for v in values))
            else:
                raise InvalidInputError(f"unknown filter operator {op!r}: use $eq, $ne, $gt, $gte, $lt, $lte, $in, "
                                        "$nin, $and, $or")
    return " and ".join(f"({p})" for p in parts)


class _QuietLite(logging.Filter):
    """Milvus Lite's in-process server answers a call pymilvus makes on every write (``AllocTimestamp``) with "not
    implemented" and gRPC logs that as an error with a traceback, although the write succeeds: dropped here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], NotImplementedError))


def _quiet_lite() -> None:
    server = logging.getLogger("grpc._server")
    if not any(isinstance(f, _QuietLite) for f in server.filters):
        server.addFilter(_QuietLite())


def recorded(uri: str, collection: str = "ctx_retrieval_chunks", *, token: str | None = None) -> dict[str, Any]:
    """What a collection was built with (``embedder``, ``tokenizer``), read without opening a store (no embedder
    needed); ``{}`` when it records nothing."""
    client = require("pymilvus", "milvus").MilvusClient(uri, **({"token": token} if token else {}))
    if not client.has_collection(collection):
        raise InvalidInputError(f"no collection {collection!r} at {uri}: build it with 'ctx-retrieval index "
                                f"INPUTS --store milvus:{uri}'")
    return _properties(client, collection)


def _properties(client: Any, collection: str) -> dict[str, Any]:
    try:
        properties = client.describe_collection(collection).get("properties") or {}
        found = json.loads(properties.get("ctx_retrieval") or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


class MilvusStore(EngineStore):
    """Chunks with their contexts in one Milvus collection: vectors and the engine's BM25 side by side.

    Key init args:
        uri: ``"./chunks.db"`` (Milvus Lite) or ``"http://host:19530"`` (a server); ``token`` for one that asks.
        embedder: embeds chunks and queries (the dense field's size is its dimension).
        tokenizer: our BM25 analysis (``"identifiers"`` by default, as ``BM25Store``'s), or ``"engine"``: the
            readable text analysed by the engine itself with ``analyzer_params`` (Milvus's standard tokenizer by
            default; a server offers more, e.g. ``{"type": "english"}``). Measured on the cookbook dev half through
            Milvus Lite, the engine's standard analyzer loses identifier parts, folding and CJK words
            (``benchmarks/milvus_ablation.py``), so ours is the default.
        language: the Latin-script languages our analysis stems in, as ``BM25Store``'s (``"auto"``: detected from
            the first chunks written and recorded in the collection's properties). German compounds are not split
            here (the words they split into would not fit the collection's properties).
        engine_fusion: fuse in the engine (``hybrid_search``) instead of our ``HybridRetriever``.

    Use:
        .. code-block:: python

            store = MilvusStore("./chunks.db", embedder=MiniLMEmbedder())
            store.add([IndexedChunk("acme:3", "acme", "Revenue grew 3%.", "ACME's Q2 2023 filing...")])
            store.search("How did ACME's revenue change?", k=5)
    """

    def __init__(self, uri: str, *, embedder: Embedder, collection: str = "ctx_retrieval_chunks",
                 tokenizer: str = "identifiers", rrf_k: int = DEFAULT_RRF_K, candidates: int = DEFAULT_CANDIDATES,
                 engine_fusion: bool = False, token: str | None = None, replace: bool = False,
                 analyzer_params: Mapping[str, Any] | None = None,
                 language: str | Sequence[str] | None = "auto") -> None:
        self._milvus = require("pymilvus", "milvus")
        if "://" not in uri:
            _quiet_lite()
        self.client = self._milvus.MilvusClient(uri, **({"token": token} if token else {}))
        self.uri, self.collection, self.embedder = uri, collection, embedder
        self.tokenizer_name = tokenizer
        if analyzer_params is not None and tokenizer != ENGINE:
            raise InvalidInputError("analyzer_params set the engine's own analysis: pass tokenizer='engine' with them "
                                    "(our tokenizers write digests the standard analyzer keeps whole)")
        self.analyzer_params = dict(analyzer_params or {"tokenizer": "standard"})
        self._asked = None if language == "auto" else stemmed_in(language)
        self.languages: tuple[str, ...] | None = None  # decided by the first write, or read from the collection
        self._tokenize = None if tokenizer == ENGINE else analyser(tokenizer, self._asked or ())
        self.rrf_k, self.candidates, self.engine_fusion = rrf_k, candidates, engine_fusion
        if replace and self.client.has_collection(collection):
            self.client.drop_collection(collection)
        if not self.client.has_collection(collection):
            self._create()
        recorded = self.recorded()
        for what, mine in (("embedder", embedder.model_id), ("tokenizer", self._recorded_tokenizer())):
            if recorded.get(what) not in (None, mine):
                raise InvalidInputError(f"the Milvus collection {collection!r} was indexed with {what} "
                                        f"{recorded[what]!r}, not {mine!r}: open it with the one it was built with "
                                        "(queries and the index must come from one model and one analysis)")
        self._adopt(recorded)
        if self.languages is None and self._tokenize is not None and len(self):
            # Written before collections recorded their languages: analysed as then, and never looked up at each
            # query (the lookup is for an empty collection whose first chunks another client writes).
            self.languages = self._asked or ()
        self.client.load_collection(collection)  # a collection another client made is "released" until loaded

    def recorded(self) -> dict[str, Any]:
        """What the collection was built with (``embedder``, ``tokenizer``), from its properties."""
        return _properties(self.client, self.collection)

    def __repr__(self) -> str:
        return f"MilvusStore({self.uri!r}, collection={self.collection!r}, tokenizer={self.tokenizer_name!r})"

    def _create(self) -> None:
        data_type = self._milvus.DataType
        schema = self.client.create_schema(auto_id=False)
        schema.add_field("id", data_type.VARCHAR, is_primary=True, max_length=_ID_MAX)
        schema.add_field("document_id", data_type.VARCHAR, max_length=_ID_MAX)
        schema.add_field("text", data_type.VARCHAR, max_length=_TEXT_MAX)
        schema.add_field("context", data_type.VARCHAR, max_length=_TEXT_MAX)
        schema.add_field("tokens", data_type.VARCHAR, max_length=_TEXT_MAX, enable_analyzer=True,
                         analyzer_params=self.analyzer_params if self._tokenize is None else {"tokenizer": "standard"})
        schema.add_field("dense", data_type.FLOAT_VECTOR, dim=len(self.embedder.embed_query("dimension")))
        schema.add_field("sparse", data_type.SPARSE_FLOAT_VECTOR)
        schema.add_field("meta", data_type.JSON)
        schema.add_field("payload", data_type.VARCHAR, max_length=_TEXT_MAX)
        schema.add_function(self._milvus.Function(name="bm25", function_type=self._milvus.FunctionType.BM25,
                                                  input_field_names=["tokens"], output_field_names=["sparse"]))
        index = self.client.prepare_index_params()
        index.add_index("dense", index_type="FLAT", metric_type="COSINE")
        # Milvus Lite refuses the sparse index's defaults: the inverted index with nothing dropped (exact BM25)
        index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                        params={"drop_ratio_build": 0})
        self.client.create_collection(self.collection, schema=schema, properties={
            "ctx_retrieval": json.dumps({"embedder": self.embedder.model_id, "tokenizer": self._recorded_tokenizer()})})
        # Not create_collection(index_params=): pymilvus then sleeps 0.5 s before asking each new index's state (a
        # second a collection). An empty collection's indexes are built at once, and loading it waits for them.
        self.client.create_index(self.collection, index, sync=False)
        self.client.load_collection(self.collection)

    def _adopt(self, recorded: Mapping[str, Any]) -> None:
        """The languages the collection was analysed in, from its properties, checked against those asked for."""
        found = recorded_languages(recorded.get("languages"), self._asked, f"the Milvus collection {self.collection!r}")
        if found is not None and self._tokenize is not None:
            self.languages = found
            self._tokenize = analyser(self.tokenizer_name, found)

    def _decide(self, texts: Sequence[str]) -> None:
        """The first write decides the languages (detected, or as asked) and records them; a collection another
        client decided first keeps its own."""
        recorded = self.recorded()
        if recorded.get("languages") is None:
            found = corpus_languages(texts) if self._asked is None else self._asked
            self.client.alter_collection_properties(self.collection, properties={
                "ctx_retrieval": json.dumps({**recorded, "languages": list(found)})})
            recorded = {**recorded, "languages": list(found)}
        self._adopt(recorded)

    def _recorded_tokenizer(self) -> str:
        if self._tokenize is not None:
            return self.tokenizer_name
        return f"{ENGINE}:{json.dumps(self.analyzer_params, sort_keys=True)}"

    def _tokens(self, text: str) -> str:
        """Our tokens as words the engine's standard analyzer keeps whole and never lower-cases into another: each
        a short digest (Milvus Lite offers only the standard and jieba tokenizers, which would cut CJK bigrams and
        identifiers apart again); with ``tokenizer="engine"``, the text itself."""
        if self._tokenize is None:
            return text[:_TEXT_MAX]
        words = " ".join(_word(t) for t in self._tokenize(text) if t and not t.isspace())
        return words[:_TEXT_MAX]

    # -- writes: one collection, so one write ----------------------------------------------------------------

    def flush(self) -> None:
        """Seal what was written into segments the engine indexes: searches then stop scanning the rows still in
        growing segments (one flush after 1,000 chunks took a Milvus Lite query from 143 to 21 ms). Milvus seals
        full segments itself and advises against flushing after every insert (many small segments slow searches),
        so ``add`` flushes once at its end and the adapters' per-batch writes do not: call this after a bulk load
        through them."""
        self.client.flush(self.collection)

    def add_records(self, records: Sequence[Record], vectors: Sequence[Sequence[float]] | None = None) -> list[str]:
        """As ``EngineStore.add_records``, one upsert a 500 records."""
        ids: list[str] = []
        for start in range(0, len(records), _BATCH):
            part = list(records[start:start + _BATCH])
            given = vectors[start:start + _BATCH] if vectors is not None else None
            ids += self._upsert(part, given)
        return ids

    def _upsert(self, records: list[Record], vectors: Sequence[Sequence[float]] | None) -> list[str]:
        if self.languages is None and self._tokenize is not None:
            self._decide([r.text for r in records])
        if vectors is None:
            vectors = list(self.embedder.embed([r.text for r in records]))
        if len(vectors) != len(records):
            raise InvalidInputError(f"{len(vectors)} vectors for {len(records)} chunks: pass one vector per chunk")
        rows: list[dict[str, Any]] = []
        _ids([r.id for r in records], "chunk id")
        _ids([r.ref for r in records if r.ref], "document id")
        for r, vector in zip(records, vectors, strict=True):
            payload = r.payload.decode("utf-8", "surrogatepass")
            for what, value in (("chunk", r.text), ("stored chunk", payload)):
                if len(value.encode("utf-8", "surrogatepass")) > _TEXT_MAX:
                    raise InvalidInputError(f"chunk {r.id!r}: its {what} is over Milvus's {_TEXT_MAX}-byte text "
                                            "field: split the documents into smaller chunks")
            meta = json.loads(json.dumps({**dict(r.metadata), "document_id": r.ref or ""}, default=str))
            rows.append({"id": r.id, "document_id": r.ref or "", "text": r.chunk, "context": r.context or "",
                         "tokens": self._tokens(r.text), "dense": [float(x) for x in vector], "meta": meta,
                         "payload": payload})
        self.client.upsert(self.collection, rows)
        return [r.id for r in records]

    def delete(self, chunk_ids: Sequence[str]) -> None:
        if chunk_ids:
            self.client.delete(self.collection, ids=_ids(chunk_ids, "chunk id"))

    def delete_documents(self, document_ids: Sequence[str]) -> None:
        if document_ids:
            self.client.delete(self.collection, filter=f"document_id in {_literal(_ids(document_ids, 'document id'))}")

    def __len__(self) -> int:
        return int(self.client.get_collection_stats(self.collection).get("row_count", 0))

    # -- queries -------------------------------------------------------------------------------------------

    def _stored(self, ids: list[str], *, payload: bool = True) -> list[Stored]:
        if not ids:
            return []
        fields = ["document_id", "text", "context", *(("meta", "payload") if payload else ())]
        rows = self.client.get(self.collection, ids=ids, output_fields=fields)
        found = {r["id"]: Stored(IndexedChunk(r["id"], r["document_id"], r["text"], r["context"] or None),
                                 r.get("meta") or {}, str(r.get("payload") or "").encode("utf-8", "surrogatepass"))
                 for r in rows}
        return [found[i] for i in ids if i in found]

    def _engine_fusion(self, load: Callable[[list[str]], Sequence[T]], vector: Sequence[float] | None,
                       candidates: int, rrf_k: int, weights: Sequence[float] | Mapping[str, float]
                       ) -> EngineFusion[T] | None:
        """``engine_fusion=True``: Milvus's own ``hybrid_search`` (equal weights only: its RRF weighs both sides
        alike)."""
        if not self.engine_fusion:
            return None
        if len(set(side_weights(weights))) > 1:
            raise ConfigurationError("the engine's RRF weighs both sides alike: drop weights= or engine_fusion=True",
                                     setting="weights")
        return EngineFusion(self, load, vector, candidates, rrf_k)

    def _request(self, side: str, query: str, vector: Sequence[float] | None = None
                 ) -> tuple[list[Any], str, dict[str, Any]]:
        """(data, field, search params) for one side: the query's vector, or its tokens for BM25 (each field's
        search parameters given: Milvus Lite refuses their defaults)."""
        if side == "vector":
            vector = self.embedder.embed_query(query) if vector is None else vector
            return [[float(x) for x in vector]], "dense", {"metric_type": "COSINE", "params": {}}
        if self.languages is None and self._tokenize is not None:  # another client's first write decides them
            self._adopt(self.recorded())
        return [self._tokens(query) or "\u2205"], "sparse", {"metric_type": "BM25", "params": {"drop_ratio_search": 0}}

    def _side_ids(self, side: str, query: str, k: int, where: Mapping[str, Any] | None,
                  vector: Sequence[float] | None) -> list[str]:
        data, field, param = self._request(side, query, vector)
        answer = self.client.search(self.collection, data=data, anns_field=field, limit=k, search_params=param,
                                    filter=milvus_filter(where), output_fields=["id"])
        return [str(hit["id"]) for hit in answer[0]] if answer else []

    def _engine_hybrid(self, query: str, k: int, where: Mapping[str, Any] | None,
                       load: Callable[[list[str]], Sequence[T]], vector: Sequence[float] | None, candidates: int,
                       rrf_k: int) -> list[Hit[T]]:
        expression = milvus_filter(where)
        requests = []
        for side in ("vector", "bm25"):
            data, field, param = self._request(side, query, vector)
            requests.append(self._milvus.AnnSearchRequest(data=data, anns_field=field, param=param,
                                                          limit=candidates, expr=expression or None))
        answer = self.client.hybrid_search(self.collection, requests, ranker=self._milvus.RRFRanker(rrf_k),
                                           limit=k, output_fields=["id"])
        ids = [str(hit["id"]) for hit in answer[0]] if answer else []
        top = 2.0 / (rrf_k + 1)  # first on both sides: the same (0, 1] scale as our fused score
        scores = [float(hit["distance"]) / top for hit in answer[0]] if answer else []
        items = load(ids)
        if len(items) != len(ids):  # a chunk deleted between the search and the read: keep ids beside their items
            kept = set(self._ids_present(ids))
            pairs = [(i, sc) for i, sc in zip(ids, scores, strict=True) if i in kept]
            ids, scores = [i for i, _ in pairs], [sc for _, sc in pairs]
        return [Hit(item, chunk_key(i), score, None, None) for item, score, i in zip(items, scores, ids, strict=True)]

    def _ids_present(self, ids: Sequence[str]) -> list[str]:
        return [str(r["id"]) for r in self.client.get(self.collection, ids=list(ids), output_fields=["id"])]


class EngineFusion(Fusion[T]):
    """The engine's ``hybrid_search`` where a ``HybridRetriever`` would fuse: one round trip, fused scores, no per-side
    ranks (``MilvusStore.hybrid`` with ``engine_fusion=True``)."""

    def __init__(self, store: MilvusStore, load: Callable[[list[str]], Sequence[T]], vector: Sequence[float] | None,
                 candidates: int, rrf_k: int) -> None:
        self.store, self.load, self.vector, self.candidates, self.rrf_k = store, load, vector, candidates, rrf_k

    def retrieve(self, query: str, k: int = 20, where: Mapping[str, Any] | None = None) -> list[Hit[T]]:
        return self.store._engine_hybrid(query, k, where, self.load, self.vector, self.candidates, self.rrf_k)

    async def aretrieve(self, query: str, k: int = 20, where: Mapping[str, Any] | None = None) -> list[Hit[T]]:
        return await asyncio.to_thread(self.retrieve, query, k, where)
