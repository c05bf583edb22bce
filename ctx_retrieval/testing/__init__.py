"""Test helpers: a fake Anthropic API on loopback for tests and benchmarks (standard library only)."""

from ctx_retrieval.testing.fake_anthropic import FAULT_KINDS, FakeAnthropicServer, RecordedRequest, default_responder
from ctx_retrieval.testing.fake_openai import FakeOpenAIServer

__all__ = ["FAULT_KINDS", "FakeAnthropicServer", "FakeOpenAIServer", "RecordedRequest", "default_responder"]
