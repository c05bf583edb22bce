"""LLM providers that write contexts. Importing this package imports no SDK: each provider imports its SDK
when first used, and a missing one raises ``MissingDependencyError`` naming the extra to install."""

from ctx_retrieval.providers.anthropic import DEFAULT_ANTHROPIC_MODEL, AnthropicProvider
from ctx_retrieval.providers.base import Provider
from ctx_retrieval.providers.openai_compat import OpenAICompatibleProvider
from ctx_retrieval.providers.platforms import BedrockProvider, VertexProvider
from ctx_retrieval.types import ContextRequest, ErrorDecision, ProviderResponse

__all__ = ["DEFAULT_ANTHROPIC_MODEL", "AnthropicProvider", "BedrockProvider", "ContextRequest", "ErrorDecision",
           "OpenAICompatibleProvider", "Provider", "ProviderResponse", "VertexProvider"]
