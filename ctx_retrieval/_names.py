"""Names: for in-memory vector-store collections (in-memory Chroma clients share one store per process, so every
in-memory retriever, whichever adapter made it, gets a collection of its own), and the former names a package still
answers to for one release."""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Callable

__all__ = ["former_names", "in_memory_collection"]

_COUNTER = itertools.count()


def in_memory_collection(base: str) -> str:
    """``base`` made unique within this process (Chroma's name rules: letters, digits, ``._-``)."""
    return f"{base}-mem-{os.getpid()}-{next(_COUNTER)}"


def former_names(module: str, renamed: dict[str, tuple[str, object]]) -> Callable[[str], object]:
    """A module ``__getattr__`` (PEP 562) that still answers to names changed in this release (old name ->
    (new name, the object)), with a ``DeprecationWarning`` naming the new one; other names raise ``AttributeError``."""

    def __getattr__(name: str) -> object:  # noqa: N807 - the name Python looks up
        if name in renamed:
            new_name, value = renamed[name]
            warnings.warn(f"{name} is now {new_name}; the old name goes in the next release", DeprecationWarning,
                          stacklevel=2)
            return value
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
