"""Candidate/reference ratio of failures per tool call, respecting clustering.

Why a cluster-robust (sandwich) ratio estimator: tool calls are not independent trials. One
confused episode produces a burst of failures, and a task that invites a hallucinated name
does so in both arms. Treating 2 000 calls as 2 000 Bernoulli draws would give CIs far too
narrow. We therefore estimate ``rate = sum(failures) / sum(calls)`` per arm and take the
variance of ``log(rate_arm / rate_ref)`` by linearisation with tasks as clusters (all
episodes and trials of a task, in both arms, form one cluster, so the pairing is used too).
This is exactly the robust standard error of a Poisson GEE with an independence working
correlation, clusters = tasks and ``log(calls)`` offset (statsmodels ``GEE(..., Poisson(),
offset=log(calls), cov_struct=Independence())``), with the ``G/(G-1)`` small-sample factor
and a ``t(G-1)`` reference distribution, so it holds under any overdispersion; the variance
is floored at the Poisson variance ``1/y_arm + 1/y_ref`` so that few events concentrated in
few tasks cannot give an overconfident interval. It is closed
form, deterministic and vectorises over channels, which keeps 100k-episode analyses fast.
``method="bootstrap"`` gives the cluster (task) bootstrap percentile interval instead.

When one arm has no failure at all the log ratio is undefined; the conditional exact test
(failures of the candidate among all failures ~ Binomial(total, calls_arm / calls_all)
under H0) gives the p-value and the Clopper-Pearson interval, ignoring clustering
(there is nothing to cluster with zero events on one side).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import stats as _st

from pytest_quantagent.stats._validate import check_count, check_probability
from pytest_quantagent.stats.results import ConfidenceInterval, RateRatioResult

Method = Literal["sandwich", "bootstrap"]
METHODS: tuple[str, ...] = ("sandwich", "bootstrap")


def _conditional_exact(
    ya: float, na: float, yr: float, nr: float, confidence: float, g: int
) -> RateRatioResult:
    total = round(ya + yr)
    rate_a = ya / na if na else math.nan
    rate_r = yr / nr if nr else math.nan
    if total == 0:
        return RateRatioResult(
            0, 0, int(na), int(nr), rate_a, rate_r, math.nan,
            ConfidenceInterval(0.0, math.inf, confidence), 0.0, 1.0, g, "no-events",
        )
    share = na / (na + nr)
    bt = _st.binomtest(round(ya), total, share)
    pi = bt.proportion_ci(confidence_level=confidence, method="exact")
    odds = nr / na

    def to_ratio(p: float) -> float:
        return math.inf if p >= 1.0 else p / (1 - p) * odds

    ratio = math.inf if yr == 0 else (ya / na) / (yr / nr)
    return RateRatioResult(
        round(ya), round(yr), int(na), int(nr), rate_a, rate_r, ratio,
        ConfidenceInterval(to_ratio(pi.low), to_ratio(pi.high), confidence),
        float(ya), float(bt.pvalue), g, "conditional-exact",
    )


def rate_ratio_from_clusters(
    arm_counts: npt.ArrayLike,
    arm_calls: npt.ArrayLike,
    reference_counts: npt.ArrayLike,
    reference_calls: npt.ArrayLike,
    *,
    confidence: float = 0.95,
    method: Method = "sandwich",
    rng: np.random.Generator | None = None,
    n_boot: int = 2000,
) -> RateRatioResult:
    """Rate ratio from per-cluster totals aligned by cluster (zeros where an arm has none).

    H0: the candidate and reference have the same failure rate per tool call (ratio 1);
    H1: they differ (two-sided).

    Parameters
    ----------
    arm_counts, arm_calls, reference_counts, reference_calls : array_like
        Failures and tool calls per cluster (task), one entry per cluster, same order.
    confidence : float
        Two-sided confidence level.
    method : {"sandwich", "bootstrap"}
        Cluster-robust linearisation (default, see module docstring) or cluster bootstrap
        percentile interval (needs ``rng``); the p-value of the bootstrap is the two-sided
        share of bootstrap log ratios on the other side of 0, ``(k + 1) / (n_boot + 1)``.
    rng : numpy.random.Generator, optional
        Source of randomness for ``method="bootstrap"``.

    References
    ----------
    Liang & Zeger (1986), Biometrika 73:13 (GEE sandwich); Cameron & Miller (2015),
    J. Human Resources 50:317 (few-cluster corrections); Davison & Hinkley (1997) §3.8
    (cluster bootstrap).
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not allowed; allowed: {', '.join(METHODS)}")
    check_probability("confidence", confidence)
    ya_c = np.asarray(arm_counts, dtype=float).ravel()
    na_c = np.asarray(arm_calls, dtype=float).ravel()
    yr_c = np.asarray(reference_counts, dtype=float).ravel()
    nr_c = np.asarray(reference_calls, dtype=float).ravel()
    if not (ya_c.size == na_c.size == yr_c.size == nr_c.size):
        raise ValueError(
            "arm_counts, arm_calls, reference_counts, reference_calls must have one entry per "
            f"cluster; got lengths {ya_c.size}, {na_c.size}, {yr_c.size}, {nr_c.size}"
        )
    for name, arr in (("arm_counts", ya_c), ("arm_calls", na_c),
                      ("reference_counts", yr_c), ("reference_calls", nr_c)):
        if np.any(arr < 0) or not np.all(np.isfinite(arr)):
            bad = float(arr[(arr < 0) | ~np.isfinite(arr)][0])
            raise ValueError(f"{name} must be finite and >= 0; got {bad!r}")
    if np.any(ya_c > na_c) or np.any(yr_c > nr_c):
        raise ValueError("a cluster has more failures than tool calls; counts must be <= calls")
    g = ya_c.size
    ya, na, yr, nr = ya_c.sum(), na_c.sum(), yr_c.sum(), nr_c.sum()
    if na == 0 or nr == 0:
        raise ValueError(
            f"arm_calls total={int(na)}, reference_calls total={int(nr)}; both arms need at "
            "least one tool call for a rate ratio"
        )
    if ya == 0 or yr == 0 or g < 2:
        return _conditional_exact(ya, na, yr, nr, confidence, g)
    rate_a, rate_r = ya / na, yr / nr
    log_rr = math.log(rate_a / rate_r)
    if method == "bootstrap":
        if rng is None:
            raise ValueError("method='bootstrap' needs rng (a numpy.random.Generator)")
        check_count("n_boot", n_boot, minimum=100)
        w = rng.multinomial(g, np.full(g, 1.0 / g), size=n_boot).astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            boot = np.log((w @ ya_c) / (w @ na_c)) - np.log((w @ yr_c) / (w @ nr_c))
        boot = boot[np.isfinite(boot)]
        lo, hi = np.quantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2])
        k = min(int(np.sum(boot <= 0)), int(np.sum(boot >= 0)))
        p = min(1.0, 2 * (k + 1) / (boot.size + 1))
        ci = ConfidenceInterval(math.exp(lo), math.exp(hi), confidence)
        se = float(np.std(boot, ddof=1))
        stat = log_rr / se if se > 0 else math.inf
        return RateRatioResult(
            int(ya), int(yr), int(na), int(nr), rate_a, rate_r, math.exp(log_rr), ci,
            stat, p, g, "cluster-bootstrap",
        )
    u = (ya_c - rate_a * na_c) / ya - (yr_c - rate_r * nr_c) / yr
    var = g / (g - 1) * float(np.sum(u * u))
    if var == 0.0:
        return _conditional_exact(ya, na, yr, nr, confidence, g)
    # Floor at the Poisson variance of the log ratio (1/ya + 1/yr). The sandwich is
    # consistent only with many clusters that carry events; with few events it can be far
    # too small (2 vs 4 failures all in one task gave a ±12% interval and p=5e-8), and a
    # release gate must not call amplification on that. Clustering inflates, never shrinks,
    # the uncertainty we report.
    var = max(var, 1.0 / ya + 1.0 / yr)
    se = math.sqrt(var)
    stat = log_rr / se
    df = g - 1
    p = float(2 * _st.t.sf(abs(stat), df))
    tq = float(_st.t.ppf(0.5 + confidence / 2, df))
    ci = ConfidenceInterval(math.exp(log_rr - tq * se), math.exp(log_rr + tq * se), confidence)
    return RateRatioResult(
        int(ya), int(yr), int(na), int(nr), rate_a, rate_r, math.exp(log_rr), ci,
        stat, p, g, "cluster-sandwich",
    )


def rate_ratio(
    arm_counts: npt.ArrayLike,
    arm_calls: npt.ArrayLike,
    arm_clusters: npt.ArrayLike,
    reference_counts: npt.ArrayLike,
    reference_calls: npt.ArrayLike,
    reference_clusters: npt.ArrayLike,
    *,
    confidence: float = 0.95,
    method: Method = "sandwich",
    rng: np.random.Generator | None = None,
    n_boot: int = 2000,
) -> RateRatioResult:
    """Rate ratio from per-episode failure counts and tool calls with a cluster label
    (task id) per episode; see :func:`rate_ratio_from_clusters` for H0/H1 and the method."""
    ac = np.asarray(arm_clusters).astype(str).ravel()
    rc = np.asarray(reference_clusters).astype(str).ravel()
    labels, inv = np.unique(np.concatenate([ac, rc]), return_inverse=True)
    ia, ir = inv[: ac.size], inv[ac.size :]
    g = labels.size

    def agg(idx: np.ndarray, x: npt.ArrayLike, name: str) -> np.ndarray:
        arr = np.asarray(x, dtype=float).ravel()
        if arr.size != idx.size:
            raise ValueError(f"{name} has {arr.size} entries for {idx.size} episodes")
        return np.bincount(idx, weights=arr, minlength=g)

    return rate_ratio_from_clusters(
        agg(ia, arm_counts, "arm_counts"), agg(ia, arm_calls, "arm_calls"),
        agg(ir, reference_counts, "reference_counts"),
        agg(ir, reference_calls, "reference_calls"),
        confidence=confidence, method=method, rng=rng, n_boot=n_boot,
    )


def rate_ci(
    counts: npt.ArrayLike, calls: npt.ArrayLike, *, confidence: float = 0.95
) -> ConfidenceInterval:
    """Cluster-robust CI of one arm's rate ``sum(counts) / sum(calls)`` (one entry per
    cluster), on the log scale with a t(G-1) reference; Wilson when a cluster-robust
    variance cannot be formed (no failure, or fewer than two clusters)."""
    from pytest_quantagent.stats.intervals import wilson_interval

    y = np.asarray(counts, dtype=float).ravel()
    n = np.asarray(calls, dtype=float).ravel()
    ys, ns, g = float(y.sum()), float(n.sum()), y.size
    if ns == 0:
        return ConfidenceInterval(0.0, 1.0, confidence)
    if ys == 0 or g < 2 or ys == ns:
        return wilson_interval(round(ys), round(ns), confidence).ci
    rate = ys / ns
    u = (y - rate * n) / ys
    se = math.sqrt(g / (g - 1) * float(np.sum(u * u)))
    tq = float(_st.t.ppf(0.5 + confidence / 2, g - 1))
    return ConfidenceInterval(rate * math.exp(-tq * se), min(1.0, rate * math.exp(tq * se)), confidence)


def per_unit_ci(
    counts: npt.ArrayLike, units: npt.ArrayLike, *, confidence: float = 0.95
) -> ConfidenceInterval:
    """Cluster-robust t CI of ``sum(counts) / sum(units)`` (e.g. failures per episode), one
    entry per cluster; linear scale, clipped at 0. ``[mean, mean]`` is never returned for a
    single cluster: the interval is then ``[0, inf]``."""
    check_probability("confidence", confidence)
    y = np.asarray(counts, dtype=float).ravel()
    n = np.asarray(units, dtype=float).ravel()
    if y.size != n.size:
        raise ValueError(f"counts and units need one entry per cluster; got {y.size} and {n.size}")
    ns, g = float(n.sum()), y.size
    if ns == 0:
        raise ValueError("units sum to 0; at least one unit (episode) is needed")
    mean = float(y.sum()) / ns
    if g < 2:
        return ConfidenceInterval(0.0, math.inf, confidence)
    u = y - mean * n
    se = math.sqrt(g / (g - 1) * float(np.sum(u * u))) / ns
    tq = float(_st.t.ppf(0.5 + confidence / 2, g - 1))
    return ConfidenceInterval(max(0.0, mean - tq * se), mean + tq * se, confidence)
