"""Chroma glue: the offline embedder as a Chroma ``EmbeddingFunction`` and an embedded persistent client.

Chroma's default embedding function downloads its model at run time, which fails offline; every collection
made here gets an explicit embedding function.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctx_retrieval._optional import require
from ctx_retrieval.protocols import Embedder
from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder
from ctx_retrieval.retrieval.pairing import StoreFacts

chromadb = require("chromadb", "chroma")
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings  # noqa: E402 - after the guarded import
from chromadb.utils.embedding_functions import register_embedding_function  # noqa: E402

DEFAULT_CHROMA_DIR = ".ctx_retrieval/chroma"


@register_embedding_function
class MiniLMChromaEmbeddingFunction(EmbeddingFunction[Documents]):
    """An embedder for Chroma (cosine space): ``MiniLMEmbedder`` by default, or any ``Embedder`` given. (It was
    ``MiniLMEmbedder.chroma_embedding_function()``; the embedder no longer imports Chroma's glue.)"""

    def __init__(self, embedder: Embedder | None = None) -> None:
        self.embedder = embedder or MiniLMEmbedder()

    def __call__(self, input: Documents) -> Embeddings:  # noqa: A002 - Chroma's parameter name
        return list(self.embedder.embed(list(input)))

    @staticmethod
    def name() -> str:
        return "ctx-retrieval-minilm-int8"

    def default_space(self) -> Any:
        return "cosine"

    def supported_spaces(self) -> list[Any]:
        return ["cosine", "l2", "ip"]

    def get_config(self) -> dict[str, Any]:
        return {"batch_size": self.embedder.batch_size if isinstance(self.embedder, MiniLMEmbedder) else 32}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMChromaEmbeddingFunction:
        return MiniLMChromaEmbeddingFunction(MiniLMEmbedder(batch_size=int(config.get("batch_size", 32))))


def client_for(client: Any, persist_directory: str | os.PathLike[str] | None, name: str) -> tuple[Any, str]:
    """The Chroma client and collection name an adapter's store uses: ``client`` as given, an embedded
    ``PersistentClient`` under ``persist_directory``, or an in-memory client (nothing written to disk), whose
    collection gets a name of its own (in-memory clients share one store per process)."""
    from ctx_retrieval._names import in_memory_collection

    if client is not None:
        return client, name
    if persist_directory is not None:
        return persistent_client(persist_directory), name
    return chromadb.EphemeralClient(), in_memory_collection(name)


def persistent_client(path: str | os.PathLike[str] = DEFAULT_CHROMA_DIR) -> Any:
    """An embedded Chroma ``PersistentClient`` storing under ``path`` (a project-local folder by default)."""
    Path(path).mkdir(parents=True, exist_ok=True)
    settings = chromadb.Settings(anonymized_telemetry=False)
    return chromadb.PersistentClient(path=str(path), settings=settings)


def chroma_facts(collection: Any) -> StoreFacts:
    """What a Chroma collection is, for where BM25 lives and whether a second process can follow it: on an embedded
    ``PersistentClient`` it is ``local`` (its folder; the vectors live in the process that opened it), on an
    ``HttpClient`` a ``server`` (host, port, tenant, database, collection id), else in ``memory``. Read from the
    collection's client settings (Chroma's own record of how the client was made)."""
    settings = collection._client.get_settings()
    if "fastapi" in str(settings.chroma_api_impl).lower():
        identity = (f"chroma-{settings.chroma_server_host}-{settings.chroma_server_http_port}-{collection.tenant}-"
                    f"{collection.database}-{collection.name}-{collection.id}")
        return StoreFacts("server", collection=collection.name, identity=identity)
    if settings.is_persistent and settings.persist_directory:
        return StoreFacts("local", path=Path(settings.persist_directory), collection=collection.name)
    return StoreFacts("memory", collection=collection.name)


def chroma_searchable(collection: Any, ids: Sequence[str]) -> bool:
    """Whether this process's search of ``collection`` finds these rows (each by its own vector): an embedded
    client lists rows another process wrote, but its in-process vector index never holds them."""
    if not ids:
        return True
    try:
        stored = collection.get(ids=list(ids), include=["embeddings"])
    except Exception:  # Chroma's InternalError "Error finding id": its vector index lacks them
        return False
    for row, vector in zip(stored["ids"], stored["embeddings"], strict=True):
        found = collection.query(query_embeddings=[vector], n_results=10, include=[])["ids"][0]
        if row not in found:
            return False
    return True
