"""The failure-set gate's permutation test (metrics.failure_sets), against scipy's."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from pytest_quantagent.metrics.failure_sets import failure_set_change_pvalue, judge_failure_set

ARM = {"a": 8, "b": 5, "c": 4, "d": 3, "e": 2, "f": 2, "g": 1}
REF = {"a": 4, "b": 7, "c": 2, "d": 5, "h": 3, "e": 1, "i": 2, "f": 1}


def _scipy_pvalue(arm: dict[str, int], ref: dict[str, int], n: int) -> float:
    """Independent reference: scipy.stats.permutation_test over the individual failures'
    names (permutation_type="independent" shuffles failures between the arms, keeping each
    arm's total), statistic = Spearman of the two per-name count profiles, H1: lower."""
    names = sorted(set(arm) | set(ref))
    x = np.repeat(np.arange(len(names)), [arm.get(k, 0) for k in names])
    y = np.repeat(np.arange(len(names)), [ref.get(k, 0) for k in names])

    def rho(xs: np.ndarray, ys: np.ndarray) -> float:
        ca = np.bincount(xs.astype(int), minlength=len(names))
        cr = np.bincount(ys.astype(int), minlength=len(names))
        return float(stats.spearmanr(ca, cr).statistic)

    res = stats.permutation_test((x, y), rho, permutation_type="independent",
                                 alternative="less", n_resamples=n, random_state=1)
    return float(res.pvalue)


def test_pvalue_matches_scipy_permutation_test() -> None:
    ours = failure_set_change_pvalue(ARM, REF, n_permutations=4000, seed=0)
    ref = _scipy_pvalue(ARM, REF, 4000)
    assert ours is not None
    # Two Monte Carlo estimates of one p (~0.35) with 4000 draws each: SE of the difference
    # sqrt(2 * 0.35 * 0.65 / 4000) = 0.011; 0.04 is 3.7 SE.
    assert ours == pytest.approx(ref, abs=0.04)
    assert 0.1 < ours < 0.9


def test_a_changed_failure_set_is_significant() -> None:
    arm = {"made_up_0": 30, "made_up_1": 30, "x": 1}
    ref = {"get_thing_0": 10, "get_thing_1": 10, "x": 2}
    p = failure_set_change_pvalue(arm, ref)
    assert p is not None and p < 0.01
    assert p == pytest.approx(_scipy_pvalue(arm, ref, 2000), abs=0.01)


def test_judgement_needs_evidence_and_enough_failures() -> None:
    # Spearman 0.4 on 25 failures each: below 0.9 but within chance -> same, with the reason.
    verdict, why = judge_failure_set(0.4, 0.3, 25, 25)
    assert verdict == "same" and "within chance (permutation p=0.3" in why
    assert judge_failure_set(0.4, 0.01, 25, 25)[0] == "changed"
    assert judge_failure_set(0.95, 0.01, 25, 25)[0] == "same"
    assert judge_failure_set(-1.0, 0.001, 60, 19) == (
        "cannot judge", "60 vs 19 failures (needs 20 in each arm)")
    assert judge_failure_set(None, None, 30, 30)[0] == "cannot judge"


def test_undefined_rank_correlation_gives_none() -> None:
    assert failure_set_change_pvalue({"a": 3}, {"a": 5}) is None
    assert failure_set_change_pvalue({"a": 3, "b": 3}, {"a": 1, "b": 2}) is None  # constant arm
