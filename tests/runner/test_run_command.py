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
from typing import Any

import pytest

from pytest_quantagent.analysis.gate import EXIT_INCONCLUSIVE
from pytest_quantagent.cli import main
from pytest_quantagent.errors import EXIT_INTERRUPTED, EXIT_USAGE

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


def test_ctrl_c_mid_run_is_one_line_and_the_rerun_runs_only_the_rest(tmp_path: Path) -> None:
    # issue 36 item 8: Ctrl-C printed 85 lines of traceback and no word about the store.
    cfg = tmp_path / "arms.toml"
    # 0.1 s per model call, 3 calls per episode, one at a time: about 24 s for 80 episodes,
    # so the interrupt lands mid-run.
    cfg.write_text('[arms.bf16]\nbackend = "mock"\nmodel = "s"\n'
                   'rule = "mini_rules:logged_solving_rule"\nlatency_s = 0.1\n')
    out, log = tmp_path / "store", tmp_path / "episodes_run.log"
    env = {**os.environ, "QUANTAGENT_DOMAINS_DIR": str(HERE / "domains"), "OMP_NUM_THREADS": "1",
           "MINI_RULES_EPISODE_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "pytest_quantagent.cli", "run", "--domain", "mini", "--arms", "bf16",
           "--config", str(cfg), "--trials", "20", "--out", str(out), "-q"]
    proc = subprocess.Popen([*cmd, "--concurrency", "1"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    store = out / "episodes.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not store.exists() or not store.read_bytes().count(b"\n")):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    lines = store.read_bytes().splitlines()
    n = len(lines)
    assert proc.returncode == EXIT_INTERRUPTED, err.decode()
    text = err.decode()
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    assert text.strip() == (f"quantagent run: interrupted; {n} episodes stored in {store} ({n} new in "
                            "this run); run the same command again to resume")
    assert 1 <= n < 80, "the interrupt must land mid-run"
    records = [json.loads(x) for x in lines]  # every line a whole record, none torn
    assert all(r["task_id"] and r["key"] for r in records)
    # The rerun (more episodes at once, which is no part of an episode's key, to keep this
    # test short) runs exactly the missing episodes and leaves the stored lines as they were.
    log.unlink()
    done = subprocess.run([*cmd, "--concurrency", "16"], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    after = store.read_bytes().splitlines()
    assert after[:n] == lines
    assert len(log.read_text().splitlines()) == 80 - n
    keys = [json.loads(x)["key"] for x in after]
    assert len(keys) == len(set(keys)) == 80


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Any:
    """A tmp directory made read-only with all it holds (as ``chmod -R a-w``) for the test,
    writable again after it."""
    if os.geteuid() == 0:
        pytest.skip("root writes to read-only directories anyway")
    made: list[Path] = []

    def make(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        for p in sorted(path.rglob("*"), reverse=True):
            p.chmod(0o555 if p.is_dir() else 0o444)
            made.append(p)
        path.chmod(0o555)
        made.append(path)
        return path

    yield make
    for p in reversed(made):
        p.chmod(0o755 if p.is_dir() else 0o644)


def test_a_read_only_store_is_refused_in_one_line_before_any_episode(
        tmp_path: Path, mini_domains_dir: Path, read_only_dir: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 36 item 8: a read-only store was a PermissionError traceback, even when every
    # episode was stored already.
    log = tmp_path / "episodes_run.log"
    monkeypatch.setenv("MINI_RULES_EPISODE_LOG", str(log))
    cfg = tmp_path / "arms.toml"
    cfg.write_text('[arms.bf16]\nbackend = "mock"\nmodel = "s"\nrule = "mini_rules:logged_solving_rule"\n')
    out = tmp_path / "store"
    argv = ["--arms", "bf16", "--config", str(cfg), "--out", str(out), "--tasks"]
    assert _run(*argv, "t0,t1") == 0  # a store holding 2 episodes
    before = (out / "episodes.jsonl").read_bytes()
    read_only_dir(out)
    log.unlink()
    capsys.readouterr()
    assert _run(*argv, "t0,t1,t2") == EXIT_USAGE  # one episode to run
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"quantagent run: error: --out: the store directory {str(out)!r} is not writable (permission "
        f"denied); a run adds episodes and lock files there; to report what it holds: quantagent "
        f"analyze {out}"]
    assert not log.exists() and (out / "episodes.jsonl").read_bytes() == before
    # A store that does not exist yet, in a folder that cannot take it.
    parent = read_only_dir(tmp_path / "locked")
    assert _run("--arms", "bf16", "--config", str(cfg), "--out", str(parent / "store")) == EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [
        f"quantagent run: error: --out: the store directory {str(parent / 'store')!r} cannot be "
        f"created: {str(parent)!r} is not writable (permission denied)"]
    assert not log.exists() and not (parent / "store").exists()


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
