"""The evaluation's HTML report (issue 27, part 3), rendered by headless Chromium (Debian's ``chromium``): what a
person sees after the page's script ran: the verdict, the ablation table, the embedded chart, a row per query with
the gold chunk's rank in each variant, and the failures filter (``#failures``) showing exactly the queries contextual
hybrid retrieval misses."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import HeuristicContextualizer, MiniLMEmbedder
from ctx_retrieval.evaluation import EvalCorpus, EvalQuery
from ctx_retrieval.evaluation.ablation import run_ablation
from tests.helpers import make_document

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium; "
                                "scripts/test.sh installs it)")


def chromium(*args: str) -> str:
    assert CHROMIUM is not None
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-dev-shm-usage", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Seen(HTMLParser):
    """The rendered DOM as a person sees it: rows of each table that are not hidden, and their cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[list[str]]] = {}
        self.ids: dict[str, str] = {}
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._id: str | None = None
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("id") or ""
            self.rows.setdefault(self._table, [])
        elif tag == "tr" and ((self._table is not None and "hidden" not in a and a.get("class") == "query")
                              or self._table == "ablation"):
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "img":
            self.images.append(a.get("src") or "")
        if a.get("id") in ("verdict", "shown"):
            self._id = a["id"]
            self.ids[str(a["id"])] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            if self._row and self._row[0] not in ("variant", "#"):
                self.rows[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag in ("p", "span"):
            self._id = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._id is not None:
            self.ids[self._id] += data


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, embedder: MiniLMEmbedder) -> tuple[Path, Any]:
    items = [make_document(f"guide-{n}", paragraphs=16) for n in range(4)]  # 64 chunks
    chunks = [c for _, cs in items for c in cs]
    # Questions in a chunk's own words find it; word salad with a gold chunk lands wherever it lands.
    answerable = [EvalQuery(" ".join(c.text.split()[2:12]), (c.id,)) for c in chunks[::9]]
    salad = [EvalQuery(f"zebra quantum {w} lantern", (chunks[n].id,)) for n, w in
             ((3, "teapot"), (21, "violin"), (40, "glacier"), (58, "saffron"), (12, "harbour"))]
    corpus = EvalCorpus("guides", items, answerable + salad)
    contexts = {r.chunk_id: r.context for r in HeuristicContextualizer().contextualize_many(items)}
    result = run_ablation(corpus, contexts, contextualizer_label="heuristic", embedder=embedder)
    result.meta["ingestion"] = {"model": "heuristic", "cost_usd": 0.0}
    folder = tmp_path_factory.mktemp("report")
    chart: Path | None = None
    with contextlib.suppress(ImportError):  # no matplotlib: the report without its chart
        chart = result.chart(folder / "ablation.png")
    return result.to_html(folder / "ablation.html", chart=chart), result


def test_a_person_sees_the_verdict_the_table_the_chart_and_every_query(report: tuple[Path, Any]) -> None:
    path, result = report
    seen = Seen()
    seen.feed(chromium("--dump-dom", path.resolve().as_uri()))
    assert seen.ids["verdict"].startswith(("Contextual retrieval", "No difference", "Both contextual"))
    assert "cost nothing" in seen.ids["verdict"]
    assert [r[0] for r in seen.rows["ablation"]] == [r.name for r in result.rows]
    assert len(seen.rows["queries"]) == result.queries and seen.ids["shown"] == str(result.queries)
    variants = [r.name for r in result.rows]
    contextual = variants.index("contextual hybrid")
    for n, row in enumerate(seen.rows["queries"][: result.queries]):
        ranking = result.rankings["contextual hybrid"][n]
        gold = result.query_list[n].gold[0]
        assert row[2 + contextual] == (str(ranking.index(gold) + 1) if gold in ranking else "-")
    if seen.images:
        assert seen.images[0].startswith("data:image/png;base64,")  # embedded: the file stands alone


def test_the_failures_filter_shows_exactly_the_queries_contextual_retrieval_misses(report: tuple[Path, Any]) -> None:
    path, result = report
    misses = [n for n in range(result.queries)
              if result.query_list[n].gold[0] not in result.rankings["contextual hybrid"][n][:20]]
    assert 0 < len(misses) < result.queries  # the fixture has both kinds
    seen = Seen()
    seen.feed(chromium("--dump-dom", path.resolve().as_uri() + "#failures"))
    shown = [int(row[0]) - 1 for row in seen.rows["queries"] if re.fullmatch(r"\d+", row[0])]
    assert shown == misses and seen.ids["shown"] == str(len(misses))


def test_the_page_paints(report: tuple[Path, Any], tmp_path: Path) -> None:
    pytest.importorskip("PIL")
    from PIL import Image

    path, _ = report
    shot = tmp_path / "page.png"
    chromium(f"--screenshot={shot}", "--window-size=1200,1600", path.resolve().as_uri())
    image = Image.open(shot).convert("L")
    dark = sum(image.histogram()[:128])
    assert image.size == (1200, 1600) and dark > 0.01 * 1200 * 1600  # text and table lines, not a blank page

