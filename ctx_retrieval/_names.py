"""Names for in-memory vector-store collections: in-memory Chroma clients share one store per process, so every
in-memory retriever, whichever adapter made it, gets a collection of its own."""

from __future__ import annotations

import itertools
import os

__all__ = ["in_memory_collection"]

_COUNTER = itertools.count()


def in_memory_collection(base: str) -> str:
    """``base`` made unique within this process (Chroma's name rules: letters, digits, ``._-``)."""
    return f"{base}-mem-{os.getpid()}-{next(_COUNTER)}"
