"""Imports of optional dependencies that fail with the exact pip command that fixes them."""

from __future__ import annotations

import importlib
from types import ModuleType

from ctx_retrieval.errors import MissingDependencyError


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise ``MissingDependencyError`` naming ``pip install "ctx-retrieval[extra]"``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{module!r} is not installed; install it with: pip install \"ctx-retrieval[{extra}]\"",
            extra=extra,
            module=module,
        ) from exc
