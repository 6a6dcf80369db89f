"""Failure-set invariance: do both arms fail with the same names, in the same proportions?"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

import numpy as np
from scipy import stats as _st

from pytest_quantagent.stats.results import RankCorrelationResult


def failure_set_agreement(
    arm: Mapping[str, int], reference: Mapping[str, int]
) -> RankCorrelationResult:
    """Spearman ρ and Kendall τ-b between two per-name failure frequency profiles, plus the
    candidate's novel share.

    The profiles are aligned over the union of names (a name absent from one arm counts 0
    there), so a candidate inventing new names lowers both correlations. Kendall's τ-b
    handles the many ties of count data. H0 for the p-values: no monotone association.
    Correlations are ``nan`` when fewer than two names exist or a profile is constant.

    References
    ----------
    scipy ``spearmanr`` and ``kendalltau(variant="b")``; Kendall (1945), Biometrika 33:239.
    """
    for label, prof in (("arm", arm), ("reference", reference)):
        for name, count in prof.items():
            if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
                raise ValueError(
                    f"{label} profile count for {name!r} is {count!r}; counts must be integers >= 0"
                )
    names = sorted(set(arm) | set(reference))
    a = np.array([arm.get(n, 0) for n in names], dtype=float)
    r = np.array([reference.get(n, 0) for n in names], dtype=float)
    arm_total, ref_total = int(a.sum()), int(r.sum())
    novel = sum(c for n, c in arm.items() if reference.get(n, 0) == 0)
    novel_share = novel / arm_total if arm_total else math.nan
    rho = p_rho = tau = p_tau = math.nan
    if len(names) >= 2 and np.ptp(a) > 0 and np.ptp(r) > 0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sr = _st.spearmanr(a, r)
            kt = _st.kendalltau(a, r, variant="b")
        rho, p_rho = float(sr.statistic), float(sr.pvalue)
        tau, p_tau = float(kt.statistic), float(kt.pvalue)
    return RankCorrelationResult(
        rho, p_rho, tau, p_tau, novel_share, len(names), arm_total, ref_total
    )
