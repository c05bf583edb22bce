"""The command line: demo, contextualize, index, query and eval, and their errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctx_retrieval.cli import main
from ctx_retrieval.contextualize.cache import ContextCache
from ctx_retrieval.loaders import load_sample, split_paragraphs
from ctx_retrieval.testing import FakeAnthropicServer

ACME = ("# ACME Corp Q2 2023 filing\n\nIntro.\n\n## Results\n\nThe company's revenue grew by 3% over the previous "
        "quarter.\n")
GLOBEX = ("# Globex Corporation Q2 2023 filing\n\n## Results\n\nThe company's revenue fell by 2% over the previous "
          "quarter.\n")


def test_sample_splits_back_into_the_document() -> None:
    document, chunks = load_sample()
    assert "".join(c.text for c in chunks) == document.text
    assert len(chunks) >= 8 and all(c.start_char is not None for c in chunks)
    assert split_paragraphs("a\n\nb\n\nc", max_chars=3) == ["a\n\n", "b\n\n", "c"]


def test_sample_demo_without_a_key_uses_the_heuristic_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--sample-document"]) == 0
    captured = capsys.readouterr()
    assert "contextualizer: heuristic" in captured.out and "no ANTHROPIC_API_KEY" in captured.err
    assert "From ACME Corp" in captured.out


def test_sample_demo_against_the_fake_api_reports_caching(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--sample-document", "--contextualizer", "fake"], twin=FakeAnthropicServer) == 0
    captured = capsys.readouterr()
    assert "FAKE" in captured.out and "estimate:" in captured.err
    assert "failed 0" in captured.err
    reads = re.search(r"tokens: input [\d,]+, output [\d,]+, cache write ([\d,]+), cache read ([\d,]+)", captured.err)
    assert reads, captured.err  # the report's line, not the estimate's: one cache write, the rest read it
    written, read = (int(n.replace(",", "")) for n in reads.groups())
    assert written > 0 and read > 5 * written


def test_claude_without_a_key_fails_with_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--sample-document", "--contextualizer", "anthropic"]) == 2
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err


def test_contextualize_writes_one_line_per_chunk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "acme.md").write_text(ACME, encoding="utf-8")
    (tmp_path / "docs" / "globex.md").write_text(GLOBEX, encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["contextualize", str(tmp_path / "docs"), "--out", str(out), "--contextualizer", "heuristic",
                 "--chunk-chars", "40"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    revenue = next(r for r in rows if "grew by 3%" in r["text"])
    assert revenue["document_id"] == "acme.md" and revenue["context"] == "From ACME Corp Q2 2023 filing > Results."
    assert {r["document_id"] for r in rows} == {"acme.md", "globex.md"}


def test_contextualize_with_the_fake_api_says_status_and_provenance(tmp_path: Path) -> None:
    doc = tmp_path / "acme.md"
    doc.write_text(ACME, encoding="utf-8")
    out = tmp_path / "out.jsonl"
    args = ["contextualize", str(doc), "--out", str(out), "--contextualizer", "fake"]
    assert main(args, twin=FakeAnthropicServer) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows and all(r["context"].startswith("This chunk is from") for r in rows)
    # each line says how its context came about
    assert all(r["status"] == "generated" and r["provider"] == "anthropic" and
               r["model"] == "claude-haiku-5-5" and r["prompt_version"] for r in rows)
    assert main(["contextualize", str(doc), "--out", str(out), "--contextualizer", "heuristic"]) == 0
    assert all(json.loads(line)["provider"] == "heuristic" for line in out.read_text(encoding="utf-8").splitlines())


def test_index_then_query(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("chromadb")
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(json.dumps({"id": name, "text": text}) for name, text in
                              (("acme", ACME), ("globex", GLOBEX))), encoding="utf-8")
    store = tmp_path / "store"
    assert main(["index", str(docs), "--store", str(store), "--contextualizer", "heuristic",
                 "--chunk-chars", "40"]) == 0
    capsys.readouterr()
    assert main(["query", str(store), "How did ACME's revenue change?", "-k", "2"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "(acme)" in first and "grew by 3%" in out


@pytest.mark.parametrize("quiet", [False, True])
def test_index_shows_progress_unless_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str], quiet: bool) -> None:
    pytest.importorskip("chromadb")
    docs = tmp_path / "docs.jsonl"
    text = "\n\n".join(f"Paragraph {n} of the runbook names service{n} and its owner team{n}." for n in range(80))
    docs.write_text(json.dumps({"id": "runbook", "text": text}), encoding="utf-8")
    args = ["index", str(docs), "--store", str(tmp_path / "store"), "--contextualizer", "heuristic",
            "--chunk-chars", "80"]
    assert main(args + (["--quiet"] if quiet else [])) == 0
    err = capsys.readouterr().err
    assert ("embedding" in err) is not quiet, err


def test_eval_on_a_small_corpus_writes_table_json_and_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(json.dumps({"id": name, "text": text, "chunks": [
        {"id": f"{name}-{n}", "text": part} for n, part in enumerate(split_paragraphs(text, 40))]})
        for name, text in (("acme", ACME), ("globex", GLOBEX))), encoding="utf-8")
    queries = tmp_path / "q.jsonl"
    gold = next(f"acme-{n}" for n, p in enumerate(split_paragraphs(ACME, 40)) if "3%" in p)
    queries.write_text(json.dumps({"query": "ACME revenue", "gold_chunk_ids": [gold]}), encoding="utf-8")
    assert main(["eval", "--documents", str(docs), "--queries", str(queries), "--contextualizer", "heuristic",
                 "--vector-store", "numpy", "--work-dir", str(tmp_path / "work")]) == 0
    out = capsys.readouterr().out
    assert "| contextual hybrid |" in out and "contexts: heuristic" in out
    result = json.loads((tmp_path / "work" / "eval" / "ablation.json").read_text(encoding="utf-8"))
    assert result["contexts"][gold].startswith("From ACME Corp")
    assert (tmp_path / "work" / "eval" / "ablation.png").exists()
    elsewhere = tmp_path / "runs" / "second.json"  # --json elsewhere: the chart and the report go beside it
    assert main(["eval", "--documents", str(docs), "--queries", str(queries), "--contextualizer", "heuristic",
                 "--vector-store", "numpy", "--work-dir", str(tmp_path / "work"), "--json", str(elsewhere)]) == 0
    assert elsewhere.exists() and elsewhere.with_suffix(".png").exists() and elsewhere.with_suffix(".html").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["contextualize", "/no/such/path"], "no such file"),
        (["eval", "--chunks", "/no/such.json"], "no such file"),
        (["eval", "--documents", "x.jsonl"], "--documents needs --queries"),
        (["query", "/no/such/store", "q"], "not an index"),
    ],
)
def test_bad_input_gives_a_clear_error(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("demo", "contextualize", "index", "query", "eval"):
        assert command in out


def test_help_offers_only_what_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    plain = capsys.readouterr().out
    assert "fake" not in plain and "offline" not in plain.split("--rerank", 1)[1].split("--", 1)[0].split(")")[0]
    with pytest.raises(SystemExit):
        main(["eval", "--help"], twin=FakeAnthropicServer)
    offered = " ".join(capsys.readouterr().out.split())  # as read, whatever argparse's line wrapping
    assert "fake = the local fake API" in offered  # python -m ctx_retrieval.testing offers it
    with pytest.raises(SystemExit) as refused:
        main(["eval", "--rerank", "offline"])
    assert refused.value.code == 2


def test_a_dry_run_for_the_fake_api_estimates_claudes_requests_and_bill(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "report.md"
    doc.write_text("\n\n".join(f"Paragraph {i} about the Tucson foundry and its revenue." * 3 for i in range(8)))
    assert main(["contextualize", str(doc), "--dry-run", "--contextualizer", "fake"], twin=FakeAnthropicServer) == 0
    out = capsys.readouterr().out
    assert "0 requests" not in out and "for $0" in out
    requests = int(out.split(" requests")[0].rsplit(" ", 1)[1].replace(",", ""))
    chunks = int(out.split(" chunks")[0].rsplit(" ", 1)[1])
    assert requests == chunks > 1 and "cost ~$0.0000" not in out  # one request per chunk, at Claude's prices


def test_a_fake_run_says_its_contexts_are_not_cached(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "report.md"
    doc.write_text("First paragraph about ACME.\n\nSecond paragraph about revenue.\n")
    assert main(["contextualize", str(doc), "--out", str(tmp_path / "o.jsonl"), "--contextualizer", "fake"],
                twin=FakeAnthropicServer) == 0
    assert "not kept in the context cache" in capsys.readouterr().err


def test_long_paragraphs_and_notebooks_are_split_within_the_limit(tmp_path: Path) -> None:
    from ctx_retrieval.loaders import load_documents

    one_line = "word " * 400  # one 2,000-character paragraph without a blank line or a line end
    lines = "".join(f"line {n} of a long block\n" for n in range(200))
    for text in (one_line, lines, "x" * 2500):
        pieces = split_paragraphs(text, max_chars=300)
        assert "".join(pieces) == text and max(len(p) for p in pieces) <= 300
    assert all(p.endswith("\n") for p in split_paragraphs(lines, max_chars=300)[:-1])  # cut at line ends
    notebook = {"cells": [{"cell_type": "markdown", "source": ["# Loading data\n", "Read the CSV first."]},
                          {"cell_type": "code", "source": "import pandas as pd\ndf = pd.read_csv('x.csv')",
                           "outputs": [{"text": "OUTPUT NOT INDEXED"}]},
                          {"cell_type": "code", "source": []}]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(notebook), encoding="utf-8")
    ((document, chunks),) = load_documents([str(path)], 900)
    assert document.text == "# Loading data\nRead the CSV first.\n\nimport pandas as pd\ndf = pd.read_csv('x.csv')\n"
    assert "OUTPUT" not in document.text and "".join(c.text for c in chunks) == document.text
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "nb.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    assert load_documents([str(tmp_path / "docs")], 900)[0][0].id == "nb.ipynb"  # folders include notebooks


def test_an_openai_compatible_server_writes_the_contexts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("openai")
    from ctx_retrieval.testing import FakeOpenAIServer

    doc = tmp_path / "acme.md"
    doc.write_text(ACME, encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["contextualize", str(doc), "--contextualizer", "openai", "--out", str(out)]) == 2
    assert "--base-url and --model" in capsys.readouterr().err
    with FakeOpenAIServer(known_models=["qwen2.5-coder"]) as server:
        assert main(["contextualize", str(doc), "--out", str(out), "--contextualizer", "openai", "--base-url",
                     server.base_url, "--model", "qwen2.5-coder", "--cache", str(tmp_path / "c.sqlite")]) == 0
        assert server.requests
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows and all(r["context"] and r["provider"] == "openai-compatible" and r["model"] == "qwen2.5-coder"
                        for r in rows)


def test_index_warns_when_contexts_cover_only_some_chunks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("chromadb")
    doc = tmp_path / "acme.md"
    doc.write_text(ACME, encoding="utf-8")
    contexts = tmp_path / "contexts.jsonl"
    assert main(["contextualize", str(doc), "--out", str(contexts), "--contextualizer", "heuristic",
                 "--chunk-chars", "40"]) == 0
    rows = contexts.read_text(encoding="utf-8").splitlines()
    contexts.write_text("\n".join([*rows[:1], json.dumps({"chunk_id": "elsewhere", "context": "x"})]),
                        encoding="utf-8")
    capsys.readouterr()
    assert main(["index", str(doc), "--store", str(tmp_path / "store"), "--contexts", str(contexts),
                 "--chunk-chars", "40"]) == 0
    err = capsys.readouterr().err
    assert f"covers 1 of {len(rows)} chunks" in err and "1 contexts in" in err


def test_index_with_the_windows_layout_stores_windows_and_answers_with_chunks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("chromadb")
    from ctx_retrieval import MiniLMEmbedder
    from ctx_retrieval.retrieval.store import open_store

    filler = " ".join(f"detail{n}" for n in range(300))
    doc = tmp_path / "runbook.md"
    doc.write_text(f"# Runbook\n\n{filler} The payment workers drain the retry queue at night. {filler}\n\n"
                   "# Other\n\nA short note about the search index.\n", encoding="utf-8")
    store = tmp_path / "store"
    assert main(["index", str(doc), "--store", str(store), "--contextualizer", "heuristic", "--chunk-chars", "5000",
                 "--embed-layout", "windows", "--embedder", "minilm"]) == 0  # the store is opened with MiniLM
    capsys.readouterr()
    opened = open_store(store, embedder=MiniLMEmbedder())
    assert opened.embed_layout == "windows" and opened.collection.count() > len(opened)
    hits = opened.search("payment workers drain the retry queue", k=5, mode="vector")
    with pytest.warns(DeprecationWarning, match="mode='vector'"):  # the former name, for one release
        assert [h.chunk.chunk_id for h in opened.search("payment workers drain the retry queue", k=5,
                                                         mode="dense")] == [h.chunk.chunk_id for h in hits]
    assert len({h.chunk.chunk_id for h in hits}) == len(hits) == len(opened)
    assert "payment workers" in hits[0].chunk.text


def test_the_fake_contextualizer_runs_from_the_testing_package_only(capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess
    import sys

    assert main(["demo", "--sample-document", "--contextualizer", "fake"]) == 2  # the package never imports it
    assert "python -m ctx_retrieval.testing" in capsys.readouterr().err
    done = subprocess.run([sys.executable, "-m", "ctx_retrieval.testing", "demo", "--sample-document",
                           "--contextualizer", "fake"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FAKE" in done.stdout


def test_a_warning_is_shown_once_with_the_documents_file_name(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "tiny-note.md"  # far below the model's minimum cacheable length: caching does nothing
    doc.write_text("A short note about ACME.\n\nIts second paragraph.\n")
    assert main(["contextualize", str(doc), "--out", str(tmp_path / "o.jsonl"), "--contextualizer", "fake",
                 "--chunk-chars", "30"], twin=FakeAnthropicServer) == 0
    err = capsys.readouterr().err
    assert err.count("prompt caching did nothing") == 1 and "tiny-note.md" in err
    assert "warnings: 1 (shown above)" in err


def test_ctrl_c_stops_a_run_cleanly_with_its_report_and_a_rerun_finishes_it(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    doc = tmp_path / "long.md"
    doc.write_text("\n\n".join(f"Paragraph {i} of the ACME quarterly report, about revenue." for i in range(60)))
    out, cache = tmp_path / "out.jsonl", tmp_path / "c.sqlite"
    command = [sys.executable, "-m", "ctx_retrieval.testing", "contextualize", str(doc), "--out", str(out),
               "--contextualizer", "fake", "--cache", str(cache), "--chunk-chars", "80", "--max-concurrency", "2"]
    slow = {**os.environ, "CTX_RETRIEVAL_TWIN_LATENCY_S": "0.25"}  # 60 chunks, 2 at a time: ~8 s in all
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=slow)
    deadline = time.monotonic() + 60
    while not (cache.exists() and len(ContextCache(cache)) >= 4) and time.monotonic() < deadline:
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert "stopping: requests in flight finish" in err and "interrupted:" in err and "not attempted" in err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    done = sum(1 for line in lines if line["context"])
    assert len(lines) == 60 and 4 <= done < 60  # every chunk written, what was done with its context
    stored = len(ContextCache(cache))
    assert stored == done  # the cache holds exactly what was paid: consistent
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"from context cache {stored}" in again.stderr


@pytest.mark.parametrize("make", ["device", "fifo", "sparse", "limit"])
def test_hostile_input_is_refused_before_it_is_read(make: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import os

    extra: list[str] = []
    if make == "device":
        target = "/dev/zero"  # endless: it used to be read until MemoryError after 5 GB
    elif make == "fifo":
        target = str(tmp_path / "pipe.txt")
        os.mkfifo(target)
    elif make == "sparse":
        target = str(tmp_path / "huge.txt")
        with open(target, "wb") as handle:
            handle.truncate(2 * 1024**3)  # 2 GB that takes no disk
    else:
        target = str(tmp_path / "notes.jsonl")
        Path(target).write_text("\n".join(json.dumps({"id": f"d{i}", "text": "x" * 100}) for i in range(2000)))
        extra = ["--max-input-mb", "0.05"]
    assert main(["contextualize", target, "--contextualizer", "heuristic", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert ("not a regular file" in err) if make in ("device", "fifo") else ("--max-input-mb" in err)


def test_the_cli_sets_a_local_servers_context_size_slots_timeout_and_model_check(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    from ctx_retrieval.testing import FakeOpenAIServer

    doc = tmp_path / "long.md"  # ~9 kB: over llama-cpp-python's default 2,048-token context in one prompt
    doc.write_text("\n\n".join(f"Section {i}: the payment workers retry failed jobs twice and the nightly flush "
                               f"runs at 02:00 in region {i}." * 2 for i in range(40)), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    with FakeOpenAIServer(profile="llama-cpp-python", n_ctx=2048) as server:
        base = ["contextualize", str(doc), "--out", str(out), "--contextualizer", "openai", "--base-url",
                server.base_url, "--model", "local-model", "--on-error", "skip"]
        assert main([*base, "--context-tokens", "2048", "--slots", "1", "--timeout", "30", "--no-model-check"]) == 0
        models_asked = [r for r in server.requests if r["path"].endswith("/models")]
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows and all(r["context"] for r in rows)  # windowed to fit 2,048 tokens: every chunk has its context
    assert models_asked == []  # --no-model-check


# -- issue 34: bad input and interruption ----------------------------------------------------------------------------


def test_a_file_name_that_is_not_utf8_is_written_as_the_filesystem_gave_it(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import os

    docs = tmp_path / "docs"
    docs.mkdir()
    with open(os.path.join(bytes(docs), b"\xff\xfe.md"), "w", encoding="utf-8") as handle:
        handle.write(ACME)
    out = tmp_path / "out.jsonl"
    assert main(["contextualize", str(docs), "--out", str(out), "--contextualizer", "heuristic"]) == 0
    raw = out.read_bytes()
    assert b'"document_id": "\xff\xfe.md"' in raw  # the name's own bytes: nothing was lost to an encoding
    rows = [json.loads(line) for line in raw.decode("utf-8", "surrogateescape").splitlines()]
    assert rows and all(row["context"] for row in rows)
    capsys.readouterr()
    assert main(["index", str(docs), "--store", str(tmp_path / "st"), "--contexts", str(out), "--quiet"]) == 2
    assert "not UTF-8" in capsys.readouterr().err and not (tmp_path / "st").exists()  # refused before any work


def test_a_jsonl_line_holding_a_lone_surrogate_is_a_typed_error_naming_the_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "docs.jsonl"
    source.write_text('{"id": "a", "text": "fine"}\n{"id": "b", "text": "bad \\ud800 here"}\n', encoding="utf-8")
    assert main(["contextualize", str(source), "--out", str(tmp_path / "o.jsonl"), "--contextualizer",
                 "heuristic"]) == 2
    err = capsys.readouterr().err
    assert f"{source}:2:" in err and "lone surrogate" in err and "Traceback" not in err


def test_a_long_line_without_breaks_is_cut_in_time_linear_in_its_length() -> None:
    from ctx_retrieval.chunking import split_by_tokens

    read = [0]

    def count(text: str) -> int:  # a token per 4 characters, as a blob of base64 tokenizes
        read[0] += len(text)
        return (len(text) + 3) // 4

    for size in (50_000, 200_000):
        read[0] = 0
        blob = "Q" * size
        chunks = split_by_tokens(blob, 150, count)
        assert "".join(chunks) == blob and max(count(c) for c in chunks) <= 150
        assert read[0] < 40 * size, (size, read[0])  # characters tokenized: linear (it was ~ size^2 / 600)


def test_a_second_ctrl_c_quits_at_once_and_still_writes_every_chunk(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import threading

    doc = tmp_path / "long.md"
    doc.write_text("\n\n".join(f"Paragraph {i} of the ACME quarterly report, about revenue." for i in range(60)))
    out, cache = tmp_path / "out.jsonl", tmp_path / "c.sqlite"
    command = [sys.executable, "-m", "ctx_retrieval.testing", "contextualize", str(doc), "--out", str(out),
               "--contextualizer", "fake", "--cache", str(cache), "--chunk-chars", "80", "--max-concurrency", "2"]
    slow = {**os.environ, "CTX_RETRIEVAL_TWIN_LATENCY_S": "5"}  # requests stay in flight until abandoned
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=slow)
    lines: list[str] = []
    started, stopping = threading.Event(), threading.Event()

    def read() -> None:  # by character: the progress bar redraws one line with carriage returns
        assert run.stderr is not None
        seen = ""
        while piece := run.stderr.read(1):
            lines.append(piece)
            seen = (seen + piece)[-40:]
            if seen.endswith("contextualizing:"):  # the bar is drawn: the handler is in place
                started.set()
            if seen.endswith("stopping:"):  # (the bar keeps redrawing: each waits for its own words)
                stopping.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert started.wait(120)  # the run has started
    run.send_signal(signal.SIGINT)
    assert stopping.wait(120)  # "stopping: requests in flight finish..."
    run.send_signal(signal.SIGINT)  # ... and quit at once
    try:
        code = run.wait(timeout=120)
    except subprocess.TimeoutExpired:
        run.kill()
        raise AssertionError("".join(lines)[-3000:]) from None
    assert code == 130
    reader.join(timeout=60)
    err = "".join(lines)
    assert "Traceback" not in err and "quitting" in err, err[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 60 and all(r["status"] in ("not_attempted", "generated") for r in rows)
    assert "60 chunks" in err and "without one" in err  # says what was not done


def test_a_ctrl_c_after_the_run_does_not_lose_what_is_being_written(tmp_path: Path) -> None:
    """The run may end (nothing was in flight) before the second Ctrl-C arrives: the command is then reporting and
    writing, and the Ctrl-C must not kill it with a KeyboardInterrupt (CI saw exit -2 from that race)."""
    import os
    import signal

    from ctx_retrieval.cli._common import ContextWriter, interruptible

    stops: list[bool] = []

    class Generator:
        def stop(self, *, at_once: bool = False) -> None:
            stops.append(at_once)

    made = ContextWriter("test", lambda items: {}, lambda: None)
    found = signal.getsignal(signal.SIGINT)
    try:
        with interruptible(Generator(), made):
            os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C, during the run
        os.kill(os.getpid(), signal.SIGINT)  # the second, after the run, while writing: no KeyboardInterrupt
        assert made.interrupted and stops == [False, True]
    finally:
        signal.signal(signal.SIGINT, found)
    doc = tmp_path / "doc.md"
    doc.write_text("Paragraph one of the ACME report.\n\nParagraph two, about revenue.")
    assert main(["contextualize", str(doc), "--out", str(tmp_path / "out.jsonl"), "--contextualizer", "fake"],
                twin=FakeAnthropicServer) == 0
    assert signal.getsignal(signal.SIGINT) is found  # main puts back the handler it found


def test_reading_the_cache_never_creates_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "mistyped" / "contexts.sqlite"
    assert main(["cache", "stats", "--cache", str(missing)]) == 2
    assert "no context cache at" in capsys.readouterr().err and not missing.parent.exists()
    assert main(["cache", "prune", "--cache", str(missing), "--older-than", "2026-01-01"]) == 2
    assert not missing.parent.exists()
    assert main(["cache", "stats"]) == 0  # the default cache, before anything ran: said, not created
    assert "no context cache yet" in capsys.readouterr().out


def test_index_and_query_take_the_bm25_analysis_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "koln.md").write_text("# Köln\n\nDer Dom steht in Köln am Rhein.\n", encoding="utf-8")
    store = str(tmp_path / "st")
    assert main(["index", str(tmp_path / "docs"), "--store", store, "--contextualizer", "none", "--quiet",
                 "--bm25-tokenizer", "folded"]) == 0
    assert main(["query", store, "koln dom", "--mode", "bm25"]) == 0  # the store's own tokenizer, read back
    assert "koln.md" in capsys.readouterr().out
    assert main(["query", store, "koln dom", "--bm25-tokenizer", "identifiers"]) == 2
    assert "built with the 'folded' tokenizer" in capsys.readouterr().err


def test_the_twin_served_as_a_process_and_a_cache_that_survives_its_new_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import signal
    import subprocess
    import sys

    from tests.helpers import TEST_KEY

    doc = tmp_path / "acme.md"
    doc.write_text("\n\n".join(f"Paragraph {i} of the ACME quarterly report, about revenue." for i in range(6)))
    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
    reports = []
    for _ in range(2):  # the same twin restarted: another free port each time
        twin = subprocess.Popen([sys.executable, "-m", "ctx_retrieval.testing", "serve", "--port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert twin.stdout is not None
            line = twin.stdout.readline()
            assert "serves http://127.0.0.1:" in line, twin.stderr.read() if twin.stderr else line
            url = line.split("serves ", 1)[1].split()[0]
            assert main(["contextualize", str(doc), "--contextualizer", "anthropic", "--base-url", url,
                         "--endpoint-id", "acme-twin", "--cache", str(tmp_path / "c.sqlite"), "--chunk-chars", "80",
                         "--out", str(tmp_path / "out.jsonl")]) == 0
            reports.append(capsys.readouterr().err)
            assert "contextualizer: the Anthropic API twin at" in reports[-1]  # its canned answers are not Claude's
            assert "Claude (" not in reports[-1]
        finally:
            twin.send_signal(signal.SIGTERM)
            assert twin.wait(timeout=60) == 0
    assert "generated 6, from context cache 0" in reports[0]
    assert "generated 0, from context cache 6" in reports[1]  # the port changed, the endpoint did not


def test_stores_that_cannot_be_are_named_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("Acme revenue grew three percent.", encoding="utf-8")
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    for argv, says in [(["query", "milvus:", "q"], "milvus:./chunks.db"),
                       (["query", f"milvus:{tmp_path}/missing/x.db", "q"], "in an existing folder"),
                       (["index", str(tmp_path / "docs"), "--store", str(tmp_path / "a-file"),
                         "--contextualizer", "heuristic"], "is a file"),
                       (["index", str(tmp_path / "docs"), "--store", str(tmp_path / "a-file" / "below"),
                         "--contextualizer", "heuristic"], "cannot be made")]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err, err


def test_gold_ids_of_another_cut_name_the_embedder_and_the_command(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "acme.md").write_text(ACME, encoding="utf-8")
    queries = tmp_path / "q.jsonl"  # written over chunks cut another way: an id this cut never makes
    queries.write_text(json.dumps({"query": "ACME revenue", "gold_chunk_ids": ["acme.md:97"]}), encoding="utf-8")
    assert main(["eval", str(tmp_path / "docs"), "--queries", str(queries), "--embedder", "minilm",
                 "--contextualizer", "heuristic", "--vector-store", "numpy", "--work-dir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "gold chunks not in the corpus" in err and "tokens of minilm (--embedder minilm)" in err
    assert "ctx-retrieval queries ... --embedder minilm" in err
