"""How many paired episodes an equivalence verdict needs."""

from __future__ import annotations

import math

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
