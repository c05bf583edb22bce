"""Test helpers, imported by the test modules (never from ``conftest`` or from each other, so each module's
imports are its own: the LlamaIndex tests run on a machine without LangChain).

Deterministic documents, the two filings the adapter tests index, a fake LLM that writes filing contexts, and a
small generic corpus on disk.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctx_retrieval import Chunk, SourceDocument, split_into_chunks
from ctx_retrieval.retrieval.store import IndexedChunk
from ctx_retrieval.testing.clock import SharedClock

TEST_KEY = "sk-ant-test-canary-7f3c9e1d2b"
"""A canary API key: tests grep logs, reprs, pickles and cache files for it."""


def long_text(doc_id: str, paragraphs: int = 12, words: int = 60) -> str:
    """Deterministic prose, about 330 characters (~90 estimated tokens) per 60-word paragraph."""
    vocabulary = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
                  "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"]
    out = [f"# Report {doc_id}"]
    for p in range(paragraphs):
        body = " ".join(vocabulary[(p * 7 + w * 3) % len(vocabulary)] for w in range(words))
        out.append(f"Paragraph {p} of {doc_id}: {body}.")
    return "\n\n".join(out) + "\n"


def make_document(doc_id: str, paragraphs: int = 24, words: int = 60) -> tuple[SourceDocument, list[Chunk]]:
    """A document split at blank lines (one chunk per paragraph, the title with the first); the default
    size (~2,600 estimated tokens) is above claude-3-haiku's 2,048-token minimum cacheable length."""
    text = long_text(doc_id, paragraphs, words)
    parts = text.split("\n\n")
    texts = [parts[0] + "\n\n" + parts[1], *parts[2:]]
    document = SourceDocument(id=doc_id, text=text)
    return document, split_into_chunks(document, texts)


# -- two filings (the adapter tests) -----------------------------------------------------------------------

ACME = """ACME Corp 10-Q filing for the second quarter of 2023.

Management's discussion covers the foundry move to Tucson, the new Rotterdam distribution centre and the
supply agreement signed during the period under review.

The company's revenue grew by 3% over the previous quarter.

Gross margin fell slightly because of start-up costs and steel prices.
"""
GLOBEX = """Globex Corporation 10-Q filing for the second quarter of 2023.

Management's discussion covers household robots, the new assembly line and the supplier contracts signed
during the period under review.

The company's revenue grew by 5% over the previous quarter.

Gross margin rose because component prices fell.
"""
QUERY = "What was ACME Corp's revenue growth in the second quarter of 2023?"


def filing_responder(body: dict[str, Any]) -> str:
    """A fake LLM that writes the kind of context Claude writes: company, filing, period, topic."""
    blocks = body["messages"][0]["content"]
    document = blocks[0]["text"]
    chunk = blocks[-1]["text"].split("<chunk>\n", 1)[1].split("\n</chunk>", 1)[0]
    company = "ACME Corp" if "ACME" in document else "Globex Corporation"
    topic = "revenue growth" if "revenue" in chunk else "margins" if "margin" in chunk else "the business"
    return f"From {company}'s 10-Q filing for Q2 2023, on {topic}."


# -- a generic corpus on disk ------------------------------------------------------------------------------


def write_corpus(tmp_path: Path) -> tuple[Path, Path]:
    documents = [
        {"id": "acme", "text": "ACME Corp Q2 2023 filing.\n\nThe company's revenue grew by 3% over the previous "
                               "quarter.\n\nAnvil sales were flat.",
         "chunks": [{"id": "acme-0", "text": "ACME Corp Q2 2023 filing."},
                    {"id": "acme-1", "text": "The company's revenue grew by 3% over the previous quarter."},
                    {"id": "acme-2", "text": "Anvil sales were flat."}]},
        {"id": "globex", "text": "Globex Corporation Q2 2023 filing.\n\nThe company's revenue fell by 2% over the "
                                 "previous quarter.",
         "chunks": [{"id": "globex-0", "text": "Globex Corporation Q2 2023 filing."},
                    {"id": "globex-1", "text": "The company's revenue fell by 2% over the previous quarter."}]},
    ]
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(json.dumps(d) for d in documents), encoding="utf-8")
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"query": "How did ACME's revenue change in Q2 2023?",
                                   "gold_chunk_ids": ["acme-1"]}) + "\n", encoding="utf-8")
    return docs, queries


# -- fake-server helpers --------------------------------------------------------------------------------------


def passage_numbers(body: dict[str, Any]) -> list[str]:
    """The passage numbers of a reranking request, in the order shown."""
    return re.findall(r'<passage number="(\d+)">', body["messages"][0]["content"][0]["text"])


def reverse_ranking(body: dict[str, Any]) -> str:
    """A fake reranker's answer: the passages in reverse order."""
    return ", ".join(reversed(passage_numbers(body)))


def peak_concurrency(requests: Any) -> int:
    """The most requests the fake server held at once (``started``/``finished`` of each recorded request)."""
    spans = [(r.started, r.finished) for r in requests]
    return max((sum(1 for s, f in spans if s <= t < f) for t, _ in spans), default=0)


# Time that moves only when a run sleeps on it (``ContextGenerator(clock=...)``): waits are measured exactly, whatever
# the machine's load. The shared clock a run and the API twin can both run on is that, and thread-safe.
SteppedClock = SharedClock


CHROMA = shutil.which("chroma") or str(Path(sys.executable).parent / "chroma")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChromaServer:
    """A real Chroma server (the chromadb package's ``chroma run``) on 127.0.0.1, storing under ``path``."""

    def __init__(self, path: Path) -> None:
        self.path, self.port = path, free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import chromadb

        self.process = subprocess.Popen([CHROMA, "run", "--path", str(self.path), "--host", "127.0.0.1",
                                         "--port", str(self.port)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                chromadb.HttpClient(host="127.0.0.1", port=self.port).heartbeat()
                return
            except Exception:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("the Chroma server did not start") from None
                time.sleep(0.2)

    def client(self) -> Any:
        import chromadb

        return chromadb.HttpClient(host="127.0.0.1", port=self.port)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(30)
            self.process = None


@contextlib.contextmanager
def milvus_lite_server(folder: Path) -> Iterator[str]:
    """A Milvus Lite server (``milvus-lite server``) on 127.0.0.1 storing under ``folder``: its URI, for an ingestion
    job and a query service in two processes (a Lite ``.db`` file opens in one process only). Stopped after."""
    command = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
    port = free_port()
    server = subprocess.Popen([command, "server", "--data-dir", str(folder), "--host", "127.0.0.1", "--port",
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120  # a liveness bound for the server's start, not a speed bound
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the Milvus Lite server did not start"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=60)


class LineService:
    """A query service in its own process (``python -c script *args``), asked one query per line, answering one
    JSON line each; ``first`` is its first line (ready, or the error it stopped on)."""

    def __init__(self, script: str, *args: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", script, *args], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.first = self._line()

    def _line(self) -> Any:
        assert self.process.stdout is not None
        return json.loads(self.process.stdout.readline() or "null")

    def ask(self, query: str) -> Any:
        assert self.process.stdin is not None
        self.process.stdin.write(query + "\n")
        self.process.stdin.flush()
        return self._line()

    def close(self) -> int:
        if self.process.stdin is not None:
            self.process.stdin.close()
        return self.process.wait(timeout=120)


# Four chunks whose context alone names their company (and one in Chinese), with metadata to filter by: what the
# stores that keep both sides in one engine (Milvus, PostgreSQL) are tested on.
ENGINE_CHUNKS = [
    IndexedChunk("acme:1", "acme", "Revenue grew by 3% over the previous quarter.",
                 "From ACME Corp's 10-Q filing for Q2 2023, on revenue."),
    IndexedChunk("globex:1", "globex", "Revenue fell by 5% over the previous quarter.",
                 "From Globex Corporation's 10-Q filing for Q2 2023, on revenue."),
    IndexedChunk("acme:2", "acme", "The foundry moved to Tucson during the period under review.",
                 "From ACME Corp's 10-Q filing for Q2 2023, on its facilities."),
    IndexedChunk("zh:1", "zh", "截至六月底，公司员工总数为一千二百人。", "华信科技2023年第二季度报告：员工。"),
]
ENGINE_META = {"acme:1": {"tenant": "a", "year": 2023}, "acme:2": {"tenant": "a", "year": 2022},
               "globex:1": {"tenant": "b", "year": 2023}, "zh:1": {"tenant": "b", "year": 2023}}
