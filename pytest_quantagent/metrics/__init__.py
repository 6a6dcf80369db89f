"""Per-episode and per-arm quantities over :class:`~pytest_quantagent.store.records.EpisodeRecord`
(pure; never imports pytest)."""

from __future__ import annotations

from pytest_quantagent.metrics.budget import budget_curve, success_at_budgets
from pytest_quantagent.metrics.channels import channel_counts, channel_rates
from pytest_quantagent.metrics.episode import (
    ArmAccumulator,
    ArmData,
    EpisodeMetrics,
    episode_metrics,
    summarize_arm,
)
from pytest_quantagent.metrics.failure_sets import failure_profile, failure_set_invariance
from pytest_quantagent.metrics.margins import flip_rates, margin_histogram
from pytest_quantagent.metrics.passk import pass_hat_k, pass_k_curve
from pytest_quantagent.metrics.recovery import RecoveryCount, recovery_events

__all__ = [
    "ArmAccumulator",
    "ArmData",
    "EpisodeMetrics",
    "RecoveryCount",
    "budget_curve",
    "channel_counts",
    "channel_rates",
    "episode_metrics",
    "failure_profile",
    "failure_set_invariance",
    "flip_rates",
    "margin_histogram",
    "pass_hat_k",
    "pass_k_curve",
    "recovery_events",
    "success_at_budgets",
    "summarize_arm",
]
