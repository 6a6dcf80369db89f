"""The shipped example_suite/, run as a user would: on scripted mock arms (fast, default
selection) and on the bundled CPU model (slow, opt-in with ``-m slow``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pytest_quantagent.report.json_io import read_report, validate_report

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "example_suite"

# bf16 looks the customer up and gives up; int4 first calls a tool that does not exist
# (named with markup), then does the same. Same success, one extra failed call per episode:
# masked damage by construction.
MOCK_ARMS = """
[arms.bf16]
backend = "mock"
model = "scripted"
responses = [
  {tool_calls = [{name = "get_customer_by_phone", arguments = {phone_number = "555-0100"}}]},
  {content = "Sorry, I cannot help. ###STOP###"},
]

[arms.int4]
backend = "mock"
model = "scripted"
responses = [
  {tool_calls = [{name = "<script>alert(1)</script>", arguments = {}}]},
  {tool_calls = [{name = "get_customer_by_phone", arguments = {phone_number = "555-0100"}}]},
  {content = "Sorry, I cannot help. ###STOP###"},
]
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    for name in ("pytest.ini", "conftest.py", "test_release_gate.py"):
        (pytester.path / name).write_text((EXAMPLE / name).read_text(encoding="utf-8"), encoding="utf-8")
    return pytester


def test_example_suite_on_mock_arms(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = suite.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    suite.makefile(".toml", arms=MOCK_ARMS)
    # the suite's settings, on a fixed design of 40 tasks (its run-until-decided waves are
    # tested with the bundled model below and in tests/runner/test_until_decided.py)
    ini = suite.path / "pytest.ini"
    ini.write_text("".join(line for line in ini.read_text().splitlines(keepends=True)
                           if not line.startswith(("quant_until_decided", "quant_max_episodes",
                                                   "quant_tasks"))) + "quant_tasks = 40\n")
    result = suite.runpytest("--quant-config=arms.toml", "--quant=int4", "--domain=telecom")
    # test_fails_in_the_same_ways skips: 40 failures against none cannot be judged; so does
    # test_agent_does_not_call_device_tools: 0 vs 0 cross-role calls over too few agent calls
    # to bound the increase (it used to pass on 0 vs 0).
    result.assert_outcomes(passed=3, failed=1, skipped=2)
    result.stdout.fnmatch_lines(["*_ test_no_failure_channel_is_amplified?telecom-int4? _*"])
    result.stdout.fnmatch_lines([
        "*telecom-int4: 1 channel(s) amplified above ×1.2 while the final score is equivalent (MASKED_DAMAGE):",
        "*unknown_tool: 50.0% of int4 agent tool calls vs 0.0% of bf16 (40 vs 0)*",
    ])
    report = read_report(suite.path / "quantagent-report.json")  # path from the suite's pytest.ini
    validate_report(report)
    (cell,) = report["cells"]
    assert (cell["domain"], cell["arm"], cell["episodes"], cell["verdict"]) == (
        "telecom", "int4", 40, "MASKED_DAMAGE")
    failed = [(t["nodeid"].split("::")[1], t["cell"]) for t in report["tests"]
              if t["outcome"] == "failed"]
    assert failed == [("test_no_failure_channel_is_amplified[telecom-int4]", "telecom-int4")]
    page = (suite.path / "quantagent-report.html").read_text(encoding="utf-8")
    assert "<script" not in page.lower() and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Tests: 1 failed, 2 skipped" in page
    assert "| telecom-int4 | 0.0% vs 0.0% | MASKED_DAMAGE |" in summary.read_text()


def test_domain_marker_skips_outside_its_domain(suite: pytest.Pytester) -> None:
    suite.makefile(".toml", arms=MOCK_ARMS)
    result = suite.runpytest("--quant-config=arms.toml", "--quant=int4", "--domain=retail",
                             "--quant-tasks=3", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_fails_in_the_same_ways?retail-int4?*"])
    assert "test_agent_does_not_call_device_tools[retail" not in result.stdout.str()


def test_the_suite_runs_fp8_int4_and_the_positive_control_by_default(suite: pytest.Pytester) -> None:
    result = suite.runpytest("--domain=telecom", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_final_score_is_equivalent?telecom-fp8?*",
                                 "*test_final_score_is_equivalent?telecom-int4?*",
                                 "*test_final_score_is_equivalent?telecom-int2-rtn?*"])


@pytest.mark.slow
def test_example_suite_on_the_bundled_model_decides_fp8_and_the_positive_control(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The README's first command: fp8, int4 and the int2-rtn positive control on fresh
    # telecom tasks, run until decided (at most 320 episodes per arm). fp8 must be decided
    # LOSSLESS and pass its gate; the positive control decided as damage and fail its gate,
    # with the numbers.
    repo = str(EXAMPLE.parent)  # the subprocess imports this checkout's plugin
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (repo, os.environ.get("PYTHONPATH", "")) if p))
    start = time.monotonic()
    result = suite.runpytest_subprocess("--domain=telecom", "-rs", timeout=600)
    elapsed = time.monotonic() - start
    print(result.stdout.str())
    outcomes = result.parseoutcomes()
    assert sum(outcomes.get(k, 0) for k in ("passed", "failed", "skipped")) == 18, outcomes
    report = read_report(suite.path / "quantagent-report.json")
    validate_report(report)
    cells = {c["arm"]: c for c in report["cells"]}
    # The positive control is decided: its unknown-tool calls amplified on the episodes the
    # simulated user did not misread, at an equivalent score there (README)
    control = cells["int2-rtn"]
    assert control["verdict"] == "MASKED_DAMAGE", control["reasons"]
    assert control["sequential"]["stopped"] == "decided"
    assert control["episodes"] <= 320 and cells["int4"]["episodes"] <= 320
    assert cells["fp8"]["verdict"] == "LOSSLESS", cells["fp8"]["reasons"]
    assert cells["fp8"]["sequential"]["stopped"] == "decided"
    failed = {t["nodeid"].split("::")[1] for t in report["tests"] if t["outcome"] == "failed"}
    assert "test_no_failure_channel_is_amplified[telecom-int2-rtn]" in failed
    assert "test_final_score_is_equivalent[telecom-int4]" not in failed
    assert not any(t.endswith("[telecom-fp8]") for t in failed), failed
    # flat at the run's budget (its score test passes), the gap at K=2 fails with the numbers
    assert "test_final_score_is_equivalent[telecom-int2-rtn]" not in failed
    assert "test_score_holds_when_two_failed_calls_end_the_episode[telecom-int2-rtn]" in failed
    result.stdout.fnmatch_lines(["*telecom-int2-rtn at error budget K=2: success *% (int2-rtn) vs *% (bf16)*"])
    # The README quotes the wall time; report it rather than fail on a busy machine.
    print(f"example suite took {elapsed:.0f} s on this machine")
