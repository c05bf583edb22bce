"""Shared fixtures: no network but loopback, an isolated context-cache directory, the fake Anthropic API."""

from __future__ import annotations

import ipaddress
import os
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import TEST_KEY

# The suite's two workers, and the processes its tests start (notebook kernels, examples, worker pools), each embed
# with MiniLM: one onnxruntime thread each spends about a quarter less CPU a text than two threads on two busy cores.
os.environ.setdefault("CTX_RETRIEVAL_EMBED_THREADS", "1")
# The embedders' int8 graphs are built once for the machine, not once per test (each test has its own cache folder):
# one model folder for every run, worker and process the tests start (keyed by the weights' hash, so always current).
os.environ.setdefault("CTX_RETRIEVAL_MODEL_DIR", str(Path(tempfile.gettempdir()) / "ctx-retrieval-test-models"))

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


@pytest.fixture(scope="session")
def shared_cache_dir(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """One cache folder for the whole run, shared by every pytest-xdist worker: its ``embeddings.sqlite`` (WAL, safe
    for several processes) is where the session embedder and the notebooks (``MiniLMEmbedder(cache=True)`` with
    ``$CTX_RETRIEVAL_CACHE_DIR`` pointed here) keep vectors, so the cookbook corpus is embedded once per run, not
    once per test module or worker."""
    if worker_id == "master":
        return tmp_path_factory.mktemp("shared-cache")
    folder = tmp_path_factory.getbasetemp().parent / "shared-cache"  # the workers' common base
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def embedder(shared_cache_dir: Path) -> Any:
    """The offline MiniLM embedder with the run's one embedding cache."""
    pytest.importorskip("onnxruntime")
    from ctx_retrieval import EmbeddingCache, MiniLMEmbedder

    return MiniLMEmbedder(cache=EmbeddingCache(shared_cache_dir / "embeddings.sqlite"))


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A real PostgreSQL server on 127.0.0.1 for the whole run (initdb in a temporary folder, stopped after)."""
    from ctx_retrieval.testing.postgres import LocalPostgres, postgres_bin

    pytest.importorskip("psycopg")
    if postgres_bin() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; .ci/run installs it)")
    with LocalPostgres() as server:
        yield server


@pytest.fixture
def chroma_server(tmp_path: Path) -> Iterator[Any]:
    """A Chroma server on 127.0.0.1 in its own process, over a data folder of the test's; stopped after."""
    from tests.helpers import CHROMA, ChromaServer

    if not Path(CHROMA).exists():
        pytest.skip("no chroma command")
    chroma = ChromaServer(tmp_path / "chroma-data")
    chroma.start()
    yield chroma
    chroma.stop()
