"""Alpha spending over planned looks (stats/sequential.py): the plan's arithmetic, checked
against textbook constants, and its error rate under repeated looks by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from pytest_quantagent.stats.sequential import SpendingPlan, geometric_looks


def test_power_family_spends_alpha_t_to_the_rho_and_all_of_it_by_the_last_look() -> None:
    plan = SpendingPlan((50, 100, 200, 400), alpha=0.05, rho=2.0)
    # alpha(t) = alpha * t^rho (Kim & DeMets 1987) at t = 1/8, 1/4, 1/2, 1
    assert plan.spent(1) == pytest.approx(0.05 / 64)
    assert plan.spent(2) == pytest.approx(0.05 / 16)
    assert plan.spent(3) == pytest.approx(0.05 / 4)
    assert plan.spent(4) == 0.05
    assert sum(plan.alphas) == pytest.approx(0.05, abs=1e-15)
    assert plan.alpha_at(4) == pytest.approx(0.05 * (1 - 1 / 4))
    assert all(a > 0 for a in plan.alphas)
    linear = SpendingPlan((1, 2, 3, 4, 5), alpha=0.05, rho=1.0)  # equal looks: Bonferroni a/5
    assert linear.alphas == pytest.approx([0.01] * 5)


def test_bonferroni_over_looks_is_at_least_as_strict_as_pococks_exact_boundary() -> None:
    # Jennison & Turnbull (2000), Table 2.1: Pocock's constant for K = 5 equally spaced looks,
    # two-sided alpha 0.05 (one-sided 0.025), is C_P(5, 0.05) = 2.413. Spending 0.025 equally
    # (rho = 1) with Bonferroni tests each look at z_{1 - 0.005} = 2.576: a higher boundary,
    # so the union bound never spends more than the exact design (tolerance: the table's 3
    # decimals).
    plan = SpendingPlan((1, 2, 3, 4, 5), alpha=0.025, rho=1.0)
    z = [stats.norm.isf(a) for a in plan.alphas]
    assert all(v >= 2.413 - 5e-4 for v in z)
    assert z[0] == pytest.approx(2.5758, abs=1e-4)


def test_error_rate_under_optional_stopping_stays_at_alpha() -> None:
    # Known truth: under H0 the score statistic at look k is a Brownian motion read at the
    # looks' information, Z_k = S(n_k) / sqrt(n_k). Naive testing at alpha at every one of 5
    # doubling looks rejects far more than alpha (Armitage et al. 1969); the spending plan
    # rejects at most alpha. 20 000 simulated runs: standard error ~0.0015.
    rng = np.random.default_rng(7)
    looks = (40, 80, 160, 320, 640)
    plan = SpendingPlan(looks, alpha=0.05)
    steps = np.diff((0, *looks))
    inc = rng.standard_normal((20_000, len(looks))) * np.sqrt(steps)
    z = np.cumsum(inc, axis=1) / np.sqrt(looks)
    naive = (z > stats.norm.isf(0.05)).any(axis=1).mean()
    spent = (z > np.array([stats.norm.isf(a) for a in plan.alphas])).any(axis=1).mean()
    assert naive > 0.10
    assert spent <= 0.05 + 3 * 0.0016
    assert spent > 0.03  # and it does spend most of it (not a test that never rejects)


def test_geometric_looks_double_up_to_the_cap() -> None:
    assert geometric_looks(40, 640) == (40, 80, 160, 320, 640)
    assert geometric_looks(40, 1000) == (40, 80, 160, 320, 640, 1000)
    assert geometric_looks(40, 700) == (40, 80, 160, 320, 700)  # 640 is within 10% of 700
    assert geometric_looks(40, 660) == (40, 80, 160, 320, 660)  # within 10%: last look is the cap
    assert geometric_looks(100, 100) == (100,)
    assert geometric_looks(200, 100) == (100,)


@pytest.mark.parametrize("kw, text", [
    ({"looks": ()}, "looks is empty"),
    ({"looks": (10, 10)}, "strictly increasing"),
    ({"looks": (0, 10)}, "strictly increasing"),
    ({"looks": (10,), "rho": 0.0}, "rho must be"),
    ({"looks": (10,), "rho": math.inf}, "rho must be"),
    ({"looks": (10,), "alpha": 1.5}, "alpha"),
])
def test_bad_plans_are_refused_naming_the_value(kw: dict[str, object], text: str) -> None:
    with pytest.raises(ValueError, match=text):
        SpendingPlan(**kw)  # type: ignore[arg-type]


def test_a_look_outside_the_plan_is_refused() -> None:
    with pytest.raises(ValueError, match="look 3 is not planned; looks are 1 to 2"):
        SpendingPlan((10, 20)).alpha_at(3)
