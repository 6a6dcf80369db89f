"""Per-channel failure counts and rates per tool call / per episode."""

from __future__ import annotations

from collections.abc import Iterable

from pytest_quantagent.metrics.episode import is_agent_channel_failure
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import ALL_CHANNELS, Channel


def channel_counts(records: Iterable[EpisodeRecord]) -> tuple[dict[Channel, int], int, int]:
    """Failed calls per channel (every channel present, 0 when absent), total tool calls
    and episodes, over scored records."""
    counts = {c: 0 for c in ALL_CHANNELS}
    calls = episodes = 0
    for r in records:
        if not r.scored:
            continue
        episodes += 1
        calls += len(r.calls)
        for c in r.calls:
            # A user's own mistakes are the simulator's, not the agent's (metrics.episode).
            if c.channel is not None and is_agent_channel_failure(c.requestor, c.channel.value):
                counts[c.channel] += 1
    return counts, calls, episodes


def channel_rates(records: Iterable[EpisodeRecord]) -> dict[Channel, float]:
    """Failures per tool call, per channel (``nan`` when there is no tool call)."""
    counts, calls, _ = channel_counts(records)
    return {c: (n / calls if calls else float("nan")) for c, n in counts.items()}
