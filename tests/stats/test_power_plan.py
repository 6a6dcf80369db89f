"""The sample sizes and power functions behind the design advice (the report's verdict and
``assert_score_equivalent``), against statsmodels, a textbook formula and simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st
from statsmodels.stats.power import NormalIndPower
from statsmodels.stats.rates import power_poisson_diff_2indep, power_poisson_ratio_2indep

from pytest_quantagent.stats import paired_tost_sample_size, trials_for_equivalence
from pytest_quantagent.stats.power import (
    PLANNING_SD_FLOOR,
    bound_power,
    floored_bound_power,
    log_ratio_se,
    score_bound_power,
    tango_null_variance,
    tost_power,
)


def test_observed_sd_sets_pairs_and_trials() -> None:
    # n = (z_{1-a} + z_{1-b/2})^2 sd^2 / margin^2 for a true difference of 0 (Chow, Shao &
    # Wang 2008, §3.2.4); z from scipy, compared exactly after rounding up.
    sd, margin = 0.4, 0.075
    expected = math.ceil((st.norm.ppf(0.95) + st.norm.ppf(0.9)) ** 2 * sd**2 / margin**2)
    plan, trials = trials_for_equivalence(sd, 40, margin=margin)
    assert plan.n_pairs == expected == 244
    assert trials == math.ceil(244 / 40) == 7


@pytest.mark.parametrize("sd", [None, 0.0, float("nan")])
def test_no_discordance_plans_with_the_floor(sd: float | None) -> None:
    plan, trials = trials_for_equivalence(sd, 10)
    assert plan.sd == PLANNING_SD_FLOOR == math.sqrt(0.1)
    assert plan.n_pairs == paired_tost_sample_size(math.sqrt(0.1)).n_pairs == 153
    assert trials == 16


def test_no_tasks_gives_no_trials() -> None:
    plan, trials = trials_for_equivalence(0.3, 0)
    assert trials is None and plan.n_pairs > 0


# ---------------------------------------------------------------- the planner's power functions
# (issue 33 item 3: pytest_quantagent.analysis.plan combines them into one design per cell)


@pytest.mark.parametrize(("effect", "n"), [(0.3, 50), (0.1, 400), (0.5, 12)])
def test_one_sided_power_matches_statsmodels(effect: float, n: int) -> None:
    # statsmodels NormalIndPower with ratio=0 is the one-sample z test: Φ(d √n − z_{1−α});
    # agreement to 1e-9 (same closed form)
    ref = NormalIndPower().power(effect, n, 0.05, ratio=0, alternative="larger")
    assert bound_power(effect, 1 / math.sqrt(n), 0.05) == pytest.approx(ref, abs=1e-9)


@pytest.mark.parametrize(("rate", "calls"), [(0.02, 20_000), (0.06, 5_000), (0.003, 100_000)])
def test_channel_ratio_route_matches_statsmodels(rate: float, calls: int) -> None:
    # LOSSLESS's ratio route at a true ratio of 1: the chance the one-sided bound of the
    # log rate ratio falls below log 1.2, Poisson (design effect 1), against statsmodels'
    # power_poisson_ratio_2indep (Zhu & Lakkis 2014, method_var="alt": the variance of the
    # log ratio at the alternative's rates, 1/λ1 + 1/λ2), H0 ratio >= 1.2, to 1e-9
    ref = power_poisson_ratio_2indep(rate, rate, calls, value=1.2, alternative="smaller",
                                     method_var="alt", return_results=False)
    got = bound_power(math.log(1.2), log_ratio_se(rate * calls, rate * calls), 0.05)
    assert got == pytest.approx(ref, abs=1e-9)
    # damage at a true ×1.5: H0 ratio <= 1.2 rejected (alternative "larger")
    ref_d = power_poisson_ratio_2indep(1.5 * rate, rate, calls // 20, value=1.2,
                                       alternative="larger", method_var="alt",
                                       return_results=False)
    got_d = bound_power(math.log(1.5 / 1.2),
                        log_ratio_se(1.5 * rate * (calls // 20), rate * (calls // 20)), 0.05)
    assert got_d == pytest.approx(ref_d, abs=1e-9)


@pytest.mark.parametrize(("rate", "calls"), [(0.02, 20_000), (0.005, 50_000), (0.001, 5_000)])
def test_channel_increase_route_matches_statsmodels(rate: float, calls: int) -> None:
    # LOSSLESS's increase route: the upper bound of rate_arm − rate_ref below 0.002 at equal
    # rates, against statsmodels' power_poisson_diff_2indep (method_var="alt": variance
    # (r1 + r2)/N), H0 diff >= 0.002; with no fixed floor the two agree to 1e-9
    ref = power_poisson_diff_2indep(rate, rate, calls, value=0.002, alternative="smaller",
                                    method_var="alt", return_results=False)
    assert floored_bound_power(0.002, 2 * rate / calls, 0.0, 0.05) == pytest.approx(ref, abs=1e-9)
    # the add-one floor (no noise) only widens the bound: less power, never more
    assert floored_bound_power(0.002, 2 * rate / calls, 2 / calls**2, 0.05) <= ref


def test_a_silent_channel_is_decided_at_a_fixed_number_of_calls() -> None:
    # 0 vs 0 failures: the increase bound is z·√(2/N²) (no noise), below 0.002 once
    # N > 1.645·√2 / 0.002 = 1163.1 calls per arm (z from scipy)
    n_star = st.norm.ppf(0.95) * math.sqrt(2) / 0.002
    assert math.ceil(n_star) == 1164
    assert floored_bound_power(0.002, 0.0, 2 / 1163**2, 0.05) == 0.0
    assert floored_bound_power(0.002, 0.0, 2 / 1164**2, 0.05) == 1.0


def test_tost_power_inverts_the_sample_size() -> None:
    # Chow, Shao & Wang (2008) §3.2.4's n (checked above) is the smallest n whose normal
    # TOST power reaches 80% at a true difference of 0
    n = paired_tost_sample_size(0.4, margin=0.075).n_pairs
    assert tost_power(0.4 / math.sqrt(n), 0.075, 0.05) >= 0.8
    assert tost_power(0.4 / math.sqrt(n - 1), 0.075, 0.05) < 0.8


def test_tango_tost_power_matches_simulation() -> None:
    # Tango's TOST (the verdict's) at 10% discordance: its null variance at the margin is
    # larger than the truth's, so it has less power than the normal approximation. Monte
    # Carlo with known truth (600 cells per n; 2 standard errors ≈ 0.035 at 80%): the
    # planner's approximation within 0.05 of the simulated power, the normal one not at
    # n = 153 (0.82 vs a simulated ~0.74)
    from pytest_quantagent.stats.clustered import paired_score

    rng = np.random.default_rng(7)
    q, m = 0.096, 0.075
    for n in (153, 250):
        ok = 0
        for _ in range(600):
            ref = rng.random(n) < 0.6
            arm = np.where(rng.random(n) < 0.2, rng.random(n) < 0.6, ref)
            ok += paired_score(arm.astype(float), ref.astype(float), clusters=None, margin=m,
                               alpha=0.05).tost_p < 0.05
        se = math.sqrt(q / n)
        se0 = math.sqrt(tango_null_variance(q, m) / n)
        planned = 2 * score_bound_power(m, se0, se, 0.05) - 1
        assert abs(planned - ok / 600) < 0.05, (n, planned, ok / 600)
    assert tost_power(math.sqrt(q / 153), m, 0.05) > 0.8
