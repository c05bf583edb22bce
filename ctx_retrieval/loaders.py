"""Loading documents for the command line and the examples: text files and folders, notebooks, a documents
JSONL, the cookbook's JSON, and the bundled sample; text split at blank lines into chunks that concatenate back to
the document."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.types import Chunk, SourceDocument, make_chunk_id

__all__ = ["DEFAULT_MAX_INPUT_BYTES", "SAMPLE_DOCUMENT", "TEXT_SUFFIXES", "InputBudget", "cookbook_chunk_id",
           "document_from_row", "load_cookbook_documents", "load_documents", "load_sample", "notebook_text",
           "numbered_jsonl", "read_jsonl", "split_into_chunks", "split_paragraphs"]

# The most input the loaders read in one call, all files together (the CLI's --max-input-mb): a device, a runaway
# file or a sparse 2 GB file ends in a clear error, not in MemoryError after gigabytes.
DEFAULT_MAX_INPUT_BYTES = 512 * 1024 * 1024

SAMPLE_DOCUMENT = "sample_acme_q2_2023.md"
TEXT_SUFFIXES = {".txt", ".md", ".rst", ".py", ".rs", ".go", ".js", ".ts", ".java", ".c", ".h", ".cpp", ".html",
                 ".ipynb"}


def split_into_chunks(document: SourceDocument, texts: Iterable[str]) -> list[Chunk]:
    """Chunks for ``texts`` cut from ``document`` in order, with offsets found in the document text.

    Offsets are searched from the previous chunk's start, so overlapping splitters are handled; a text that is
    not found keeps ``start_char=None`` (the generator then reports it as not in the document).
    """
    if isinstance(texts, str):
        raise InvalidInputError("split_into_chunks takes a list of chunk texts, not one string (it would be cut "
                                "into characters): pass [text], or your splitter's output", document_id=document.id)
    chunks: list[Chunk] = []
    cursor = 0
    for position, text in enumerate(texts):
        start = document.text.find(text, cursor) if text else -1
        if start < 0 and text:
            start = document.text.find(text)
        chunks.append(
            Chunk(
                id=make_chunk_id(document.id, position, text),
                text=text,
                position=position,
                start_char=start if start >= 0 else None,
            )
        )
        if start >= 0:
            cursor = start
    return chunks


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


class InputBudget:
    """What the loaders may still read: regular files only, ``max_bytes`` in all (checked from the file's size
    before reading, and counted while reading, so a file that grows cannot get past it)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> None:
        self.max_bytes = max_bytes
        self.left = max_bytes

    def check(self, path: Path) -> None:
        try:
            info = path.stat()
        except FileNotFoundError:
            raise InvalidInputError(f"no such file: {path}") from None
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInputError(f"{path} is not a regular file (a device, a pipe or a socket): pass text files or "
                                    "folders")
        if info.st_size > self.left:
            self._over(path)

    def take(self, path: Path, size: int) -> None:
        self.left -= size
        if self.left < 0:
            self._over(path)

    def _over(self, path: Path) -> None:
        raise InvalidInputError(f"{path}: the input is over the limit of {self.max_bytes / 2**20:,.0f} MB read in one "
                                "run: split it, or raise --max-input-mb (InputBudget(max_bytes=...))")

    def read_text(self, path: Path) -> str:
        """The whole file as UTF-8 text, at most what the budget leaves."""
        self.check(path)
        with path.open("rb") as handle:
            data = handle.read(self.left + 1)
        self.take(path, len(data))
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError(f"{path} is not UTF-8 text; convert it or leave it out") from None

    def lines(self, path: Path, *, errors: str = "strict") -> Iterator[str]:
        """The file's lines, read one at a time (a large JSONL is never held whole), within the budget;
        ``errors="surrogateescape"`` keeps bytes that are not UTF-8 (file names ``contextualize`` wrote as the
        filesystem gave them)."""
        self.check(path)
        with path.open("rb") as handle:
            for raw in handle:
                self.take(path, len(raw))
                try:
                    yield raw.decode("utf-8", errors)
                except UnicodeDecodeError:
                    raise InvalidInputError(f"{path} is not UTF-8 text; convert it or leave it out") from None


def notebook_text(path: Path, budget: InputBudget | None = None) -> str:
    """The cells of a Jupyter notebook as one text: each cell's source, blank-line separated (outputs left out)."""
    try:
        cells = json.loads((budget or InputBudget()).read_text(path)).get("cells", [])
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


def load_documents(paths: Sequence[str], split: int | Callable[[str], list[str]], *,
                   max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> list[tuple[SourceDocument, list[Chunk]]]:
    """Documents from the cookbook's JSON, a documents JSONL (``id``, ``text``, optional ``chunks``), or text
    files and folders (one document per file); regular files only, ``max_bytes`` in all. Text without chunks is cut
    by ``split``: a splitter (e.g. ``chunking.token_chunker(embedder)``), or a size in characters for
    ``split_paragraphs``."""
    if isinstance(split, int):
        chunk_chars = split

        def split(text: str) -> list[str]:
            return split_paragraphs(text, chunk_chars)

    budget = InputBudget(max_bytes)
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
                items.append(_text_file(file, split, budget, doc_id=str(file.relative_to(path))))
        elif path.suffix == ".json":
            items.extend(load_cookbook_documents(path, budget))
        elif path.suffix == ".jsonl":
            items.extend(document_from_row(row, f"{path}:{n}", chunks_required=False, split=split)
                         for n, row in numbered_jsonl(path, budget))
        else:
            items.append(_text_file(path, split, budget, doc_id=path.name))
    return items


def _text_file(path: Path, split: Callable[[str], list[str]], budget: InputBudget, *, doc_id: str
               ) -> tuple[SourceDocument, list[Chunk]]:
    text = notebook_text(path, budget) if path.suffix.lower() == ".ipynb" else budget.read_text(path)
    document = SourceDocument(doc_id, text, {"source": str(path)})
    return document, split_into_chunks(document, split(text))


def cookbook_chunk_id(doc_uuid: str, index: int) -> str:
    return f"{doc_uuid}_{index}"


def load_cookbook_documents(chunks_path: str | Path, budget: InputBudget | None = None
                            ) -> list[tuple[SourceDocument, list[Chunk]]]:
    """The documents and chunks of the cookbook's ``codebase_chunks.json`` (chunk ids ``<uuid>_<index>``)."""
    chunks_path = Path(chunks_path)
    try:
        raw = json.loads((budget or InputBudget()).read_text(chunks_path))
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
    return items


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
                                    f"'text'), got {type(chunk_text).__name__}")
        if isinstance(c, dict) and "id" in c and (not isinstance(c["id"], str) or not c["id"]):
            raise InvalidInputError(f"{where}: chunk {k}'s 'id' must be a non-empty string, got {c['id']!r}")
        texts.append(chunk_text)
    chunks = split_into_chunks(document, texts)
    return document, [Chunk(c["id"], chunk.text, chunk.position, chunk.start_char) if isinstance(c, dict) and "id" in c
                      else chunk for c, chunk in zip(raw_chunks, chunks, strict=True)]


def numbered_jsonl(path: str | Path, budget: InputBudget | None = None) -> list[tuple[int, Any]]:
    """The rows of a JSONL file with their line numbers (blank lines skipped), read a line at a time."""
    path = Path(path)
    rows = []
    for n, line in enumerate((budget or InputBudget()).lines(path, errors="surrogateescape"), start=1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{path}:{n}: not a JSON line ({exc.msg}); expected JSONL") from None
            bad = _lone_surrogate(row)
            if bad is not None:
                raise InvalidInputError(f"{path}:{n}: {bad!r} holds a lone surrogate (a \\ud800-style escape, or "
                                        "text decoded wrongly): fix the line, or write it from text read with "
                                        "errors='replace'")
            rows.append((n, row))
    return rows


def _lone_surrogate(value: Any, *, escaped_bytes: bool = True) -> str | None:
    """The first string in ``value`` holding a surrogate (cut to 40 characters), else None. Bytes kept by
    surrogateescape (U+DC80-U+DCFF: a file name that is not UTF-8) are allowed outside ``text``; in ``text`` they
    are refused too (no model can read them)."""
    if isinstance(value, str):
        found = [ch for ch in value if "\ud800" <= ch <= "\udfff"]
        if found and not (escaped_bytes and all("\udc80" <= ch <= "\udcff" for ch in found)):
            return value.encode("utf-8", "backslashreplace").decode("ascii", "replace")[:40]
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            bad = _lone_surrogate(item, escaped_bytes=escaped_bytes and key != "text")
            if bad is not None:
                return bad
    elif isinstance(value, list):
        for item in value:
            bad = _lone_surrogate(item, escaped_bytes=escaped_bytes)
            if bad is not None:
                return bad
    return None


def read_jsonl(path: str | Path) -> list[Any]:
    return [row for _, row in numbered_jsonl(path)]
