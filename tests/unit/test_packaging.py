"""Packaging: import isolation, the public API, optional-dependency errors and the wheel's contents."""

from __future__ import annotations

import inspect
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ctx_retrieval

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("anthropic", "httpx", "httpx2", "llama_index", "langchain", "langchain_core", "chromadb", "rank_bm25",
         "onnxruntime", "numpy", "tqdm")


def _extras() -> set[str]:
    tomllib = pytest.importorskip("tomllib")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return set(data["project"]["optional-dependencies"])


def test_import_pulls_in_no_framework_and_no_sdk() -> None:
    code = ("import sys, ctx_retrieval, ctx_retrieval.testing, ctx_retrieval.cli; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_a_query_service_imports_neither_the_context_engine_nor_a_name_it_does_not_use() -> None:
    # Issue 50 (warm services): the top level imports a name when it is first used, so a process that embeds and
    # searches does not pay for the context engine's imports before its first query.
    code = ("import sys, ctx_retrieval.retrieval.e5, ctx_retrieval.retrieval.store, ctx_retrieval.cli; "
            "from ctx_retrieval import tokenize; "
            "print(sorted(m for m in sys.modules if m.startswith(('ctx_retrieval.contextualize.generator', "
            "'ctx_retrieval.contextualize._', 'ctx_retrieval.providers', 'ctx_retrieval.evaluation'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
    assert ctx_retrieval.ContextGenerator.__module__ == "ctx_retrieval.contextualize.generator"
    assert "ContextGenerator" in dir(ctx_retrieval)
    with pytest.raises(AttributeError, match="no attribute 'ContextGenrator'"):
        ctx_retrieval.ContextGenrator  # type: ignore[attr-defined]  # noqa: B018


def test_the_names_type_checkers_read_are_the_names_imported_at_run_time() -> None:
    # ctx_retrieval/__init__.py names each top-level name twice: in its TYPE_CHECKING imports and in _HOMES
    import ast

    tree = ast.parse((ROOT / "ctx_retrieval" / "__init__.py").read_text(encoding="utf-8"))
    checked = next(node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
    typed = {(alias.name, node.module) for node in checked.body if isinstance(node, ast.ImportFrom)
             for alias in node.names}
    assert typed == {(name, module) for name, module in ctx_retrieval._HOME.items()}  # type: ignore[attr-defined]


def test_all_is_exact_and_importable() -> None:
    for name in ctx_retrieval.__all__:
        assert hasattr(ctx_retrieval, name), name
    public = {n for n in vars(ctx_retrieval) if not n.startswith("_") and not isinstance(
        getattr(ctx_retrieval, n), type(ctx_retrieval))}
    assert public == set(ctx_retrieval.__all__) - {"__version__"}


def test_missing_sdk_names_an_existing_extra() -> None:
    code = (
        "import sys; sys.modules['anthropic'] = None\n"
        "from ctx_retrieval import AnthropicProvider, MissingDependencyError\n"
        "try:\n"
        "    AnthropicProvider(api_key='sk-ant-0000000000000000').check_ready()\n"
        "except MissingDependencyError as e:\n"
        "    print(e.extra, '|', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    extra, message = out.stdout.strip().split(" | ")
    assert extra == "anthropic" and extra in _extras()
    assert 'pip install "ctx-retrieval[anthropic]"' in message


def test_every_extra_named_in_the_code_exists() -> None:
    import re

    named = set()
    for path in [p for package in ("ctx_retrieval", "llama_index_ctx", "langchain_ctx")
                 for p in (ROOT / package).rglob("*.py")]:
        named |= set(re.findall(r'require\("[\w.]+", "([\w-]+)"\)', path.read_text(encoding="utf-8")))
    assert named and named <= _extras()


def _resolved(extra: str) -> set[str]:
    """The distributions an extra installs directly (self-references followed), lower-case names."""
    import re

    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names: set[str] = set()
    for requirement in extras[extra]:
        nested = re.fullmatch(r"ctx-retrieval\[([\w,-]+)\]", requirement)
        if nested:
            for inner in nested.group(1).split(","):
                names |= _resolved(inner)
        else:
            names.add(re.split(r"[<>=!\[; ]", requirement, maxsplit=1)[0].lower())
    return names


def test_framework_extras_do_not_pull_in_chroma() -> None:
    for extra in ("llama-index", "langchain"):
        assert not {n for n in _resolved(extra) if "chroma" in n}, extra
    assert "chromadb" in _resolved("chroma")
    assert {"chromadb", "llama-index-vector-stores-chroma"} <= _resolved("llama-index-chroma")
    assert {"chromadb", "langchain-chroma"} <= _resolved("langchain-chroma")
    assert _resolved("all") >= _resolved("llama-index-chroma") | _resolved("langchain-chroma")


def test_wheel_holds_exactly_the_three_packages(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True)
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"ctx_retrieval", "llama_index_ctx", "langchain_ctx"}
    for package in top:
        assert f"{package}/py.typed" in names
    assert "ctx_retrieval/data/anthropic_codebase/LICENSE" in names
    assert "ctx_retrieval/data/sample_acme_q2_2023.md" in names


@pytest.mark.parametrize("package", ["langchain_ctx", "llama_index_ctx"])
def test_adapter_all_is_exact(package: str) -> None:
    module = pytest.importorskip(package)
    for name in module.__all__:
        assert hasattr(module, name), name
    public = {n for n in vars(module) if not n.startswith("_") and not isinstance(getattr(module, n), type(module))
              and n != "require"}
    assert public == set(module.__all__)


def test_sdist_holds_the_examples_and_notebooks(tmp_path: Path) -> None:
    import tarfile

    subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True)
    (sdist,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    expected = {str(p.relative_to(ROOT)) for p in (ROOT / "examples").iterdir() if p.suffix in (".py", ".ipynb")}
    assert expected and expected <= names


# The public API, pinned (as LangChain's partner packages pin theirs): a name added or removed is a decision that
# shows up in this diff and in CHANGELOG.md, never a side effect of moving code.
EXPECTED_ALL = {
    "ctx_retrieval": [
        "AnthropicProvider", "BM25Entry", "BM25Side", "BM25Store", "BudgetExceededError", "CacheError",
        "Chunk", "ChunkNotInDocumentError", "ChunkTooLargeError", "ClaudeReranker", "ConfigurationError",
        "ContextCache", "ContextGenerationError", "ContextGenerator", "ContextResult", "ContextRun", "CostEstimate",
        "CtxRetrievalError", "DEFAULT_PROMPT", "DOCUMENT_LANGUAGE_PROMPT",
        "ENGLISH_PROMPT", "DuplicateChunkIdError", "EmbeddingCache", "FailedChunk", "FusedHit",
        "HeuristicContextualizer", "Hit", "HybridRetriever", "InvalidInputError", "InvalidTextError", "MODELS",
        "MiniLMEmbedder", "MissingDependencyError", "ModelInfo", "OpenAICompatibleProvider", "PROMPT_VERSION",
        "PromptTemplate", "Provider", "ProviderAuthenticationError", "ProviderBillingError", "ProviderError",
        "ProviderPermissionError", "ProviderRequestError", "ProviderUnavailableError", "RateLimit",
        "RetiredModelError", "RetryPolicy", "ReusePolicy", "RunReport", "SearchIndexError", "SharedStoreError",
        "SourceDocument", "StaleChunk", "TokenUsage",
        "UnknownModelError", "UnsupportedSettingError", "WindowConfig", "__version__", "clean_context",
        "compile_where", "default_cache_path", "fuse", "indexed_text", "late_chunk_embeddings", "make_chunk_id",
        "reciprocal_rank_fusion", "split_into_chunks", "tokenize", "tokenize_parts"],
    "ctx_retrieval.evaluation": [
        "BOOTSTRAP_RESAMPLES", "DEFAULT_CANDIDATES", "EvalCorpus", "EvalQuery", "EvalResult", "K_VALUES",
        "RecordedContextualizer", "VariantScore", "bootstrap_interval", "cookbook_chunk_id", "document_from_row",
        "load_cookbook", "load_corpus", "pass_at_k", "pass_per_query", "run_ablation"],
    "ctx_retrieval.protocols": ["BatchProvider", "CacheReportingProvider", "Contextualizer", "Embedder",
                                "EndpointProvider", "EstimatingContextualizer", "ProviderContextualizer",
                                "QueryEmbedder", "ServerDescribingProvider", "TokenCountingEmbedder",
                                "TokenCountingProvider", "WrapsEmbedder"],
    "llama_index_ctx": [
        "ClaudeRerankPostprocessor", "ContextualBM25Retriever", "ContextualHybridRetriever",
        "ContextualMilvusVectorStore", "ContextualNodeTransform", "ContextualPostgresVectorStore",
        "ContextualVectorStore", "E5Embedding",
        "EmbedderTokenSplitter",
        "LateChunkingTransform", "LlamaIndexLLMProvider", "MiniLMEmbedding", "arefresh_stale", "chroma_vector_store",
        "embedding_for", "eval_reranker", "refresh_stale"],
    "langchain_ctx": [
        "ClaudeRerankCompressor", "ContextualBM25Retriever", "ContextualDocumentTransformer",
        "ContextualHybridRetriever", "ContextualMilvus", "ContextualPostgres", "E5Embeddings", "EmbedderTokenSplitter",
        "ContextualVectorStore",
        "LangChainChatProvider", "MiniLMEmbeddings", "embeddings_for", "eval_reranker", "for_answering",
        "original_text", "split_and_contextualize"],
}


@pytest.mark.parametrize("package", sorted(EXPECTED_ALL))
def test_public_api_is_pinned(package: str) -> None:
    import importlib

    pytest.importorskip("llama_index.core" if package == "llama_index_ctx" else "langchain_core"
                        if package == "langchain_ctx" else "json")
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(EXPECTED_ALL[package])
    assert all(hasattr(module, name) for name in module.__all__)


def test_the_bm25_retrievers_former_name_still_imports() -> None:
    # BM25IndexRetriever was renamed ContextualBM25Retriever (issue 36: it wraps a BM25Store, and it is the contextual
    # BM25 side beside ContextualVectorStore); the old name stays importable for one release, with a warning.
    import langchain_ctx
    import llama_index_ctx

    for module in (langchain_ctx, llama_index_ctx):
        with pytest.warns(DeprecationWarning, match="ContextualBM25Retriever"):
            assert module.BM25IndexRetriever is module.ContextualBM25Retriever  # type: ignore[attr-defined]
        assert "BM25IndexRetriever" not in module.__all__
    with pytest.warns(DeprecationWarning, match="index with BM25Store"):  # left the top level: no package code used it
        assert ctx_retrieval.BM25Index is ctx_retrieval.retrieval.bm25.BM25Index  # type: ignore[attr-defined]
        with pytest.raises(AttributeError):
            module.NoSuchName  # type: ignore[attr-defined]  # noqa: B018


def test_the_ablations_former_keywords_still_work_with_a_warning() -> None:
    # run_ablation's second_embedder, embedders and rerankers are fused_embedder, other_embedders and other_rerankers
    # (issue 36: beside embedder and reranker, the old names did not say which experiment each one adds).
    from ctx_retrieval._names import former_keywords
    from ctx_retrieval.evaluation import run_ablation

    @former_keywords({"rerankers": "other_rerankers"})
    def rows(*, reranker: str | None = None, other_rerankers: dict[str, str] | None = None) -> tuple[object, ...]:
        return reranker, other_rerankers

    with pytest.warns(DeprecationWarning, match=r"rows\(rerankers=\) is now other_rerankers="):
        assert rows(reranker="a", rerankers={"b": "c"}) == ("a", {"b": "c"})  # type: ignore[call-arg]
    assert rows(other_rerankers={"b": "c"}) == (None, {"b": "c"})
    with pytest.raises(TypeError, match="pass only that"):
        run_ablation(None, {}, contextualizer_label="x", embedder=None, embedders={},  # type: ignore[arg-type,call-arg]
                     other_embedders={})
    assert {"fused_embedder", "other_embedders", "other_rerankers"} <= set(inspect.signature(run_ablation).parameters)


def test_an_extra_installs_langchains_record_manager_on_disk() -> None:
    assert "langchain-classic" in _resolved("langchain-indexing") and "langchain-classic" not in _resolved("langchain")
    assert _resolved("all") >= _resolved("langchain-indexing")


USER_MODULES = {"ctx_retrieval", "ctx_retrieval.chunking", "ctx_retrieval.distributed", "ctx_retrieval.errors",
                "ctx_retrieval.evaluation", "ctx_retrieval.language", "ctx_retrieval.loaders", "ctx_retrieval.models",
                "ctx_retrieval.pacing", "ctx_retrieval.protocols", "ctx_retrieval.providers",
                "ctx_retrieval.retrieval.milvus",
                "ctx_retrieval.retrieval.postgres", "ctx_retrieval.retrieval.store", "ctx_retrieval.testing",
                "langchain_ctx", "llama_index_ctx"}


def test_only_the_modules_users_import_from_declare_a_public_surface() -> None:
    # Issue 53: an __all__ says "import from here"; internal modules have none, and the surface stays small.
    import ast
    import importlib

    declared = set()
    for package in ("ctx_retrieval", "langchain_ctx", "llama_index_ctx"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                    declared.add(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
    assert declared == USER_MODULES
    # one name for one object, however many of these modules offer it (the top level re-exports the error tree)
    surface = {(name, id(getattr(module, name))) for module in map(importlib.import_module, declared)
               for name in module.__all__}
    assert len(surface) < 250
