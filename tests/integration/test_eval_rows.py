"""The rows users would actually choose (issue 27, part 2): any LangChain or LlamaIndex embedding model and any
reranker (a LangChain compressor, a LlamaIndex postprocessor) as extra rows of the ablation, each read against its own
plain counterpart with a paired interval, and the verdict that says it in plain words."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.documents import BaseDocumentCompressor, Document
from llama_index.core.postprocessor import LongContextReorder
from llama_index.core.schema import NodeWithScore, TextNode

from ctx_retrieval import HeuristicContextualizer, MiniLMEmbedder
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.evaluation import EvalCorpus, EvalQuery
from ctx_retrieval.evaluation.ablation import run_ablation
from ctx_retrieval.evaluation.models import as_embedder
from langchain_ctx import MiniLMEmbeddings
from langchain_ctx import eval_reranker as langchain_reranker
from llama_index_ctx import MiniLMEmbedding
from llama_index_ctx import eval_reranker as llama_index_reranker
from tests.helpers import make_document


class Reverse(BaseDocumentCompressor):
    """A compressor with a known answer: the candidates backwards, the last one dropped."""

    def compress_documents(self, documents: Sequence[Document], query: str, callbacks: Any = None
                           ) -> Sequence[Document]:
        return list(reversed(documents))[:-1]


@pytest.fixture(scope="module")
def result(embedder: MiniLMEmbedder) -> Any:
    items = [make_document(f"guide-{n}", paragraphs=16) for n in range(4)]
    chunks = [c for _, cs in items for c in cs]
    queries = [EvalQuery(" ".join(c.text.split()[3:11]), (c.id,)) for c in chunks[::5]]
    contexts = {r.chunk_id: r.context for r in HeuristicContextualizer().contextualize_many(items)}
    return run_ablation(EvalCorpus("guides", items, queries), contexts, contextualizer_label="heuristic",
                        embedder=embedder,
                        other_embedders={"LangChain MiniLM": MiniLMEmbeddings(embedder),
                                         "LlamaIndex MiniLM": MiniLMEmbedding(embedder)},
                        other_rerankers={"reverse": langchain_reranker(Reverse(), candidates=10),
                                         "long-context": llama_index_reranker(LongContextReorder(), candidates=10)})


def test_a_framework_embedding_model_is_its_own_pair_of_rows(result: Any) -> None:
    rows = {r.name: r for r in result.rows}
    for label in ("LangChain MiniLM", "LlamaIndex MiniLM"):
        # the same model behind a framework's interface ranks as the built-in embedder does
        assert result.rankings[f"contextual hybrid ({label})"] == result.rankings["contextual hybrid"]
        assert result.rankings[f"plain hybrid ({label})"] == result.rankings["plain hybrid"]
        row = rows[f"contextual hybrid ({label})"]
        assert row.compared_with == f"plain hybrid ({label})" and row.difference_interval is not None


def test_any_reranker_reorders_the_same_candidates(result: Any) -> None:
    base = result.rankings["contextual hybrid"]
    reverse = result.rankings["contextual hybrid + rerank (reverse)"]
    for before, after in zip(base, reverse, strict=True):
        head = before[:10]
        assert after[:10] == [*list(reversed(head))[:-1], head[0]] and after[10:] == before[10:]
    reordered = result.rankings["contextual hybrid + rerank (long-context)"]
    for before, after in zip(base, reordered, strict=True):
        nodes = [NodeWithScore(node=TextNode(text="x", id_=i), score=1.0 / (n + 1)) for n, i in enumerate(before[:10])]
        expected = [n.node.node_id for n in LongContextReorder().postprocess_nodes(nodes)]
        assert after[:10] == expected
    assert {r.name: r for r in result.rows}["contextual hybrid + rerank (reverse)"].compared_with == "plain hybrid"


def test_the_verdict_reads_the_pair_in_plain_words(result: Any) -> None:
    text = result.verdict({"model": "anthropic/claude-haiku-5-5", "cost_usd": 0.5,
                           "cost_per_million_document_tokens": 0.64, "document_tokens": 780_000})
    assert text.startswith(("Contextual retrieval helps", "Contextual retrieval hurts", "No difference",
                            "Both contextual"))
    assert "$0.64 per million document tokens" in text and f"{result.queries} queries" in text


def test_something_that_is_not_an_embedding_model_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="not an embedding model"):
        as_embedder(object())
