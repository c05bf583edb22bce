"""A fake OpenAI-compatible chat-completions server on 127.0.0.1, for the OpenAI-compatible provider's tests.

It answers ``POST /v1/chat/completions`` and ``GET /v1/models`` (and ``GET /props`` as llama.cpp does) with one of
these profiles, each following the real server's documentation or source (cited in
``ctx_retrieval.providers.servers``, read 2026-11-30):

- ``"llama.cpp"`` (``llama-server``): ``slots`` parallel slots, each keeping the prompt it processed last; a request
  takes the free slot whose prompt shares the longest prefix with it (else the least recently used one) and
  processes only the tokens after that prefix; ``usage.prompt_tokens_details.cached_tokens`` and
  ``timings.cache_n`` report the reuse; any model name is accepted; ``/props`` gives ``total_slots`` and ``n_ctx``;
  a prompt over ``n_ctx`` is a 400 ``exceed_context_size_error``.
- ``"llama-cpp-python"``: one request at a time (one lock), one prompt kept for prefix reuse, no cached-token
  field in ``usage``, any model name answered by the loaded model (and echoed), ``/v1/models`` ``owned_by: "me"``,
  no ``/props``; an over-long prompt is a 400 ``context_length_exceeded``.
- ``"vllm"``: unlimited concurrency, a prefix cache shared by all requests, cached tokens reported (as with
  ``--enable-prompt-tokens-details``), ``max_model_len`` on its model card, 404 for a model it does not serve.
- ``"ollama"``: one request at a time (``OLLAMA_NUM_PARALLEL=1``) with llama.cpp's per-slot prefix reuse, no
  cached-token field, ``POST /api/show`` with ``num_ctx`` in ``parameters`` (unless ``states_num_ctx=False``), 404
  "try pulling it first" for an unknown model, and a prompt over ``n_ctx`` cut silently (counted in ``truncated``).
- ``"generic"`` (default): a server that does not say what it is (``owned_by`` matches no known server), with
  automatic prefix caching of everything up to ``</document>`` and cached tokens reported.

Tokens are counted with the offline estimate. ``prompt_tokens_processed`` totals what the server had to compute
(prompt tokens minus reused ones): the figure per-slot scheduling is measured by. Faults can be scripted (429 with
retry-after, 500, dropped connections, an answer cut at ``max_tokens``); requests are recorded.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, cast

from ctx_retrieval.testing.clock import ServerClock, WallServerClock
from ctx_retrieval.testing.loopback import LoopbackHandler, LoopbackServer
from ctx_retrieval.tokens import estimate_tokens

PROFILES = ("generic", "llama.cpp", "llama-cpp-python", "vllm", "ollama")
SLOT_PROMPT_SIMILARITY = 0.10  # llama-server --slot-prompt-similarity default (tools/server/README.md)
_OWNED_BY = {"generic": "organization-owner", "llama.cpp": "llamacpp", "llama-cpp-python": "me", "vllm": "vllm",
             "ollama": "library"}


class _Slot:
    def __init__(self) -> None:
        self.prompt = ""
        self.busy = False
        self.last_used = 0  # when it was last released, in releases: the least recently used is the lowest


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def minimum_to_compute(prompts: Iterable[str], measure: Callable[[str], int]) -> int:
    """What a prefix-reusing server must compute for ``prompts`` (in order) if each document is read once: every
    prompt minus what it shares with the previous prompt of the same document, in ``measure``'s units."""
    last: dict[str, str] = {}
    total = 0
    for prompt in prompts:
        document = prompt.split("</document>", 1)[0]
        shared = _common_prefix(last.get(document, ""), prompt)
        total += measure(prompt) - measure(prompt[:shared])
        last[document] = prompt
    return total


class FakeOpenAIServer(LoopbackServer):
    """``with FakeOpenAIServer() as server: OpenAICompatibleProvider("m", base_url=server.base_url)``

    Its latency and prompt-processing time run on ``clock`` (default the wall clock; tests share a
    ``ctx_retrieval.testing.clock.SharedClock`` with the run)."""

    def __init__(self, *, profile: str = "generic", latency_s: float = 0.0, known_models: Iterable[str] | None = None,
                 retry_after_s: float = 0.05, slots: int = 1, n_ctx: int = 8192, model_id: str = "local-model",
                 seconds_per_prompt_token: float = 0.0, answer: Callable[[str], str] | None = None,
                 port: int = 0, states_num_ctx: bool = True, clock: ServerClock | None = None) -> None:
        super().__init__(_Handler, name="fake-openai", port=port)
        self.clock: ServerClock = clock or WallServerClock()
        self._releases = itertools.count(1)
        if profile not in PROFILES:
            raise ValueError(f"profile must be one of {PROFILES}, not {profile!r}")
        self.profile = profile
        self.latency_s = latency_s
        self.known_models = set(known_models) if known_models is not None else None
        self.retry_after_s = retry_after_s
        self.n_ctx = n_ctx
        self.model_id = model_id
        self.seconds_per_prompt_token = seconds_per_prompt_token
        self.answer = answer
        self.states_num_ctx = states_num_ctx
        self.truncated = 0  # prompts the ollama profile cut to n_ctx without saying so
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most chat requests the server held at once
        self.prompt_tokens_total = 0
        self.prompt_tokens_processed = 0
        self._faults: deque[str | None] = deque()
        self._prefixes: set[str] = set()
        self._lock = threading.Lock()
        self._slot_free = threading.Condition(self._lock)
        count = 1 if profile in ("llama-cpp-python", "ollama") else slots
        self._slots = [_Slot() for _ in range(count)] if profile in ("llama.cpp", "llama-cpp-python", "ollama") else []

    def script_faults(self, kinds: Iterable[str | None]) -> None:
        """Answer the next requests with these faults: "rate_limit", "insufficient_quota", "server_error", "drop", or
        "length" (an answer cut at ``max_tokens``, ``finish_reason: "length"``); None = normally."""
        self._faults.extend(kinds)

    def minimum_prompt_tokens(self) -> int:
        """What the answered requests needed computed if each document were read once: every prompt minus what
        it shares with the previous request of the same document (``prompt_tokens_processed`` is measured
        against it)."""
        return minimum_to_compute(
            ["".join(str(m.get("content", "")) for m in record["body"].get("messages", []))
             for record in self.requests if record["status"] == 200], estimate_tokens)

    @property
    def served_models(self) -> list[str]:
        return sorted(self.known_models) if self.known_models is not None else [self.model_id]

    # -- the server's rules ------------------------------------------------------------------------------

    def _take_slot(self, prompt: str) -> _Slot:
        """llama.cpp: the free slot whose prompt shares the longest prefix with ``prompt`` when that prefix is at
        least ``--slot-prompt-similarity`` (default 0.10) of the prompt, else the least recently used free slot."""
        with self._slot_free:
            while not any(not s.busy for s in self._slots):
                self._slot_free.wait()
            free = [s for s in self._slots if not s.busy]
            slot = max(free, key=lambda s: (_common_prefix(s.prompt, prompt), -s.last_used))
            if _common_prefix(slot.prompt, prompt) < SLOT_PROMPT_SIMILARITY * len(prompt):
                slot = min(free, key=lambda s: s.last_used)
            slot.busy = True
            return slot

    def _release_slot(self, slot: _Slot, prompt: str) -> None:
        with self._slot_free:
            slot.prompt, slot.busy, slot.last_used = prompt, False, next(self._releases)
            self._slot_free.notify_all()

    def _too_long(self, prompt_tokens: int, max_tokens: int) -> tuple[int, dict[str, Any]] | None:
        if self.profile == "llama.cpp" and prompt_tokens >= self.n_ctx:
            return 400, {"error": {"code": 400, "type": "exceed_context_size_error",
                                   "message": f"request ({prompt_tokens} tokens) exceeds the available context size "
                                              f"({self.n_ctx} tokens), try increasing it",
                                   "n_prompt_tokens": prompt_tokens, "n_ctx": self.n_ctx}}
        if self.profile == "llama-cpp-python" and prompt_tokens + max_tokens > self.n_ctx:
            return 400, {"error": {
                "message": f"This model's maximum context length is {self.n_ctx} tokens. However, you requested "
                           f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in "
                           "the completion). Please reduce the length of the messages or completion.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}
        if self.profile == "vllm" and prompt_tokens + max_tokens > self.n_ctx:
            return 400, {"object": "error", "type": "BadRequestError", "code": 400, "param": None,
                         "message": f"This model's maximum context length is {self.n_ctx} tokens. However, you "
                                    f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                                    f"messages, {max_tokens} in the completion). Please reduce the length of the "
                                    "messages or completion."}
        return None

    def _unknown_model(self, model: str) -> tuple[int, dict[str, Any]] | None:
        if self.profile in ("llama.cpp", "llama-cpp-python"):
            return None  # answered by the loaded model, whatever the name
        if self.profile == "ollama" and model not in self.served_models:
            return 404, {"error": {"message": f'model "{model}" not found, try pulling it first', "type": "api_error",
                                   "param": None, "code": None}}
        if self.profile == "vllm" and model not in self.served_models:
            return 404, {"object": "error", "message": f"The model `{model}` does not exist.", "type": "NotFoundError",
                         "param": None, "code": 404}
        if self.known_models is not None and model not in self.known_models:
            return 404, {"error": {"message": f"model {model} not found", "type": "not_found"}}
        return None

    def _complete(self, body: dict[str, Any], fault: str | None) -> tuple[int, dict[str, Any]]:
        model = str(body.get("model", ""))
        unknown = self._unknown_model(model)
        if unknown is not None:
            return unknown
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return self._answer(body, model, fault)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _answer(self, body: dict[str, Any], model: str, fault: str | None) -> tuple[int, dict[str, Any]]:
        prompt = "".join(str(m.get("content", "")) for m in body.get("messages", []))
        max_tokens = int(body.get("max_tokens") or 256)
        prompt_tokens = estimate_tokens(prompt)
        if self.profile == "ollama" and prompt_tokens > self.n_ctx:  # cut silently, as Ollama does
            with self._lock:
                self.truncated += 1
        too_long = self._too_long(prompt_tokens, max_tokens)
        if too_long is not None:
            return too_long
        slot = self._take_slot(prompt) if self._slots else None
        try:
            if slot is not None:
                cached = estimate_tokens(prompt[: _common_prefix(slot.prompt, prompt)])
            else:
                prefix = prompt.split("</document>", 1)[0] if "</document>" in prompt else ""
                key = hashlib.sha256((model + prefix).encode()).hexdigest()
                with self._lock:
                    cached = estimate_tokens(prefix) if prefix and key in self._prefixes else 0
                    if prefix:
                        self._prefixes.add(key)
            processed = prompt_tokens - cached
            with self._lock:
                self.prompt_tokens_total += prompt_tokens
                self.prompt_tokens_processed += processed
            delay = self.latency_s + processed * self.seconds_per_prompt_token
            if delay:
                self.clock.hold(self.clock.monotonic() + delay)
        finally:
            if slot is not None:
                self._release_slot(slot, prompt)
        chunk = prompt.split("<chunk>\n", 1)[-1].split("\n</chunk>", 1)[0]
        text = (self.answer(prompt) if self.answer is not None
                else "Context: situates the chunk that starts with " + " ".join(chunk.split()[:8]) + ".")
        finish = "stop"
        if fault == "length":
            text, finish = text[: max(1, len(text) // 3)], "length"
        usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": estimate_tokens(text),
                                 "total_tokens": prompt_tokens + estimate_tokens(text)}
        if self.profile not in ("llama-cpp-python", "ollama"):
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        payload: dict[str, Any] = {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": model if self.profile != "llama.cpp" else self.model_id,
            "usage": usage,
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": text}}]}
        if self.profile == "llama.cpp":
            payload["timings"] = {"cache_n": cached, "prompt_n": processed, "predicted_n": estimate_tokens(text)}
        return 200, payload

    def _models(self) -> dict[str, Any]:
        cards = []
        for model in self.served_models:
            card: dict[str, Any] = {"id": model, "object": "model", "created": 0, "owned_by": _OWNED_BY[self.profile]}
            if self.profile == "vllm":
                card["max_model_len"] = self.n_ctx
            if self.profile == "llama-cpp-python":
                card["permissions"] = []
            cards.append(card)
        return {"object": "list", "data": cards}

    # -- HTTP --------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"


class _Handler(LoopbackHandler):
    @property
    def fake(self) -> FakeOpenAIServer:
        return cast(FakeOpenAIServer, self.owner)

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        fake = self.fake
        if self.path.rstrip("/").endswith("/v1/models"):
            self._send(200, fake._models())
        elif self.path.rstrip("/") == "/props" and fake.profile == "llama.cpp":
            self._send(200, {"total_slots": len(fake._slots), "model_path": fake.model_id,
                             "default_generation_settings": {"n_ctx": fake.n_ctx}})
        else:
            self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self) -> None:  # noqa: N802 - the standard library's name
        fake = self.fake
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        if self.path.rstrip("/") == "/api/show" and fake.profile == "ollama":  # not a chat request
            parameters = f"num_ctx {fake.n_ctx}\ntemperature 0.7" if fake.states_num_ctx else "temperature 0.7"
            self._send(200, {"parameters": parameters, "details": {"family": "qwen2"},
                             "model_info": {"qwen2.context_length": 32768}})
            return
        fault = fake._faults.popleft() if fake._faults else None
        record = {"path": self.path, "body": body, "fault": fault, "status": 0, "usage": None,
                  "authorization_present": bool(self.headers.get("authorization"))}
        with fake._lock:
            fake.requests.append(record)
        if not self.path.endswith("/chat/completions"):
            record["status"] = 404
            self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        if fault == "rate_limit":
            record["status"] = 429
            self._send(429, {"error": {"message": "slow down", "type": "rate_limit"}},
                       {"retry-after": f"{fake.retry_after_s:g}"})
            return
        if fault == "insufficient_quota":  # OpenAI's error-codes guide: a 429 that no wait fixes
            record["status"] = 429
            self._send(429, {"error": {"message": "You exceeded your current quota, please check your plan and "
                                       "billing details.", "type": "insufficient_quota", "param": None,
                                       "code": "insufficient_quota"}})
            return
        if fault == "server_error":
            record["status"] = 500
            self._send(500, {"error": {"message": "boom", "type": "server_error"}})
            return
        if fault == "drop":
            record["status"] = -1
            self.close_connection = True
            return
        status, payload = fake._complete(body, fault)
        record["status"] = status
        record["usage"] = payload.get("usage")
        self._send(status, payload)
