"""Statistics checked against independent references (statsmodels 0.15 / scipy 1.17 /
textbook values); each comparison states its source and tolerance."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import (
    confint_proportions_2indep,
    proportion_confint,
    tost_proportions_2indep,
)
from statsmodels.stats.weightstats import ttost_paired

from pytest_quantagent.stats import (
    failure_set_agreement,
    holm,
    mcnemar_exact,
    paired_difference,
    paired_tost,
    paired_tost_sample_size,
    rate_ratio,
    rate_ratio_from_clusters,
    unpaired_difference,
    unpaired_tost,
    wilson_interval,
)


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (81, 263), (50, 50), (1, 1000)])
def test_wilson_matches_statsmodels(k: int, n: int) -> None:
    # statsmodels proportion_confint(method="wilson"); closed form, rel 1e-10
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    res = wilson_interval(k, n)
    assert res.ci.low == pytest.approx(lo, rel=1e-10, abs=1e-12)
    assert res.ci.high == pytest.approx(hi, rel=1e-10, abs=1e-12)


def test_wilson_textbook_value() -> None:
    # Newcombe (1998) Table I, example 81/263: Wilson 95% CI 0.2553 to 0.3662 (4 dp)
    res = wilson_interval(81, 263)
    assert res.ci.low == pytest.approx(0.2553, abs=5e-5)
    assert res.ci.high == pytest.approx(0.3662, abs=5e-5)


def test_wilson_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match=r"successes=11.*<= n=10"):
        wilson_interval(11, 10)
    with pytest.raises(ValueError, match=r"confidence=1\.5"):
        wilson_interval(1, 10, confidence=1.5)


def _paired_sample(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    ref = rng.random(n) < 0.6
    flip = rng.random(n) < 0.2
    arm = np.where(flip, ~ref, ref)
    return arm.astype(float), ref.astype(float)


def test_paired_tost_matches_ttost_paired() -> None:
    # statsmodels ttost_paired(x1, x2, low, upp) on the same pairs; t-based, rel 1e-9
    rng = np.random.default_rng(1)
    arm, ref = _paired_sample(rng, 120)
    p_ref, lower, upper = ttost_paired(arm, ref, -0.075, 0.075)
    res = paired_tost(arm, ref, margin=0.075)
    assert res.pvalue == pytest.approx(p_ref, rel=1e-9)
    assert res.pvalue_low == pytest.approx(lower[1], rel=1e-9)
    assert res.pvalue_high == pytest.approx(upper[1], rel=1e-9)


def test_paired_tost_clusters_reduce_to_ttost_on_singletons() -> None:
    # one pair per cluster: cluster-robust SE with G/(G-1) equals the paired t SE exactly
    rng = np.random.default_rng(2)
    arm, ref = _paired_sample(rng, 60)
    p_ref, _, _ = ttost_paired(arm, ref, -0.1, 0.1)
    res = paired_tost(arm, ref, margin=0.1, clusters=np.arange(60))
    assert res.pvalue == pytest.approx(p_ref, rel=1e-9)


def test_paired_tost_cluster_se_matches_ols_cluster_robust() -> None:
    # statsmodels OLS(d ~ 1).fit(cov_type="cluster") CR1 variance: G/(G-1)*(N-1)/(N-K) with
    # K=1, i.e. exactly our G/(G-1) linearisation; compare SE, rel 1e-9
    import statsmodels.api as sm

    rng = np.random.default_rng(3)
    tasks = np.repeat(np.arange(30), 4)
    arm, ref = _paired_sample(rng, tasks.size)
    d = arm - ref
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="cluster", cov_kwds={"groups": tasks})
    res = paired_difference(arm, ref, clusters=tasks)
    se_ours = (res.ci.high - res.ci.low) / (2 * st.t.ppf(0.975, 29))
    assert se_ours == pytest.approx(float(fit.bse[0]), rel=1e-9)
    assert res.diff == pytest.approx(float(d.mean()))


def test_paired_tost_all_concordant_is_not_certain() -> None:
    same = np.ones(5)
    res = paired_tost(same, same, margin=0.075)
    assert res.pvalue > 0.05  # 5 identical pairs cannot prove equivalence
    big = np.ones(2000)
    assert paired_tost(big, big, margin=0.075).pvalue < 0.05


def test_paired_tost_validates() -> None:
    with pytest.raises(ValueError, match=r"margin=1\.5"):
        paired_tost([1, 0], [1, 1], margin=1.5)
    with pytest.raises(ValueError, match="equal length; got 2 and 3"):
        paired_tost([1, 0], [1, 1, 0])


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_mcnemar_matches_statsmodels(seed: int) -> None:
    # statsmodels mcnemar(table, exact=True) (binomial on discordant pairs); rel 1e-10
    rng = np.random.default_rng(seed)
    arm, ref = _paired_sample(rng, 80)
    table = np.array(
        [[np.sum((arm == 1) & (ref == 1)), np.sum((arm == 1) & (ref == 0))],
         [np.sum((arm == 0) & (ref == 1)), np.sum((arm == 0) & (ref == 0))]]
    )
    expected = mcnemar(table, exact=True)
    res = mcnemar_exact(arm, ref)
    assert res.pvalue == pytest.approx(expected.pvalue, rel=1e-10)
    assert res.statistic == expected.statistic


def test_mcnemar_rejects_non_binary() -> None:
    with pytest.raises(ValueError, match=r"arm contains 2\.0"):
        mcnemar_exact([2, 0], [1, 0])


def test_unpaired_matches_statsmodels() -> None:
    # statsmodels tost_proportions_2indep / confint_proportions_2indep defaults; rel 1e-10
    exp = tost_proportions_2indep(60, 100, 55, 100, -0.075, 0.075)
    lo, hi = confint_proportions_2indep(60, 100, 55, 100, alpha=0.05)
    res = unpaired_tost(60, 100, 55, 100, margin=0.075)
    assert res.pvalue == pytest.approx(exp.pvalue, rel=1e-10)
    d = unpaired_difference(60, 100, 55, 100)
    assert (d.ci.low, d.ci.high) == (pytest.approx(lo, rel=1e-10), pytest.approx(hi, rel=1e-10))


def test_holm_matches_statsmodels_holm_not_sidak() -> None:
    # statsmodels multipletests(method="holm"); exact arithmetic, rel 1e-12
    p = [0.01, 0.04, 0.03, 0.005, 0.2, 0.0001]
    _, adj, _, _ = multipletests(p, alpha=0.05, method="holm")
    res = holm(p)
    assert list(res.pvalues_adjusted) == pytest.approx(list(adj), rel=1e-12)
    _, sidak, _, _ = multipletests(p, method="hs")
    assert not np.allclose(res.pvalues_adjusted, sidak)


def test_holm_textbook_and_nan() -> None:
    # Holm (1979)-style worked example: sorted p * (m, m-1, ...), running max
    res = holm([0.01, float("nan"), 0.02, 0.03])
    assert res.pvalues_adjusted[0] == pytest.approx(0.03)
    assert math.isnan(res.pvalues_adjusted[1])
    assert res.pvalues_adjusted[2] == pytest.approx(0.04)
    assert res.pvalues_adjusted[3] == pytest.approx(0.04)
    assert res.reject == (True, False, True, True)
    with pytest.raises(ValueError, match=r"p-value 1\.5"):
        holm([0.1, 1.5])


def test_rate_ratio_se_matches_statsmodels_gee() -> None:
    # statsmodels GEE Poisson, independence, offset log(calls), robust ("naive" sandwich
    # without small-sample factor): our variance = G/(G-1) * GEE robust variance. rel 1e-6
    import statsmodels.api as sm

    rng = np.random.default_rng(7)
    g = 40
    tasks = np.repeat(np.arange(g), 3)
    frailty = np.repeat(rng.gamma(2.0, 0.5, g), 3)
    calls_a = rng.integers(5, 20, tasks.size)
    calls_r = rng.integers(5, 20, tasks.size)
    y_a = rng.binomial(calls_a, np.minimum(0.9, 0.2 * frailty))
    y_r = rng.binomial(calls_r, np.minimum(0.9, 0.1 * frailty))
    res = rate_ratio(y_a, calls_a, tasks, y_r, calls_r, tasks)
    df = pd.DataFrame(
        {"y": np.r_[y_a, y_r], "calls": np.r_[calls_a, calls_r],
         "arm": np.r_[np.ones(tasks.size), np.zeros(tasks.size)], "task": np.r_[tasks, tasks]}
    )
    model = sm.GEE(df["y"], sm.add_constant(df[["arm"]]), groups=df["task"],
                   family=sm.families.Poisson(), offset=np.log(df["calls"]),
                   cov_struct=sm.cov_struct.Independence())
    fit = model.fit()
    assert math.log(res.ratio) == pytest.approx(float(fit.params["arm"]), rel=1e-6)
    se_ours = math.log(res.ratio) / res.statistic
    assert se_ours == pytest.approx(float(fit.bse["arm"]) * math.sqrt(g / (g - 1)), rel=1e-6)


def test_rate_ratio_zero_reference_uses_conditional_exact() -> None:
    # scipy binomtest(5, 5, 0.5): p = 2 * 0.5**5 = 0.0625
    res = rate_ratio_from_clusters([2, 3], [10, 10], [0, 0], [10, 10])
    assert math.isinf(res.ratio)
    assert res.pvalue == pytest.approx(0.0625, rel=1e-12)
    assert res.method == "conditional-exact"
    none = rate_ratio_from_clusters([0, 0], [10, 10], [0, 0], [10, 10])
    assert none.pvalue == 1.0 and math.isnan(none.ratio)
    assert none.to_dict()["ratio"] is None


def test_rate_ratio_bootstrap_close_to_sandwich() -> None:
    rng = np.random.default_rng(8)
    g = 60
    na, nr = rng.integers(50, 100, g), rng.integers(50, 100, g)
    ya, yr = rng.binomial(na, 0.3), rng.binomial(nr, 0.15)
    sw = rate_ratio_from_clusters(ya, na, yr, nr)
    bs = rate_ratio_from_clusters(ya, na, yr, nr, method="bootstrap",
                                  rng=np.random.default_rng(9), n_boot=4000)
    assert bs.ratio == pytest.approx(sw.ratio)
    # percentile vs Wald intervals agree to within ~5% on the log scale for 60 clusters
    assert math.log(bs.ci.low) == pytest.approx(math.log(sw.ci.low), abs=0.05)
    assert math.log(bs.ci.high) == pytest.approx(math.log(sw.ci.high), abs=0.05)


def test_rate_ratio_validates() -> None:
    with pytest.raises(ValueError, match="method='poisson' is not allowed; allowed: sandwich"):
        rate_ratio_from_clusters([1], [2], [1], [2], method="poisson")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="more failures than tool calls"):
        rate_ratio_from_clusters([3, 1], [2, 2], [1, 1], [2, 2])
    with pytest.raises(ValueError, match="needs rng"):
        rate_ratio_from_clusters([1, 2], [5, 5], [1, 1], [5, 5], method="bootstrap")


def test_failure_set_agreement_matches_scipy() -> None:
    # scipy spearmanr / kendalltau(variant="b") over the union-aligned profiles; rel 1e-12
    arm = {"get_user": 10, "find_order": 5, "lookup": 2, "new_name": 1}
    ref = {"get_user": 6, "find_order": 4, "lookup": 3, "other": 1}
    res = failure_set_agreement(arm, ref)
    names = sorted(set(arm) | set(ref))
    a = [arm.get(n, 0) for n in names]
    r = [ref.get(n, 0) for n in names]
    assert res.spearman == pytest.approx(st.spearmanr(a, r).statistic, rel=1e-12)
    assert res.kendall == pytest.approx(st.kendalltau(a, r, variant="b").statistic, rel=1e-12)
    assert res.novel_share == pytest.approx(1 / 18)
    with pytest.raises(ValueError, match="'x' is -1"):
        failure_set_agreement({"x": -1}, {})


def test_sample_size_textbook() -> None:
    # Chow, Shao & Wang §3.2.4: n = (z_{α} + z_{β/2})² σ² / δ²; α=0.05, power 0.8, σ=0.1,
    # δ=0.05: (1.6449 + 1.2816)² * 0.01 / 0.0025 = 34.26 -> 35
    res = paired_tost_sample_size(0.1, margin=0.05, alpha=0.05, power=0.8)
    assert res.n_pairs == 35
    with pytest.raises(ValueError, match=r"true_diff=0\.1"):
        paired_tost_sample_size(0.1, margin=0.05, true_diff=0.1)


def test_sample_size_reaches_power_by_simulation() -> None:
    # the computed n gives >= ~power empirical TOST power (Monte Carlo, 400 reps, tol 0.08)
    sd_disc = 0.3  # P(discordant)=0.09 split evenly -> sd of d = 0.3
    n = paired_tost_sample_size(sd_disc, margin=0.1, power=0.8).n_pairs
    rng = np.random.default_rng(10)
    hits = 0
    for _ in range(400):
        u = rng.random(n)
        d = np.where(u < 0.045, 1.0, np.where(u < 0.09, -1.0, 0.0))
        ref = np.zeros(n)
        hits += paired_tost(ref + d.clip(0), ref - d.clip(max=0), margin=0.1).pvalue < 0.05
    assert hits / 400 >= 0.72


def test_per_unit_ci_matches_ols_cluster_robust() -> None:
    # failures per episode with tasks as clusters: for equal episodes per task the ratio
    # estimator is the OLS mean; its CR1 SE (statsmodels cov_type="cluster") equals ours
    # exactly (K=1), rel 1e-9
    import statsmodels.api as sm

    from pytest_quantagent.stats import per_unit_ci

    rng = np.random.default_rng(11)
    tasks = np.repeat(np.arange(25), 4)
    y = rng.poisson(rng.gamma(2, 0.5, 25)[tasks])
    fit = sm.OLS(y.astype(float), np.ones(y.size)).fit(cov_type="cluster", cov_kwds={"groups": tasks})
    ci = per_unit_ci(np.bincount(tasks, weights=y), np.bincount(tasks), confidence=0.95)
    se = (ci.high - ci.low) / (2 * st.t.ppf(0.975, 24))
    assert se == pytest.approx(float(fit.bse[0]), rel=1e-9)
    assert (ci.low + ci.high) / 2 == pytest.approx(float(y.mean()), rel=1e-12)
