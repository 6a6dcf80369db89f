"""Progress bars: counts kept always; output only on a TTY and when not quiet."""

from __future__ import annotations

import io

from pytest_quantagent.runner.progress import RunProgress
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import TerminationReason


class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def _rec(success: bool, termination: TerminationReason = TerminationReason.USER_STOP) -> EpisodeRecord:
    return EpisodeRecord(key="k", model="m", arm="int4", backend="mock", domain="d", task_id="t", trial=0,
                         seed=0, max_errors=10, max_steps=200, termination=termination,
                         reward=float(success), success=success, n_errors=0, steps=1)


def _drive(p: RunProgress) -> None:
    with p:
        bar = p.arm("int4", 5)
        bar.preload(2)
        bar.advance(_rec(True))
        bar.advance(_rec(False))
        bar.advance(_rec(False, TerminationReason.INFRASTRUCTURE_ERROR))
    assert (bar.done, bar.failed, bar.infra) == (5, 1, 1)


def test_silent_when_not_a_tty() -> None:
    out = io.StringIO()
    _drive(RunProgress(stream=out))
    assert out.getvalue() == ""


def test_silent_when_quiet_even_on_a_tty() -> None:
    out = _TTY()
    _drive(RunProgress(quiet=True, stream=out))
    assert out.getvalue() == ""


def test_bar_on_a_tty_shows_counts() -> None:
    out = _TTY()
    _drive(RunProgress(stream=out))
    text = out.getvalue()
    assert "int4" in text and "5/5" in text and "fail 1" in text and "infra 1" in text
