"""Chunks sized in the embedder's tokens: the core splitter, the CLI default and both frameworks' splitters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval.chunking import split_by_tokens, token_chunker
from ctx_retrieval.cli import main
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.retrieval.e5 import E5Embedder
from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder

ZH = ("# 华信科技2023年第二季度报告\n\n华信科技是一家总部位于深圳的电子元件制造商。\n\n"
      + "本季度营收同比增长百分之三，毛利率保持稳定，员工总数达到一千二百人，新工厂在苏州正式投产。" * 12
      + "\n\n展望下半年，公司预计需求继续回升。\n")
DE = ("# Bergmann Werkzeuge AG – Quartalsbericht Q2 2023\n\n"
      + "Der Umsatz stieg im Vergleich zum Vorquartal um 3 %, getragen von Bestellungen aus Österreich und der "
        "Schweiz; die Zahl der Beschäftigten wuchs auf 1.200. " * 10 + "\n")
JA = ("# 北斗精機 2023年度 第2四半期報告\n\n"
      + "当四半期の売上高は前期比3%増加し、従業員数は1,200人となった。" * 15 + "\n")


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    return E5Embedder()


@pytest.mark.parametrize("text", [ZH, DE, JA], ids=["zh", "de", "ja"])
def test_chunks_fit_the_limit_in_the_embedders_tokens_and_concatenate_back(minilm: MiniLMEmbedder,
                                                                            text: str) -> None:
    chunks = token_chunker(minilm, 60)(text)
    assert "".join(chunks) == text
    assert len(chunks) > 3 and all(minilm.count_tokens(c) <= 60 for c in chunks)
    # a limit in characters would not do it: the Chinese chunks are far shorter than 60 * 4 characters
    assert all(c.endswith(("。", "\n", ". ", "。\n", "\n\n")) for c in chunks[:-1]), chunks  # cut at sentence ends


def test_a_sentence_longer_than_the_limit_is_cut_at_clause_marks_then_characters() -> None:
    def count(text: str) -> int:
        return len(text)  # one token per character

    sentence = "第一部分很长，第二部分也很长，第三部分更长一些。"
    assert split_by_tokens(sentence, 8, count) == ["第一部分很长，", "第二部分也很长，", "第三部分更长一些", "。"]
    assert split_by_tokens("abcdefghij", 4, count) == ["abcd", "efgh", "ij"]
    assert split_by_tokens("a\n\nb\n\nc", 3, count) == ["a\n\n", "b\n\n", "c"]
    with pytest.raises(ConfigurationError, match="max_tokens"):
        split_by_tokens("text", 0, count)


def test_a_chunk_size_that_leaves_no_room_for_the_context_is_refused(minilm: MiniLMEmbedder, e5: E5Embedder) -> None:
    with pytest.raises(ConfigurationError, match=r"256 tokens and 100 are kept for the context.*1 to 156"):
        token_chunker(minilm, 200)
    assert token_chunker(e5, 400)(ZH)  # e5 reads 512 tokens
    assert token_chunker(minilm, 200, context_tokens=50)(ZH)


def test_the_cli_cuts_text_in_tokens_by_default(tmp_path: Path, minilm: MiniLMEmbedder, e5: E5Embedder) -> None:
    doc = tmp_path / "huaxin.md"
    doc.write_text(ZH, encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["contextualize", str(doc), "--out", str(out), "--contextualizer", "none"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) > 1 and "".join(r["text"] for r in rows) == ZH
    # Chinese: the embedder chosen by default is e5, and the chunks are in its tokens
    assert max(e5.count_tokens(r["text"]) for r in rows) <= 150 < max(minilm.count_tokens(r["text"]) for r in rows)
    assert main(["contextualize", str(doc), "--out", str(out), "--contextualizer", "none", "--embedder",
                 "minilm"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert max(minilm.count_tokens(r["text"]) for r in rows) <= 150
    # 450 characters of Chinese are about 450 MiniLM tokens: the old character default overflows the input
    assert main(["contextualize", str(doc), "--out", str(out), "--contextualizer", "none", "--chunk-chars",
                 "450"]) == 0
    by_chars = [json.loads(line)["text"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert max(minilm.count_tokens(t) for t in by_chars) > 256


def test_chunk_tokens_and_chunk_chars_exclude_each_other(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["contextualize", str(tmp_path), "--chunk-tokens", "100", "--chunk-chars", "400"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_cli_refuses_a_chunk_size_over_the_embedders_input(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "huaxin.md"
    doc.write_text(ZH, encoding="utf-8")
    assert main(["contextualize", str(doc), "--contextualizer", "none", "--chunk-tokens", "300", "--embedder",
                 "minilm"]) == 2
    assert "pass a smaller chunk_tokens" in capsys.readouterr().err
    assert main(["contextualize", str(doc), "--contextualizer", "none", "--chunk-tokens", "300",
                 "--embedder", "e5", "--out", str(tmp_path / "o.jsonl")]) == 0


@pytest.mark.parametrize("which", ["minilm", "e5"])
def test_langchain_splitter_counts_the_embedders_tokens(which: str, minilm: MiniLMEmbedder, e5: E5Embedder) -> None:
    from langchain_ctx import E5Embeddings, EmbedderTokenSplitter, MiniLMEmbeddings

    embedder = minilm if which == "minilm" else e5
    embeddings = MiniLMEmbeddings(minilm) if which == "minilm" else E5Embeddings(e5)
    readme = Path(__file__).parents[2].joinpath("README.md").read_text(encoding="utf-8")[:20000]
    for text in (ZH, readme):
        documents = EmbedderTokenSplitter(embeddings, add_start_index=True).create_documents([text])
        assert len(documents) > 1 and all(embedder.count_tokens(d.page_content) <= 150 for d in documents)
        assert all(text[d.metadata["start_index"]:].startswith(d.page_content) for d in documents)


@pytest.mark.parametrize("which", ["minilm", "e5"])
def test_llama_index_splitter_counts_the_embedded_node(which: str, minilm: MiniLMEmbedder, e5: E5Embedder) -> None:
    from llama_index.core import Document
    from llama_index.core.schema import MetadataMode

    from llama_index_ctx import E5Embedding, EmbedderTokenSplitter, MiniLMEmbedding

    embedder = minilm if which == "minilm" else e5
    embed_model = MiniLMEmbedding(minilm) if which == "minilm" else E5Embedding(e5)
    readme = Path(__file__).parents[2].joinpath("README.md").read_text(encoding="utf-8")[:20000]
    splitter = EmbedderTokenSplitter(embed_model, indexed_metadata_keys=None)  # LlamaIndex's own metadata count
    # SentenceSplitter(tokenizer=...) adds up its pieces' counts and overflowed 6 of 55 of these nodes with e5
    nodes = splitter.get_nodes_from_documents([Document(text=t, metadata={"file_name": "report.md"})
                                               for t in (ZH, readme)])
    assert len(nodes) > 10
    assert all(embedder.count_tokens(n.get_content(metadata_mode=MetadataMode.EMBED)) <= 150 for n in nodes)
    assert splitter.to_dict()["embed_model_id"] == embedder.model_id  # a pipeline cache key changes with the model
    with pytest.raises(ConfigurationError, match="excluded_embed_metadata_keys"):
        splitter.get_nodes_from_documents([Document(text=ZH, metadata={"summary": "很长的摘要" * 100})])
    # By default it counts what ContextualNodeTransform embeds: the text (and the indexed keys), never a reader's
    # file path, so the same files split alike wherever they lie.
    default = EmbedderTokenSplitter(embed_model)

    def split(path: str, **metadata: str) -> list[Any]:
        return default.get_nodes_from_documents([Document(text=readme, metadata={"file_path": path, **metadata})])

    near, far = split("/r.md"), split("/" + "/".join(["a-rather-long-folder-name"] * 12) + "/r.md")
    assert len(near) == len(far) and [n.text for n in near] == [n.text for n in far]
    assert all(embedder.count_tokens(n.text) <= 150 for n in near)
    titled = EmbedderTokenSplitter(embed_model, indexed_metadata_keys=["title"]).get_nodes_from_documents(
        [Document(text=readme, metadata={"file_path": "/r.md", "title": "ctx-retrieval README, " * 4})])
    assert len(titled) > len(near)  # an indexed key is embedded, so it is counted


def test_without_the_tokenizer_the_cli_names_both_fixes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from ctx_retrieval.errors import MissingDependencyError
    from ctx_retrieval.retrieval import embeddings

    def missing(module: str, extra: str) -> Any:
        raise MissingDependencyError(f"{module!r} is not installed; install it with: pip install "
                                     f"\"ctx-retrieval[{extra}]\"", extra=extra, module=module)

    monkeypatch.setattr(embeddings, "require", missing)  # as on a machine with only ctx-retrieval[anthropic]
    doc = tmp_path / "huaxin.md"
    doc.write_text(ZH, encoding="utf-8")
    assert main(["contextualize", str(doc), "--contextualizer", "none", "--embedder", "minilm",
                 "--out", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert 'pip install "ctx-retrieval[local]"' in err and "--chunk-chars N" in err
    assert main(["contextualize", str(doc), "--contextualizer", "none", "--chunk-chars", "450",
                 "--out", str(tmp_path / "o.jsonl")]) == 0


def test_whitespace_alone_is_never_a_chunk() -> None:
    def count(text: str) -> int:  # a newline is a token, as some tokenizers count it
        return len(text.split()) + text.count("\n")

    text = "one two three\n\nfour five six\n"  # the last paragraph fills a chunk exactly, then its line end
    chunks = split_by_tokens(text, 3, count)
    assert "".join(chunks) == text and all(chunk.strip() for chunk in chunks), chunks
    assert split_by_tokens("\n\n\n\none two", 2, count)[0].strip() == "one two"
