"""Run until decided from the user's side: ``quantagent run --until-decided`` and pytest's
``--quant-until-decided`` on the mini domain with mock arms (issue 33 item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_quantagent.analysis.gate import EXIT_INCONCLUSIVE, EXIT_NO_GO
from pytest_quantagent.cli import main
from pytest_quantagent.errors import EXIT_USAGE

ARMS = """
[arms.bf16]
backend = "mock"
model = "scripted"
rule = "mini_rules:solving_rule"

[arms.int4]
backend = "mock"
model = "scripted"
responses = [
  {tool_calls = [{name = "get_usr", arguments = {user_id = "u0"}}]},
  {content = "Done ###STOP###"},
]

[arms.same]
backend = "mock"
model = "scripted"
rule = "mini_rules:solving_rule"
"""


@pytest.fixture
def arms_toml(tmp_path: Path, mini_domains_dir: Path) -> Path:
    p = tmp_path / "arms.toml"
    p.write_text(ARMS)
    return p


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_each_cell_runs_until_decided_and_resumes_to_the_same_report(
        arms_toml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("QUANTAGENT_MINI_TASKS", "300")
    out, rep = tmp_path / "store", tmp_path / "r.json"
    argv = ["run", "--domain", "mini", "--arms", "bf16,int4,same", "--config", str(arms_toml),
            "--num-tasks", "10", "--until-decided", "--max-episodes", "80", "--out", str(out),
            "--json", str(rep)]
    assert main(argv) == EXIT_NO_GO
    err = capsys.readouterr().err
    assert "look 1/4: 10 tasks x 1 trial: int4 INCONCLUSIVE, same INCONCLUSIVE" in err
    assert "look 2/4: 20 tasks x 1 trial: int4 DEGRADED (stops), same INCONCLUSIVE" in err
    report = json.loads(rep.read_text())
    cells = {c["arm"]: c for c in report["cells"]}
    int4, same = cells["int4"], cells["same"]
    # int4 fails every task bf16 solves: decided at look 2, on that look's 20 paired episodes
    assert int4["verdict"] == "DEGRADED" and int4["episodes"] == 20 and int4["paired"] == 20
    s4 = int4["sequential"]
    assert (s4["stopped"], s4["looks_taken"], s4["episodes_used"]) == ("decided", 2, 20)
    assert [lk["tasks"] for lk in s4["planned_looks"]] == [10, 20, 40, 80]
    assert s4["alpha_spent"] == pytest.approx(sum(s4["alphas"][:2]))
    assert any(r.startswith("run until decided: decided at look 2 of 4") for r in int4["reasons"])
    # same == bf16 but too few calls to bound the channels: undecided at the cap
    assert same["verdict"] == "INCONCLUSIVE" and same["episodes"] == 80
    assert same["sequential"]["stopped"] == "cap"
    assert same["sequential"]["alpha_spent"] == pytest.approx(0.05)
    # the reference ran to the longest look, int4 only to its own
    recs = [json.loads(x) for x in _lines(out / "episodes.jsonl")]
    assert sum(r["arm"] == "bf16" for r in recs) == 80
    assert sum(r["arm"] == "int4" for r in recs) == 20
    # a re-run resumes every look from the store: nothing run, the same report
    n = len(recs)
    assert main(argv) == EXIT_NO_GO
    assert len(_lines(out / "episodes.jsonl")) == n
    again = {c["arm"]: c for c in json.loads(rep.read_text())["cells"]}
    for arm in ("int4", "same"):
        assert again[arm]["verdict"] == cells[arm]["verdict"]
        assert again[arm]["sequential"] == cells[arm]["sequential"]


def test_deterministic_arms_stop_when_the_pool_is_played_and_trials_repeat(
        arms_toml: Path, tmp_path: Path) -> None:
    rep = tmp_path / "r.json"
    assert main(["run", "--domain", "mini", "--arms", "bf16,same", "--config", str(arms_toml),
                 "--until-decided", "--max-episodes", "64", "--out", str(tmp_path / "s"),
                 "--json", str(rep), "-q"]) == EXIT_INCONCLUSIVE
    (cell,) = json.loads(rep.read_text())["cells"]
    seq = cell["sequential"]
    # 4 tasks: look 1 is 4 x 1; look 2 (4 x 2) repeats trial 0 episode for episode
    assert seq["stopped"] == "pool" and seq["looks_taken"] == 2 and cell["episodes"] == 8
    assert [(lk["tasks"], lk["trials"]) for lk in seq["planned_looks"]][:2] == [(4, 1), (4, 2)]


@pytest.mark.parametrize("extra, text", [
    (["--max-episodes", "50"], "--max-episodes caps --until-decided"),
    (["--until-decided", "--max-episodes", "2", "--num-tasks", "3"],
     "first look already has 3 episodes per arm"),
])
def test_bad_sequential_options_are_usage_errors_before_any_episode(
        arms_toml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        extra: list[str], text: str) -> None:
    out = tmp_path / "s"
    assert main(["run", "--domain", "mini", "--arms", "bf16,int4", "--config", str(arms_toml),
                 "--out", str(out), "-q", *extra]) == EXIT_USAGE
    assert text in capsys.readouterr().err
    assert not (out / "episodes.jsonl").exists() or not _lines(out / "episodes.jsonl")


PYTEST_ARMS = ARMS.replace("[arms.same]", "[arms.fp8]")

TEST_FILE = """
from pytest_quantagent.assertions import assert_score_equivalent

def test_cell(quant_cell):
    assert quant_cell.episodes
"""


def test_pytest_until_decided_reports_the_looks(pytester: pytest.Pytester, mini_domains_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUANTAGENT_MINI_TASKS", "200")
    pytester.makefile(".toml", arms=PYTEST_ARMS)
    pytester.makepyfile(TEST_FILE)
    pytester.makeini("[pytest]\nquant_until_decided = yes\n")
    result = pytester.runpytest("--quant-config=arms.toml", "--domain=mini", "--quant=int4",
                                "--quant-tasks=10", "--quant-max-episodes=80",
                                "--quant-report=r.json", "--quant-require=decision")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK  # DEGRADED is a decision
    (cell,) = json.loads((pytester.path / "r.json").read_text())["cells"]
    assert cell["verdict"] == "DEGRADED" and cell["sequential"]["stopped"] == "decided"
    assert cell["episodes"] == cell["sequential"]["episodes_used"] == 20
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["run"]["until_decided"] is True and report["run"]["max_episodes"] == 80
    assert report["test_counts"] == {"mini-int4": {"passed": 1, "failed": 0, "skipped": 0}}


def test_pytest_max_episodes_without_until_decided_is_a_usage_error(
        pytester: pytest.Pytester, mini_domains_dir: Path) -> None:
    pytester.makefile(".toml", arms=PYTEST_ARMS)
    pytester.makepyfile(TEST_FILE)
    result = pytester.runpytest("--quant-config=arms.toml", "--domain=mini", "--quant=int4",
                                "--quant-max-episodes=80")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--quant-max-episodes=80 caps --quant-until-decided*"])


def test_a_bad_until_decided_ini_value_names_the_allowed_ones(
        pytester: pytest.Pytester, mini_domains_dir: Path) -> None:
    pytester.makefile(".toml", arms=PYTEST_ARMS)
    pytester.makepyfile(TEST_FILE)
    pytester.makeini("[pytest]\nquant_until_decided = maybe\n")
    result = pytester.runpytest("--quant-config=arms.toml", "--domain=mini", "--quant=int4")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*quant_until_decided*maybe*yes*no*"])


SLOW_ARMS = """
[arms.bf16]
backend = "mock"
model = "s"
rule = "mini_rules:solving_rule"
latency_s = 0.05

[arms.int4]
backend = "mock"
model = "s"
rule = "mini_rules:solving_rule"
latency_s = 0.05
"""


def test_pytest_run_timeout_stops_the_run_and_a_rerun_resumes(
        pytester: pytest.Pytester, mini_domains_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 36 item 1: a whole-run time cap. 200 tasks at 3 calls x 50 ms with 2 in flight:
    # ~15 s of episodes per arm; the cap (5 s after the session starts) stops the run,
    # keeping what was stored.
    monkeypatch.setenv("QUANTAGENT_MINI_TASKS", "200")
    pytester.makefile(".toml", arms=SLOW_ARMS)
    pytester.makepyfile(TEST_FILE)
    args = ("--quant-config=arms.toml", "--domain=mini", "--quant=int4", "--quant-concurrency=2",
            "--quant-cache-dir=store", "--quant-episode-timeout=30", "--quant-max-steps=40")
    result = pytester.runpytest(*args, "--quant-run-timeout=5")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    text = result.stdout.str() + result.stderr.str()
    assert "the run's time cap (--quant-run-timeout) has passed: no new episode starts" in text
    assert "run the same command again to resume" in text and "Traceback" not in text
    stored = (pytester.path / "store" / "episodes.jsonl").read_text().splitlines()
    assert len(stored) < 400
    # the rerun keeps those records and adds others: the stored episodes are not run again
    keys = [json.loads(x)["key"] for x in stored]
    again = pytester.runpytest(*args, "--quant-run-timeout=10")
    assert again.ret == pytest.ExitCode.INTERRUPTED
    after = [json.loads(x)["key"] for x in
             (pytester.path / "store" / "episodes.jsonl").read_text().splitlines()]
    assert after[: len(keys)] == keys and len(set(after)) == len(after) > len(keys)


def test_pytest_bad_timeouts_are_refused_before_collection(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--quant-run-timeout=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--quant-run-timeout*0*a finite number > 0*"])


def test_analyze_caps_the_advice_at_the_stored_domains_pool(arms_toml: Path, tmp_path: Path) -> None:
    # issue 33 item 3: `quantagent analyze STORE` advises no more tasks than the installed
    # domain holds (the mini domain: 4 tasks, no fresh pool)
    out, rep = tmp_path / "s", tmp_path / "a.json"
    main(["run", "--domain", "mini", "--arms", "bf16,same", "--config", str(arms_toml),
          "--out", str(out), "-q"])
    main(["analyze", str(out), "--json", str(rep)])
    (cell,) = json.loads(rep.read_text())["cells"]
    assert cell["verdict"] == "INCONCLUSIVE"
    assert cell["plan"]["tasks"] <= 4 and not cell["plan"]["fresh"], cell["plan"]


def test_arms_of_another_model_run_against_that_models_reference(
        tmp_path: Path, mini_domains_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--arms bf16,int4,int4@other``: the config's int4 against its bf16, and model spec
    ``other``'s int4 against ``bf16@other`` (that spec's own reference), in one report."""
    from pytest_quantagent.quant import arms as arms_mod

    solving = {"rule": "mini_rules:solving_rule"}
    failing = {"responses": [{"tool_calls": [{"name": "get_usr", "arguments": {"user_id": "u0"}}]},
                             {"content": "Done ###STOP###"}]}
    specs = dict(arms_mod._MODEL_SPECS)
    specs["other"] = (lambda label: arms_mod.ArmSpec(
        label=label, backend="mock", model=f"other-{label}",
        options=failing if label == "int4" else solving), ("bf16", "int4"))
    monkeypatch.setattr(arms_mod, "_MODEL_SPECS", specs)
    monkeypatch.setenv("QUANTAGENT_MINI_TASKS", "40")
    (tmp_path / "arms.toml").write_text(ARMS)
    out, rep = tmp_path / "store", tmp_path / "r.json"
    argv = ["run", "--domain", "mini", "--arms", "bf16,same,int4@other", "--config",
            str(tmp_path / "arms.toml"), "--num-tasks", "40", "--out", str(out), "--json", str(rep)]
    assert main(argv) == EXIT_NO_GO
    report = json.loads(rep.read_text())
    cells = {c["arm"]: c for c in report["cells"]}
    assert {a: c["reference"] for a, c in cells.items()} == {"same": "bf16", "int4@other": "bf16@other"}
    assert cells["int4@other"]["verdict"] == "DEGRADED"
    assert cells["same"]["verdict"] != "DEGRADED"
    assert report["run"]["references"] == ["bf16", "bf16@other"]
    recs = [json.loads(x) for x in _lines(out / "episodes.jsonl")]
    assert {r["arm"] for r in recs} == {"bf16", "same", "bf16@other", "int4@other"}
    assert {r["model"] for r in recs if r["arm"] == "bf16@other"} == {"other-bf16"}
    # the reference of another model is named as a candidate: refused before any episode
    bad = ["run", "--domain", "mini", "--arms", "bf16,bf16@other", "--config",
           str(tmp_path / "arms.toml"), "--out", str(tmp_path / "s2")]
    assert main(bad) == EXIT_USAGE
    assert "'bf16@other', the reference arm of its model" in capsys.readouterr().err
    assert not (tmp_path / "s2" / "episodes.jsonl").exists()
