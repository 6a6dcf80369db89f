"""The self-contained HTML report: one file, no scripts, no CDN, plots as inline SVG.

Every string that comes from the report (model names, tool names the model made up, reasons,
run settings, test messages) goes through :func:`html.escape`; the page has no ``<script>``
at all, so a model that writes markup cannot run anything in a reader's browser.

Layout, top to bottom: what was run (model, arms, user simulator, tasks), the tests that
failed and why, one summary row per cell, then one section per cell built from the blocks
in :data:`CELL_BLOCKS` (each a function ``cell -> html``; add a block by appending one).
Everywhere the **reference comes first, then the candidate** (as in the terminal table).
"""

from __future__ import annotations

import html
import itertools
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from pytest_quantagent.backends.secrets import redact

__all__ = ["CELL_BLOCKS", "render_html"]

_ARM_COLOR = "#d1495b"
_REF_COLOR = "#30638e"

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem;color:#222;max-width:1100px}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2.5rem;border-bottom:1px solid #ddd}
h3{font-size:1rem;margin:1.2rem 0 .3rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .5rem;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}
.wide{overflow-x:auto;max-width:100%}
.v-LOSSLESS{color:#2a7d2a;font-weight:bold}.v-MASKED_DAMAGE{color:#b36b00;font-weight:bold}
.v-DEGRADED{color:#b00020;font-weight:bold}.v-INCONCLUSIVE{color:#666;font-weight:bold}
.j-changed{color:#b00020;font-weight:bold}.j-same{color:#2a7d2a}.j-cannot{color:#666}
.plots{display:flex;flex-wrap:wrap;gap:1.5rem}figure{margin:0;max-width:100%}
figure svg{max-width:100%;height:auto}figcaption{font-size:.85rem;color:#555;max-width:380px}
pre{background:#f8f8f8;padding:.5rem;overflow-x:auto;font-size:.8rem;white-space:pre-wrap}
.legend span{display:inline-block;width:.8rem;height:.8rem;margin:0 .3rem 0 1rem;vertical-align:middle}
.alias{background:#eef;border-radius:3px;padding:0 .2rem;font-style:italic}
.answers{padding-left:1.2rem;font-size:1.05rem}.answers a{color:inherit;text-decoration:none}
td.why{min-width:22rem;width:60%}code{overflow-wrap:anywhere}.failed{color:#b00020}.skipped{color:#666}
"""

# Alias tokens of the bundled tokenizer (bundled/tokenizer.py: DEFAULT_ALIASES and the
# kinds `train_reference.py vocab --aliases` adds). The transformers backend maps each alias
# the model writes back to the id it stands for in the conversation; one that stays in a
# failing name stood for nothing there (the model made up a slot).
_ALIAS_KINDS = ("order", "pay", "user", "email", "item", "track", "zip",
                "name", "place", "phone", "bill", "line", "cust", "num")
_ALIAS_RE = re.compile(r"&lt;(" + "|".join(_ALIAS_KINDS) + r")(\d+)&gt;")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _name(value: Any) -> str:
    """A model-written name, escaped, with bundled alias tokens shown as what they are."""
    return _ALIAS_RE.sub(
        lambda m: (f'<span class="alias" title="alias token &lt;{m.group(1)}{m.group(2)}&gt; '
                   f'of the bundled tokenizer, bound to no id in the conversation">'
                   f"⟨{m.group(1)} {m.group(2)}⟩</span>"),
        _e(value),
    )


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


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _finite(xs: Sequence[Any]) -> list[float]:
    return [float(x) for x in xs if _is_num(x)]


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (steps of 1, 2 or 5 × 10^k)."""
    span = hi - lo
    raw = span / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step + 1e-9) * step
    out, t = [], start
    while t <= hi + step * 1e-6:
        out.append(round(t, 10))
        t += step
    return out


def _y_range(values: Sequence[float], *, floor: float | None = None, ceil: float | None = None,
             min_span: float = 0.1, include: Sequence[float] = ()) -> tuple[float, float]:
    """A y range that shows differences of a few points: the data's range, padded, at least
    ``min_span`` wide, clipped to [floor, ceil], rounded out to ticks."""
    v = [*values, *include]
    lo, hi = min(v), max(v)
    pad = max((hi - lo) * 0.15, (min_span - (hi - lo)) / 2, 0.0)
    lo, hi = lo - pad, hi + pad
    if floor is not None:
        lo = max(lo, floor)
    if ceil is not None:
        hi = min(hi, ceil)
    ticks = _ticks(lo, hi)
    return min(ticks[0], lo), max(ticks[-1], hi)


class _Plot:
    """A linear x/y frame in SVG coordinates, with axes and tick labels."""

    def __init__(self, title: str, xs: Sequence[float], y0: float, y1: float, *,
                 y_fmt: str = "{:.0%}", w: int = 380, h: int = 230) -> None:
        self.w, self.h, self.left, self.bottom, self.top, self.right = w, h, 50, 36, 12, 14
        self.pw, self.ph = w - self.left - self.right, h - self.top - self.bottom
        self.x0, self.x1 = min(xs), max(xs)
        self.y0, self.y1 = y0, y1
        self.parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
                      f'viewBox="0 0 {w} {h}" role="img" aria-label="{_e(title)}">']
        ticks = _ticks(y0, y1)
        if len(ticks) > 1 and round((ticks[1] - ticks[0]) * 100, 6) % 1:
            y_fmt = y_fmt.replace(".0%", ".1%")  # 2.5-point steps: 82.5%, not 82%
        for t in ticks:
            if not (y0 - 1e-9 <= t <= y1 + 1e-9):
                continue
            t = 0.0 if abs(t) < 1e-12 else t  # "0%", not "-0%"
            y = self.py(t)
            self.parts.append(f'<line x1="{self.left}" x2="{w - self.right}" y1="{y:.2f}" '
                              f'y2="{y:.2f}" stroke="#e4e4e4"/>')
            self.parts.append(f'<text class="ytick" data-value="{t:g}" x="{self.left - 4}" '
                              f'y="{y + 4:.2f}" font-size="10" text-anchor="end">'
                              f"{y_fmt.format(t)}</text>")
        for x in xs:
            self.parts.append(f'<text x="{self.px(x):.2f}" y="{h - self.bottom + 14}" '
                              f'font-size="10" text-anchor="middle">{x:g}</text>')

    def px(self, x: float) -> float:
        return self.left + (x - self.x0) / ((self.x1 - self.x0) or 1.0) * self.pw

    def py(self, y: float) -> float:
        y = max(self.y0, min(self.y1, y))
        return self.top + (1 - (y - self.y0) / ((self.y1 - self.y0) or 1.0)) * self.ph

    def line(self, name: str, pts: Sequence[tuple[float, float]], color: str,
             series: str) -> None:
        if not pts:
            return
        path = " ".join(f"{self.px(x):.2f},{self.py(y):.2f}" for x, y in pts)
        # The reference is drawn wide and light, so a candidate on top of it stays visible.
        width = "5\" stroke-opacity=\"0.45" if series == "reference" else "2"
        self.parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="{width}" '
                          f'points="{path}"><title>{_e(name)}</title></polyline>')
        for x, y in pts:
            self.parts.append(f'<circle class="pt" data-series="{series}" data-k="{x:g}" '
                              f'cx="{self.px(x):.2f}" cy="{self.py(y):.2f}" r="3" '
                              f'fill="{color}"><title>{_e(name)} K={x:g}: {y:.1%}</title>'
                              "</circle>")

    def band(self, pts: Sequence[tuple[float, float, float]], color: str) -> None:
        if not pts:
            return
        upper = [f"{self.px(x):.2f},{self.py(hi):.2f}" for x, _, hi in pts]
        lower = [f"{self.px(x):.2f},{self.py(lo):.2f}" for x, lo, _ in reversed(pts)]
        self.parts.append(f'<polygon class="band" points="{" ".join(upper + lower)}" '
                          f'fill="{color}" fill-opacity="0.18" stroke="none"/>')

    def hline(self, y: float) -> None:
        self.parts.append(f'<line x1="{self.left}" x2="{self.w - self.right}" '
                          f'y1="{self.py(y):.2f}" y2="{self.py(y):.2f}" stroke="#888" '
                          'stroke-dasharray="4 3"/>')

    def done(self, x_label: str, y_label: str) -> str:
        mid = self.top + self.ph / 2
        self.parts.append(f'<text x="{self.left + self.pw / 2}" y="{self.h - 4}" '
                          f'font-size="11" text-anchor="middle">{_e(x_label)}</text>')
        self.parts.append(f'<text x="11" y="{mid}" font-size="11" text-anchor="middle" '
                          f'transform="rotate(-90 11 {mid})">{_e(y_label)}</text>')
        self.parts.append("</svg>")
        return "".join(self.parts)


def _budget_points(b: dict[str, Any], side: str) -> list[tuple[float, float]]:
    ks, ys = b.get("K") or [], b.get(side) or []
    return [(float(k), float(y)) for k, y in zip(ks, ys, strict=False)
            if _is_num(k) and k >= 1 and _is_num(y)]


def _svg_budget(cell: dict[str, Any], arm: str, ref: str) -> str:
    """Success by error budget K ≥ 1 (K=0 is always 0), on a y scale fitted to the points."""
    b = cell.get("budget") or {}
    pa, pr = _budget_points(b, "arm"), _budget_points(b, "reference")
    if not pa and not pr:
        return ""
    xs = sorted({x for x, _ in [*pa, *pr]})
    lo, hi = _y_range([y for _, y in [*pa, *pr]], floor=0.0, ceil=1.0)
    p = _Plot("success by error budget", xs, lo, hi)
    p.line(f"{ref} (reference)", pr, _REF_COLOR, "reference")
    p.line(arm, pa, _ARM_COLOR, "arm")
    return p.done("error budget K (failed tool calls that end an episode)", "success")


def _svg_gap(cell: dict[str, Any]) -> str:
    """The paired gap (candidate − reference) by K ≥ 1 with its 95% CI band and zero line."""
    b = cell.get("budget") or {}
    ks, gap, cis = b.get("K") or [], b.get("gap") or [], b.get("gap_ci") or []
    pts = [(float(k), float(g)) for k, g in zip(ks, gap, strict=False)
           if _is_num(k) and k >= 1 and _is_num(g)]
    band = [(float(k), float(c[0]), float(c[1])) for k, c in zip(ks, cis, strict=False)
            if _is_num(k) and k >= 1 and isinstance(c, (list, tuple)) and len(c) == 2
            and _is_num(c[0]) and _is_num(c[1])]
    if not pts:
        return ""
    xs = sorted({x for x, _ in pts})
    lo, hi = _y_range([y for _, y in pts] + [v for _, a, c in band for v in (a, c)],
                      floor=-1.0, ceil=1.0, include=(0.0,))
    p = _Plot("gap by error budget", xs, lo, hi, y_fmt="{:+.0%}")
    p.band(band, _ARM_COLOR)
    p.hline(0.0)
    p.line("gap (candidate − reference)", pts, _ARM_COLOR, "gap")
    return p.done("error budget K", "candidate − reference")


def _svg_bars(title: str, labels: Sequence[str], a: Sequence[Any], r: Sequence[Any]) -> str:
    """Grouped horizontal bars: reference (top) then candidate, per label."""
    av, rv = _finite(a), _finite(r)
    if not av and not rv:
        return ""
    top_value = max([*av, *rv, 1e-9])
    row, left, w = 30, 120, 380
    h = row * len(labels) + 24
    pw = w - left - 50
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" role="img" aria-label="{_e(title)}">']
    for i, (lab, x, y) in enumerate(zip(labels, a, r, strict=False)):
        y0 = 8 + i * row
        parts.append(f'<text x="{left - 6}" y="{y0 + 14}" font-size="10" '
                     f'text-anchor="end">{_e(lab)}</text>')
        for j, (v, color) in enumerate(((y, _REF_COLOR), (x, _ARM_COLOR))):
            val = float(v) if _is_num(v) else 0.0
            bw = val / top_value * pw
            parts.append(f'<rect x="{left}" y="{y0 + j * 11}" width="{bw:.1f}" height="10" '
                         f'fill="{color}"/>')
            parts.append(f'<text x="{left + bw + 4:.1f}" y="{y0 + j * 11 + 9}" '
                         f'font-size="9">{val:.1%}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _margin_hists(margins: Any) -> tuple[list[str], list[float], list[float], int, int] | None:
    """Bin labels and each arm's share per bin, from the report's ``margins`` entry
    (``bins`` edges and per-arm ``{"hist": [...], "count": n}``, see
    :func:`pytest_quantagent.metrics.margins.margin_histogram`)."""
    if not isinstance(margins, dict):
        return None
    bins = margins.get("bins")
    if not isinstance(bins, list) or not bins:
        return None
    sides = []
    for side in ("reference", "arm"):
        v = margins.get(side)
        hist = v.get("hist") if isinstance(v, dict) else None
        if not isinstance(hist, list) or len(hist) != len(bins):
            return None
        sides.append([int(c) if _is_num(c) else 0 for c in hist])
    hr, ha = sides
    nr, na = sum(hr), sum(ha)
    if not nr and not na:
        return None
    labels = [f"{_num(lo, '{:g}')}–{_num(hi, '{:g}')}" for lo, hi in itertools.pairwise(bins)]
    labels.append(f"≥ {_num(bins[-1], '{:g}')}")
    return (labels, [c / nr if nr else 0.0 for c in hr], [c / na if na else 0.0 for c in ha],
            nr, na)


def _svg_margins(margins: Any) -> str:
    """Side-by-side histograms (share of decisions per margin bin), reference then candidate."""
    got = _margin_hists(margins)
    if got is None:
        return ""
    labels, fr, fa, _, _ = got
    top_value = max([*fr, *fa, 1e-9])
    w, h, left, bottom, top = 380, 210, 40, 40, 10
    pw, ph = w - left - 10, h - bottom - top
    bw = pw / len(labels)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" role="img" aria-label="decision margins">']
    for t in _ticks(0.0, top_value, 4):
        if t > top_value * 1.0001:
            continue
        y = top + ph - t / top_value * ph
        parts.append(f'<line x1="{left}" x2="{w - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" '
                     f'text-anchor="end">{t:.0%}</text>')
    for i, lab in enumerate(labels):
        for j, (f, color) in enumerate(((fr, _REF_COLOR), (fa, _ARM_COLOR))):
            bh = f[i] / top_value * ph
            x = left + i * bw + 2 + j * (bw - 4) / 2
            parts.append(f'<rect x="{x:.1f}" y="{top + ph - bh:.1f}" width="{(bw - 4) / 2:.1f}" '
                         f'height="{bh:.1f}" fill="{color}"><title>{f[i]:.1%}</title></rect>')
        parts.append(f'<text x="{left + (i + 0.5) * bw:.1f}" y="{h - bottom + 14}" '
                     f'font-size="10" text-anchor="middle">{_e(lab)}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{h - 6}" font-size="11" '
                 'text-anchor="middle">top-1 − top-2 logit margin of each decision</text>')
    parts.append("</svg>")
    return "".join(parts)


def _top_names(top: Any, limit: int = 5) -> str:
    """``[[name, count], ...]`` as escaped text; names are model output (may hold markup)."""
    if not isinstance(top, list):
        return "–"
    items = [f"<code>{_name(t[0])}</code> ×{_e(t[1])}" for t in top[:limit]
             if isinstance(t, (list, tuple)) and len(t) == 2]
    return ", ".join(items) or "–"


def _legend(arm: str, ref: str) -> str:
    return (f'<div class="legend"><span style="background:{_REF_COLOR}"></span>{_e(ref)} '
            f'(reference)<span style="background:{_ARM_COLOR}"></span>{_e(arm)}</div>')


def _user_side_block(cell: dict[str, Any]) -> str:
    """The user simulator's own tool calls per side (issue 22.6): calls, failed calls and
    failed calls per episode; they count toward the error budget but in no agent channel.
    Empty when neither side has user tool calls."""
    side = cell.get("user_side") or {}
    rows = []
    for label, key in ((cell.get("reference") or "reference", "reference"),
                       (cell.get("arm") or "arm", "arm")):
        d = side.get(key)
        if not isinstance(d, dict):
            continue
        by = ", ".join(f"{k} {v}" for k, v in sorted((d.get("by_channel") or {}).items()))
        ev = ", ".join(f"{k} {v}" for k, v in sorted((d.get("events") or {}).items()))
        rows.append(f"<tr><td class=l>{_e(label)}</td><td>{_num(d.get('calls'), '{}')}</td>"
                    f"<td>{_num(d.get('failures'), '{}')}</td>"
                    f"<td>{_num(d.get('failures_per_episode'), '{:.2f}')}</td>"
                    f"<td class=l>{_e(by or '—')}</td><td class=l>{_e(ev or '—')}</td></tr>")
    if not rows or not any((side.get(k) or {}).get("calls") or (side.get(k) or {}).get("events")
                           for k in ("arm", "reference")):
        return ""
    return ('<table class="user-side"><tr><th class=l>user side</th><th>user tool calls</th>'
            "<th>failed</th><th>failed / episode</th><th class=l>by channel</th>"
            "<th class=l>user events (of its own accord)</th></tr>"
            + "".join(rows) + "</table><p>The simulated user's own failed calls count toward "
            "the error budget (τ²-bench) but in no agent channel.</p>")


def _sides(cell: dict[str, Any]) -> tuple[str, str]:
    return str(cell.get("arm") or "?"), str(cell.get("reference") or "reference")


# --------------------------------------------------------------------------- cell blocks


def _block_reasons(cell: dict[str, Any]) -> str:
    out = []
    reasons = cell.get("reasons") or []
    if reasons:
        out.append("<ul>" + "".join(f"<li>{_name(r)}</li>" for r in reasons) + "</ul>")
    from pytest_quantagent.report.terminal import cell_notes

    notes = cell_notes({"cells": [cell]})
    if notes:
        # The terminal's notes: user-side failed calls and tau2-bench honesty flags.
        out.append('<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    return "".join(out)


def _block_figures(cell: dict[str, Any]) -> str:
    arm, ref = _sides(cell)
    s = cell.get("success") or {}

    def row(label: str, side: str, episodes: str) -> str:
        return (f"<tr><td class=l>{label}</td><td>{_num(cell.get(episodes), '{}')}</td>"
                f"<td>{_num(_g(cell, 'tool_calls', side), '{}')}</td><td>{_pct(s.get(side))}</td>"
                f"<td>{_num(_g(cell, 'steps', side), '{:.1f}')}</td>"
                f"<td>{_pct(_g(cell, 'recovery', side))}</td></tr>")

    return (
        "<div class=wide><table><tr><th class=l>arm</th><th>episodes</th><th>tool calls</th>"
        "<th>success</th><th>steps</th><th>recovery</th></tr>"
        + row(f"{_e(ref)} (reference)", "reference", "reference_episodes")
        + row(_e(arm), "arm", "episodes") + "</table></div>"
        f"<p>Paired episodes: {_num(cell.get('paired'), '{}')}. Success difference "
        f"(candidate − reference) {_num(s.get('diff'), '{:+.1%}')} "
        f"({_num(s.get('ci_level'), '{:.0%}')} CI {_ci(s.get('ci'))}, the one the TOST decides on), "
        f"TOST p = {_num(s.get('tost_p'), '{:.3g}')} at margin ±{_num(s.get('margin'), '{:.1%}')}, "
        f"one-sided p of a drop beyond the margin (DEGRADED's test) = "
        f"{_num(s.get('damage_p'), '{:.3g}')} (Holm {_num(s.get('harm_p_holm'), '{:.3g}')}), "
        f"of any drop {_num(s.get('harm_p'), '{:.3g}')}.</p>"
    )


def _block_channels(cell: dict[str, Any]) -> str:
    arm, ref = _sides(cell)
    chans: dict[str, Any] = cell.get("channels") or {}
    rows = [
        f"<tr><td class=l>{_e(name)}</td><td>{_num(c.get('reference_count'), '{}')}</td>"
        f"<td>{_num(c.get('arm_count'), '{}')}</td><td>{_pct(c.get('reference_rate'))}</td>"
        f"<td>{_pct(c.get('arm_rate'))}</td><td>{_num(c.get('ratio'), '×{:.2f}')}</td>"
        f"<td>{_ci(c.get('ratio_ci'), '{:.2f}')}</td><td>{_num(c.get('p_holm'), '{:.2g}')}</td></tr>"
        for name, c in chans.items() if isinstance(c, dict)
    ]
    return (
        f"<div class=wide><table><tr><th class=l>channel</th><th>{_e(ref)} count</th>"
        f"<th>{_e(arm)} count</th><th>{_e(ref)} rate</th><th>{_e(arm)} rate</th>"
        "<th>ratio</th><th>95% CI</th><th>Holm p</th></tr>" + "".join(rows) + "</table></div>"
    )


def _block_answers(cell: dict[str, Any]) -> str:
    """The answers per agent turn (empty, cut, length) and the termination reasons."""
    arm, ref = _sides(cell)
    out = []
    answers: dict[str, Any] = cell.get("answer_tests") or {}
    rows = []
    for name, t in answers.items():
        if not isinstance(t, dict):
            continue
        per = "{:.3g}" if t.get("kind") == "length" else "{:.2%}"
        thr = _num(t.get("threshold"), "×{:g}")
        rows.append(
            f"<tr><td class=l>{_e(name)}</td><td class=l>{_e(t.get('kind'))} ({_e(t.get('unit'))})</td>"
            f"<td>{_num(t.get('episodes'), '{}')}</td>"
            f"<td>{_num(t.get('reference_total'), '{:g}')} / {_num(t.get('reference_turns'), '{}')}</td>"
            f"<td>{_num(t.get('arm_total'), '{:g}')} / {_num(t.get('arm_turns'), '{}')}</td>"
            f"<td>{_num(t.get('reference_per_turn'), per)}</td><td>{_num(t.get('arm_per_turn'), per)}</td>"
            f"<td>{_num(t.get('ratio'), '×{:.2f}')}</td><td>{_ci(t.get('ratio_ci'), '{:.2f}')}</td>"
            f"<td>{thr}</td><td>{_num(t.get('p_holm'), '{:.2g}')}</td></tr>")
    if rows:
        out.append(
            "<h3>Answers per agent turn</h3><div class=wide><table><tr><th class=l>claim</th>"
            f"<th class=l>kind</th><th>paired episodes</th><th>{_e(ref)} total / turns</th>"
            f"<th>{_e(arm)} total / turns</th><th>{_e(ref)} per turn</th><th>{_e(arm)} per turn</th>"
            "<th>ratio</th><th>95% CI</th><th>damage above</th><th>Holm p</th></tr>"
            + "".join(rows) + "</table></div>")
    terms: dict[str, Any] = cell.get("termination_tests") or {}
    rows = [
        f"<tr><td class=l>{_e(name)}</td><td>{_num(t.get('reference_count'), '{}')}</td>"
        f"<td>{_num(t.get('arm_count'), '{}')}</td><td>{_num(t.get('ratio'), '×{:.2f}')}</td>"
        f"<td>{_ci(t.get('ratio_ci'), '{:.2f}')}</td><td>{_num(t.get('increase'), '{:+.1%}')}</td>"
        f"<td>{_num(t.get('p_holm'), '{:.2g}')}</td></tr>"
        for name, t in terms.items() if isinstance(t, dict)]
    if rows:
        out.append(
            "<h3>Episodes by termination reason</h3><div class=wide><table><tr>"
            f"<th class=l>ended as</th><th>{_e(ref)} episodes</th><th>{_e(arm)} episodes</th>"
            "<th>ratio</th><th>95% CI</th><th>increase per episode</th><th>Holm p</th></tr>"
            + "".join(rows) + "</table></div>")
    return "".join(out)


def _block_comparability(cell: dict[str, Any]) -> str:
    """Every serving setting compared before any episode, both values and the status."""
    arm, ref = _sides(cell)
    block = cell.get("comparability") or {}
    settings: dict[str, Any] = block.get("settings") or {}
    if not settings:
        return ""
    rows = []
    for name, st in settings.items():
        if not isinstance(st, dict):
            continue
        status = str(st.get("status"))
        cls = {"differs": "j-changed", "same": "j-same"}.get(status, "j-cannot")
        src = st.get("source") or {}
        rows.append(f"<tr><td class=l>{_e(name)}</td><td class=l>{_e(st.get('reference'))}</td>"
                    f"<td class=l>{_e(st.get('arm'))}</td>"
                    f'<td class=l><span class="{cls}">{_e(status)}</span></td>'
                    f"<td class=l><small>{_e(src.get('reference'))} / {_e(src.get('arm'))}"
                    "</small></td></tr>")
    return ("<h3>Serving settings compared before any episode</h3><div class=wide><table><tr>"
            f"<th class=l>setting</th><th class=l>{_e(ref)}</th><th class=l>{_e(arm)}</th>"
            "<th class=l>status</th><th class=l>read from</th></tr>" + "".join(rows)
            + "</table></div>")


def _block_plots(cell: dict[str, Any]) -> str:
    arm, ref = _sides(cell)
    plots = []
    svg = _svg_budget(cell, arm, ref)
    if svg:
        plots.append(f'<figure class="budget">{svg}<figcaption>Success had episodes ended at '
                     "the K-th failed tool call (recomputed from the stored trajectories; "
                     "the y axis is fitted to the points)</figcaption></figure>")
    svg = _svg_gap(cell)
    if svg:
        plots.append(f'<figure class="gap">{svg}<figcaption>The paired gap (candidate − '
                     "reference) by K, with its 95% CI band; a gap that opens as K shrinks "
                     "is damage the error budget absorbs</figcaption></figure>")
    chans: dict[str, Any] = cell.get("channels") or {}
    names = list(chans)
    if names:
        svg = _svg_bars("failures per tool call by channel", names,
                        [chans[n].get("arm_rate") for n in names],
                        [chans[n].get("reference_rate") for n in names])
        if svg:
            plots.append(f"<figure>{svg}<figcaption>Failed calls per tool call, by channel"
                         "</figcaption></figure>")
    svg = _svg_margins(cell.get("margins"))
    if svg:
        got = _margin_hists(cell.get("margins"))
        n = "" if got is None else f" ({got[3]} and {got[4]} decisions)"
        plots.append(f'<figure class="margins">{svg}<figcaption>Decision margins: share of '
                     f"each arm's decisions per bin{n}; small margins flip first under "
                     "quantization</figcaption></figure>")
    if not plots:
        return ""
    return _legend(arm, ref) + '<div class="plots">' + "".join(plots) + "</div>"


def _block_failure_set(cell: dict[str, Any]) -> str:
    arm, ref = _sides(cell)
    fs = cell.get("failure_set") or {}
    rows = []
    for n, v in fs.items():
        if not isinstance(v, dict):
            continue
        j = v.get("judgement")
        jcls = {"changed": "j-changed", "same": "j-same"}.get(str(j), "j-cannot")
        judged = "–" if j is None else (f'<span class="{jcls}">{_e(j)}</span>'
                                        f"<br><small>{_e(v.get('judgement_reason') or '')}</small>")
        rows.append(
            f"<tr><td class=l rowspan=2><b>{_e(n)}</b></td>"
            f"<td>{_num(v.get('reference_total'), '{}')}</td>"
            f"<td>{_num(v.get('arm_total'), '{}')}</td>"
            f"<td>{_num(v.get('spearman'), '{:.2f}')} / {_num(v.get('kendall'), '{:.2f}')}</td>"
            f"<td>{_pct(v.get('novel_share'))}</td>"
            f"<td>{_num(v.get('p_changed'), '{:.2g}')}</td><td class=l>{judged}</td></tr>"
            f"<tr><td class=l colspan=6>most frequent in {_e(ref)}: "
            f"{_top_names(v.get('top_reference'))}<br>most frequent in {_e(arm)}: "
            f"{_top_names(v.get('top_arm'))}</td></tr>")
    if not rows:
        return ""
    return (
        "<h3>Failure sets: does the candidate fail in the same ways?</h3>"
        f"<div class=wide><table><tr><th class=l>channel</th><th>{_e(ref)} failures</th>"
        f"<th>{_e(arm)} failures</th><th>Spearman / Kendall</th><th>novel share</th>"
        "<th>permutation p</th><th class=l>gate (assert_failure_set_invariant)</th>"
        "</tr>" + "".join(rows) + "</table></div>"
        + ("<p><small><span class=alias>⟨zip 2⟩</span>: an alias token of the bundled model's "
           "tokenizer (it writes ids as numbered slots, mapped back to the conversation's "
           "ids) that stood for no id in the conversation: the model made the slot up."
           "</small></p>" if "class=\"alias\"" in "".join(rows) else "")
    )


def _block_json(cell: dict[str, Any]) -> str:
    return ("<details><summary>all figures of this cell (JSON)</summary><pre>"
            + _e(json.dumps(cell, indent=2, sort_keys=True, default=str)) + "</pre></details>")


CELL_BLOCKS: list[Callable[[dict[str, Any]], str]] = [
    _block_reasons, _block_figures, _user_side_block, _block_channels, _block_answers,
    _block_comparability, _block_plots, _block_failure_set, _block_json,
]
"""The blocks of a cell's section, in order (each returns escaped HTML or "")."""


def _cell_id(cell: dict[str, Any]) -> str:
    return f"{cell.get('domain')}-{cell.get('arm')}"


def _cell_section(cell: dict[str, Any]) -> str:
    arm, ref = cell.get("arm") or "?", cell.get("reference")
    title = f"{cell.get('domain', '?')} · {arm} " + (f"vs {ref}" if ref else "(no reference arm)")
    verdict = str(cell.get("verdict", "?"))
    head = (f'<h2 id="{_e(_cell_id(cell))}">{_e(title)}: '
            f'<span class="v-{_e(verdict)}">{_e(verdict)}</span></h2>')
    return "\n".join([head, *(b for b in (f(cell) for f in CELL_BLOCKS) if b)])


# --------------------------------------------------------------------------- page


def _run_block(run: dict[str, Any]) -> str:
    """What was run: the model and each arm's checkpoint, the user simulator, the design."""
    rows: list[tuple[str, str]] = []
    got = run.get("arm_specs")
    specs: dict[str, Any] = got if isinstance(got, dict) else {}
    models = sorted({str(s.get("model")) for s in specs.values()
                     if isinstance(s, dict) and s.get("model")})
    model = run.get("model") or (", ".join(models) if models else None)
    rows.append(("model", _e(model) if model else "–"))
    ref = run.get("reference")
    got_arms = run.get("arms")
    arms: list[Any] = got_arms if isinstance(got_arms, list) else []
    for label in ([ref] if ref else []) + [a for a in arms if a != ref]:
        s = specs.get(label) if isinstance(specs.get(label), dict) else None
        what = "–" if s is None else "; ".join(
            f"{_e(k)} {_e(redact(str(s[k])))}" for k in ("backend", "model", "path", "base_url",
                                            "quantization") if s.get(k))
        rows.append((f"arm {_e(label)}" + (" (reference)" if label == ref else ""), what))
    user = run.get("user")
    if user is not None:
        um = run.get("user_model")
        rows.append(("user simulator", _e(user) + (f" ({_e(um)})" if um else
                                                   " (the domain's scripted user)"
                                                   if user == "scripted" else "")))
    if run.get("judge"):
        rows.append(("NL-assertion judge", _e(run["judge"])))
    for key, label in (("domains", "domains"), ("tasks", "tasks per domain"),
                       ("trials", "trials per task"), ("seed", "seed"),
                       ("budget", "error budget K"), ("repair", "repair"),
                       ("tau2_data", "τ²-bench data")):
        if run.get(key) is not None:
            v = run[key]
            rows.append((label, _e(", ".join(map(str, v)) if isinstance(v, list) else v)))
    body = "".join(f"<tr><th class=l>{k}</th><td class=l>{v}</td></tr>" for k, v in rows)
    return f"<h2>What was run</h2><div class=wide><table>{body}</table></div>"


def _tests_block(tests: Any) -> str:
    """The tests that failed or were skipped, with the first lines of why."""
    if not isinstance(tests, list) or not tests:
        return ""
    rows = []
    for t in tests:
        if not isinstance(t, dict):
            continue
        outcome = str(t.get("outcome", "?"))
        cell = t.get("cell")
        link = (f'<a href="#{_e(cell)}">{_e(cell)}</a>' if cell else "–")
        rows.append(f'<tr><td class="l {_e(outcome)}">{_e(outcome)}</td>'
                    f"<td class=l><code>{_e(t.get('nodeid', '?'))}</code><br>cell {link}</td>"
                    f"<td class=\"l why\"><pre>{_name(t.get('message', ''))}</pre></td></tr>")
    n_failed = sum(1 for t in tests if isinstance(t, dict) and t.get("outcome") == "failed")
    return (f"<h2>Tests: {n_failed} failed, {len(rows) - n_failed} skipped</h2>"
            "<div class=wide><table><tr><th class=l>outcome</th><th class=l>test</th>"
            "<th class=l>why</th></tr>" + "".join(rows) + "</table></div>")


def answer_line(cell: dict[str, Any], model: str | None = None,
                counts: dict[str, int] | None = None) -> str:
    """One sentence per cell: "int4 of tiny-agent: LOSSLESS on telecom, 412 paired episodes,
    decided at look 3 of 6; tests 4 passed, 0 failed, 1 skipped" (plain text)."""
    arm, _, own_model = str(cell.get("arm")).partition("@")  # ARM@MODEL names its model
    model = own_model or model
    who = f"{arm} of {model}" if model else arm
    ref = cell.get("reference")
    verdict = cell.get("verdict") or "no verdict (no reference)"
    text = f"{who}: {verdict} on {cell.get('domain')}"
    if ref:
        text += f" against {ref}, {cell.get('paired', 0)} paired episodes"
    else:
        text += f", {cell.get('episodes', 0)} episodes"
    seq = cell.get("sequential")
    if isinstance(seq, dict) and seq.get("looks"):
        n = len(seq.get("planned_looks") or [])
        taken = seq.get("looks_taken", len(seq["looks"]))
        text += (f", decided at look {taken} of {n}" if seq.get("stopped") == "decided"
                 else f", undecided after {taken} of {n} looks ({str(seq.get('stopped')).replace('_', ' ')})")
    if counts:
        text += (f"; tests {counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed, "
                 f"{counts.get('skipped', 0)} skipped")
    return text


def _answers(report: dict[str, Any]) -> str:
    run = report.get("run", {}) or {}
    models = run.get("model")
    model = models if isinstance(models, str) else (
        models[0] if isinstance(models, list) and len(models) == 1 else None)
    counts = report.get("test_counts") or {}
    items = []
    for c in report.get("cells", []):
        verdict = str(c.get("verdict", "?"))
        spec = (run.get("arm_specs") or {}).get(c.get("arm")) or {}
        line = answer_line(c, spec.get("model") or model, counts.get(_cell_id(c)))
        items.append(f'<li class="v-{_e(verdict)}"><a href="#{_e(_cell_id(c))}">{_e(line)}</a></li>')
    return "<ul class=answers>" + "".join(items) + "</ul>" if items else ""


def render_html(report: dict[str, Any]) -> str:
    """Render a report (DESIGN.md JSON, schema_version 1) as one self-contained HTML page."""
    run = report.get("run", {}) or {}
    cells = report.get("cells", [])
    summary_rows = []
    for c in cells:
        s = c.get("success") or {}
        b = c.get("budget") or {}
        k2 = ""
        if 2 in (b.get("K") or []):
            i = b["K"].index(2)
            k2 = f"{_pct(_at(b.get('reference'), i))} → {_pct(_at(b.get('arm'), i))}"
        # A channel with failures in the candidate only has no finite ratio: it ranks first.
        ranked = [(float("inf"), n, f"{ch.get('arm_count')} vs 0")
                  for n, ch in (c.get("channels") or {}).items()
                  if isinstance(ch, dict) and ch.get("ratio") is None and ch.get("arm_count")
                  and not ch.get("reference_count")]
        ranked += [(float(ch["ratio"]), n, "×" + _num(ch["ratio"], "{:.2f}"))
                   for n, ch in (c.get("channels") or {}).items()
                   if isinstance(ch, dict) and _is_num(ch.get("ratio"))]
        top = max(ranked, key=lambda t: t[0], default=None)
        verdict = str(c.get("verdict", "?"))
        summary_rows.append(
            f'<tr><td class=l><a href="#{_e(_cell_id(c))}">{_e(c.get("domain"))}</a></td>'
            f"<td class=l>{_e(c.get('reference') or '–')} → {_e(c.get('arm'))}</td>"
            f"<td>{_pct(s.get('reference'))} → {_pct(s.get('arm'))}</td><td>{k2 or '–'}</td>"
            f"<td class=l>{'–' if top is None else _e(top[1]) + ' ' + _e(top[2])}</td>"
            f'<td class="l v-{_e(verdict)}">{_e(verdict)}</td></tr>'
        )
    run_rows = "".join(f"<tr><th class=l>{_e(k)}</th><td class=l>{_e(json.dumps(v, default=str))}</td></tr>"
                       for k, v in sorted(run.items()))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>pytest-quantagent report</title><style>{_CSS}</style></head><body>"
        "<h1>pytest-quantagent report</h1>" + _answers(report) +
        f"<p>schema_version {_e(report.get('schema_version'))}; {len(cells)} cell(s); "
        "everywhere the reference comes first, then the candidate.</p>"
        + "<h2>Cells</h2><div class=wide><table><tr><th class=l>domain</th>"
        "<th class=l>reference → candidate</th><th>success at run budget</th>"
        "<th>success at K=2</th><th class=l>largest channel ratio</th><th class=l>verdict</th>"
        "</tr>" + "".join(summary_rows) + "</table></div>"
        + _tests_block(report.get("tests")) + _run_block(run)
        + "\n".join(_cell_section(c) for c in cells)
        + "<h2>Run settings (raw)</h2><div class=wide><table>" + run_rows + "</table></div>"
        "</body></html>\n"
    )
