"""Notes under the terminal table: user-side failures and τ²-bench honesty flags."""

from __future__ import annotations

import html
from typing import Any

from rich.console import Console

from pytest_quantagent.report.terminal import cell_notes, render_terminal


def _cell(**extra_fields: Any) -> dict[str, Any]:
    cell: dict[str, Any] = {
        "domain": "telecom", "arm": "int4", "reference": "bf16", "episodes": 4, "paired": 4,
        "success": {"arm": 0.5, "reference": 0.5, "diff": 0.0, "ci": [-0.3, 0.3]},
        "budget": {"K": [0, 1, 2], "arm": [0, 0.25, 0.5], "reference": [0, 0.25, 0.5],
                   "gap": [0, 0, 0], "gap_ci": [[0, 0], [-0.2, 0.2], [-0.3, 0.3]]},
        "channels": {}, "verdict": "INCONCLUSIVE", "reasons": [],
    }
    cell.update(extra_fields)
    return cell


def test_no_notes_for_a_plain_cell() -> None:
    assert cell_notes({"cells": [_cell()]}) == []


def test_user_failures_and_tau2_flags_are_listed() -> None:
    report = {"cells": [_cell(
        user_failures={"arm": {"malformed_call": 2, "unknown_tool": 0}, "reference": {}},
        extra={"tau2_flags": {"episodes": 40, "infrastructure_errors": 3,
                              "premature": {"max_steps": 1}, "hidden_malformed": 1,
                              "drops_hallucinated": True, "tau2_version": "1.0.0"}},
    )]}
    notes = cell_notes(report)
    assert notes == [
        "telecom/int4: user-side failed calls (not in the agent's channels): "
        "arm malformed_call 2; reference none",
        "telecom/int4 (tau2-bench file): 3 of 40 episodes recorded as infrastructure errors "
        "(excluded from scores; they may hide malformed or hallucinated tool calls)",
        "telecom/int4 (tau2-bench file): 1 premature terminations (max_steps: 1)",
        "telecom/int4 (tau2-bench file): 1 malformed turns silently retried by tau2-bench "
        "(counted here as malformed_call, not in its error budget)",
        "telecom/int4 (tau2-bench file): written by tau2-bench 1.0.0: versions 1.0.0 to 1.0.1 "
        "binned episodes with hallucinated tool names as infrastructure errors",
    ]
    console = Console(record=True, width=300)
    render_terminal(report, console)
    text = console.export_text()
    assert "user-side failed calls" in text and "3 of 40 episodes" in text
    # The HTML report lists the same notes, escaped.
    from pytest_quantagent.report.html import render_html

    page = render_html(report)
    assert page.count('<ul class="notes">') == 1
    for note in notes:
        assert f"<li>{html.escape(note)}</li>" in page


def test_episodes_ended_by_an_exception_are_listed() -> None:
    cell = _cell(terminations={"arm": {"user_stop": 30, "agent_error": 3, "user_error": 0},
                               "reference": {"user_stop": 33}})
    assert cell_notes({"cells": [cell]}) == [
        "telecom/int4: episodes ended by an exception in the agent or user (scored as failures; "
        "each record's error_message says why): arm agent_error 3; reference none"
    ]
    clean = _cell(terminations={"arm": {"user_stop": 33}, "reference": {"user_stop": 33}})
    assert cell_notes({"cells": [clean]}) == []


def test_flags_round_trip_through_the_report_dict() -> None:
    from collections import Counter

    from pytest_quantagent.tau2.flags import Tau2Flags

    f = Tau2Flags(episodes=5, infrastructure_errors=1, infrastructure_episodes=[("7", 0)],
                  premature=Counter({"max_steps": 2}), hidden_malformed=1, duplicate_keys=1,
                  tick_only=1, tau2_version="1.0.0", drops_hallucinated=True, trimmed=True,
                  tool_names_source="file", notes=["n"])
    back = Tau2Flags.from_dict(f.to_dict())
    assert back == f and back.lines() == f.lines()
