"""An evaluation's result: its rows with intervals, as Markdown, JSON or a PNG chart."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctx_retrieval.evaluation.corpus import EvalQuery
from ctx_retrieval.evaluation.metrics import (
    BOOTSTRAP_RESAMPLES,
    COPIED_BY_USERS,
    COPIED_WARNING,
    K_VALUES,
    bootstrap_interval,
    pass_per_query,
)


@dataclass(frozen=True)
class VariantScore:
    name: str
    pass_at: dict[int, float]
    failure_at_20: float
    failure_reduction_vs_plain_dense: float | None = None
    failure_interval: tuple[float, float] | None = None  # 95% bootstrap interval of failure@20 over queries
    compared_with: str | None = None  # the plain variant this one is read against
    difference: float | None = None  # failure@20 minus compared_with's (negative: fewer failures)
    difference_interval: tuple[float, float] | None = None
    mrr: float | None = None  # mean reciprocal rank of the first gold chunk


@dataclass
class EvalResult:
    corpus: str
    contextualizer: str
    queries: int
    chunks: int
    rows: list[VariantScore]
    meta: dict[str, Any] = field(default_factory=dict)
    rankings: dict[str, list[list[str]]] = field(default_factory=dict, repr=False)  # per variant, per query
    contexts: dict[str, str | None] = field(default_factory=dict, repr=False)  # the contexts evaluated
    query_list: list[EvalQuery] = field(default_factory=list, repr=False)  # the queries, in ranking order
    chunk_texts: dict[str, str] = field(default_factory=dict, repr=False)

    def verdict(self, ingestion: dict[str, Any] | None = None) -> str:
        """One paragraph in plain words: whether contextual hybrid retrieval fails fewer queries than plain hybrid
        on this corpus (failure@20 with its paired 95% interval), and what writing the contexts cost per million
        document tokens (``ingestion``: ``cost_usd``, ``cost_per_million_document_tokens``, ``document_tokens``,
        ``model``, as ``meta["ingestion"]`` holds them)."""
        rows = {r.name: r for r in self.rows}
        contextual, plain = rows.get("contextual hybrid"), rows.get("plain hybrid")
        if contextual is None or plain is None or contextual.difference_interval is None:
            return ""
        found = self.meta.get("queries_copied")
        copied = float(found) if isinstance(found, (int, float)) else None
        refused = copied is not None and copied >= 3 * COPIED_BY_USERS and bool(self.meta.get("queries_generated"))
        text = self._refusal(copied) if refused and copied is not None else self._outcome(contextual, plain)
        ingestion = ingestion or {}
        per_million = ingestion.get("cost_per_million_document_tokens")
        if per_million is not None:
            text += (f" Writing the contexts cost ${per_million:.2f} per million document tokens on this corpus "
                     f"({ingestion.get('model')}: ${ingestion.get('cost_usd', 0.0):.4f} for about "
                     f"{ingestion.get('document_tokens', 0):,} document tokens).")
        elif ingestion.get("cost_usd") == 0:
            text += f" The contexts evaluated cost nothing to write here ({ingestion.get('model')})"
            estimated = ingestion.get("estimated_cost_per_million_document_tokens")
            text += (f"; writing them with {ingestion.get('estimated_model')} would cost about ${estimated:.2f} per "
                     "million document tokens on this corpus (a dry run's estimate)." if estimated else ".")
        if self.meta.get("queries_note"):
            text += " The queries are synthetic: read the difference between variants, not the absolute rates."
        if copied is not None and copied >= COPIED_WARNING and not refused:
            text += (f" Warning: the questions quote their chunks more than people's do ({copied:.0%} of their word "
                     f"triples; at most {COPIED_WARNING:.0%} in the sets of people's questions measured), which "
                     "favours the BM25 side; check with some of your users' real questions.")
        return text

    @staticmethod
    def _refusal(copied: float) -> str:
        """No verdict from generated questions that quote their chunks (template questions)."""
        return (f"No verdict: the generated questions quote their chunks ({copied:.0%} of their word triples are in "
                f"the chunk they were written from, against {COPIED_BY_USERS:.0%} for questions people wrote on the "
                "cookbook corpus), as template questions do (the API twin writes such), so they favour whatever "
                "matches words and rank the variants unlike real users' questions. Write the questions with a real "
                "model (--contextualizer anthropic or openai), or pass your users' questions with --queries.")

    def _outcome(self, contextual: VariantScore, plain: VariantScore) -> str:
        """Whether contextual hybrid fails fewer queries than plain hybrid, and whether a single side beats it."""
        assert contextual.difference_interval is not None
        fewer = -(contextual.difference or 0.0) * 100 + 0.0  # + 0.0: never "-0.0"
        lo, hi = (-b * 100 + 0.0 for b in reversed(contextual.difference_interval))
        n = self.queries
        where = (f"contextual hybrid search misses the right chunk in its top 20 for {contextual.failure_at_20:.1%} of "
                 f"the {n} queries, plain hybrid search for {plain.failure_at_20:.1%}")
        if contextual.failure_at_20 == plain.failure_at_20 == 0:
            text = (f"Both contextual and plain hybrid search find the right chunk in their top 20 for all {n} "
                    "queries: these queries cannot tell them apart at 20; compare Pass@5 in the table, or ask "
                    "harder questions.")
        elif lo > 0:
            text = (f"Contextual retrieval helps on this corpus: {where}, {fewer:.1f} points fewer failures (95% "
                    f"interval {lo:.1f} to {hi:.1f}).")
        elif hi < 0:
            text = (f"Contextual retrieval hurts on this corpus: {where}, {-fewer:.1f} points more failures (95% "
                    f"interval {-hi:.1f} to {-lo:.1f}).")
        else:
            text = (f"No difference this evaluation can detect: {where} ({fewer:+.1f} points fewer failures, 95% "
                    f"interval {lo:+.1f} to {hi:+.1f}); one query is {100 / max(n, 1):.1f} points, so more queries "
                    "would narrow it.")
        return text + self._better_than_hybrid(contextual)

    def _better_than_hybrid(self, contextual: VariantScore) -> str:
        """A sentence when another variant of the run misses fewer queries than contextual hybrid beyond the paired
        95% interval of the difference (a single side beating the fusion means the other side drags it down), with
        the setting that fixes it; nothing from a difference the queries cannot tell from chance."""
        n = max(self.queries, 1)
        best = min((r for r in self.rows if r.name != "contextual hybrid"), key=lambda r: r.failure_at_20,
                   default=None)
        if best is None or (contextual.failure_at_20 - best.failure_at_20) * n < 1 - 1e-9:
            return ""
        if best.name not in self.rankings or "contextual hybrid" not in self.rankings or not self.query_list:
            return ""  # no per-query rankings (a result read back from JSON): no interval, no advice
        fails = {name: [1.0 - v for v in pass_per_query(self.rankings[name], self.query_list, self.chunk_texts, 20)]
                 for name in (best.name, "contextual hybrid")}
        _, hi = bootstrap_interval(fails[best.name], against=fails["contextual hybrid"])
        if hi >= 0:
            return ""  # within chance: one or two questions of many are no advice
        fewer = round((contextual.failure_at_20 - best.failure_at_20) * n)
        if best.name.endswith("BM25"):
            fix = ("the dense side drags the fusion down here: embed with a model that fits the corpus (--embedder e5 "
                   "for languages other than English or chunks over MiniLM's 256 tokens; E5Embedder() in Python), "
                   "or weight BM25 above the vectors")
        elif best.name.endswith("dense"):
            fix = ("the BM25 side drags the fusion down here: check its analysis for this corpus' languages "
                   "(--bm25-tokenizer), or weight the vectors above BM25")
        else:
            fix = f"use the {best.name} setup"
        return (f" But {best.name} alone misses the right chunk for only {best.failure_at_20:.1%} of the queries, "
                f"{fewer} fewer than contextual hybrid: {fix}.")

    def to_html(self, path: str | Path, *, chart: str | Path | None = None) -> Path:
        """The report as one self-contained HTML file (``evaluation.html``), with the verdict."""
        from ctx_retrieval.evaluation.html import render_html

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_html(self, chart=chart, verdict=self.verdict(self.meta.get("ingestion"))),
                        encoding="utf-8")
        return path

    def to_markdown(self) -> str:
        lines = [f"Retrieval on {self.corpus} ({self.chunks} chunks, {self.queries} queries); contexts: "
                 f"{self.contextualizer}", "",
                 "| variant | Pass@1 | Pass@5 | Pass@10 | Pass@20 | MRR | failure@20 [95% CI] | vs plain (points) "
                 "[95% CI] |", "|---|---|---|---|---|---|---|---|"]
        for row in self.rows:
            interval = (f" [{row.failure_interval[0]:.1%}, {row.failure_interval[1]:.1%}]"
                        if row.failure_interval else "")
            versus = ""
            if row.difference is not None and row.difference_interval is not None:
                lo, hi = row.difference_interval
                versus = f"{row.difference * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}] vs {row.compared_with}"
            mrr = f"{row.mrr:.3f}" if row.mrr is not None else ""
            lines.append(f"| {row.name} | {row.pass_at[1]:.1%} | {row.pass_at[5]:.1%} | {row.pass_at[10]:.1%} | "
                         f"{row.pass_at[20]:.1%} | {mrr} | {row.failure_at_20:.1%}{interval} | {versus} |")
        lines += ["", f"Intervals: {BOOTSTRAP_RESAMPLES} bootstrap resamples of the queries (seeded), paired for "
                      f"differences; one query is {100 / max(self.queries, 1):.1f} points."]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"corpus": self.corpus, "contextualizer": self.contextualizer, "queries": self.queries,
                "chunks": self.chunks, "rows": [asdict(r) for r in self.rows], "meta": self.meta,
                "verdict": self.verdict(self.meta.get("ingestion")), "contexts": self.contexts}

    def chart(self, path: str | Path) -> Path:
        """A PNG bar chart of Pass@1/5/10/20 per variant (needs matplotlib: ``ctx-retrieval[eval]``)."""
        from ctx_retrieval._optional import require

        require("matplotlib", "eval")
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(10, 4.8), dpi=110)
        width = 0.2
        xs = range(len(self.rows))
        for n, k in enumerate(K_VALUES):
            values = [r.pass_at[k] * 100 for r in self.rows]
            bars = ax.bar([x + (n - 1.5) * width for x in xs], values, width, label=f"Pass@{k}")
            ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
        ax.set_xticks(list(xs), [r.name.replace(" ", "\n") for r in self.rows], fontsize=8)
        low = min(r.pass_at[1] for r in self.rows) * 100
        ax.set_ylim(max(0, low - 10), 100)
        ax.set_ylabel("Pass@k (%)")
        ax.set_title(f"{self.corpus}, contexts: {self.contextualizer}", fontsize=10)
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return path
