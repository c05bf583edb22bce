"""Writing contexts: (document, chunks) in, one situated context per chunk out.

Public modules:

- ``generator``: ``ContextGenerator``, the facade (sync, async, streamed, batched, retries, estimates).
- ``batches``: the same run through Message Batches at half price.
- ``cache``: the persistent context cache (SQLite): each chunk paid once; ``cache_postgres``: the same on
  PostgreSQL, shared by machines; ``stores``: which cache a setting names (``open_context_cache``).
- ``versions``: document versions and opt-in reuse of earlier contexts (edits, model and prompt migrations).
- ``leases``: workers sharing a cache claim each document before writing it; the others wait for its contexts.
- ``windowing``, ``prompts``, ``validation``: the prompt's document part, its text, input checks.
- ``heuristic``: the no-LLM baseline; ``results``: what a run returns; ``tracing``, ``otel``: spans.

The engine, private (its names may change in any release): ``_settings`` (a generator's settings, frozen when it is
built, and its provider's traits), ``_planning`` (what each document sends and what is already cached), ``_run``
(one run, one object: its state, its requests, what each adds to the one send-and-retry loop ``pacing.paced_call``
(budget, probe, slot, lease, tracing, report), failures and report), ``_runcache`` (the run's dealings with the
cache), ``_reuse`` (earlier contexts a run may take), ``_scheduling`` (how many requests and documents a run keeps in
flight).
"""
