"""``quantagent run --repair reflexive`` on mock arms: the ``+repair`` arms sit next to the
arms without repair in the report, and repair changes what the model reads (and so its
behaviour) but never what is counted."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_quantagent.analysis.gate import EXIT_INCONCLUSIVE
from pytest_quantagent.cli import main


def _run(out: Path, rep: Path, arms_toml: Path, *extra: str) -> dict:
    assert main(["run", "--domain", "mini", "-q", "--arms", "bf16,int4", "--config",
                 str(arms_toml), "--out", str(out), "--json", str(rep), *extra]) == EXIT_INCONCLUSIVE
    return json.loads(rep.read_text())


def test_repair_arms_side_by_side_with_their_effect(arms_toml: Path, tmp_path: Path) -> None:
    report = _run(tmp_path / "s", tmp_path / "r.json", arms_toml, "--repair", "reflexive",
                  "--trials", "2")
    cells = {c["arm"]: c for c in report["cells"]}
    assert [c["arm"] for c in report["cells"]] == ["bf16+repair", "int4", "int4+repair"]
    assert {c["reference"] for c in report["cells"]} == {"bf16"}
    assert all(c["episodes"] == c["paired"] == 8 for c in report["cells"])

    # Without repair the hallucinating arm names get_usr until the budget (10) runs out.
    int4, int4r, bf16r = cells["int4"], cells["int4+repair"], cells["bf16+repair"]
    assert int4["channels"]["unknown_tool"]["arm_count"] == 8 * 10
    assert int4["terminations"]["arm"] == {"too_many_errors": 8}
    assert int4["success"]["arm"] == 0.0 and int4["success"]["reference"] == 1.0
    # With repair: one unknown_tool per episode (the call that triggers the repair), solved.
    assert int4r["channels"]["unknown_tool"]["arm_count"] == 8
    assert int4r["success"]["arm"] == 1.0
    assert int4r["budget"]["arm"][int4r["budget"]["K"].index(1)] == 0.0  # 1 error: fails at K=1
    assert int4r["budget"]["arm"][int4r["budget"]["K"].index(2)] == 1.0
    # Where nothing is damaged repair changes nothing.
    assert bf16r["channels"]["unknown_tool"]["arm_count"] == 0
    assert bf16r["success"]["arm"] == bf16r["success"]["reference"] == 1.0

    # The terminal table shows one row per cell, the +repair arms included.
    from rich.console import Console

    from pytest_quantagent.report.terminal import render_terminal

    console = Console(record=True, width=200)
    render_terminal(report, console)
    rows = [line for line in console.export_text().splitlines() if "mini" in line]
    # (a cell's wrapped reason lines may name the mini pool too; their first column is empty)
    firsts = [r.split("│")[1].strip() for r in rows if "│" in r]
    assert [f for f in firsts if f] == ["mini / bf16+repair", "mini / int4", "mini / int4+repair"]

    recs = [json.loads(x) for x in (tmp_path / "s" / "episodes.jsonl").read_text().splitlines()]
    assert {(r["arm"], r["repair"]) for r in recs} == {
        ("bf16", "none"), ("int4", "none"), ("bf16+repair", "reflexive"), ("int4+repair", "reflexive")}
    # The stored trajectory keeps the engine's tool result: the repair text is what the model
    # read, not what happened.
    repaired = next(r for r in recs if r["arm"] == "int4+repair")
    failed = [m for m in repaired["messages"] if m["role"] == "tool" and m["error"]]
    assert len(failed) == 1 and failed[0]["channel"] == "unknown_tool"
    assert "does not exist for you" not in failed[0]["content"]


def test_repair_run_reuses_the_arms_without_repair(arms_toml: Path, tmp_path: Path) -> None:
    out = tmp_path / "s"
    _run(out, tmp_path / "a.json", arms_toml)
    before = (out / "episodes.jsonl").read_text().splitlines()
    assert len(before) == 8
    _run(out, tmp_path / "b.json", arms_toml, "--repair", "reflexive")
    after = (out / "episodes.jsonl").read_text().splitlines()
    # Only the two +repair arms were run; the plain arms' episodes were loaded from the store.
    assert after[:8] == before and len(after) == 16
    assert {json.loads(x)["arm"] for x in after[8:]} == {"bf16+repair", "int4+repair"}
