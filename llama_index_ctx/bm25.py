"""The keyword side for LlamaIndex: ``BM25IndexRetriever`` (kept at this path; it lives in ``store.py``)."""

from .store import BM25IndexRetriever

__all__ = ["BM25IndexRetriever"]
