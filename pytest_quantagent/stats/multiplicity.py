"""Multiple-testing adjustment across every cell × channel × test of a report."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pytest_quantagent.stats._validate import check_probability
from pytest_quantagent.stats.results import MultipleTestResult


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> MultipleTestResult:
    """Holm's step-down adjustment (strong family-wise error control at ``alpha``).

    Adjusted ``p_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))`` over p-values sorted
    ascending. NaN p-values (tests that could not be run) stay NaN, are never rejected and do
    not count in ``m``. This is statsmodels ``multipletests(p, method="holm")`` — not its
    default, which is Holm-Šidák.

    References
    ----------
    Holm (1979), "A simple sequentially rejective multiple test procedure", Scand. J.
    Statist. 6:65-70.
    """
    check_probability("alpha", alpha)
    p = np.asarray(pvalues, dtype=float).ravel()
    valid = ~np.isnan(p)
    if np.any((p[valid] < 0) | (p[valid] > 1)):
        bad = float(p[valid][(p[valid] < 0) | (p[valid] > 1)][0])
        raise ValueError(f"p-value {bad!r} is not allowed; p-values must be in [0, 1] or nan")
    adjusted = np.full(p.shape, math.nan)
    pv = p[valid]
    m = pv.size
    if m:
        order = np.argsort(pv, kind="mergesort")
        raw = pv[order] * np.arange(m, 0, -1)
        adj_sorted = np.minimum(1.0, np.maximum.accumulate(raw))
        adj = np.empty(m)
        adj[order] = adj_sorted
        adjusted[valid] = adj
    reject = tuple(bool(a <= alpha) if not math.isnan(a) else False for a in adjusted)
    return MultipleTestResult(
        tuple(float(x) for x in p), tuple(float(x) for x in adjusted), reject, alpha, "holm"
    )


def weighted_holm(
    pvalues: Sequence[float], weights: Sequence[float], alpha: float = 0.05
) -> MultipleTestResult:
    """Holm's weighted step-down procedure (strong family-wise error control at ``alpha``).

    Tests are ordered by ``p_i / w_i``; at step j (remaining set R_j) the adjusted p is
    ``max_{k <= j} min(1, p_(k) · Σ_{i∈R_k} w_i / w_(k))``. With equal weights this is
    :func:`holm`. Weights must be > 0 (their scale does not matter).

    References
    ----------
    Holm (1979), Scand. J. Statist. 6:65-70, §4 (weighted version); Bretz, Hothorn & Westfall,
    *Multiple Comparisons Using R* (2010), §2.3.
    """
    check_probability("alpha", alpha)
    p = np.asarray(pvalues, dtype=float).ravel()
    w = np.asarray(weights, dtype=float).ravel()
    if p.size != w.size:
        raise ValueError(f"pvalues and weights need equal lengths; got {p.size} and {w.size}")
    if np.any(~np.isfinite(w) | (w <= 0)):
        raise ValueError(f"weights must be finite and > 0; got {w.tolist()!r}")
    if np.any((p < 0) | (p > 1) | np.isnan(p)):
        raise ValueError("p-values must be in [0, 1]")
    m = p.size
    adjusted = np.empty(m)
    if m:
        order = np.argsort(p / w, kind="mergesort")
        remaining = float(w.sum())
        running = 0.0
        for i in order:
            running = max(running, min(1.0, float(p[i]) * remaining / float(w[i])))
            adjusted[i] = running
            remaining -= float(w[i])
    reject = tuple(bool(a <= alpha) for a in adjusted)
    return MultipleTestResult(tuple(float(x) for x in p), tuple(float(x) for x in adjusted),
                              reject, alpha, "weighted-holm")
