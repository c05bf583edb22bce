"""What a run will send, decided before any request: one ``Plan`` per document (whole or windowed, its cache
keys, its cacheable prefix), which chunks are already cached or repeated (``Partition``, the one place chunks
are sorted into work), exact token counts near a decision boundary, and a dry run's cost estimate.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from ctx_retrieval.contextualize._scheduling import AUTO_START_CONCURRENCY
from ctx_retrieval.contextualize._settings import RunSettings
from ctx_retrieval.contextualize.cache import DocumentVersion, context_cache_key, text_digest
from ctx_retrieval.contextualize.prompts import PromptTemplate, clean_context
from ctx_retrieval.contextualize.results import CostEstimate
from ctx_retrieval.contextualize.stores import OutputHistory
from ctx_retrieval.contextualize.validation import locate_chunks
from ctx_retrieval.contextualize.versions import Previous, VersionedStore, chunk_digest, chunk_key
from ctx_retrieval.contextualize.windowing import DocumentView, document_view
from ctx_retrieval.errors import ChunkTooLargeError, ConfigurationError, CtxRetrievalError, InvalidInputError
from ctx_retrieval.models import ModelInfo, request_cost_usd
from ctx_retrieval.pacing import Hooks, Pacer, RetriesSpentError, paced_call
from ctx_retrieval.protocols import TokenCountingProvider
from ctx_retrieval.types import Chunk, ContextRequest, ErrorDecision, SourceDocument, TokenUsage

logger = logging.getLogger(__name__)

DocumentItems = Iterable[tuple[SourceDocument, Sequence[Chunk]]]

# A document whose cacheable prefix is estimated below this share of the model's minimum gets no warm-up
# request. The estimate can be ~20% off Claude's tokenizer either way; skipping the warm-up of a document that
# turns out cacheable costs a cache write per racing request, warming one that is not costs one round trip.
WARM_UP_THRESHOLD = 0.5
FALLBACK_MIN_CACHEABLE_TOKENS = 1024
# A document is counted exactly by the API when its estimate lies within these factors of a decision boundary:
# the minimum cacheable length (caching and the warm-up request) and the windowing limit (which keeps prompts in
# the model's cheaper price tier). Elsewhere the estimate's error (~20%) cannot change a decision.
EXACT_NEAR_MINIMUM = (0.4, 2.5)
EXACT_NEAR_LIMIT = (0.7, 1.3)
MIN_OUTPUT_HISTORY = 20  # contexts in the cache before an estimate prices output from what they were


def check_prices(settings: RunSettings) -> None:
    """A budget needs prices: ``ConfigurationError`` before any request when the model has none."""
    if settings.budget_usd is not None and settings.traits.info is None:
        raise ConfigurationError(
            f"budget_usd needs prices, and none are known for model {settings.traits.model!r}: pass "
            "model_info=ModelInfo(...) to the provider", setting="budget_usd")


def iterable_items(items: DocumentItems) -> DocumentItems:
    """``items`` when it can be read as (document, chunks) pairs; a typed error naming the shape otherwise."""
    if not isinstance(items, Iterable) or isinstance(items, (str, bytes)):
        raise InvalidInputError(f"items must be an iterable of (SourceDocument, list of Chunk) pairs, not "
                                f"{type(items).__name__}: e.g. [(document, chunks)]")
    return items


def waves(items: DocumentItems, size: int) -> Iterator[list[tuple[SourceDocument, Sequence[Chunk]]]]:
    """``items`` in lists of ``size``, read lazily."""
    if size < 1:
        raise ConfigurationError("documents_per_wave must be >= 1", setting="documents_per_wave")
    items = iterable_items(items)
    wave: list[tuple[SourceDocument, Sequence[Chunk]]] = []
    for item in items:
        wave.append(item)
        if len(wave) == size:
            yield wave
            wave = []
    if wave:
        yield wave


@dataclass
class Plan:
    """One document prepared for a run."""

    document: SourceDocument
    chunks: tuple[Chunk, ...]
    offset: int  # index of its first result in the flat result list
    tokens: int
    digest: str
    windowed: bool
    keys: list[str | None]  # None for empty chunks
    prefix_tokens: int
    prompt: PromptTemplate  # the template that asks for this document's contexts (``PromptTemplate.for_document``)
    limit: int  # the prompt's token limit it was planned for (a larger document is windowed)
    settings_key: str = ""  # provider, model, prompt, window and length: what a context of another version shares
    chunk_keys: list[str | None] = field(default_factory=list)  # per chunk: ``versions.chunk_key`` (None: empty)
    parts: tuple[tuple[str, int], ...] = ()  # per chunk: its digest and token count (``DocumentVersion.chunks``)
    cache_warm: bool = False
    cache_checked: bool = False

    def version(self, stale: int = 0) -> DocumentVersion:
        return DocumentVersion(self.document.id, self.digest, self.parts, stale)

    @functools.cached_property
    def lease_key(self) -> str:
        """The key of the lease a run holds while it writes this document's contexts (``DocumentLeases``): its
        chunk keys, hashed once per plan (the keys are final once planned), not once per request."""
        return "doc:" + text_digest("\x00".join(k for k in self.keys if k is not None))


@dataclass
class Partition:
    """The chunks of a run sorted once: empty, found in the context cache, to request (per document), and
    repeats of a chunk requested elsewhere in the run (they take its answer)."""

    empty: list[tuple[Plan, int]] = field(default_factory=list)
    cached: list[tuple[Plan, int, str]] = field(default_factory=list)
    reused: list[tuple[Plan, int, Previous]] = field(default_factory=list)  # an earlier context, served (stale)
    work: list[tuple[Plan, list[int]]] = field(default_factory=list)
    followers: list[tuple[Plan, int, Plan, int]] = field(default_factory=list)


def partition(plans: list[Plan], hits: dict[str, str], previous: dict[int, Previous] | None = None) -> Partition:
    """Sort every chunk of ``plans`` once: empty, cached (in ``hits``), reused (an earlier context in
    ``previous``), to request, or a repeat of a chunk requested earlier in the run (same cache key: asked once,
    answered for both)."""
    parts = Partition()
    owners: dict[str, tuple[Plan, int]] = {}
    previous = previous or {}
    for plan in plans:
        pending: list[int] = []
        for i, key in enumerate(plan.keys):
            if key is None:
                parts.empty.append((plan, i))
            elif key in hits:
                parts.cached.append((plan, i, hits[key]))
            elif plan.offset + i in previous:
                parts.reused.append((plan, i, previous[plan.offset + i]))
            elif key in owners:
                parts.followers.append((plan, i, *owners[key]))
            else:
                owners[key] = (plan, i)
                pending.append(i)
        if pending:
            parts.work.append((plan, pending))
    return parts


class Planner:
    """Plans runs for one generator and keeps the exact token counts it has learned."""

    def __init__(self, settings: RunSettings, exact_counts: dict[tuple[str, str], int]) -> None:
        self.settings = settings
        self.exact_counts = exact_counts  # (model, text digest) -> the API's count: the generator's, across runs
        self.no_count_endpoint = False  # a 404 to a count: estimates from then on

    # -- limits and views ------------------------------------------------------------------------------

    def limit(self) -> int:
        info = self.settings.traits.info
        if info is None:
            served = self.settings.traits.context_tokens  # a local server's context size, when known
            return self.settings.window.resolved_limit(served or 200_000)
        return self.settings.window.resolved_limit(info.context_window, info.long_prompt_threshold)

    def min_cacheable(self) -> int | None:
        """The model's minimum cacheable prompt length; None where its documentation states none."""
        info = self.settings.traits.info
        return info.min_cacheable_tokens if info is not None else FALLBACK_MIN_CACHEABLE_TOKENS

    def cacheable(self, plan: Plan) -> bool:
        """Whether the document gets a warm-up request (its prefix may reach the minimum: the estimate can be
        ~20% off)."""
        minimum = self.min_cacheable()
        return self.settings.traits.caches_prompts and (
            minimum is None or plan.prefix_tokens >= WARM_UP_THRESHOLD * minimum)

    def caches(self, plan: Plan) -> bool:
        """Whether the document's cached block is expected to be cached, for pricing: at least the model's
        minimum by the estimate (a windowed document's block is its first chunks only, often less)."""
        minimum = self.min_cacheable()
        return self.settings.traits.caches_prompts and (minimum is None or plan.prefix_tokens >= minimum)

    def view(self, plan: Plan, index: int) -> DocumentView:
        s = self.settings
        return document_view(plan.document, plan.chunks, index, prompt=plan.prompt, config=s.window,
                             limit=plan.limit, document_tokens=plan.tokens, count=s.counter)

    def request(self, plan: Plan, i: int) -> ContextRequest:
        chunk = plan.chunks[i]
        view = self.view(plan, i)
        return ContextRequest(
            document_id=plan.document.id, chunk_id=chunk.id, document_prefix=view.prefix, document_rest=view.rest,
            chunk_block=plan.prompt.render_chunk_block(chunk.text, windowed=view.windowed),
            max_tokens=self.settings.request_max_tokens)

    def whole_document_prefix(self, plan: Plan, document_tokens: int) -> int:
        """Tokens of the cached block of a document sent whole: the document and the prompt's tags around it."""
        prompt = plan.prompt
        return document_tokens + self.settings.counter(prompt.document_open + prompt.document_close)

    def near_minimum(self, tokens: int) -> bool:
        minimum = self.min_cacheable()
        return minimum is not None and EXACT_NEAR_MINIMUM[0] * minimum <= tokens <= EXACT_NEAR_MINIMUM[1] * minimum

    def near_limit(self, tokens: int) -> bool:
        limit = self.limit()
        return EXACT_NEAR_LIMIT[0] * limit <= tokens <= EXACT_NEAR_LIMIT[1] * limit

    def near_boundary(self, tokens: int) -> bool:
        return self.near_minimum(tokens) or self.near_limit(tokens)

    # -- plans -----------------------------------------------------------------------------------------

    def validate(self, document: SourceDocument, chunks: Sequence[Chunk], info: ModelInfo | None
                 ) -> tuple[int, ...] | None:
        """Typed errors for chunks not in their document or larger than the model's window alone; the chunks' token
        estimates when it counted them (the window is known), for the plan to keep."""
        s = self.settings
        locate_chunks(document, chunks, require_found=s.check_chunks_in_document)
        if info is None:
            return None
        counts = tuple(s.counter(chunk.text) for chunk in chunks)
        for chunk, tokens in zip(chunks, counts, strict=True):
            if tokens + s.request_max_tokens + 512 > info.context_window:
                raise ChunkTooLargeError(
                    f"chunk {chunk.id!r} of document {document.id!r} alone (~{tokens:,} "
                    f"tokens) does not fit {info.name}'s {info.context_window:,}-token window; split with a "
                    "smaller chunk size", document_id=document.id, chunk_id=chunk.id)
        return counts

    def plan(self, items: DocumentItems) -> list[Plan]:
        """One plan per document, validated before any request; typed errors name the fix."""
        s = self.settings
        namespace, limit = s.provider.cache_namespace, self.limit()
        window_part = s.window.cache_key_part(limit)
        length_part = f"max_tokens:{s.request_max_tokens}"  # in every key, and in the settings a version shares
        versioned = isinstance(s.cache, VersionedStore)
        plans: list[Plan] = []
        offset = 0
        ids: set[str] = set()
        for item in items:
            try:
                document, chunks = item
            except (TypeError, ValueError):
                raise InvalidInputError("each item must be a (SourceDocument, list of Chunk) pair") from None
            if isinstance(chunks, (Chunk, str)):
                raise InvalidInputError(
                    f"chunks must be a list of Chunk, got one {type(chunks).__name__}: pass [chunk], or "
                    "split_into_chunks(document, texts)", document_id=getattr(document, "id", None))
            chunks = tuple(chunks)
            counts = self.validate(document, chunks, s.traits.info)
            if document.id in ids:
                raise InvalidInputError(
                    f"document id {document.id!r} appears twice in one run; give each document a unique id",
                    document_id=document.id)
            ids.add(document.id)
            digest = text_digest(document.text)
            exact = self.exact_counts.get((s.traits.model, digest))
            tokens = exact if exact is not None else s.counter(document.text)
            plan = Plan(document=document, chunks=chunks, offset=offset, tokens=tokens, digest=digest,
                        windowed=tokens > limit, keys=[], prefix_tokens=0,
                        prompt=s.prompt.for_document(document.text), limit=limit)
            fingerprint = plan.prompt.fingerprint
            plan.settings_key = text_digest("\x00".join((namespace, s.traits.model, fingerprint, window_part,
                                                         length_part)))
            if versioned:  # only a cache that records versions reads them (reuse, refresh, its stats)
                counts = counts if counts is not None else tuple(s.counter(c.text) for c in chunks)
                plan.parts = tuple(zip((chunk_digest(c.text) for c in chunks), counts, strict=True))
            for i, chunk in enumerate(chunks):
                if not chunk.text.strip():
                    plan.keys.append(None)
                    plan.chunk_keys.append(None)
                    continue
                plan.chunk_keys.append(chunk_key(document.id, chunk.text))
                extra = length_part
                if plan.windowed:
                    view = self.view(plan, i)
                    extra += ":view:" + text_digest(view.prefix + "\x00" + view.rest)
                plan.keys.append(context_cache_key(
                    provider=namespace, model=s.traits.model, prompt_fingerprint=fingerprint, window=window_part,
                    document_digest=digest, chunk_text=chunk.text, extra=extra))
            if chunks and exact is not None and not plan.windowed:
                plan.prefix_tokens = self.whole_document_prefix(plan, exact)
            elif chunks:
                plan.prefix_tokens = s.counter(self.view(plan, len(chunks) - 1).prefix)
            plans.append(plan)
            offset += len(chunks)
        return plans

    async def plan_run(self, items: list[tuple[SourceDocument, Sequence[Chunk]]], pacer: Pacer
                       ) -> tuple[list[Plan], CtxRetrievalError | None]:
        """A run's plans, validated before any request. Exact counts that may change a document's windowing (and
        so its cache keys) come first; a count that shows the run cannot succeed is returned as its fatal error.
        A budget without prices raises ``ConfigurationError`` first."""
        check_prices(self.settings)
        plans = self.plan(items)
        try:
            if await self.count_exact(items, pacer, near=self.near_limit):
                plans = self.plan(items)
        except CtxRetrievalError as exc:
            return plans, exc
        return plans, None

    def lookup(self, plans: list[Plan]) -> dict[str, str]:
        """Contexts already in the context cache for these plans, cleaned: key -> context. A stored answer that
        cleans to nothing is no hit (the chunk is asked again)."""
        s = self.settings
        cache = s.cache
        if cache is None:
            return {}
        found = cache.get_many(k for p in plans for k in p.keys if k is not None)
        return {key: context for key, entry in found.items()
                if (context := clean_context(entry.raw_text, max_tokens=s.max_context_tokens,
                                             count_tokens=s.counter))}

    def price(self, work: Iterable[tuple[Plan, Sequence[int]]]) -> tuple[TokenUsage, float | None, int]:
        """Estimated usage, dollars (None without prices) and long-prompt requests of requesting ``work``: the
        first chunk of a cacheable document writes its cache, the others read it."""
        s = self.settings
        info = s.traits.info
        usage = TokenUsage()
        dollars = 0.0
        long_prompts = 0
        outputs: dict[str, int] = {}
        for plan, pending in work:
            cacheable = self.caches(plan)
            version = plan.prompt.version
            if version not in outputs:
                outputs[version] = self.output_guess(version)
            output_guess = outputs[version]
            # the API's count of the document, where known, corrects the estimate of its chunks by the same ratio
            exact = self.exact_counts.get((s.traits.model, plan.digest))
            scale = exact / max(s.counter(plan.document.text), 1) if exact is not None else 1.0
            for n, i in enumerate(pending):
                view = self.view(plan, i)
                variable = round(scale * (s.counter(view.rest) + s.counter(
                    plan.prompt.render_chunk_block(plan.chunks[i].text, windowed=view.windowed))))
                if not cacheable:
                    one = TokenUsage(input_tokens=plan.prefix_tokens + variable, output_tokens=output_guess)
                elif n == 0:
                    one = TokenUsage(input_tokens=variable, output_tokens=output_guess,
                                     cache_creation_input_tokens=plan.prefix_tokens)
                else:
                    one = TokenUsage(input_tokens=variable, output_tokens=output_guess,
                                     cache_read_input_tokens=plan.prefix_tokens)
                usage += one
                if info is not None:
                    dollars += request_cost_usd(one, info, cache_ttl=s.traits.cache_ttl)
                    long_prompts += info.in_long_prompt_tier(one.prompt_tokens)
        return usage, (dollars if info is not None else None), long_prompts

    def output_guess(self, prompt_version: str) -> int:
        """The output tokens a context is priced at: the mean of those the cache holds for this provider, model and
        prompt (``OUTPUT_HISTORY`` most recent, at least ``MIN_OUTPUT_HISTORY``), else 3/5 of the length cap."""
        s = self.settings
        if isinstance(s.cache, OutputHistory):
            seen = s.cache.output_tokens(s.traits.name, s.traits.model, prompt_version)
            if seen is not None and seen[1] >= MIN_OUTPUT_HISTORY:
                return round(seen[0])
        return (s.max_context_tokens * 3) // 5

    def estimate(self, plans: list[Plan], parts: Partition, reuse_saved_usd: float | None = 0.0) -> CostEstimate:
        """What a run over ``plans`` would request and cost: the run's own ``partition`` (``reuse.estimate``),
        priced request by request (the first of a cacheable document writes its cache, the others read it)."""
        usage, dollars, long_prompts = self.price(parts.work)
        return CostEstimate(
            documents=len(plans), chunks=sum(len(p.chunks) for p in plans),
            cached_chunks=len(parts.cached) + len(parts.followers), empty_chunks=len(parts.empty),
            requests=sum(len(pending) for _, pending in parts.work), usage=usage,
            cost_usd=dollars, document_tokens=sum(p.tokens for p in plans),
            uncacheable_documents=[p.document.id for p in plans if p.chunks and not self.caches(p)],
            windowed_documents=sum(p.windowed for p in plans), long_prompt_requests=long_prompts,
            reused_chunks=len(parts.reused), reuse_saved_usd=reuse_saved_usd)

    # -- exact token counts ----------------------------------------------------------------------------

    def token_counter(self) -> TokenCountingProvider | None:
        """The provider, when exact counts are wanted and it can give them now."""
        counter = self.settings.traits.counter
        if self.settings.exact_token_counts is False or counter is None or not counter.can_count_tokens or \
                self.no_count_endpoint:
            return None
        return counter

    async def count_texts(self, wanted: dict[tuple[str, str], str], pacer: Pacer) -> bool:
        """Exact counts for ``wanted`` ((model, digest) -> text): from the context cache where an earlier run
        stored them, else from the API (through the run's pacing: a 429 pauses the run as any request's does).
        True when any count is new to this generator. A count is tried once: one that fails leaves the estimate in
        place; one that shows the run cannot succeed (a rejected key, an unknown model, billing) raises the run's
        typed error."""
        counter = self.token_counter()
        wanted = {k: t for k, t in wanted.items() if k not in self.exact_counts}
        if counter is None or not wanted:
            return False
        provider = self.settings.provider
        store = f"{counter.model}@{provider.cache_namespace}"  # counts are per model and endpoint
        cache = self.settings.cache
        learned = False
        if cache is not None:  # counted by an earlier run: no request
            for digest, tokens in cache.get_token_counts(store, (d for _, d in wanted)).items():
                self.exact_counts[(counter.model, digest)] = tokens
                wanted.pop((counter.model, digest), None)
                learned = True
        slots = asyncio.Semaphore(self.settings.max_concurrency or AUTO_START_CONCURRENCY)
        failed: list[str] = []  # why each count that failed did
        hooks = _CountHooks(self, failed)

        async def count(key: tuple[str, str], text: str) -> None:
            async with slots:
                try:
                    tokens = await paced_call(lambda: counter.acount_tokens(text), pacer=pacer,
                                              classify=provider.classify_error, run_error=provider.run_error,
                                              limits_of=lambda _: None, input_tokens=0, output_tokens=0,
                                              what="a token count", provider=provider.name, hooks=hooks)
                except RetriesSpentError:
                    return  # said by the hooks: the estimate stays
                self.exact_counts[key] = tokens
                if cache is not None:
                    cache.put_token_count(store, key[1], tokens)

        await asyncio.gather(*(count(key, text) for key, text in wanted.items()))
        if failed:
            logger.warning("%d of %d exact token counts failed (%s): those documents are planned with the estimate",
                           len(failed), len(wanted), ", ".join(sorted(set(failed))))
        return learned or any(key in self.exact_counts for key in wanted)

    async def count_exact(self, items: list[tuple[SourceDocument, Sequence[Chunk]]], pacer: Pacer, *,
                          near: Callable[[int], bool], close: bool = False) -> bool:
        """Count, with the API, the documents whose estimate satisfies ``near`` (every document with
        ``exact_token_counts=True``); True when a count is new."""
        counter = self.token_counter()
        if counter is None:
            return False
        s = self.settings
        wanted: dict[tuple[str, str], str] = {}
        for item in items:
            document = item[0] if isinstance(item, tuple) and item else None
            if isinstance(document, SourceDocument) and (s.exact_token_counts or near(
                    s.counter(document.text))):
                wanted[(counter.model, text_digest(document.text))] = document.text
        try:
            return await self.count_texts(wanted, pacer)
        finally:
            if close:
                await s.provider.aclose()


class _CountHooks(Hooks):
    """A token count is tried once: a gateway without the endpoint (404) is said once and counts stop; any other
    failure that does not stop the run leaves that document's estimate."""

    def __init__(self, planner: Planner, kinds: list[str]) -> None:
        self.planner, self.kinds = planner, kinds

    def failed(self, error: Exception, decision: ErrorDecision, detail: str) -> None:
        planner = self.planner
        if decision.kind == "not_found":  # a gateway without the endpoint: the first request says whether the
            if not planner.no_count_endpoint:  # model itself is served
                logger.warning("%s answered 404 to a token count (a gateway without count_tokens, or a model it "
                               "does not serve: the first request says which); planning with estimates",
                               planner.settings.provider.cache_namespace)
            planner.no_count_endpoint = True
        elif decision.action == "fail_run":
            return  # the run cannot succeed: its typed error is raised
        else:
            self.kinds.append(decision.kind)
        raise RetriesSpentError(detail, kind=decision.kind, detail=detail) from error
