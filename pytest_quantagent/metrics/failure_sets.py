"""Failure-set invariance per named channel (unknown/cross-role tool names, wrong entities)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Literal

import numpy as np
from scipy.stats import rankdata

from pytest_quantagent.metrics.episode import failure_names
from pytest_quantagent.stats.rank import failure_set_agreement
from pytest_quantagent.stats.results import RankCorrelationResult
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import NAMED_CHANNELS, Channel


def failure_profile(records: Iterable[EpisodeRecord], channel: Channel) -> Counter[str]:
    """Per-name failure counts of ``channel`` over ``records`` (scored episodes only)."""
    if channel not in NAMED_CHANNELS:
        allowed = ", ".join(c.value for c in NAMED_CHANNELS)
        raise ValueError(f"channel={channel.value!r} carries no names; allowed: {allowed}")
    out: Counter[str] = Counter()
    for r in records:
        if r.scored:
            out.update(failure_names(r, channel))
    return out


def failure_set_invariance(
    arm: Iterable[EpisodeRecord], reference: Iterable[EpisodeRecord], channel: Channel
) -> RankCorrelationResult:
    """Spearman/Kendall τ-b agreement and novel share of two arms' failure profiles."""
    return failure_set_agreement(failure_profile(arm, channel), failure_profile(reference, channel))


#: The failure-set gate's defaults (``assert_failure_set_invariant`` and the report's cell).
DEFAULT_MIN_RANK_CORR = 0.9
DEFAULT_MIN_FAILURES = 20
DEFAULT_PERMUTATIONS = 2000
FailureSetJudgement = Literal["same", "changed", "cannot judge"]


def _row_spearman(a: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Spearman ρ (average ranks for ties) of each row pair; ``nan`` where a row is constant."""
    ra = rankdata(a, axis=1)
    rr = rankdata(r, axis=1)
    ra = ra - ra.mean(axis=1, keepdims=True)
    rr = rr - rr.mean(axis=1, keepdims=True)
    den = np.sqrt((ra**2).sum(axis=1) * (rr**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ra * rr).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)


def failure_set_change_pvalue(
    arm: Mapping[str, int],
    reference: Mapping[str, int],
    *,
    n_permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> float | None:
    """One-sided permutation p-value that the candidate fails with *other* names.

    H0: the two arms' failures are draws from one distribution of names (the arm labels of
    the pooled failures are exchangeable). Statistic: Spearman ρ of the two per-name count
    profiles over the union of names (as in :func:`~pytest_quantagent.stats.rank.
    failure_set_agreement`). Each permutation deals the pooled failures to the arms at
    random, keeping each arm's total (a multivariate hypergeometric draw), and
    ``p = (1 + #{ρ* <= ρ}) / (1 + B)`` over the ``B`` draws where ρ* is defined. A low ρ on
    a handful of failures is common under H0 (small counts rank almost at random), so only a
    small ``p`` is evidence of a changed failure set. ``None`` when ρ is undefined (fewer than
    two names, or a constant profile). Deterministic for a given ``seed``.

    Reference: the same null and statistic as ``scipy.stats.permutation_test(...,
    permutation_type="independent")`` over the individual failures' names (checked in
    ``tests/metrics/test_failure_set_test.py``).
    """
    if n_permutations < 1:
        raise ValueError(f"n_permutations={n_permutations!r} is not allowed; it must be >= 1")
    names = sorted(set(arm) | set(reference))
    a = np.array([arm.get(n, 0) for n in names], dtype=np.int64)
    r = np.array([reference.get(n, 0) for n in names], dtype=np.int64)
    if len(names) < 2:
        return None
    obs = _row_spearman(a[None, :].astype(float), r[None, :].astype(float))[0]
    if not np.isfinite(obs):
        return None
    pooled = a + r
    rng = np.random.default_rng(seed)
    draws = rng.multivariate_hypergeometric(pooled, int(a.sum()), size=n_permutations)
    rho = _row_spearman(draws.astype(float), (pooled[None, :] - draws).astype(float))
    rho = rho[np.isfinite(rho)]
    return float((1 + np.count_nonzero(rho <= obs + 1e-12)) / (1 + rho.size))


def judge_failure_set(
    spearman: float | None,
    p_changed: float | None,
    arm_total: int,
    reference_total: int,
    *,
    min_rank_corr: float = DEFAULT_MIN_RANK_CORR,
    min_failures: int = DEFAULT_MIN_FAILURES,
    alpha: float = 0.05,
) -> tuple[FailureSetJudgement, str]:
    """``("changed" | "same" | "cannot judge", why)`` for one channel's failure set.

    ``changed`` needs evidence: ρ below ``min_rank_corr`` *and* the permutation test
    (:func:`failure_set_change_pvalue`) significant at ``alpha``, with at least
    ``min_failures`` failures in each arm. Fewer failures, or an undefined ρ, cannot be
    judged; anything else is ``same``.
    """
    n = min(arm_total, reference_total)
    if n < min_failures:
        return "cannot judge", (f"{arm_total} vs {reference_total} failures "
                                f"(needs {min_failures} in each arm)")
    if spearman is None or p_changed is None or not math.isfinite(spearman):
        return "cannot judge", "rank correlation undefined (one name, or a constant profile)"
    if spearman < min_rank_corr and p_changed < alpha:
        return "changed", (f"Spearman {spearman:.2f} < {min_rank_corr:g}, permutation "
                           f"p={p_changed:.2g} < {alpha:g}")
    if spearman < min_rank_corr:
        return "same", (f"Spearman {spearman:.2f} < {min_rank_corr:g} but within chance "
                        f"(permutation p={p_changed:.2g} >= {alpha:g})")
    return "same", f"Spearman {spearman:.2f} >= {min_rank_corr:g}"
