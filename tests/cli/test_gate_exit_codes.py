"""The release gate: GO / NO-GO / INCONCLUSIVE over a report's cells, and the exit codes of
``quantagent run`` and ``quantagent analyze`` (0 GO, 1 NO-GO, 2 INCONCLUSIVE, 4 bad input)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.analysis.gate import (
    EXIT_GO,
    EXIT_INCONCLUSIVE,
    EXIT_NO_GO,
    EXIT_USAGE,
    gate,
    gate_line,
)
from pytest_quantagent.cli import main
from tests.cli.test_cli_polish import SAME_ARMS  # two arms with the same rule

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tau2"))
from tau2_builders import Conversation, results, simulation, write_json


def _cell(arm: str, verdict: str, reference: str | None = "bf16") -> dict[str, Any]:
    return {"domain": "retail", "arm": arm, "reference": reference, "verdict": verdict}


def test_gate_outcome_is_the_worst_cell() -> None:
    assert gate([]).outcome == "GO" and gate([]).exit_code == EXIT_GO
    # a one-arm cell (no reference) has nothing to judge and does not count
    assert gate([_cell("bf16", "INCONCLUSIVE", reference=None)]).exit_code == EXIT_GO
    assert gate([_cell("int4", "LOSSLESS")]).exit_code == EXIT_GO
    mixed = gate([_cell("int4", "LOSSLESS"), _cell("int8", "INCONCLUSIVE")])
    assert (mixed.outcome, mixed.exit_code) == ("INCONCLUSIVE", EXIT_INCONCLUSIVE)
    # damage anywhere is NO-GO, even beside an undecided cell
    for damage in ("MASKED_DAMAGE", "DEGRADED"):
        res = gate([_cell("int8", "INCONCLUSIVE"), _cell("int4", damage)])
        assert (res.outcome, res.exit_code) == ("NO-GO", EXIT_NO_GO)
    assert gate_line(mixed) == "gate: INCONCLUSIVE (exit 2): retail-int4 LOSSLESS, retail-int8 INCONCLUSIVE"


def test_failing_cells_per_requirement() -> None:
    res = gate([_cell("int4", "LOSSLESS"), _cell("int8", "INCONCLUSIVE"), _cell("int2", "MASKED_DAMAGE")])
    assert res.failing("none") == []
    assert res.failing("decision") == [("retail-int8", "INCONCLUSIVE")]
    assert res.failing("lossless") == [("retail-int8", "INCONCLUSIVE"), ("retail-int2", "MASKED_DAMAGE")]
    with pytest.raises(ValueError, match=r"require='strict'; allowed: none, decision, lossless"):
        res.failing("strict")


def _tau2_file(path: Path, tasks: int, *, hallucinated: int, calls: int = 1) -> Path:
    sims = []
    for t in range(tasks):
        conv = Conversation()
        for _ in range(hallucinated):
            conv.call("get_order_status", "Error: Tool 'get_order_status' not found.", error=True)
        for _ in range(calls):
            conv.call("get_order_details", '{"status": "ok"}')
        conv.say("user", "###STOP###")
        sims.append(simulation(str(t), conv.messages))
    return write_json(path, results(sims, domain="retail"))


@pytest.mark.parametrize("tasks,calls,hallucinated,code,verdict", [
    # identical arms, 500 tasks x 6 calls: every channel bounded within +0.2 per 100 calls
    (500, 6, 0, EXIT_GO, "LOSSLESS"),
    # 2 calls to a tool that does not exist in every candidate episode, none in the reference
    (20, 1, 2, EXIT_NO_GO, "MASKED_DAMAGE"),
    # identical arms, 40 tasks: nothing can be bounded, nothing is shown
    (40, 1, 0, EXIT_INCONCLUSIVE, "INCONCLUSIVE"),
])
def test_analyze_exits_with_the_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str], tasks: int,
                                     calls: int, hallucinated: int, code: int, verdict: str) -> None:
    ref = _tau2_file(tmp_path / "bf16.json", tasks, hallucinated=0, calls=calls)
    cand = _tau2_file(tmp_path / "int4.json", tasks, hallucinated=hallucinated, calls=calls)
    out = tmp_path / "r.json"
    assert main(["analyze", "--quiet", "--json", str(out), "--tau2", str(ref), str(cand)]) == code
    (cell,) = json.loads(out.read_text())["cells"]
    assert cell["verdict"] == verdict
    assert f"gate: {gate([cell]).outcome} (exit {code}): retail-int4 {verdict}" in capsys.readouterr().err


def test_bad_input_is_the_usage_code_not_a_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--quiet", "--tau2", str(tmp_path / "missing.json"), str(tmp_path / "b.json")]) == EXIT_USAGE
    assert "missing.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--no-such-flag"])
    assert exc.value.code == EXIT_USAGE
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
    assert main([]) == EXIT_USAGE




def test_run_exits_inconclusive_on_a_small_equal_run_and_go_with_one_arm(
        tmp_path: Path, mini_domains_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(SAME_ARMS)
    base = ["run", "--domain", "mini", "-q", "--config", str(cfg), "--out", str(tmp_path / "s")]
    assert main([*base, "--arms", "bf16,int4", "--json", "-"]) == EXIT_INCONCLUSIVE
    captured = capsys.readouterr()
    json.loads(captured.out)  # stdout stays JSON only; the gate line is on stderr
    assert "gate: INCONCLUSIVE (exit 2): mini-int4 INCONCLUSIVE" in captured.err
    assert main([*base, "--arms", "bf16"]) == EXIT_GO
    assert main([*base, "--arms", "bf16,fp9"]) == EXIT_USAGE
