"""A query service beside an ingestion job: two processes over one persisted store, the service warm before its
first request.

    .venv/bin/python examples/query_service.py

The job (one process) splits, contextualizes and indexes the sample report with LangChain into a Chroma folder
(vectors) with its BM25 folder beside it and ends; then the service starts: a second process that opens the folder,
calls ``warm_up()`` (the embedding model loaded, BM25 and Chroma's index opened: a fresh process otherwise pays these in
its first request) and answers ``GET /search?q=...`` as JSON on 127.0.0.1 until its standard input closes; this
process asks the questions over HTTP. With ANTHROPIC_API_KEY set, Claude writes the contexts; without it the bundled
fake Anthropic API does (canned contexts), and the example says so.

For more than one machine, give both processes a Chroma server (``chromadb.HttpClient``) instead of the folder: an
embedded Chroma is one process's at a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from ctx_retrieval import ContextGenerator
from ctx_retrieval.loaders import load_sample
from ctx_retrieval.testing import claude_or_fake
from langchain_ctx import (
    ContextualDocumentTransformer,
    ContextualHybridRetriever,
    EmbedderTokenSplitter,
    MiniLMEmbeddings,
    for_answering,
)

COLLECTION = "reports"
QUESTIONS = ["How much did ACME's revenue grow over the previous quarter?",
             "Who is ACME's new chief financial officer?"]


def ingest(folder: Path) -> None:
    """The ingestion job: contextualize the sample report and index it (Chroma + BM25) in ``folder``."""
    sample, _ = load_sample()
    documents = [Document(page_content=sample.text, metadata={"source": "acme_q2_2023.md"})]
    embeddings = MiniLMEmbeddings()
    chunks = EmbedderTokenSplitter(embeddings, add_start_index=True).split_documents(documents)
    with claude_or_fake() as provider:
        transformer = ContextualDocumentTransformer(ContextGenerator(provider, cache=folder / "contexts.sqlite"))
        contextual = transformer.transform_documents(chunks)
    print(f"{len(contextual)} chunks contextualized\n" + transformer.last_report.format())  # type: ignore[union-attr]
    ContextualHybridRetriever.from_documents(contextual, embeddings, persist_directory=folder / "chroma",
                                             collection_name=COLLECTION)


def serve(folder: Path) -> None:
    """The query service: open the store, warm up, answer on 127.0.0.1 until standard input closes."""
    import chromadb
    from langchain_chroma import Chroma

    started = time.perf_counter()
    client = chromadb.PersistentClient(path=str(folder / "chroma"))
    store = Chroma(client=client, collection_name=COLLECTION, embedding_function=MiniLMEmbeddings())
    retriever = ContextualHybridRetriever.from_vectorstore(store, k=3)
    retriever.warm_up()

    class Search(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query).get("q", [""])[0]
            found = [{"text": d.page_content, "context": d.metadata.get("context"),
                      "vector_rank": d.metadata.get("vector_rank"), "bm25_rank": d.metadata.get("bm25_rank")}
                     for d in for_answering(retriever.invoke(query))]  # the chunk's own text
            body = json.dumps(found).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Search) as http:
        print(f"ready on port {http.server_address[1]} (open + warm-up {time.perf_counter() - started:.1f} s)",
              flush=True)
        threading.Thread(target=http.serve_forever, daemon=True).start()
        sys.stdin.read()  # the job closes our standard input to stop us
        http.shutdown()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        subprocess.run([sys.executable, __file__, "ingest", str(folder)], check=True)  # the job, to its end
        service = subprocess.Popen([sys.executable, __file__, "serve", str(folder)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        try:
            assert service.stdout is not None and service.stdin is not None
            ready = service.stdout.readline().strip()
            print(f"service {ready}")
            port = int(ready.split()[3])
            for question in QUESTIONS:
                started = time.perf_counter()
                url = f"http://127.0.0.1:{port}/search?q={urllib.parse.quote(question)}"
                with urllib.request.urlopen(url, timeout=60) as answer:
                    found = json.loads(answer.read())
                print(f"\nQ: {question} (answered in {(time.perf_counter() - started) * 1000:.0f} ms)")
                for n, hit in enumerate(found, start=1):
                    ranks = f"vector #{hit['vector_rank'] or '-'}, bm25 #{hit['bm25_rank'] or '-'}"
                    print(f"  {n}. [{ranks}] {' '.join(hit['text'].split())[:90]}...")
            service.stdin.close()
            service.wait(timeout=60)
        finally:
            if service.poll() is None:
                service.kill()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("ingest", "serve"):
        {"ingest": ingest, "serve": serve}[sys.argv[1]](Path(sys.argv[2]))
    else:
        main()
