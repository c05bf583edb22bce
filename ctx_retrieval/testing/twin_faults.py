"""The twin's injected faults: what each is (ERRORS_PAGE statuses and types) and which request gets one."""

from __future__ import annotations

import random
from collections import deque
from typing import Any

FAULT_KINDS = ("rate_limit", "overloaded", "server_error", "slow", "drop", "truncated", "refusal", "max_tokens",
               "billing", "permission", "too_large", "gateway_timeout", "spend_limit", "malformed_no_usage",
               "malformed_null_text", "malformed_error_200", "malformed_array", "context_window", "drip",
               "endless", "gzip_bomb")
# Answers with status 200 whose body is not a normal message (a broken proxy or gateway): the body each sends.
MALFORMED_BODIES: dict[str, object] = {
    "malformed_no_usage": {"id": "msg_bad", "type": "message", "role": "assistant", "model": "m",
                           "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"},
    "malformed_null_text": {"id": "msg_bad", "type": "message", "role": "assistant", "model": "m",
                            "content": [{"type": "text", "text": None}], "stop_reason": "end_turn",
                            "usage": {"input_tokens": 1, "output_tokens": 1}},
    "malformed_error_200": {"type": "error", "error": {"type": "api_error", "message": "upstream failed"}},
    "malformed_array": [{"type": "text", "text": "not a message"}],
}
# Faults answered with an error status: (status, error type, message), as the errors page lists them.
ERROR_FAULTS: dict[str, tuple[int, str, str]] = {
    "overloaded": (529, "overloaded_error", "Overloaded"),
    "server_error": (500, "api_error", "Internal server error"),
    "billing": (402, "billing_error", "Your credit balance is too low to access the Anthropic API."),
    "permission": (403, "permission_error", "Your API key does not have permission to use the specified resource."),
    "too_large": (413, "request_too_large", "Request exceeds the maximum allowed number of bytes."),
    "gateway_timeout": (504, "timeout_error", "Request timed out"),
}


class FaultPlan:
    """Which fault, if any, answers the next request: rules first, then the script, a timed outage, a rate."""

    def __init__(self, seed: int) -> None:
        self.script: deque[str | None] = deque()
        self.rules: list[list[Any]] = []  # [predicate, kind, remaining (-1 = forever)]
        self.rate = 0.0
        self.mix: dict[str, float] = {}
        self.rng = random.Random(seed)
        self.until = 0.0
        self.until_kind: str | None = None

    def next(self, request: Any, now: float) -> str | None:
        """The fault for ``request``, admitted at ``now`` (the server's clock)."""
        for rule in self.rules:
            predicate, kind, remaining = rule
            if remaining != 0 and predicate(request):
                rule[2] = remaining - 1
                return str(kind)
        if self.script:
            return self.script.popleft()
        if self.until_kind is not None and now < self.until:
            return self.until_kind
        if self.rate and self.rng.random() < self.rate:
            kinds = list(self.mix)
            return self.rng.choices(kinds, [self.mix[k] for k in kinds])[0]
        return None
