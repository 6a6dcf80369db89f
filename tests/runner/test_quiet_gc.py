"""``quiet_gc``: the collector is calmed for a run and restored after it, even nested."""

from __future__ import annotations

import gc

import pytest

from pytest_quantagent.runner.batch import quiet_gc


def _frozen(obj: object) -> bool:
    """Whether a gc-tracked object sits in the permanent generation (``gc.freeze``).

    ``gc.get_objects()`` lists generations 0-2 only, so a tracked object missing from it is
    frozen. (The freeze *count* is no witness: frozen objects that die by refcount leave the
    permanent generation, so the count drifts down while a run is in progress.)
    """
    assert gc.is_tracked(obj)
    return not any(o is obj for o in gc.get_objects())


def test_freezes_and_restores_even_when_nested() -> None:
    before = gc.get_threshold()
    old = [object()]  # alive when the run starts: frozen for the run
    assert not _frozen(old)
    with quiet_gc(gen0_threshold=before[0] + 1000):
        assert _frozen(old)
        assert gc.get_threshold()[0] == before[0] + 1000
        young = [object()]  # born during the run
        with quiet_gc(gen0_threshold=10**6):  # a run inside a run changes nothing more
            assert gc.get_threshold()[0] == before[0] + 1000
            assert not _frozen(young)  # the inner entry did not freeze again
        assert _frozen(old)  # the inner exit did not unfreeze
    assert gc.get_threshold() == before
    assert not _frozen(old) and gc.get_freeze_count() == 0


def test_restores_after_an_error() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), quiet_gc():
        raise RuntimeError("episode blew up")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_what_a_collection_leaves_alive_is_frozen_for_the_rest_of_the_run() -> None:
    # The run's survivors (finished records, in-flight episodes) are walked by one young
    # collection, not again by every older one; after the run nothing stays frozen and the
    # hook is gone.
    hooks = list(gc.callbacks)
    with quiet_gc():
        kept = [object()]
        assert not _frozen(kept)
        gc.collect(0)
        assert _frozen(kept)
        cycle: list[object] = []
        cycle.append(cycle)  # young garbage cycles are still collected
        del cycle
        assert gc.collect(0) >= 1
    assert not _frozen(kept) and gc.get_freeze_count() == 0 and gc.callbacks == hooks
