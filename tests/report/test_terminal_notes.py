"""Notes under the terminal table: user-side failures and τ²-bench honesty flags."""

from __future__ import annotations

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
        "(may hide malformed calls); premature endings max_steps 1; 1 malformed turns "
        "tau2-bench retried silently; tau2-bench 1.0.0 dropped hallucinated-name episodes",
    ]
    console = Console(record=True, width=300)
    render_terminal(report, console)
    text = console.export_text()
    assert "user-side failed calls" in text and "3 of 40 episodes" in text
