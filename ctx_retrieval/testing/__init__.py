"""Test helpers: a fake Anthropic API on loopback for tests and benchmarks (standard library only)."""

from .fake_anthropic import FAULT_KINDS, FakeAnthropicServer, RecordedRequest, default_responder
from .fake_openai import FakeOpenAIServer

__all__ = ["FAULT_KINDS", "FakeAnthropicServer", "FakeOpenAIServer", "RecordedRequest", "default_responder"]
