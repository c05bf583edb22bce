"""``python -m ctx_retrieval.testing <command> ...``: the ``ctx-retrieval`` command line with the Anthropic API twin
available as ``--contextualizer fake`` (the Claude request flow, prompt caching and the cost report, offline).
``$CTX_RETRIEVAL_TWIN_LATENCY_S`` sets the twin's latency per answer (default 0.02 s)."""

import functools
import os

from ctx_retrieval.cli import main
from ctx_retrieval.testing.fake_anthropic import FakeAnthropicServer

latency_s = float(os.environ.get("CTX_RETRIEVAL_TWIN_LATENCY_S", "0.02"))
raise SystemExit(main(twin=functools.partial(FakeAnthropicServer, latency_s=latency_s)))
