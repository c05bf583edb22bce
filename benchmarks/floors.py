"""What perfect prompt caching would cost for the requests a run made: the floor a run's dollars are held against.

The twin records every answered request. Grouped by document (the prompt's first block, which carries the
cache breakpoint), perfect caching writes each cacheable document once and reads it on every other chunk; a
document under the model's minimum cacheable length (the twin's rule, counted with the model's tokenizer) pays its
whole text on every chunk. Everything after the breakpoint (window rest, chunk, instructions) and the output is
paid as the run paid it. Priced per request at the model's list prices (its prompt-length tier included).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from ctx_retrieval.models import ModelInfo, request_cost_usd
from ctx_retrieval.testing import RecordedRequest, anthropic_rules
from ctx_retrieval.types import TokenUsage

__all__ = ["Floor", "caching_floor", "document_tokens"]


@dataclass(frozen=True)
class Floor:
    documents: int
    cacheable_documents: int
    cacheable_tokens: int  # tokens of the cacheable documents' cached blocks (what perfect caching writes)
    read_limit_tokens: int  # cache reads perfect caching makes
    prompt_tokens: int
    usd: float  # ordinary requests, 5-minute writes
    batch_usd: float  # everything at batch prices, 1-hour writes (a batch can outlast 5 minutes)

    @property
    def read_share_limit(self) -> float:
        return self.read_limit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def document_tokens(texts: Iterable[str], model: str) -> int:
    """Document tokens as the model's tokenizer counts them (the twin's count)."""
    return sum(anthropic_rules.count_tokens(text, model) for text in texts)


def caching_floor(records: Iterable[RecordedRequest], model: str, info: ModelInfo) -> Floor:
    rules = anthropic_rules.lookup(model)
    assert rules is not None, model
    by_document: dict[str, list[RecordedRequest]] = defaultdict(list)
    for record in records:
        if record.usage and record.status == 200 and record.fault is None:
            by_document[record.body["messages"][0]["content"][0]["text"]].append(record)
    usd = batch_usd = 0.0
    cacheable = cacheable_tokens = reads = prompt = 0
    for first_block, requests in by_document.items():
        prefix = anthropic_rules.count_tokens(first_block, model)
        cached = prefix >= rules.min_cacheable
        cacheable += cached
        cacheable_tokens += prefix if cached else 0
        for n, record in enumerate(requests):
            usage = TokenUsage.from_dict(record.usage or {})
            variable = usage.prompt_tokens - prefix
            prompt += usage.prompt_tokens
            if not cached:
                ideal = TokenUsage(input_tokens=usage.prompt_tokens, output_tokens=usage.output_tokens)
            elif n == 0:
                ideal = TokenUsage(variable, usage.output_tokens, cache_creation_input_tokens=prefix)
            else:
                ideal = TokenUsage(variable, usage.output_tokens, cache_read_input_tokens=prefix)
                reads += prefix
            usd += request_cost_usd(ideal, info)
            batch_usd += request_cost_usd(ideal, info, cache_ttl="1h", batch=True)
    return Floor(len(by_document), cacheable, cacheable_tokens, reads, prompt, usd, batch_usd)
