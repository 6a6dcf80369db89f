"""End to end through the real runner, store and analysis: scripted ``mock`` arms on the
toy domain of ``tests/env/toy_domains`` (three tasks, milliseconds per episode)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.report.json_io import read_report, validate_report

TOY_DOMAINS = Path(__file__).resolve().parent.parent / "env" / "toy_domains"

# The candidate first calls a tool that does not exist, named with markup: the name is
# model output and must come out escaped in the HTML report.
ARMS_TOML = """
[arms.bf16]
backend = "mock"
model = "scripted"
responses = [
  {tool_calls = [{name = "transfer_to_human_agents", arguments = {summary = "wants a human"}}]},
  {content = "I have transferred you. ###STOP###"},
]

[arms.int4]
backend = "mock"
model = "scripted"
responses = [
  {tool_calls = [{name = "<script>alert(1)</script>", arguments = {}}]},
  {tool_calls = [{name = "transfer_to_human_agents", arguments = {summary = "wants a human"}}]},
  {content = "I have transferred you. ###STOP###"},
]

[arms.fp8]
backend = "mock"
model = "scripted"
responses = [
  {tool_calls = [{name = "transfer_to_human_agents", arguments = {summary = "wants a human"}}]},
  {content = "I have transferred you. ###STOP###"},
]
"""

SUITE = """
import pytest
from pytest_quantagent.assertions import (
    assert_budget_robust,
    assert_failure_set_invariant,
    assert_no_channel_amplification,
    assert_score_equivalent,
)

def test_score(quant_cell):
    assert_score_equivalent(quant_cell, margin=0.5)

def test_no_unknown_tools(quant_cell):
    assert_no_channel_amplification(quant_cell, channel="unknown_tool", max_ratio=1.2)

@pytest.mark.error_budget(2)
def test_budget(quant_cell):
    assert_budget_robust(quant_cell, budgets=(1, 2))

def test_failure_set(quant_cell):
    assert_failure_set_invariant(quant_cell)

def test_episodes(episodes, reference_episodes, quant_arm, reference_arm):
    assert quant_arm.backend == reference_arm.backend == "mock"
    assert len(episodes) == len(reference_episodes) == 3 * 8
"""


@pytest.fixture
def toy(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("QUANTAGENT_DOMAINS_DIR", str(TOY_DOMAINS))
    pytester.makefile(".toml", arms=ARMS_TOML)
    pytester.makepyfile(test_gate=SUITE)
    return pytester


def _strip_timing(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_timing(v) for k, v in obj.items() if k not in {"duration_s"}}
    if isinstance(obj, list):
        return [_strip_timing(v) for v in obj]
    return obj


def test_mock_suite_end_to_end(toy: pytest.Pytester) -> None:
    result = toy.runpytest(
        "--quant-config=arms.toml", "--quant=int4,fp8", "--domain=toy", "--quant-trials=8",
        "--quant-report=out/report.json", "--quant-html=out/report.html", "--junitxml=out/junit.xml",
    )
    # int4: unknown_tool 24 vs 0, but in only 3 tasks (8 trials each): with the task as the
    # unit of evidence (issue 23) and Holm within the cell, 3 tasks cannot show amplification
    # (raw one-sided p≈0.03, Holm p>0.05), nor its absence: INCONCLUSIVE, saying why. fp8 =
    # bf16: no failure at all; 24 pairs in 3 tasks are too few for the report's ±7.5-point
    # TOST (INCONCLUSIVE), enough for the test's ±50. Neither cell has the 20 failures per arm
    # a failure set needs: both failure-set tests skip ("cannot judge"); nor can either cell
    # bound unknown_tool below ×1.2 or +1 per 100 calls (int4 24 vs 0 in 3 tasks; fp8 0 vs 0
    # in 48 calls): both test_no_unknown_tools skip ("cannot judge amplification").
    result.assert_outcomes(passed=6, failed=0, skipped=4)
    result.stdout.fnmatch_lines([
        "*= quantagent =*",
        "*toy / fp8*INCONCLUSI*",
        "*toy / int4*INCONCLUSI*",
        "quantagent JSON report: out?report.json",
    ])

    report = read_report(toy.path / "out" / "report.json")
    validate_report(report)
    assert [(c["domain"], c["arm"], c["verdict"]) for c in report["cells"]] == [
        ("toy", "fp8", "INCONCLUSIVE"), ("toy", "int4", "INCONCLUSIVE"),
    ]
    assert any(r.startswith("unknown_tool 24 vs 0 not shown below ×1.2")
               for r in report["cells"][1]["reasons"])
    int4 = report["cells"][1]
    assert int4["channels"]["unknown_tool"]["arm_count"] == 24
    assert int4["paired"] == 24
    assert report["run"]["trials"] == 8 and report["run"]["budget"] == 10

    # The skipped tests, with their cells and why, are in the report and the page (a failed
    # one too: see test_example_suite_on_mock_arms).
    assert not [t for t in report["tests"] if t["outcome"] == "failed"]
    skipped = sorted((t["nodeid"].split("::")[1], t["cell"]) for t in report["tests"]
                     if t["outcome"] == "skipped")
    assert skipped == [("test_failure_set[toy-fp8]", "toy-fp8"),
                       ("test_failure_set[toy-int4]", "toy-int4"),
                       ("test_no_unknown_tools[toy-fp8]", "toy-fp8"),
                       ("test_no_unknown_tools[toy-int4]", "toy-int4")]
    why = {t["nodeid"].split("::")[1]: t["message"] for t in report["tests"]}
    assert "cannot judge the failure set" in why["test_failure_set[toy-int4]"]
    assert "cannot judge amplification: unknown_tool 24 vs 0" in why["test_no_unknown_tools[toy-int4]"]
    page = (toy.path / "out" / "report.html").read_text(encoding="utf-8")
    assert "Tests: 0 failed, 4 skipped" in page
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<svg" in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")

    tree = ET.parse(toy.path / "out" / "junit.xml")
    props = {
        (case.get("name"), p.get("name")): p.get("value")
        for case in tree.iter("testcase") for p in case.iter("property")
    }
    assert props[("test_score[toy-int4]", "quantagent_cell")] == "toy-int4"
    assert props[("test_no_unknown_tools[toy-int4]", "quantagent_verdict")] == "INCONCLUSIVE"
    assert props[("test_score[toy-fp8]", "quantagent_verdict")] == "INCONCLUSIVE"


def test_report_schema_rejects_a_broken_report(toy: pytest.Pytester) -> None:
    toy.runpytest("--quant-config=arms.toml", "--domain=toy", "-k", "episodes",
                  "--quant-report=r.json", "--quant-trials=8")
    report = read_report(toy.path / "r.json")
    validate_report(report)
    del report["cells"][0]["channels"]["wrong_entity"]
    with pytest.raises(ValueError, match="at cells/0/channels: 'wrong_entity' is a required property"):
        validate_report(report)
    report["cells"][0]["verdict"] = "FINE"
    with pytest.raises(ValueError, match="cells/0"):
        validate_report(report)


def test_xdist_gives_the_same_report_and_runs_episodes_once(toy: pytest.Pytester) -> None:
    common = ["--quant-config=arms.toml", "--quant=int4,fp8", "--domain=toy", "--quant-trials=8",
              "-p", "no:randomly", "-p", "no:benchmark"]  # pytest-benchmark warns under xdist
    serial = toy.runpytest(*common, "-n", "0", "--quant-cache-dir=store0", "--quant-report=serial.json")
    serial.assert_outcomes(passed=6, failed=0, skipped=4)
    # The controller loads the workers' cells by key from the store (cell manifests), never
    # through the run_cell hook (which would build backends, i.e. load models, again).
    toy.makeconftest("""
def pytest_quantagent_run_cell(config, cell):
    if not hasattr(config, "workerinput"):
        with open("controller_ran_cells.txt", "a") as f:
            f.write(cell.id + "\\n")
    return None  # the default implementation runs or loads the cell
""")
    dist = toy.runpytest(*common, "-n", "2", "--quant-cache-dir=store2", "--quant-report=dist.json")
    dist.assert_outcomes(passed=6, failed=0, skipped=4)
    assert not (toy.path / "controller_ran_cells.txt").exists()
    assert len(list((toy.path / "store2" / "cells").glob("*.json"))) == 2

    a = _strip_timing(json.loads((toy.path / "serial.json").read_text()))
    b = _strip_timing(json.loads((toy.path / "dist.json").read_text()))
    assert a["cells"] == b["cells"]
    # 3 tasks × 8 trials × 3 arms (bf16 shared by both cells), each exactly once.
    lines = (toy.path / "store2" / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 72
    assert len({json.loads(line)["key"] for line in lines}) == 72


def test_rerun_loads_from_the_store(toy: pytest.Pytester) -> None:
    args = ["--quant-config=arms.toml", "--quant=fp8", "--domain=toy", "--quant-trials=2",
            "-k", "episodes"]
    toy.runpytest(*args).assert_outcomes(failed=1)  # 2 trials, the test expects 8
    store = toy.path / ".quantagent" / "episodes.jsonl"
    before = store.read_text()
    toy.runpytest(*args).assert_outcomes(failed=1)
    assert store.read_text() == before


@pytest.mark.tau2data
def test_replay_arms_read_tau2_results_without_running(
    pytester: pytest.Pytester, tau2_data: Path
) -> None:
    results = tau2_data / "results" / "gpt-4.1_retail_1trial_feature-gym.json"
    if not results.is_file():
        pytest.skip(f"{results} not present")
    # The same results file as both arms: a replayed pair must come out identical.
    pytester.makefile(".toml", arms=f"""
[arms.bf16]
backend = "replay"
path = "{results}"

[arms.int4]
backend = "replay"
path = "{results}"
""")
    pytester.makepyfile("""
def test_same(quant_cell):
    assert all(e.backend == "replay" for e in quant_cell.episodes)
    assert len(quant_cell.episodes) == len(quant_cell.reference_episodes) > 0
    # Identical arms: no channel is amplified (with 114 tasks and few failures per channel,
    # not every one can also be shown below ×1.2, so the assertion itself may skip).
    a = quant_cell.analysis()
    assert all(c["p_holm"] is None or c["p_holm"] > 0.05 for c in a["channels"].values())
    assert a["verdict"] != "MASKED_DAMAGE" and a["verdict"] != "DEGRADED"
""")
    result = pytester.runpytest("--quant-config=arms.toml", "--quant-backend=replay",
                                "--domain=retail", "--quant-report=r.json",
                                "--quant-cache-dir=store")
    result.assert_outcomes(passed=1)
    report = read_report(pytester.path / "r.json")
    (cell,) = report["cells"]
    assert cell["success"]["diff"] == 0.0
    assert not (pytester.path / "store" / "episodes.jsonl").exists()  # nothing was run


def test_llm_user_is_shared_by_both_arms(toy: pytest.Pytester) -> None:
    # A module name no other test file uses: pytester runs in-process, and tests/env/test_user.py
    # is already imported as `test_user` in a full run.
    toy.makepyfile(test_llm_user_shared="""
def test_user(quant_cell):
    sims = {e.user_sim for e in quant_cell.episodes + quant_cell.reference_episodes}
    assert len(sims) == 1 and sims.pop().startswith("llm:mock:")
""")
    result = toy.runpytest("--quant-config=arms.toml", "--domain=toy", "--quant-user=llm",
                           "--quant-user-model=mock:scripted-user", "test_llm_user_shared.py")
    result.assert_outcomes(passed=1)
    assert (toy.path / ".quantagent" / "user_turns.jsonl").is_file()


def test_precision_model_and_tau_env_fixtures(toy: pytest.Pytester) -> None:
    toy.makepyfile(test_fixtures="""
import asyncio

from pytest_quantagent.backends.base import GenerateRequest
from pytest_quantagent.vocab.messages import ToolCall

def test_model(precision_model, quant_arm):
    gen = asyncio.run(precision_model.generate(
        GenerateRequest(messages=[{"role": "system", "content": "hi"}], tools=[], seed=1)))
    assert quant_arm.label == "int4"
    assert gen.tool_calls[0].name == "<script>alert(1)</script>"   # the arm's first scripted turn

def test_env(tau_env):
    assert tau_env.task_ids() == ["deposit", "wifi", "transfer"]
    env = tau_env("deposit")
    ok = env.get_response(ToolCall(id="1", name="find_account", arguments={"name": "Ada"}))
    bad = env.get_response(ToolCall(id="2", name="no_such_tool", arguments={}))
    assert not ok.error and bad.error and bad.channel == "unknown_tool"
""")
    result = toy.runpytest("--quant-config=arms.toml", "--domain=toy", "test_fixtures.py")
    result.assert_outcomes(passed=2)


def test_tau_env_loads_the_task_file_of_the_runs_split(toy: pytest.Pytester) -> None:
    # τ²-bench data whose tasks.json holds one task and whose split 'base' lives in another
    # file: the cells run the split's file, and tau_env must give the same tasks.
    tasks = json.loads((TOY_DOMAINS / "toy" / "tasks.json").read_text())
    data = toy.path / "tau2" / "domains" / "toy"
    data.mkdir(parents=True)
    (data / "tasks.json").write_text(json.dumps(tasks[:1]))
    (data / "tasks_base.json").write_text(json.dumps(tasks))
    (data / "split_tasks.json").write_text(json.dumps({"base": [t["id"] for t in tasks]}))
    toy.makepyfile(test_split_env="""
def test_env(tau_env):
    assert tau_env.task_ids() == ["deposit", "wifi", "transfer"]
    assert tau_env("transfer").domain is tau_env.domain
""")
    result = toy.runpytest("--quant-config=arms.toml", "--domain=toy", "--quant-tasks=split:base",
                           f"--quant-tau2-data={toy.path / 'tau2'}", "test_split_env.py")
    result.assert_outcomes(passed=1)


def test_cells_load_from_async_tests(toy: pytest.Pytester) -> None:
    # asyncio.run refuses inside a running loop; the session then runs the cell's episodes on
    # a helper thread.
    toy.makepyfile(test_async="""
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"

@pytest.mark.anyio
async def test_async(quant_cell):
    assert len(quant_cell.episodes) == 3 * 2
""")
    result = toy.runpytest("--quant-config=arms.toml", "--domain=toy", "--quant-trials=2",
                           "test_async.py")
    result.assert_outcomes(passed=1)
