"""Writing contexts: (document, chunks) in, one situated context per chunk out.

- ``generator``: ``ContextGenerator``, the facade (sync, async, streamed, batched, retries, estimates).
- ``planning``: what each document sends (whole or windowed, cacheable or not) and what is already cached.
- ``engine``: one run's state and its requests: attempts, retries, failures, the report.
- ``batches``: the same run through Message Batches at half price.
- ``scheduling``: retry policy, client-side rate limits, request slots.
- ``cache``: the persistent context cache (SQLite): each chunk paid once; ``cache_postgres``: the same on
  PostgreSQL, shared by machines; ``stores``: which cache a setting names (``open_context_cache``).
- ``versions``: document versions and opt-in reuse of earlier contexts (edits, model and prompt migrations).
- ``leases``: workers sharing a cache claim each document before writing it; the others wait for its contexts.
- ``windowing``, ``prompts``, ``validation``: the prompt's document part, its text, input checks.
- ``heuristic``: the no-LLM baseline; ``results``: what a run returns.
"""
