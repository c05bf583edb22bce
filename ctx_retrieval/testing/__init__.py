"""Test helpers: a fake Anthropic API on loopback for tests and benchmarks (standard library only)."""

from ctx_retrieval.testing.fake_anthropic import (
    FakeAnthropicServer,
    RecordedRequest,
    claude_or_fake,
    default_responder,
)
from ctx_retrieval.testing.fake_openai import FakeOpenAIServer
from ctx_retrieval.testing.twin_faults import FAULT_KINDS

__all__ = ["FAULT_KINDS", "FakeAnthropicServer", "FakeOpenAIServer", "RecordedRequest", "claude_or_fake",
           "default_responder"]
