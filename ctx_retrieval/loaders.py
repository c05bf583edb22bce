"""Loading documents for the command line and the examples: text files and folders, notebooks, a documents
JSONL, the cookbook's JSON, and the bundled sample; text split at blank lines into chunks that concatenate back to
the document."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from .errors import InvalidInputError
from .types import Chunk, SourceDocument, split_into_chunks

__all__ = ["SAMPLE_DOCUMENT", "TEXT_SUFFIXES", "load_documents", "load_sample", "notebook_text", "split_paragraphs"]

SAMPLE_DOCUMENT = "sample_acme_q2_2023.md"
TEXT_SUFFIXES = {".txt", ".md", ".rst", ".py", ".rs", ".go", ".js", ".ts", ".java", ".c", ".h", ".cpp", ".html",
                 ".ipynb"}


def split_paragraphs(text: str, max_chars: int = 900) -> list[str]:
    """Split ``text`` at blank lines into chunks of whole paragraphs of at most ``max_chars``; a longer paragraph
    is split at line ends, and a longer line at the last space before the limit (or at the limit). The chunks
    concatenate back to the text."""
    paragraphs: list[str] = []
    start = 0
    while start < len(text):
        end = text.find("\n\n", start)
        end = len(text) if end < 0 else end + 2
        paragraphs.extend(_pieces(text[start:end], max_chars))
        start = end
    chunks: list[str] = []
    for paragraph in paragraphs:
        if chunks and len(chunks[-1]) + len(paragraph) <= max_chars:
            chunks[-1] += paragraph
        else:
            chunks.append(paragraph)
    return chunks


def _pieces(paragraph: str, max_chars: int) -> list[str]:
    """``paragraph`` in pieces of at most ``max_chars``: whole lines where they fit, then words, then characters."""
    if len(paragraph) <= max_chars:
        return [paragraph]
    pieces: list[str] = []
    for line in paragraph.splitlines(keepends=True):
        while len(line) > max_chars:
            cut = line.rfind(" ", 0, max_chars) + 1 or max_chars
            pieces.append(line[:cut])
            line = line[cut:]
        if pieces and len(pieces[-1]) + len(line) <= max_chars:
            pieces[-1] += line
        elif line:
            pieces.append(line)
    return pieces


def notebook_text(path: Path) -> str:
    """The cells of a Jupyter notebook as one text: each cell's source, blank-line separated (outputs left out)."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (json.JSONDecodeError, AttributeError) as exc:
        raise InvalidInputError(f"{path} is not a readable notebook ({exc}); leave it out") from None
    texts = []
    for cell in cells:
        source = cell.get("source", "") if isinstance(cell, dict) else ""
        text = "".join(source) if isinstance(source, list) else str(source)
        if text.strip():
            texts.append(text.strip("\n"))
    return "\n\n".join(texts) + "\n"


def load_sample() -> tuple[SourceDocument, list[Chunk]]:
    text = resources.files("ctx_retrieval").joinpath("data").joinpath(SAMPLE_DOCUMENT).read_text(encoding="utf-8")
    document = SourceDocument(id="acme-q2-2023", text=text, metadata={"source": SAMPLE_DOCUMENT})
    return document, split_into_chunks(document, split_paragraphs(text))


def load_documents(paths: Sequence[str], chunk_chars: int) -> list[tuple[SourceDocument, list[Chunk]]]:
    """Documents from the cookbook's JSON, a documents JSONL (``id``, ``text``, optional ``chunks``), or text
    files and folders (one document per file, split at blank lines)."""
    items: list[tuple[SourceDocument, list[Chunk]]] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise InvalidInputError(f"no such file or folder: {path}")
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
            if not files:
                raise InvalidInputError(f"{path} holds no text files ({', '.join(sorted(TEXT_SUFFIXES))})")
            for file in files:
                items.append(_text_file(file, chunk_chars, doc_id=str(file.relative_to(path))))
        elif path.suffix == ".json":
            from .eval import load_cookbook

            items.extend(load_cookbook(path, _EMPTY_QUERIES).items)
        elif path.suffix == ".jsonl":
            from .eval import _numbered_jsonl, document_from_row

            items.extend(document_from_row(row, f"{path}:{n}", chunks_required=False,
                                           split=lambda text: split_paragraphs(text, chunk_chars))
                         for n, row in _numbered_jsonl(path))
        else:
            items.append(_text_file(path, chunk_chars, doc_id=path.name))
    return items


_EMPTY_QUERIES = Path(os.devnull)


def _text_file(path: Path, chunk_chars: int, *, doc_id: str) -> tuple[SourceDocument, list[Chunk]]:
    try:
        text = notebook_text(path) if path.suffix.lower() == ".ipynb" else path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidInputError(f"{path} is not UTF-8 text; convert it or leave it out") from None
    document = SourceDocument(doc_id, text, {"source": str(path)})
    return document, split_into_chunks(document, split_paragraphs(text, chunk_chars))
