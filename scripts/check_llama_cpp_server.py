"""Against a real llama-cpp-python server (issue 15): the model-name check, each document read once, no false
caching warning, a restart mid-run, the CLI. Not part of the test suite (CI cannot build llama-cpp-python here, so
these only ever skipped there; issue 36): a check to run by hand where ``CTX_RETRIEVAL_GGUF`` names a GGUF model
file and a Python with ``llama_cpp.server`` is at hand (``CTX_RETRIEVAL_LLAMA_PYTHON``, default this interpreter):

    .venv-llama/bin/python scripts/make_toy_gguf.py /tmp/toy.gguf     # or any small GGUF you have
    CTX_RETRIEVAL_GGUF=/tmp/toy.gguf CTX_RETRIEVAL_LLAMA_PYTHON=.venv-llama/bin/python \\
        .venv/bin/python -m pytest scripts/check_llama_cpp_server.py

The server listens on 127.0.0.1 only and is stopped after each test. ``benchmarks/README.md`` has the figures.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import ContextGenerator, RetryPolicy, UnknownModelError
from ctx_retrieval.evaluation import load_cookbook
from ctx_retrieval.providers import OpenAICompatibleProvider

GGUF = os.environ.get("CTX_RETRIEVAL_GGUF", "")
PYTHON = os.environ.get("CTX_RETRIEVAL_LLAMA_PYTHON", sys.executable)


def _has_server() -> bool:
    if not GGUF or not Path(GGUF).is_file():
        return False
    return subprocess.run([PYTHON, "-c", "import llama_cpp.server"], capture_output=True).returncode == 0


pytestmark = [pytest.mark.slow, pytest.mark.skipif(not _has_server(), reason=(
    "a real llama-cpp-python server: set CTX_RETRIEVAL_GGUF to a GGUF file and CTX_RETRIEVAL_LLAMA_PYTHON to a "
    "Python with llama-cpp-python[server]"))]

PROMPT_EVAL = re.compile(r"prompt eval time\s*=\s*[\d.]+ ms /\s*(\d+) tokens")
# The toy model's own answers are noise that rarely ends before max_tokens; a grammar (llama-cpp-python's
# request field) makes it answer one sentence and stop, as a real model does.
FIXED_ANSWER = {"grammar": 'root ::= "This chunk is part of the document."'}


class LlamaServer:
    def __init__(self, tmp: Path, port: int | None = None, n_ctx: int = 16384) -> None:
        self.port = port or _free_port()
        self.log = tmp / f"llama-server-{self.port}.log"
        self.n_ctx = n_ctx
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model_id(self) -> str:
        return GGUF  # llama-cpp-python serves the model under its path unless --model_alias is given

    def start(self) -> LlamaServer:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [PYTHON, "-m", "llama_cpp.server", "--model", GGUF, "--host", "127.0.0.1", "--port", str(self.port),
                 "--n_ctx", str(self.n_ctx), "--verbose", "True"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"llama-cpp-python server did not start: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=30)
            self.process = None

    def processed_prompt_tokens(self) -> int:
        return sum(int(n) for n in PROMPT_EVAL.findall(self.log.read_text(errors="replace")))

    def chat_requests(self) -> int:
        return self.log.read_text(errors="replace").count("POST /v1/chat/completions")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LlamaServer]:
    running = LlamaServer(tmp_path).start()
    try:
        yield running
    finally:
        running.kill()


def _documents(n: int = 3) -> list[Any]:
    corpus = load_cookbook()
    return [item for item in corpus.items if 3 <= len(item[1]) <= 6 and len(item[0].text) < 5000][:n]


def _generator(server: LlamaServer, model: str | None = None, **kwargs: Any) -> ContextGenerator:
    provider = OpenAICompatibleProvider(model or server.model_id, base_url=server.base_url, timeout_s=300,
                                        extra_body=FIXED_ANSWER)
    return ContextGenerator(provider, cache=kwargs.pop("cache", False), max_concurrency=8, **kwargs)


def _tokens(server: LlamaServer, text: str) -> int:
    """``text`` in the served model's own tokens (llama-cpp-python's ``POST /extras/tokenize``)."""
    request = urllib.request.Request(server.base_url.removesuffix("/v1") + "/extras/tokenize",
                                     data=json.dumps({"input": text}).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return len(json.loads(answer.read())["tokens"])


def _minimum_tokens(server: LlamaServer, prompts: list[str], prompt_tokens: list[int]) -> int:
    """What the server must compute if each document is read once, in its model's tokens: each request's prompt
    as the server counted it (``usage.prompt_tokens``: the chat template included), less the tokens it shares
    with the previous prompt of the same document (the template's own shared opening is not subtracted: at most
    a few tokens per request in the server's favour)."""
    last: dict[str, str] = {}
    total = 0
    for prompt, counted in zip(prompts, prompt_tokens, strict=True):
        document = prompt.split("</document>", 1)[0]
        previous = last.get(document, "")
        shared = len(os.path.commonprefix([previous, prompt]))  # noqa: RUF071 - strings, character by character, on purpose
        total += counted - (_tokens(server, prompt[:shared]) if shared else 0)
        last[document] = prompt
    return total


def test_a_wrong_model_name_is_refused_before_any_chunk_request(server: LlamaServer) -> None:
    with pytest.raises(UnknownModelError, match="gpt-4o-does-not-exist"):
        _generator(server, "gpt-4o-does-not-exist").contextualize_many(_documents(1))
    assert server.chat_requests() == 0


def test_each_document_is_read_once_and_no_false_caching_warning(server: LlamaServer,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    documents = _documents(3)
    generator = _generator(server)
    sent: list[str] = []
    counted: list[int] = []
    agenerate = generator.provider.agenerate

    async def recording(request: Any) -> Any:
        sent.append(request.document_prefix + request.document_rest + "\n\n" + request.chunk_block)
        response = await agenerate(request)
        counted.append(response.usage.prompt_tokens)
        return response

    generator.provider.agenerate = recording  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        run = generator.contextualize_many(documents)
    assert run.report.failed == 0 and all(r.context for r in run)
    assert generator.provider.slots == 1 and generator.provider.prefix_cache == "per_slot"  # type: ignore[attr-defined]
    assert not run.report.cache_reads_reported and "not reported" in run.report.format()
    assert "minimum cacheable" not in caplog.text
    processed, minimum = server.processed_prompt_tokens(), _minimum_tokens(server, sent, counted)
    print(f"\nreal llama-cpp-python: {len(sent)} requests, prompt tokens processed {processed:,}, minimum "
          f"{minimum:,} ({processed / minimum:.2f}x), prompt tokens sent {run.report.usage.input_tokens:,}")
    assert processed <= 1.15 * minimum + 40 * len(sent)  # chat-template tokens around each prompt


def test_without_per_slot_scheduling_the_server_reads_documents_again(tmp_path: Path) -> None:
    """The comparison the issue measured: the same run with the server's description hidden interleaves the
    documents in the one slot."""
    processed = {}
    for label in ("per-slot", "interleaved"):
        running = LlamaServer(tmp_path).start()
        try:
            generator = _generator(running)
            if label == "interleaved":
                async def hidden() -> list[str]:
                    return []

                generator.provider.aprepare = hidden  # type: ignore[attr-defined]
            assert generator.contextualize_many(_documents(3)).report.failed == 0
            processed[label] = running.processed_prompt_tokens()
        finally:
            running.kill()
    print(f"\nreal llama-cpp-python, prompt tokens processed: per-slot {processed['per-slot']:,}, interleaved "
          f"{processed['interleaved']:,} ({processed['interleaved'] / processed['per-slot']:.2f}x)")
    assert processed["interleaved"] > 1.2 * processed["per-slot"]


def test_a_server_restarted_mid_run_leaves_no_failed_chunk(server: LlamaServer) -> None:
    documents = _documents(3)
    generator = _generator(server, retry=RetryPolicy(initial_delay_s=0.2, max_delay_s=2, max_outage_s=180))

    def restart() -> None:
        deadline = time.monotonic() + 120
        while server.chat_requests() < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        server.kill()
        time.sleep(1)
        server.start()

    thread = threading.Thread(target=restart)
    thread.start()
    try:
        run = generator.contextualize_many(documents)
    finally:
        thread.join()
    assert run.report.failed == 0 and run.report.not_attempted == 0 and all(r.context for r in run)
    assert run.report.errors_by_type.get("unreachable", 0) + run.report.errors_by_type.get("connection", 0) >= 1


def test_the_cli_runs_end_to_end(server: LlamaServer, tmp_path: Path) -> None:
    doc = tmp_path / "note.md"
    doc.write_text("# Release notes\n\nThe queue workers now retry failed jobs twice.\n\nThe cache is flushed "
                   "nightly at 02:00.\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    done = subprocess.run([sys.executable, "-m", "ctx_retrieval", "contextualize", str(doc), "--provider",
                           "openai-compatible", "--base-url", server.base_url, "--model", server.model_id,
                           "--out", str(out), "--cache", str(tmp_path / "c.sqlite"), "--on-error", "skip"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows and all(r["model"] == server.model_id and r["status"] in ("generated", "failed") for r in rows)
