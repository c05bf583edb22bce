"""The no-LLM baseline: a "title and heading prefix" context built from the document's own structure.

Each chunk gets the document's title (``metadata["title"]``, else its first heading, else its first line) and
the nearest heading or code definition above the chunk. It costs nothing and needs no key, which makes it the
baseline that LLM contexts must beat, and what the demo uses when no API key is configured.
"""

from __future__ import annotations

import bisect
import re
import time
from collections.abc import Iterable, Sequence
from pathlib import PurePath

from ctx_retrieval.contextualize.results import ContextRun, CostEstimate
from ctx_retrieval.contextualize.validation import locate_chunks
from ctx_retrieval.language import written_in_english
from ctx_retrieval.types import Chunk, ContextResult, SourceDocument, TokenUsage
from ctx_retrieval.usage import RunReport

HEURISTIC_VERSION = "title-heading-v2"  # v2: heading attribute lists ({ #anchor }) left out, no "From" in others

_HEADING = re.compile(
    r"^[ \t]*(?:"
    r"#{1,6}[ \t]+(?P<md>\S.*?)[ \t#]*"  # Markdown heading
    r"|(?P<code>(?:(?:pub(?:\([a-z]+\))?|export|async|static|public|private|protected|abstract|final|unsafe)[ \t]+)*"
    r"(?:def|class|fn|struct|enum|trait|impl|interface|function|func|type|module|mod|package)\b[^\n]*?)"
    r"[ \t]*[:{(]?[ \t]*"
    r")$",
    re.MULTILINE,
)
_MAX_PART_CHARS = 100


_ATTRIBUTES = re.compile(r"\s*\{\s*[#.:][^{}]*\}\s*$")  # MkDocs / Pandoc "## Title { #anchor .class }"


def _short(text: str) -> str:
    text = " ".join(_ATTRIBUTES.sub("", text).split())
    return text if len(text) <= _MAX_PART_CHARS else text[: _MAX_PART_CHARS - 3].rstrip() + "..."


_COMMENT = re.compile(r"^\s*(?://[/!]?|#(?=\s)|/\*+|\*|--|;+|\"\"\"|\'\'\'|<!--)\s*(?P<text>.*?)\s*(?:\*/|-->|\"\"\"|\'\'\')?\s*$")
_BOILERPLATE = re.compile(
    r"^\s*(?:import|from\s+\S+\s+import|use|using|#\s*include|include|require|package|extern|mod|pragma|"
    r"@file|-\*-|copyright|license|spdx|all rights reserved|\(c\))\b", re.IGNORECASE)
_PATH_KEYS = ("file_path", "source", "path", "file_name", "filename")


def _title(document: SourceDocument) -> str:
    """The document's title: ``metadata["title"]``, else its first Markdown heading, else its file path (the
    last two parts), else its first comment line that reads like prose (code), its first definition, or its
    first line that is not an import."""
    metadata = document.metadata or {}
    title = metadata.get("title")
    if isinstance(title, str) and title.strip():
        return _short(title)
    first_heading = next(iter(_HEADING.finditer(document.text)), None)
    if first_heading is not None and first_heading.group("md"):
        return _short(first_heading.group("md"))
    for key in _PATH_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return _short("/".join(PurePath(value).parts[-2:]))
    for line in document.text.splitlines()[:200]:
        comment = _COMMENT.match(line)
        if comment and not _BOILERPLATE.match(comment.group("text")):
            text = comment.group("text").strip(" #/*!-;\"'")
            if len(text.split()) >= 3:
                return _short(text)
    if first_heading is not None:
        return _short(first_heading.group("code"))
    for line in document.text.splitlines():
        stripped = line.strip().strip("#/*!-;\"' ")
        if stripped and not _BOILERPLATE.match(stripped):
            return _short(stripped)
    return _short(document.id)


class HeuristicContextualizer:
    """Contexts from document structure, no LLM: "<title> > <nearest heading or definition above>".

    Same calls and result types as ``ContextGenerator`` (``contextualize``, ``contextualize_many`` and their
    async twins), with ``provider="heuristic"`` in every result and zero usage.
    """

    name = "heuristic"
    model = HEURISTIC_VERSION

    def __init__(self, *, check_chunks_in_document: bool = True) -> None:
        self.check_chunks_in_document = check_chunks_in_document
        self.last_report: RunReport | None = None

    def __repr__(self) -> str:
        return f"HeuristicContextualizer(version={HEURISTIC_VERSION!r})"

    @property
    def identity(self) -> str:
        """What its contexts depend on besides the text: the heuristic's version."""
        return f"{self.name}|{HEURISTIC_VERSION}"

    def context_for(self, document: SourceDocument, offset: int | None, title: str,
                    headings: tuple[list[int], list[str]], *, english: bool = True) -> str:
        """``From <title> > <heading>.``; in a document not written in English, ``<title> > <heading>`` (no English
        word in its context)."""
        starts, texts = headings
        context = f"From {title}" if english else title
        if offset is not None:
            index = bisect.bisect_right(starts, offset) - 1
            if index >= 0 and texts[index] != title:
                context += f" > {texts[index]}"
        return context + "."

    def _headings(self, document: SourceDocument) -> tuple[list[int], list[str]]:
        starts: list[int] = []
        texts: list[str] = []
        for match in _HEADING.finditer(document.text):
            starts.append(match.start())
            texts.append(_short(match.group("md") or match.group("code")))
        return starts, texts

    def contextualize(self, document: SourceDocument, chunks: Sequence[Chunk]) -> ContextRun:
        return self.contextualize_many([(document, chunks)])

    def estimate(self, items: Iterable[tuple[SourceDocument, Sequence[Chunk]]]) -> CostEstimate:
        """What a run costs: nothing (no request), whatever the chunks."""
        documents = chunks = empty = 0
        for _, pieces in items:
            documents += 1
            chunks += len(pieces)
            empty += sum(1 for c in pieces if not c.text.strip())
        return CostEstimate(documents=documents, chunks=chunks, cached_chunks=0, empty_chunks=empty, requests=0,
                            usage=TokenUsage(), cost_usd=0.0, document_tokens=0)

    async def acontextualize(self, document: SourceDocument, chunks: Sequence[Chunk]) -> ContextRun:
        return self.contextualize_many([(document, chunks)])

    async def acontextualize_many(self, items: Iterable[tuple[SourceDocument, Sequence[Chunk]]], *,
                                  progress: bool | None = None) -> ContextRun:
        return self.contextualize_many(items)

    def contextualize_many(self, items: Iterable[tuple[SourceDocument, Sequence[Chunk]]], *,
                           progress: bool | None = None) -> ContextRun:
        """Heuristic contexts for every chunk (instant: ``progress`` is accepted and shows nothing)."""
        started = time.perf_counter()
        report = RunReport(provider=self.name, model=self.model, prompt_version=HEURISTIC_VERSION, cost_usd=0.0)
        results: list[ContextResult] = []
        for document, chunks in items:
            offsets = locate_chunks(document, chunks, require_found=self.check_chunks_in_document)
            title = _title(document)
            headings = self._headings(document)
            english = written_in_english(document.text)
            report.documents += 1
            for chunk, offset in zip(chunks, offsets, strict=True):
                report.chunks += 1
                if not chunk.text.strip():
                    report.empty += 1
                    context = None
                else:
                    report.generated += 1
                    context = self.context_for(document, offset, title, headings, english=english)
                results.append(ContextResult(
                    document_id=document.id, chunk_id=chunk.id, position=chunk.position, context=context,
                    status="generated" if context is not None else "empty", provider=self.name,
                    model=self.model, prompt_version=HEURISTIC_VERSION))
        report.wall_time_s = time.perf_counter() - started
        self.last_report = report
        return ContextRun(results, report)
