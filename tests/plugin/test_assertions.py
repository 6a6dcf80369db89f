"""Assertion outcomes and messages, on deterministic fake records (see fakes.py).

Fake cells: 60 tasks, one trial. bf16 and int4 succeed on the same 48 tasks (every 5th task
fails). On every 3rd task bf16 makes 1 unknown_tool failure and int4 makes 3, so at K=2 the
int4 episodes with 3 failures no longer count (success 53.3% vs 80.0%); fp8 equals bf16.
"""

from __future__ import annotations

import json

import pytest

from tests.plugin.fakes import FAKE_CONFTEST


@pytest.fixture
def fake(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(FAKE_CONFTEST)
    return pytester


def run(p: pytest.Pytester, body: str, *args: str) -> pytest.RunResult:
    p.makepyfile(
        "import pytest\nfrom pytest_quantagent.assertions import *\n\n" + body
    )
    return p.runpytest("--domain=telecom", *args)


def test_score_equivalent_passes_then_degrades_at_a_tight_budget(fake: pytest.Pytester) -> None:
    result = run(fake, """
def test_run_budget(quant_cell):
    r = assert_score_equivalent(quant_cell)
    assert r.verdict == "EQUIVALENT" and r.n_pairs == 60
    assert r.arm_success == pytest.approx(0.8) and r.reference_success == pytest.approx(0.8)

@pytest.mark.error_budget(2)
def test_k2(quant_cell):
    assert_score_equivalent(quant_cell)
""", "--quant=int4")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "E       AssertionError: DEGRADED: int4 scores significantly lower than bf16 (one-sided p=*",
        "E       telecom-int4 at error budget K=2: success 53.3% (int4) vs 80.0% (bf16) over 60 paired "
        "episodes; diff -26.7 pts, 90% CI *, margin ±7.5 pts, TOST p=*",
    ])


def test_inconclusive_says_how_many_trials_are_needed(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_TASKS", "10")
    result = run(fake, """
def test_small(quant_cell):
    assert_score_equivalent(quant_cell, margin=0.075)
""", "--quant=fp8", "--quant-trials=1", "--quant-report=report.json")
    # 10 identical pairs: no discordant pair; Tango's interval stays wider than ±7.5 points.
    # The score's plan assumes a discordance of 0.1 (one pair in ten, none seen yet). The
    # TOST's normal approximation would need (z_.95 + z_.90)^2 * 0.1 / 0.075^2 = 152.3 ->
    # 153 pairs (Chow, Shao & Wang 2008, §3.2.4), but Tango's test takes its variance under
    # H0 at the margin: v0 = 2 p21 + m (1 - m) = 0.1313 (Tango 1998 eq. 4: p21 = 0.0310 at
    # n12 = n21 = 0.05 n), so n >= ((1.6449 sqrt(v0) + 1.2816 sqrt(0.1)) / 0.075)^2 = 178.3
    # -> 179. The run's pool (the bundled model's telecom test split) holds 60 tasks, so the
    # advice may not ask for 179 of it (issue 33 item 3); telecom generates fresh tasks (up
    # to 500), so it names fresh:179 rather than trials.
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E       AssertionError: INCONCLUSIVE: 10 paired episodes give ±*points; for 80% power "
        "if the arms are equal (the score alone; the report's verdict sizes every claim): 179 "
        "fresh tasks × 1 trial (--quant-tasks fresh:179), 179 paired episodes, decides the "
        "score with 80% power*",
        "E       telecom-fp8 at error budget K=10: success 80.0% (fp8) vs 80.0% (bf16) over 10 paired*",
    ])
    cell = json.loads((fake.path / "report.json").read_text())["cells"][0]
    # the report's verdict sizes every claim: at least the score's 179, in fresh tasks
    plan = cell["plan"]
    assert cell["verdict"] == "INCONCLUSIVE" and plan["fresh"] and plan["tasks"] >= 179
    assert cell["n_needed"] == plan["tasks"] * plan["trials"]
    assert f"--quant-tasks fresh:{plan['tasks']}" in cell["reasons"][-1]


def test_channel_amplification_names_every_channel(fake: pytest.Pytester) -> None:
    result = run(fake, """
def test_all(quant_cell):
    assert_no_channel_amplification(quant_cell, channel=None, max_ratio=1.2)

def test_other_channel(quant_cell):
    assert_no_channel_amplification(quant_cell, channel="wrong_entity")

def test_lenient(quant_cell):
    assert_no_channel_amplification(quant_cell, max_ratio=5)
""", "--quant=int4", "-rs")
    # wrong_entity 0 vs 0 in 540 agent calls per arm: the increase bound (0.43 per 100
    # calls) is not below the tolerance (0.2 per 100), so it cannot be judged (issue 33: the
    # tolerance of 1 per 100 calls certified amplified low-rate channels)
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines([
        "SKIPPED*telecom-int4: cannot judge amplification: wrong_entity 0 vs 0*",
    ])
    result.stdout.fnmatch_lines([
        "E       AssertionError: telecom-int4: 1 channel(s) amplified above ×1.2 while the final "
        "score is equivalent (MASKED_DAMAGE):",
        "E         unknown_tool: 11.1% of int4 agent tool calls vs 4.0% of bf16 (60 vs 20), ratio "
        "×2.78 (95% CI *), one-sided Holm p=* against ratio ≤ 1.2",
    ])


def test_budget_robust_lists_the_budgets_where_the_gap_is_significant(fake: pytest.Pytester) -> None:
    result = run(fake, """
def test_budgets(quant_cell):
    assert_budget_robust(quant_cell, budgets=(2, 5, 10))

def test_fp8_budgets(quant_cell):
    pass
""", "--quant=int4")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "E       AssertionError: telecom-int4: the gap between int4 and bf16 widens at 1 of 2 tight "
        "error budgets:",
        "E         K=2: 53.3% vs 80.0%; the gap widens by 26.7 pts from K=10 (one-sided Holm p=*)",
    ])
    assert "K=5:" not in result.stdout.str()


def test_failure_set_invariant(fake: pytest.Pytester) -> None:
    result = run(fake, """
def test_same_names(quant_cell):
    checked = assert_failure_set_invariant(quant_cell, min_rank_corr=0.9)
    assert set(checked) == {"unknown_tool"}   # 60 vs 20 failures: enough to judge
    assert checked["unknown_tool"]["spearman"] > 0.9

def test_too_few_to_judge(quant_cell):
    assert_failure_set_invariant(quant_cell, min_failures=21)
""", "--quant=int4", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([
        "SKIPPED * telecom-int4: cannot judge the failure set: unknown_tool 60 vs 20 failures "
        "(needs 21 in each arm); cross_role_tool 0 vs 0 failures (needs 21 in each arm); "
        "wrong_entity 0 vs 0 failures (needs 21 in each arm) (run more tasks or trials: *",
    ])


def test_failure_set_changed_names_every_channel(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_INT4_PREFIX", "made_up")  # int4 fails with names bf16 never uses
    result = run(fake, """
def test_names(quant_cell):
    assert_failure_set_invariant(quant_cell)
""", "--quant=int4")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E       AssertionError: telecom-int4: the failure set changed (rank correlation below 0.9, "
        "significant at 0.05):",
        "E         unknown_tool: Spearman -* over 60 vs 20 failures, permutation p=0.0*, novel "
        "names 100.0% of int4's failures",
    ])


def test_failure_set_judgement_is_in_the_report(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_INT4_PREFIX", "made_up")
    result = run(fake, """
def test_names(quant_cell):
    assert_failure_set_invariant(quant_cell)
""", "--quant=int4", "--quant-report=report.json")
    result.assert_outcomes(failed=1)
    cell = json.loads((fake.path / "report.json").read_text())["cells"][0]
    fs = cell["failure_set"]["unknown_tool"]
    assert fs["judgement"] == "changed" and fs["p_changed"] < 0.05
    assert fs["top_reference"] == [["get_thing_0", 20]]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("assert_score_equivalent(quant_cell, margin=1.5)",
         "margin=1.5 is not allowed; margin must be a number in (0.0, 1.0); did you mean "
         "margin=0.015? (1.5 points: margins are fractions of 1)"),
        ("assert_score_equivalent(quant_cell, margin=7.5)",
         "margin=7.5 is not allowed; margin must be a number in (0.0, 1.0); did you mean "
         "margin=0.075? (7.5 points: margins are fractions of 1)"),
        ("assert_score_equivalent(quant_cell, 0.05, alpha=0.7)",
         "alpha=0.7 is not allowed; alpha must be a number in (0.0, 0.5)"),
        ("assert_no_channel_amplification(quant_cell, channel='unknown_tools')",
         "unknown channel 'unknown_tools'; known channels: bad_arguments, cross_role_tool, malformed_call, "
         "policy_violation, unknown_tool, user_tool_error, wrong_entity"),
        ("assert_no_channel_amplification(quant_cell, max_ratio=0)",
         "max_ratio=0 is not allowed; max_ratio must be a number >= 1"),
        ("assert_budget_robust(quant_cell, budgets=(2, 11))",
         "budget 11 in budgets=(2, 11) is not allowed; budgets must be integers from 1 to "
         "the run's error budget 10 (raise --error-budget to judge larger ones)"),
        ("assert_budget_robust(quant_cell, budgets=())", "budgets is empty"),
        ("assert_failure_set_invariant(quant_cell, min_rank_corr=2)",
         "min_rank_corr=2 is not allowed; it must be a number from -1 to 1"),
        ("assert_failure_set_invariant(quant_cell, min_failures=0)",
         "min_failures=0 is not allowed; it must be an integer >= 1"),
        ("assert_score_equivalent(quant_cell, margins=0.05)",
         "assert_score_equivalent(): got an unexpected keyword argument 'margins'"),
    ],
)
def test_bad_literal_arguments_are_refused_before_any_episode(fake: pytest.Pytester, call: str,
                                                              message: str) -> None:
    """Issue 36 item 10: a bad argument written in the test is one line at collection, not a
    traceback after every episode ran."""
    result = run(fake, f"def test_bad(quant_cell):\n    x = 1\n    {call}\n", "--quant=fp8")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    assert "quantagent: 1 bad assertion argument:" in text, text
    line = "test_bad_literal_arguments_are_refused_before_any_episode.py::test_bad (line 6): "
    assert text.count(line) == 1 and text.count(message) == 1, text
    assert "Traceback" not in text and "passed" not in text and "failed" not in text
    assert "quantagent telecom-fp8" not in text  # no cell was run (no progress line)


def test_every_bad_assertion_argument_of_a_run_is_reported_together(fake: pytest.Pytester) -> None:
    result = run(fake, """
def test_one(quant_cell):
    assert_no_channel_amplification(quant_cell, channel="unknown_tools")

def test_two(quant_cell):
    assert_score_equivalent(quant_cell, margin=7.5)
    assert_budget_robust(quant_cell, budgets=(2, 11))

def test_fine(quant_cell):
    m = 0.05
    assert_score_equivalent(quant_cell, margin=m)
""", "--quant=fp8")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str() + result.stderr.str()
    assert "quantagent: 3 bad assertion arguments:" in text
    for what in ("::test_one (line 6): assert_no_channel_amplification(): unknown channel",
                 "::test_two (line 9): assert_score_equivalent(): margin=7.5",
                 "::test_two (line 10): assert_budget_robust(): budget 11"):
        assert text.count(what) == 1, (what, text)
    assert "test_fine" not in text


def test_a_computed_bad_argument_fails_its_test_with_one_line(fake: pytest.Pytester) -> None:
    result = run(fake, """
def test_bad(quant_cell):
    margin = float("7.5")  # not visible at collection
    assert_score_equivalent(quant_cell, margin=margin)
""", "--quant=fp8")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    # once in the failure section (the short summary's "FAILED ..." line repeats it, whole or
    # cut at the terminal's width, so it is not counted)
    message = ("test_bad[telecom-fp8]: bad assertion argument: margin=7.5 is not allowed; margin must be a "
               "number in (0.0, 1.0); did you mean margin=0.075?")
    assert sum(message in line and not line.startswith("FAILED ") for line in result.stdout.lines) == 1, text
    assert "Traceback" not in text and "assertions.py:" not in text, text


def test_verdict_thresholds_from_options_reach_report_and_assertions(fake: pytest.Pytester) -> None:
    # --quant-margin/--quant-max-ratio/--quant-tight-budgets are the report's thresholds and
    # the assertions' defaults: the terminal verdict and the assertions agree (issue 23)
    result = run(fake, """
def test_score(quant_cell):
    r = assert_score_equivalent(quant_cell)
    assert "margin ±40.0 pts" in r.message

def test_channels(quant_cell):
    assert_no_channel_amplification(quant_cell, channel="unknown_tool")
""", "--quant=int4", "--quant-margin=0.4", "--quant-max-ratio=5", "--quant-tight-budgets=3",
        "--quant-report=report.json")
    result.assert_outcomes(passed=2)
    cell = json.loads((fake.path / "report.json").read_text())["cells"][0]
    analysis = json.loads((fake.path / "report.json").read_text())["run"]["analysis"]
    assert (analysis["margin"], analysis["max_ratio"], analysis["tight_budgets"]) == (0.4, 5.0, [3])
    assert cell["success"]["margin"] == 0.4 and cell["budget"]["tight"] == [3]
    # the gap widens at K=3 by 27 pts (upper bound 37), under the 40-pt margin: no damage
    # (issue 33: the widening is tested against the margin, not against 0); the silent
    # channels' increase bound stays above the tolerance, so the cell is INCONCLUSIVE
    assert cell["verdict"] == "INCONCLUSIVE", cell["reasons"]
    assert cell["budget"]["widening"]["3"] > 0.2 and cell["budget"]["widening_upper"]["3"] < 0.4
    assert not any("gap widens" in r for r in cell["reasons"])
    assert not any("above ×5" in r for r in cell["reasons"])


def test_the_rare_tolerance_option_is_the_reports_and_the_assertions(fake: pytest.Pytester) -> None:
    # --quant-rare-tolerance (and its ini twin) sets the channel damage region's increase
    # threshold: the silent channels that held the cell above at the default +0.2 per 100
    # agent calls are bounded under +40, and the assertion names the same tolerance
    fake.makeini("[pytest]\nquant_rare_tolerance = 0.4\n")
    result = run(fake, """
def test_channels(quant_cell):
    assert_no_channel_amplification(quant_cell, channel="cross_role_tool")  # none on either side
""", "--quant=int4", "--quant-margin=0.4", "--quant-max-ratio=5", "--quant-tight-budgets=3",
        "--quant-report=report.json")
    result.assert_outcomes(passed=1)
    report = json.loads((fake.path / "report.json").read_text())
    assert report["run"]["analysis"]["rare_tolerance"] == 0.4
    cell = report["cells"][0]
    assert cell["verdict"] == "LOSSLESS", cell["reasons"]
    assert "every channel shown below ×5 or within +40 per 100 calls" in cell["reasons"]
    # the command line overrides the ini: at +0.01 per 100 calls the same channels are open
    result = fake.runpytest("--domain=telecom", "--quant=int4", "--quant-margin=0.4", "--quant-max-ratio=5",
                            "--quant-tight-budgets=3", "--quant-rare-tolerance=0.0001",
                            "--quant-report=report.json", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*cannot judge amplification*within +0.01 per 100 calls*"])
    assert json.loads((fake.path / "report.json").read_text())["cells"][0]["verdict"] == "INCONCLUSIVE"
