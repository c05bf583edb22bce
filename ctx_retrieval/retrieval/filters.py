"""Metadata filters on the BM25 side, in the ``where`` syntax vector stores share (Chroma, and the LangChain
stores built on it): ``{"tenant": "a"}``, ``{"year": {"$gte": 2023}}``, ``{"$and": [...]}``, ``{"$or": [...]}``.

A retriever applies the same filter to its vector side (the store evaluates it) and to its BM25 side (this module
evaluates it on each candidate's metadata), so a filtered query never returns a chunk from the wrong tenant
through either side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ctx_retrieval.errors import InvalidInputError

_MISSING = object()
_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda have, want: have == want,
    "$ne": lambda have, want: have != want,
    "$gt": lambda have, want: have is not _MISSING and have > want,
    "$gte": lambda have, want: have is not _MISSING and have >= want,
    "$lt": lambda have, want: have is not _MISSING and have < want,
    "$lte": lambda have, want: have is not _MISSING and have <= want,
    "$in": lambda have, want: have in want,
    "$nin": lambda have, want: have not in want,
}
OPERATORS = (*_COMPARISONS, "$and", "$or")


def compile_where(where: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate on a metadata dict for ``where``; malformed filters fail here, before any search."""
    if not isinstance(where, Mapping):
        raise InvalidInputError(f"a metadata filter is a dict such as {{'tenant': 'a'}}, not {type(where).__name__}")
    tests: list[Callable[[Mapping[str, Any]], bool]] = []
    for key, value in where.items():
        if key in ("$and", "$or"):
            if not isinstance(value, list) or not value:
                raise InvalidInputError(f"{key} takes a non-empty list of filters, not {value!r}")
            tests.append(_combined(key, [compile_where(part) for part in value]))
        elif key.startswith("$"):
            raise InvalidInputError(f"unknown filter operator {key!r}: use one of {', '.join(OPERATORS)}")
        else:
            tests.append(_field_test(key, value))
    return lambda metadata: all(test(metadata) for test in tests)


def _combined(operator: str, parts: list[Callable[[Mapping[str, Any]], bool]]) -> Callable[[Mapping[str, Any]], bool]:
    if operator == "$and":
        return lambda metadata: all(part(metadata) for part in parts)
    return lambda metadata: any(part(metadata) for part in parts)


def matches(metadata: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` passes ``where``."""
    return compile_where(where)(metadata)


def _field_test(key: str, condition: Any) -> Callable[[Mapping[str, Any]], bool]:
    if not isinstance(condition, Mapping):
        return lambda m: m.get(key, _MISSING) == condition
    checks = []
    for operator, want in condition.items():
        compare = _COMPARISONS.get(operator)
        if compare is None:
            raise InvalidInputError(f"unknown filter operator {operator!r} on {key!r}: use one of "
                                    f"{', '.join(_COMPARISONS)}")
        if operator in ("$in", "$nin") and not isinstance(want, (list, tuple, set)):
            raise InvalidInputError(f"{operator} on {key!r} takes a list, not {want!r}")
        checks.append((compare, want))

    def test(metadata: Mapping[str, Any]) -> bool:
        have = metadata.get(key, _MISSING)
        try:
            return all(compare(have, want) for compare, want in checks)
        except TypeError:  # a comparison across types ("2023" > 2022): the chunk does not match
            return False

    return test
