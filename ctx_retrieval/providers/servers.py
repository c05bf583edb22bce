"""What an OpenAI-compatible server says about itself, read once before a run: which server it is, the models it
serves, its parallel slots, its context size and how it caches prompts.

Each rule comes from the server's own documentation or source (read 2026-11-30):

- llama.cpp's ``llama-server`` (tools/server/README.md, https://github.com/ggml-org/llama.cpp): ``GET /v1/models``
  lists the one loaded model with ``owned_by: "llamacpp"``; ``GET /props`` gives ``total_slots`` (the ``--parallel``
  option) and ``default_generation_settings.n_ctx``; each slot keeps the prompt it last processed and a request
  reuses its longest common prefix; responses carry ``usage.prompt_tokens_details.cached_tokens`` and
  ``timings.cache_n``; an over-long prompt is a 400 ``exceed_context_size_error``.
- llama-cpp-python's server (llama_cpp/server/app.py, model.py, errors.py, https://github.com/abetlen/llama-cpp-python):
  ``/v1/models`` answers ``owned_by: "me"``; every request holds one lock, so it runs one request at a time; a model
  name it does not know falls back to the loaded model; usage has no cached-token field; an over-long prompt is a
  400 ``context_length_exceeded`` ("This model's maximum context length is N tokens...").
- vLLM (vllm/entrypoints/openai/protocol.py, https://github.com/vllm-project/vllm): ``/v1/models`` cards have
  ``owned_by: "vllm"`` and ``max_model_len``; automatic prefix caching shares cached blocks across all requests (no
  per-slot affinity); cached tokens are reported only with ``--enable-prompt-tokens-details``.
- Ollama (docs/openai.md, docs/api.md and docs/context-length.mdx, https://github.com/ollama/ollama):
  ``/v1/models`` answers ``owned_by: "library"``; ``POST /api/show`` returns the model's ``parameters`` as text
  (``num_ctx 8192`` when its Modelfile sets one); without it the context defaults by VRAM, 4k below 24 GiB (the
  smallest default, used here), and a longer prompt is cut silently, so windowing must keep prompts under it;
  parallel requests per model follow ``OLLAMA_NUM_PARALLEL``, which no endpoint reports.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Literal

logger = logging.getLogger(__name__)

PrefixCache = Literal["per_slot", "shared", "unknown"]
ServerKind = Literal["llama.cpp", "llama-cpp-python", "vllm", "ollama", "openai", "unknown"]

_OWNERS: dict[str, ServerKind] = {"llamacpp": "llama.cpp", "me": "llama-cpp-python", "vllm": "vllm",
                                  "library": "ollama", "openai": "openai", "system": "openai"}


@dataclass(frozen=True)
class ServerInfo:
    """What the server told us. ``slots``: requests it runs at once (None: it does not say); ``context_tokens``:
    its context size per request (None: it does not say); ``prefix_cache``: ``per_slot`` (each slot reuses the
    prefix of the prompt it processed last: keep a slot on one document), ``shared`` (any request reuses any
    cached prefix), ``unknown``."""

    kind: ServerKind
    models: tuple[str, ...] = ()
    slots: int | None = None
    context_tokens: int | None = None
    prefix_cache: PrefixCache = "unknown"
    accepts_any_model: bool = False
    notes: list[str] = field(default_factory=list)


OLLAMA_SMALLEST_DEFAULT_CONTEXT = 4096  # docs/context-length.mdx: "< 24 GiB VRAM: 4k context"


async def describe_server(client: Any, base_url: str, model: str = "") -> ServerInfo:
    """Ask the server at ``base_url`` (its ``.../v1`` address) about itself with ``client`` (an ``openai``
    ``AsyncOpenAI``); endpoints a server does not have are skipped. ``model``: the model to describe where the
    server describes models one by one (Ollama)."""
    listing = await _get(client, f"{base_url}/models")
    cards = [c for c in (listing or {}).get("data", []) if isinstance(c, dict)] if isinstance(listing, dict) else []
    models = tuple(str(c.get("id")) for c in cards if c.get("id"))
    owners = {str(c.get("owned_by", "")) for c in cards}
    kind: ServerKind = next((_OWNERS[o] for o in owners if o in _OWNERS), "unknown")
    root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
    if kind == "llama.cpp":
        props = await _get(client, f"{root}/props")
        settings = props.get("default_generation_settings", {}) if isinstance(props, dict) else {}
        slots = props.get("total_slots") if isinstance(props, dict) else None
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        return ServerInfo(kind, models, _positive(slots), _positive(n_ctx), "per_slot", accepts_any_model=True)
    if kind == "llama-cpp-python":
        return ServerInfo(kind, models, 1, None, "per_slot", accepts_any_model=True)
    if kind == "vllm":
        lengths = [_positive(c.get("max_model_len")) for c in cards]
        return ServerInfo(kind, models, None, next((n for n in lengths if n), None), "shared")
    if kind == "ollama":
        shown = await _post(client, f"{root}/api/show", {"model": model})
        parameters = shown.get("parameters", "") if isinstance(shown, dict) else ""
        stated = re.search(r"^\s*num_ctx\s+(\d+)", parameters if isinstance(parameters, str) else "", re.MULTILINE)
        notes = ["Ollama does not report its parallel requests: pass OpenAICompatibleProvider(slots=N) to match "
                 "OLLAMA_NUM_PARALLEL (one request at a time is assumed)"]
        if stated is None:
            notes.append(f"Ollama does not state {model or 'the model'}'s context size (no num_ctx in its Modelfile), "
                         f"and cuts longer prompts silently: windowing keeps prompts within its smallest default, "
                         f"{OLLAMA_SMALLEST_DEFAULT_CONTEXT:,} tokens; pass context_tokens= to match "
                         "OLLAMA_CONTEXT_LENGTH")
        context = int(stated.group(1)) if stated else OLLAMA_SMALLEST_DEFAULT_CONTEXT
        return ServerInfo(kind, models, 1, context, "per_slot", notes=notes)
    if kind == "openai":
        return ServerInfo(kind, models, None, None, "shared")
    return ServerInfo(kind, models)


async def _post(client: Any, url: str, body: dict[str, Any]) -> Any:
    try:
        return await client.post(url, cast_to=object, body=body)
    except Exception as exc:
        logger.debug("POST %s: %s", url, type(exc).__name__)
        return None


async def _get(client: Any, url: str) -> Any:
    try:
        return await client.get(url, cast_to=object)
    except Exception as exc:  # an endpoint the server does not have, or no server: the run will say
        logger.debug("GET %s: %s", url, type(exc).__name__)
        return None


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
