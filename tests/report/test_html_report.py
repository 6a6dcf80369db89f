"""The HTML report as a release manager reads it: the budget curve's drawn points equal the
cell's figures (parsed back from the SVG), margin histograms drawn from the JSON's own
format, alias tokens shown for what they are, reference before candidate, what was run."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from pytest_quantagent.metrics.margins import DEFAULT_MARGIN_BINS, margin_histogram
from pytest_quantagent.report.html import render_html

SVG = "{http://www.w3.org/2000/svg}"
KS = list(range(11))
ARM = [0.0, 0.78, 0.80, 0.80, 0.81, 0.82, 0.82, 0.82, 0.83, 0.83, 0.83]
REF = [0.0, 0.84, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85]


def _cell() -> dict[str, Any]:
    gap = [a - r for a, r in zip(ARM, REF, strict=True)]
    return {
        "domain": "telecom", "arm": "int2-rtn", "reference": "bf16", "episodes": 40,
        "reference_episodes": 40, "paired": 40, "tool_calls": {"arm": 350, "reference": 330},
        "success": {"arm": 0.83, "reference": 0.85, "diff": -0.02, "ci": [-0.07, 0.03],
                    "tost_p": 0.04, "mcnemar_p": 0.5, "margin": 0.075},
        "budget": {"K": KS, "arm": ARM, "reference": REF, "gap": gap,
                   "gap_ci": [[g - 0.05, g + 0.04] for g in gap]},
        "channels": {"unknown_tool": {"arm_count": 18, "reference_count": 0, "arm_rate": 0.05,
                                      "reference_rate": 0.0, "ratio": None, "ratio_ci": None,
                                      "p": 1e-5, "p_holm": 7e-5}},
        "failure_set": {"unknown_tool": {
            "spearman": -0.5, "kendall": -0.4, "novel_share": 1.0, "n_names": 3,
            "arm_total": 18, "reference_total": 2, "top_arm": [["<zip2>", 3], ["cancel_line", 2]],
            "top_reference": [["get_bill", 2]], "p_changed": 0.01,
            "judgement": "cannot judge", "judgement_reason": "18 vs 2 failures (needs 20 in each arm)"}},
        "margins": {"bins": list(DEFAULT_MARGIN_BINS),
                    "arm": margin_histogram([0.1, 0.2, 0.7, 3.0], DEFAULT_MARGIN_BINS),
                    "reference": margin_histogram([1.5, 3.0, 5.0, 9.0], DEFAULT_MARGIN_BINS),
                    "flip_n": [1, 0, 0, 1, 1, 1], "flip_rate": [None] * 6, "paired_episodes": 4},
        "verdict": "MASKED_DAMAGE", "reasons": ["unknown_tool 18 vs 0 (Holm p=7e-05)"],
    }


def _report() -> dict[str, Any]:
    return {"schema_version": 1, "cells": [_cell()],
            "run": {"model": None, "arms": ["int2-rtn"], "reference": "bf16", "user": "scripted",
                    "user_model": None, "tasks": "40", "trials": 1, "budget": 10,
                    "arm_specs": {"bf16": {"backend": "transformers", "model": "tiny-agent"},
                                  "int2-rtn": {"backend": "transformers", "model": "tiny-agent",
                                               "quantization": "int2-rtn-g128"}}},
            "tests": [{"nodeid": "test_gate.py::test_channels[telecom-int2-rtn]",
                       "cell": "telecom-int2-rtn", "outcome": "failed", "when": "call",
                       "message": "telecom-int2-rtn: 1 channel(s) amplified above ×1.2"}]}


def _figure(page: str, cls: str) -> ET.Element:
    m = re.search(rf'<figure class="{cls}">(<svg.*?</svg>)', page)
    assert m, f"no {cls} figure"
    return ET.fromstring(m.group(1))


def _y_to_value(svg: ET.Element) -> tuple[Any, float, float]:
    """The y axis's linear map, read back from its tick labels (value, pixel)."""
    ticks = [(float(t.get("data-value", "nan")), float(t.get("y", "nan")) - 4)
             for t in svg.iter(f"{SVG}text") if t.get("class") == "ytick"]
    assert len(ticks) >= 3
    (v0, y0), (v1, y1) = ticks[0], ticks[-1]
    return (lambda y: v0 + (y - y0) * (v1 - v0) / (y1 - y0)), min(v0, v1), max(v0, v1)


def test_budget_curve_points_are_the_cells_figures_from_k1_on_a_readable_scale() -> None:
    page = render_html(_report())
    svg = _figure(page, "budget")
    to_value, lo, hi = _y_to_value(svg)
    pts = [c for c in svg.iter(f"{SVG}circle") if c.get("class") == "pt"]
    drawn = {(c.get("data-series"), int(c.get("data-k", "-1"))): to_value(float(c.get("cy", "nan")))
             for c in pts}
    # K = 1..10 of each arm, no K=0 (success at K=0 is 0 by definition).
    assert sorted(drawn) == sorted([("arm", k) for k in KS[1:]] + [("reference", k) for k in KS[1:]])
    for (series, k), v in drawn.items():
        want = (ARM if series == "arm" else REF)[k]
        assert v == pytest.approx(want, abs=1e-3), (series, k)
    # A 7-point spread is drawn on an axis well under 100 points tall.
    assert hi - lo <= 0.3 and lo > 0.5


def test_gap_plot_has_the_ci_band_and_the_gap_points() -> None:
    page = render_html(_report())
    svg = _figure(page, "gap")
    to_value, lo, hi = _y_to_value(svg)
    assert lo <= -0.11 and hi >= 0.0  # the lowest CI bound (-0.06 - 0.05) and zero fit
    band = next(p for p in svg.iter(f"{SVG}polygon") if p.get("class") == "band")
    ys = [to_value(float(xy.split(",")[1])) for xy in band.get("points", "").split()]
    gap = [a - r for a, r in zip(ARM, REF, strict=True)]
    assert min(ys) == pytest.approx(min(g - 0.05 for g in gap[1:]), abs=1e-3)
    assert max(ys) == pytest.approx(max(g + 0.04 for g in gap[1:]), abs=1e-3)
    pts = {int(c.get("data-k", "-1")): to_value(float(c.get("cy", "nan")))
           for c in svg.iter(f"{SVG}circle")}
    assert pts == pytest.approx({k: gap[k] for k in KS[1:]}, abs=1e-3)


def test_margin_histograms_are_drawn_from_the_reports_fields() -> None:
    page = render_html(_report())
    svg = _figure(page, "margins")
    bars = [r for r in svg.iter(f"{SVG}rect")]
    assert len(bars) == 2 * len(DEFAULT_MARGIN_BINS)
    shares = [r.find(f"{SVG}title").text for r in bars]  # type: ignore[union-attr]
    # Reference then candidate per bin: bin [0, 0.5) holds 0 of 4 and 2 of 4 decisions.
    assert shares[:2] == ["0.0%", "50.0%"]
    assert "(4 and 4 decisions)" in page


def test_aliases_reference_order_what_was_run_and_failed_tests() -> None:
    page = render_html(_report())
    assert "&lt;zip2&gt;</span>" not in page and "⟨zip 2⟩" in page
    assert "<zip2>" not in page
    # Reference first everywhere: summary row, failure-set columns, legend.
    assert "bf16 → int2-rtn" in page and "85.0% → 83.0%" in page
    assert "<td class=l>unknown_tool 18 vs 0</td>" in page  # no finite ratio: ranked first
    head = page[page.index("Failure sets"):]
    assert head.index("most frequent in bf16") < head.index("most frequent in int2-rtn")
    assert "get_bill" in page  # the reference's failing names are shown
    assert "cannot judge" in page and "needs 20 in each arm" in page
    assert "quantization int2-rtn-g128" in page and "arm bf16 (reference)" in page
    assert "scripted (the domain's scripted user)" in page
    assert "Tests: 1 failed, 0 skipped" in page
    assert 'href="#telecom-int2-rtn">telecom-int2-rtn</a>' in page


def _records(arm: str, failed_calls: int) -> list[Any]:
    from pytest_quantagent.store.records import CallRecord, EpisodeRecord

    out = []
    for t in range(6):
        calls = [CallRecord(step=1 + i, requestor="assistant", name="get_thing_x", error=True,
                            channel="unknown_tool", entity="get_thing_x")
                 for i in range(failed_calls if t % 2 else 0)]
        calls.append(CallRecord(step=9, requestor="assistant", name="get_details", error=False))
        out.append(EpisodeRecord(
            key=f"{arm}-{t}", model="m", arm=arm, backend="fake", domain="telecom",
            task_id=str(t), trial=0, seed=t, max_errors=10, max_steps=50,
            termination="user_stop", reward=1.0, success=True, n_errors=0, steps=5, calls=calls))
    return out


def test_recovery_without_failed_calls_has_no_rate() -> None:
    # The reference never fails a call: there is nothing to recover, so no rate ("–", not
    # 0.0%); the candidate's one failed call in three episodes is followed by a good call
    # (recovered), its second is not: 50%.
    from pytest_quantagent.report.model import CellInput, analyze

    cell = CellInput(domain="telecom", arm="int4", records=_records("int4", 2),
                     reference="bf16", reference_records=_records("bf16", 0))
    report = analyze([cell]).model_dump(mode="json")
    assert report["cells"][0]["recovery"] == {"arm": 0.5, "reference": None}
    page = render_html(report)
    rows = dict(re.findall(r"<tr><td class=l>([^<]*)</td>(?:<td>[^<]*</td>){4}<td>([^<]*)</td></tr>", page))
    assert rows == {"bf16 (reference)": "–", "int4": "50.0%"}


def test_the_report_opens_with_one_answer_per_cell_and_its_test_counts() -> None:
    from pytest_quantagent.report.html import answer_line, render_html

    cell = {"domain": "telecom", "arm": "int4", "reference": "bf16", "paired": 412,
            "verdict": "LOSSLESS", "sequential": {"looks": [{}, {}, {}], "looks_taken": 3,
                                                  "planned_looks": [{}] * 6, "stopped": "decided"}}
    counts = {"passed": 4, "failed": 0, "skipped": 1}
    assert answer_line(cell, "tiny-agent", counts) == (
        "int4 of tiny-agent: LOSSLESS on telecom against bf16, 412 paired episodes, decided at "
        "look 3 of 6; tests 4 passed, 0 failed, 1 skipped")
    undecided = {**cell, "verdict": "INCONCLUSIVE",
                 "sequential": {**cell["sequential"], "stopped": "cap", "looks_taken": 6}}
    assert answer_line(undecided).endswith("undecided after 6 of 6 looks (cap)")
    fixed = {k: v for k, v in cell.items() if k != "sequential"}
    assert answer_line(fixed) == "int4: LOSSLESS on telecom against bf16, 412 paired episodes"
    other = {**fixed, "arm": "int4@tiny-agent-prone", "reference": "bf16@tiny-agent-prone"}
    assert answer_line(other, "tiny-agent") == (
        "int4 of tiny-agent-prone: LOSSLESS on telecom against bf16@tiny-agent-prone, 412 "
        "paired episodes")
    page = render_html({"schema_version": 1, "run": {"model": ["tiny-agent"]},
                        "cells": [{**cell, "arm": "<b>x</b>"}],
                        "test_counts": {"telecom-<b>x</b>": counts}})
    head = page[page.index("<h1>"):page.index("<h2>")]
    assert '<ul class=answers><li class="v-LOSSLESS">' in head
    assert "&lt;b&gt;x&lt;/b&gt; of tiny-agent: LOSSLESS" in head and "<b>x</b>" not in head
    assert "tests 4 passed, 0 failed, 1 skipped" in head
