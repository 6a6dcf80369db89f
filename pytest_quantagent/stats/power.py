"""How many paired episodes a verdict needs: the score's equivalence (TOST), a bound below
a threshold (a channel's ratio or increase, a gap's widening) and a damage claim, as power
functions of the design (tasks × trials) that :mod:`pytest_quantagent.analysis.plan`
combines into one design per cell.

Every power here is the normal (or ``t``) approximation of the test's own statistic with
the variance it will have in the planned design: for a mean over ``T`` tasks × ``m``
trials, ``(σ_b² + σ_w²/m) / T`` (:func:`variance_components`); for a channel's log rate
ratio ``D (1/λ_arm + 1/λ_ref)`` (λ the expected failures, ``D`` the design effect the pilot
showed); for its per-call increase ``D (r_arm + r_ref) / N + 2/N²`` (N calls per arm; the
last term is the test's add-one floor).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

from pytest_quantagent.stats._validate import check_probability
from pytest_quantagent.stats.results import SampleSizeResult


def paired_tost_sample_size(
    sd: float,
    *,
    margin: float = 0.075,
    alpha: float = 0.05,
    power: float = 0.8,
    true_diff: float = 0.0,
) -> SampleSizeResult:
    """Pairs needed for a paired TOST within ``±margin`` to reach ``power``.

    Normal approximation for two one-sided tests at level ``alpha`` when the true
    difference is ``true_diff`` and per-pair differences have standard deviation ``sd``:
    ``n = (z_{1-α} + z_{1-β/2})² sd² / margin²`` when ``true_diff = 0`` and
    ``n = (z_{1-α} + z_{1-β})² sd² / (margin - |true_diff|)²`` otherwise (β = 1 - power).
    For 0/1 outcomes ``sd² = P(discordant) - diff²``.

    References
    ----------
    Chow, Shao & Wang, *Sample Size Calculations in Clinical Research* (2nd ed., 2008),
    §3.2.4 (test for equivalence, one-sample/paired).
    """
    check_probability("alpha", alpha)
    check_probability("power", power)
    if not (math.isfinite(sd) and sd > 0):
        raise ValueError(f"sd={sd!r} is not allowed; sd must be a finite number > 0")
    if not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin={margin!r} is not allowed; margin must be > 0")
    if abs(true_diff) >= margin:
        raise ValueError(
            f"true_diff={true_diff!r} is not allowed; equivalence cannot be shown unless "
            f"|true_diff| < margin={margin}"
        )
    za = float(_st.norm.ppf(1 - alpha))
    beta = 1 - power
    zb = float(_st.norm.ppf(1 - beta / 2)) if true_diff == 0 else float(_st.norm.ppf(1 - beta))
    n = (za + zb) ** 2 * sd * sd / (margin - abs(true_diff)) ** 2
    return SampleSizeResult(
        max(2, math.ceil(n)), margin, power, alpha, sd, true_diff, "normal-approx-tost"
    )


#: Standard deviation of per-pair success differences assumed when no pair is discordant
#: yet (sd = 0 would plan zero episodes): one discordant pair in ten.
PLANNING_SD_FLOOR = math.sqrt(0.1)


def trials_for_equivalence(
    sd_pairs: float | None,
    n_tasks: int,
    *,
    margin: float = 0.075,
    alpha: float = 0.05,
    power: float = 0.8,
) -> tuple[SampleSizeResult, int | None]:
    """The paired episodes, and the trials per task over ``n_tasks`` tasks, that a paired
    TOST within ``±margin`` needs to reach ``power`` if the arms are truly equal.

    ``sd_pairs`` is the observed standard deviation of the per-pair differences; when it is
    unknown or 0 (no discordant pair yet) :data:`PLANNING_SD_FLOOR` is assumed. The report's
    INCONCLUSIVE verdict and ``assert_score_equivalent`` both plan with this, so they name
    the same ``--quant-trials``. Trials is None when ``n_tasks`` is 0.
    """
    sd = sd_pairs if sd_pairs is not None and math.isfinite(sd_pairs) and sd_pairs > 0 else PLANNING_SD_FLOOR
    ss = paired_tost_sample_size(sd, margin=margin, alpha=alpha, power=power)
    trials = max(1, math.ceil(ss.n_pairs / n_tasks)) if n_tasks > 0 else None
    return ss, trials


@dataclass(frozen=True)
class DesignPlan:
    """What design would let a paired equivalence test within ``±margin`` reach ``power``
    (planning assumption: the arms are truly equal), from the variance components of the
    per-pair differences observed so far.

    ``tasks``/``trials``: the advised design (None where it cannot be reached);
    ``reachable`` False when no number of trials over the available tasks can reach the
    margin; ``message`` names the caller's flags.
    """

    tasks: int | None
    trials: int | None
    reachable: bool
    between_var: float
    within_var: float
    target_se: float
    message: str

    @property
    def n_pairs(self) -> int | None:
        return self.tasks * self.trials if self.tasks and self.trials else None


@dataclass(frozen=True)
class VarianceComponents:
    """One-way random-effects decomposition of per-pair differences by task (see
    :func:`variance_components`)."""

    between: float
    """σ_b²: variance of the task-level mean difference (80% upper bound, floored at 0)."""
    within: float
    """σ_w²: pooled within-task variance (80% upper bound; the total variance with one
    trial per task, when the two cannot be told apart)."""
    tasks: int
    trials: float
    """Mean episodes per task."""
    one_trial: bool
    """One trial per task: no within-task degree of freedom."""

    def se(self, tasks: int, trials: int) -> float:
        """Standard error of the mean difference over ``tasks`` × ``trials``."""
        return math.sqrt((self.between + self.within / trials) / tasks)


def variance_components(d: Sequence[float] | np.ndarray, clusters: Sequence[str] | np.ndarray,
                        *, floor: float | None = None) -> VarianceComponents:
    """``σ_b²`` and ``σ_w²`` of per-pair differences ``d`` grouped by task ``clusters``,
    each at its 80% chi-square upper confidence bound (a pilot's variance estimates are
    noisy; an underestimated task-level part advises trials that cannot reach the margin).
    With one trial per task both are one number, put in ``within`` (and ``between`` = 0).
    When every difference is 0, ``floor`` (default :data:`PLANNING_SD_FLOOR`², the variance
    of one discordant pair in ten) is the within part."""
    x = np.asarray(d, dtype=float).ravel()
    lab = np.asarray(clusters).astype(str).ravel()
    if x.size != lab.size or x.size == 0:
        raise ValueError(f"d and clusters need equal, non-zero lengths; got {x.size}, {lab.size}")
    fl = PLANNING_SD_FLOOR**2 if floor is None else floor
    _, inv = np.unique(lab, return_inverse=True)
    t = int(inv.max()) + 1
    sizes = np.bincount(inv, minlength=t).astype(float)
    m = float(x.size) / t
    means = np.bincount(inv, weights=x, minlength=t) / sizes
    within_ss = float(np.sum((x - means[inv]) ** 2))
    within_df = float(x.size - t)
    total_var = float(np.var(x, ddof=1)) if x.size > 1 else 0.0
    if within_df > 0:
        sw2 = within_ss / within_df * within_df / float(_st.chi2.ppf(0.2, within_df))
        vm = float(np.var(means, ddof=1)) if t > 1 else 0.0
        vm_up = vm * (t - 1) / float(_st.chi2.ppf(0.2, t - 1)) if t > 1 else 0.0
        sb2 = max(0.0, vm_up - within_ss / within_df / m)
        if sw2 + sb2 == 0.0:
            sw2 = fl
        return VarianceComponents(sb2, sw2, t, m, False)
    up = total_var * (x.size - 1) / float(_st.chi2.ppf(0.2, x.size - 1)) if x.size > 1 else 0.0
    return VarianceComponents(0.0, max(up, fl) if up > 0 else fl, t, m, True)


@functools.lru_cache(maxsize=4096)
def _quantile(level: float, df: float) -> float:
    if not math.isfinite(df) or df > 1000:
        return float(_st.norm.ppf(level))
    return float(_st.t.ppf(level, df))


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def bound_power(distance: float, se: float, alpha: float, df: float = math.inf) -> float:
    """Power of a one-sided level-``alpha`` test (equivalently: the chance that the
    one-sided ``1 − alpha`` bound falls on the right side of the threshold) when the truth
    lies ``distance`` inside the alternative and the estimate has standard error ``se``:
    ``Φ(distance / se − q_{1−α})`` (q from ``t(df)``, df rounded down; normal when ``df`` is
    inf). A non-positive distance gives at most α."""
    check_probability("alpha", alpha)
    if se <= 0:
        return 1.0 if distance > 0 else 0.0
    q = _quantile(1 - alpha, float(math.floor(df)) if math.isfinite(df) else math.inf)
    return _norm_cdf(distance / se - q)


def floored_bound_power(distance: float, noise_var: float, floor_var: float,
                        alpha: float) -> float:
    """:func:`bound_power` for a bound whose variance is ``noise_var`` (the estimate's own)
    plus a fixed ``floor_var`` that is no noise (the increase test's add-one floor): the
    bound ``est + z sqrt(noise + floor)`` is on the right side with probability
    ``Φ((distance − z sqrt(noise + floor)) / sqrt(noise))``, a step when there is no noise
    (a channel that never fails is decided once ``z sqrt(floor) < distance``)."""
    check_probability("alpha", alpha)
    half = _quantile(1 - alpha, math.inf) * math.sqrt(max(noise_var + floor_var, 0.0))
    if noise_var <= 0:
        return 1.0 if distance > half else 0.0
    return _norm_cdf((distance - half) / math.sqrt(noise_var))


def tango_null_variance(discordance: float, margin: float) -> float:
    """Per-pair variance that Tango's score test of paired proportions uses under H0
    "difference = margin" when the arms are truly equal with ``discordance`` = P(the pair
    differs): ``2 p̃21 + m (1 − m)``, p̃21 the restricted MLE (Tango 1998, eq. 4) at the
    expected counts. It exceeds the true ``discordance``, which is why Tango's TOST has less
    power than the normal approximation at a few hundred pairs (by ~7 points at 150 pairs
    with 10% discordance, measured in tests/stats/test_power_plan.py)."""
    from pytest_quantagent.stats.clustered import tango_restricted_p21

    q = min(max(discordance, 1e-12), 1.0)
    return 2.0 * tango_restricted_p21(q / 2, q / 2, 1.0, margin) + margin * (1.0 - margin)


def score_bound_power(margin: float, se_null: float, se_true: float, alpha: float) -> float:
    """Power of a one-sided score test of H0 "difference = ±margin" (equal arms): the
    statistic's variance is taken under H0 (``se_null``) while the estimate varies with the
    truth's (``se_true``): ``Φ((m − z_{1−α} se_null) / se_true)``."""
    check_probability("alpha", alpha)
    half = _quantile(1 - alpha, math.inf) * se_null
    if se_true <= 0:
        return 1.0 if margin > half else 0.0
    return _norm_cdf((margin - half) / se_true)


def tost_power(se: float, margin: float, alpha: float, true_diff: float = 0.0) -> float:
    """Power of the TOST within ``±margin`` (normal approximation, the sum of the two
    one-sided powers minus one, floored at 0): the chance that the ``1 − 2α`` interval lies
    inside ±margin when the true difference is ``true_diff``."""
    lo = bound_power(margin + true_diff, se, alpha)
    hi = bound_power(margin - true_diff, se, alpha)
    return max(0.0, lo + hi - 1.0)


def log_ratio_se(expected_arm: float, expected_reference: float,
                 design_effect: float = 1.0) -> float:
    """Standard error of a log rate ratio with ``expected_*`` failures per arm:
    ``sqrt(D (1/λ_arm + 1/λ_ref))`` (inf without an expected failure)."""
    if expected_arm <= 0 or expected_reference <= 0:
        return math.inf
    return math.sqrt(design_effect * (1 / expected_arm + 1 / expected_reference))


def increase_se(rate_arm: float, rate_reference: float, calls: float,
                design_effect: float = 1.0) -> float:
    """Standard error of a per-call rate increase over ``calls`` agent calls per arm:
    ``sqrt(D (r_arm + r_ref) / N + 2 / N²)`` (the second term is the test's add-one
    Poisson floor, which keeps a 0-vs-0 channel's bound at ``O(1/N)``)."""
    if calls <= 0:
        return math.inf
    return math.sqrt(design_effect * (rate_arm + rate_reference) / calls + 2.0 / calls**2)


def plan_design(
    d: Sequence[float] | np.ndarray,
    clusters: Sequence[str] | np.ndarray,
    *,
    margin: float = 0.075,
    alpha: float = 0.05,
    power: float = 0.8,
    max_tasks: int | None = None,
    trials_flag: str = "--quant-trials",
    tasks_flag: str = "--quant-tasks",
) -> DesignPlan:
    """Cluster-aware sample-size advice for the paired TOST of the verdict.

    The variance of the mean difference over T tasks × m trials is
    ``(σ_b² + σ_w²/m) / T`` (one-way random-effects decomposition of the per-pair
    differences by task: ``σ_w²`` pooled within-task variance, ``σ_b²`` = var(task means)
    − σ_w²/m, floored at 0; both planned at their 80% upper confidence bounds). The TOST reaches ``power`` at a true difference of 0 when that
    standard error is at most ``margin / (z_{1−α} + z_{1−β/2})`` (Chow, Shao & Wang 2008,
    §3.2.4). More trials only shrink ``σ_w²/m``: when the between-task part alone is above
    the target, or dominates, more tasks are asked for; when even every available task
    (``max_tasks``) with unlimited trials cannot reach the target, the plan says so. With
    one trial per task the two parts cannot be told apart and more tasks are asked for
    (trials help only if there is no task-level effect). No discordant pair yet: the
    variance of one discordant pair in ten (:data:`PLANNING_SD_FLOOR`) is assumed.
    """
    check_probability("alpha", alpha)
    check_probability("power", power)
    # both parts at their 80% upper confidence bounds (variance_components); with one trial
    # per task this plan takes the total variance as it is
    vc = variance_components(d, clusters)
    t, m, one_trial = vc.tasks, vc.trials, vc.one_trial
    if one_trial:
        x = np.asarray(d, dtype=float).ravel()
        total_var = float(np.var(x, ddof=1)) if x.size > 1 else 0.0
        sw2, sb2 = max(total_var, PLANNING_SD_FLOOR**2), 0.0
    else:
        sw2, sb2 = vc.within, vc.between
    za = float(_st.norm.ppf(1 - alpha))
    zb = float(_st.norm.ppf(1 - (1 - power) / 2))
    target = margin / (za + zb)
    t2 = target * target
    mi = max(1, round(m))

    def tasks_for(trials: int) -> int:
        return max(2, math.ceil((sb2 + sw2 / trials) / t2))

    if one_trial:
        need_t = tasks_for(1)
        if max_tasks is None or need_t <= max_tasks:
            msg = (f"about {need_t} tasks at 1 trial ({tasks_flag} {need_t}); with one trial per "
                   "task, task-level and trial-level variation cannot be told apart, so more "
                   "tasks (not trials) are the safe way to reach the margin")
            return DesignPlan(need_t, 1, True, sb2, sw2, target, msg)
        need_m = math.ceil(sw2 / (max_tasks * t2))
        msg = (f"all {max_tasks} tasks with about {need_m} trials ({trials_flag} {need_m}), if "
               "there is no task-level effect (one trial per task cannot show it)")
        return DesignPlan(max_tasks, need_m, True, sb2, sw2, target, msg)
    cap = max_tasks if max_tasks is not None else None
    if sb2 >= t * t2 or sb2 >= sw2 / mi:
        need_t = tasks_for(mi)
        if cap is None or need_t <= cap:
            msg = (f"between-task variation dominates (more trials cannot help much): about "
                   f"{need_t} tasks at {mi} trials ({tasks_flag} {need_t})")
            return DesignPlan(need_t, mi, True, sb2, sw2, target, msg)
        if sb2 >= cap * t2:
            msg = (f"cannot reach ±{margin * 100:g} pts: between-task variation alone needs "
                   f"more than the {cap} available tasks, whatever {trials_flag}")
            return DesignPlan(None, None, False, sb2, sw2, target, msg)
        need_m = math.ceil(sw2 / (cap * t2 - sb2))
        msg = f"all {cap} tasks with about {need_m} trials ({tasks_flag}, {trials_flag} {need_m})"
        return DesignPlan(cap, need_m, True, sb2, sw2, target, msg)
    need_m = math.ceil(sw2 / (t * t2 - sb2))
    msg = f"about {need_m} trials over the same {t} tasks ({trials_flag} {need_m})"
    return DesignPlan(t, need_m, True, sb2, sw2, target, msg)
