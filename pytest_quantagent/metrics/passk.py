"""pass^k: the chance that all k trials of a task succeed (τ²-bench's reliability metric)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence


def pass_hat_k(num_trials: int, success_count: int, k: int) -> float:
    """Unbiased estimate of P(k i.i.d. trials of one task all succeed): C(c, k) / C(n, k).

    References
    ----------
    Yao et al. (2024), τ-bench, arXiv:2406.12045, §4 (pass^k); τ²-bench
    ``metrics/agent_metrics.py``.
    """
    if k < 1:
        raise ValueError(f"k={k} is not allowed; k must be >= 1")
    if not 0 <= success_count <= num_trials:
        raise ValueError(
            f"success_count={success_count} is not allowed; it must be in 0..{num_trials}"
        )
    if num_trials < k:
        raise ValueError(f"num_trials={num_trials} is less than k={k}; need num_trials >= k")
    return math.comb(success_count, k) / math.comb(num_trials, k)


def pass_k_curve(task_ids: Sequence[str], success: Sequence[bool]) -> dict[int, float]:
    """pass^k for k = 1 .. (most trials of any task), averaged over tasks with >= k trials."""
    if len(task_ids) != len(success):
        raise ValueError(
            f"task_ids and success must have equal length; got {len(task_ids)} and {len(success)}"
        )
    per_task: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for t, s in zip(task_ids, success, strict=False):
        entry = per_task[t]
        entry[0] += 1
        entry[1] += bool(s)
    if not per_task:
        return {}
    out: dict[int, float] = {}
    for k in range(1, max(n for n, _ in per_task.values()) + 1):
        vals = [pass_hat_k(n, c, k) for n, c in per_task.values() if n >= k]
        out[k] = sum(vals) / len(vals)
    return out
