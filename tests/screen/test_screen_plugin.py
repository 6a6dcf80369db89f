"""The ``quant_screen`` fixture and ``assert_low_quantization_risk``, from the user's side
(pytester, with ``-p pytest_quantagent.screen_plugin``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_quantagent.assertions_screen import assert_low_quantization_risk
from pytest_quantagent.report.screen import screen
from pytest_quantagent.store.records import CallRecord, EpisodeRecord
from pytest_quantagent.vocab.channels import Channel, TerminationReason

PLUGIN = ("-p", "pytest_quantagent.screen_plugin")

# Fake reference episodes per domain: retail never fails; on telecom 2 of every 10 calls name
# a tool that does not exist (the seed paper's bf16 propensity is 19.5%).
FAKE_CONFTEST = '''
from pytest_quantagent.store.records import CallRecord, EpisodeRecord

UNKNOWN_PER_EPISODE = {"retail": 0, "telecom": 2}
CALLS = []


def pytest_quantagent_screen_episodes(config, domain):
    CALLS.append(domain)
    k = UNKNOWN_PER_EPISODE[domain]
    out = []
    for t in range(200):
        calls = [CallRecord(step=i, requestor="assistant", name="get_thing", error=True,
                            channel="unknown_tool") for i in range(k)]
        calls += [CallRecord(step=k + i, requestor="assistant", name="ok", error=False)
                  for i in range(10 - k)]
        out.append(EpisodeRecord(
            key=f"{domain}-{t}", model="fake", arm="bf16", backend="fake", domain=domain,
            task_id=str(t), trial=0, seed=t, max_errors=10, max_steps=200,
            termination="user_stop", reward=1.0, success=True, n_errors=k, steps=20,
            calls=calls))
    return out


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line("screened: " + ",".join(CALLS))
'''

FAKE_TESTS = '''
import pytest

from pytest_quantagent.assertions_screen import assert_low_quantization_risk


def test_every_channel(quant_screen):
    assert_low_quantization_risk(quant_screen)


def test_loose_unknown_tool(quant_screen):
    judged = assert_low_quantization_risk(quant_screen, channels="unknown_tool", threshold=0.5)
    assert judged.threshold == 0.5


@pytest.mark.domain("retail")
def test_retail_only(quant_screen):
    assert quant_screen.domain == "retail"


def test_on_the_grid(quant_cell, quant_screen):
    assert quant_screen.domain == quant_cell.domain and quant_screen.arm == "bf16"
'''


def test_fixture_per_domain_and_assertion_messages(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(test_gate=FAKE_TESTS)
    result = pytester.runpytest(*PLUGIN, "--domain=retail,telecom", "-rf", "-v")
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(["*test_on_the_grid[[]retail-int4[]] PASSED*",
                                 "*test_on_the_grid[[]telecom-int4[]] PASSED*"], consecutive=False)
    # Only telecom's every-channel gate fails; the grid test ran on both cells.
    result.stdout.fnmatch_lines(["FAILED test_gate.py::test_every_channel[[]telecom[]]*"])
    out = result.stdout.str()
    # The screen ran once per domain, for every test and the grid's cells alike.
    assert "screened: retail,telecom" in out
    assert ("telecom bf16 (fake): 1 channel(s) not low-risk at threshold 2.0% of calls "
            "(200 episodes, 200 tasks):") in out
    assert "unknown_tool: 400 of 2000 calls = 20.0% (95% CI" in out
    assert "level high: a 4-bit arm may reach 40.0%" in out
    assert "consider --quant-repair=reflexive" in out


def test_domain_marker_outside_the_run_skips(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(test_gate='''
import pytest

@pytest.mark.domain("retail")
def test_retail(quant_screen):
    pass
''')
    result = pytester.runpytest(*PLUGIN, "--domain=telecom", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*domain marker selects no domain of this run (domains: telecom)*"])


def test_end_to_end_on_mock_arms_shares_the_reference_episodes(
        pytester: pytest.Pytester, arms_toml: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    pytester.makepyfile(test_gate='''
from pytest_quantagent.assertions_screen import assert_low_quantization_risk


def test_screen(quant_screen):
    assert (quant_screen.arm, quant_screen.domain, quant_screen.episodes) == ("bf16", "mini", 8)
    assert_low_quantization_risk(quant_screen, threshold=0.5)


def test_cell(quant_cell, quant_screen):
    assert len(quant_cell.reference_episodes) == quant_screen.episodes == 8
''')
    result = pytester.runpytest(*PLUGIN, "--domain=mini", f"--quant-config={arms_toml}",
                                "--quant-trials=2", f"--quant-cache-dir={cache}")
    result.assert_outcomes(passed=2)
    recs = [json.loads(x) for x in (cache / "episodes.jsonl").read_text().splitlines()]
    # The screen's bf16 episodes are the cell's reference episodes: nothing ran twice.
    assert sorted(r["arm"] for r in recs) == ["bf16"] * 8 + ["int4"] * 8


# ---------------------------------------------------------------- the assertion, directly


def _prone(n: int = 100) -> list[EpisodeRecord]:
    return [EpisodeRecord(
        key=f"k{i}", model="m", arm="bf16", backend="mock", domain="retail", task_id=str(i),
        trial=0, seed=i, max_errors=10, max_steps=200, termination=TerminationReason.USER_STOP,
        reward=1.0, success=True, n_errors=1, steps=20,
        calls=[CallRecord(step=0, requestor="assistant", name="x", error=True,
                          channel=Channel.BAD_ARGUMENTS)]
        + [CallRecord(step=j, requestor="assistant", name="ok", error=False) for j in range(1, 10)],
    ) for i in range(n)]


def test_assertion_checks_only_the_named_channels() -> None:
    rep = screen(_prone())  # bad_arguments: 10% of calls, every other channel 0 of 1000
    assert_low_quantization_risk(rep, channels=["unknown_tool", "wrong_entity"])
    with pytest.raises(AssertionError, match=r"bad_arguments: 100 of 1000 calls = 10.0%.*level high"):
        assert_low_quantization_risk(rep, channels="bad_arguments")
    # At a 30% threshold the 10% rate is demonstrably under it.
    assert assert_low_quantization_risk(rep, threshold=0.3).level == "low"


def test_elevated_fails_and_says_to_run_more() -> None:
    rep = screen(_prone(5))  # 50 calls: 0 failures cannot show < 2% (Wilson upper 7.1%)
    with pytest.raises(AssertionError) as exc:
        assert_low_quantization_risk(rep, channels="unknown_tool")
    msg = str(exc.value)
    assert "unknown_tool: 0 of 50 calls = 0.0%" in msg and "level elevated" in msg
    assert "too few episodes to show it is small" in msg and "run more episodes" in msg
    assert "bad_arguments" not in msg  # not asked about


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"channels": "unknwon_tool"}, ValueError, "unknown channel 'unknwon_tool'; known channels: bad_arguments"),
    ({"channels": []}, ValueError, r"channels=\[\] checks nothing"),
    ({"threshold": 1.5}, ValueError, r"threshold must be a failure rate per tool call in \(0, 1\), got 1.5"),
    ({"threshold": True}, ValueError, "got True"),
])
def test_bad_arguments_are_refused(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        assert_low_quantization_risk(screen(_prone(3)), **kwargs)


def test_not_a_screen_is_refused() -> None:
    with pytest.raises(TypeError, match=r"screen must be a ScreenReport .* got dict"):
        assert_low_quantization_risk({})  # type: ignore[arg-type]
