"""``python -m ctx_retrieval.testing <command> ...``: the ``ctx-retrieval`` command line with the Anthropic API twin
available as ``--contextualizer fake`` (the Claude request flow, prompt caching and the cost report, offline)."""

from ctx_retrieval.cli import main
from ctx_retrieval.testing.fake_anthropic import FakeAnthropicServer

raise SystemExit(main(twin=FakeAnthropicServer))
