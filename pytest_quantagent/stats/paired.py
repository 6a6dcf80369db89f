"""Tests of a difference in success between two arms: paired (same task, trial and seed)
and, for inputs that cannot be paired, two independent samples.

Why a t-based paired TOST on per-pair differences: the candidate and reference run the same
tasks with the same seeds, so per-pair differences ``d = s_arm - s_ref`` in {-1, 0, 1}
remove the between-task variance (most of it: tasks are easy or hard for both arms). The
mean of ``d`` is the difference of success rates; its standard error is computed
cluster-robustly over tasks when a task has several trials (trials of one task are not
independent), which reduces exactly to statsmodels' ``ttost_paired`` when every task has one
trial. A t reference with ``G - 1`` degrees of freedom (G = clusters) keeps small samples
honest. McNemar's exact test is the test of H0 "no difference" on the same pairs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy import stats as _st

from pytest_quantagent.stats._validate import check_count, check_probability
from pytest_quantagent.stats.results import (
    ConfidenceInterval,
    DiffResult,
    McNemarResult,
    TostResult,
)

ArrayLike = npt.ArrayLike


def _as_pairs(arm: ArrayLike, reference: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(arm, dtype=float).ravel()
    r = np.asarray(reference, dtype=float).ravel()
    if a.shape != r.shape:
        raise ValueError(
            f"arm and reference must be paired arrays of equal length; got {a.size} and {r.size}"
        )
    if a.size == 0:
        raise ValueError("arm and reference are empty; at least one pair is needed")
    return a, r


def _cluster_mean_se(
    d: np.ndarray, clusters: ArrayLike | None
) -> tuple[float, float, int]:
    """Mean of ``d``, its cluster-robust standard error and the number of clusters.

    Ratio-estimator (linearisation) variance: ``G/(G-1) * sum_c (sum_{i in c}(d_i - m))^2 /
    N^2``; with one observation per cluster this is ``s^2 / N``, the paired t-test's.
    """
    n = d.size
    m = float(d.mean())
    resid_sums: np.ndarray
    if clusters is None:
        resid_sums = d - m
    else:
        labels = np.asarray(clusters).ravel()
        if labels.size != n:
            raise ValueError(
                f"clusters must label every pair; got {labels.size} labels for {n} pairs"
            )
        _, inverse = np.unique(labels, return_inverse=True)
        resid_sums = np.bincount(inverse, weights=d - m)
    g = resid_sums.size
    if g < 2:
        return m, math.inf, g
    var = g / (g - 1) * float(np.sum(resid_sums**2)) / (n * n)
    return m, math.sqrt(var), g


def _with_pseudo_pairs(
    d: np.ndarray, clusters: ArrayLike | None
) -> tuple[np.ndarray, ArrayLike | None]:
    # When every pair is concordant the sample variance is 0 and a t-test would claim
    # certainty from any n. Like Agresti & Min (2005), who add 0.5 to each cell of the paired
    # table, we then add one discordant pair in each direction (as two extra clusters), so the
    # interval keeps a width of order 1/sqrt(n) instead of collapsing.
    d2 = np.concatenate([d, [1.0, -1.0]])
    if clusters is None:
        return d2, None
    labels = np.asarray(clusters).astype(str).ravel()
    return d2, np.concatenate([labels, ["\x00pseudo+", "\x00pseudo-"]])


def paired_difference(
    arm: ArrayLike,
    reference: ArrayLike,
    *,
    clusters: ArrayLike | None = None,
    confidence: float = 0.95,
) -> DiffResult:
    """Paired difference of means (candidate − reference) with a t confidence interval.

    H0: the mean per-pair difference is 0; H1: it is not (two-sided t-test on the
    per-pair differences, cluster-robust over ``clusters`` when given).

    Parameters
    ----------
    arm, reference : array_like
        Paired outcomes (0/1 success, or any numeric outcome), same order and length.
    clusters : array_like, optional
        Cluster label (task id) per pair; pairs of one task are not independent.
    confidence : float
        Two-sided confidence level of ``ci``.

    References
    ----------
    Paired t interval (e.g. Agresti, *Categorical Data Analysis*, 3rd ed., §11.1.1 for the
    paired-proportion case); cluster-robust variance: Cameron & Miller (2015), J. Human
    Resources 50:317, eq. (8) with the G/(G-1) small-sample factor.
    """
    check_probability("confidence", confidence)
    a, r = _as_pairs(arm, reference)
    d = a - r
    m, se, g = _cluster_mean_se(d, clusters)
    if se == 0.0:
        d2, c2 = _with_pseudo_pairs(d, clusters)
        _, se, g = _cluster_mean_se(d2, c2)
    if not math.isfinite(se):
        return DiffResult(m, ConfidenceInterval(-1.0, 1.0, confidence), 1.0, d.size, "paired-t")
    tq = float(_st.t.ppf(0.5 + confidence / 2, g - 1))
    stat = m / se
    p = float(2 * _st.t.sf(abs(stat), g - 1))
    ci = ConfidenceInterval(m - tq * se, m + tq * se, confidence)
    return DiffResult(m, ci, p, d.size, "paired-t" if clusters is None else "paired-t-cluster")


def paired_tost(
    arm: ArrayLike,
    reference: ArrayLike,
    *,
    margin: float = 0.075,
    alpha: float = 0.05,
    clusters: ArrayLike | None = None,
) -> TostResult:
    """Paired two one-sided tests (TOST) for equivalence of two arms within ``±margin``.

    H0: ``diff <= -margin`` or ``diff >= margin``; H1: ``-margin < diff < margin``, where
    ``diff`` is the mean per-pair difference candidate − reference (for 0/1 outcomes, the
    difference of success rates). Equivalence at level ``alpha`` when ``pvalue < alpha``.

    With ``clusters=None`` this is statsmodels' ``ttost_paired(arm, reference, -margin,
    margin)``; with clusters the standard error is cluster-robust (see module docstring).
    All-concordant samples get one pseudo discordant pair each way (see
    :func:`paired_difference`).

    References
    ----------
    Schuirmann (1987), J. Pharmacokinet. Biopharm. 15:657-680 (TOST); statsmodels
    ``statsmodels.stats.weightstats.ttost_paired``.
    """
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and 0 < margin < 1):
        raise ValueError(f"margin={margin!r} is not allowed; margin must be in (0, 1)")
    check_probability("alpha", alpha)
    a, r = _as_pairs(arm, reference)
    d = a - r
    m, se, g = _cluster_mean_se(d, clusters)
    if se == 0.0:
        d2, c2 = _with_pseudo_pairs(d, clusters)
        _, se, g = _cluster_mean_se(d2, c2)
    method = "paired-t" if clusters is None else "paired-t-cluster"
    if not math.isfinite(se):
        ci = ConfidenceInterval(-1.0, 1.0, 1 - alpha)
        return TostResult(m, -margin, margin, 1.0, 1.0, 1.0, 0.0, ci, g, method)
    df = g - 1
    t_low = (m + margin) / se
    t_high = (m - margin) / se
    p_low = float(_st.t.sf(t_low, df))
    p_high = float(_st.t.cdf(t_high, df))
    stat, p = (t_low, p_low) if p_low >= p_high else (t_high, p_high)
    tq = float(_st.t.ppf(1 - alpha / 2, df))
    ci = ConfidenceInterval(m - tq * se, m + tq * se, 1 - alpha)
    return TostResult(m, -margin, margin, p, p_low, p_high, stat, ci, g, method)


def mcnemar_exact(arm: ArrayLike, reference: ArrayLike) -> McNemarResult:
    """Exact McNemar test on paired binary outcomes.

    H0: the two discordant cells are equally likely (P(arm ok, ref fail) = P(arm fail, ref
    ok)), i.e. equal success probabilities; H1: they differ (two-sided). The p-value is the
    two-sided binomial test of ``b`` out of ``b + c`` against 1/2; 1.0 when ``b + c == 0``.

    References
    ----------
    McNemar (1947), Psychometrika 12:153; statsmodels
    ``statsmodels.stats.contingency_tables.mcnemar(table, exact=True)``.
    """
    a, r = _as_pairs(arm, reference)
    for name, x in (("arm", a), ("reference", r)):
        bad = x[~np.isin(x, (0.0, 1.0))]
        if bad.size:
            raise ValueError(
                f"{name} contains {float(bad[0])!r}; mcnemar_exact allows only 0, 1, False, True"
            )
    b = int(np.sum((a == 1) & (r == 0)))
    c = int(np.sum((a == 0) & (r == 1)))
    if b + c == 0:
        return McNemarResult(b, c, a.size, 0.0, 1.0)
    p = float(_st.binomtest(b, b + c, 0.5).pvalue)
    return McNemarResult(b, c, a.size, float(min(b, c)), min(1.0, p))


def unpaired_tost(
    arm_successes: int,
    arm_n: int,
    reference_successes: int,
    reference_n: int,
    *,
    margin: float = 0.075,
    alpha: float = 0.05,
) -> TostResult:
    """TOST for two independent proportions (fallback when episodes cannot be paired).

    H0: ``p_arm - p_ref <= -margin`` or ``>= margin``; H1: within. Wraps statsmodels
    ``tost_proportions_2indep`` (Agresti-Caffo Wald test by default); ``ci`` is
    ``confint_proportions_2indep`` (Newcombe hybrid score) at ``1 - alpha``.
    """
    from statsmodels.stats.proportion import (
        confint_proportions_2indep,
        tost_proportions_2indep,
    )

    for name, val in (("arm_n", arm_n), ("reference_n", reference_n)):
        check_count(name, val, minimum=1)
    check_count("arm_successes", arm_successes)
    check_count("reference_successes", reference_successes)
    check_probability("alpha", alpha)
    # statsmodels also computes ratio/odds ratio, which divide by zero at 0% success
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = tost_proportions_2indep(
            arm_successes, arm_n, reference_successes, reference_n, -margin, margin
        )
        lo, hi = confint_proportions_2indep(
            arm_successes, arm_n, reference_successes, reference_n, alpha=alpha
        )
    diff = arm_successes / arm_n - reference_successes / reference_n
    return TostResult(
        diff,
        -margin,
        margin,
        float(res.pvalue),
        float(res.results_larger.pvalue),
        float(res.results_smaller.pvalue),
        float(res.statistic),
        ConfidenceInterval(float(lo), float(hi), 1 - alpha),
        arm_n + reference_n,
        "2indep-agresti-caffo",
    )


def unpaired_difference(
    arm_successes: int,
    arm_n: int,
    reference_successes: int,
    reference_n: int,
    *,
    confidence: float = 0.95,
) -> DiffResult:
    """Difference of two independent proportions: Newcombe CI
    (``confint_proportions_2indep``) and the two-sided Agresti-Caffo test of H0 ``diff = 0``
    (``test_proportions_2indep``)."""
    from statsmodels.stats.proportion import (
        confint_proportions_2indep,
        test_proportions_2indep,
    )

    for name, val in (("arm_n", arm_n), ("reference_n", reference_n)):
        check_count(name, val, minimum=1)
    check_probability("confidence", confidence)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = confint_proportions_2indep(
            arm_successes, arm_n, reference_successes, reference_n, alpha=1 - confidence
        )
        t = test_proportions_2indep(arm_successes, arm_n, reference_successes, reference_n)
    diff = arm_successes / arm_n - reference_successes / reference_n
    return DiffResult(
        diff,
        ConfidenceInterval(float(lo), float(hi), confidence),
        float(t.pvalue),
        arm_n + reference_n,
        "2indep-newcombe",
    )


def as_binary(values: Sequence[bool] | np.ndarray) -> np.ndarray:
    """0/1 float array from booleans (helper for callers building paired vectors)."""
    return np.asarray(values, dtype=float)
