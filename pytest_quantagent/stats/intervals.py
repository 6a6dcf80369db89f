"""Confidence intervals for single proportions."""

from __future__ import annotations

import math

from scipy import stats as _st

from pytest_quantagent.stats._validate import check_count, check_probability
from pytest_quantagent.stats.results import ConfidenceInterval, ProportionResult


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> ProportionResult:
    """Wilson score interval for a binomial proportion.

    Chosen over the Wald interval because it keeps close to nominal coverage for small ``n``
    and for proportions near 0 or 1 (success rates of strong models, rare failure channels).

    Parameters
    ----------
    successes, n : int
        Number of successes and trials, ``0 <= successes <= n``.
    confidence : float
        Two-sided confidence level in (0, 1).

    Returns
    -------
    ProportionResult
        ``estimate = successes / n`` (``nan`` with interval ``[0, 1]`` when ``n == 0``).

    References
    ----------
    E. B. Wilson (1927), "Probable inference, the law of succession, and statistical
    inference", JASA 22:209-212; Newcombe (1998), Stat. Med. 17:857-872, method 3.
    """
    check_count("n", n)
    check_count("successes", successes)
    if successes > n:
        raise ValueError(f"successes={successes} is not allowed; successes must be <= n={n}")
    check_probability("confidence", confidence)
    if n == 0:
        return ProportionResult(0, 0, math.nan, ConfidenceInterval(0.0, 1.0, confidence), "wilson")
    z = float(_st.norm.ppf(0.5 + confidence / 2))
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    ci = ConfidenceInterval(max(0.0, center - half), min(1.0, center + half), confidence)
    return ProportionResult(successes, n, p, ci, "wilson")
