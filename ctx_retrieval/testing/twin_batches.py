"""The twin's Message Batches (BATCHES_PAGE): limits, lifecycle, results in any order, best-effort cache hits."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

from ctx_retrieval.testing.anthropic_rules import BATCH_EXPIRY_S, MAX_BATCH_REQUESTS
from ctx_retrieval.testing.clock import ServerClock, WallServerClock

# Answers one batch request: (params, allow_cache_read) -> the "result" object of its results line.
Answer = Callable[[dict[str, Any], bool], dict[str, Any]]


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class BatchStore:
    """Batches stay ``in_progress`` for ``delay_s``, then every request is answered once, at that moment (so
    cache entries that expired meanwhile miss, as in a batch that outlasts the 5-minute TTL). Each request
    reads the prompt cache with probability ``cache_hit_rate`` (the API promises only best effort). Progress is
    measured on ``clock``; the timestamps a batch shows are the wall clock's (UTC)."""

    def __init__(self, *, delay_s: float, seed: int, cache_hit_rate: float = 1.0,
                 max_requests: int = MAX_BATCH_REQUESTS, clock: ServerClock | None = None) -> None:
        self.delay_s = delay_s
        self.clock = clock or WallServerClock()
        self.cache_hit_rate = cache_hit_rate
        self.max_requests = max_requests
        self.batches: dict[str, dict[str, Any]] = {}
        self.faults: list[tuple[Callable[[dict[str, Any]], bool], str]] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()  # one thread processes an ended batch, exactly once

    def requests_submitted(self) -> int:
        with self._lock:
            return sum(len(b["requests"]) for b in self.batches.values())

    def create(self, batch_id: str, requests: list[dict[str, Any]]) -> None:
        with self._lock:
            self.batches[batch_id] = {"id": batch_id, "requests": requests, "created": time.time(),
                                      "started": self.clock.monotonic(), "results": None, "cancel_at": None,
                                      "canceled": None}

    def cancel(self, batch_id: str) -> None:
        with self._lock:
            batch = self.batches[batch_id]
            if batch["results"] is None and batch["cancel_at"] is None:
                batch["cancel_at"], batch["canceled"] = time.time(), self.clock.monotonic()

    def _process(self, batch: dict[str, Any], answer: Answer) -> None:
        results = []
        canceled = batch["cancel_at"] is not None
        for item in batch["requests"]:
            params = item.get("params") or {}
            custom_id = item.get("custom_id")
            kind = next((k for predicate, k in self.faults if predicate(params)), None)
            if canceled:
                result: dict[str, Any] = {"type": "canceled"}
            elif kind == "expired":
                result = {"type": "expired"}
            elif kind in ("errored", "invalid"):
                error = ("overloaded_error", "Overloaded") if kind == "errored" else (
                    "invalid_request_error", "the request is invalid")
                result = {"type": "errored", "error": {"type": "error", "error": {
                    "type": error[0], "message": error[1]}}}
            else:
                result = answer(params, self._rng.random() < self.cache_hit_rate)
            results.append({"custom_id": custom_id, "result": result})
        self._rng.shuffle(results)  # results come in any order; match them by custom_id
        batch["results"] = results

    def view(self, batch_id: str, answer: Answer, base_url: str = "") -> dict[str, Any]:
        with self._lock:
            batch = self.batches[batch_id]
            canceling = batch["cancel_at"] is not None
            now = self.clock.monotonic()
            ended = (now - batch["started"] >= self.delay_s
                     or (canceling and now - batch["canceled"] >= min(self.delay_s, 0.05)))
            if ended and batch["results"] is None:
                self._process(batch, answer)
                batch["ended"] = time.time()
            counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
            if ended:
                for result in batch["results"]:
                    counts[result["result"]["type"]] += 1
            else:
                counts["processing"] = len(batch["requests"])
            return {
                "id": batch_id, "type": "message_batch",
                "processing_status": "ended" if ended else ("canceling" if canceling else "in_progress"),
                "request_counts": counts, "created_at": _iso(batch["created"]),
                "expires_at": _iso(batch["created"] + BATCH_EXPIRY_S),
                "ended_at": _iso(batch["ended"]) if ended else None, "archived_at": None,
                "cancel_initiated_at": _iso(batch["cancel_at"]) if batch["cancel_at"] else None,
                "results_url": f"{base_url}/v1/messages/batches/{batch_id}/results" if ended else None,
            }

    def results(self, batch_id: str) -> list[dict[str, Any]] | None:
        with self._lock:
            results: list[dict[str, Any]] | None = self.batches[batch_id]["results"]
            return results
