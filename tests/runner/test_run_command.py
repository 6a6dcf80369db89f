"""`quantagent run` end to end on the mini domain with mock arms (in-process and as a
subprocess killed with SIGKILL and resumed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_quantagent.analysis.gate import EXIT_INCONCLUSIVE
from pytest_quantagent.cli import main
from pytest_quantagent.errors import EXIT_USAGE

HERE = Path(__file__).parent
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
"""


@pytest.fixture
def arms_toml(tmp_path: Path, mini_domains_dir: Path) -> Path:
    p = tmp_path / "arms.toml"
    p.write_text(ARMS)
    return p


def _run(*args: str) -> int:
    return main(["run", "--domain", "mini", "-q", *args])


def test_two_arm_run_writes_report_and_resumes(arms_toml: Path, tmp_path: Path) -> None:
    out, rep = tmp_path / "store", tmp_path / "report.json"
    argv = ["--arms", "bf16,int4", "--config", str(arms_toml), "--trials", "2", "--out", str(out),
            "--json", str(rep)]
    assert _run(*argv) == EXIT_INCONCLUSIVE
    report = json.loads(rep.read_text())
    (cell,) = report["cells"]
    assert (cell["arm"], cell["reference"], cell["episodes"], cell["paired"]) == ("int4", "bf16", 8, 8)
    assert cell["success"]["reference"] == 1.0 and cell["success"]["arm"] == 0.0
    assert cell["channels"]["unknown_tool"]["arm_count"] == 8
    assert report["run"]["arms"] == ["bf16", "int4"] and report["run"]["budget"] == 10
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 16
    before = (out / "episodes.jsonl").stat().st_mtime_ns
    assert _run(*argv) == EXIT_INCONCLUSIVE  # resume: nothing to run, nothing appended
    assert (out / "episodes.jsonl").stat().st_mtime_ns == before
    assert json.loads(rep.read_text())["cells"][0]["episodes"] == 8


def test_repair_flag_adds_repair_arms_side_by_side(arms_toml: Path, tmp_path: Path) -> None:
    rep = tmp_path / "r.json"
    assert _run("--arms", "bf16,int4", "--config", str(arms_toml), "--repair", "reflexive",
                "--out", str(tmp_path / "s"), "--json", str(rep)) == EXIT_INCONCLUSIVE
    report = json.loads(rep.read_text())
    assert [(c["arm"], c["reference"]) for c in report["cells"]] == [
        ("bf16+repair", "bf16"), ("int4", "bf16"), ("int4+repair", "bf16")]
    assert report["run"]["repair"] == "reflexive"
    recs = [json.loads(x) for x in (tmp_path / "s" / "episodes.jsonl").read_text().splitlines()]
    assert {(r["arm"], r["repair"]) for r in recs} == {
        ("bf16", "none"), ("int4", "none"), ("bf16+repair", "reflexive"), ("int4+repair", "reflexive")}


def test_one_arm_run_has_null_reference(arms_toml: Path, tmp_path: Path) -> None:
    rep = tmp_path / "r.json"
    assert _run("--arms", "int4", "--config", str(arms_toml), "--tasks", "t1,t2",
                "--out", str(tmp_path / "s"), "--json", str(rep)) == 0
    (cell,) = json.loads(rep.read_text())["cells"]
    assert cell["reference"] is None and cell["arm"] == "int4" and cell["episodes"] == 2
    assert cell["channels"]["unknown_tool"]["arm_count"] == 2


@pytest.mark.parametrize("arms,expected", [
    ("bf16,fp9", r"unknown arm 'fp9'; known arms: bf16, int4"),
    ("bf16,,int4", r"unknown arm 'bf16,,int4'; known arms: bf16, int4"),
    ("bf16,bf16", r"arm 'bf16' is listed twice"),
])
def test_bad_arms_refused_with_allowed_values(arms_toml: Path, tmp_path: Path, arms: str, expected: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("--arms", arms, "--config", str(arms_toml), "--out", str(tmp_path)) == EXIT_USAGE
    import re
    assert re.search(expected, capsys.readouterr().err)


def test_unknown_backend_refused_with_known_backends(tmp_path: Path, mini_domains_dir: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text('[arms.bf16]\nbackend = "vlm"\nmodel = "x"\n')
    assert _run("--arms", "bf16", "--config", str(cfg), "--out", str(tmp_path)) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "unknown backend 'vlm'; known backends:" in err
    assert "mock" in err and "openai" in err


def test_unknown_domain_and_task_refused(arms_toml: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--domain", "nope", "--arms", "bf16", "--config", str(arms_toml), "-q"]) == EXIT_USAGE
    assert "unknown domain 'nope'; known domains: mini" in capsys.readouterr().err
    assert _run("--arms", "bf16", "--config", str(arms_toml), "--tasks", "t9", "--out", str(tmp_path)) == EXIT_USAGE
    assert "unknown mini task id 't9' (closest: t3, t2, t1, t0; 4 task ids in domain 'mini')" in capsys.readouterr().err


def test_sigkill_mid_run_then_resume_gives_exactly_n(tmp_path: Path) -> None:
    cfg = tmp_path / "arms.toml"
    # 40 ms per model call, 3 calls per episode, concurrency 2: ~16 s for all 40 episodes.
    cfg.write_text('[arms.bf16]\nbackend = "mock"\nmodel = "s"\nrule = "mini_rules:solving_rule"\nlatency_s = 0.04\n')
    out = tmp_path / "store"
    env = {**os.environ, "QUANTAGENT_DOMAINS_DIR": str(HERE / "domains"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "pytest_quantagent.cli", "run", "--domain", "mini", "--arms", "bf16",
           "--config", str(cfg), "--trials", "10", "--concurrency", "2", "--out", str(out), "-q"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = out / "episodes.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not store.exists() or len(store.read_bytes().splitlines()) < 6):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    n_killed = len(store.read_bytes().splitlines())
    assert 6 <= n_killed < 40, "the kill must land mid-run"
    done = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    keys = [json.loads(x)["key"] for x in store.read_bytes().splitlines()]
    assert len(keys) == len(set(keys)) == 40
    pairs = sorted((json.loads(x)["task_id"], json.loads(x)["trial"]) for x in store.read_bytes().splitlines())
    assert pairs == sorted((f"t{i}", k) for i in range(4) for k in range(10))


def test_more_tasks_than_the_pool_holds_is_refused_not_cut(arms_toml: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # issue 33 item 3: a count above the pool used to run the whole pool silently
    assert _run("--arms", "bf16,int4", "--config", str(arms_toml), "--num-tasks", "9",
                "--out", str(tmp_path / "s")) == EXIT_USAGE
    assert "9 tasks asked, but the mini pool holds 4; allowed: 1 to 4, all" in capsys.readouterr().err
    assert not (tmp_path / "s" / "episodes.jsonl").exists()


def test_the_advice_never_asks_for_more_tasks_than_the_pool_holds(tmp_path: Path, mini_domains_dir: Path) -> None:
    from tests.cli.test_cli_polish import SAME_ARMS

    cfg = tmp_path / "arms.toml"
    cfg.write_text(SAME_ARMS)
    rep = tmp_path / "r.json"
    assert _run("--arms", "bf16,int4", "--config", str(cfg), "--out", str(tmp_path / "s"),
                "--json", str(rep)) == EXIT_INCONCLUSIVE
    (cell,) = json.loads(rep.read_text())["cells"]
    # 4 identical pairs: uncapped, the score alone would ask for 179 tasks at 1 trial (see
    # tests/plugin/test_assertions.py) and the silent channels for 1,163 agent calls per arm;
    # the mini pool holds 4 tasks and has no fresh pool, so: all 4 tasks, more trials (one
    # trial per task cannot show that trials add nothing, so they are advised, with that
    # caveat)
    plan = cell["plan"]
    assert plan["tasks"] == 4 and plan["trials"] > 1 and plan["reachable"]
    assert plan["trials_useful"] is None and not plan["fresh"]
    assert f"(--num-tasks 4 --trials {plan['trials']})" in plan["message"]
    assert "trials help only if repeated trials differ" in plan["message"]
    assert "--num-tasks 153" not in json.dumps(cell)
