"""The self-contained HTML report: one file, no scripts, no CDN, plots as inline SVG.

Every string that comes from the report (model names, tool names the model made up, reasons,
run settings) goes through :func:`html.escape`; the page has no ``<script>`` at all, so a
model that writes markup cannot run anything in a reader's browser.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from typing import Any

__all__ = ["render_html"]

_ARM_COLOR = "#d1495b"
_REF_COLOR = "#30638e"

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#222;max-width:1100px}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2.5rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .5rem;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}
.v-LOSSLESS{color:#2a7d2a;font-weight:bold}.v-MASKED_DAMAGE{color:#b36b00;font-weight:bold}
.v-DEGRADED{color:#b00020;font-weight:bold}.v-INCONCLUSIVE{color:#666;font-weight:bold}
.plots{display:flex;flex-wrap:wrap;gap:1.5rem}figure{margin:0}figcaption{font-size:.85rem;color:#555}
pre{background:#f8f8f8;padding:.5rem;overflow-x:auto;font-size:.8rem}
.legend span{display:inline-block;width:.8rem;height:.8rem;margin:0 .3rem 0 1rem;vertical-align:middle}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(x: Any, fmt: str = "{:.3f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, (int, float)):
        return fmt.format(x)
    return _e(x)


def _pct(x: Any) -> str:
    return _num(x, "{:.1%}")


def _ci(ci: Any, fmt: str = "{:+.1%}") -> str:
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return "–"
    return f"[{_num(ci[0], fmt)}, {_num(ci[1], fmt)}]"


def _at(seq: Any, i: int) -> Any:
    return seq[i] if isinstance(seq, list) and i < len(seq) else None


def _g(cell: dict[str, Any], key: str, side: str) -> Any:
    """``cell[key][side]``, None when either level is missing or null (arm-only cells)."""
    v = cell.get(key)
    return v.get(side) if isinstance(v, dict) else None


def _finite(xs: Sequence[Any]) -> list[float]:
    return [float(x) for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]


def _svg_lines(title: str, xs: Sequence[Any], series: dict[str, tuple[Sequence[Any], str]],
               x_label: str, y_label: str) -> str:
    """A small line chart (y in [0, 1]) as inline SVG."""
    w, h, left, bottom, top, right = 360, 220, 44, 34, 12, 12
    pw, ph = w - left - right, h - top - bottom
    xv = _finite(xs)
    if not xv:
        return ""
    x0, x1 = min(xv), max(xv)
    span = (x1 - x0) or 1.0

    def px(x: float) -> float:
        return left + (x - x0) / span * pw

    def py(y: float) -> float:
        return top + (1 - max(0.0, min(1.0, y))) * ph

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
             f'aria-label="{_e(title)}">']
    for t in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{left}" x2="{w - right}" y1="{py(t):.1f}" y2="{py(t):.1f}" '
                     'stroke="#eee"/>')
        parts.append(f'<text x="{left - 4}" y="{py(t) + 4:.1f}" font-size="10" '
                     f'text-anchor="end">{t:.0%}</text>')
    for x in xv:
        parts.append(f'<text x="{px(x):.1f}" y="{h - bottom + 14}" font-size="10" '
                     f'text-anchor="middle">{x:g}</text>')
    for name, (ys, color) in series.items():
        pts = [(px(float(x)), py(float(y))) for x, y in zip(xs, ys, strict=False)
               if isinstance(x, (int, float)) and isinstance(y, (int, float)) and math.isfinite(y)]
        if not pts:
            continue
        path = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}">'
                     f"<title>{_e(name)}</title></polyline>")
        for a, b in pts:
            parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{color}"/>')
    parts.append(f'<text x="{left + pw / 2}" y="{h - 4}" font-size="11" '
                 f'text-anchor="middle">{_e(x_label)}</text>')
    parts.append(f'<text x="10" y="{top + ph / 2}" font-size="11" text-anchor="middle" '
                 f'transform="rotate(-90 10 {top + ph / 2})">{_e(y_label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _svg_bars(title: str, labels: Sequence[str], a: Sequence[Any], r: Sequence[Any]) -> str:
    """Grouped horizontal bars: candidate vs reference per label."""
    av, rv = _finite(a), _finite(r)
    if not av and not rv:
        return ""
    top_value = max([*av, *rv, 1e-9])
    row, left, w = 30, 120, 380
    h = row * len(labels) + 24
    pw = w - left - 50
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
             f'aria-label="{_e(title)}">']
    for i, (lab, x, y) in enumerate(zip(labels, a, r, strict=False)):
        y0 = 8 + i * row
        parts.append(f'<text x="{left - 6}" y="{y0 + 14}" font-size="10" '
                     f'text-anchor="end">{_e(lab)}</text>')
        for j, (v, color) in enumerate(((y, _REF_COLOR), (x, _ARM_COLOR))):
            val = float(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0
            bw = val / top_value * pw
            parts.append(f'<rect x="{left}" y="{y0 + j * 11}" width="{bw:.1f}" height="10" '
                         f'fill="{color}"/>')
            parts.append(f'<text x="{left + bw + 4:.1f}" y="{y0 + j * 11 + 9}" '
                         f'font-size="9">{val:.1%}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _histogram(values: Sequence[Any], bins: int = 12) -> tuple[list[float], list[int]]:
    v = _finite(values)
    if not v:
        return [], []
    lo, hi = min(v), max(v)
    width = (hi - lo) / bins or 1.0
    counts = [0] * bins
    for x in v:
        counts[min(bins - 1, int((x - lo) / width))] += 1
    return [lo + i * width for i in range(bins + 1)], counts


def _svg_histograms(title: str, arm: Sequence[Any], ref: Sequence[Any]) -> str:
    """Overlaid histograms (shared bins) of decision margins."""
    both = _finite([*arm, *ref])
    if not both:
        return ""
    lo, hi = min(both), max(both)
    edges, _ = _histogram([lo, hi])
    bins = len(edges) - 1
    width = (hi - lo) / bins or 1.0

    def counts(xs: Sequence[Any]) -> list[int]:
        c = [0] * bins
        for x in _finite(xs):
            c[min(bins - 1, int((x - lo) / width))] += 1
        return c

    ca, cr = counts(arm), counts(ref)
    na, nr = max(sum(ca), 1), max(sum(cr), 1)
    fa, fr = [c / na for c in ca], [c / nr for c in cr]
    top_value = max([*fa, *fr, 1e-9])
    w, h, left, bottom = 360, 200, 30, 30
    pw, ph = w - left - 10, h - bottom - 10
    bw = pw / bins
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
             f'aria-label="{_e(title)}">']
    for i in range(bins):
        for f, color in ((fr, _REF_COLOR), (fa, _ARM_COLOR)):
            bh = f[i] / top_value * ph
            parts.append(f'<rect x="{left + i * bw:.1f}" y="{10 + ph - bh:.1f}" '
                         f'width="{bw - 1:.1f}" height="{bh:.1f}" fill="{color}" fill-opacity="0.5"/>')
    parts.append(f'<text x="{left}" y="{h - 12}" font-size="10">{lo:.2g}</text>')
    parts.append(f'<text x="{w - 10}" y="{h - 12}" font-size="10" text-anchor="end">{hi:.2g}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{h - 2}" font-size="11" '
                 'text-anchor="middle">top-1 − top-2 logit margin</text>')
    parts.append("</svg>")
    return "".join(parts)


def _margin_series(margins: Any) -> tuple[list[Any], list[Any]] | None:
    """Margin values per arm, from ``{"arm": [...], "reference": [...]}`` (lists, or dicts
    holding a ``values`` list)."""
    if not isinstance(margins, dict):
        return None
    out: list[list[Any]] = []
    for side in ("arm", "reference"):
        v = margins.get(side)
        if isinstance(v, dict):
            v = v.get("values")
        if not isinstance(v, list):
            return None
        out.append(v)
    return out[0], out[1]


def _top_names(top: Any, limit: int = 5) -> str:
    """``[[name, count], ...]`` as escaped text; names are model output (may hold markup)."""
    if not isinstance(top, list):
        return "–"
    items = [f"<code>{_e(t[0])}</code> ×{_e(t[1])}" for t in top[:limit]
             if isinstance(t, (list, tuple)) and len(t) == 2]
    return ", ".join(items) or "–"


def _legend(arm: str, ref: str) -> str:
    return (f'<div class="legend"><span style="background:{_ARM_COLOR}"></span>{_e(arm)}'
            f'<span style="background:{_REF_COLOR}"></span>{_e(ref)} (reference)</div>')


def _user_side_block(cell: dict[str, Any]) -> str:
    """The user simulator's own tool calls per side (issue 22.6): calls, failed calls and
    failed calls per episode; they count toward the error budget but in no agent channel.
    Empty when neither side has user tool calls."""
    side = cell.get("user_side") or {}
    rows = []
    for label, key in ((cell.get("arm") or "arm", "arm"),
                       (cell.get("reference") or "reference", "reference")):
        d = side.get(key)
        if not isinstance(d, dict):
            continue
        by = ", ".join(f"{k} {v}" for k, v in sorted((d.get("by_channel") or {}).items()))
        rows.append(f"<tr><td class=l>{_e(label)}</td><td>{_num(d.get('calls'), '{}')}</td>"
                    f"<td>{_num(d.get('failures'), '{}')}</td>"
                    f"<td>{_num(d.get('failures_per_episode'), '{:.2f}')}</td>"
                    f"<td class=l>{_e(by or '—')}</td></tr>")
    if not rows or not any((side.get(k) or {}).get("calls") for k in ("arm", "reference")):
        return ""
    return ('<table class="user-side"><tr><th class=l>user side</th><th>user tool calls</th>'
            "<th>failed</th><th>failed / episode</th><th class=l>by channel</th></tr>"
            + "".join(rows) + "</table><p>The simulated user's own failed calls count toward "
            "the error budget (τ²-bench) but in no agent channel.</p>")


def _cell_section(cell: dict[str, Any]) -> str:
    arm, ref = cell.get("arm") or "?", cell.get("reference")
    title = f"{cell.get('domain', '?')} · {arm} " + (f"vs {ref}" if ref else "(no reference arm)")
    ref = ref or "reference"
    verdict = str(cell.get("verdict", "?"))
    s = cell.get("success") or {}
    out = [f'<h2 id="{_e(cell.get("domain"))}-{_e(arm)}">{_e(title)}: '
           f'<span class="v-{_e(verdict)}">{_e(verdict)}</span></h2>']
    reasons = cell.get("reasons") or []
    if reasons:
        out.append("<ul>" + "".join(f"<li>{_e(r)}</li>" for r in reasons) + "</ul>")
    from pytest_quantagent.report.terminal import cell_notes

    notes = cell_notes({"cells": [cell]})
    if notes:
        # The terminal's notes: user-side failed calls and tau2-bench honesty flags.
        out.append('<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    out.append(
        "<table><tr><th class=l></th><th>episodes</th><th>tool calls</th><th>success</th>"
        "<th>steps</th><th>recovery</th></tr>"
        f"<tr><td class=l>{_e(arm)}</td><td>{_num(cell.get('episodes'), '{}')}</td>"
        f"<td>{_num(_g(cell, 'tool_calls', 'arm'), '{}')}</td><td>{_pct(s.get('arm'))}</td>"
        f"<td>{_num(_g(cell, 'steps', 'arm'), '{:.1f}')}</td>"
        f"<td>{_pct(_g(cell, 'recovery', 'arm'))}</td></tr>"
        f"<tr><td class=l>{_e(ref)}</td><td>{_num(cell.get('reference_episodes'), '{}')}</td>"
        f"<td>{_num(_g(cell, 'tool_calls', 'reference'), '{}')}</td>"
        f"<td>{_pct(s.get('reference'))}</td>"
        f"<td>{_num(_g(cell, 'steps', 'reference'), '{:.1f}')}</td>"
        f"<td>{_pct(_g(cell, 'recovery', 'reference'))}</td></tr></table>"
    )
    out.append(_user_side_block(cell))
    out.append(
        f"<p>Paired episodes: {_num(cell.get('paired'), '{}')}. Success difference "
        f"{_num(s.get('diff'), '{:+.1%}')} (CI {_ci(s.get('ci'))}), TOST p = "
        f"{_num(s.get('tost_p'), '{:.3g}')} at margin ±{_num(s.get('margin'), '{:.1%}')}, "
        f"McNemar p = {_num(s.get('mcnemar_p'), '{:.3g}')}.</p>"
    )
    chans: dict[str, Any] = cell.get("channels") or {}
    rows = []
    for name, c in chans.items():
        rows.append(
            f"<tr><td class=l>{_e(name)}</td><td>{_num(c.get('arm_count'), '{}')}</td>"
            f"<td>{_num(c.get('reference_count'), '{}')}</td><td>{_pct(c.get('arm_rate'))}</td>"
            f"<td>{_pct(c.get('reference_rate'))}</td><td>{_num(c.get('ratio'), '×{:.2f}')}</td>"
            f"<td>{_ci(c.get('ratio_ci'), '{:.2f}')}</td><td>{_num(c.get('p_holm'), '{:.2g}')}</td></tr>"
        )
    out.append(
        "<table><tr><th class=l>channel</th><th>arm</th><th>reference</th><th>arm rate</th>"
        "<th>reference rate</th><th>ratio</th><th>95% CI</th><th>Holm p</th></tr>"
        + "".join(rows) + "</table>"
    )
    plots = []
    b = cell.get("budget") or {}
    if b.get("K"):
        svg = _svg_lines("success by error budget", b["K"],
                         {arm: (b.get("arm") or [], _ARM_COLOR), ref: (b.get("reference") or [], _REF_COLOR)},
                         "error budget K", "success")
        plots.append(f"<figure>{svg}<figcaption>Success if episodes had ended at the K-th failed "
                     "tool call (counterfactual over stored trajectories)</figcaption></figure>")
    names = list(chans)
    if names:
        svg = _svg_bars("failures per tool call by channel", names,
                        [chans[n].get("arm_rate") for n in names],
                        [chans[n].get("reference_rate") for n in names])
        if svg:
            plots.append(f"<figure>{svg}<figcaption>Failed calls per tool call, by channel"
                         "</figcaption></figure>")
    ms = _margin_series(cell.get("margins"))
    if ms is not None:
        svg = _svg_histograms("decision margins", *ms)
        if svg:
            plots.append(f"<figure>{svg}<figcaption>Tool-name decision margins</figcaption></figure>")
    if plots:
        out.append(_legend(arm, ref) + '<div class="plots">' + "".join(plots) + "</div>")
    fs = cell.get("failure_set") or {}
    if fs:
        out.append("<table><tr><th class=l>failure set</th><th>Spearman</th><th>Kendall</th>"
                   "<th>novel share</th><th class=l>most frequent (candidate)</th>"
                   "<th class=l>most frequent (reference)</th></tr>" + "".join(
                       f"<tr><td class=l>{_e(n)}</td><td>{_num(v.get('spearman'), '{:.2f}')}</td>"
                       f"<td>{_num(v.get('kendall'), '{:.2f}')}</td>"
                       f"<td>{_pct(v.get('novel_share'))}</td>"
                       f"<td class=l>{_top_names(v.get('top_arm'))}</td>"
                       f"<td class=l>{_top_names(v.get('top_reference'))}</td></tr>"
                       for n, v in fs.items() if isinstance(v, dict)) + "</table>")
    out.append("<details><summary>all figures of this cell (JSON)</summary><pre>"
               + _e(json.dumps(cell, indent=2, sort_keys=True, default=str)) + "</pre></details>")
    return "\n".join(out)


def render_html(report: dict[str, Any]) -> str:
    """Render a report (DESIGN.md JSON, schema_version 1) as one self-contained HTML page."""
    run = report.get("run", {})
    cells = report.get("cells", [])
    summary_rows = []
    for c in cells:
        s = c.get("success") or {}
        b = c.get("budget") or {}
        k2 = ""
        if 2 in (b.get("K") or []):
            i = b["K"].index(2)
            k2 = f"{_pct(_at(b.get('arm'), i))} vs {_pct(_at(b.get('reference'), i))}"
        top = max(
            ((n, ch.get("ratio")) for n, ch in (c.get("channels") or {}).items()
             if isinstance(ch.get("ratio"), (int, float))),
            key=lambda t: t[1], default=None,
        )
        verdict = str(c.get("verdict", "?"))
        summary_rows.append(
            f'<tr><td class=l><a href="#{_e(c.get("domain"))}-{_e(c.get("arm"))}">'
            f"{_e(c.get('domain'))}</a></td><td class=l>{_e(c.get('arm'))}</td>"
            f"<td>{_pct(s.get('arm'))} vs {_pct(s.get('reference'))}</td><td>{k2 or '–'}</td>"
            f"<td class=l>{'–' if top is None else _e(top[0]) + ' ×' + _num(top[1], '{:.2f}')}</td>"
            f'<td class="l v-{_e(verdict)}">{_e(verdict)}</td></tr>'
        )
    run_rows = "".join(f"<tr><th class=l>{_e(k)}</th><td class=l>{_e(json.dumps(v, default=str))}</td></tr>"
                       for k, v in sorted(run.items()))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>pytest-quantagent report</title><style>{_CSS}</style></head><body>"
        "<h1>pytest-quantagent report</h1>"
        f"<p>schema_version {_e(report.get('schema_version'))}; {len(cells)} cell(s).</p>"
        "<table><tr><th class=l>domain</th><th class=l>arm</th><th>success at run budget</th>"
        "<th>success at K=2</th><th class=l>largest channel ratio</th><th class=l>verdict</th></tr>"
        + "".join(summary_rows) + "</table>"
        + "\n".join(_cell_section(c) for c in cells)
        + "<h2>Run</h2><table>" + run_rows + "</table></body></html>\n"
    )
