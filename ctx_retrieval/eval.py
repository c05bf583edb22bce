"""Retrieval evaluation: Anthropic's ablation (plain/contextual x dense/BM25/hybrid) on any corpus with gold chunks.

Pass@k is computed exactly as the cookbook does: for each query, the fraction of its gold chunks whose text
(stripped) is among the texts of the top k results, averaged over queries; failure@20 = 1 - Pass@20. Dense
retrieval uses the offline MiniLM embedder through a vector store (embedded Chroma by default, or an exact
numpy index), BM25 the core's index, hybrid their reciprocal rank fusion (k=60) over ``candidates`` results
from each side. Contexts come from any contextualizer (through its persistent cache).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from .bm25 import BM25Index
from .errors import InvalidInputError
from .fusion import reciprocal_rank_fusion
from .text import indexed_text
from .types import Chunk, SourceDocument, split_into_chunks

__all__ = [
    "EvalCorpus",
    "EvalQuery",
    "EvalResult",
    "RecordedContextualizer",
    "VariantScore",
    "load_cookbook",
    "load_corpus",
    "pass_at_k",
    "run_ablation",
]

logger = logging.getLogger(__name__)

DEFAULT_CANDIDATES = 150
K_VALUES = (5, 10, 20)


@dataclass(frozen=True)
class EvalQuery:
    query: str
    gold: tuple[str, ...]  # chunk ids


@dataclass
class EvalCorpus:
    """Documents with their chunks, and queries with gold chunk ids."""

    name: str
    items: list[tuple[SourceDocument, list[Chunk]]]
    queries: list[EvalQuery]

    @property
    def chunks(self) -> list[Chunk]:
        return [c for _, chunks in self.items for c in chunks]

    def validate(self) -> None:
        ids = {c.id for c in self.chunks}
        for q in self.queries:
            missing = [g for g in q.gold if g not in ids]
            if missing:
                raise InvalidInputError(f"query {q.query[:60]!r} names gold chunks not in the corpus: {missing[:3]}; "
                                        "check that the queries file belongs to this corpus")
            if not q.gold:
                raise InvalidInputError(f"query {q.query[:60]!r} has no gold chunk ids")


def _data_file(*parts: str) -> Path:
    return Path(str(resources.files("ctx_retrieval").joinpath("data").joinpath(*parts)))


def cookbook_chunk_id(doc_uuid: str, index: int) -> str:
    return f"{doc_uuid}_{index}"


def load_cookbook(chunks_path: str | Path | None = None, queries_path: str | Path | None = None) -> EvalCorpus:
    """The cookbook format: ``codebase_chunks.json`` and an evaluation ``.jsonl`` (bundled dev half by default)."""
    chunks_path = Path(chunks_path) if chunks_path else _data_file("anthropic_codebase", "codebase_chunks.json")
    queries_path = Path(queries_path) if queries_path else _data_file("anthropic_codebase", "evaluation_dev.jsonl")
    try:
        raw = json.loads(chunks_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInputError(f"no such file: {chunks_path}") from None
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"{chunks_path} is not JSON ({exc}); expected the cookbook's codebase_chunks.json") from None
    if not isinstance(raw, list) or not raw or "chunks" not in raw[0]:
        raise InvalidInputError(f"{chunks_path}: expected a list of documents with 'chunks' (cookbook format)")
    items: list[tuple[SourceDocument, list[Chunk]]] = []
    for doc in raw:
        document = SourceDocument(doc["original_uuid"], doc["content"], {"doc_id": doc.get("doc_id")})
        chunks = split_into_chunks(document, [c["content"] for c in doc["chunks"]])
        chunks = [Chunk(cookbook_chunk_id(doc["original_uuid"], c["original_index"]), chunk.text, chunk.position,
                        chunk.start_char) for c, chunk in zip(doc["chunks"], chunks, strict=True)]
        items.append((document, chunks))
    queries = []
    for n, q in _numbered_jsonl(queries_path):
        query = q.get("query") if isinstance(q, dict) else None
        gold = q.get("golden_chunk_uuids") if isinstance(q, dict) else None
        if not isinstance(query, str) or not query.strip() or not isinstance(gold, list) or not all(
                isinstance(g, list) and len(g) == 2 and isinstance(g[0], str) and isinstance(g[1], int) for g in gold):
            raise InvalidInputError(f"{queries_path}:{n}: expected a string 'query' and 'golden_chunk_uuids' as "
                                    "[[document uuid, chunk index], ...] (the cookbook's format)")
        queries.append(EvalQuery(query, tuple(cookbook_chunk_id(u, i) for u, i in gold)))
    corpus = EvalCorpus(chunks_path.parent.name or "cookbook", items, queries)
    corpus.validate()
    return corpus


def load_corpus(documents_path: str | Path, queries_path: str | Path) -> EvalCorpus:
    """A generic corpus: documents JSONL (``id``, ``text``, ``chunks``: list of ``{"id", "text"}`` or of
    strings, optional ``metadata``) and queries JSONL (``query``, ``gold_chunk_ids``)."""
    items = [document_from_row(row, f"{documents_path}:{n}", chunks_required=True)
             for n, row in _numbered_jsonl(documents_path)]
    owner: dict[str, str] = {}
    for document, chunks in items:
        for chunk in chunks:
            if owner.setdefault(chunk.id, document.id) != document.id:
                raise InvalidInputError(f"{documents_path}: chunk id {chunk.id!r} is in documents {owner[chunk.id]!r} "
                                        f"and {document.id!r}; gold ids must name one chunk: make chunk ids unique")
    queries = []
    for n, q in _numbered_jsonl(queries_path):
        where = f"{queries_path}:{n}"
        query, gold = (q.get("query"), q.get("gold_chunk_ids")) if isinstance(q, dict) else (None, None)
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError(f"{where}: 'query' must be a non-empty string, got {query!r}")
        if not isinstance(gold, list) or not all(isinstance(g, str) for g in gold):
            raise InvalidInputError(f"{where}: 'gold_chunk_ids' must be a list of chunk id strings, got {gold!r}")
        queries.append(EvalQuery(query, tuple(gold)))
    if not queries:
        raise InvalidInputError(f"{queries_path} holds no queries: an evaluation over 0 queries measures nothing")
    corpus = EvalCorpus(Path(documents_path).stem, items, queries)
    corpus.validate()
    return corpus


def document_from_row(row: Any, where: str, *, chunks_required: bool,
                      split: Callable[[str], list[str]] | None = None) -> tuple[SourceDocument, list[Chunk]]:
    """A document and its chunks from one documents-JSONL row (``id`` and ``text`` strings, optional
    ``metadata`` object, ``chunks``: a list of strings or of ``{"text", "id"}`` objects; without chunks the text
    is cut by ``split`` when given), or ``InvalidInputError`` naming ``where`` (file and line) and the fix."""
    if not isinstance(row, dict):
        raise InvalidInputError(f"{where}: expected a JSON object with 'id' and 'text', got {type(row).__name__}")
    doc_id, text, metadata = row.get("id"), row.get("text"), row.get("metadata")
    if not isinstance(doc_id, str) or not doc_id:
        raise InvalidInputError(f"{where}: 'id' must be a non-empty string, got {doc_id!r} (ids 7 and \"7\" would "
                                "collide): quote it")
    if not isinstance(text, str):
        raise InvalidInputError(f"{where}: 'text' must be a string, got {type(text).__name__}")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidInputError(f"{where}: 'metadata' must be a JSON object, got {type(metadata).__name__}")
    document = SourceDocument(doc_id, text, metadata or {})
    raw_chunks = row.get("chunks")
    if raw_chunks is None:
        if chunks_required or split is None:
            raise InvalidInputError(f"{where}: 'chunks' is required: a list of strings or of {{\"id\", \"text\"}}")
        return document, split_into_chunks(document, split(text))
    if not isinstance(raw_chunks, list):
        raise InvalidInputError(f"{where}: 'chunks' must be a list, got {type(raw_chunks).__name__}")
    texts: list[str] = []
    for k, c in enumerate(raw_chunks):
        chunk_text = c.get("text") if isinstance(c, dict) else c
        if not isinstance(chunk_text, str):
            raise InvalidInputError(f"{where}: chunk {k} needs a string 'text' (a string, or an object with "
                                    "'text'), got {type(chunk_text).__name__}")
        if isinstance(c, dict) and "id" in c and (not isinstance(c["id"], str) or not c["id"]):
            raise InvalidInputError(f"{where}: chunk {k}'s 'id' must be a non-empty string, got {c['id']!r}")
        texts.append(chunk_text)
    chunks = split_into_chunks(document, texts)
    return document, [Chunk(c["id"], chunk.text, chunk.position, chunk.start_char) if isinstance(c, dict) and "id" in c
                      else chunk for c, chunk in zip(raw_chunks, chunks, strict=True)]


def _numbered_jsonl(path: str | Path) -> list[tuple[int, Any]]:
    """The rows of a JSONL file with their line numbers (blank lines skipped), read once."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InvalidInputError(f"no such file: {path}") from None
    rows = []
    for n, line in enumerate(lines, start=1):
        if line.strip():
            try:
                rows.append((n, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{path}:{n}: not a JSON line ({exc.msg}); expected JSONL") from None
    return rows


def _read_jsonl(path: str | Path) -> list[Any]:
    return [row for _, row in _numbered_jsonl(path)]


class RecordedContextualizer:
    """Contexts read from a JSONL file (``chunk_id``, ``context``), such as the bundled contexts recorded
    offline from Qwen2.5-Coder-1.5B for the cookbook corpus. Figures made with them are labelled recorded."""

    def __init__(self, path: str | Path | None = None, *, label: str = "recorded local-LLM contexts") -> None:
        self.path = Path(path) if path else _data_file("anthropic_codebase", "contexts_qwen2.5-coder-1.5b.jsonl")
        self.label = label
        self.name = "recorded"
        self.model = self.path.stem
        self.last_report: Any = None

    def contexts(self) -> dict[str, str]:
        return {row["chunk_id"]: row["context"] for row in _read_jsonl(self.path)}

    @property
    def identity(self) -> str:
        return f"recorded|{self.path.name}"

    def contextualize_many(self, items: Iterable[tuple[SourceDocument, Sequence[Chunk]]]) -> Any:
        """The recorded context of each chunk, as a contextualizer's run (so the framework adapters take it); a
        chunk without one fails with ``not_recorded``, never gets an invented context."""
        from .results import ContextRun
        from .types import ContextResult
        from .usage import FailedChunk, RunReport

        contexts = self.contexts()
        report = RunReport(provider=self.name, model=self.model, prompt_version="recorded", cost_usd=0.0)
        results = []
        for document, chunks in items:
            report.documents += 1
            for chunk in chunks:
                report.chunks += 1
                context = contexts.get(chunk.id)
                if context:
                    report.cached += 1
                else:
                    report.failures.append(FailedChunk(document, chunk, tuple(chunks), "not_recorded",
                                                       f"no recorded context for chunk {chunk.id}"))
                results.append(ContextResult(
                    document_id=document.id, chunk_id=chunk.id, position=chunk.position, context=context or None,
                    status="cached" if context else "failed", provider=self.name, model=self.model,
                    prompt_version="recorded", error=None if context else "not_recorded",
                    error_kind=None if context else "not_recorded"))
        self.last_report = report
        return ContextRun(results, report)

    async def acontextualize_many(self, items: Iterable[tuple[SourceDocument, Sequence[Chunk]]]) -> Any:
        return self.contextualize_many(items)


# -- scoring ---------------------------------------------------------------------------------------------


def pass_per_query(results: Sequence[Sequence[str]], queries: Sequence[EvalQuery], text_of: dict[str, str],
                   k: int) -> list[float]:
    """Per query, the share of its gold chunk texts found among the top-k texts (the cookbook's Pass@k terms)."""
    values = []
    for retrieved, query in zip(results, queries, strict=True):
        top = {text_of[r].strip() for r in retrieved[:k]}
        values.append(sum(1 for g in query.gold if text_of[g].strip() in top) / len(query.gold))
    return values


def pass_at_k(results: Sequence[Sequence[str]], queries: Sequence[EvalQuery], text_of: dict[str, str], k: int) -> float:
    """The cookbook's Pass@k: per query, gold chunk texts found among the top-k texts / gold count; averaged."""
    values = pass_per_query(results, queries, text_of, k)
    return sum(values) / len(values) if values else 0.0


BOOTSTRAP_RESAMPLES = 2000


def bootstrap_interval(values: Sequence[float], *, against: Sequence[float] | None = None, seed: int = 0,
                       resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """A 95% percentile bootstrap interval over queries for the mean of ``values`` (paired with ``against``: the
    mean difference ``values - against``, the same queries resampled for both). Seeded: the same on every run."""
    import numpy as np

    data = np.asarray(values, dtype=np.float64)
    if against is not None:
        data = data - np.asarray(against, dtype=np.float64)
    if len(data) == 0:
        return 0.0, 0.0
    picks = np.random.default_rng(seed).integers(0, len(data), size=(resamples, len(data)))
    means = data[picks].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


@dataclass(frozen=True)
class VariantScore:
    name: str
    pass_at: dict[int, float]
    failure_at_20: float
    failure_reduction_vs_plain_dense: float | None = None
    failure_interval: tuple[float, float] | None = None  # 95% bootstrap interval of failure@20 over queries
    compared_with: str | None = None  # the plain variant this one is read against
    difference: float | None = None  # failure@20 minus compared_with's (negative: fewer failures)
    difference_interval: tuple[float, float] | None = None


@dataclass
class EvalResult:
    corpus: str
    contextualizer: str
    queries: int
    chunks: int
    rows: list[VariantScore]
    meta: dict[str, Any] = field(default_factory=dict)
    rankings: dict[str, list[list[str]]] = field(default_factory=dict, repr=False)  # per variant, per query
    contexts: dict[str, str | None] = field(default_factory=dict, repr=False)  # the contexts evaluated

    def to_markdown(self) -> str:
        lines = [f"Retrieval on {self.corpus} ({self.chunks} chunks, {self.queries} queries); contexts: "
                 f"{self.contextualizer}", "",
                 "| variant | Pass@5 | Pass@10 | Pass@20 | failure@20 [95% CI] | vs plain (points) [95% CI] |",
                 "|---|---|---|---|---|---|"]
        for row in self.rows:
            interval = (f" [{row.failure_interval[0]:.1%}, {row.failure_interval[1]:.1%}]"
                        if row.failure_interval else "")
            versus = ""
            if row.difference is not None and row.difference_interval is not None:
                lo, hi = row.difference_interval
                versus = f"{row.difference * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}] vs {row.compared_with}"
            lines.append(f"| {row.name} | {row.pass_at[5]:.1%} | {row.pass_at[10]:.1%} | {row.pass_at[20]:.1%} | "
                         f"{row.failure_at_20:.1%}{interval} | {versus} |")
        lines += ["", f"Intervals: {BOOTSTRAP_RESAMPLES} bootstrap resamples of the queries (seeded), paired for "
                      f"differences; one query is {100 / max(self.queries, 1):.1f} points."]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"corpus": self.corpus, "contextualizer": self.contextualizer, "queries": self.queries,
                "chunks": self.chunks, "rows": [asdict(r) for r in self.rows], "meta": self.meta,
                "contexts": self.contexts}

    def chart(self, path: str | Path) -> Path:
        """A PNG bar chart of Pass@5/10/20 per variant (needs matplotlib: ``ctx-retrieval[eval]``)."""
        from ._optional import require

        require("matplotlib", "eval")
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(10, 4.8), dpi=110)
        width = 0.26
        xs = range(len(self.rows))
        for n, k in enumerate(K_VALUES):
            values = [r.pass_at[k] * 100 for r in self.rows]
            bars = ax.bar([x + (n - 1) * width for x in xs], values, width, label=f"Pass@{k}")
            ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
        ax.set_xticks(list(xs), [r.name.replace(" ", "\n") for r in self.rows], fontsize=8)
        low = min(r.pass_at[5] for r in self.rows) * 100
        ax.set_ylim(max(0, low - 10), 100)
        ax.set_ylabel("Pass@k (%)")
        ax.set_title(f"{self.corpus}, contexts: {self.contextualizer}", fontsize=10)
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return path


# -- dense indexes ---------------------------------------------------------------------------------------


class DenseIndex(Protocol):
    def search(self, query_vectors: Any, k: int) -> list[list[str]]: ...


class NumpyDenseIndex:
    """Exact cosine search over unit vectors (brute force)."""

    def __init__(self, ids: Sequence[str], vectors: Any) -> None:
        self.ids = list(ids)
        self.vectors = vectors

    def search(self, query_vectors: Any, k: int) -> list[list[str]]:
        import numpy as np

        scores = query_vectors @ self.vectors.T
        k = min(k, len(self.ids))
        top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return [[self.ids[i] for i in row] for row in top]


class ChromaDenseIndex:
    """A Chroma collection holding precomputed vectors (cosine space); reused when already complete."""

    def __init__(self, client: Any, name: str, ids: Sequence[str], texts: Sequence[str], vectors: Any,
                 embedding_function: Any) -> None:
        self.collection = client.get_or_create_collection(
            name, embedding_function=embedding_function, metadata={"hnsw:space": "cosine"})
        if self.collection.count() != len(ids):
            if self.collection.count():
                client.delete_collection(name)
                self.collection = client.get_or_create_collection(
                    name, embedding_function=embedding_function, metadata={"hnsw:space": "cosine"})
            for start in range(0, len(ids), 1000):
                end = start + 1000
                self.collection.add(ids=list(ids[start:end]), documents=list(texts[start:end]),
                                    embeddings=[v for v in vectors[start:end]])

    def search(self, query_vectors: Any, k: int) -> list[list[str]]:
        result = self.collection.query(query_embeddings=[v for v in query_vectors],
                                       n_results=min(k, self.collection.count()), include=[])
        return [list(ids) for ids in result["ids"]]


# -- the ablation ----------------------------------------------------------------------------------------


def _score(name: str, results: list[list[str]], corpus: EvalCorpus, text_of: dict[str, str]) -> VariantScore:
    passes = {k: pass_at_k(results, corpus.queries, text_of, k) for k in K_VALUES}
    return VariantScore(name, passes, 1.0 - passes[20])


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
            if "(windows)" in row.name:
                plain = f"contextual {method}"  # read against the whole layout it would replace
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


def run_ablation(
    corpus: EvalCorpus,
    contexts: dict[str, str | None],
    *,
    contextualizer_label: str,
    embedder: Any,
    vector_store: str = "numpy",
    chroma_client: Any = None,
    candidates: int = DEFAULT_CANDIDATES,
    reranker: Callable[[list[str], list[list[str]], dict[str, str]], list[list[str]]] | None = None,
    progress: Callable[[str], None] | None = None,
    baseline: tuple[str, dict[str, str | None]] | None = None,
    tokenizer: str = "identifiers",
    late_chunking: bool = False,
    embed_layout: str = "whole",
) -> EvalResult:
    """Pass@5/10/20 for plain and contextual dense, BM25 and hybrid retrieval (and hybrid + rerank).

    ``baseline`` (a label and its contexts, e.g. the heuristic's) adds a row: contextual hybrid retrieval with those
    contexts instead, so LLM contexts are read against a cheap alternative. ``late_chunking`` adds the no-LLM
    alternative on the embedding side: "late-chunked dense" (each chunk pooled from its document's token outputs,
    ``ctx_retrieval.late``) and "late-chunked hybrid" (that with plain BM25, which late chunking does not change)."""
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
    query_vectors = embedder.embed(queries)
    plain_vectors = embedder.embed(plain)
    contextual_vectors = embedder.embed(contextual)
    embed_s = time.perf_counter() - t
    truncated = embedder.warn_if_truncated(contextual) if hasattr(embedder, "warn_if_truncated") else 0

    def dense(texts: list[str], vectors: Any, variant: str) -> DenseIndex:
        if vector_store == "numpy":
            return NumpyDenseIndex(ids, vectors)
        digest = hashlib.sha256("\x00".join(texts).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        name = f"ctx-eval-{variant}-{digest}"
        return ChromaDenseIndex(chroma_client, name, ids, texts, vectors, embedder.chroma_embedding_function())

    say(f"indexing into {vector_store} and BM25")
    rankings: dict[str, list[list[str]]] = {}
    for variant, texts, vectors in (("plain", plain, plain_vectors), ("contextual", contextual, contextual_vectors)):
        rankings[f"{variant} dense"] = dense(texts, vectors, variant).search(query_vectors, candidates)
        bm25 = BM25Index(ids, texts, tokenizer=tokenizer)
        rankings[f"{variant} BM25"] = [[i for i, _ in bm25.search(q, candidates)] for q in queries]
        rankings[f"{variant} hybrid"] = [
            [i for i, _ in reciprocal_rank_fusion([d, b])]
            for d, b in zip(rankings[f"{variant} dense"], rankings[f"{variant} BM25"], strict=True)]
    order = ["plain dense", "contextual dense", "plain BM25", "contextual BM25", "plain hybrid", "contextual hybrid"]
    rows = [_score(name, rankings[name], corpus, text_of) for name in order]
    if baseline is not None:
        label, baseline_contexts = baseline
        texts = [indexed_text(c.text, baseline_contexts.get(c.id)) for c in chunks]
        dense_ranking = dense(texts, embedder.embed(texts), "baseline").search(query_vectors, candidates)
        bm25 = BM25Index(ids, texts, tokenizer=tokenizer)
        name = f"contextual hybrid ({label})"
        rankings[name] = [[i for i, _ in reciprocal_rank_fusion([d, [j for j, _ in bm25.search(q, candidates)]])]
                          for d, q in zip(dense_ranking, queries, strict=True)]
        rows.append(_score(name, rankings[name], corpus, text_of))
    if embed_layout == "windows":
        from .layout import window_texts

        counter = getattr(embedder, "count_tokens", None)
        if counter is None:
            raise InvalidInputError("embed_layout='windows' needs an embedder that counts its tokens (MiniLMEmbedder)")
        window_ids: list[str] = []
        window_of: list[str] = []
        for c in chunks:
            for text in window_texts(c.text, contexts.get(c.id), counter):
                window_ids.append(f"{c.id}#w{len(window_ids)}")
                window_of.append(text)
        owner = {wid: wid.rsplit("#w", 1)[0] for wid in window_ids}
        say(f"windows layout: {len(window_ids)} vectors for {len(chunks)} chunks")
        found = NumpyDenseIndex(window_ids, embedder.embed(window_of)).search(query_vectors, 4 * candidates)
        best: list[list[str]] = []
        for row in found:
            seen: dict[str, None] = {}
            for wid in row:
                seen.setdefault(owner[wid], None)
                if len(seen) == candidates:
                    break
            best.append(list(seen))
        rankings["contextual dense (windows)"] = best
        rankings["contextual hybrid (windows)"] = [
            [i for i, _ in reciprocal_rank_fusion([d, b])]
            for d, b in zip(best, rankings["contextual BM25"], strict=True)]
        rows += [_score(name, rankings[name], corpus, text_of)
                 for name in ("contextual dense (windows)", "contextual hybrid (windows)")]
    elif embed_layout != "whole":
        raise InvalidInputError(f"embed_layout must be 'whole' or 'windows', not {embed_layout!r}")
    if late_chunking:
        from .late import late_chunk_embeddings

        say(f"late chunking: embedding {len(corpus.items)} whole documents in overlapping windows")
        late = {}
        for document, document_chunks in corpus.items:
            for chunk, vector in zip(document_chunks, late_chunk_embeddings(document, document_chunks, embedder),
                                     strict=True):
                late[chunk.id] = vector
        import numpy as np

        rankings["late-chunked dense"] = NumpyDenseIndex(ids, np.stack([late[i] for i in ids])).search(
            query_vectors, candidates)
        rankings["late-chunked hybrid"] = [
            [i for i, _ in reciprocal_rank_fusion([d, b])]
            for d, b in zip(rankings["late-chunked dense"], rankings["plain BM25"], strict=True)]
        rows += [_score(name, rankings[name], corpus, text_of)
                 for name in ("late-chunked dense", "late-chunked hybrid")]
    if reranker is not None:
        say("reranking the contextual hybrid candidates")
        contextual_text = dict(zip(ids, contextual, strict=True))
        reranked = reranker(queries, rankings["contextual hybrid"], contextual_text)
        rows.append(_score("contextual hybrid + rerank", reranked, corpus, text_of))
    base = rows[0].failure_at_20
    rows = [VariantScore(r.name, r.pass_at, r.failure_at_20,
                         None if i == 0 or base == 0 else (base - r.failure_at_20) / base)
            for i, r in enumerate(rows)]
    if reranker is not None:
        rankings["contextual hybrid + rerank"] = reranked
    rows = _with_intervals(rows, rankings, corpus, text_of)
    meta = {"vector_store": vector_store, "exact_search": vector_store == "numpy", "bm25_tokenizer": tokenizer,
            "late_chunking": late_chunking, "embed_layout": embed_layout,
            "candidates": candidates, "rrf_k": 60,
            "embedder": getattr(embedder, "model_id", type(embedder).__name__),
            "chunks_with_context": with_context, "contextual_texts_truncated_for_embedding": truncated,
            "embedding_seconds": round(embed_s, 1), "wall_seconds": round(time.perf_counter() - started, 1)}
    return EvalResult(corpus.name, contextualizer_label, len(queries), len(chunks), rows, meta, rankings,
                      {c.id: contexts.get(c.id) for c in chunks})
