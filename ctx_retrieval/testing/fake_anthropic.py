"""A fake Anthropic Messages API on 127.0.0.1 for tests and benchmarks, reached by the real SDK via base_url.

It answers like the real API (message JSON with ``usage``), bills prompt caching like it (an entry per prefix
ending at a ``cache_control`` block, written when at least the model's minimum length, usable only once the
writing request has finished, read within the TTL), injects scripted or random faults (429 with retry-after,
529 overloaded, 500, slow answers, dropped connections, truncated bodies), adds latency, optionally enforces
server-side rate limits, and records every request.

    with FakeAnthropicServer(latency_s=0.05) as server:
        provider = AnthropicProvider(api_key="sk-ant-test-0000000000", base_url=server.base_url)
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import random
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..models import lookup_model_info
from ..tokens import estimate_tokens

__all__ = ["FAULT_KINDS", "FakeAnthropicServer", "RecordedRequest", "default_responder"]

FAULT_KINDS = ("rate_limit", "overloaded", "server_error", "slow", "drop", "truncated")
_MESSAGE_OVERHEAD_TOKENS = 7
_DEFAULT_MIN_CACHEABLE = 1024


@dataclass
class RecordedRequest:
    """One request as the server saw it (the API key itself is never recorded)."""

    path: str
    body: dict[str, Any]
    status: int
    fault: str | None
    usage: dict[str, int] | None
    api_key_present: bool
    started: float
    finished: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    response_text: str | None = None

    @property
    def chunk_text(self) -> str | None:
        """The text between <chunk> tags of the last content block, if any."""
        try:
            last = self.body["messages"][-1]["content"][-1]["text"]
        except (KeyError, IndexError, TypeError):
            return None
        start, end = last.find("<chunk>"), last.find("</chunk>")
        return last[start + 7 : end].strip() if start >= 0 and end > start else None


def default_responder(body: dict[str, Any]) -> str:
    """A deterministic context: the document's first line and the chunk's first words."""
    blocks = body["messages"][-1]["content"]
    if isinstance(blocks, str):
        blocks = [{"text": blocks}]
    texts = [b.get("text", "") for b in blocks]
    document = texts[0]
    if "<document>" in document:
        document = document.split("<document>", 1)[1]
    title = next((line.strip(" #/*!-") for line in document.splitlines() if line.strip(" #/*!-")), "untitled")
    chunk = texts[-1]
    if "<chunk>" in chunk and "</chunk>" in chunk:
        chunk = chunk.split("<chunk>", 1)[1].split("</chunk>", 1)[0]
    words = chunk.split()[:12]
    return f"This chunk is from the document that begins '{title[:80]}' and covers: {' '.join(words)}."


def _count(text: str) -> int:
    return estimate_tokens(text)


class _FaultPlan:
    def __init__(self, seed: int) -> None:
        self.script: deque[str | None] = deque()
        self.rules: list[list[Any]] = []  # [predicate, kind, remaining (-1 = forever)]
        self.rate = 0.0
        self.mix: dict[str, float] = {}
        self.rng = random.Random(seed)
        self.until = 0.0
        self.until_kind: str | None = None

    def next(self, request: RecordedRequest) -> str | None:
        for rule in self.rules:
            predicate, kind, remaining = rule
            if remaining != 0 and predicate(request):
                rule[2] = remaining - 1
                return str(kind)
        if self.script:
            return self.script.popleft()
        if self.until_kind is not None and time.monotonic() < self.until:
            return self.until_kind
        if self.rate and self.rng.random() < self.rate:
            kinds = list(self.mix)
            return self.rng.choices(kinds, [self.mix[k] for k in kinds])[0]
        return None


class FakeAnthropicServer:
    """A threaded HTTP server speaking enough of the Messages API for the SDK.

    Args:
        latency_s: base latency of each successful answer.
        latency_per_output_token_s: extra latency per output token.
        responder: ``body -> text`` writing the "context" (``default_responder``).
        api_key: when set, requests must carry exactly this key, as ``x-api-key`` or a bearer token (else 401).
        known_models: models accepted (others answer 404 like an unknown model id); None accepts the
            models in ``ctx_retrieval.models`` and any id starting with ``claude-``.
        rate_limit_rpm / rate_limit_itpm: server-side limits answered with 429 + retry-after.
        cache_ttl_scale: multiply TTLs (e.g. 0.01 to test expiry quickly).
        batch_delay_s: how long a Message Batch stays ``in_progress`` before its results are ready.
        rate_window_s: the period the rate limits are per (60: per minute; less compresses benchmarks in time).
        rate_limit_headers: send ``anthropic-ratelimit-*`` headers with each answer while limits are set (as
            the real API does); False hides them, like a proxy that strips them.
    """

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        latency_per_output_token_s: float = 0.0,
        responder: Callable[[dict[str, Any]], str] = default_responder,
        api_key: str | None = None,
        known_models: Iterable[str] | None = None,
        rate_limit_rpm: float | None = None,
        rate_limit_itpm: float | None = None,
        retry_after_s: float = 1.0,
        slow_s: float = 5.0,
        cache_ttl_scale: float = 1.0,
        seed: int = 0,
        batch_delay_s: float = 0.2,
        rate_window_s: float = 60.0,
        rate_limit_headers: bool = True,
    ) -> None:
        self.latency_s = latency_s
        self.latency_per_output_token_s = latency_per_output_token_s
        self.responder = responder
        self.api_key = api_key
        self.known_models = set(known_models) if known_models is not None else None
        self.rate_limit_rpm = rate_limit_rpm
        self.rate_limit_itpm = rate_limit_itpm
        self.retry_after_s = retry_after_s
        self.slow_s = slow_s
        self.cache_ttl_scale = cache_ttl_scale
        self.requests: list[RecordedRequest] = []
        self._faults = _FaultPlan(seed)
        self._lock = threading.Lock()
        self._cache: dict[str, float] = {}  # prefix hash -> expiry (monotonic)
        self._writes_by_key: Counter[str] = Counter()  # prefix hash -> times written
        self._requests_left = float(rate_limit_rpm or 0)
        self._tokens_left = float(rate_limit_itpm or 0)
        self._bucket_stamp = time.monotonic()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self.batch_delay_s = batch_delay_s
        self.rate_window_s = rate_window_s
        self.rate_limit_headers = rate_limit_headers
        self.batches: dict[str, dict[str, Any]] = {}
        self._batch_faults: list[tuple[Callable[[dict[str, Any]], bool], str]] = []
        self._batch_lock = threading.Lock()  # one thread processes an ended batch, exactly once
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> FakeAnthropicServer:
        server = self

        class Handler(_Handler):
            fake = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-anthropic", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- faults ----------------------------------------------------------------------------------------

    def script_faults(self, kinds: Iterable[str | None]) -> None:
        """Answer the next requests with these faults in order (None = answer normally)."""
        for kind in kinds:
            if kind is not None and kind not in FAULT_KINDS:
                raise ValueError(f"unknown fault {kind!r}; one of {FAULT_KINDS}")
            self._faults.script.append(kind)

    def set_fault_rate(self, rate: float, mix: dict[str, float] | None = None) -> None:
        """Fail a share ``rate`` of requests at random, kinds drawn from ``mix`` (weights)."""
        mix = mix or {k: 1.0 for k in FAULT_KINDS}
        for kind in mix:
            if kind not in FAULT_KINDS:
                raise ValueError(f"unknown fault {kind!r}; one of {FAULT_KINDS}")
        self._faults.rate, self._faults.mix = rate, dict(mix)

    def fail_when(self, predicate: Callable[[RecordedRequest], bool], kind: str, times: int = -1) -> None:
        """Answer requests matching ``predicate`` with ``kind``, ``times`` times (-1: always)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; one of {FAULT_KINDS}")
        self._faults.rules.append([predicate, kind, times])

    def fail_chunk(self, chunk_text: str, kind: str = "server_error", times: int = -1) -> None:
        """Answer requests for the chunk whose text is ``chunk_text`` with ``kind``."""
        wanted = chunk_text.strip()
        self.fail_when(lambda request: request.chunk_text == wanted, kind, times)

    def fail_all_for(self, seconds: float, kind: str = "rate_limit") -> None:
        """Answer every request with ``kind`` for the next ``seconds`` (a sustained limit or an outage)."""
        self._faults.until = time.monotonic() + seconds
        self._faults.until_kind = kind

    # -- statistics ------------------------------------------------------------------------------------

    def successful(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.status == 200 and r.fault is None]

    def totals(self) -> dict[str, int]:
        """Requests, faults and summed usage of successful answers; cache entries written and the most times
        one entry was written (1 = every cached prefix written exactly once)."""
        with self._lock:
            records = list(self.requests)
            writes_by_key = dict(self._writes_by_key)
        ok = [r for r in records if r.status == 200 and r.fault is None and r.usage]
        totals = {"requests": len(records), "ok": len(ok), "faults": sum(r.fault is not None for r in records),
                  "rate_limited": sum(r.status == 429 for r in records),
                  "cache_writes": sum(1 for r in ok if r.usage and r.usage["cache_creation_input_tokens"]),
                  "cache_entries_written": len(writes_by_key),
                  "max_writes_per_entry": max(writes_by_key.values(), default=0)}
        for name in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
            totals[name] = sum(r.usage[name] for r in ok if r.usage)
        return totals

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._cache.clear()
            self._writes_by_key.clear()
            self._requests_left = float(self.rate_limit_rpm or 0)
            self._tokens_left = float(self.rate_limit_itpm or 0)
        self._faults.script.clear()
        self._faults.rules.clear()
        self._faults.rate = 0.0
        self._faults.until_kind = None

    # -- the API ---------------------------------------------------------------------------------------

    def _min_cacheable(self, model: str) -> int:
        info = lookup_model_info(model)
        return info.min_cacheable_tokens if info else _DEFAULT_MIN_CACHEABLE

    def _model_known(self, model: str) -> bool:
        if self.known_models is not None:
            return model in self.known_models
        return lookup_model_info(model) is not None or model.startswith("claude-")

    def _blocks(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        system = body.get("system")
        if isinstance(system, str):
            blocks.append({"type": "text", "text": system})
        elif isinstance(system, list):
            blocks.extend(system)
        for message in body.get("messages", []):
            content = message.get("content")
            if isinstance(content, str):
                blocks.append({"type": "text", "text": content})
            else:
                blocks.extend(content)
        return blocks

    def _bill(self, body: dict[str, Any]) -> tuple[dict[str, int], list[tuple[str, float]]]:
        """Usage for a request, and the cache entries it writes when it finishes."""
        model = body["model"]
        blocks = self._blocks(body)
        tokens = [_count(b.get("text", "")) for b in blocks]
        total = sum(tokens) + _MESSAGE_OVERHEAD_TOKENS
        minimum = self._min_cacheable(model)
        prefix = hashlib.sha256(model.encode())
        breakpoints: list[tuple[str, int, float]] = []  # (prefix hash, prefix tokens, ttl)
        running = 0
        for block, n in zip(blocks, tokens, strict=True):
            prefix.update(json.dumps(block.get("text", ""), ensure_ascii=False).encode())
            running += n
            control = block.get("cache_control")
            if control:
                ttl = 3600.0 if control.get("ttl") == "1h" else 300.0
                breakpoints.append((prefix.hexdigest(), running, ttl * self.cache_ttl_scale))
        now = time.monotonic()
        read = 0
        writes: list[tuple[str, float]] = []
        write_tokens = 0
        with self._lock:
            hit_index = -1
            for index in range(len(breakpoints) - 1, -1, -1):
                key, n, ttl = breakpoints[index]
                if self._cache.get(key, 0.0) > now:
                    read, hit_index = n, index
                    self._cache[key] = now + ttl  # a hit refreshes the TTL
                    break
            for key, n, ttl in breakpoints[hit_index + 1 :]:
                if n >= minimum:
                    writes.append((key, ttl))
                    write_tokens = n - read
        usage = {
            "input_tokens": total - read - write_tokens,
            "output_tokens": 0,
            "cache_creation_input_tokens": write_tokens,
            "cache_read_input_tokens": read,
        }
        return usage, writes

    def _rate_limited(self, input_tokens: int) -> tuple[float, dict[str, str]]:
        """Token buckets, as Anthropic documents its limits: capacity one minute's worth, refilled continuously.
        Uncached input tokens count (input + cache writes); cache reads do not. Returns the retry-after (0 when
        admitted) and the ``anthropic-ratelimit-*`` headers describing the buckets after this request."""
        if self.rate_limit_rpm is None and self.rate_limit_itpm is None:
            return 0.0, {}
        now = time.monotonic()
        with self._lock:
            refill = (now - self._bucket_stamp) / self.rate_window_s  # windows elapsed since the last request
            self._bucket_stamp = now
            if self.rate_limit_rpm is not None:
                self._requests_left = min(self.rate_limit_rpm, self._requests_left + refill * self.rate_limit_rpm)
            if self.rate_limit_itpm is not None:
                self._tokens_left = min(self.rate_limit_itpm, self._tokens_left + refill * self.rate_limit_itpm)
            wait = 0.0  # seconds until both buckets could serve this request: the retry-after
            if self.rate_limit_rpm is not None and self._requests_left < 1:
                wait = (1 - self._requests_left) * self.rate_window_s / self.rate_limit_rpm
            need = min(input_tokens, self.rate_limit_itpm or 0)
            if self.rate_limit_itpm is not None and self._tokens_left < need:
                wait = max(wait, (need - self._tokens_left) * self.rate_window_s / self.rate_limit_itpm)
            if wait <= 0:
                self._requests_left -= 1
                self._tokens_left -= input_tokens
            headers = self._rate_limit_headers()
        return wait, headers

    def _rate_limit_headers(self) -> dict[str, str]:
        """Anthropic's ``anthropic-ratelimit-{requests,input-tokens}-{limit,remaining,reset}``: reset is the RFC
        3339 time at which the bucket is full again (millisecond precision here)."""
        headers: dict[str, str] = {}
        utc_now = datetime.datetime.now(datetime.timezone.utc)
        for name, limit, left in (("requests", self.rate_limit_rpm, self._requests_left),
                                  ("input-tokens", self.rate_limit_itpm, self._tokens_left)):
            if limit is None or not self.rate_limit_headers:
                continue
            full_in = max(0.0, limit - left) * self.rate_window_s / limit
            reset = utc_now + datetime.timedelta(seconds=full_in)
            headers[f"anthropic-ratelimit-{name}-limit"] = f"{limit:.0f}"
            # Like the API: requests exactly, tokens rounded to the nearest thousand.
            shown = max(0, int(left)) if name == "requests" else max(0, round(left / 1000) * 1000)
            headers[f"anthropic-ratelimit-{name}-remaining"] = f"{shown}"
            headers[f"anthropic-ratelimit-{name}-reset"] = reset.isoformat(timespec="milliseconds").replace(
                "+00:00", "Z")
        return headers

    def record(self, record: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(record)

    def finish_writes(self, writes: list[tuple[str, float]]) -> None:
        now = time.monotonic()
        with self._lock:
            for key, ttl in writes:
                self._cache[key] = now + ttl
                self._writes_by_key[key] += 1

    def next_id(self) -> str:
        return f"msg_fake_{next(self._ids):08d}"

    # -- Message Batches ---------------------------------------------------------------------------------

    def fail_in_batches(self, predicate: Callable[[dict[str, Any]], bool], kind: str = "errored") -> None:
        """Batch requests whose params match ``predicate`` end ``"errored"`` (overloaded) or ``"expired"``."""
        self._batch_faults.append((predicate, kind))

    def batch_requests(self) -> int:
        """Requests submitted in batches so far."""
        with self._batch_lock:
            return sum(len(b["requests"]) for b in self.batches.values())

    def create_batch(self, requests: list[dict[str, Any]]) -> dict[str, Any]:
        batch_id = f"msgbatch_fake_{next(self._ids):08d}"
        with self._batch_lock:
            self.batches[batch_id] = {"id": batch_id, "requests": requests, "created": time.time(),
                                      "started": time.monotonic(), "results": None}
        return self.batch_object(batch_id)

    def _process_batch(self, batch: dict[str, Any]) -> None:
        """Bill and answer every request of an ended batch once, at the moment it ends (cache rules apply)."""
        results = []
        for item in batch["requests"]:
            params = item["params"]
            kind = next((k for predicate, k in self._batch_faults if predicate(params)), None)
            if kind == "expired":
                results.append({"custom_id": item["custom_id"], "result": {"type": "expired"}})
                continue
            if kind == "errored":
                results.append({"custom_id": item["custom_id"], "result": {"type": "errored", "error": {
                    "type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}}})
                continue
            usage, writes = self._bill(params)
            text = self.responder(params)
            usage["output_tokens"] = estimate_tokens(text)
            self.finish_writes(writes)
            self.record(RecordedRequest(path="/v1/messages/batches", body=params, status=200, fault=None,
                                        usage=usage, api_key_present=True, started=time.monotonic(),
                                        finished=time.monotonic(), response_text=text))
            results.append({"custom_id": item["custom_id"], "result": {"type": "succeeded", "message": {
                "id": self.next_id(), "type": "message", "role": "assistant", "model": params["model"],
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
                "usage": usage}}})
        batch["results"] = results

    def batch_object(self, batch_id: str, base_url: str = "") -> dict[str, Any]:
        with self._batch_lock:
            batch = self.batches[batch_id]
            ended = time.monotonic() - batch["started"] >= self.batch_delay_s
            if ended and batch["results"] is None:
                self._process_batch(batch)
            counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
            if ended:
                for result in batch["results"]:
                    counts[result["result"]["type"]] += 1
            else:
                counts["processing"] = len(batch["requests"])
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(batch["created"]))
        return {"id": batch_id, "type": "message_batch", "processing_status": "ended" if ended else "in_progress",
                "request_counts": counts, "created_at": created, "expires_at": created,
                "ended_at": created if ended else None, "archived_at": None, "cancel_initiated_at": None,
                "results_url": f"{base_url}/v1/messages/batches/{batch_id}/results" if ended else None}


def _error_body(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeAnthropicServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without TCP_NODELAY, Nagle's algorithm and delayed
        # ACKs add ~40 ms to every keep-alive request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the default stderr log
        return

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.send_header("request-id", f"req_fake_{time.monotonic_ns()}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:  # Message Batches: retrieve and results
        fake = self.fake
        parts = self.path.split("?")[0].strip("/").split("/")  # v1 messages batches <id> [results]
        if len(parts) < 4 or parts[:3] != ["v1", "messages", "batches"] or parts[3] not in fake.batches:
            self._send(404, _error_body("not_found_error", f"no route {self.path}"))
            return
        host = self.headers.get("host", "127.0.0.1")
        batch = fake.batch_object(parts[3], base_url=f"http://{host}")
        if len(parts) == 4:
            self._send(200, json.dumps(batch).encode())
            return
        if batch["processing_status"] != "ended":
            self._send(404, _error_body("not_found_error", "results are not ready"))
            return
        lines = "\n".join(json.dumps(r) for r in fake.batches[parts[3]]["results"]) + "\n"
        payload = lines.encode()
        self.send_response(200)
        self.send_header("content-type", "application/binary")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self) -> None:
        fake = self.fake
        started = time.monotonic()
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        key = self.headers.get("x-api-key")
        bearer = self.headers.get("authorization") or ""
        if key is None and bearer.lower().startswith("bearer "):
            key = bearer[7:]  # SDK 2.x sends the key as a bearer token
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in ("x-api-key", "authorization")}
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            body = {}
        record = RecordedRequest(path=self.path, body=body, status=0, fault=None, usage=None,
                                 api_key_present=bool(key), started=started, headers=headers)
        if self.path.split("?")[0] == "/v1/messages/batches":
            record.status = 200
            fake.record(record)
            self._send(200, json.dumps(fake.create_batch(body.get("requests", []))).encode())
            return
        if self.path.split("?")[0] != "/v1/messages":
            record.status = 404
            fake.record(record)
            self._send(404, _error_body("not_found_error", f"no route {self.path}"))
            return
        if fake.api_key is not None and key != fake.api_key:
            record.status = 401
            fake.record(record)
            self._send(401, _error_body("authentication_error", "invalid x-api-key"))
            return
        model = body.get("model", "")
        if not fake._model_known(model):
            record.status = 404
            fake.record(record)
            self._send(404, _error_body("not_found_error", f"model: {model}"))
            return
        fault = fake._faults.next(record)
        record.fault = fault
        if fault == "rate_limit":
            record.status = 429
            fake.record(record)
            self._send(429, _error_body("rate_limit_error", "rate limited"),
                       {"retry-after": f"{fake.retry_after_s:g}"})
            return
        if fault == "overloaded":
            record.status = 529
            fake.record(record)
            self._send(529, _error_body("overloaded_error", "Overloaded"))
            return
        if fault == "server_error":
            record.status = 500
            fake.record(record)
            self._send(500, _error_body("api_error", "Internal server error"))
            return
        if fault == "drop":
            record.status = -1
            fake.record(record)
            self.close_connection = True
            return
        usage, writes = fake._bill(body)
        wait, limit_headers = fake._rate_limited(usage["input_tokens"] + usage["cache_creation_input_tokens"])
        if wait:
            record.status = 429
            record.fault = "server_rate_limit"
            fake.record(record)
            self._send(429, _error_body("rate_limit_error", "rate limit exceeded"),
                       {"retry-after": f"{max(wait, 0.01):.2f}", **limit_headers})
            return
        text = fake.responder(body)
        max_tokens = int(body.get("max_tokens") or 1)
        stop_reason = "end_turn"
        words = text.split(" ")
        while estimate_tokens(" ".join(words)) > max_tokens and len(words) > 1:
            words.pop()
            stop_reason = "max_tokens"
        text = " ".join(words)
        usage["output_tokens"] = estimate_tokens(text)
        delay = fake.latency_s + fake.latency_per_output_token_s * usage["output_tokens"]
        if fault == "slow":
            delay += fake.slow_s
        if delay:
            time.sleep(delay)
        payload = json.dumps({
            "id": fake.next_id(), "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": stop_reason, "stop_sequence": None,
            "usage": usage,
        }).encode()
        if fault == "truncated":
            record.status = 200
            fake.record(record)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        try:
            self._send(200, payload, limit_headers)
        except OSError:  # the client gave up (timeout): nothing was delivered, nothing is written
            record.status = -2
            record.finished = time.monotonic()
            fake.record(record)
            return
        fake.finish_writes(writes)
        record.status = 200
        record.usage = usage
        record.response_text = text
        record.finished = time.monotonic()
        fake.record(record)
