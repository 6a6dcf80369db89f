"""Failure-set invariance per named channel (unknown/cross-role tool names, wrong entities)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from pytest_quantagent.env.channels import NAMED_CHANNELS, Channel
from pytest_quantagent.metrics.episode import failure_names
from pytest_quantagent.stats.rank import failure_set_agreement
from pytest_quantagent.stats.results import RankCorrelationResult
from pytest_quantagent.store.records import EpisodeRecord


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
