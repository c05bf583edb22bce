"""Retrieval evaluation: Anthropic's ablation (plain/contextual x dense/BM25/hybrid) on any corpus with gold chunks.

Pass@k is computed exactly as the cookbook does: for each query, the fraction of its gold chunks whose text
(stripped) is among the texts of the top k results, averaged over queries; failure@20 = 1 - Pass@20. Every row is
a query of the core's ``HybridRetriever`` (the one the store and both adapters run): dense retrieval with the
offline MiniLM embedder through an exact numpy index by default (or a Chroma collection), BM25 the ``BM25Store``,
hybrid their reciprocal rank fusion (``DEFAULT_RRF_K``) over ``candidates`` results from each side. Contexts come
from any contextualizer (through its persistent cache).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from ctx_retrieval._names import former_keywords
from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.evaluation.corpus import EvalCorpus
from ctx_retrieval.evaluation.metrics import (
    K_VALUES,
    bootstrap_interval,
    mean_reciprocal_rank,
    pass_at_k,
    pass_per_query,
)
from ctx_retrieval.evaluation.models import as_embedder, embed_queries
from ctx_retrieval.evaluation.report import EvalResult, VariantScore
from ctx_retrieval.protocols import Embedder, TokenCountingEmbedder
from ctx_retrieval.retrieval.bm25_store import BM25Entry, BM25Store, StoredEntry
from ctx_retrieval.retrieval.dense import ChromaDenseIndex, ChromaSide, NumpyDenseSide
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K
from ctx_retrieval.retrieval.hybrid import DEFAULT_CANDIDATES, BM25Side, HybridRetriever, Side, WindowedSide
from ctx_retrieval.text import indexed_text

logger = logging.getLogger(__name__)


def _entry_id(entry: StoredEntry) -> str:
    return entry.id


def _bm25(ids: list[str], texts: list[str], tokenizer: str) -> Side[str]:
    store = BM25Store(tokenizer=tokenizer)
    store.upsert(BM25Entry(i, t) for i, t in zip(ids, texts, strict=True))
    return BM25Side(store, _entry_id)


class _QueryVectors:
    """An engine's dense side given each query's vector, embedded beforehand with the others (as the other stores
    are)."""

    def __init__(self, side: Any, vector_of: Callable[[str], Any]) -> None:
        self.side, self.vector_of = side, vector_of

    def search(self, query: str, k: int, where: Any = None) -> Any:
        self.side.vector = self.vector_of(query)
        return self.side.search(query, k, where)


def _rankings(vector: Side[str] | list[Side[str]] | None, bm25: Side[str] | None, queries: list[str],
              candidates: int) -> list[list[str]]:
    """Each query's ranking (chunk ids, up to ``candidates``) through the core hybrid query."""
    retriever = HybridRetriever(vector, bm25, candidates=candidates)
    return [[hit.item for hit in retriever.retrieve(q, candidates)] for q in queries]


def _score(name: str, results: list[list[str]], corpus: EvalCorpus, text_of: dict[str, str]) -> VariantScore:
    passes = {k: pass_at_k(results, corpus.queries, text_of, k) for k in K_VALUES}
    return VariantScore(name, passes, 1.0 - passes[20], mrr=mean_reciprocal_rank(results, corpus.queries, text_of))


def _with_intervals(rows: list[VariantScore], rankings: dict[str, list[list[str]]], corpus: EvalCorpus,
                    text_of: dict[str, str]) -> list[VariantScore]:
    """Each row's 95% interval of failure@20, and each contextual row's difference from its plain counterpart
    (the heuristic baseline and rerank rows against plain hybrid) with its paired interval."""
    per_query = {r.name: pass_per_query(rankings[r.name], corpus.queries, text_of, 20) for r in rows}
    out = []
    for row in rows:
        fails = [1.0 - v for v in per_query[row.name]]
        lo, hi = bootstrap_interval(fails)
        plain = None
        if row.name.startswith("contextual "):
            method = row.name.split(" ")[1]
            plain = f"plain {method}" if f"plain {method}" in per_query else None
            same_model = "plain" + row.name[len("contextual"):]
            if "(windows)" in row.name:
                plain = f"contextual {method}"  # read against the whole layout it would replace
            elif "(" in row.name and "rerank" not in row.name and same_model in per_query:
                plain = same_model  # another embedder's contextual row against its own plain row
            elif "(" in row.name or "rerank" in row.name:
                plain = "plain hybrid"
        elif row.name.startswith("late-chunked "):
            plain = f"plain {row.name.split(' ')[1]}"
        difference = interval = None
        if plain is not None:
            other = [1.0 - v for v in per_query[plain]]
            difference = sum(fails) / len(fails) - sum(other) / len(other) if fails else 0.0
            interval = bootstrap_interval(fails, against=other)
        out.append(dataclasses.replace(row, failure_interval=(lo, hi), compared_with=plain, difference=difference,
                                       difference_interval=interval))
    return out


@former_keywords({"second_embedder": "fused_embedder", "embedders": "other_embedders",
                  "rerankers": "other_rerankers"})
def run_ablation(
    corpus: EvalCorpus,
    contexts: dict[str, str | None],
    *,
    contextualizer_label: str,
    embedder: Embedder,
    vector_store: str = "numpy",
    chroma_client: Any = None,
    candidates: int = DEFAULT_CANDIDATES,
    reranker: Callable[[list[str], list[list[str]], dict[str, str]], list[list[str]]] | None = None,
    progress: Callable[[str], None] | None = None,
    baseline: tuple[str, dict[str, str | None]] | None = None,
    tokenizer: str = "identifiers",
    late_chunking: bool = False,
    embed_layout: str = "whole",
    fused_embedder: tuple[str, Embedder] | None = None,
    milvus_uri: str | None = None,
    postgres_url: str | None = None,
    other_embedders: dict[str, Any] | None = None,
    other_rerankers: dict[str, Callable[[list[str], list[list[str]], dict[str, str]], list[list[str]]]] | None = None,
) -> EvalResult:
    """Pass@5/10/20 for plain and contextual dense, BM25 and hybrid retrieval (and hybrid + rerank).

    ``baseline`` (a label and its contexts, e.g. the heuristic's) adds a row: contextual hybrid retrieval with those
    contexts instead, so LLM contexts are read against a cheap alternative. ``late_chunking`` adds the no-LLM
    alternative on the embedding side: "late-chunked dense" (each chunk pooled from its document's token outputs,
    ``ctx_retrieval.retrieval.late``) and "late-chunked hybrid" (that with plain BM25, which late chunking does
    not change). ``fused_embedder`` (a label and an embedder, e.g. ``("e5", E5Embedder())``) adds "plain/contextual
    hybrid (+ label)": three-way fusion of both embedders' dense sides and BM25. ``other_embedders`` (label -> any
    LangChain ``Embeddings``, LlamaIndex ``BaseEmbedding`` or ``Embedder``, ``models.as_embedder``) adds "plain /
    contextual hybrid (label)" with that model's dense side instead of ``embedder``'s. ``reranker`` gives the row the
    verdict reads, "contextual hybrid + rerank"; ``other_rerankers`` (label -> a reranker: queries, candidate rankings
    and texts in, rankings out, as ``langchain_ctx.eval_reranker`` / ``llama_index_ctx.eval_reranker`` make of a
    compressor or postprocessor) each add "contextual hybrid + rerank (label)" beside it. (``fused_embedder``,
    ``other_embedders`` and ``other_rerankers`` were ``second_embedder``, ``embedders`` and ``rerankers``: the old
    names still work, with a ``DeprecationWarning``, for one release.)
    ``vector_store="milvus"``: each variant in a Milvus collection at ``milvus_uri`` (a Milvus Lite file or a
    server), both sides the engine's (its dense field, its BM25 over our analysis); the added rows' BM25 too.
    ``vector_store="postgres"``: each variant in a ``PostgresStore`` table at ``postgres_url`` (pgvector HNSW and
    BM25 in SQL over our analysis)."""
    say = progress or (lambda message: logger.info("%s", message))
    started = time.perf_counter()
    chunks = corpus.chunks
    ids = [c.id for c in chunks]
    text_of = {c.id: c.text for c in chunks}
    plain = [c.text for c in chunks]
    contextual = [indexed_text(c.text, contexts.get(c.id)) for c in chunks]
    with_context = sum(1 for c in chunks if contexts.get(c.id))
    queries = [q.query for q in corpus.queries]

    say(f"embedding {len(queries)} queries and {2 * len(ids)} chunk texts (cached after the first run)")
    t = time.perf_counter()
    # Queries as queries: an asymmetric model (e5) embeds them with its own prefix (embed_queries); MiniLM embeds
    # both alike.
    query_vectors = embed_queries(embedder, queries)
    plain_vectors = embedder.embed(plain)
    contextual_vectors = embedder.embed(contextual)
    embed_s = time.perf_counter() - t
    truncated = embedder.warn_if_truncated(contextual) if isinstance(embedder, TokenCountingEmbedder) else 0

    query_vector = dict(zip(queries, query_vectors, strict=True))

    def both(texts: list[str], vectors: Any, variant: str) -> tuple[Side[str], Side[str]]:
        """The dense and BM25 sides of one variant."""
        if vector_store == "postgres":
            from ctx_retrieval.retrieval.postgres import PostgresStore
            from ctx_retrieval.retrieval.store import IndexedChunk

            if not postgres_url:
                raise InvalidInputError("vector_store='postgres' needs postgres_url= (postgresql://user@host/db, a "
                                        "server with pgvector >= 0.8)")
            digest = hashlib.sha256("\x00".join(texts).encode("utf-8", "surrogatepass")).hexdigest()[:16]
            table = PostgresStore(postgres_url, embedder=embedder, table=f"ctx_eval_{variant}_{digest}",
                                  tokenizer=tokenizer, replace=True)
            table.add([IndexedChunk(i, "eval", t, None) for i, t in zip(ids, texts, strict=True)], vectors=vectors)
            return (_QueryVectors(table.side("vector", load=list), query_vector.__getitem__),
                    table.side("bm25", load=list))
        if vector_store != "milvus":
            return dense(texts, vectors, variant), _bm25(ids, texts, tokenizer)
        from ctx_retrieval.retrieval.milvus import MilvusStore
        from ctx_retrieval.retrieval.pairing import Record

        if not milvus_uri:
            raise InvalidInputError("vector_store='milvus' needs milvus_uri= (a Milvus Lite file or a server's URL)")
        digest = hashlib.sha256("\x00".join(texts).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        store = MilvusStore(milvus_uri, embedder=embedder, collection=f"ctx_eval_{variant}_{digest}",
                            tokenizer=tokenizer, replace=True)
        store.add_records([Record(i, t, text_of[i]) for i, t in zip(ids, texts, strict=True)], vectors)
        vector_of = query_vector.__getitem__
        return _QueryVectors(store.side("vector", load=list), vector_of), store.side("bm25", load=list)

    def dense(texts: list[str], vectors: Any, variant: str) -> Side[str]:
        if vector_store in ("milvus", "postgres"):
            return both(texts, vectors, variant)[0]
        if vector_store == "numpy":
            return NumpyDenseSide(ids, vectors, query_vector.__getitem__)
        from ctx_retrieval.retrieval.chroma import MiniLMChromaEmbeddingFunction

        digest = hashlib.sha256("\x00".join(texts).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        name = f"ctx-eval-{variant}-{digest}"
        index = ChromaDenseIndex(chroma_client, name, ids, texts, vectors, MiniLMChromaEmbeddingFunction(embedder))
        return ChromaSide(index.collection, query_vector.__getitem__)

    say(f"indexing into {vector_store} and BM25")
    rankings: dict[str, list[list[str]]] = {}
    bm25_sides: dict[str, Side[str]] = {}
    for variant, texts, vectors in (("plain", plain, plain_vectors), ("contextual", contextual, contextual_vectors)):
        vector_side, bm25_sides[variant] = both(texts, vectors, variant)
        rankings[f"{variant} dense"] = _rankings(vector_side, None, queries, candidates)
        rankings[f"{variant} BM25"] = _rankings(None, bm25_sides[variant], queries, candidates)
        rankings[f"{variant} hybrid"] = _rankings(vector_side, bm25_sides[variant], queries, candidates)
    order = ["plain dense", "contextual dense", "plain BM25", "contextual BM25", "plain hybrid", "contextual hybrid"]
    rows = [_score(name, rankings[name], corpus, text_of) for name in order]
    if baseline is not None:
        label, baseline_contexts = baseline
        texts = [indexed_text(c.text, baseline_contexts.get(c.id)) for c in chunks]
        name = f"contextual hybrid ({label})"
        # A text already embedded (no baseline context: the plain text; the same context) reuses its vector.
        known = dict(zip(plain, plain_vectors, strict=True))
        known.update(zip(contextual, contextual_vectors, strict=True))
        missing = [t for t in texts if t not in known]
        new = list(dict.fromkeys(missing))
        say(f"embedding {len(new)} chunk texts with the {label} contexts for its row "
            f"({len(texts) - len(missing)} already embedded)")
        known.update(zip(new, embedder.embed(new) if new else [], strict=True))
        import numpy as np

        baseline_vector, baseline_bm25 = both(texts, np.stack([known[t] for t in texts]), "baseline")
        rankings[name] = _rankings(baseline_vector, baseline_bm25, queries, candidates)
        rows.append(_score(name, rankings[name], corpus, text_of))
    if fused_embedder is not None:
        label, other = fused_embedder
        say(f"embedding with {label} too, for three-way fusion")
        other_queries = dict(zip(queries, embed_queries(other, queries), strict=True))
        for variant, texts in (("plain", plain), ("contextual", contextual)):
            name = f"{variant} hybrid (+ {label})"
            vectors = [dense(texts, plain_vectors if variant == "plain" else contextual_vectors, variant),
                       NumpyDenseSide(ids, other.embed(texts), other_queries.__getitem__)]
            rankings[name] = _rankings(vectors, bm25_sides[variant], queries, candidates)
            rows.append(_score(name, rankings[name], corpus, text_of))
    for label, model in (other_embedders or {}).items():
        other_embedder = as_embedder(model)
        say(f"embedding with {label}")
        other_queries = dict(zip(queries, embed_queries(other_embedder, queries), strict=True))
        for variant, texts in (("plain", plain), ("contextual", contextual)):
            name = f"{variant} hybrid ({label})"
            side: Side[str] = NumpyDenseSide(ids, other_embedder.embed(texts), other_queries.__getitem__)
            rankings[name] = _rankings(side, bm25_sides[variant], queries, candidates)
            rows.append(_score(name, rankings[name], corpus, text_of))
    if embed_layout == "windows":
        from ctx_retrieval.retrieval.layout import window_texts

        if not isinstance(embedder, TokenCountingEmbedder):
            raise InvalidInputError("embed_layout='windows' needs an embedder that counts its tokens (MiniLMEmbedder)")
        window_of: list[str] = []
        owners: list[str] = []
        for c in chunks:
            for text in window_texts(c.text, contexts.get(c.id), embedder.count_tokens):
                window_of.append(text)
                owners.append(c.id)
        say(f"windows layout: {len(window_of)} vectors for {len(chunks)} chunks")
        windows: Side[str] = WindowedSide(NumpyDenseSide(owners, embedder.embed(window_of), query_vector.__getitem__,
                                              chunk_ids=owners))
        rankings["contextual dense (windows)"] = _rankings(windows, None, queries, candidates)
        rankings["contextual hybrid (windows)"] = _rankings(windows, bm25_sides["contextual"], queries, candidates)
        rows += [_score(name, rankings[name], corpus, text_of)
                 for name in ("contextual dense (windows)", "contextual hybrid (windows)")]
    elif embed_layout != "whole":
        raise InvalidInputError(f"embed_layout must be 'whole' or 'windows', not {embed_layout!r}")
    if late_chunking:
        from ctx_retrieval.retrieval.late import late_chunk_embeddings

        say(f"late chunking: embedding {len(corpus.items)} whole documents in overlapping windows")
        late = {}
        for document, document_chunks in corpus.items:
            for chunk, vector in zip(document_chunks, late_chunk_embeddings(document, document_chunks, embedder),
                                     strict=True):
                late[chunk.id] = vector
        import numpy as np

        late_side: Side[str] = NumpyDenseSide(ids, np.stack([late[i] for i in ids]), query_vector.__getitem__)
        rankings["late-chunked dense"] = _rankings(late_side, None, queries, candidates)
        rankings["late-chunked hybrid"] = _rankings(late_side, bm25_sides["plain"], queries, candidates)
        rows += [_score(name, rankings[name], corpus, text_of)
                 for name in ("late-chunked dense", "late-chunked hybrid")]
    contextual_text = dict(zip(ids, contextual, strict=True))
    if reranker is not None:
        say("reranking the contextual hybrid candidates")
        reranked = reranker(queries, rankings["contextual hybrid"], contextual_text)
        rows.append(_score("contextual hybrid + rerank", reranked, corpus, text_of))
    extra_reranked = {}
    for label, rerank in (other_rerankers or {}).items():
        say(f"reranking the contextual hybrid candidates with {label}")
        name = f"contextual hybrid + rerank ({label})"
        extra_reranked[name] = rerank(queries, rankings["contextual hybrid"], contextual_text)
        rows.append(_score(name, extra_reranked[name], corpus, text_of))
    base = rows[0].failure_at_20
    rows = [dataclasses.replace(r, failure_reduction_vs_plain_dense=None if i == 0 or base == 0 else
                                (base - r.failure_at_20) / base) for i, r in enumerate(rows)]
    if reranker is not None:
        rankings["contextual hybrid + rerank"] = reranked
    rankings.update(extra_reranked)
    rows = _with_intervals(rows, rankings, corpus, text_of)
    meta = {"vector_store": vector_store, "exact_search": vector_store in ("numpy", "milvus"),  # Milvus: FLAT
            "bm25_tokenizer": tokenizer,
            "late_chunking": late_chunking, "embed_layout": embed_layout,
            "candidates": candidates, "rrf_k": DEFAULT_RRF_K,
            "embedder": embedder.model_id,
            "fused_embedder": fused_embedder[1].model_id if fused_embedder else None,
            "chunks_with_context": with_context, "contextual_texts_truncated_for_embedding": truncated,
            "embedding_seconds": round(embed_s, 1), "wall_seconds": round(time.perf_counter() - started, 1)}
    return EvalResult(corpus.name, contextualizer_label, len(queries), len(chunks), rows, meta, rankings,
                      {c.id: contexts.get(c.id) for c in chunks}, list(corpus.queries), text_of)
