"""``ctx-retrieval cache stats|prune``: what the context cache holds, and pruning it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ctx_retrieval.cli._common import (
    Args,
    add_input_limit,
)
from ctx_retrieval.contextualize.cache import default_cache_path
from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.loaders import load_documents


def _cmd_cache(args: Args) -> int:
    """``cache stats`` / ``cache prune``: what the context cache holds, and dropping what is no longer needed."""
    from ctx_retrieval.contextualize.cache_postgres import CACHE_URL_ENV, is_postgres_url
    from ctx_retrieval.contextualize.stores import open_context_cache

    where = args.cache or os.environ.get(CACHE_URL_ENV) or default_cache_path()
    if not is_postgres_url(where) and not Path(where).is_file():  # reading or pruning never creates a cache
        if not args.cache and not os.environ.get(CACHE_URL_ENV):
            print(f"no context cache yet at {where}: nothing has been contextualized on this machine")
            return 0
        raise InvalidInputError(f"no context cache at {where}: check the path (--cache PATH; by default "
                                f"{default_cache_path()}, or ${CACHE_URL_ENV})")
    cache: Any = open_context_cache(where)
    try:
        if args.action == "stats":
            print(cache.stats().format())
            return 0
        live: list[str] | None = None
        if args.live:
            live = [document.id for document, _ in load_documents(args.live, lambda text: [text],
                                                                   max_bytes=int(args.max_input_mb * 2**20))]
        if args.live_ids:
            from ctx_retrieval.loaders import InputBudget

            ids = [line.strip() for line in InputBudget().lines(Path(args.live_ids)) if line.strip()]
            live = [*(live or []), *ids]
        older = None
        if args.older_than:
            import datetime

            try:
                older = datetime.date.fromisoformat(args.older_than)
            except ValueError:
                raise InvalidInputError(f"--older-than takes a date as YYYY-MM-DD, not {args.older_than!r}") from None
        n = cache.prune(keep_documents=live, older_than=older, dry_run=args.dry_run, compact=args.compact)
        kept = f" ({len(live):,} live documents)" if live is not None else ""
        print(f"{'would delete' if args.dry_run else 'deleted'} {n:,} contexts{kept}; now: "
              f"{cache.stats().format()}")
        return 0
    finally:
        cache.close()


def add_parser(sub: Any, *, twin: bool) -> None:
    """The command's options."""
    cache = sub.add_parser("cache", help="what the context cache holds, and pruning it",
                           description="stats: contexts, documents, models, dates and size of the context cache. "
                           "prune: delete the contexts of documents no longer live (--live inputs or --live-ids) "
                           "and/or those written before a date (--older-than).")
    cache.add_argument("action", choices=["stats", "prune"])
    cache.add_argument("--cache", help="the cache: a file or a postgresql:// URL (default: the run's default cache)")
    cache.add_argument("--live", nargs="+", metavar="INPUT",
                       help="prune: the corpus as it is now (files, folders, JSONL, as given to 'contextualize'); "
                            "contexts of other documents are deleted")
    cache.add_argument("--live-ids", metavar="FILE", help="prune: a file of live document ids, one per line")
    cache.add_argument("--older-than", metavar="YYYY-MM-DD", help="prune: contexts written before this day (UTC)")
    cache.add_argument("--dry-run", action="store_true", help="prune: only count what would be deleted")
    cache.add_argument("--compact", action="store_true", help="prune: give the freed space back (VACUUM)")
    add_input_limit(cache)
    cache.set_defaults(func=_cmd_cache)
