"""The trial plan shared by the report's verdict and ``assert_score_equivalent``."""

from __future__ import annotations

import math

import pytest
from scipy import stats as st

from pytest_quantagent.stats import paired_tost_sample_size, trials_for_equivalence
from pytest_quantagent.stats.power import PLANNING_SD_FLOOR


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
