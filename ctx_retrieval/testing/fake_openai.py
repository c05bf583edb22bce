"""A fake OpenAI-compatible chat-completions server on 127.0.0.1, for the OpenAI-compatible provider's tests.

It answers ``POST /v1/chat/completions`` like llama.cpp's server or vLLM (``usage`` with
``prompt_tokens_details.cached_tokens`` from automatic prefix caching of everything up to ``</document>``),
injects scripted faults (429 with retry-after, 500, dropped connections) and records requests.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..tokens import estimate_tokens

__all__ = ["FakeOpenAIServer"]


class FakeOpenAIServer:
    """``with FakeOpenAIServer() as server: OpenAICompatibleProvider("m", base_url=server.base_url)``"""

    def __init__(self, *, latency_s: float = 0.0, known_models: Iterable[str] | None = None,
                 retry_after_s: float = 0.05) -> None:
        self.latency_s = latency_s
        self.known_models = set(known_models) if known_models is not None else None
        self.retry_after_s = retry_after_s
        self.requests: list[dict[str, Any]] = []
        self._faults: deque[str | None] = deque()
        self._prefixes: set[str] = set()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    def script_faults(self, kinds: Iterable[str | None]) -> None:
        """Answer the next requests with these faults: "rate_limit", "server_error", "drop" (None = normally)."""
        self._faults.extend(kinds)

    def start(self) -> FakeOpenAIServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr logging
                return

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                fault = fake._faults.popleft() if fake._faults else None
                record = {"path": self.path, "body": body, "fault": fault, "status": 0, "usage": None,
                          "authorization_present": bool(self.headers.get("authorization"))}
                with fake._lock:
                    fake.requests.append(record)
                if not self.path.endswith("/chat/completions"):
                    record["status"] = 404
                    self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
                    return
                model = body.get("model", "")
                if fake.known_models is not None and model not in fake.known_models:
                    record["status"] = 404
                    self._send(404, {"error": {"message": f"model {model} not found", "type": "not_found"}})
                    return
                if fault == "rate_limit":
                    record["status"] = 429
                    self._send(429, {"error": {"message": "slow down", "type": "rate_limit"}},
                               {"retry-after": f"{fake.retry_after_s:g}"})
                    return
                if fault == "server_error":
                    record["status"] = 500
                    self._send(500, {"error": {"message": "boom", "type": "server_error"}})
                    return
                if fault == "drop":
                    record["status"] = -1
                    self.close_connection = True
                    return
                prompt = "".join(m.get("content", "") for m in body.get("messages", []))
                prefix = prompt.split("</document>", 1)[0] if "</document>" in prompt else ""
                key = hashlib.sha256((model + prefix).encode()).hexdigest()
                with fake._lock:
                    cached = estimate_tokens(prefix) if prefix and key in fake._prefixes else 0
                chunk = prompt.split("<chunk>\n", 1)[-1].split("\n</chunk>", 1)[0]
                text = "Context: situates the chunk that starts with " + " ".join(chunk.split()[:8]) + "."
                if fake.latency_s:
                    time.sleep(fake.latency_s)
                usage = {"prompt_tokens": estimate_tokens(prompt), "completion_tokens": estimate_tokens(text),
                         "total_tokens": 0, "prompt_tokens_details": {"cached_tokens": cached}}
                self._send(200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                                 "model": model, "usage": usage, "choices": [{
                                     "index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": text}}]})
                with fake._lock:
                    if prefix:
                        fake._prefixes.add(key)
                record["status"] = 200
                record["usage"] = usage

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="fake-openai", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"
