"""A LlamaIndex text splitter sized in the embedder's own tokens (``ctx_retrieval.chunking``).

Not ``SentenceSplitter(tokenizer=...)``: it adds up the sizes of the pieces it merges, and with a SentencePiece
tokenizer (e5's) a merged node can count more than its pieces did (measured on this README with a 150-token
limit: 6 of 55 nodes over it, the worst at 169); this splitter counts every merged node itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.node_parser.interface import MetadataAwareTextSplitter
from llama_index.core.schema import BaseNode
from pydantic import Field, PrivateAttr

from ctx_retrieval.adapting import embedder_of
from ctx_retrieval.chunking import CONTEXT_TOKENS, DEFAULT_CHUNK_TOKENS, TokenCount, check_chunk_tokens, split_by_tokens
from ctx_retrieval.errors import ConfigurationError


class EmbedderTokenSplitter(MetadataAwareTextSplitter):
    """Nodes of at most ``chunk_tokens`` tokens of the embedder, embedded metadata included, cut at paragraphs,
    lines, sentence ends and clause marks (Latin and CJK), spaces, then characters; ``context_tokens`` are left
    for the context ``ContextualNodeTransform`` writes in front. ``ConfigurationError`` when they cannot fit.

    The metadata counted is what will be embedded: after ``ContextualNodeTransform`` that is the context and its
    ``indexed_metadata_keys`` only, so give the splitter the same keys (``indexed_metadata_keys``, none by default):
    a reader's ``file_path`` is not counted, and the same files split alike wherever they lie.
    ``indexed_metadata_keys=None`` counts as LlamaIndex's own splitters do (the longer of the embedded and the LLM
    metadata), for pipelines that embed the nodes' metadata without the transform.

    Setup:
        pip install "ctx-retrieval[llama-index,local]"            # [multilingual] for E5Embedding

    Use:
        .. code-block:: python

            embed_model = E5Embedding()
            pipeline = IngestionPipeline(transformations=[
                EmbedderTokenSplitter(embed_model), ContextualNodeTransform(...), embed_model])
    """

    chunk_tokens: int = Field(default=DEFAULT_CHUNK_TOKENS, description="Most tokens of the embedder in a node.")
    context_tokens: int = Field(default=CONTEXT_TOKENS, description="Tokens left for the context.")
    embed_model_id: str = Field(default="", description="The embedder whose tokens are counted.")
    indexed_metadata_keys: tuple[str, ...] | None = Field(
        default=(), description="Metadata keys that will be embedded (ContextualNodeTransform's "
        "indexed_metadata_keys); None: LlamaIndex's own count (the longer of the embedded and the LLM metadata).")
    _count: TokenCount = PrivateAttr()

    def __init__(self, embed_model: Any = None, chunk_tokens: int = DEFAULT_CHUNK_TOKENS, *,
                 context_tokens: int = CONTEXT_TOKENS, indexed_metadata_keys: Sequence[str] | None = (),
                 **kwargs: Any) -> None:
        embedder = check_chunk_tokens(embedder_of(embed_model), chunk_tokens, context_tokens)
        super().__init__(chunk_tokens=chunk_tokens, context_tokens=context_tokens,  # type: ignore[call-arg]
                         embed_model_id=embedder.model_id,
                         indexed_metadata_keys=None if indexed_metadata_keys is None else tuple(indexed_metadata_keys),
                         **kwargs)
        self._count = TokenCount(embedder)

    def _get_metadata_str(self, node: BaseNode) -> str:
        """The metadata the node will embed once contextualized: the indexed keys' values, one per line (how
        ``ContextualNodeTransform`` renders them), or LlamaIndex's own count with ``indexed_metadata_keys=None``."""
        if self.indexed_metadata_keys is None:
            return super()._get_metadata_str(node)
        return "\n".join(str(node.metadata[k]) for k in self.indexed_metadata_keys if k in node.metadata)

    @classmethod
    def class_name(cls) -> str:
        return "EmbedderTokenSplitter"

    def split_text(self, text: str) -> list[str]:
        return self._split(text, self.chunk_tokens)

    def split_text_metadata_aware(self, text: str, metadata_str: str) -> list[str]:
        if not metadata_str:
            return self._split(text, self.chunk_tokens)
        room = self.chunk_tokens - self._count.without_overhead(metadata_str + "\n\n")
        if room < 10:
            raise ConfigurationError(
                f"the node's embedded metadata takes {self.chunk_tokens - room} of chunk_tokens={self.chunk_tokens}: "
                "leave keys out of the embedding (excluded_embed_metadata_keys) or raise chunk_tokens",
                setting="chunk_tokens")
        return self._split(text, room)

    def _split(self, text: str, limit: int) -> list[str]:
        return [s for piece in split_by_tokens(text, limit, self._count.count) if (s := piece.strip())]
