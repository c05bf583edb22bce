"""Property-based: whatever a server answers, each chunk ends with its own context, a failure with a reason, or
the run stops with a typed error. Never a raw exception, never another chunk's context, never an invented one.

A raw loopback server (not the twin: it must be free to break every rule) answers each request with the next
generated answer: a valid message, an error status (with or without ``retry-after``), malformed JSON, a body with
wrong types or missing fields, an odd stop reason, an empty or huge text.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctx_retrieval import AnthropicProvider, ContextGenerator, CtxRetrievalError, RetryPolicy, clean_context
from ctx_retrieval.testing.loopback import LoopbackHandler, LoopbackServer
from tests.helpers import TEST_KEY, make_document

_MARK = re.compile(r"Paragraph (\d+) of")


def _message(text: Any, stop_reason: Any = "end_turn", usage: Any = None) -> dict[str, Any]:
    return {"id": "msg_x", "type": "message", "role": "assistant", "model": "claude-haiku-5-5",
            "content": [{"type": "text", "text": text}], "stop_reason": stop_reason,
            "usage": usage if usage is not None else {"input_tokens": 10, "output_tokens": 5}}


# An answer: ("ok", extra text) | ("status", code, retry-after) | ("raw", body bytes)
ANSWERS = st.one_of(
    st.tuples(st.just("ok"), st.sampled_from(["", " and more", "x" * 20_000, "\u2603 ünïcödé", "<chunk>"])),
    st.tuples(st.just("status"), st.sampled_from([400, 401, 402, 403, 404, 408, 409, 413, 429, 500, 502, 503, 504,
                                                  529]), st.sampled_from([None, "0", "0.01", "soon", "-5"])),
    st.tuples(st.just("raw"), st.sampled_from([
        b"not json", b"", b"[]", b"{}", b'{"type": "error", "error": {"type": "api_error"}}',
        json.dumps(_message(None)).encode(), json.dumps(_message(7)).encode(),
        json.dumps(_message("fine", usage="lots")).encode(),
        json.dumps(_message("fine", usage={"input_tokens": -1, "output_tokens": 1})).encode(),
        json.dumps({**_message("fine"), "content": "fine"}).encode(),
        json.dumps({k: v for k, v in _message("fine").items() if k != "content"}).encode(),
        json.dumps(_message("fine", stop_reason="pause_turn")).encode(),
        json.dumps(_message("fine", stop_reason="refusal")).encode(),
        json.dumps(_message("cut", stop_reason="max_tokens")).encode(),
        json.dumps(_message("", stop_reason=None)).encode(),
    ])),
)


class _Server(LoopbackServer):
    """Answers each request with the next scripted answer (normal answers once the script runs out)."""

    def __init__(self, script: list[tuple[Any, ...]]) -> None:
        self.script = deque(script)
        self.sent: dict[str, list[str]] = {}  # chunk mark -> texts of valid answers sent for it
        self.lock = threading.Lock()
        server = self

        class Handler(LoopbackHandler):
            def do_POST(self) -> None:  # noqa: N802 - the standard library's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                chunk = body["messages"][0]["content"][-1]["text"]
                found = _MARK.search(chunk.split("<chunk>")[-1])
                mark = found.group(1) if found else "?"
                with server.lock:
                    answer = server.script.popleft() if server.script else ("ok", "")
                status, headers, payload = 200, {}, b""
                if answer[0] == "ok":
                    text = f"Context for paragraph {mark}{answer[1]}"
                    payload = json.dumps(_message(text)).encode()
                    with server.lock:
                        server.sent.setdefault(mark, []).append(text)
                elif answer[0] == "status":
                    status = answer[1]
                    if answer[2] is not None:
                        headers["retry-after"] = answer[2]
                    payload = json.dumps({"type": "error", "error": {"type": "api_error", "message": "x"}}).encode()
                else:
                    payload = answer[1]
                    try:  # a raw body that still carries a text: that text was sent for this chunk
                        texts = [b.get("text") for b in json.loads(payload).get("content", [])]
                    except (ValueError, AttributeError, TypeError):
                        texts = []
                    with server.lock:
                        server.sent.setdefault(mark, []).extend(t for t in texts if isinstance(t, str))
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

        super().__init__(Handler, name="property-server")
        self.start()

    @property
    def base_url(self) -> str:
        return self.origin

    def close(self) -> None:
        self.stop()


@pytest.fixture(scope="module")
def document() -> Iterator[Any]:
    yield make_document("p", paragraphs=5)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(ANSWERS, max_size=12))
def test_every_chunk_ends_with_its_own_context_a_reason_or_a_typed_error(document: Any,
                                                                          script: list[tuple[Any, ...]]) -> None:
    doc, chunks = document
    server = _Server(script)
    try:
        generator = ContextGenerator(
            AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url, timeout_s=5.0), cache=False,
            on_error="skip", exact_token_counts=False, max_concurrency=3,
            retry=RetryPolicy(max_attempts=3, initial_delay_s=0.0, max_delay_s=0.0, max_rate_limit_wait_s=0.05))
        try:
            run = generator.contextualize(doc, chunks)
        except CtxRetrievalError as error:  # a typed stop (a rejected key, billing, ...), with its report
            assert error.report is not None
            return
    finally:
        server.close()
    for chunk, result in zip(chunks, run, strict=True):
        if result.status == "generated":
            mark = _MARK.search(chunk.text)
            assert mark is not None and result.context is not None
            # Exactly what the server sent for this chunk, cleaned: never another chunk's, never invented.
            assert result.context in {clean_context(t) for t in server.sent.get(mark.group(1), [])}
        else:
            assert result.status == "failed" and result.context is None and result.error


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["id", "text", "chunks", "metadata", "query", "gold_chunk_ids", "x"]), children, max_size=5),
    max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(JSON_VALUES, min_size=1, max_size=4))
def test_any_documents_jsonl_gives_a_result_or_one_error_line(rows: list[Any], tmp_path_factory: Any) -> None:
    import contextlib
    import io

    from ctx_retrieval.cli import main

    path = tmp_path_factory.mktemp("cli") / "docs.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["contextualize", str(path), "--dry-run", "--contextualizer", "heuristic"])
    assert code in (0, 2)
    if code == 2:
        assert err.getvalue().startswith("error: ") and "Traceback" not in err.getvalue()
