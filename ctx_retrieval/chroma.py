"""Chroma glue: the offline embedder as a Chroma ``EmbeddingFunction`` and an embedded persistent client.

Chroma's default embedding function downloads its model at run time, which fails offline; every collection
made here gets an explicit embedding function.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ._optional import require
from .embeddings import MiniLMEmbedder

chromadb = require("chromadb", "chroma")
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings  # noqa: E402 - after the guarded import
from chromadb.utils.embedding_functions import register_embedding_function  # noqa: E402

__all__ = ["DEFAULT_CHROMA_DIR", "MiniLMChromaEmbeddingFunction", "persistent_client"]

DEFAULT_CHROMA_DIR = ".ctx_retrieval/chroma"


@register_embedding_function
class MiniLMChromaEmbeddingFunction(EmbeddingFunction[Documents]):
    """``MiniLMEmbedder`` for Chroma (cosine space, 384 dimensions)."""

    def __init__(self, embedder: MiniLMEmbedder | None = None) -> None:
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
        return {"batch_size": self.embedder.batch_size}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> MiniLMChromaEmbeddingFunction:
        return MiniLMChromaEmbeddingFunction(MiniLMEmbedder(batch_size=int(config.get("batch_size", 32))))


def persistent_client(path: str | os.PathLike[str] = DEFAULT_CHROMA_DIR) -> Any:
    """An embedded Chroma ``PersistentClient`` storing under ``path`` (a project-local folder by default)."""
    Path(path).mkdir(parents=True, exist_ok=True)
    settings = chromadb.Settings(anonymized_telemetry=False)
    return chromadb.PersistentClient(path=str(path), settings=settings)
