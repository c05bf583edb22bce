"""Reranking with the core's provider: Claude reads the query and the fused candidates and orders them.

No cross-encoder weights ship on PyPI, so there is no offline reranker; this one needs an API key (or the
fake API in tests). Candidates are sent without a cache breakpoint (each prompt is used once), and the answer is
parsed as passage numbers: unknown numbers are ignored and candidates the model left out keep their fused order
after the ones it ranked, so a reranked list always holds exactly the candidates it was given.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from collections.abc import Sequence

from ctx_retrieval._aio import run_sync
from ctx_retrieval.pacing import SYSTEM_CLOCK, Clock, Limiter, Pacer, RateLimit, RetryPolicy, paced_call
from ctx_retrieval.providers.base import Provider
from ctx_retrieval.tokens import estimate_tokens
from ctx_retrieval.types import ContextRequest

logger = logging.getLogger(__name__)

_INSTRUCTION = (
    "Here is a search query:\n<query>\n{query}\n</query>\n\n"
    "Rank the passages above by how well they answer the query. Answer with the numbers of the {top_n} most "
    "relevant passages, most relevant first, separated by commas, and nothing else."
)


class ClaudeReranker:
    """Reorders retrieval candidates by relevance to the query, as judged by the provider's model.

    Key init args:
        provider: any ``Provider``; ``None`` builds ``AnthropicProvider()`` (Claude, key from the environment).
        candidates: how many fused candidates are shown to the model (default 40).
        top_n: how many the model is asked to rank (default 20).
        retry / rate_limit / clock: the pacing every request of a reranking goes through (``ctx_retrieval.pacing``:
            the retry policy, a client-side limit, the clock waits are taken on), as for context requests.
    """

    def __init__(
        self,
        provider: Provider | None = None,
        *,
        candidates: int = 40,
        top_n: int = 20,
        max_chars_per_candidate: int = 1200,
        max_concurrency: int = 4,
        retry: RetryPolicy | None = None,
        rate_limit: RateLimit | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if provider is None:
            from ctx_retrieval.providers.anthropic import AnthropicProvider

            provider = AnthropicProvider()
        self.provider = provider
        self.candidates = candidates
        self.top_n = top_n
        self.max_chars_per_candidate = max_chars_per_candidate
        self.max_concurrency = max_concurrency
        self.retry = retry or RetryPolicy()
        self.rate_limit = rate_limit
        self.clock = clock
        self._rng = random.Random(0)
        self._pacer: Pacer | None = None  # one per reranking batch: its calls share the pauses

    def pacer(self) -> Pacer:
        """The pacing a reranking's requests go through: its limit on its clock, its retry policy."""
        return Pacer(Limiter(self.rate_limit, clock=self.clock), self.retry, self._rng, where=self.provider.name)

    def __repr__(self) -> str:
        return f"ClaudeReranker(provider={self.provider!r}, candidates={self.candidates}, top_n={self.top_n})"

    def _request(self, query: str, texts: Sequence[str]) -> ContextRequest:
        passages = "\n".join(
            f'<passage number="{n}">\n{" ".join(t.split())[: self.max_chars_per_candidate]}\n</passage>'
            for n, t in enumerate(texts, start=1))
        top_n = min(self.top_n, len(texts))
        return ContextRequest(document_id="rerank", chunk_id="rerank", document_prefix=passages, document_rest="",
                              chunk_block=_INSTRUCTION.format(query=query, top_n=top_n),
                              max_tokens=8 * top_n + 16, cache_prefix=False)

    async def arerank(self, query: str, texts: Sequence[str]) -> list[int]:
        """Indices into ``texts``, best first (all of them; the first ``candidates`` are judged)."""
        shown = list(texts[: self.candidates])
        if len(shown) <= 1:
            return list(range(len(texts)))
        request = self._request(query, shown)
        pacer = self._pacer or self.pacer()  # a batch's queries share its pauses
        # the limiter counts what is sent: the passages and the instruction (input), the answer's cap (output)
        sent = estimate_tokens(request.document_prefix + request.chunk_block)
        response = await paced_call(lambda: self.provider.agenerate(request), pacer=pacer,
                                    classify=self.provider.classify_error, run_error=self.provider.run_error,
                                    limits_of=lambda answer: answer.limits, input_tokens=sent,
                                    output_tokens=request.max_tokens, what="reranking", provider=self.provider.name)
        order: list[int] = []
        for number in re.findall(r"\d+", response.text):
            index = int(number) - 1
            if 0 <= index < len(shown) and index not in order:
                order.append(index)
        order += [i for i in range(len(texts)) if i not in order]
        return order

    async def arerank_many(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[list[int]]:
        slots = asyncio.Semaphore(self.max_concurrency)

        async def one(query: str, texts: Sequence[str]) -> list[int]:
            async with slots:
                return await self.arerank(query, texts)

        self._pacer = self.pacer()
        try:
            return list(await asyncio.gather(*(one(q, t) for q, t in zip(queries, candidates, strict=True))))
        finally:
            self._pacer = None
            await self.provider.aclose()

    async def arerank_query(self, query: str, texts: Sequence[str]) -> list[int]:
        """One query on its own (a framework's reranking step): the provider checked first, its client closed
        after, so the call holds no connection between queries."""
        self.provider.check_ready()
        try:
            return await self.arerank(query, texts)
        finally:
            await self.provider.aclose()

    def rerank_query(self, query: str, texts: Sequence[str]) -> list[int]:
        """The synchronous ``arerank_query`` (also inside a running event loop)."""
        return run_sync(self.arerank_query(query, texts))

    def rerank_ids(self, queries: Sequence[str], rankings: Sequence[Sequence[str]],
                   text_of: dict[str, str]) -> list[list[str]]:
        """Reranked id lists for many queries (the evaluation's interface)."""
        self.provider.check_ready()
        orders = run_sync(self.arerank_many(queries, [[text_of[i] for i in r] for r in rankings]))
        return [[ranking[i] for i in order] for ranking, order in zip(rankings, orders, strict=True)]
