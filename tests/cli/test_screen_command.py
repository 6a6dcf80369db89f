"""``quantagent screen`` end to end on the mini domain with mock arms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_quantagent.analysis.gate import EXIT_INCONCLUSIVE
from pytest_quantagent.cli import main
from pytest_quantagent.errors import EXIT_USAGE
from pytest_quantagent.report.screen import ScreenReport


def _screen(arms_toml: Path, out: Path, *extra: str) -> int:
    return main(["screen", "--domain", "mini", "--config", str(arms_toml), "--out", str(out),
                 *extra])


def test_screen_runs_only_the_reference_and_run_reuses_it(arms_toml: Path, tmp_path: Path) -> None:
    out, js = tmp_path / "store", tmp_path / "screen.json"
    assert _screen(arms_toml, out, "--trials", "2", "--json", str(js), "-q") == 0
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 8 and {json.loads(x)["arm"] for x in lines} == {"bf16"}
    rep = ScreenReport.model_validate_json(js.read_text())
    assert (rep.arm, rep.domain, rep.episodes, rep.tasks) == ("bf16", "mini", 8, 4)
    assert rep.tool_calls == 16 and rep.success == 1.0
    assert all(c.count == 0 for c in rep.channels.values())
    # Same keys as `quantagent run`: its reference arm is loaded, only int4 runs.
    assert main(["run", "--domain", "mini", "-q", "--arms", "bf16,int4", "--config",
                 str(arms_toml), "--trials", "2", "--out", str(out)]) == EXIT_INCONCLUSIVE
    after = (out / "episodes.jsonl").read_text().splitlines()
    assert after[:8] == lines and len(after) == 16
    assert {json.loads(x)["arm"] for x in after[8:]} == {"int4"}


def test_prone_arm_is_high_risk_with_table_and_advice(arms_toml: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _screen(arms_toml, tmp_path / "s", "--arm", "int4", "--trials", "3",
                   "--amplification", "1.5") == 0
    text = capsys.readouterr().out
    # Every call of the hallucinating arm is unknown_tool: 10 per episode, 12 episodes.
    assert "quantagent screen: scripted int4 on mini" in text
    assert "12 episodes, 4 tasks, 120 tool calls; success 0.0%" in text
    row = next(line for line in text.splitlines() if "unknown_tool" in line and "│" in line)
    assert "120" in row and "high" in row and "100.0%" in row
    assert "overall risk: high" in text
    assert "unknown_tool: 100.0% of calls at full precision" in text
    assert "consider --quant-repair=reflexive" in text


def test_threshold_and_json_to_stdout(arms_toml: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    # 12 clean episodes of 2 calls: 24 calls cannot show a rate under 2%, but can show one
    # under 50%. Wilson's upper bound for 0 of n is z²/(n + z²) (Wilson 1927; Newcombe 1998
    # eq. 3 with p̂=0) = 1.95996²/(24 + 1.95996²) = 0.13797.
    assert _screen(arms_toml, tmp_path / "s", "--trials", "3", "--json", "-") == 0
    strict = json.loads(capsys.readouterr().out)
    assert strict["level"] == "elevated" and strict["threshold"] == 0.02
    assert strict["channels"]["unknown_tool"]["ci"][1] == pytest.approx(0.138, abs=1e-3)
    assert any("no failure seen" in a for a in strict["advice"])
    assert _screen(arms_toml, tmp_path / "s", "--trials", "3", "--json", "-",
                   "--threshold", "0.5") == 0
    loose = json.loads(capsys.readouterr().out)
    assert loose["level"] == "low"
    assert {c["level"] for c in loose["channels"].values()} == {"low"}


@pytest.mark.parametrize(("args", "message"), [
    (["--threshold", "1.5"], "--threshold must be in (0, 1), got 1.5"),
    (["--threshold", "x"], "--threshold must be a number, got 'x'"),
    (["--amplification", "0.5"], "--amplification must be a finite number >= 1, got 0.5"),
    (["--trials", "0"], "--trials must be >= 1, got 0"),
])
def test_bad_flags_name_the_flag_and_the_allowed_values(
        arms_toml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        args: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exc:
        _screen(arms_toml, tmp_path, *args)
    assert exc.value.code == EXIT_USAGE
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--arm", "int4+repair"], "screen 'int4' instead"),
    (["--arm", "fp9"], "unknown arm 'fp9'; known arms: bf16, int4"),
    (["--tasks", "t1,t9"], "t9"),
    (["--user-model", "openai:x"], "the user is 'scripted'; add --user llm or drop them"),
])
def test_bad_names_are_refused(arms_toml: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert _screen(arms_toml, tmp_path, *args) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("quantagent screen: error:") and message in err


def test_unknown_domain_lists_the_known_ones(mini_domains_dir: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["screen", "--domain", "retial", "--out", str(tmp_path)]) == EXIT_USAGE
    assert "unknown domain 'retial'; known domains: mini" in capsys.readouterr().err
