"""Where the package keeps what it caches on this machine: ``$CTX_RETRIEVAL_CACHE_DIR``, else ``ctx-retrieval``
under ``$XDG_CACHE_HOME`` or ``~/.cache``. The context cache, the embedding cache and BM25 beside a remote vector
store live under it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    base = os.environ.get("CTX_RETRIEVAL_CACHE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "ctx-retrieval"
