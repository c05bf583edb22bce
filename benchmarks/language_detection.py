"""Language detection on real documentation (issue 35): FastAPI's docs, the same pages in English and eleven other
languages, read by ``written_in_english`` (which prompt a document gets, which embedder the CLI chooses) and by
``latin_language`` (which Snowball stemmer BM25 uses for Latin-script words).

    .venv/bin/python benchmarks/language_detection.py --docs PATH/TO/fastapi/docs

PATH is the ``docs`` folder of a checkout of github.com/fastapi/fastapi (MIT; not vendored here). Printed per
language: pages, pages taken as not English (every page but English's should be), and what ``latin_language``
answers (the language itself for Latin-script languages, nothing for the others).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ctx_retrieval.language import latin_language, written_in_english

LANGUAGES = ("en", "de", "es", "fr", "pt", "tr", "ru", "uk", "zh", "ja", "ko", "hi")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", required=True, help="the docs folder of a FastAPI checkout")
    args = parser.parse_args()
    root = Path(args.docs)
    print("| language | pages | taken as not English | latin_language |\n|---|---|---|---|")
    for language in LANGUAGES:
        pages = [p.read_text(encoding="utf-8") for p in sorted((root / language / "docs").rglob("*.md"))]
        if not pages:
            continue
        other = sum(1 for text in pages if not written_in_english(text))
        named = collections.Counter(str(latin_language(text)) for text in pages)
        shown = ", ".join(f"{name} {count}" for name, count in named.most_common())
        print(f"| {language} | {len(pages)} | {other} | {shown} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
