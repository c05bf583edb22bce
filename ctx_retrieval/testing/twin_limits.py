"""The twin's rate limits (RATE_LIMITS_PAGE): token buckets for requests, input and output tokens per minute."""

from __future__ import annotations

import datetime
import threading

from ctx_retrieval.testing.clock import ServerClock, WallServerClock


class _Bucket:
    def __init__(self, name: str, limit: float, capacity: float) -> None:
        self.name, self.limit, self.capacity, self.left = name, limit, capacity, capacity


class RateBuckets:
    """Requests, input tokens (uncached input and cache writes; cache reads excluded) and output tokens, each a
    bucket refilled continuously at ``limit`` per ``window_s``. Output tokens are estimated from ``max_tokens``
    when a request is admitted and corrected with the real count when it ends. ``burst_s`` caps each bucket at
    that many seconds' worth (the page's "enforced over shorter intervals"); by default a whole window. The buckets
    refill on ``clock``; a reset header is the wall-clock (UTC) moment plus the seconds to full on that clock."""

    def __init__(self, *, rpm: float | None, itpm: float | None, otpm: float | None, window_s: float = 60.0,
                 burst_s: float | None = None, headers: bool = True, clock: ServerClock | None = None) -> None:
        self.window_s = window_s
        self.clock = clock or WallServerClock()
        self.send_headers = headers
        share = 1.0 if burst_s is None else min(1.0, burst_s / window_s)
        self._buckets = [_Bucket(name, float(limit), float(limit) * share)
                         for name, limit in (("requests", rpm), ("input-tokens", itpm), ("output-tokens", otpm))
                         if limit is not None]
        self._stamp = self.clock.monotonic()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self._buckets)

    def bucket(self, name: str) -> _Bucket | None:
        return next((b for b in self._buckets if b.name == name), None)

    def set_left(self, name: str, left: float) -> None:
        """Tests: empty or fill a bucket now."""
        with self._lock:
            self._refill(self.clock.monotonic())
            bucket = self.bucket(name)
            if bucket is not None:
                bucket.left = left

    def reset(self) -> None:
        with self._lock:
            for bucket in self._buckets:
                bucket.left = bucket.capacity
            self._stamp = self.clock.monotonic()

    def _refill(self, now: float) -> None:
        elapsed = now - self._stamp
        self._stamp = now
        for bucket in self._buckets:
            bucket.left = min(bucket.capacity, bucket.left + elapsed * bucket.limit / self.window_s)

    def admit(self, input_tokens: int, max_output_tokens: int) -> tuple[float, dict[str, str]]:
        """Admit a request (0.0) or say how long until it could be (the retry-after), with the headers."""
        if not self._buckets:
            return 0.0, {}
        need = {"requests": 1.0, "input-tokens": float(input_tokens), "output-tokens": float(max_output_tokens)}
        with self._lock:
            self._refill(self.clock.monotonic())
            wait = 0.0
            for bucket in self._buckets:
                want = min(need[bucket.name], bucket.capacity)
                if bucket.left < want:
                    wait = max(wait, (want - bucket.left) * self.window_s / bucket.limit)
            if wait <= 0:
                for bucket in self._buckets:
                    bucket.left -= need[bucket.name]
            return wait, self._headers()

    def settle_output(self, estimated: int, actual: int) -> None:
        """Give back the output tokens reserved from ``max_tokens`` but not produced."""
        with self._lock:
            bucket = self.bucket("output-tokens")
            if bucket is not None:
                bucket.left = min(bucket.capacity, bucket.left + max(0, estimated - actual))

    def _headers(self) -> dict[str, str]:
        """``anthropic-ratelimit-{requests,input-tokens,output-tokens}-{limit,remaining,reset}``; reset is the RFC
        3339 time the bucket is full again; token counts are rounded to the nearest thousand, like the API."""
        if not self.send_headers:
            return {}
        headers: dict[str, str] = {}
        utc_now = datetime.datetime.now(datetime.timezone.utc)
        for bucket in self._buckets:
            full_in = max(0.0, bucket.capacity - bucket.left) * self.window_s / bucket.limit
            reset = utc_now + datetime.timedelta(seconds=full_in)
            left = bucket.left
            shown = max(0, int(left)) if bucket.name == "requests" else max(0, round(left / 1000) * 1000)
            headers[f"anthropic-ratelimit-{bucket.name}-limit"] = f"{bucket.limit:.0f}"
            headers[f"anthropic-ratelimit-{bucket.name}-remaining"] = f"{shown}"
            headers[f"anthropic-ratelimit-{bucket.name}-reset"] = reset.isoformat(timespec="milliseconds").replace(
                "+00:00", "Z")
        return headers
