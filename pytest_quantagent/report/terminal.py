"""Rich terminal table of a report: one row per cell.

Columns: success at the run budget and at K=2 (reference → candidate, gap with its CI),
the largest channel ratios and the verdict; each cell's reasons follow the table, one per
line. Works on the report JSON (a dict) so a saved report re-renders without re-analysing.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pytest_quantagent.report.model import Report

_VERDICT_STYLE = {
    "LOSSLESS": "bold green",
    "MASKED_DAMAGE": "bold yellow",
    "DEGRADED": "bold red",
    "INCONCLUSIVE": "bold blue",
}


_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain_text(text: object) -> str:
    """Data (names, file names, model text, error messages) made safe to print: control
    characters (terminal escape sequences included) shown as ``\\xNN``; newlines and tabs
    kept."""
    return _CONTROL_RE.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def safe_text(text: object) -> str:
    """:func:`plain_text`, with rich markup escaped (``retail[/]`` prints as written)."""
    return escape(plain_text(text))


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _pts_ci(diff: float | None, ci: list[float] | None) -> str:
    if diff is None:
        return ""
    out = f"{100 * diff:+.1f} pts"
    if ci and ci[0] is not None and ci[1] is not None:
        out += f" [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"
    return out


def _success_at(cell: dict[str, Any], k: int) -> str:
    b = cell["budget"]
    if k not in b["K"]:
        return "—"
    i = b["K"].index(k)
    arm = b["arm"][i]
    ref = (b.get("reference") or [None] * len(b["K"]))[i]
    if cell.get("reference") is None:
        return _pct(arm)
    gap = (b.get("gap") or [None] * len(b["K"]))[i]
    gap_ci = (b.get("gap_ci") or [None] * len(b["K"]))[i]
    return f"{_pct(ref)} → {_pct(arm)}\n{_pts_ci(gap, gap_ci)}"


def _channels(cell: dict[str, Any], top: int = 2) -> str:
    rows = []
    for name, ch in cell["channels"].items():
        if cell.get("reference") is None:
            if ch.get("arm_count"):
                rows.append((ch.get("arm_rate") or 0.0, f"{name} {_pct(ch.get('arm_rate'))}"))
            continue
        ratio = ch.get("ratio")
        if ratio is None and ch.get("arm_count") and not ch.get("reference_count"):
            rows.append((float("inf"), f"{name} {ch['arm_count']} vs 0"))
        elif ratio is not None and (ch.get("arm_count") or ch.get("reference_count")):
            p = ch.get("p_holm")
            ptxt = "" if p is None else f" p={p:.1g}"
            est = ch.get("ratio_estimate")
            # the crude ratio, and the stratified estimate its CI is about when they part
            within = (f" (×{est:.2f} within {'pairs' if ch.get('strata') == 'pair' else 'tasks'})"
                      if isinstance(est, (int, float)) and math.isfinite(est) and ratio
                      and math.isfinite(ratio) and abs(math.log(max(est, 1e-9) / ratio)) > 0.1
                      else "")
            rows.append((ratio, f"{name} ×{ratio:.2f}{within}{ptxt}"))
    rows.sort(key=lambda r: -r[0])
    return "\n".join(text for _, text in rows[:top]) or "—"


def user_side_text(cell: dict[str, Any]) -> str | None:
    """The user simulator's own failed calls of a cell, per side: count and per-episode rate
    (``reference → arm``); None when neither side has a failed user call (the column then
    says nothing a reader needs, and the table keeps within 120 columns)."""
    side = cell.get("user_side") or {}
    ua, ur = side.get("arm"), side.get("reference")
    if not ua and not ur:
        return None
    if not (ua or {}).get("failures") and not (ur or {}).get("failures"):
        return None

    def one(d: dict[str, Any] | None) -> str:
        if not d:
            return "—"
        rate = d.get("failures_per_episode")
        return f"{d['failures']} ({'—' if rate is None else f'{rate:.2f}'}/ep)"

    if cell.get("reference") is None:
        return one(ua)
    return f"{one(ur)} → {one(ua)}"


def user_events_text(cell: dict[str, Any], sep: str = ", ", column: bool = False) -> str | None:
    """What the simulated user did of its own accord, per kind, ``reference → arm`` (e.g.
    ``not_understood 2 → 9``), kinds with no event on either side left out ("none" when
    every kind is 0); None when neither side reports user events. ``column``: for the
    table, each kind in words with its counts on a line of their own (``not understood`` /
    ``2 → 9``), so a narrow column wraps the words and never cuts a count."""
    side = cell.get("user_side") or {}
    ea = (side.get("arm") or {}).get("events") or {}
    er = (side.get("reference") or {}).get("events") or {}
    kinds = sorted(set(ea) | set(er))
    if not kinds:
        return None
    kinds = [k for k in kinds if ea.get(k) or er.get(k)]
    if not kinds:
        return "none"
    def counts(k: str) -> str:
        return str(ea.get(k, 0)) if cell.get("reference") is None else f"{er.get(k, 0)} → {ea.get(k, 0)}"

    if column:
        return "\n".join(f"{k.replace('_', ' ')}\n{counts(k)}" for k in kinds)
    return sep.join(f"{k} {counts(k)}" for k in kinds)


def build_table(report: Report | dict[str, Any], title: str = "pytest-quantagent") -> Table:
    """The rich table (one row per cell) of ``report``."""
    data = report.model_dump(mode="json") if isinstance(report, Report) else report
    table = Table(title=title, show_lines=True, caption_justify="left")
    table.add_column("domain / arm")
    table.add_column("episodes", justify="right")
    run_k = None
    cells = data.get("cells", [])
    with_user = any(user_side_text(c) is not None for c in cells)
    cols = ["success @ run budget", "success @ K=2", "largest channel ratios"]
    if with_user:
        cols.append("user-side failures")
    with_events = any(user_events_text(c) is not None for c in cells)
    if with_events:
        cols.append("user events")
    for col in (*cols, "verdict"):
        table.add_column(col)
    for cell in cells:
        ks = cell["budget"]["K"]
        run_k = ks[-1] if ks else None
        ref = cell.get("reference")
        name = safe_text(f"{cell['domain']} / {cell['arm']}" + (f"\nvs {ref}" if ref else ""))
        eps = str(cell["episodes"]) + (f"\n{cell['paired']} paired" if ref else "")
        s = cell["success"]
        if ref is None:
            run = _pct(s.get("arm"))
        else:
            run = f"{_pct(s.get('reference'))} → {_pct(s.get('arm'))}\n{_pts_ci(s.get('diff'), s.get('ci'))}"
        verdict = cell.get("verdict") or "arm only"
        style = _VERDICT_STYLE.get(verdict, "")
        vtext = f"[{style}]{verdict}[/]" if style else verdict
        seq = cell.get("sequential") or {}
        if seq:
            vtext += (f"\n{'decided at' if seq.get('stopped') == 'decided' else 'stopped at'} "
                      f"look {seq.get('looks_taken')} of {len(seq.get('planned_looks') or [])}")
        row = [name, eps, run, _success_at(cell, 2), safe_text(_channels(cell))]
        if with_user:
            row.append(user_side_text(cell) or "—")
        if with_events:
            row.append(safe_text(user_events_text(cell, column=True) or "—"))
        table.add_row(*row, vtext)
    if run_k is not None:
        level = next((c["success"].get("ci_level") for c in cells
                      if c["success"].get("ci_level")), None)
        score_ci = f"score CIs at {100 * level:g}% (the TOST's)" if level else "score CIs at 95%"
        table.caption = (f"run budget K={run_k}; candidate − reference; {score_ci}, gaps at K "
                         "with 95% CIs; channel p: one-sided vs max_ratio, Holm-adjusted"
                         + ("; user-side failures: the simulator's own failed calls, "
                            "reference → arm (in the error budget, in no channel)"
                            if with_user else "")
                         + ("; user events: what the simulated user did of its own accord, "
                            "reference → arm" if with_events else ""))
    return table


def _counts(d: dict[str, Any] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((d or {}).items()) if v) or "none"


def cell_notes(report: Report | dict[str, Any]) -> list[str]:
    """What the table has no column for, one line each: episodes that an exception in the
    agent or the user ended (a server refusing the request, or a bug in a backend: they
    score as failures, so they must not go unseen), failed calls made by the (LLM) user,
    kept out of the agent's channels, and the honesty flags of τ²-bench results files in the
    reader's own words (:meth:`pytest_quantagent.tau2.flags.Tau2Flags.lines`)."""
    data = report.model_dump(mode="json") if isinstance(report, Report) else report
    out: list[str] = []
    for cell in data.get("cells", []):
        name = f"{cell['domain']}/{cell['arm']}"
        terms = cell.get("terminations") or {}
        ended = {side: {k: v for k, v in (terms.get(side) or {}).items()
                        if k in ("agent_error", "user_error") and v}
                 for side in ("arm", "reference")}
        if any(ended.values()):
            out.append(
                f"{name}: episodes ended by an exception in the agent or user (scored as "
                f"failures; each record's error_message says why): arm {_counts(ended['arm'])}; "
                f"reference {_counts(ended['reference'])}"
            )
        uf = cell.get("user_failures")
        if uf and any((uf.get(side) or {}) for side in ("arm", "reference")):
            out.append(
                f"{name}: user-side failed calls (not in the agent's channels): "
                f"arm {_counts(uf.get('arm'))}; reference {_counts(uf.get('reference'))}"
            )
        flags = (cell.get("extra") or {}).get("tau2_flags")
        if flags:
            from pytest_quantagent.tau2.flags import Tau2Flags

            out.extend(f"{name} (tau2-bench file): {line}"
                       for line in Tau2Flags.from_dict(flags).lines())
    return out


def _p(p: Any) -> str:
    return "" if p is None else f", Holm p={p:.2g}" if p >= 1e-3 else f", Holm p={p:.0e}"


def _x(ratio: Any) -> str:
    return "" if ratio is None else f" ×{ratio:.3g}"


def answer_text(name: str, t: dict[str, Any]) -> str:
    """One answer-level test, ``reference → arm``: a length's mean per turn, a rate's share
    of turns and counts, the ratio and the Holm-adjusted p."""
    if t.get("kind") == "length":
        unit = "" if t.get("unit") == "tokens" else f" {t.get('unit')}"
        ref, arm = t.get("reference_per_turn"), t.get("arm_per_turn")
        vals = f"{'—' if ref is None else f'{ref:.3g}'} → {'—' if arm is None else f'{arm:.3g}'}"
        return f"{name}{unit} {vals}{_x(t.get('ratio'))}{_p(t.get('p_holm'))}"
    return (f"{name} {_pct(t.get('reference_per_turn'))} → {_pct(t.get('arm_per_turn'))} "
            f"({int(t.get('reference_total') or 0)} of {t.get('reference_turns')} → "
            f"{int(t.get('arm_total') or 0)} of {t.get('arm_turns')} turns)"
            f"{_x(t.get('ratio'))}{_p(t.get('p_holm'))}")


def comparability_text(block: dict[str, Any]) -> str:
    """Every serving setting compared, grouped by status (``differs`` and ``accepted`` with
    both values)."""
    settings: dict[str, Any] = block.get("settings") or {}
    groups: dict[str, list[str]] = {}
    for name, st in settings.items():
        status = st.get("status", "?")
        text = (f"{name} {st.get('reference')} vs {st.get('arm')}"
                if status in ("differs", "accepted", "informational") else name)
        groups.setdefault(status, []).append(text)
    order = ("differs", "accepted", "same", "unknown", "informational")
    parts = [f"{k}: {', '.join(groups[k])}" for k in order if k in groups]
    return f"{len(settings)} settings; " + "; ".join(parts)


def cell_test_lines(report: Report | dict[str, Any]) -> list[str]:
    """Per cell, what the table has no column for among the tests: the answers per agent
    turn, the termination reasons, and the serving settings compared."""
    data = report.model_dump(mode="json") if isinstance(report, Report) else report
    out: list[str] = []
    for cell in data.get("cells", []):
        name = f"{cell['domain']}/{cell['arm']}"
        answers = cell.get("answer_tests") or {}
        if answers:
            out.append(f"{name}: answers per agent turn (reference → arm): "
                       + "; ".join(answer_text(k.replace("_", " "), t) for k, t in answers.items()))
        terms = cell.get("termination_tests") or {}
        if terms:
            out.append(f"{name}: episodes ending as (reference → arm): " + "; ".join(
                f"{k} {t.get('reference_count')} → {t.get('arm_count')}{_x(t.get('ratio'))}"
                f"{_p(t.get('p_holm'))}" for k, t in terms.items()))
        comp = cell.get("comparability")
        if comp:
            out.append(f"{name}: serving compared (reference vs arm): {comparability_text(comp)}")
    return out


#: Narrower consoles (a piped command gets 80 columns) get one block per cell instead of
#: the table, whose six columns would wrap every reason over many lines.
TABLE_MIN_WIDTH = 120


def _plain_lines(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def build_blocks(report: Report | dict[str, Any]) -> list[str]:
    """The table's content as one block of plain lines per cell (no column wraps): for
    narrow terminals and pipes. Same order and figures as :func:`build_table`."""
    data = report.model_dump(mode="json") if isinstance(report, Report) else report
    out: list[str] = []
    run_k = None
    for cell in data.get("cells", []):
        ks = cell["budget"]["K"]
        run_k = ks[-1] if ks else run_k
        ref = cell.get("reference")
        verdict = cell.get("verdict") or "arm only"
        head = f"{cell['domain']} / {cell['arm']}" + (f" vs {ref}" if ref else "")
        s = cell["success"]
        eps = f"{cell['episodes']} episodes" + (f", {cell['paired']} paired" if ref else "")
        if ref is None:
            run = _pct(s.get("arm"))
        else:
            run = f"{_pct(s.get('reference'))} → {_pct(s.get('arm'))} ({_pts_ci(s.get('diff'), s.get('ci'))})"
        k2 = _success_at(cell, 2).split("\n")
        k2_text = k2[0] + (f" ({k2[1]})" if len(k2) > 1 and k2[1] else "")
        out.append(f"{head}: verdict {verdict}")
        out.append(f"  {eps}")
        out.append(f"  success at run budget: {run}")
        out.append(f"  success at K=2: {k2_text}")
        out.append(f"  largest channel ratios: {'; '.join(_channels(cell).splitlines())}")
        user = user_side_text(cell)
        if user:
            out.append(f"  user-side failures: {'; '.join(user.splitlines())}")
        events = user_events_text(cell)
        if events:
            out.append(f"  user events (reference → arm): {events}")
        out.extend(f"  - {_plain_lines(r)}" for r in cell.get("reasons") or [])
    if run_k is not None:
        out.append(f"(run budget K={run_k}; gaps are candidate − reference with 95% CIs; "
                   "p are Holm-adjusted)")
    return out


def reason_lines(report: Report | dict[str, Any]) -> list[str]:
    """Each cell's verdict reasons, one line each under its cell's name: printed below the
    table, whose verdict column holds the verdict only (a reason in a column wraps over
    dozens of lines)."""
    data = report.model_dump(mode="json") if isinstance(report, Report) else report
    out: list[str] = []
    for cell in data.get("cells", []):
        reasons = cell.get("reasons") or []
        if not reasons:
            continue
        out.append(f"{cell['domain']} / {cell['arm']}: {cell.get('verdict') or 'arm only'}")
        out.extend(f"  - {_plain_lines(r)}" for r in reasons)
    return out


def render_terminal(report: Report | dict[str, Any], console: Console | None = None) -> None:
    """Print the table to ``console`` (a new stdout console by default), then each cell's
    reasons (:func:`reason_lines`), or one block per cell when the console is narrower than
    :data:`TABLE_MIN_WIDTH`; then the notes of :func:`cell_notes`."""
    con = console or Console()
    if con.width < TABLE_MIN_WIDTH:
        for line in build_blocks(report):
            con.print(plain_text(line), markup=False, highlight=False, soft_wrap=True)
    else:
        con.print(build_table(report))
        for line in reason_lines(report):
            con.print(plain_text(line), markup=False, highlight=False, soft_wrap=True)
    for line in cell_test_lines(report):
        con.print(plain_text(line), markup=False, highlight=False, soft_wrap=True)
    for line in cell_notes(report):
        con.print(plain_text(line), markup=False, highlight=False)
