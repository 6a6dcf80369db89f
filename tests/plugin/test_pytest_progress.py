"""Live progress of a cell's episodes in pytest: a rich live display on a terminal (run
under a pseudo-terminal), plain lines in a log, nothing under -q, worker lines under xdist;
and the figures themselves (done/total, failures, episodes/s, ETA) on a fake clock."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_quantagent.runner.progress import CellProgress
from pytest_quantagent.store.records import EpisodeRecord

ARMS = """
[arms.bf16]
backend = "mock"
model = "scripted"
responses = [{content = "Sorry, I cannot help. ###STOP###"}]

[arms.int4]
backend = "mock"
model = "scripted"
responses = [{content = "Sorry, I cannot help. ###STOP###"}]
"""
GATE = "def test_gate(quant_cell):\n    assert quant_cell.episodes\n"
ARGS = ("--quant-config=arms.toml", "--quant=int4", "--domain=telecom", "--quant-tasks=3",
        "-p", "no:cacheprovider")


REPO = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def gate(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    # Subprocesses import this checkout's plugin, not another installed copy.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    pytester.makefile(".toml", arms=ARMS)
    pytester.makepyfile(test_gate=GATE)
    return pytester


def _record(success: bool, scored: bool = True) -> EpisodeRecord:
    return EpisodeRecord(
        key="k", model="m", arm="a", backend="mock", domain="telecom", task_id="1", trial=0,
        seed=0, max_errors=10, max_steps=200,
        termination="user_stop" if scored else "infrastructure_error",
        reward=1.0 if success else 0.0, success=success, n_errors=0, steps=3)


def test_plain_lines_count_done_failed_rate_and_eta() -> None:
    now = [100.0]
    out = io.StringIO()
    p = CellProgress("telecom-int4", out, live=False, interval_s=10, clock=lambda: now[0])
    ref, arm = p.arm("bf16", 4), p.arm("int4", 4)
    ref.preload(2)                        # stored on an earlier run: not in the rate
    now[0] = 104.0                        # < 10 s since the first line: no new line
    arm.advance(_record(True))
    arm.advance(_record(False))
    now[0] = 115.0                        # 3 episodes run in 15 s: 0.2/s; 3 left: ETA 15 s
    ref.advance(_record(False, scored=False))
    arm.advance(_record(True))
    arm.advance(_record(True))
    ref.advance(_record(True))            # the last one: the done line, 6 run in 15 s
    p.close()                             # the done line was written: nothing more
    assert out.getvalue().splitlines() == [
        "quantagent telecom-int4: 2/8 episodes, 0 failed (elapsed 0:00)",
        "quantagent telecom-int4: 5/8 episodes, 1 failed (1 infrastructure), 0.20 episodes/s, "
        "ETA 0:15 (elapsed 0:15)",
        "quantagent telecom-int4: 8/8 episodes done in 0:15 (0.40 episodes/s), 1 failed "
        "(1 infrastructure)",
    ]


def test_log_gets_plain_lines_and_quiet_gets_none(gate: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUANTAGENT_PROGRESS_SECONDS", "0")
    result = gate.runpytest(*ARGS)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "quantagent telecom-int4: 0/6 episodes, 0 failed (elapsed *)",
        "quantagent telecom-int4: 6/6 episodes done in *:* (* episodes/s), 6 failed",
    ])
    quiet = gate.runpytest(*ARGS, "-q", "--quant-cache-dir=other")
    quiet.assert_outcomes(passed=1)
    assert "quantagent telecom-int4:" not in quiet.stdout.str() + quiet.stderr.str()


def test_resumed_episodes_count_in_the_failures(gate: pytest.Pytester,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # Every episode fails (the arms give up). 2 tasks first: 4 episodes stored; then 3 tasks:
    # those 4 are loaded, 2 run, and all 6 failures are counted from the start.
    monkeypatch.setenv("QUANTAGENT_PROGRESS_SECONDS", "0")
    args = [a for a in ARGS if not a.startswith("--quant-tasks")]
    gate.runpytest(*args, "--quant-tasks=2").assert_outcomes(passed=1)
    result = gate.runpytest(*args, "--quant-tasks=3")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "quantagent telecom-int4: 4/6 episodes, 4 failed (elapsed *)",
        "quantagent telecom-int4: 6/6 episodes done in *:* (* episodes/s), 6 failed",
    ])


@pytest.mark.slow  # two worker processes: ~8 s
def test_xdist_workers_report_their_cells(gate: pytest.Pytester,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUANTAGENT_PROGRESS_SECONDS", "0")
    result = gate.runpytest_subprocess(*ARGS, "-n", "2")
    result.assert_outcomes(passed=1)
    result.stderr.fnmatch_lines(["[[]gw?] quantagent telecom-int4: 6/6 episodes done in *, 6 failed"])


def test_terminal_gets_a_rich_live_display(gate: pytest.Pytester) -> None:
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "PY_COLORS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *ARGS], cwd=gate.path,
                            stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    raw = b"".join(chunks).decode("utf-8", "replace")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    assert proc.returncode == 0, text
    assert "\x1b[" in raw                                   # drawn with terminal codes
    assert re.search(r"telecom-int4 bf16 .*━.* 3/3 failed 3 .*ep/s ETA 0:00", text), text
    assert re.search(r"telecom-int4 int4 .*━.* 3/3 failed 3", text), text
