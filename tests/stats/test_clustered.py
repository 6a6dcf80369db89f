"""stats.clustered and the weighted Holm / planner: each against an independent reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sps
from statsmodels.stats import rates as sm_rates
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from pytest_quantagent.stats.clustered import (
    _score_z,
    _tango_z,
    channel_ratio,
    paired_score,
    tango_restricted_p21,
)
from pytest_quantagent.stats.multiplicity import weighted_holm
from pytest_quantagent.stats.power import plan_design


def _pairs(n11: int, n12: int, n21: int, n22: int) -> tuple[np.ndarray, np.ndarray]:
    """Arm/reference 0/1 vectors of a paired table (n12: only the arm succeeded)."""
    arm = np.r_[np.ones(n11), np.ones(n12), np.zeros(n21), np.zeros(n22)]
    ref = np.r_[np.ones(n11), np.zeros(n12), np.ones(n21), np.zeros(n22)]
    return arm, ref


@pytest.mark.parametrize(("n12", "n21", "n", "delta"),
                         [(3, 9, 40, -0.075), (0, 4, 114, -0.075), (5, 2, 60, 0.05), (7, 7, 50, 0.1)])
def test_tango_restricted_mle_maximises_the_constrained_likelihood(
        n12: int, n21: int, n: int, delta: float) -> None:
    # Independent reference: maximise the multinomial log-likelihood of (n11+n22, n12, n21)
    # numerically under p12 - p21 = delta (scipy bounded scalar search over p21); the
    # closed form of Tango (1998) eq. 4 must agree to 1e-6.
    rest = n - n12 - n21

    def nll(p21: float) -> float:
        p12 = p21 + delta
        p0 = 1 - p12 - p21
        return -(n12 * math.log(p12) + n21 * math.log(p21) + rest * math.log(p0))

    lo = max(1e-12, -delta + 1e-12)
    hi = (1 - delta) / 2 - 1e-12
    ref = optimize.minimize_scalar(nll, bounds=(lo, hi), method="bounded",
                                   options={"xatol": 1e-12}).x
    assert tango_restricted_p21(n12, n21, n, delta) == pytest.approx(ref, abs=1e-6)


def test_tango_at_zero_is_mcnemars_z() -> None:
    # At delta = 0 Tango's score statistic is McNemar's (b - c)/sqrt(b + c): statsmodels
    # mcnemar(exact=False, correction=False) gives its square (1e-12).
    n11, n12, n21, n22 = 20, 3, 11, 6
    z = _tango_z(0.0, n12, n21, n11 + n12 + n21 + n22, None, None, 40)
    chi2 = mcnemar([[n11, n12], [n21, n22]], exact=False, correction=False).statistic
    assert z * z == pytest.approx(chi2, rel=1e-12)


def test_paired_score_interval_inverts_the_score_and_one_harmful_flip_is_not_equivalence() -> None:
    # Issue 23: 40 pairs with a single harmful flip passed the t-based TOST (p=0.026); the
    # exact bound on the harm rate is 0.113, so equivalence within ±7.5 pts must not be shown.
    arm, ref = _pairs(39, 0, 1, 0)
    sc = paired_score(arm, ref, margin=0.075, alpha=0.05)
    assert sc.tost_p > 0.05 and sc.ci.low < -0.075 < sc.diff
    # the 90% interval's ends are where the score statistic equals ∓z_.95
    q = 1.6448536269514722
    assert _tango_z(sc.ci.low, 0, 1, 40, None, None, 40) == pytest.approx(q, abs=1e-7)
    assert _tango_z(sc.ci.high, 0, 1, 40, None, None, 40) == pytest.approx(-q, abs=1e-7)
    # harm: the exact one-sided McNemar, half of statsmodels' exact two-sided p (1e-12)
    arm, ref = _pairs(20, 2, 9, 9)
    sc = paired_score(arm, ref)
    two = mcnemar([[20, 2], [9, 9]], exact=True).pvalue
    assert sc.harm_p == pytest.approx(two / 2, rel=1e-12) and sc.method == "tango"


def test_paired_score_with_clusters_is_no_narrower_than_tango() -> None:
    rng = np.random.default_rng(3)
    arm = (rng.random(120) < 0.6).astype(float)
    ref = (rng.random(120) < 0.6).astype(float)
    tasks = np.repeat(np.arange(40), 3).astype(str)
    plain = paired_score(arm, ref)
    clus = paired_score(arm, ref, clusters=tasks)
    assert clus.method == "tango-cluster" and plain.method == "tango"
    assert clus.ci.high - clus.ci.low >= plain.ci.high - plain.ci.low - 1e-12
    with pytest.raises(ValueError, match=r"reference contains 2.0; allowed: 0, 1"):
        paired_score([1, 0], [2, 0])
    with pytest.raises(ValueError, match=r"margin=1.5 is not allowed"):
        paired_score([1, 0], [1, 0], margin=1.5)


def test_channel_score_matches_statsmodels_poisson_score_test_in_one_stratum() -> None:
    # One task: the model variance is the whole variance and the conditional score z equals
    # statsmodels' score test of the Poisson rate ratio against value=1.2 (1e-10).
    ref = sm_rates.test_poisson_2indep(30, 1000, 15, 900, value=1.2, method="score", alternative="larger")
    z = _score_z(math.log(1.2), np.array([30.0]), np.array([1000.0]), np.array([45.0]),
                 np.array([900.0]))
    assert z == pytest.approx(ref.statistic, rel=1e-10)


def test_a_stuck_episode_is_one_unit_of_evidence() -> None:
    calls = np.full(40, 10.0)
    stuck = np.zeros(40)
    stuck[3] = 9
    one = channel_ratio(stuck, calls, np.zeros(40), calls)
    assert one.amplified_p > 0.1 and one.clusters == 1 and one.upper == math.inf
    spread = np.zeros(40)
    spread[:9] = 1
    many = channel_ratio(spread, calls, np.zeros(40), calls)
    assert many.amplified_p < 0.05 < one.amplified_p
    # 0 vs 0: nothing to test, the interval is [0, inf], the increase bound is of order 1/calls
    none = channel_ratio(np.zeros(40), calls, np.zeros(40), calls)
    assert (none.ci.low, none.ci.high, none.amplified_p) == (0.0, math.inf, 1.0)
    assert 0 < none.increase_upper < 0.01
    with pytest.raises(ValueError, match="reference calls=0"):
        channel_ratio([1], [10], [0], [0])


def test_weighted_holm_equals_holm_with_equal_weights_and_a_hand_example() -> None:
    p = [0.01, 0.04, 0.03, 0.2, 0.001]
    ref = multipletests(p, method="holm")[1]
    got = weighted_holm(p, [1.0] * 5).pvalues_adjusted
    assert np.allclose(got, ref, rtol=0, atol=1e-15)
    # by hand (Holm 1979 §4): p/w = .02, .16, .12 -> order 0, 2, 1;
    # 0: .01·1/.5 = .02; 2: .03·.5/.25 = .06; 1: max(.06, .04·.25/.25) = .06
    assert weighted_holm([0.01, 0.04, 0.03], [0.5, 0.25, 0.25]).pvalues_adjusted == \
        pytest.approx((0.02, 0.06, 0.06))
    with pytest.raises(ValueError, match="weights must be finite and > 0"):
        weighted_holm([0.1], [0.0])


def test_planner_asks_for_tasks_when_between_task_variance_dominates() -> None:
    rng = np.random.default_rng(1)
    tasks = np.repeat(np.arange(20), 5).astype(str)
    # task-level effects: whole tasks differ, trials agree -> between-task variance
    eff = rng.choice([-1.0, 0.0, 0.0, 1.0], 20)
    d = np.repeat(eff, 5)
    plan = plan_design(d, tasks)
    assert plan.between_var > plan.within_var and plan.trials == 5 and (plan.tasks or 0) > 20
    assert "--quant-tasks" in plan.message and "more trials cannot help" in plan.message
    capped = plan_design(d, tasks, max_tasks=30, trials_flag="--trials", tasks_flag="--num-tasks")
    assert not capped.reachable and capped.tasks is None and "cannot reach" in capped.message
    # trial-level noise only: more trials over the same tasks
    noise = rng.choice([-1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], 100)
    noise -= np.repeat(np.bincount(np.repeat(np.arange(20), 5), weights=noise) / 5, 5)
    p2 = plan_design(noise, tasks)
    assert p2.tasks == 20 and (p2.trials or 0) > 5 and "--quant-trials" in p2.message
    # one trial, no discordance: the planning floor 0.1 -> 153 tasks (Chow, Shao & Wang
    # 2008, §3.2.4: (1.645 + 1.2816)^2 · 0.1 / 0.075^2 = 152.3)
    p1 = plan_design(np.zeros(10), np.arange(10).astype(str))
    assert (p1.tasks, p1.trials) == (153, 1)


@pytest.mark.parametrize(("n12", "n21", "n"), [(2, 9, 60), (0, 12, 114), (5, 5, 40), (1, 20, 80)])
def test_inferiority_p_is_the_damage_side_of_the_tost_interval(n12: int, n21: int, n: int) -> None:
    # Duality (no reference library has Tango's paired test): the one-sided test of H0
    # diff >= -margin at level α rejects exactly when the 1 − 2α interval the TOST decides on
    # lies below −margin; and its p is the complement of the non-inferiority p (the same
    # continuous statistic at −margin), to 1e-12.
    arm, ref = _pairs(n - n12 - n21 - 5, n12, n21, 5)
    for margin in (0.05, 0.075, 0.1):
        sc = paired_score(arm, ref, margin=margin, alpha=0.05)
        assert (sc.inferiority_p < 0.05) == (sc.ci.high < -margin)
        assert sc.inferiority_p == pytest.approx(1 - sc.noninferiority_p, abs=1e-12)
    # task-clustered: the same duality with the t reference
    tasks = np.arange(n) // 2
    sc = paired_score(arm, ref, clusters=tasks, margin=0.075)
    assert (sc.inferiority_p < 0.05) == (sc.ci.high < -0.075)


def test_paired_strata_equal_task_strata_when_no_pair_has_failures_on_both_sides() -> None:
    # Reference: with at most one failing arm per pair nothing is matched, so the paired
    # model variance is the task-strata one; with each pair its own task the two statistics
    # (and bounds) must agree to 1e-10.
    rng = np.random.default_rng(3)
    n = 200
    calls_a = rng.poisson(10, n) + 1.0
    calls_r = rng.poisson(10, n) + 1.0
    fail = rng.random(n) < 0.2
    side = rng.random(n) < 0.6
    ya = np.where(fail & side, 1.0, 0.0)
    yr = np.where(fail & ~side, 1.0, 0.0)
    paired = channel_ratio(ya, calls_a, yr, calls_r, clusters=np.arange(n), paired=True)
    task = channel_ratio(ya, calls_a, yr, calls_r)
    assert paired.upper == pytest.approx(task.upper, rel=1e-10)
    assert paired.amplified_p == pytest.approx(task.amplified_p, rel=1e-10)
    assert paired.increase_upper == pytest.approx(task.increase_upper, rel=1e-10)
    assert paired.strata == "pair" and task.strata == "task"


def test_byte_identical_arms_are_decidable_only_with_pairing() -> None:
    # issue 33: 160 tasks, both arms the same unknown_tool count on every paired episode
    # (160 vs 160). Task strata keep the binomial split's variance and stay open; paired
    # strata bound the ratio below ×1.2 and the increase below 0.2 per 100 calls.
    rng = np.random.default_rng(4)
    calls = rng.poisson(10, 160) + 1.0
    y = rng.poisson(1.0, 160).astype(float)
    y *= 160 / y.sum()
    y = np.round(y)
    paired = channel_ratio(y, calls, y, calls, clusters=np.arange(160), paired=True,
                           tolerance=0.002)
    task = channel_ratio(y, calls, y, calls, tolerance=0.002)
    assert paired.upper < 1.2 < task.upper
    assert paired.increase_upper < 0.002 < task.increase_upper
    assert paired.ci.low <= 1.0 <= paired.ci.high


def test_channel_damage_p_is_the_intersection_union_test() -> None:
    # Berger (1982): "ratio > R and increase > τ" is shown when both one-sided tests reject;
    # its p is the larger of the two. ×2.6 at 0.3%/call (26 vs 10 in 3 420 calls): the ratio
    # test rejects ×1.2, the increase (+0.47 per 100 calls) is not shown above 1 per 100.
    calls = np.full(342, 10.0)
    ya = np.zeros(342)
    ya[40:66] = 1
    yr = np.zeros(342)
    yr[:10] = 1
    lo = channel_ratio(ya, calls, yr, calls, tolerance=0.0)
    hi = channel_ratio(ya, calls, yr, calls, tolerance=0.01)
    assert lo.damage_p == max(lo.amplified_p, lo.increase_p)
    assert hi.damage_p == max(hi.amplified_p, hi.increase_p) == hi.increase_p > 0.5
    # the increase test against 0 is the normal test of the increase over its robust SE
    se = (lo.increase_upper - lo.increase) / 1.6448536269514722
    assert lo.increase_p == pytest.approx(float(sps.norm.sf(lo.increase / se)), rel=1e-9)
    with pytest.raises(ValueError, match=r"tolerance=-0\.1 is not allowed"):
        channel_ratio(ya, calls, yr, calls, tolerance=-0.1)


def test_the_ratio_estimate_is_the_conditional_mle_and_lies_in_its_interval() -> None:
    # Reference: the stratified Poisson rate ratio's conditional MLE maximises
    # sum_i [y_i log pi_i + (t_i - y_i) log(1 - pi_i)], pi_i = rho a_i / (rho a_i + r_i)
    # (Breslow & Day 1987, vol. II §3.4), maximised here with scipy.optimize (tolerance 1e-4
    # relative: the optimiser's). Strata: 12 tasks, in half of which the candidate makes
    # twice the calls at the same per-call rate.
    rng = np.random.default_rng(5)
    nr = rng.integers(20, 60, 12).astype(float)
    na = nr.copy()
    na[:6] *= 2.0  # half the tasks: the candidate makes twice the calls ...
    yr = rng.poisson(0.05 * nr).astype(float)
    ya = rng.poisson(0.05 * na).astype(float)  # ... at the same per-call rate
    yr[0] += 1  # every stratum both arms ran has failures somewhere
    rr = channel_ratio(ya, na, yr, nr)
    t = ya + yr

    def nll(log_rho: float) -> float:
        pi = np.exp(log_rho) * na / (np.exp(log_rho) * na + nr)
        return -float(np.sum(ya * np.log(pi) + (t - ya) * np.log1p(-pi)))

    mle = math.exp(optimize.minimize_scalar(nll, bounds=(-5, 5), method="bounded",
                                            options={"xatol": 1e-9}).x)
    assert rr.estimate == pytest.approx(mle, rel=1e-4)
    assert rr.ci.low <= rr.estimate <= rr.ci.high
    crude = (ya.sum() / na.sum()) / (yr.sum() / nr.sum())
    assert rr.ratio == pytest.approx(crude)
