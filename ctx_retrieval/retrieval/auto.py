"""The offline embedder by name, or the one a corpus needs (``choosing.choose_embedder``), built: what the CLI's
``--embedder`` and the adapters' ``embeddings_for`` / ``embedding_for`` call (issue 52: the adapters choose as the CLI
does). Apart from ``choosing`` so that the embedders, which read its measured reasons, never import themselves."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Literal

from ctx_retrieval.retrieval.choosing import choose_embedder

logger = logging.getLogger(__name__)


def offline_embedder(name: Literal["minilm", "e5"], **kwargs: Any) -> Any:
    """The offline embedder by name: ``MiniLMEmbedder`` or ``E5Embedder`` (``[multilingual]``), with ``kwargs``
    (``cache=``, ``progress=``)."""
    if name == "e5":
        from ctx_retrieval.retrieval.e5 import E5Embedder

        return E5Embedder(**kwargs)
    from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder

    return MiniLMEmbedder(**kwargs)


def embedder_for(texts: Iterable[str], **kwargs: Any) -> Any:
    """The offline embedder ``choose_embedder`` picks for these documents, as the CLI's ``--embedder auto`` does,
    said in the log with the reason (issue 52: the adapters choose as the CLI does). A query service opening the
    index must embed with the same model: the log names it."""
    choice = choose_embedder(texts)
    logger.info("embedder: %s (%s); name one (MiniLM or E5) to choose another", choice.name, choice.reason)
    return offline_embedder(choice.name, **kwargs)
