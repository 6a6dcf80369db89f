"""Error-budget counterfactuals, recomputed from stored outcomes (never by re-running).

Success at budget ``K`` means the episode succeeded *and* had fewer than ``K`` failed tool
calls: with budget ``K`` τ²-bench would have ended it at its K-th failure.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def success_at_budgets(
    success: npt.ArrayLike, n_errors: npt.ArrayLike, max_k: int
) -> np.ndarray:
    """Boolean matrix ``[episode, K]`` for K = 0 .. max_k: success and n_errors < K."""
    if max_k < 0:
        raise ValueError(f"max_k={max_k} is not allowed; max_k must be >= 0")
    s = np.asarray(success, dtype=bool).ravel()
    e = np.asarray(n_errors).ravel()
    if s.shape != e.shape:
        raise ValueError(
            f"success and n_errors must have equal length; got {s.size} and {e.size}"
        )
    ks = np.arange(max_k + 1)
    out: np.ndarray = s[:, None] & (e[:, None] < ks[None, :])
    return out


def budget_curve(success: npt.ArrayLike, n_errors: npt.ArrayLike, max_k: int) -> np.ndarray:
    """Success rate at every budget K = 0 .. max_k (``nan`` when there are no episodes)."""
    m = success_at_budgets(success, n_errors, max_k)
    if m.shape[0] == 0:
        return np.full(max_k + 1, np.nan)
    out: np.ndarray = m.mean(axis=0)
    return out
