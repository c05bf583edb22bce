"""Names: for in-memory vector-store collections (in-memory Chroma clients share one store per process, so every
in-memory retriever, whichever adapter made it, gets a collection of its own), and the former names a package still
answers to for one release."""

from __future__ import annotations

import functools
import itertools
import os
import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_COUNTER = itertools.count()


def in_memory_collection(base: str) -> str:
    """``base`` made unique within this process (Chroma's name rules: letters, digits, ``._-``)."""
    return f"{base}-mem-{os.getpid()}-{next(_COUNTER)}"


def former_names(module: str, renamed: dict[str, tuple[str, object]],
                 moved: dict[str, tuple[str, object]] | None = None) -> Callable[[str], object]:
    """A module ``__getattr__`` (PEP 562) that still answers, with a ``DeprecationWarning``, to names changed in this
    release: ``renamed`` (old name -> (new name, the object)) and ``moved`` (name -> (where to find it or what to use
    instead, the object)). Other names raise ``AttributeError``."""
    advice = {name: (f"is now {new_name}", value) for name, (new_name, value) in renamed.items()} | (moved or {})

    def __getattr__(name: str) -> object:  # noqa: N807 - the name Python looks up
        if name in advice:
            what, value = advice[name]
            warnings.warn(f"{name} {what}; this name goes in the next release", DeprecationWarning, stacklevel=2)
            return value
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def former_keywords(renamed: dict[str, str]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator: the function still takes keyword arguments renamed in this release (old -> new), with a
    ``DeprecationWarning`` naming the new one; both at once is a ``TypeError``."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            for old, new in renamed.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{function.__name__}() got {old}= and {new}=: {old} is now {new}, pass "
                                        "only that")
                    warnings.warn(f"{function.__name__}({old}=) is now {new}=; the old name goes in the next "
                                  "release", DeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper

    return decorate
