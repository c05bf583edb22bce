"""The evaluation's inputs: a corpus of documents with gold chunks and its queries (the bundled cookbook corpus or
your own JSONL), and recorded contexts read from a file."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ctx_retrieval.contextualize.results import ContextRun
from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.loaders import (
    cookbook_chunk_id,
    document_from_row,
    load_cookbook_documents,
    numbered_jsonl,
    read_jsonl,
)
from ctx_retrieval.types import Chunk, ContextResult, SourceDocument
from ctx_retrieval.usage import FailedChunk, RunReport


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

    def first_documents(self, n: int) -> EvalCorpus:
        """The first ``n`` documents with the queries whose gold chunks all lie in them: a quicker ablation (the
        cookbook's first 45 files hold 324 of its 737 chunks and 65 of its 124 dev queries)."""
        if n < 1:
            raise InvalidInputError(f"first_documents({n}): give at least one document")
        items = self.items[:n]
        kept = {chunk.id for _, chunks in items for chunk in chunks}
        return EvalCorpus(self.name, items, [q for q in self.queries if set(q.gold) <= kept])

    def validate(self, chunked: str | None = None) -> None:
        """Every query names gold chunks the corpus holds; ``chunked`` says how its chunks were cut (and how to cut
        them as the queries' were), for the error."""
        ids = {c.id for c in self.chunks}
        for q in self.queries:
            missing = [g for g in q.gold if g not in ids]
            if missing:
                raise InvalidInputError(f"query {q.query[:60]!r} names gold chunks not in the corpus: {missing[:3]}; "
                                        + (chunked or "check that the queries file belongs to this corpus"))
            if not q.gold:
                raise InvalidInputError(f"query {q.query[:60]!r} has no gold chunk ids")


def _data_file(*parts: str) -> Path:
    return Path(str(resources.files("ctx_retrieval").joinpath("data").joinpath(*parts)))


def load_cookbook(chunks_path: str | Path | None = None, queries_path: str | Path | None = None) -> EvalCorpus:
    """The cookbook format: ``codebase_chunks.json`` and an evaluation ``.jsonl`` (bundled dev half by default)."""
    chunks_path = Path(chunks_path) if chunks_path else _data_file("anthropic_codebase", "codebase_chunks.json")
    queries_path = Path(queries_path) if queries_path else _data_file("anthropic_codebase", "evaluation_dev.jsonl")
    items = load_cookbook_documents(chunks_path)
    queries = []
    for n, q in numbered_jsonl(queries_path):
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
             for n, row in numbered_jsonl(documents_path)]
    owner: dict[str, str] = {}
    for document, chunks in items:
        for chunk in chunks:
            if owner.setdefault(chunk.id, document.id) != document.id:
                raise InvalidInputError(f"{documents_path}: chunk id {chunk.id!r} is in documents {owner[chunk.id]!r} "
                                        f"and {document.id!r}; gold ids must name one chunk: make chunk ids unique")
    corpus = EvalCorpus(Path(documents_path).stem, items, read_queries(queries_path))
    corpus.validate()
    return corpus


def read_queries(queries_path: str | Path) -> list[EvalQuery]:
    """A queries JSONL (``query``, ``gold_chunk_ids``), such as ``QuerySet.write`` writes; typed errors name the
    line."""
    queries = []
    for n, q in numbered_jsonl(queries_path):
        where = f"{queries_path}:{n}"
        query, gold = (q.get("query"), q.get("gold_chunk_ids")) if isinstance(q, dict) else (None, None)
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError(f"{where}: 'query' must be a non-empty string, got {query!r}")
        if not isinstance(gold, list) or not all(isinstance(g, str) for g in gold):
            raise InvalidInputError(f"{where}: 'gold_chunk_ids' must be a list of chunk id strings, got {gold!r}")
        queries.append(EvalQuery(query, tuple(gold)))
    if not queries:
        raise InvalidInputError(f"{queries_path} holds no queries: an evaluation over 0 queries measures nothing")
    return queries


class RecordedContextualizer:
    """Contexts read from a JSONL file (``chunk_id``, ``context``), such as the bundled contexts recorded
    offline from Qwen2.5-Coder-1.5B for the cookbook corpus. Figures made with them are labelled recorded."""

    def __init__(self, path: str | Path | None = None, *, label: str = "recorded local-LLM contexts") -> None:
        self.path = Path(path) if path else _data_file("anthropic_codebase", "contexts_qwen2.5-coder-1.5b.jsonl")
        self.label = label
        self.name = "recorded"
        self.model = self.path.stem
        self.last_report: RunReport | None = None

    def contexts(self) -> dict[str, str]:
        return {row["chunk_id"]: row["context"] for row in read_jsonl(self.path)}

    @property
    def identity(self) -> str:
        return f"recorded|{self.path.name}"

    def contextualize_many(self, items: Iterable[tuple[SourceDocument, Sequence[Chunk]]], *,
                           progress: bool | None = None) -> ContextRun:
        """The recorded context of each chunk, as a contextualizer's run (so the framework adapters take it); a
        chunk without one fails with ``not_recorded``, never gets an invented context."""
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

    async def acontextualize_many(self, items: Iterable[tuple[SourceDocument, Sequence[Chunk]]], *,
                                  progress: bool | None = None) -> ContextRun:
        return self.contextualize_many(items)
