"""Claude on Amazon Bedrock and Google Vertex AI, through the SDK's own platform clients: the same requests as
``AnthropicProvider`` (the document block with ``cache_control``, thinking rules, stop reasons), with each
platform's endpoint, credentials, model ids and prices.

Setup:
    pip install "ctx-retrieval[bedrock]" (or ``[vertex]``).

- ``BedrockProvider``: ``AsyncAnthropicBedrockMantle``, the Messages-API Bedrock endpoint (``https://bedrock-mantle.
  <region>.api.aws/anthropic``, model ids ``anthropic.claude-...``), or with ``endpoint="invoke"`` the legacy
  ``AsyncAnthropicBedrock`` (InvokeModel on ``bedrock-runtime``, model ids with a geography prefix and version:
  ``global.anthropic.claude-haiku-4-5-20251001-v1:0``). Credentials: a Bedrock API key (``api_key=`` or
  ``$AWS_BEARER_TOKEN_BEDROCK``) or the AWS credential chain (SigV4, needs ``boto3``). Token counting on the
  Messages-API endpoint only (the SDK refuses it on InvokeModel).
- ``VertexProvider``: ``AsyncAnthropicVertex`` (``rawPredict`` on ``<region>-aiplatform.googleapis.com``, or the
  global endpoint), model ids ``claude-haiku-4-5@20251001``; credentials: ``access_token=`` or Google's application
  default credentials (``google-auth``); ``project_id`` and ``region`` (or ``$ANTHROPIC_VERTEX_PROJECT_ID`` and
  ``$CLOUD_ML_REGION``). Token counting through ``count-tokens:rawPredict``.

Prompt caching is the Messages API's on both (the same ``cache_control`` blocks and usage fields). Neither client
offers Message Batches (the platforms' own batch jobs run from cloud storage, outside the SDK), so batch mode is
refused with a ``ConfigurationError``. Prices: the model table's, 10% more at a regional endpoint (Bedrock: a
geography prefix or a bare in-region id; Vertex AI: any region but ``global``), per the platforms' pages;
``regional=`` says it where the id does not. Errors are classified by HTTP status, which both platforms use as
the API does (429 throttling, 5xx unavailable, 401/403 credentials and model access); neither sends the
``anthropic-ratelimit-*`` headers, so the run paces itself by its own 429s.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

from ctx_retrieval._optional import require
from ctx_retrieval.errors import (
    ConfigurationError,
    CtxRetrievalError,
    ProviderAuthenticationError,
    ProviderPermissionError,
    UnknownModelError,
)
from ctx_retrieval.models import ModelInfo, lookup_model_info, platform_model, platform_prices
from ctx_retrieval.providers.anthropic import DEFAULT_TIMEOUT_S, AnthropicMessages
from ctx_retrieval.providers.base import DEFAULT_REQUEST_THREADS, endpoint_identity
from ctx_retrieval.types import ErrorDecision

if TYPE_CHECKING:
    import anthropic as anthropic_sdk


BEDROCK_KEY_ENV = "AWS_BEARER_TOKEN_BEDROCK"
BEDROCK_PAGE = "https://platform.claude.com/docs/en/build-with-claude/claude-on-amazon-bedrock"
VERTEX_PAGE = "https://platform.claude.com/docs/en/build-with-claude/claude-on-vertex-ai"


class _PlatformProvider(AnthropicMessages):
    """What both platform providers change in the Messages API provider: the client, the endpoint's identity in the
    context-cache key, prices, and the platform's words in errors. No Message Batches: they are not a
    ``BatchProvider`` (``contextualize_many_batched`` refuses them by that, naming the platform)."""

    platform = ""
    # The platform's words in errors: where credentials come from, where model access is enabled, its model ids.
    credentials_hint = ""
    access_hint = ""
    page = ""

    def _platform_info(self, model: str, model_info: ModelInfo | None, regional: bool | None) -> None:
        if model_info is None:
            info = lookup_model_info(model)
            self._model_info = platform_prices(info, regional=bool(regional)) if info is not None else None
        self.regional = regional

    @property
    def cache_namespace(self) -> str:
        # The platform and where it runs (region, project, endpoint): contexts of one deployment are never served
        # as another's; the model id is in the key already.
        namespace = f"{self.name}@{self.endpoint_id or endpoint_identity(self._endpoint_url())}"
        return namespace + (f":{self.extra_body}" if self.extra_body else "")

    def _endpoint_url(self) -> str:  # pragma: no cover - each platform names its own
        raise NotImplementedError

    def run_error(self, decision: ErrorDecision, exc: BaseException) -> CtxRetrievalError:
        if decision.kind == "authentication":
            return ProviderAuthenticationError(
                f"{self.platform} rejected the credentials (HTTP {decision.status_code}): {self.credentials_hint}",
                provider=self.name, status_code=decision.status_code)
        if decision.kind == "permission":
            return ProviderPermissionError(
                f"{self.platform} refused the request (HTTP 403): the account may not use model {self._model!r} in "
                f"this region; enable it ({self.access_hint}) or pass another model", provider=self.name,
                status_code=decision.status_code)
        if decision.kind == "not_found":
            return UnknownModelError(f"{self.platform} does not know model {self._model!r} (HTTP 404): pass the "
                                     f"platform's model id (see {self.page})", model=self._model)
        return super().run_error(decision, exc)


class BedrockProvider(_PlatformProvider):
    """Writes contexts with Claude on Amazon Bedrock.

    Instantiate:
        .. code-block:: python

            from ctx_retrieval.providers import BedrockProvider
            provider = BedrockProvider("anthropic.claude-haiku-4-5", aws_region="us-east-1")
            legacy = BedrockProvider("global.anthropic.claude-haiku-4-5-20251001-v1:0", aws_region="us-east-1",
                                     endpoint="invoke")

    The API key (or AWS secret) is held privately: never in ``repr``, pickles, cache keys or logs.
    """

    name = "anthropic-bedrock"
    platform = "Amazon Bedrock"
    credentials_hint = (f"check the Bedrock API key (${BEDROCK_KEY_ENV} or api_key=) or the AWS credentials (profile, "
                        "access key, role) and that they may call Bedrock in this region")
    access_hint = "Bedrock console > Model access"
    page = BEDROCK_PAGE
    _key_env = BEDROCK_KEY_ENV
    _unpicklable: tuple[str, ...] = (*AnthropicMessages._unpicklable, "_aws")  # AWS secrets never travel

    def __init__(self, model: str, *, aws_region: str | None = None,
                 endpoint: Literal["messages", "invoke"] = "messages",
                 api_key: str | None = None, aws_access_key: str | None = None, aws_secret_key: str | None = None,
                 aws_session_token: str | None = None, aws_profile: str | None = None, base_url: str | None = None,
                 regional: bool | None = None, cache_ttl: Literal["5m", "1h"] = "5m",
                 timeout_s: float = DEFAULT_TIMEOUT_S, extra_body: dict[str, Any] | None = None,
                 model_info: ModelInfo | None = None, client: Any = None, endpoint_id: str | None = None,
                 request_threads: int = DEFAULT_REQUEST_THREADS) -> None:
        if endpoint not in ("messages", "invoke"):
            raise ConfigurationError("endpoint must be 'messages' (the Messages-API Bedrock endpoint) or 'invoke' "
                                     "(the legacy InvokeModel endpoint)", setting="endpoint")
        parsed = platform_model(model)
        if parsed.platform != "bedrock":
            raise ConfigurationError(
                f"{model!r} is not a Bedrock model id: Bedrock names Claude models 'anthropic.<model>' (with a "
                "geography prefix such as 'global.' and a version such as '-v1:0' on the InvokeModel endpoint); "
                f"see {BEDROCK_PAGE}", setting="model")
        super().__init__(model, api_key=api_key, base_url=base_url, cache_ttl=cache_ttl, timeout_s=timeout_s,
                         extra_body=extra_body, model_info=model_info, client=client, endpoint_id=endpoint_id,
                         request_threads=request_threads)
        self.endpoint_kind = endpoint
        self.aws_region = aws_region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        self._aws = {"aws_access_key": aws_access_key, "aws_secret_key": aws_secret_key,
                     "aws_session_token": aws_session_token, "aws_profile": aws_profile}
        if regional is None:  # InvokeModel ids say their routing (global. or a geography); Messages-API is regional
            regional = parsed.regional if endpoint == "invoke" else True
        self._platform_info(model, model_info, regional)

    def __repr__(self) -> str:
        state = "set" if self._resolved_key() else ("aws" if any((self._aws or {}).values()) else "chain")
        return (f"BedrockProvider(model={self._model!r}, aws_region={self.aws_region!r}, "
                f"endpoint={self.endpoint_kind!r}, credentials=<{state}>)")

    def _endpoint_url(self) -> str:
        if self.base_url:
            return self.base_url
        if self.endpoint_kind == "invoke":
            return f"https://bedrock-runtime.{self.aws_region}.amazonaws.com"
        return f"https://bedrock-mantle.{self.aws_region}.api.aws/anthropic"

    def check_ready(self) -> None:
        require("anthropic", "bedrock")
        if self._user_client is not None:
            return
        if not self.aws_region:
            raise ConfigurationError("no AWS region: pass BedrockProvider(aws_region=...) or set AWS_REGION",
                                     setting="aws_region")
        if self._resolved_key() is None:
            require("boto3", "bedrock")  # SigV4 from the AWS credential chain

    @property
    def can_count_tokens(self) -> bool:
        return self.endpoint_kind == "messages"

    def _new_client(self) -> anthropic_sdk.AsyncAnthropic:
        anthropic = require("anthropic", "bedrock")
        kind = (anthropic.AsyncAnthropicBedrock if self.endpoint_kind == "invoke"
                else anthropic.AsyncAnthropicBedrockMantle)
        client: anthropic_sdk.AsyncAnthropic = kind(**self._client_settings())
        return client

    def _new_sync_client(self) -> Any:
        anthropic = require("anthropic", "bedrock")
        kind = anthropic.AnthropicBedrock if self.endpoint_kind == "invoke" else anthropic.AnthropicBedrockMantle
        return kind(**self._client_settings())

    def _client_settings(self) -> dict[str, Any]:
        key = self._resolved_key()
        credentials = {} if key is not None else {k: v for k, v in (self._aws or {}).items() if v is not None}
        return {"aws_region": self.aws_region, "base_url": self.base_url, "max_retries": 0,
                "timeout": self.timeout_s, **({"api_key": key} if key is not None else credentials)}


class VertexProvider(_PlatformProvider):
    """Writes contexts with Claude on Google Vertex AI.

    Instantiate:
        .. code-block:: python

            from ctx_retrieval.providers import VertexProvider
            provider = VertexProvider("claude-haiku-4-5@20251001", project_id="my-project", region="global")

    An ``access_token`` is held privately: never in ``repr``, pickles, cache keys or logs.
    """

    name = "anthropic-vertex"
    platform = "Vertex AI"
    credentials_hint = ("check the access token (access_token=) or the application default credentials (gcloud auth "
                        "application-default login) and that they may use Vertex AI in this project")
    access_hint = "Vertex AI Model Garden"
    page = VERTEX_PAGE
    _key_env = ""  # no environment variable holds a token: application default credentials do

    def __init__(self, model: str, *, project_id: str | None = None, region: str | None = None,
                 access_token: str | None = None, base_url: str | None = None, regional: bool | None = None,
                 cache_ttl: Literal["5m", "1h"] = "5m", timeout_s: float = DEFAULT_TIMEOUT_S,
                 extra_body: dict[str, Any] | None = None, model_info: ModelInfo | None = None,
                 client: Any = None, endpoint_id: str | None = None,
                 request_threads: int = DEFAULT_REQUEST_THREADS) -> None:
        if platform_model(model).platform == "bedrock":
            raise ConfigurationError(f"{model!r} is a Bedrock model id: Vertex AI names Claude models "
                                     f"'claude-haiku-4-5@20251001' (see {VERTEX_PAGE})", setting="model")
        super().__init__(model, api_key=access_token, base_url=base_url, cache_ttl=cache_ttl, timeout_s=timeout_s,
                         extra_body=extra_body, model_info=model_info, client=client, endpoint_id=endpoint_id,
                         request_threads=request_threads)
        self.project_id = project_id or os.environ.get("ANTHROPIC_VERTEX_PROJECT_ID")
        self.region = region or os.environ.get("CLOUD_ML_REGION")
        self._platform_info(model, model_info, regional if regional is not None else (self.region != "global"))

    def __repr__(self) -> str:
        state = "set" if self._resolved_key() else "application-default"
        return (f"VertexProvider(model={self._model!r}, project_id={self.project_id!r}, region={self.region!r}, "
                f"access_token=<{state}>)")

    def _endpoint_url(self) -> str:
        if self.base_url:
            return f"{self.base_url}/projects/{self.project_id}/locations/{self.region}"
        return f"https://{self.region}-aiplatform.googleapis.com/projects/{self.project_id}"

    def check_ready(self) -> None:
        require("anthropic", "vertex")
        if self._user_client is not None:
            return
        if not self.region:
            raise ConfigurationError("no Vertex AI region: pass VertexProvider(region=...) ('global', or a region "
                                     "such as 'us-east5') or set CLOUD_ML_REGION", setting="region")
        if not self.project_id:
            raise ConfigurationError("no Google Cloud project: pass VertexProvider(project_id=...) or set "
                                     "ANTHROPIC_VERTEX_PROJECT_ID", setting="project_id")
        if self._resolved_key() is None:
            require("google.auth", "vertex")  # application default credentials

    @property
    def can_count_tokens(self) -> bool:
        return True

    def _new_client(self) -> anthropic_sdk.AsyncAnthropic:
        anthropic = require("anthropic", "vertex")
        client: anthropic_sdk.AsyncAnthropic = anthropic.AsyncAnthropicVertex(**self._client_settings())
        return client

    def _new_sync_client(self) -> Any:
        return require("anthropic", "vertex").AnthropicVertex(**self._client_settings())

    def _client_settings(self) -> dict[str, Any]:
        return {"project_id": self.project_id, "region": self.region, "access_token": self._resolved_key(),
                "base_url": self.base_url, "max_retries": 0, "timeout": self.timeout_s}
