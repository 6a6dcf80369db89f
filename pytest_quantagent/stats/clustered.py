"""The tests behind the verdicts: paired score equivalence and harm, the tight-budget gap,
and channel rate ratios, each valid with sparse one-sided discordance, few events and
task clustering (several trials per task, bursts of failures in one stuck episode).

Score (paired 0/1 outcomes, candidate − reference):

- One trial per task: Tango's score test and interval for the difference of two matched
  proportions: the variance is taken under the hypothesis, so with few discordant pairs,
  all harmful, it keeps its level where the paired t (or Wald) interval is far too narrow
  (40 pairs with one harmful flip: variance ~0).
- Several trials per task: the same score statistic, its variance the larger of Tango's
  (under the hypothesis) and the cluster-robust (task) sandwich, ``t(G-1)`` reference
  (G = tasks).
- Equivalence (TOST at level α) ⇔ the ``1 - 2α`` interval lies inside ``±margin``.
- Harm (DEGRADED): exact one-sided McNemar with one trial per task (binomial test of the
  harmful flips among discordant pairs), the one-sided cluster test above otherwise.
- The tight-budget gap widens when the candidate loses, between the run's budget and a
  tight one, more successes than the reference: a paired one-sided test on the "kept at
  K_tight" indicators of the episodes that succeeded, the same harm test.

Channels (failures per agent tool call, tasks as clusters, both arms' episodes of a task in
one stratum): conditional on a task's total failures ``T_c``, the candidate's share is
Binomial(T_c, π_c(ρ)) with ``π_c = ρ n_ac / (ρ n_ac + n_rc)`` (n = calls). The score
statistic ``U(ρ) = Σ (y_ac − T_c π_c)`` is divided by the larger of its model variance
``Σ T_c π_c (1 − π_c)`` and its cluster-robust variance ``G'/(G'−1) Σ (y_ac − T_c π_c)²``
(G' = tasks with a failure), with a ``t(G'−1)`` reference. A burst of 9 failures in one
stuck episode is one task's residual: it weighs as one unit of evidence, not nine. The test
of amplification is one-sided, H0: ρ ≤ max_ratio; the CI inverts the same statistic.
Rare channels are judged by a cluster-robust upper bound of the per-call rate increase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import optimize as _opt
from scipy import stats as _st

from pytest_quantagent.stats._validate import check_probability
from pytest_quantagent.stats.results import ConfidenceInterval


def _sf(x: float, df: float) -> float:
    return float(_st.norm.sf(x)) if math.isinf(df) else float(_st.t.sf(x, df))


def _ppf(q: float, df: float) -> float:
    return float(_st.norm.ppf(q)) if math.isinf(df) else float(_st.t.ppf(q, df))


@dataclass(frozen=True)
class PairedScore:
    """Paired difference (candidate − reference) with the decision's interval and tests.

    ``ci`` is the two-sided ``1 - 2 alpha`` interval the TOST decides on (inside ±margin ⇔
    ``tost_p < alpha``); ``ci95`` the 95% one. ``tost_p``: max of the two one-sided p-values
    against ``±margin``; ``noninferiority_p``: the one against ``−margin``; ``harm_p``:
    one-sided p of H0 "candidate not worse" (diff ≥ 0).
    """

    diff: float
    ci: ConfidenceInterval
    ci95: ConfidenceInterval
    tost_p: float
    noninferiority_p: float
    upper_p: float
    """One-sided p against ``+margin`` (H0 diff ≥ margin)."""
    harm_p: float
    n_pairs: int
    n_clusters: int
    harmful: int
    helpful: int
    method: str
    inferiority_p: float = 1.0
    """One-sided p of H0 ``diff ≥ −margin`` (H1: ``diff < −margin``, worse by more than the
    margin): the damage side of the same threshold the TOST uses, DEGRADED's and the gap
    widening's test."""


def _labels(clusters: npt.ArrayLike | None, n: int) -> np.ndarray:
    if clusters is None:
        return np.arange(n)
    lab = np.asarray(clusters).astype(str).ravel()
    if lab.size != n:
        raise ValueError(f"clusters must label every pair; got {lab.size} labels for {n} pairs")
    _, inv = np.unique(lab, return_inverse=True)
    return np.asarray(inv)


def tango_restricted_p21(n12: float, n21: float, n: float, delta: float) -> float:
    """Restricted MLE of P(discordant, reference only) under H0 ``p12 − p21 = delta``
    (Tango 1998, Stat. Med. 17:891, eq. 4): the positive root of ``A x² + B x + C``."""
    a = 2.0 * n
    b = -n12 - n21 + (2.0 * n - n12 + n21) * delta
    c = -n21 * delta * (1.0 - delta)
    disc = max(b * b - 4.0 * a * c, 0.0)
    return (-b + math.sqrt(disc)) / (2.0 * a)


def _tango_z(delta: float, n12: float, n21: float, n: float, resid: np.ndarray | None,
             lab: np.ndarray | None, g: int) -> float:
    num = n12 - n21 - n * delta
    p21 = tango_restricted_p21(n12, n21, n, delta)
    v = n * (2.0 * p21 + delta * (1.0 - delta))
    if resid is not None and lab is not None and g > 1:
        r = np.bincount(lab, weights=resid - float(resid.mean()), minlength=g)
        v = max(v, g / (g - 1) * float(np.sum(r * r)))
    if v <= 0.0:
        return 0.0 if num == 0 else math.copysign(math.inf, num)
    return num / math.sqrt(v)


def paired_score(
    arm: npt.ArrayLike,
    reference: npt.ArrayLike,
    *,
    clusters: npt.ArrayLike | None = None,
    margin: float = 0.075,
    alpha: float = 0.05,
) -> PairedScore:
    """Paired equivalence, non-inferiority and harm tests of 0/1 success.

    One pair per cluster (or ``clusters=None``): Tango's score test and interval for the
    difference of matched proportions, ``Z(Δ) = (n12 − n21 − nΔ) / sqrt(n (2 p̃21 +
    Δ(1 − Δ)))`` with ``p̃21`` the restricted MLE under ``Δ`` (n12: only the candidate
    succeeded; n21: only the reference), normal reference. Unlike the Wald/t interval its
    variance is taken under the hypothesis, so few harmful flips cannot shrink it. Several
    pairs per task: the same score with the variance ``max(model, cluster-robust)``, the
    robust one ``G/(G−1) Σ_c (Σ_{i∈c} (d_i − d̄))²`` over tasks, and a ``t(G−1)``
    reference. The interval inverts ``Z``.

    H0 (TOST): ``diff ≤ −margin`` or ``diff ≥ margin``; H1: within. Harm, H0: ``diff ≥ 0``,
    H1: ``diff < 0``: exact one-sided McNemar (binomial test of n21 among n12 + n21) with one
    pair per cluster, the clustered score test at Δ = 0 otherwise.

    References
    ----------
    Tango (1998), "Equivalence test and confidence interval for the difference in
    proportions for the paired-sample design", Stat. Med. 17:891-908 (and the erratum,
    Stat. Med. 18:1999); Schuirmann (1987) (TOST); McNemar (1947); robust variance: Cameron &
    Miller (2015), J. Human Resources 50:317.
    """
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and 0 < margin < 1):
        raise ValueError(f"margin={margin!r} is not allowed; margin must be in (0, 1)")
    check_probability("alpha", alpha)
    a = np.asarray(arm, dtype=float).ravel()
    r = np.asarray(reference, dtype=float).ravel()
    if a.shape != r.shape:
        raise ValueError(f"arm and reference must be paired arrays; got {a.size} and {r.size}")
    if a.size == 0:
        raise ValueError("no pairs; at least one pair is needed")
    for name, v in (("arm", a), ("reference", r)):
        bad = v[~np.isin(v, (0.0, 1.0))]
        if bad.size:
            raise ValueError(f"{name} contains {float(bad[0])!r}; allowed: 0, 1, False, True")
    d = a - r
    n = float(d.size)
    n12 = float(np.sum(d > 0))
    n21 = float(np.sum(d < 0))
    lab = _labels(clusters, d.size)
    g = int(lab.max()) + 1
    clustered = g < d.size
    df = float(g - 1) if clustered else math.inf
    if clustered and g < 2:
        full = ConfidenceInterval(-1.0, 1.0, 1 - 2 * alpha)
        return PairedScore(float(d.mean()), full, ConfidenceInterval(-1.0, 1.0, 0.95), 1.0, 1.0,
                           1.0, 1.0, d.size, g, int(n21), int(n12), "tango-cluster", 1.0)

    def z(delta: float) -> float:
        return _tango_z(delta, n12, n21, n, d if clustered else None,
                        lab if clustered else None, g)

    eps = 1e-9

    def root(q: float) -> float:
        lo, hi = -1.0 + eps, 1.0 - eps
        f_lo, f_hi = z(lo) - q, z(hi) - q
        if f_lo <= 0:
            return -1.0
        if f_hi >= 0:
            return 1.0
        return float(_opt.brentq(lambda x: z(x) - q, lo, hi, xtol=1e-12))

    q = _ppf(1 - alpha, df)
    q95 = _ppf(0.975, df)
    ci = ConfidenceInterval(root(q), root(-q), 1 - 2 * alpha)
    ci95 = ConfidenceInterval(root(q95), root(-q95), 0.95)
    p_low = _sf(z(-margin), df)
    p_high = _sf(-z(margin), df)
    p_worse = _sf(-z(-margin), df)
    if clustered:
        harm_p = _sf(-z(0.0), df)
        method = "tango-cluster"
    else:
        k = int(n12 + n21)
        harm_p = float(_st.binomtest(int(n21), k, 0.5, alternative="greater").pvalue) if k else 1.0
        method = "tango"
    return PairedScore(float(d.mean()), ci, ci95, max(p_low, p_high), p_low, p_high, harm_p,
                       d.size, g, int(n21), int(n12), method, p_worse)


@dataclass(frozen=True)
class ChannelRatio:
    """Rate ratio of one channel (failures per agent call, candidate / reference), and the
    per-call increase, each tested against its threshold in both directions."""

    arm_count: int
    reference_count: int
    arm_calls: int
    reference_calls: int
    ratio: float
    """Crude ratio of the per-call rates (inf when the reference has no failure)."""
    ci: ConfidenceInterval
    """Two-sided interval at ``confidence`` from the inverted score statistic."""
    upper: float
    """One-sided ``1 − alpha`` upper bound (LOSSLESS's ratio route needs it below
    ``max_ratio``)."""
    amplified_p: float
    """One-sided p of H0 ``ratio ≤ max_ratio``."""
    max_ratio: float
    increase: float
    """Per-call rate increase ``rate_arm − rate_ref``."""
    increase_upper: float
    """One-sided ``1 − alpha`` cluster-robust upper bound of the increase."""
    clusters: int
    """Tasks holding at least one failure of the channel."""
    method: str
    tolerance: float = 0.0
    """The per-call increase below which an amplification is negligible."""
    increase_p: float = 1.0
    """One-sided p of H0 ``increase ≤ tolerance``."""
    damage_p: float = 1.0
    """One-sided p of H0 "not damage" (``ratio ≤ max_ratio`` or ``increase ≤ tolerance``):
    the intersection-union test, ``max(amplified_p, increase_p)``."""
    strata: str = "task"
    """``pair`` (one stratum per paired episode) or ``task``."""
    estimate: float = math.nan
    """The stratified point estimate: the ratio at which the score statistic (without its
    continuity correction) is 0, inside ``ci``. It differs from the crude ``ratio`` when the
    strata differ in calls, e.g. a candidate whose extra failures come with as many extra
    calls in the same pair (nan when no stratum that both arms ran has a failure)."""


def _cluster_sums(x: np.ndarray, lab: np.ndarray, g: int) -> np.ndarray:
    return np.bincount(lab, weights=x, minlength=g)


def _score_z(log_rho: float, y: np.ndarray, na: np.ndarray, t: np.ndarray, nr: np.ndarray,
             lab: np.ndarray | None = None, unmatched: np.ndarray | None = None,
             cc: float = 0.0) -> float:
    """Conditional score z of H0 ratio = exp(log_rho); ``lab`` groups strata into clusters
    for the robust variance (None: each stratum is one). ``unmatched`` (paired strata): the
    failures not matched by the partner's, which with the imbalance H0 itself implies,
    ``T |2π − 1|``, are what the model variance counts (None: every failure). ``cc``: a
    continuity correction, the score moved that much toward 0."""
    rho = math.exp(log_rho)
    pi = rho * na / (rho * na + nr)
    res = y - t * pi
    u = float(res.sum())
    u = math.copysign(max(abs(u) - cc, 0.0), u)
    tm = t if unmatched is None else np.maximum(unmatched, t * np.abs(2 * pi - 1))
    v_model = float(np.sum(tm * pi * (1 - pi)))
    if lab is None:
        r = res
    else:
        r = _cluster_sums(res, lab, int(lab.max()) + 1 if lab.size else 0)
        r = r[np.bincount(lab, minlength=r.size) > 0]
    g = r.size
    c = r - float(r.mean()) if g else r
    v_rob = g / (g - 1) * float(np.sum(c * c)) if g > 1 else 0.0
    v = max(v_model, v_rob)
    if v <= 0:
        return 0.0 if u == 0 else math.copysign(math.inf, u)
    return u / math.sqrt(v)


def channel_ratio(
    arm_counts: npt.ArrayLike,
    arm_calls: npt.ArrayLike,
    reference_counts: npt.ArrayLike,
    reference_calls: npt.ArrayLike,
    *,
    clusters: npt.ArrayLike | None = None,
    paired: bool = False,
    max_ratio: float = 1.2,
    tolerance: float = 0.0,
    alpha: float = 0.05,
    confidence: float = 0.95,
) -> ChannelRatio:
    """Stratified robust score test and interval for a channel's rate ratio, and the test of
    its per-call increase against ``tolerance``.

    Each entry is one stratum: a task (both arms' episodes of the task), or with
    ``paired=True`` one paired episode (same task, trial and seed in both arms). ``clusters``
    labels the strata's task (None: every stratum is its own cluster); the robust variance
    sums the residuals per cluster, so a task's trials are one unit of evidence however they
    are stratified. H0: ``ratio ≤ max_ratio``; H1: ``ratio > max_ratio`` (one-sided,
    "amplified above max_ratio"). See the module docstring for the statistic; ``t(G'−1)``
    reference with G' the tasks carrying a failure (at least 1 df). Without any failure in a
    stratum that both arms ran the interval is ``[0, inf]`` and the test cannot reject.

    Pairing: conditioning on each pair's total removes what the two episodes of a pair
    share (the task, the seed, the conversation up to the first divergence). The variance is
    ``max(model, robust)`` as with task strata, but with pairs the model (binomial split)
    variance counts only the failures that can split: those not matched by one of the
    partner's (``|y_arm − y_ref|`` per pair), and at least the imbalance the hypothesis
    itself implies, ``T |2π(ρ) − 1|`` (the variance is taken under H0, as in Tango's
    interval: identical counts are strong evidence against ×1.2 but not against ×1.05).
    Byte-identical arms therefore bound the ratio near 1 and the increase at ``O(1/calls)``
    instead of staying open.

    Increase: ``rate_arm − rate_ref`` with a cluster-robust variance, floored at an add-one
    Poisson variance of the unmatched failures (all failures with task strata), normal
    reference; ``increase_p`` tests H0 ``increase ≤ tolerance``. The score carries a
    continuity correction of 1/2 (the counts are discrete; without it the bound of a
    channel at exactly ``max_ratio`` came out below it in 6.5% of simulated cells at α = 5%,
    with it both directions are slightly conservative). ``damage_p`` is the
    intersection-union test (Berger 1982) of "amplified above max_ratio **and** by more than
    the tolerance": ``max(amplified_p, increase_p)``, exact level α without correction.

    References
    ----------
    Conditional binomial (score) test of two Poisson rates: Breslow & Day (1987),
    *Statistical Methods in Cancer Research* II, §3.4 (stratified person-time); robust
    (sandwich) variance of an estimating equation: Liang & Zeger (1986), Biometrika 73:13;
    score-test inversion for intervals: e.g. Agresti, *Categorical Data Analysis* §1.4;
    intersection-union tests: Berger (1982), Technometrics 24:295.
    """
    check_probability("alpha", alpha)
    check_probability("confidence", confidence)
    if not (math.isfinite(max_ratio) and max_ratio > 0):
        raise ValueError(f"max_ratio={max_ratio!r} is not allowed; it must be a number > 0")
    if not (math.isfinite(tolerance) and 0 <= tolerance < 1):
        raise ValueError(f"tolerance={tolerance!r} is not allowed; it must be in [0, 1)")
    ya_c = np.asarray(arm_counts, dtype=float).ravel()
    na_c = np.asarray(arm_calls, dtype=float).ravel()
    yr_c = np.asarray(reference_counts, dtype=float).ravel()
    nr_c = np.asarray(reference_calls, dtype=float).ravel()
    if not (ya_c.size == na_c.size == yr_c.size == nr_c.size):
        raise ValueError("arm_counts, arm_calls, reference_counts, reference_calls need one "
                         f"entry per stratum; got {ya_c.size}, {na_c.size}, {yr_c.size}, "
                         f"{nr_c.size}")
    for name, arr in (("arm_counts", ya_c), ("arm_calls", na_c),
                      ("reference_counts", yr_c), ("reference_calls", nr_c)):
        if np.any(arr < 0) or not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite and >= 0")
    lab_all = _labels(clusters, ya_c.size)
    ya, na, yr, nr = (float(x.sum()) for x in (ya_c, na_c, yr_c, nr_c))
    if na == 0 or nr == 0:
        raise ValueError(f"arm calls={int(na)}, reference calls={int(nr)}; both arms need at "
                         "least one agent tool call for a rate ratio")
    rate_a, rate_r = ya / na, yr / nr
    ratio = rate_a / rate_r if yr > 0 else (math.inf if ya > 0 else math.nan)
    matched = np.minimum(ya_c, yr_c) if paired else np.zeros_like(ya_c)
    # rate increase: cluster-robust, floored at an add-one Poisson variance of the failures
    # not matched within a pair, so that 0 vs 0 (or identical arms) still gives a bound of
    # order 1/calls rather than 0
    gg = int(lab_all.max()) + 1 if lab_all.size else 0
    u = _cluster_sums((ya_c - rate_a * na_c) / na - (yr_c - rate_r * nr_c) / nr, lab_all, gg)
    v_rob = gg / (gg - 1) * float(np.sum(u * u)) if gg > 1 else 0.0
    v_floor = (float((ya_c - matched).sum()) + 1) / (na * na) + \
        (float((yr_c - matched).sum()) + 1) / (nr * nr)
    inc = rate_a - rate_r
    se_inc = math.sqrt(max(v_rob, v_floor))
    inc_up = inc + float(_st.norm.ppf(1 - alpha)) * se_inc
    inc_p = float(_st.norm.sf((inc - tolerance) / se_inc))
    keep = (ya_c + yr_c > 0) & (na_c > 0) & (nr_c > 0)
    y, sa, t, sr = ya_c[keep], na_c[keep], (ya_c + yr_c)[keep], nr_c[keep]
    unmatched = (t - 2 * matched[keep]) if paired else None
    _, lab = np.unique(lab_all[keep], return_inverse=True)
    g = int(lab.max()) + 1 if lab.size else 0
    strata = "pair" if paired else "task"
    if g == 0:
        return ChannelRatio(int(ya), int(yr), int(na), int(nr), ratio,
                            ConfidenceInterval(0.0, math.inf, confidence), math.inf, 1.0,
                            max_ratio, inc, inc_up, 0, "stratified-robust-score", tolerance,
                            inc_p, 1.0, strata)
    df = float(max(g - 1, 1))
    lab_arg = None if not paired and clusters is None else np.asarray(lab)

    def z(lr: float) -> float:
        return _score_z(lr, y, sa, t, sr, lab_arg, unmatched, 0.5)

    lo_b, hi_b = -30.0, 30.0

    def bound(q: float) -> float:
        # solve z(log rho) = q (z decreases in rho); -inf/inf when it does not cross
        f_lo, f_hi = z(lo_b) - q, z(hi_b) - q
        if f_lo <= 0:
            return -math.inf
        if f_hi >= 0:
            return math.inf
        return float(_opt.brentq(lambda v: z(v) - q, lo_b, hi_b, xtol=1e-10))

    def z0(v: float) -> float:
        return _score_z(v, y, sa, t, sr, lab_arg, unmatched, 0.0)

    if z0(lo_b) <= 0:
        est = 0.0
    elif z0(hi_b) >= 0:
        est = math.inf
    else:
        est = math.exp(float(_opt.brentq(z0, lo_b, hi_b, xtol=1e-10)))
    qc = float(_st.t.ppf(0.5 + confidence / 2, df))
    qa = float(_st.t.ppf(1 - alpha, df))
    lo_l = bound(qc)
    hi_l = bound(-qc)
    up_l = bound(-qa)
    zc = z(math.log(max_ratio))
    p = float(_st.t.sf(zc, df))
    ci = ConfidenceInterval(math.exp(lo_l) if math.isfinite(lo_l) else 0.0,
                            math.exp(hi_l) if math.isfinite(hi_l) else math.inf, confidence)
    return ChannelRatio(int(ya), int(yr), int(na), int(nr), ratio, ci,
                        math.exp(up_l) if math.isfinite(up_l) else math.inf, p, max_ratio,
                        inc, inc_up, g, "stratified-robust-score", tolerance, inc_p,
                        max(p, inc_p), strata, est)
