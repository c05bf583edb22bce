"""The twin's prompt cache and billing: usage for a request as the API reports it (CACHING_PAGE)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from typing import Any

from ctx_retrieval.testing.anthropic_rules import count_tokens, lookup, prompt_blocks, ttl_seconds

MESSAGE_OVERHEAD_TOKENS = 7
Write = tuple[str, float]  # (prefix hash, ttl seconds)


class PromptCache:
    """Cache entries keyed by the hash of the prompt up to each ``cache_control`` block (model included).

    An entry is written when its prefix is at least the model's minimum cacheable length; it becomes readable
    when ``publish`` is called (once the writing response has begun) and expires its TTL after the writing
    request *started*; each hit refreshes the TTL.
    """

    def __init__(self, ttl_scale: float = 1.0) -> None:
        self.ttl_scale = ttl_scale
        self._entries: dict[str, float] = {}  # prefix hash -> expiry (monotonic)
        self.writes_by_key: Counter[str] = Counter()  # prefix hash -> times written
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self._entries.clear()
            self.writes_by_key.clear()

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        model = str(body.get("model", ""))
        return sum(count_tokens(str(b.get("text", "")), model) for b in prompt_blocks(body)) + MESSAGE_OVERHEAD_TOKENS

    def bill(self, body: dict[str, Any], now: float, *, allow_read: bool = True) -> tuple[dict[str, Any], list[Write]]:
        """Usage for a request arriving at ``now``, and the entries it writes once published."""
        model = str(body["model"])
        rules = lookup(model)
        minimum = rules.min_cacheable if rules else 1024
        blocks = prompt_blocks(body)
        tokens = [count_tokens(str(b.get("text", "")), model) for b in blocks]
        total = sum(tokens) + MESSAGE_OVERHEAD_TOKENS
        prefix = hashlib.sha256(model.encode())
        breakpoints: list[tuple[str, int, float]] = []  # (prefix hash, prefix tokens, ttl)
        running = 0
        for block, n in zip(blocks, tokens, strict=True):
            prefix.update(json.dumps(block.get("text", ""), ensure_ascii=False).encode())
            running += n
            control = block.get("cache_control")
            if isinstance(control, dict):
                breakpoints.append((prefix.hexdigest(), running, ttl_seconds(control) * self.ttl_scale))
        read = 0
        hit_index = -1
        with self._lock:
            if allow_read:
                for index in range(len(breakpoints) - 1, -1, -1):
                    key, n, ttl = breakpoints[index]
                    if self._entries.get(key, 0.0) > now:
                        read, hit_index = n, index
                        self._entries[key] = now + ttl  # a hit refreshes the TTL
                        break
        writes: list[Write] = []
        by_ttl = {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}
        covered = read
        for key, n, ttl in breakpoints[hit_index + 1:]:
            if n >= minimum:
                writes.append((key, ttl))
                by_ttl["ephemeral_1h_input_tokens" if ttl > 300 * self.ttl_scale else "ephemeral_5m_input_tokens"] += (
                    n - covered)
                covered = n
        write_tokens = covered - read
        usage: dict[str, Any] = {
            "input_tokens": total - read - write_tokens,
            "output_tokens": 0,
            "cache_creation_input_tokens": write_tokens,
            "cache_read_input_tokens": read,
            "cache_creation": by_ttl,
        }
        return usage, writes

    def publish(self, writes: list[Write], started: float) -> None:
        """Make written entries readable; their TTL counts from the writing request's start."""
        with self._lock:
            for key, ttl in writes:
                self._entries[key] = started + ttl
                self.writes_by_key[key] += 1
