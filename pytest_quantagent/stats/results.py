"""Frozen result objects returned by the statistics functions (scipy ``binomtest`` style).

Every result carries its inputs' essentials plus ``statistic``, ``pvalue`` and, where one
exists, ``ci``. ``to_dict()`` gives the JSON-ready form the report uses.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ConfidenceInterval:
    """A two-sided confidence interval ``[low, high]`` at ``level``."""

    low: float
    high: float
    level: float = 0.95

    def contains(self, value: float) -> bool:
        """True when ``low <= value <= high``."""
        return self.low <= value <= self.high

    def as_list(self) -> list[float]:
        return [self.low, self.high]


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


@dataclass(frozen=True)
class _Result:
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; non-finite floats become ``None``."""
        out: dict[str, Any] = _clean(asdict(self))
        return out


@dataclass(frozen=True)
class ProportionResult(_Result):
    """A proportion ``successes / n`` with its confidence interval."""

    successes: int
    n: int
    estimate: float
    ci: ConfidenceInterval
    method: str


@dataclass(frozen=True)
class McNemarResult(_Result):
    """Exact McNemar test on the discordant pairs of a paired binary outcome.

    ``b``: pairs where only the candidate succeeded; ``c``: only the reference succeeded.
    ``statistic`` is ``min(b, c)`` (statsmodels' convention for the exact test).
    """

    b: int
    c: int
    n_pairs: int
    statistic: float
    pvalue: float


@dataclass(frozen=True)
class TostResult(_Result):
    """Two one-sided tests of equivalence: H0 ``diff <= low`` or ``diff >= high``.

    ``pvalue`` is the larger of the two one-sided p-values; equivalence is shown at level
    ``alpha`` when ``pvalue < alpha``. ``ci`` is the two-sided ``1 - alpha`` interval of the
    difference (candidate − reference) from the same model.
    """

    diff: float
    low: float
    high: float
    pvalue: float
    pvalue_low: float
    pvalue_high: float
    statistic: float
    """The t (or z) statistic of the one-sided test that gave ``pvalue``."""
    ci: ConfidenceInterval
    n: int
    """Units the variance was computed from (pairs, clusters, or total observations)."""
    method: str


@dataclass(frozen=True)
class DiffResult(_Result):
    """A difference of two proportions (candidate − reference) with CI and a two-sided test
    of H0 ``diff = 0``."""

    diff: float
    ci: ConfidenceInterval
    pvalue: float
    n: int
    method: str


@dataclass(frozen=True)
class RateRatioResult(_Result):
    """Candidate/reference ratio of failures per tool call.

    ``ratio`` is ``None``-able in JSON: it is ``inf`` when the reference has no failure and
    ``nan`` when neither arm has one.
    """

    arm_count: int
    reference_count: int
    arm_calls: int
    reference_calls: int
    arm_rate: float
    reference_rate: float
    ratio: float
    ci: ConfidenceInterval
    statistic: float
    pvalue: float
    n_clusters: int
    method: str


@dataclass(frozen=True)
class RankCorrelationResult(_Result):
    """Agreement of two per-name failure frequency profiles."""

    spearman: float
    spearman_pvalue: float
    kendall: float
    kendall_pvalue: float
    novel_share: float
    """Share of the candidate's failures whose name never occurs in the reference."""
    n_names: int
    arm_total: int
    reference_total: int


@dataclass(frozen=True)
class MultipleTestResult(_Result):
    """Adjusted p-values (same order as the input) and rejections at ``alpha``."""

    pvalues: tuple[float, ...]
    pvalues_adjusted: tuple[float, ...]
    reject: tuple[bool, ...]
    alpha: float
    method: str


@dataclass(frozen=True)
class SampleSizeResult(_Result):
    """Paired episodes needed to show equivalence within ``margin`` at ``power``."""

    n_pairs: int
    margin: float
    power: float
    alpha: float
    sd: float
    """Assumed standard deviation of the per-pair difference."""
    true_diff: float
    method: str
