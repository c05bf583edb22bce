"""The package's shape (issue 17): no import circle, the core below the adapters and never importing its test
helpers. (A limit on class sizes used to be tested here; it shaped classes by moving their methods out, not by
splitting concerns, and is gone.)

Imports are read from the source (``ast``), every one of them: top-level, inside functions (lazy) and under
``TYPE_CHECKING`` (a circle through type hints is still one a reader has to untangle).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ctx_retrieval", "llama_index_ctx", "langchain_ctx")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        out.update(t for t in targets if t in modules and t != name)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return circles


def test_the_graph_reader_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles() -> None:
    graph = _graph()
    assert len(graph) > 50 and graph["ctx_retrieval.contextualize.generator"]  # the reader sees the package
    assert _circles(graph) == []


def test_the_core_imports_no_adapter_and_no_test_helper() -> None:
    for name, imported in _graph().items():
        if name.startswith("ctx_retrieval") and not name.startswith("ctx_retrieval.testing"):
            wrong = sorted(i for i in imported if i.startswith(("llama_index_ctx", "langchain_ctx",
                                                                "ctx_retrieval.testing")))
            assert not wrong, f"{name} imports {wrong}"


def test_adapters_do_not_import_each_other() -> None:
    for name, imported in _graph().items():
        for mine, theirs in (("llama_index_ctx", "langchain_ctx"), ("langchain_ctx", "llama_index_ctx")):
            if name.startswith(mine):
                assert not [i for i in imported if i.startswith(theirs)], name


# Where the core still calls getattr/hasattr, and why none of them asks what a part can do (capabilities are
# Protocols in ctx_retrieval.protocols, checked once where a part is given: issue 36). A new call fails this test;
# a capability goes into a Protocol instead.
ATTRIBUTE_READS = {
    "ctx_retrieval._sqlite": (2, "sqlite3 exceptions' error codes (Python >= 3.11 only)"),
    "ctx_retrieval.contextualize._planning": (1, "the id of a malformed input item, for its error"),
    "ctx_retrieval.contextualize.versions": (1, "ReusePolicy's own fields, by name, when it checks them"),
    "ctx_retrieval.pacing": (2, "RateLimit's own fields, by name, when it checks them; an SDK error's body"),
    "ctx_retrieval.evaluation.models": (2, "a framework embedding model's display name, for its row's label"),
    "ctx_retrieval.providers.anthropic": (3, "fields of the SDK's errors and batch results"),
    "ctx_retrieval.providers.generic": (7, "fields of any SDK's errors; an SDK's error class by name"),
    "ctx_retrieval.providers.messages": (1, "a field of an SDK object or a dict"),
    "ctx_retrieval.providers.openai_compat": (1, "the body of the SDK's error"),
    "ctx_retrieval.providers.wrapped": (2, "a framework model's settings under the names its integrations use"),
    "ctx_retrieval.retrieval.bm25": (1, "the index's own arrays, by name, when it saves them"),
    "ctx_retrieval.retrieval.bm25_store": (4, "a tokenizer's module, name and code (its identity); a dotted name"),
    "ctx_retrieval.retrieval.pairing": (2, "the method a planned write names"),
    "ctx_retrieval.retrieval.stemming": (1, "the thread's own stemmers"),
}


def test_the_core_probes_no_capability_with_getattr() -> None:
    found: dict[str, int] = {}
    for name, path in _modules().items():
        if not name.startswith("ctx_retrieval") or name.startswith("ctx_retrieval.testing"):
            continue
        calls = sum(1 for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr"))
        if calls:
            found[name] = calls
    assert found == {name: count for name, (count, _why) in ATTRIBUTE_READS.items()}
