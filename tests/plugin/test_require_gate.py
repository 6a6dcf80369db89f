"""``--quant-require``: a release gate that cannot say yes or no fails, instead of passing
green by skipping (issue 33 item 5). From the user's side, with pytester."""

from __future__ import annotations

import json

import pytest

from tests.plugin.fakes import FAKE_CONFTEST

NO_ASSERTION = """
def test_cell(quant_cell):
    assert quant_cell.episodes
"""

CHANNEL_TEST = """
from pytest_quantagent.assertions import assert_no_channel_amplification

def test_other_channel(quant_cell):
    assert_no_channel_amplification(quant_cell, channel="wrong_entity")
"""


@pytest.fixture
def fake(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(FAKE_CONFTEST)
    return pytester


def _verdicts(pytester: pytest.Pytester) -> dict[str, str]:
    report = json.loads((pytester.path / "r.json").read_text())
    return {f"{c['domain']}-{c['arm']}": c["verdict"] for c in report["cells"]}


def test_cannot_judge_skips_by_default_and_fails_under_decision(fake: pytest.Pytester) -> None:
    fake.makepyfile(CHANNEL_TEST)
    # fp8 behaves as bf16 on 60 tasks: wrong_entity 0 vs 0 cannot be bounded, the cell is
    # INCONCLUSIVE; by default that is a skip and the run exits 0
    result = fake.runpytest("--quant=fp8", "--domain=telecom", "--quant-report=r.json", "-rs")
    result.assert_outcomes(skipped=1)
    assert result.ret == 0
    assert _verdicts(fake) == {"telecom-fp8": "INCONCLUSIVE"}
    strict = fake.runpytest("--quant=fp8", "--domain=telecom", "--quant-require=decision",
                            "--quant-report=r.json")
    strict.assert_outcomes(failed=1)
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    strict.stdout.fnmatch_lines([
        "*telecom-fp8: cannot judge amplification: wrong_entity 0 vs 0*",
        "quant gate (--quant-require=decision): telecom-fp8 INCONCLUSIVE: the run fails",
    ])
    gate = json.loads((fake.path / "r.json").read_text())["gate"]
    assert gate["require"] == "decision" and gate["failing"] == ["telecom-fp8"]
    assert gate["outcome"] == "INCONCLUSIVE"


def test_an_undecided_cell_fails_the_run_even_when_every_test_passes(fake: pytest.Pytester) -> None:
    fake.makepyfile(NO_ASSERTION)
    result = fake.runpytest("--quant=fp8", "--domain=telecom", "--quant-require=decision")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["quant gate (--quant-require=decision): telecom-fp8 INCONCLUSIVE*"])


def test_decision_accepts_damage_and_lossless_refuses_it(fake: pytest.Pytester) -> None:
    fake.makepyfile(NO_ASSERTION)
    # int4 calls unknown tools 3x as often as bf16 at the same score: decided damage
    decided = fake.runpytest("--quant=int4", "--domain=telecom", "--quant-require=decision",
                             "--quant-report=r.json")
    assert _verdicts(fake) == {"telecom-int4": "MASKED_DAMAGE"}
    assert decided.ret == pytest.ExitCode.OK
    assert "quant gate" not in decided.stdout.str()
    lossless = fake.runpytest("--quant=int4", "--domain=telecom", "--quant-require=lossless")
    assert lossless.ret == pytest.ExitCode.TESTS_FAILED
    lossless.stdout.fnmatch_lines(["quant gate (--quant-require=lossless): telecom-int4 MASKED_DAMAGE*"])


def test_a_decided_lossless_cell_passes_the_strictest_gate(fake: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # 600 tasks, fp8 identical to bf16 episode for episode: every bound closes
    monkeypatch.setenv("FAKE_TASKS", "600")
    fake.makepyfile(CHANNEL_TEST)
    result = fake.runpytest("--quant=fp8", "--domain=telecom", "--quant-require=lossless",
                            "--quant-report=r.json")
    assert _verdicts(fake) == {"telecom-fp8": "LOSSLESS"}
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK


def test_ini_key_and_bad_value(fake: pytest.Pytester) -> None:
    fake.makepyfile(NO_ASSERTION)
    fake.makeini("[pytest]\nquant_require = decision\n")
    result = fake.runpytest("--quant=fp8", "--domain=telecom")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["quant gate (--quant-require=decision): telecom-fp8 INCONCLUSIVE*"])
    bad = fake.runpytest("--quant=fp8", "--domain=telecom", "--quant-require=strict")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    out = bad.stdout.str() + bad.stderr.str()
    assert "--quant-require" in out and "'strict'" in out and "allowed: decision, lossless, none" in out
