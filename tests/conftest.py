"""Shared fixtures: no network but loopback, an isolated context-cache directory, the fake Anthropic API."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import Chunk, SourceDocument, split_into_chunks

TEST_KEY = "sk-ant-test-canary-7f3c9e1d2b"
"""A canary API key: tests grep logs, reprs, pickles and cache files for it."""

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _check_address(address: Any) -> None:
    if isinstance(address, tuple):
        host = address[0]
        try:
            if ipaddress.ip_address(host).is_loopback:
                return
        except ValueError:
            if host == "localhost":
                return
        raise RuntimeError(f"tests may only connect to loopback, not {host!r}")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check_address(address)
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check_address(address)
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True)
def _loopback_only_and_isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                request: pytest.FixtureRequest) -> None:
    monkeypatch.setenv("CTX_RETRIEVAL_CACHE_DIR", str(tmp_path / "default-cache"))
    if request.node.get_closest_marker("live") is not None:
        return  # opt-in tests against the real API (tests/live): the key and the network stay
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake_server() -> Iterator[Any]:
    from ctx_retrieval.testing import FakeAnthropicServer

    with FakeAnthropicServer(retry_after_s=0.05) as server:
        yield server


def long_text(doc_id: str, paragraphs: int = 12, words: int = 60) -> str:
    """Deterministic prose, about 330 characters (~90 estimated tokens) per 60-word paragraph."""
    vocabulary = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
                  "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"]
    out = [f"# Report {doc_id}"]
    for p in range(paragraphs):
        body = " ".join(vocabulary[(p * 7 + w * 3) % len(vocabulary)] for w in range(words))
        out.append(f"Paragraph {p} of {doc_id}: {body}.")
    return "\n\n".join(out) + "\n"


def make_document(doc_id: str, paragraphs: int = 24, words: int = 60) -> tuple[SourceDocument, list[Chunk]]:
    """A document split at blank lines (one chunk per paragraph, the title with the first); the default
    size (~2,600 estimated tokens) is above claude-3-haiku's 2,048-token minimum cacheable length."""
    text = long_text(doc_id, paragraphs, words)
    parts = text.split("\n\n")
    texts = [parts[0] + "\n\n" + parts[1], *parts[2:]]
    document = SourceDocument(id=doc_id, text=text)
    return document, split_into_chunks(document, texts)


@pytest.fixture
def make_generator(fake_server: Any, tmp_path: Path) -> Callable[..., Any]:
    from ctx_retrieval import AnthropicProvider, ContextGenerator, RetryPolicy

    def factory(*, server: Any = None, provider_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        server = server or fake_server
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url, timeout_s=5.0,
                                     **(provider_kwargs or {}))
        kwargs.setdefault("cache", tmp_path / "contexts.sqlite")
        kwargs.setdefault("retry", RetryPolicy(initial_delay_s=0.01, max_delay_s=0.05))
        kwargs.setdefault("seed", 7)
        return ContextGenerator(provider, **kwargs)

    return factory
