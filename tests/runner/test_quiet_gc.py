"""``quiet_gc``: the collector is calmed for a run and restored after it, even nested."""

from __future__ import annotations

import gc

import pytest

from pytest_quantagent.runner.batch import quiet_gc


def test_freezes_and_restores_even_when_nested() -> None:
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with quiet_gc(gen0_threshold=before[0] + 1000):
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert gc.get_threshold()[0] == before[0] + 1000
        with quiet_gc(gen0_threshold=10**6):  # a run inside a run changes nothing more
            assert gc.get_threshold()[0] == before[0] + 1000
        assert gc.get_freeze_count() == frozen  # the inner exit did not unfreeze
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_restores_after_an_error() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), quiet_gc():
        raise RuntimeError("episode blew up")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
