"""Rate ratio edge cases."""

from __future__ import annotations

import pytest


def test_few_events_in_one_task_do_not_give_an_overconfident_ratio() -> None:
    # 2 vs 4 failures, all in the same task, equal calls: the sandwich alone gives a
    # near-zero variance here (both arms' events sit in one cluster). The interval must
    # be at least as wide as the Poisson one: exp(log(0.5) ± 1.96·sqrt(1/2 + 1/4))
    # = [0.092, 2.73] with a normal reference; with t(4) it is wider still.
    from pytest_quantagent.stats.ratio import rate_ratio_from_clusters

    r = rate_ratio_from_clusters([2, 0, 0, 0, 0], [40] * 5, [4, 0, 0, 0, 0], [40] * 5)
    assert r.ratio == pytest.approx(0.5)
    assert r.ci.low < 0.092 and r.ci.high > 2.73
    assert r.pvalue > 0.5
