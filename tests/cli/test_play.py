"""``quantagent play``: a person or a piped script plays the agent (tested both ways)."""

from __future__ import annotations

import io
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_quantagent.cli import main
from pytest_quantagent.commands.play import BadCall, parse_call, play
from pytest_quantagent.errors import EXIT_USAGE

REPO = Path(__file__).resolve().parents[2]
SCRIPT = [
    "Hi! What is the phone number on your account?",
    "/call nope {}",
    '/call get_customer_by_phone {"phone_number": 555',
    '/call get_customer_by_phone {"phone_number": "555-0106"}',
    "Thanks, Ben. It looks like airplane mode is on. Please turn airplane mode off.",
    "Is there anything else I can help you with?",
]


def test_parse_call_names_the_problem() -> None:
    tools = ["get_customer_by_phone", "send_payment_request"]
    assert parse_call('/call get_customer_by_phone {"phone_number": "1"}', tools) == (
        "get_customer_by_phone", {"phone_number": "1"})
    assert parse_call("/call send_payment_request", tools) == ("send_payment_request", {})
    with pytest.raises(BadCall, match=r"unknown tool 'nope'.*get_customer_by_phone"):
        parse_call("/call nope {}", tools)
    with pytest.raises(BadCall, match="bad JSON arguments for get_customer_by_phone"):
        parse_call("/call get_customer_by_phone {x", tools)
    with pytest.raises(BadCall, match="must be a JSON object, got list"):
        parse_call("/call get_customer_by_phone [1]", tools)
    with pytest.raises(BadCall, match="usage"):
        parse_call("/call", tools)


def test_a_piped_script_plays_a_whole_episode_and_is_saved(tmp_path: Path) -> None:
    out = io.StringIO()
    outcome = play("telecom", "service_7_18", io.StringIO("\n".join(SCRIPT) + "\n"), out,
                   save_to=tmp_path / "store")
    text = out.getvalue()
    # Bad /call lines are reported and the game goes on.
    assert "error: unknown tool 'nope'" in text
    assert "error: bad JSON arguments for get_customer_by_phone" in text
    # The user's replies, its own device action and the agent's tool result are shown.
    assert "user: My phone number is 555-0106." in text
    assert "user calls: toggle_airplane_mode {}" in text
    assert "Airplane Mode is now OFF" in text
    assert '"customer_id": "C05"' in text
    assert "termination: user_stop" in text and "reward: 1" in text
    assert "env assertion assert_service_status: met" in text
    assert outcome.reward == 1.0
    rows = [json.loads(line) for line in (tmp_path / "store" / "episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["arm"] == "human" and rows[0]["task_id"] == "service_7_18"
    assert rows[0]["reward"] == 1.0
    # The user's device call stays recorded as user-side.
    assert [(c["name"], c["requestor"]) for c in rows[0]["calls"]] == [
        ("get_customer_by_phone", "assistant"), ("toggle_airplane_mode", "user")]


def test_end_of_input_ends_the_game_with_a_reward_breakdown() -> None:
    out = io.StringIO()
    outcome = play("retail", None, io.StringIO("/tools\n/help\n"), out)
    text = out.getvalue()
    assert "tools: calculate" in text and "/call NAME {json}" in text
    assert "termination: agent_stop" in text and "reward: 0" in text
    assert outcome.reward == 0.0


def test_cli_errors_name_the_bad_value(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["play", "--domain", "telecom", "--task", "no_such_task"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no_such_task" in err and "service_7_18" in err
    assert main(["play", "--domain", "nodomain"]) == EXIT_USAGE
    assert "nodomain" in capsys.readouterr().err


def _read_until(fd: int, marker: bytes, timeout: float = 60.0) -> bytes:
    buf = b""
    end = time.monotonic() + timeout
    while marker not in buf:
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {marker!r} in {buf.decode(errors='replace')[-2000:]}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            buf += chunk
    return buf


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_play_from_a_terminal() -> None:
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_quantagent.cli", "play", "--domain", "telecom",
         "--task", "service_7_18"],
        stdin=slave, stdout=slave, stderr=slave, cwd=REPO, close_fds=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    os.close(slave)
    try:
        seen = _read_until(master, b"agent> ")
        assert b"user: Hello. My phone has had no signal" in seen
        for line in SCRIPT:
            os.write(master, line.encode() + b"\n")
            if line.startswith("Is there"):
                seen += _read_until(master, b"reward:")
            else:
                seen += _read_until(master, b"agent> ")
        text = seen.decode(errors="replace")
        assert "error: unknown tool 'nope'" in text
        assert "user calls: toggle_airplane_mode {}" in text
        assert "termination: user_stop" in text
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


SCRIPTS = sorted((Path(__file__).parent / "play_scripts").glob("*.txt"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_verbose_chat_model_episodes_succeed(script: Path) -> None:
    """Whole episodes played in a chat model's verbose style (markdown, empathy, recaps,
    offers, closing summaries) are solved without rephrasing and without user failures."""
    domain, task = script.stem.split("__")
    out = io.StringIO()
    outcome = play(domain, task, io.StringIO(script.read_text(encoding="utf-8")), out)
    assert outcome.reward == 1.0, out.getvalue()[-3000:]
    assert outcome.termination.value == "user_stop"
    assert not [c for c in outcome.calls if c.error], out.getvalue()[-3000:]
