"""The evaluation as one self-contained HTML file a person can read: the verdict, the ablation table, the Pass@k
chart (embedded), and per query the gold chunk's rank in every variant, its context and the top hits, with a switch
that shows only the queries contextual retrieval still fails. No external file, font or script: it opens from disk,
attached to a mail, or offline. ``#failures`` in the address opens it filtered."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Any

FAILURE_K = 20  # a query "fails" a variant when its gold chunk is not in that variant's top 20
SNIPPET_CHARS = 320
TOP_HITS = 3
_PRIMARY = ("plain hybrid", "contextual hybrid")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

_STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 72rem;
       padding: 0 1rem; color: #1d1d1f; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
.verdict { background: #f3f6fb; border-left: 4px solid #3d6fb6; padding: .8rem 1rem; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0; }
th, td { border-bottom: 1px solid #ddd; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #fafafa; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.miss { color: #b00020; font-weight: 600; } .hit { color: #17703a; }
details { margin: .2rem 0; } summary { cursor: pointer; }
.snippet { white-space: pre-wrap; font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; background: #f7f7f7;
           padding: .4rem; margin: .2rem 0; }
.note { color: #555; font-size: .9rem; } img { max-width: 100%; }
"""
_SCRIPT = """
function applyFilter() {
  var only = document.getElementById('only-failures').checked;
  var shown = 0;
  document.querySelectorAll('tr.query').forEach(function (row) {
    var hide = only && row.dataset.fails !== '1';
    row.hidden = hide;
    var detail = document.getElementById(row.id + '-detail');
    if (detail) { detail.hidden = hide; }
    if (!hide) { shown += 1; }
  });
  document.getElementById('shown').textContent = shown;
}
document.addEventListener('DOMContentLoaded', function () {
  var box = document.getElementById('only-failures');
  box.checked = window.location.hash === '#failures';
  box.addEventListener('change', applyFilter);
  applyFilter();
});
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _snippet(text: str) -> str:
    text = text.strip()
    return text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS].rstrip() + " ..."


def render_html(result: Any, *, chart: str | Path | None = None, verdict: str | None = None) -> str:
    """An ``EvalResult`` (``EvalResult.to_html`` calls this) as one HTML document (``chart``: a PNG to embed)."""
    variants = [row.name for row in result.rows if row.name in result.rankings]
    failing_variant = "contextual hybrid" if "contextual hybrid" in result.rankings else variants[-1]
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>Retrieval on {_e(result.corpus)}</title><style>{_STYLE}</style>",
             f"<script>{_SCRIPT}</script></head><body>",
             f"<h1>Retrieval on {_e(result.corpus)}</h1>",
             f'<p class="note">{result.chunks} chunks, {result.queries} queries; contexts: {_e(result.contextualizer)}'
             "</p>"]
    if verdict:
        parts.append(f'<p class="verdict" id="verdict">{_e(verdict)}</p>')
    parts += ["<h2>Variants</h2>", "<table id=\"ablation\"><thead><tr><th>variant</th><th>Pass@1</th><th>Pass@5"
              "</th><th>Pass@10</th><th>Pass@20</th><th>MRR</th><th>failure@20 [95% CI]</th><th>vs (points) [95% CI]"
              "</th></tr></thead><tbody>"]
    for row in result.rows:
        interval = (f" [{row.failure_interval[0]:.1%}, {row.failure_interval[1]:.1%}]" if row.failure_interval
                    else "")
        versus = ""
        if row.difference is not None and row.difference_interval is not None:
            lo, hi = row.difference_interval
            versus = f"{row.difference * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}] vs {row.compared_with}"
        mrr = f"{row.mrr:.3f}" if row.mrr is not None else ""
        parts.append(f"<tr><td>{_e(row.name)}</td><td class=\"num\">{row.pass_at[1]:.1%}</td><td class=\"num\">"
                     f"{row.pass_at[5]:.1%}</td><td class=\"num\">{row.pass_at[10]:.1%}</td><td class=\"num\">"
                     f"{row.pass_at[20]:.1%}</td><td class=\"num\">{mrr}</td><td class=\"num\">"
                     f"{row.failure_at_20:.1%}{interval}</td><td>{_e(versus)}</td></tr>")
    parts.append("</tbody></table>")
    note = result.meta.get("queries_note")
    if note:
        parts.append(f'<p class="note">{_e(note)}</p>')
    if chart is not None and Path(chart).exists():
        data = base64.b64encode(Path(chart).read_bytes()).decode("ascii")
        parts.append(f'<h2>Pass@k</h2><img id="chart" alt="Pass@5, Pass@10 and Pass@20 per variant" '
                     f'src="data:image/png;base64,{data}">')
    parts += ["<h2>Queries</h2>",
              f'<p><label><input type="checkbox" id="only-failures"> only the queries {_e(failing_variant)} fails '
              f'(gold chunk not in its top {FAILURE_K})</label>: <span id="shown">{result.queries}</span> shown. '
              f'Ranks are of the gold chunk (of {max((len(r[0]) for r in result.rankings.values() if r), default=0)} '
              "candidates; - when not among them).</p>",
              '<table id="queries"><thead><tr><th>#</th><th>query</th>'
              + "".join(f"<th>{_e(v)}</th>" for v in variants) + "</tr></thead><tbody>"]
    texts = result.chunk_texts
    for n, query in enumerate(result.query_list):
        ranks = {}
        for variant in variants:
            ranking = result.rankings[variant][n]
            found = [ranking.index(g) + 1 for g in query.gold if g in ranking]
            ranks[variant] = min(found) if found else None
        fails = ranks.get(failing_variant) is None or (ranks[failing_variant] or 0) > FAILURE_K
        cells = "".join(
            f'<td class="num {"miss" if r is None or r > FAILURE_K else "hit"}">{r if r is not None else "-"}</td>'
            for r in ranks.values())
        parts.append(f'<tr class="query" id="q{n}" data-fails="{1 if fails else 0}"><td class="num">{n + 1}</td>'
                     f"<td>{_e(query.query)}</td>{cells}</tr>")
        gold = query.gold[0]
        detail = [f'<tr id="q{n}-detail"><td></td><td colspan="{len(variants) + 1}"><details><summary>gold chunk '
                  f"{_e(gold)}, its context, the top hits</summary>",
                  f'<div class="snippet">{_e(_snippet(texts.get(gold, "")))}</div>',
                  f"<p><b>context:</b> {_e(_snippet(result.contexts.get(gold) or '(none)'))}</p>"]
        for variant in _PRIMARY:
            if variant not in result.rankings:
                continue
            detail.append(f"<p><b>{_e(variant)}</b> top {TOP_HITS}:</p>")
            for hit in result.rankings[variant][n][:TOP_HITS]:
                mark = " (gold)" if hit in query.gold else ""
                detail.append(f'<div class="snippet">{_e(hit)}{mark}: {_e(_snippet(texts.get(hit, "")))}</div>')
        detail.append("</details></td></tr>")
        parts.append("".join(detail))
    parts += ["</tbody></table>", "</body></html>"]
    return _LONE_SURROGATE.sub("\ufffd", "\n".join(parts))  # a query or file name that is not text stays readable
