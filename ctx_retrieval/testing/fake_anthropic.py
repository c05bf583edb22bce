"""A twin of the Anthropic Messages API on 127.0.0.1 for tests and benchmarks, reached by the real SDK via base_url.

Its rules are its own copy of Anthropic's documentation (``anthropic_rules``, each rule with its page), never the
package's model table: retired and unknown model ids answer 404; invalid requests answer 400 (sampling parameters
on models that reject them, more than 4 cache breakpoints, a 1h TTL after a 5m one, thinking settings a model
cannot honour, assistant prefill on current models); thinking models answer with a thinking block first unless
thinking is disabled, and thinking counts against ``max_tokens``. Prompt caching is billed like the API (an entry
per prefix ending at a ``cache_control`` block, written when at least the model's minimum length counted with the
model's own tokenizer, readable once the writing response has begun, TTL counted from the writing request's
start, usage with the ``cache_creation`` 5m/1h split). It counts tokens (``/v1/messages/count_tokens``), runs
Message Batches (``twin_batches``), optionally enforces rate limits on requests, input and output tokens with
the ``anthropic-ratelimit-*`` headers (``twin_limits``), injects scripted or random faults (429 with
retry-after, the spend-limit 429, 402, 403, 413, 500, 504, 529, refusals, answers cut at ``max_tokens`` or the
context window, slow answers, dropped connections, truncated bodies, hostile bodies: one byte a tenth of a second,
endless, a gzip bomb; every error body carries a ``request_id``), adds latency, serves the Models API, and records
every request.

    with FakeAnthropicServer(latency_s=0.05) as server:
        provider = AnthropicProvider(api_key="sk-ant-test-0000000000", base_url=server.base_url)
"""

from __future__ import annotations

import contextlib
import datetime
import gzip
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from ctx_retrieval.providers.base import TWIN_SERVER
from ctx_retrieval.testing import anthropic_rules as rules
from ctx_retrieval.testing import twin_platforms as platforms
from ctx_retrieval.testing.anthropic_rules import count_tokens
from ctx_retrieval.testing.clock import ServerClock, WallServerClock
from ctx_retrieval.testing.loopback import LoopbackHandler, LoopbackServer
from ctx_retrieval.testing.twin_batches import BatchStore
from ctx_retrieval.testing.twin_cache import PromptCache
from ctx_retrieval.testing.twin_faults import ERROR_FAULTS, FAULT_KINDS, MALFORMED_BODIES, FaultPlan
from ctx_retrieval.testing.twin_limits import RateBuckets

COUNT_PATH = "/v1/messages/count_tokens"


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
    platform: str | None = None  # "bedrock" or "vertex": a platform route (``twin_platforms``); path is its API route

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
    """A deterministic context in the chunk's script: the document's first line and the start of the chunk, a few
    dozen tokens whatever the language (never near ``max_tokens``, as a real context is not)."""
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
    if _unspaced_script(chunk):  # Chinese, Japanese: no words to count, and a character is about a token
        covers = "".join(chunk.split())[:30]
        if _has_kana(chunk):
            return f"この部分は「{title[:30]}」の一部で、内容は{covers}。"
        return f"本段出自「{title[:30]}」，内容：{covers}。"
    words = [word[:24] for word in chunk.split()[:12]]
    if "Write one question" in texts[-1]:  # asked for a search question (evaluation.queries): one, in the chunk's words
        return f"Question: what does '{title[:40]}' say about {' '.join(w[:12] for w in words[2:7])}?"
    if "Write it in the language the document is written in." in texts[-1]:  # asked in the document's language
        opening = _OPENINGS.get(_language_of(chunk) or "")
        if opening is not None:
            return opening.format(title=title[:80], words=" ".join(words))
    return f"This chunk is from the document that begins '{title[:80]}' and covers: {' '.join(words)}."


# A context's opening in the languages the document-language prompt is tested in (what a model asked to write in
# the document's language would write): the script, and for Latin script the text's language, choose it.
_OPENINGS = {
    "ko": "이 부분은 「{title}」 문서의 일부이며 다루는 내용: {words}.",
    "ru": "Этот фрагмент из документа «{title}» и описывает: {words}.",
    "hi": "यह अंश «{title}» दस्तावेज़ से है और इसमें है: {words}।",
    "ar": "هذا المقطع من المستند «{title}» ويتناول: {words}.",
    "el": "Αυτό το απόσπασμα είναι από το έγγραφο «{title}» και αφορά: {words}.",
    "turkish": "Bu bölüm «{title}» belgesinden alınmıştır ve şunları anlatır: {words}.",
    "german": "Dieser Abschnitt stammt aus dem Dokument „{title}“ und behandelt: {words}.",
    "french": "Ce passage provient du document « {title} » et porte sur : {words}.",
    "spanish": "Este fragmento pertenece al documento «{title}» y trata de: {words}.",
}


def _language_of(text: str) -> str | None:
    """The chunk's language for ``_OPENINGS``: its script (Hangul, Cyrillic, Devanagari, Arabic, Greek), else the
    Latin-script language its words show (``ctx_retrieval.language.latin_language``)."""
    from ctx_retrieval.language import latin_language

    for low, high, language in ((0xAC00, 0xD7AF, "ko"), (0x0400, 0x04FF, "ru"), (0x0900, 0x097F, "hi"),
                                (0x0600, 0x06FF, "ar"), (0x0370, 0x03FF, "el")):
        if sum(1 for ch in text if low <= ord(ch) <= high) > len(text) / 4:
            return language
    return latin_language(text)


def _unspaced_script(text: str) -> bool:
    """Mostly Han or Kana: written without spaces between words."""
    letters = [ch for ch in text if ch.isalpha()]
    cjk = sum(1 for ch in letters if "\u3040" <= ch <= "\u30ff" or "\u4e00" <= ch <= "\u9fff")
    return bool(letters) and cjk > len(letters) / 2


def _has_kana(text: str) -> bool:
    return any("\u3040" <= ch <= "\u30ff" for ch in text)


class FakeAnthropicServer(LoopbackServer):
    """A threaded HTTP server speaking enough of the Messages API for the SDK.

    Args:
        latency_s: time to the first token of each successful answer (cache entries it writes become readable
            then).
        latency_per_output_token_s: extra latency per output token.
        responder: ``body -> text`` writing the "context" (``default_responder``).
        api_key: when set, requests must carry exactly this key, as ``x-api-key`` or a bearer token (else 401).
        known_models: models accepted (others answer 404); None: the models the twin's rules list.
        rate_limit_rpm / rate_limit_itpm / rate_limit_otpm: server-side limits answered with 429 + retry-after.
        rate_window_s: the period the rate limits are per (60: per minute; less compresses benchmarks in time).
        rate_burst_s: enforce the limits over this shorter interval (buckets hold this many seconds' worth).
        rate_limit_headers: send ``anthropic-ratelimit-*`` headers with each answer while limits are set (as
            the real API does); False hides them, like a proxy that strips them.
        cache_ttl_scale: multiply TTLs (e.g. 0.01 to test expiry quickly).
        thinking_tokens: length of the thinking block a thinking model writes before its answer.
        batch_delay_s: how long a Message Batch stays ``in_progress`` before its results are ready.
        batch_cache_hit_rate: the share of batch requests that may read the prompt cache (best effort).
        max_batch_requests / max_batch_bytes: the batch limits (the API's: 100,000 requests, 256 MB).
        today: the date that decides which deprecated models are still served (default: today, UTC).
        port: the port on 127.0.0.1 (0: any free one); ``python -m ctx_retrieval.testing serve --port N`` runs it
            as a process of its own.
        clock: the time its latencies, rate limits, outages, cache ages and batches run on (default the wall
            clock); a test shares a ``ctx_retrieval.testing.clock.SharedClock`` with the run it serves, so what it
            sees does not depend on the machine's speed. Timestamps it shows (rate-limit resets, batch times,
            which models are retired) are wall-clock UTC.
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
        rate_limit_otpm: float | None = None,
        retry_after_s: float = 1.0,
        slow_s: float = 5.0,
        cache_ttl_scale: float = 1.0,
        seed: int = 0,
        batch_delay_s: float = 0.2,
        rate_window_s: float = 60.0,
        rate_burst_s: float | None = None,
        rate_limit_headers: bool = True,
        thinking_tokens: int = 200,
        batch_cache_hit_rate: float = 1.0,
        max_batch_requests: int = rules.MAX_BATCH_REQUESTS,
        max_batch_bytes: int = rules.MAX_BATCH_BYTES,
        today: datetime.date | None = None,
        port: int = 0,
        clock: ServerClock | None = None,
    ) -> None:
        super().__init__(_Handler, name="fake-anthropic", port=port)
        self.clock: ServerClock = clock or WallServerClock()
        self.today = today
        self.latency_s = latency_s
        self.latency_per_output_token_s = latency_per_output_token_s
        self.responder = responder
        self.api_key = api_key
        self.known_models = set(known_models) if known_models is not None else None
        self.retry_after_s = retry_after_s
        self.slow_s = slow_s
        self.thinking_tokens = thinking_tokens
        self.max_batch_bytes = max_batch_bytes
        self.requests: list[RecordedRequest] = []
        self.answering = 0  # POST requests being handled now (a test waits for 0 before it counts what was paid)
        self._faults = FaultPlan(seed)
        self._lock = threading.Lock()
        self.cache = PromptCache(cache_ttl_scale)
        self._limit_settings = {"rpm": rate_limit_rpm, "itpm": rate_limit_itpm, "otpm": rate_limit_otpm,
                                "window_s": rate_window_s, "burst_s": rate_burst_s, "headers": rate_limit_headers,
                                "clock": self.clock}
        self.limits = RateBuckets(**self._limit_settings)  # type: ignore[arg-type]
        self.batch_store = BatchStore(delay_s=batch_delay_s, seed=seed, cache_hit_rate=batch_cache_hit_rate,
                                      max_requests=max_batch_requests, clock=self.clock)
        self._ids = itertools.count(1)

    # -- lifecycle -------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return self.origin

    @property
    def batches(self) -> dict[str, dict[str, Any]]:
        return self.batch_store.batches

    # -- faults ----------------------------------------------------------------------------------------

    @staticmethod
    def _check_kind(kind: str) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; one of {FAULT_KINDS}")

    def script_faults(self, kinds: Iterable[str | None]) -> None:
        """Answer the next requests with these faults in order (None = answer normally)."""
        for kind in kinds:
            if kind is not None:
                self._check_kind(kind)
            self._faults.script.append(kind)

    def set_fault_rate(self, rate: float, mix: dict[str, float] | None = None) -> None:
        """Fail a share ``rate`` of requests at random, kinds drawn from ``mix`` (weights)."""
        mix = mix or {k: 1.0 for k in FAULT_KINDS}
        for kind in mix:
            self._check_kind(kind)
        self._faults.rate, self._faults.mix = rate, dict(mix)

    def fail_when(self, predicate: Callable[[RecordedRequest], bool], kind: str, times: int = -1) -> None:
        """Answer requests matching ``predicate`` with ``kind``, ``times`` times (-1: always)."""
        self._check_kind(kind)
        self._faults.rules.append([predicate, kind, times])

    def fail_chunk(self, chunk_text: str, kind: str = "server_error", times: int = -1) -> None:
        """Answer requests for the chunk whose text is ``chunk_text`` with ``kind``."""
        wanted = chunk_text.strip()
        self.fail_when(lambda request: request.chunk_text == wanted, kind, times)

    def fail_all_for(self, seconds: float, kind: str = "rate_limit") -> None:
        """Answer every request with ``kind`` for the next ``seconds`` (a sustained limit or an outage)."""
        self._faults.until = self.clock.monotonic() + seconds
        self._faults.until_kind = kind

    def fail_in_batches(self, predicate: Callable[[dict[str, Any]], bool], kind: str = "errored") -> None:
        """Batch requests whose params match ``predicate`` end ``"errored"`` (overloaded), ``"invalid"`` (errored
        with ``invalid_request_error``) or ``"expired"``."""
        self.batch_store.faults.append((predicate, kind))

    # -- statistics ------------------------------------------------------------------------------------

    def successful(self) -> list[RecordedRequest]:
        """Messages answered normally (ordinary and batch; token counts are not messages)."""
        with self._lock:
            return [r for r in self.requests if r.status == 200 and r.fault is None and r.path != COUNT_PATH]

    @property
    def messages(self) -> list[RecordedRequest]:
        """Every request for a message, whatever its answer (token counts excluded)."""
        with self._lock:
            return [r for r in self.requests if r.path != COUNT_PATH]

    def token_counts(self) -> list[RecordedRequest]:
        """Requests to the token-counting endpoint."""
        with self._lock:
            return [r for r in self.requests if r.path == COUNT_PATH]

    def totals(self) -> dict[str, int]:
        """Message requests (token counts apart), faults and summed usage of successful answers; cache entries
        written and the most times one entry was written (1 = every cached prefix written exactly once)."""
        with self._lock:
            records = list(self.requests)
        writes_by_key = dict(self.cache.writes_by_key)
        counts = sum(r.path == COUNT_PATH for r in records)
        records = [r for r in records if r.path != COUNT_PATH]
        ok = [r for r in records if r.status == 200 and r.fault is None and r.usage]
        totals = {"requests": len(records), "token_counts": counts, "ok": len(ok),
                  "faults": sum(r.fault is not None for r in records),
                  "rate_limited": sum(r.status == 429 for r in records),
                  "cache_writes": sum(1 for r in ok if r.usage and r.usage["cache_creation_input_tokens"]),
                  "cache_entries_written": len(writes_by_key),
                  "max_writes_per_entry": max(writes_by_key.values(), default=0)}
        for name in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
            totals[name] = sum(r.usage[name] for r in ok if r.usage)
        return totals

    def batch_requests(self) -> int:
        """Requests submitted in batches so far."""
        return self.batch_store.requests_submitted()

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
        self.cache.reset()
        self.limits.reset()
        self._faults.script.clear()
        self._faults.rules.clear()
        self._faults.rate = 0.0
        self._faults.until_kind = None

    # -- the API ---------------------------------------------------------------------------------------

    def model_rules(self, model: str) -> rules.TwinModel | None:
        """The twin's rules for a model id it serves; None answers 404 (retired or unknown ids)."""
        if self.known_models is not None:
            # Models a test declares served: the documented rules where the twin has them, else generic ones.
            return (rules.lookup(model) or rules.GENERIC_MODEL) if model in self.known_models else None
        if rules.retired(model, self.today):
            return None
        return rules.lookup(model)

    def models_listing(self) -> dict[str, Any]:
        """``GET /v1/models`` (MODELS_API): the served models with their limits and thinking capabilities."""
        data = []
        for name in (sorted(self.known_models) if self.known_models is not None else rules.served_models(self.today)):
            model = self.model_rules(name)
            if model is None:
                continue
            thinking = {"supported": True, "types": {"enabled": {"supported": model.thinking == "off"},
                                                     "adaptive": {"supported": True}}}
            data.append({"type": "model", "id": name, "display_name": name, "created_at": "2026-01-01T00:00:00Z",
                         "max_input_tokens": model.context_window, "max_tokens": model.max_output,
                         "capabilities": {"thinking": thinking}})
        return {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None}

    def answer(self, body: dict[str, Any], model_rules: rules.TwinModel, usage: dict[str, Any],
               fault: str | None) -> tuple[list[dict[str, Any]], str]:
        """Content blocks and stop reason: a thinking block first when the model thinks (it counts against
        ``max_tokens``), then the responder's text, cut where ``max_tokens`` runs out."""
        model = str(body["model"])
        budget = int(body.get("max_tokens") or 1)
        # CONTEXT_WINDOWS_PAGE / STOP_REASONS_PAGE: generation stops where prompt and answer fill the window.
        prompt = usage["input_tokens"] + usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"]
        room = model_rules.context_window - prompt
        if fault == "context_window":
            room = min(room, max(1, budget // 4))
        cut_reason = "max_tokens"
        if room < budget:
            budget, cut_reason = max(0, room), "model_context_window_exceeded"
        content: list[dict[str, Any]] = []
        output = 0
        if rules.thinks(body, model_rules):
            spent = min(budget, self.thinking_tokens)
            content.append({"type": "thinking", "thinking": "", "signature": f"sig_fake_{next(self._ids)}"})
            output += spent
            budget -= spent
            if budget <= 0:
                usage["output_tokens"] = output
                return content, cut_reason
        if fault == "refusal":
            usage["output_tokens"] = output + 1
            return content, "refusal"
        text = self.responder(body)
        stop_reason = "end_turn"
        words = text.split(" ")
        if fault == "max_tokens":
            words, stop_reason = words[: max(1, len(words) // 2)], "max_tokens"
        while count_tokens(" ".join(words), model) > budget and len(words) > 1:
            words.pop()
            stop_reason = cut_reason
        text = " ".join(words)
        content.append({"type": "text", "text": text})
        usage["output_tokens"] = output + count_tokens(text, model)
        return content, stop_reason

    def record(self, record: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(record)

    def undelivered(self, record: RecordedRequest) -> None:
        """A recorded answer the client never received (it gave up): not an answer after all."""
        with self._lock:
            record.status = -2
            record.usage = None
            record.response_text = None
            record.finished = self.clock.monotonic()

    def next_id(self) -> str:
        return f"msg_fake_{next(self._ids):08d}"

    def answer_batch_request(self, params: dict[str, Any], allow_cache_read: bool) -> dict[str, Any]:
        """One batch request's result: errored when invalid (it is never retried by the API), else billed
        at the moment the batch ends with the cache rules (reads only where ``allow_cache_read``)."""
        model = str(params.get("model", ""))
        model_rules = self.model_rules(model)
        problem = "model: " + model if model_rules is None else rules.validate_request(params, model_rules)
        if model_rules is None or problem is not None:
            kind = "not_found_error" if model_rules is None else "invalid_request_error"
            return {"type": "errored", "error": {"type": "error", "error": {"type": kind, "message": problem}}}
        now = self.clock.monotonic()
        usage, writes = self.cache.bill(params, now, allow_read=allow_cache_read)
        content, stop_reason = self.answer(params, model_rules, usage, None)
        self.cache.publish(writes, now)
        text = "".join(b.get("text", "") for b in content if b["type"] == "text")
        self.record(RecordedRequest(path="/v1/messages/batches", body=params, status=200, fault=None,
                                    usage=usage, api_key_present=True, started=now, finished=self.clock.monotonic(),
                                    response_text=text))
        return {"type": "succeeded", "message": {
            "id": self.next_id(), "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": None, "usage": usage}}


def _request_id() -> str:
    return f"req_fake_{time.monotonic_ns()}"


def _error_body(kind: str, message: str, request_id: str | None = None, details: dict[str, Any] | None = None) -> bytes:
    error: dict[str, Any] = {"type": kind, "message": message}
    if details:
        error["details"] = details
    return json.dumps({"type": "error", "error": error, "request_id": request_id or _request_id()}).encode()


class _Handler(LoopbackHandler):
    server_version = TWIN_SERVER  # every answer says it is the twin's (the CLI never labels its answers Claude's)
    sys_version = ""

    @property
    def fake(self) -> FakeAnthropicServer:
        return cast(FakeAnthropicServer, self.owner)

    platform: str | None = None  # the platform whose route this request came by (its error shapes and headers)

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None,
              request_id: str | None = None, content_type: str = "application/json") -> None:
        if self.platform is not None:
            headers = platforms.platform_headers(headers)
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        self.send_header("request-id", request_id or _request_id())
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _error(self, record: RecordedRequest, status: int, kind: str, message: str,
               headers: dict[str, str] | None = None, details: dict[str, Any] | None = None) -> None:
        record.status = status
        self.fake.record(record)
        request_id = _request_id()
        if self.platform is not None:
            body, extra = platforms.error_body(self.platform, status, message)
            self._send(status, body, {**(headers or {}), **extra}, request_id)
            return
        self._send(status, _error_body(kind, message, request_id, details), headers, request_id)

    def _hostile_body(self, fault: str, payload: bytes) -> None:
        """A 200 whose body never ends in time or in size: one byte a tenth of a second (``drip``), zeros without
        end (``endless``), or a small gzip body that decodes to 64 MB (``gzip_bomb``)."""
        self.send_response(200)
        self.send_header("content-type", "application/json")
        if fault == "gzip_bomb":
            bomb = gzip.compress(payload[:-1] + b" " * (64 * 1024 * 1024) + payload[-1:], compresslevel=9)
            self.send_header("content-encoding", "gzip")
            self.send_header("content-length", str(len(bomb)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(bomb)
            return
        if fault == "drip":
            self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.close_connection = True
        deadline = time.monotonic() + 60  # a client that never hangs up still frees this thread in time
        with contextlib.suppress(OSError):
            if fault == "drip":
                for byte in payload:
                    if time.monotonic() > deadline:
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.1)
                return
            self.wfile.write(payload[:-1])
            block = b" " * 65536
            while time.monotonic() < deadline:  # until the client gives up
                self.wfile.write(block)

    def do_GET(self) -> None:  # noqa: N802 - the standard library's name; Message Batches: retrieve and results
        fake = self.fake
        parts = self.path.split("?")[0].strip("/").split("/")  # v1 messages batches <id> [results]
        if parts == ["v1", "models"]:
            self._send(200, json.dumps(fake.models_listing()).encode())
            return
        if len(parts) < 4 or parts[:3] != ["v1", "messages", "batches"] or parts[3] not in fake.batches:
            self._send(404, _error_body("not_found_error", f"no route {self.path}"))
            return
        host = self.headers.get("host", "127.0.0.1")
        batch = fake.batch_store.view(parts[3], fake.answer_batch_request, base_url=f"http://{host}")
        if len(parts) == 4:
            self._send(200, json.dumps(batch).encode())
            return
        results = fake.batch_store.results(parts[3])
        if batch["processing_status"] != "ended" or results is None:
            self._send(404, _error_body("not_found_error", "results are not ready"))
            return
        lines = "\n".join(json.dumps(r) for r in results) + "\n"
        self._send(200, lines.encode(), content_type="application/binary")

    def _post_batches(self, record: RecordedRequest, raw: bytes, body: dict[str, Any]) -> None:
        fake = self.fake
        route = self.path.split("?")[0].strip("/").split("/")
        if len(route) == 5 and route[4] == "cancel" and route[3] in fake.batches:
            fake.batch_store.cancel(route[3])
            record.status = 200
            fake.record(record)
            self._send(200, json.dumps(fake.batch_store.view(route[3], fake.answer_batch_request)).encode())
            return
        requests = body.get("requests") or []
        if len(raw) > fake.max_batch_bytes or len(requests) > fake.batch_store.max_requests:
            self._error(record, 413, "request_too_large",
                        f"a batch may hold at most {fake.batch_store.max_requests:,} requests and "
                        f"{fake.max_batch_bytes:,} bytes")
            return
        record.status = 200
        fake.record(record)
        batch_id = f"msgbatch_fake_{next(fake._ids):08d}"
        fake.batch_store.create(batch_id, requests)
        self._send(200, json.dumps(fake.batch_store.view(batch_id, fake.answer_batch_request)).encode())

    def do_POST(self) -> None:  # noqa: N802 - the standard library's name
        fake = self.fake
        with fake._lock:
            fake.answering += 1
        try:
            self._post()
        finally:
            with fake._lock:
                fake.answering -= 1

    def _post(self) -> None:
        fake = self.fake
        started = fake.clock.monotonic()
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
        if not isinstance(body, dict):
            body = {}
        record = RecordedRequest(path=self.path, body=body, status=0, fault=None, usage=None,
                                 api_key_present=bool(key), started=started, headers=headers)
        route = self.path.split("?")[0]
        self.platform = None
        call = platforms.parse(route, body)
        if call is not None:  # Bedrock or Vertex AI: the same Messages API behind the platform's route
            self.platform = record.platform = call.platform
            record.path, route, body = call.route, call.route, call.body
            record.body = body
            if bearer.lower().startswith("aws4-hmac-sha256 "):
                key = fake.api_key  # SigV4 from the AWS credential chain: signed, not a key the twin checks
        if fake.api_key is not None and key != fake.api_key:
            self._error(record, 401, "authentication_error", "invalid x-api-key")
            return
        if call is not None and call.problem is not None:
            status, message = call.problem
            self._error(record, status, "invalid_request_error" if status == 400 else "not_found_error", message)
            return
        if route.startswith("/v1/messages/batches"):
            self._post_batches(record, raw, body)
            return
        if route not in ("/v1/messages", COUNT_PATH):
            self._error(record, 404, "not_found_error", f"no route {self.path}")
            return
        if len(raw) > rules.MAX_REQUEST_BYTES:
            self._error(record, 413, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
            return
        model = str(body.get("model", ""))
        model_rules = fake.model_rules(model)
        if model_rules is None:
            self._error(record, 404, "not_found_error", f"model: {model}")
            return
        if route == COUNT_PATH:
            record.status = 200
            fake.record(record)
            self._send(200, json.dumps({"input_tokens": fake.cache.prompt_tokens(body)}).encode())
            return
        problem = rules.validate_request(body, model_rules)
        prompt_tokens = fake.cache.prompt_tokens(body)
        if problem is None and prompt_tokens > model_rules.context_window:  # CONTEXT_WINDOWS_PAGE
            problem = f"prompt is too long: {prompt_tokens} tokens > {model_rules.context_window} maximum"
        if problem is not None:
            self._error(record, 400, "invalid_request_error", problem)
            return
        fault = fake._faults.next(record, started)
        record.fault = fault
        if fault == "rate_limit":
            self._error(record, 429, "rate_limit_error", "rate limited", {"retry-after": f"{fake.retry_after_s:g}"})
            return
        if fault == "spend_limit":  # no retry-after: access resumes next month
            self._error(record, 429, "rate_limit_error", "You have reached your specified API usage limits.",
                        details={"error_code": "enforced_spend_limit_reached"})
            return
        if fault in ERROR_FAULTS:
            status, kind, message = ERROR_FAULTS[fault]
            self._error(record, status, kind, message)
            return
        if fault == "drop":
            record.status = -1
            fake.record(record)
            self.close_connection = True
            return
        if fault in MALFORMED_BODIES:
            record.status = 200
            fake.record(record)
            self._send(200, json.dumps(MALFORMED_BODIES[fault]).encode())
            return
        usage, writes = fake.cache.bill(body, started)
        max_tokens = int(body["max_tokens"])
        wait, limit_headers = fake.limits.admit(usage["input_tokens"] + usage["cache_creation_input_tokens"],
                                                max_tokens)
        if wait:
            record.fault = "server_rate_limit"
            self._error(record, 429, "rate_limit_error", "rate limit exceeded",
                        {"retry-after": f"{max(wait, 0.01):.2f}", **limit_headers})
            return
        content, stop_reason = fake.answer(body, model_rules, usage, fault)
        fake.limits.settle_output(max_tokens, usage["output_tokens"])
        if fake.latency_s:
            fake.clock.hold(started + fake.latency_s)
        fake.cache.publish(writes, started)  # the response has begun: the entry is readable from now on
        delay = fake.latency_per_output_token_s * usage["output_tokens"] + (fake.slow_s if fault == "slow" else 0.0)
        if delay:
            fake.clock.hold(started + fake.latency_s + delay)  # the answer ends this long after it started
        text = "".join(b.get("text", "") for b in content if b["type"] == "text")
        answer = {"id": fake.next_id(), "type": "message", "role": "assistant", "model": model, "content": content,
                  "stop_reason": stop_reason, "stop_sequence": None, "usage": usage}
        payload = json.dumps(platforms.converse_answer(answer) if call is not None and call.converse
                             else answer).encode()
        if fault in ("drip", "endless", "gzip_bomb"):
            record.status = 200
            fake.record(record)
            self._hostile_body(fault, payload)
            return
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
        # Recorded before the answer leaves: a client that has read it (and the test that asks next) finds it.
        record.status = 200
        record.usage = usage
        record.response_text = text
        record.finished = fake.clock.monotonic()
        fake.record(record)
        if call is not None and call.invoke:
            limit_headers = {**limit_headers, **platforms.invoke_usage_headers(usage)}
        try:
            self._send(200, payload, limit_headers)
        except OSError:  # the client gave up (timeout): nothing was delivered
            fake.undelivered(record)


@contextlib.contextmanager
def claude_or_fake(latency_s: float = 0.05, *, key_in_env: bool = False) -> Iterator[Any]:
    """The provider the examples run with, said on stdout: Claude (claude-haiku-5-5) when ANTHROPIC_API_KEY is set,
    else a fake Anthropic API on loopback (the real request flow, canned contexts), stopped after the block.
    ``key_in_env``: the fake's key is in the environment for the block too (worker processes read it there)."""
    import os

    from ctx_retrieval.providers.anthropic import AnthropicProvider

    if os.environ.get("ANTHROPIC_API_KEY"):
        print("contextualizer: Claude (claude-haiku-5-5)")
        yield AnthropicProvider("claude-haiku-5-5")
        return
    print("contextualizer: no ANTHROPIC_API_KEY, so the local FAKE Anthropic API (canned contexts)")
    key = "sk-ant-example-0000000000"
    with FakeAnthropicServer(latency_s=latency_s) as server:
        if key_in_env:
            os.environ["ANTHROPIC_API_KEY"] = key
        try:
            yield AnthropicProvider(api_key=key, base_url=server.base_url)
        finally:
            if key_in_env:
                os.environ.pop("ANTHROPIC_API_KEY", None)
