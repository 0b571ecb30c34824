"""Writing an evaluation down: per-query JSON lines and one self-contained HTML page.

The page needs no network and no script: a table of metrics per configuration with each nDCG@10's
interval and its paired comparison with the first configuration, an inline SVG bar plot of nDCG@10
with the intervals as whiskers, the cross-validation when there was one, and the median latency of
each search stage. Every piece of text is escaped, and the page is well-formed XML, so it can also
be read by an XML parser.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

from citeline import __version__
from citeline.errors import InvalidRequestError
from citeline.eval.beir import STAGES, ConfigResult, Evaluation, Spread
from citeline.eval.stats import CrossValidation, RepeatedCrossValidation, interval_text

#: The marker of a difference whose interval and test disagree, and its footnote (table and page).
DISAGREE_MARK = "†"
DISAGREE_NOTE = "interval and test disagree: too few queries differ to tell; more questions can settle it"


def marked(verdict: str) -> str:
    """A comparison's verdict as the table and the page show it: a disagreement carries its mark."""
    return f"{verdict} {DISAGREE_MARK}" if verdict == "disagree" else verdict


_SVG_NS = "http://www.w3.org/2000/svg"
#: One colour per stage, in the order of ``STAGES``; a stage added later reuses them in turn.
_STAGE_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948", "#9c755f")
_BAR = "#4e79a7"
_BEST = "#e15759"

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 60rem; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: 0.5rem 0; }
th, td { padding: 0.25rem 0.6rem; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child, td.settings { text-align: left; }
td.settings { font-family: ui-monospace, monospace; font-size: 12px; color: #555; }
tr.best td { font-weight: 600; }
.meta, .note { color: #555; }
svg text { font: 12px system-ui, sans-serif; fill: #222; }
"""


def check_writable(path: Path) -> None:
    """Fail before a long run if ``path`` cannot be written (missing folder, a folder in its place, or no
    right to write there): the file is opened for appending, which changes nothing in one that exists,
    and removed again if this made it."""
    if path.is_dir():
        raise InvalidRequestError(f"cannot write {path}: it is a folder")
    if not path.parent.is_dir():
        raise InvalidRequestError(f"cannot write {path}: the folder {path.parent} does not exist")
    existed = path.exists()
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise InvalidRequestError(f"cannot write {path}: {exc.strerror or exc}") from exc
    if not existed:
        path.unlink(missing_ok=True)


def write_per_query(evaluation: Evaluation, path: Path) -> int:
    """One JSON object per query and configuration (see :meth:`QueryResult.as_dict`); returns the count."""
    lines = [json.dumps(q.as_dict()) for r in evaluation.results for q in r.queries]
    _write(path, "".join(line + "\n" for line in lines))
    return len(lines)


def write_report(evaluation: Evaluation, path: Path) -> None:
    """The HTML page of :func:`render_html`, written to ``path``."""
    _write(path, render_html(evaluation))


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InvalidRequestError(f"cannot write {path}: {exc.strerror or exc}") from exc


def render_html(evaluation: Evaluation) -> str:
    """One self-contained page: metrics table, nDCG@10 bars and per-stage latency medians."""
    e = escape
    metrics = [r.metrics() for r in evaluation.results]
    # Every configuration tied at the best is in bold, as every tied bar is red in the plot.
    top = max((m["ndcg@10"] for m in metrics), default=None)
    best = {i for i, m in enumerate(metrics) if m["ndcg@10"] == top}
    rows = []
    for i, (result, m) in enumerate(zip(evaluation.results, metrics, strict=True)):
        settings = "; ".join(f"{k}={v}" for k, v in m["settings"].items()) or "(current settings)"
        rows.append(
            ('<tr class="best">' if i in best else "<tr>") + f"<td>{e(result.config.name)}</td>"
            f'<td class="settings">{e(settings)}</td><td>{m["ndcg@10"]:.3f}</td>'
            + _spread_cells(evaluation.spreads.get(result.config.name))
            + "".join(f"<td>{m[key]:.3f}</td>" for key in ("recall@10", "recall@100", "mrr@10"))
            + f"<td>{m['latency_p50_ms']:.1f}</td><td>{m['latency_p99_ms']:.1f}</td></tr>"
        )
    stage_rows = [
        f"<tr><td>{e(r.config.name)}</td>"
        + "".join(f"<td>{m['stage_p50_ms'][s]:.1f}</td>" for s in STAGES)
        + f"<td>{m['latency_p50_ms']:.1f}</td></tr>"
        for r, m in zip(evaluation.results, metrics, strict=True)
    ]
    stage_heads = "".join(f"<th>{e(s)}</th>" for s in STAGES)
    queries = metrics[0]["queries"] if metrics else 0
    title = f"citeline eval: {evaluation.dataset}"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<title>{e(title)}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>{e(title)}</h1>
<p class="meta">namespace {e(evaluation.namespace)}; {queries} queries per configuration;
corpus: {evaluation.corpus_added} entries ingested, {evaluation.corpus_unchanged} unchanged
({evaluation.ingest_seconds:.1f} s); citeline {e(__version__)}.</p>

<h2>Metrics per configuration</h2>
<table id="metrics">
<thead><tr><th>configuration</th><th>settings</th><th>nDCG@10</th><th>95% CI</th><th>Δ vs first</th>
<th>Δ 95% CI</th><th>p vs first</th><th>verdict</th><th>recall@10</th><th>recall@100</th>
<th>MRR@10</th><th>p50 ms</th><th>p99 ms</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody>
</table>
<p class="note" id="verdicts">Ranking metrics are means over the queries; the best nDCG@10 is in bold
and red below. The 95% CI is a bootstrap interval over the queries. Δ is the configuration's nDCG@10
minus the first configuration's, on the same queries, with its paired bootstrap interval; p is the
two-sided paired randomisation test of Δ. A difference is called real (higher or lower) only when its
interval excludes 0 and p is below 0.05; when neither does it is not shown.
{DISAGREE_MARK} {DISAGREE_NOTE}.</p>

<h2>nDCG@10</h2>
{ndcg_svg(evaluation.results, evaluation.spreads)}
{_cross_validation_section(evaluation.cross_validation, evaluation.repeated_cross_validation)}
<h2>Latency by stage (median ms per query)</h2>
{latency_svg(evaluation.results)}
<table id="stages">
<thead><tr><th>configuration</th>{stage_heads}<th>whole search p50</th></tr></thead>
<tbody>
{chr(10).join(stage_rows)}
</tbody>
</table>
<p class="note">Each stage's median is taken on its own, so the stages need not add up to the median of
the whole search; the whole search also counts time between stages.</p>
</body>
</html>
"""


def _spread_cells(spread: Spread | None) -> str:
    """The interval, difference, its interval, p-value and verdict cells of one row of the metrics table."""
    if spread is None:
        return "<td></td>" * 5
    cells = f"<td>{spread.ci[0]:.3f} to {spread.ci[1]:.3f}</td>"
    vs = spread.vs_first
    if vs is None:
        return cells + "<td></td>" * 4
    p = "&lt;0.001" if vs.p_value < 0.001 else f"{vs.p_value:.3f}"
    delta = f"<td>{vs.delta:+.3f}</td><td>{interval_text(vs.delta_ci)}</td>"
    return cells + delta + f"<td>{p}</td><td>{marked(vs.verdict)}</td>"


def _cross_validation_section(cv: CrossValidation | None, repeated: RepeatedCrossValidation | None) -> str:
    if cv is None:
        return ""
    k = len(cv.folds)
    rows = "\n".join(
        f"<tr><td>{f.index + 1}</td><td>{len(f.held_out)}</td><td>{escape(f.picked)}</td>"
        f"<td>{f.score:.3f}</td></tr>"
        for f in cv.folds
    )
    picks = "\n".join(f"<tr><td>{escape(name)}</td><td>{n} of {k}</td></tr>" for name, n in cv.picks.items())
    return f"""
<h2>{k}-fold cross-validation</h2>
<p>Held-out nDCG@10: <strong id="held-out">{cv.held_out_mean:.3f}</strong>. Best on all queries:
{escape(cv.best_in_sample)}, {cv.best_in_sample_mean:.3f}.</p>
<table id="folds">
<thead><tr><th>fold</th><th>queries</th><th>picked on the other folds</th><th>held-out nDCG@10</th>
</tr></thead>
<tbody>
{rows}
</tbody>
</table>
<table id="picks">
<thead><tr><th>configuration</th><th>picked</th></tr></thead>
<tbody>
{picks}
</tbody>
</table>
<p class="note">The queries were shuffled with seed {cv.seed} and dealt into {k} folds. For each fold, the
configuration with the best mean nDCG@10 on the other folds was picked and scored on this fold alone.
The held-out nDCG@10 is what picking among these configurations is worth on queries it did not see;
the best score on all queries overstates it.</p>
{_shuffles_paragraph(repeated)}"""


def _shuffles_paragraph(repeated: RepeatedCrossValidation | None) -> str:
    if repeated is None:
        return ""
    first = escape(repeated.first)
    vs = repeated.vs_first
    return f"""<p id="shuffles">Over {repeated.shuffles} deals of the queries into folds (seeds 0 to
{repeated.shuffles - 1}): held-out nDCG@10 <strong>{repeated.held_out_mean:.3f}</strong>
({min(repeated.held_out_means):.3f} to {max(repeated.held_out_means):.3f}), above keeping {first}
({repeated.first_mean:.3f}) in <strong>{repeated.above_first} of {repeated.shuffles}</strong>. Choosing
against keeping {first}, query by query: Δ {vs.delta:+.3f}
({interval_text(vs.delta_ci)}), {vs.verdict}.</p>
"""


def ndcg_svg(results: Sequence[ConfigResult], spreads: Mapping[str, Spread] | None = None) -> str:
    """Horizontal bars of nDCG@10 on a 0..1 axis, one per configuration, with its interval as a whisker."""
    label_w, plot_w, row_h, top = 150, 420, 26, 10
    values = [r.metrics()["ndcg@10"] for r in results]
    best = max(values, default=0.0)
    height = top + row_h * len(results) + 30
    parts = [
        f'<svg xmlns="{_SVG_NS}" id="ndcg" width="{label_w + plot_w + 60}" height="{height}" '
        f'role="img" aria-label="nDCG@10 per configuration">'
    ]
    axis_y = top + row_h * len(results)
    for tick in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        x = label_w + tick * plot_w
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{axis_y}" stroke="#ddd"/>')
        parts.append(f'<text x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle">{tick:.1f}</text>')
    for i, (result, value) in enumerate(zip(results, values, strict=True)):
        y = top + i * row_h
        width = max(0.0, min(1.0, value)) * plot_w
        colour = _BEST if value == best else _BAR
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 17}" text-anchor="end">{escape(result.config.name)}</text>'
            f'<rect class="bar" x="{label_w}" y="{y + 4}" width="{width:.1f}" height="{row_h - 8}" '
            f'fill="{colour}"><title>{escape(result.config.name)}: {value:.4f}</title></rect>'
        )
        spread = (spreads or {}).get(result.config.name)
        end = width
        if spread is not None:
            low, high = (max(0.0, min(1.0, v)) * plot_w + label_w for v in spread.ci)
            mid = y + row_h / 2
            parts.append(
                f'<path class="ci" d="M{low:.1f} {mid - 5:.1f}V{mid + 5:.1f}M{low:.1f} {mid:.1f}H{high:.1f}'
                f'M{high:.1f} {mid - 5:.1f}V{mid + 5:.1f}" stroke="#222" fill="none">'
                f"<title>95% CI {spread.ci[0]:.3f} to {spread.ci[1]:.3f}</title></path>"
            )
            end = max(width, high - label_w)
        parts.append(f'<text x="{label_w + end + 6:.1f}" y="{y + 17}">{value:.3f}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def latency_svg(results: Sequence[ConfigResult]) -> str:
    """Stacked horizontal bars of each stage's median latency, one bar per configuration, with a legend."""
    label_w, plot_w, row_h, top = 150, 420, 26, 30
    medians = [r.metrics()["stage_p50_ms"] for r in results]
    longest = max((sum(m.values()) for m in medians), default=0.0) or 1.0
    scale = plot_w / longest
    height = top + row_h * len(results) + 30
    parts = [
        f'<svg xmlns="{_SVG_NS}" id="latency" width="{label_w + plot_w + 80}" height="{height}" '
        f'role="img" aria-label="median latency per search stage and configuration">'
    ]
    x = float(label_w)
    for j, stage in enumerate(STAGES):
        colour = _STAGE_COLOURS[j % len(_STAGE_COLOURS)]
        parts.append(
            f'<rect x="{x:.1f}" y="6" width="10" height="10" fill="{colour}"/>'
            f'<text x="{x + 14:.1f}" y="15">{escape(stage)}</text>'
        )
        x += 18 + 7.5 * len(stage) + 12
    axis_y = top + row_h * len(results)
    parts.append(f'<line x1="{label_w}" y1="{axis_y}" x2="{label_w + plot_w}" y2="{axis_y}" stroke="#999"/>')
    parts.append(f'<text x="{label_w}" y="{axis_y + 16}" text-anchor="middle">0</text>')
    parts.append(
        f'<text x="{label_w + plot_w}" y="{axis_y + 16}" text-anchor="middle">{longest:.1f} ms</text>'
    )
    for i, (result, m) in enumerate(zip(results, medians, strict=True)):
        y = top + i * row_h
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 17}" text-anchor="end">{escape(result.config.name)}</text>'
        )
        x = float(label_w)
        for j, stage in enumerate(STAGES):
            width = m[stage] * scale
            parts.append(
                f'<rect class="stage" x="{x:.1f}" y="{y + 4}" width="{width:.1f}" height="{row_h - 8}" '
                f'fill="{_STAGE_COLOURS[j % len(_STAGE_COLOURS)]}"><title>{escape(result.config.name)}, '
                f"{escape(stage)}: {m[stage]:.1f} ms</title></rect>"
            )
            x += width
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 17}">{sum(m.values()):.1f} ms</text>')
    parts.append("</svg>")
    return "\n".join(parts)
