"""``quantagent analyze --tau2 REF.json CAND.json`` end to end on the reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tau2_builders import Conversation, results, simulation, write_json

from pytest_quantagent.analysis.gate import EXIT_GO, EXIT_INCONCLUSIVE, EXIT_NO_GO
from pytest_quantagent.cli import main
from pytest_quantagent.errors import EXIT_USAGE


def _run(tmp_path: Path, *files: Path) -> dict[str, Any]:
    out = tmp_path / "report.json"
    rc = main(["analyze", "--quiet", "--json", str(out), "--tau2", *map(str, files)])
    assert rc in (EXIT_GO, EXIT_NO_GO, EXIT_INCONCLUSIVE)  # a verdict, not a usage error
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def _file(path: Path, tasks: list[str], hallucinated: int, *, infra: int = 0) -> Path:
    sims = []
    for i, t in enumerate(tasks):
        conv = Conversation()
        for _ in range(hallucinated):
            conv.call("get_order_status", "Error: Tool 'get_order_status' not found.", error=True)
        conv.call("get_order_details", '{"status": "ok"}').say("user", "###STOP###")
        term = "infrastructure_error" if i < infra else "user_stop"
        sims.append(simulation(t, conv.messages, termination=term))
    return write_json(path, results(sims, domain="retail"))


def test_paired_cell_with_channel_counts_and_flags(tmp_path: Path) -> None:
    tasks = [str(i) for i in range(20)]
    ref = _file(tmp_path / "bf16.json", tasks, hallucinated=0)
    cand = _file(tmp_path / "int4.json", tasks, hallucinated=2, infra=3)
    report = _run(tmp_path, ref, cand)
    (cell,) = report["cells"]
    assert (cell["domain"], cell["arm"], cell["reference"]) == ("retail", "int4", "bf16")
    assert cell["paired"] == 17  # the 3 infrastructure errors are excluded, as in τ²-bench
    ch = cell["channels"]["unknown_tool"]
    assert (ch["arm_count"], ch["reference_count"]) == (34, 0)
    # the report model copies the reader's flags into the cell (``CellInput.extra``)
    flags = cell.get("tau2_flags") or cell["extra"]["tau2_flags"]
    assert flags["infrastructure_errors"] == 3
    assert flags["episodes"] == 20


def test_no_common_tasks_is_stated_unpaired(tmp_path: Path) -> None:
    ref = _file(tmp_path / "bf16.json", [str(i) for i in range(10)], hallucinated=0)
    cand = _file(tmp_path / "int4.json", [str(i) for i in range(50, 60)], hallucinated=1)
    (cell,) = _run(tmp_path, ref, cand)["cells"]
    assert cell["paired"] == 0
    assert any("could not be paired" in r for r in cell["reasons"])


def test_real_file_against_itself(tmp_path: Path, tau2_data: Path) -> None:
    real = tau2_data / "results" / "gpt-4.1_retail_1trial_feature-gym.json"
    if not real.is_file():
        pytest.skip(f"{real} not present")
    copy = tmp_path / "again.json"
    copy.write_bytes(real.read_bytes())
    (cell,) = _run(tmp_path, real, copy)["cells"]
    assert cell["episodes"] == cell["reference_episodes"] == cell["paired"] == 40
    assert cell["tool_calls"] == {"arm": 300, "reference": 300}
    assert cell["success"]["diff"] == 0


def test_bad_file_is_refused_with_path_and_location(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = _file(tmp_path / "bf16.json", ["1", "2"], hallucinated=0)
    text = ref.read_text()
    bad = tmp_path / "cut.json"
    bad.write_text(text[: text.index('"task_id": "2"')])
    rc = main(["analyze", "--quiet", "--tau2", str(ref), str(bad)])
    assert rc == EXIT_USAGE
    err = capsys.readouterr().err
    assert str(bad) in err
    assert "simulations[1]" in err and "truncated" in err


def test_same_named_files_are_two_arms_and_flags_are_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = [str(i) for i in range(8)]
    (tmp_path / "bf16").mkdir()
    (tmp_path / "int4").mkdir()
    ref = _file(tmp_path / "bf16" / "retail.json", tasks, hallucinated=0)
    cand = _file(tmp_path / "int4" / "retail.json", tasks, hallucinated=1, infra=2)
    out = tmp_path / "report.json"
    rc = main(["analyze", "--json", str(out), "--tau2", str(ref), str(cand)])
    assert rc == EXIT_INCONCLUSIVE
    (cell,) = json.loads(out.read_text())["cells"]
    assert (cell["arm"], cell["reference"]) == ("retail#2", "retail")
    err = capsys.readouterr().err
    assert "retail#2: 2 of 8 episodes recorded as infrastructure errors" in err


def _trials_file(path: Path, n_tasks: int, trials: int, failing: set[tuple[int, int]]) -> Path:
    # every episode: 10 agent calls and a success; an episode in ``failing`` calls one tool
    # that does not exist among its 10
    sims = []
    for t in range(n_tasks):
        for k in range(trials):
            conv = Conversation()
            for i in range(10):
                if i == 0 and (t, k) in failing:
                    conv.call("get_order_status", "Error: Tool 'get_order_status' not found.",
                              error=True)
                else:
                    conv.call("get_order_details", '{"status": "ok"}')
            conv.say("user", "###STOP###")
            sims.append(simulation(str(t), conv.messages, trial=k))
    return write_json(path, results(sims, domain="retail"))


def test_amplified_low_rate_channel_is_not_lossless(tmp_path: Path) -> None:
    # issue 33's reproduction: 114 tasks × 3 trials, 10 agent calls per episode, identical
    # successes, unknown_tool 10 (reference) vs 26 (candidate): ×2.6, +0.47 per 100 calls.
    # The tolerance of 1 per 100 calls certified it LOSSLESS; inside the damage region
    # (ratio > ×1.2 and increase > 0.2 per 100 calls) it is not.
    ref = _trials_file(tmp_path / "bf16.json", 114, 3, {(t, 0) for t in range(10)})
    cand = _trials_file(tmp_path / "int4.json", 114, 3, {(t, 1) for t in range(40, 66)})
    (cell,) = _run(tmp_path, ref, cand)["cells"]
    ch = cell["channels"]["unknown_tool"]
    assert (ch["arm_count"], ch["reference_count"]) == (26, 10)
    assert ch["ratio"] == pytest.approx(2.6)
    assert ch["rate_increase_upper"] > 0.002 and ch["ratio_upper"] > 1.2
    assert ch["shown_not_amplified"] is False
    assert cell["verdict"] != "LOSSLESS", cell["reasons"]
    assert any(r.startswith("unknown_tool ×2.6 (26 vs 10)") for r in cell["reasons"])
