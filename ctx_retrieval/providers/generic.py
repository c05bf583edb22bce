"""Error classification for providers that wrap a framework's model (LangChain chat models, LlamaIndex LLMs).

Wrapped models raise their own SDK's exceptions. They are classified by HTTP status when the exception carries one
(``status_code`` or ``response.status_code``, as the Anthropic, OpenAI, Google and Bedrock SDKs do), then by the
transport exception types of the SDKs and HTTP clients that are loaded; never by message text. Anything else
propagates: it is a bug to see, not a fault to retry.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import sys
import time
from typing import Any

from ctx_retrieval.types import ErrorDecision


class MalformedAnswer(Exception):  # noqa: N818 - a condition of an answer, classified, never raised to users
    """A 200 answer whose body is not a usable message (no usage, a text block without text, an error object, a
    JSON array): a broken proxy or gateway. Classified ``invalid_response``: retried, then the chunk fails."""


_TRANSPORT_ERRORS = (
    ("anthropic", ("APITimeoutError", "timeout"), ("APIConnectionError", "connection")),
    ("openai", ("APITimeoutError", "timeout"), ("APIConnectionError", "connection")),
    ("httpx", ("TimeoutException", "timeout"), ("TransportError", "connection")),
    ("httpx2", ("TimeoutException", "timeout"), ("TransportError", "connection")),
)


# A server may ask for any wait; past a day it is a broken header or clock, not a plan (and a 300-digit number
# would be printed whole in the give-up message).
MAX_RETRY_AFTER_S = 86_400.0


def _seconds(value: float) -> float | None:
    return None if not math.isfinite(value) else min(MAX_RETRY_AFTER_S, max(0.0, value))


def retry_after_s(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date), at most a day, or None."""
    if headers is None:
        return None
    value = headers.get("retry-after-ms")
    if value:
        try:
            return _seconds(float(value) / 1000.0)
        except (ValueError, OverflowError):
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return _seconds(float(value))
    except (ValueError, OverflowError):
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        try:
            return _seconds(email.utils.mktime_tz(parsed) - time.time())
        except (OverflowError, ValueError):
            return None


def spend_limit_reached(body: Any) -> bool:
    """Whether an error body is Anthropic's monthly spend limit: a 429 ``rate_limit_error`` whose
    ``error.details.error_code`` is ``enforced_spend_limit_reached`` (no retry-after; retrying cannot help)."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "details" not in error and isinstance(error.get("error"), dict):
        error = error["error"]  # some SDKs hand over the whole response body
    details = error.get("details") if isinstance(error, dict) else None
    return isinstance(details, dict) and details.get("error_code") == "enforced_spend_limit_reached"


def quota_exhausted(body: Any) -> bool:
    """Whether an error body is OpenAI's ``insufficient_quota`` (a 429 that means the account has no credit left:
    https://platform.openai.com/docs/guides/error-codes), which no wait fixes; ``code`` or ``type`` says so, in
    the body or its ``error`` object (SDKs hand over either)."""
    error = body.get("error", body) if isinstance(body, dict) else None
    return isinstance(error, dict) and "insufficient_quota" in (error.get("code"), error.get("type"))


def decision_for_status(status: int, headers: Any = None, body: Any = None) -> ErrorDecision:
    """The decision for an HTTP error status, then the server's own ``x-should-retry: true|false`` header, which
    overrides it as in the official Anthropic and OpenAI SDKs (``_should_retry``), except that a rejected key,
    billing, permission or an unknown model still stop the run."""
    decision = _decision_for_status(status, headers, body)
    verdict = str(headers.get("x-should-retry", "")).lower() if headers is not None else ""
    if verdict == "false" and decision.action == "retry":
        return ErrorDecision("fail_chunk", decision.kind, status_code=status)
    if verdict == "true" and decision.action == "fail_chunk":
        return ErrorDecision("retry", "server_error", retry_after_s(headers), status)
    return decision


def _decision_for_status(status: int, headers: Any = None, body: Any = None) -> ErrorDecision:
    """The decision for an HTTP error status (the SDKs' error classes map one to one onto these statuses).

    Statuses and types from Anthropic's errors page (https://platform.claude.com/docs/en/api/errors): 402
    ``billing_error``, 403 ``permission_error``, 413 ``request_too_large``, 429 ``rate_limit_error`` (the
    spend-limit variant stops the run), 504 ``timeout_error``, 529 ``overloaded_error``.
    """
    if status == 429:
        if spend_limit_reached(body):
            return ErrorDecision("fail_run", "spend_limit", status_code=status)
        if quota_exhausted(body):
            return ErrorDecision("fail_run", "billing", status_code=status)
        return ErrorDecision("retry", "rate_limited", retry_after_s(headers), status)
    if status == 401:
        return ErrorDecision("fail_run", "authentication", status_code=status)
    if status == 402:
        return ErrorDecision("fail_run", "billing", status_code=status)
    if status == 403:
        return ErrorDecision("fail_run", "permission", status_code=status)
    if status == 404:
        return ErrorDecision("fail_run", "not_found", status_code=status)
    if status == 413:
        return ErrorDecision("fail_chunk", "request_too_large", status_code=status)
    if status == 529:
        return ErrorDecision("retry", "overloaded", retry_after_s(headers), status)
    if status == 504:
        return ErrorDecision("retry", "timeout", retry_after_s(headers), status)
    if status >= 500 or status in (408, 409):
        return ErrorDecision("retry", "server_error", retry_after_s(headers), status)
    return ErrorDecision("fail_chunk", "bad_request", status_code=status)


def _status(exc: BaseException) -> tuple[int | None, Any]:
    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    if not isinstance(status, int):
        status = getattr(response, "status_code", None)
    return (status if isinstance(status, int) else None), getattr(response, "headers", None)


def classify_exception(exc: BaseException) -> ErrorDecision | None:
    """The generator's decision for an exception from any wrapped model, or None to let it propagate."""
    status, headers = _status(exc)
    if status is not None and status >= 400:
        return decision_for_status(status, headers, getattr(exc, "body", None))
    for module_name, *kinds in _TRANSPORT_ERRORS:
        module = sys.modules.get(module_name)
        for class_name, kind in kinds:
            cls = getattr(module, class_name, None) if module is not None else None
            if isinstance(cls, type) and isinstance(exc, cls):
                return ErrorDecision("retry", "unreachable" if kind == "connection" and unreachable(exc) else kind)
    if isinstance(exc, MalformedAnswer):
        return ErrorDecision("retry", "invalid_response")
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return ErrorDecision("retry", "timeout")
    if isinstance(exc, ConnectionError):
        return ErrorDecision("retry", "unreachable" if unreachable(exc) else "connection")
    return None


def unreachable(exc: BaseException) -> bool:
    """Whether a transport error means nothing answers at the address (connection refused, no route), as opposed
    to a connection that dropped mid-request: the server is down, and retrying each chunk on its own only burns
    attempts (the generator pauses the run instead, for ``RetryPolicy.max_outage_s``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ConnectionRefusedError, ConnectionAbortedError)):
            return True
        if type(current).__name__ == "ConnectError":  # httpx / httpx2: the connection was never made
            return True
        current = current.__cause__ or current.__context__
    return False


def server_error_type(exc: BaseException) -> str | None:
    """The server's own type for an HTTP error (``error.type`` in the body), or None."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        kind = error.get("type") if isinstance(error, dict) else None
        if isinstance(kind, str) and kind:
            return kind
    return None
