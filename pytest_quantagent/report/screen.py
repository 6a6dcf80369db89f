"""The full-precision risk screen: is this model likely to suffer from 4-bit quantization?

The seed finding: quantization amplifies a failure channel only where the full-precision
model already has a propensity for it (a 4-bit model called non-existent tools 2× as often as
bf16 where bf16 did so on 19.5% of calls; models with near-zero full-precision rates showed
no amplification). So the screen runs the reference arm alone and, per channel, asks whether
the full-precision failure rate per tool call is demonstrably small.

Risk level per channel, from the cluster-robust 95% CI of the rate per tool call (episodes are
the clusters, :func:`pytest_quantagent.stats.ratio.rate_ci`):

- ``low``: the upper CI bound is below ``threshold`` (default 2% of calls): the propensity is
  demonstrably small, and a 4-bit arm is expected to leave the channel alone;
- ``high``: the lower CI bound is at or above ``threshold``: there is a propensity, and a 4-bit
  arm may amplify it (the paper's factor: ~2×);
- ``elevated``: neither can be shown with these episodes (run more episodes to decide).

The prediction for a 4-bit arm is a range, not a promise: the rate stays put for a ``low``
channel and may reach ``amplification × rate`` (default 2.0) for the others.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from pytest_quantagent.env.channels import ALL_CHANNELS
from pytest_quantagent.stats.intervals import wilson_interval
from pytest_quantagent.stats.ratio import rate_ci
from pytest_quantagent.store.records import EpisodeRecord

RiskLevel = Literal["low", "elevated", "high"]
_ORDER: dict[str, int] = {"low": 0, "elevated": 1, "high": 2}


@dataclass(frozen=True)
class ScreenConfig:
    """Thresholds of the screen."""

    threshold: float = 0.02
    """Failure rate per tool call below which a channel is low-risk (upper CI bound)."""
    amplification: float = 2.0
    """Factor applied to a non-low channel's rate to predict a 4-bit arm's worst case."""
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold!r}")
        if self.amplification < 1.0:
            raise ValueError(f"amplification must be >= 1, got {self.amplification!r}")
        if not 0.5 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0.5, 1), got {self.confidence!r}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChannelRisk(_Model):
    channel: str
    count: int
    rate: float
    """Failures of this channel per tool call."""
    ci: tuple[float, float]
    episodes_with: int
    """Episodes with at least one failure of this channel."""
    level: RiskLevel
    predicted_int4_rate: tuple[float, float]
    """Range expected for a 4-bit arm: (rate, rate × amplification) unless low."""


class ScreenReport(_Model):
    domain: str
    arm: str
    model: str
    episodes: int
    tool_calls: int
    success: float
    success_ci: tuple[float, float]
    threshold: float
    amplification: float
    channels: dict[str, ChannelRisk]
    level: RiskLevel
    """The worst channel's level."""
    advice: list[str]

    def channels_at_or_above(self, level: RiskLevel) -> list[ChannelRisk]:
        return [c for c in self.channels.values() if _ORDER[c.level] >= _ORDER[level]]


def _level(lo: float, hi: float, threshold: float) -> RiskLevel:
    if hi < threshold:
        return "low"
    if lo >= threshold:
        return "high"
    return "elevated"


def screen(records: Iterable[EpisodeRecord], config: ScreenConfig | None = None) -> ScreenReport:
    """Screen one arm's episodes (normally the full-precision reference)."""
    cfg = config or ScreenConfig()
    recs = [r for r in records if r.scored]
    if not recs:
        raise ValueError("screen needs at least one scored episode; got none")
    domains = sorted({r.domain for r in recs})
    arms = sorted({r.arm for r in recs})
    if len(domains) != 1 or len(arms) != 1:
        raise ValueError(
            f"screen one domain and one arm at a time; got domains {domains} and arms {arms}"
        )
    calls = np.array([len(r.calls) for r in recs], dtype=float)
    per_channel = {c: np.zeros(len(recs)) for c in ALL_CHANNELS}
    for i, r in enumerate(recs):
        for call in r.calls:
            if call.channel is not None:
                per_channel[call.channel][i] += 1
    total_calls = int(calls.sum())
    channels: dict[str, ChannelRisk] = {}
    for ch in ALL_CHANNELS:
        counts = per_channel[ch]
        n = int(counts.sum())
        rate = n / total_calls if total_calls else 0.0
        ci = rate_ci(counts, calls, confidence=cfg.confidence)
        level = _level(ci.low, ci.high, cfg.threshold)
        hi_pred = rate if level == "low" else min(1.0, rate * cfg.amplification)
        channels[ch.value] = ChannelRisk(
            channel=ch.value,
            count=n,
            rate=rate,
            ci=(ci.low, ci.high),
            episodes_with=int((counts > 0).sum()),
            level=level,
            predicted_int4_rate=(rate, hi_pred),
        )
    succ = sum(r.success for r in recs)
    sci = wilson_interval(succ, len(recs), cfg.confidence).ci
    worst: RiskLevel = max((c.level for c in channels.values()), key=lambda lv: _ORDER[lv])
    advice = _advice(channels, cfg, len(recs))
    return ScreenReport(
        domain=domains[0],
        arm=arms[0],
        model=recs[0].model,
        episodes=len(recs),
        tool_calls=total_calls,
        success=succ / len(recs),
        success_ci=(sci.low, sci.high),
        threshold=cfg.threshold,
        amplification=cfg.amplification,
        channels=channels,
        level=worst,
        advice=advice,
    )


def _advice(channels: dict[str, ChannelRisk], cfg: ScreenConfig, episodes: int) -> list[str]:
    out = []
    for c in channels.values():
        if c.level == "high":
            out.append(
                f"{c.channel}: {c.rate:.1%} of calls at full precision (CI {c.ci[0]:.1%}–"
                f"{c.ci[1]:.1%}) — a 4-bit arm may reach {c.predicted_int4_rate[1]:.1%}; gate "
                f"the quantized checkpoint on this channel (assert_no_channel_amplification) "
                f"and consider --quant-repair=reflexive"
            )
        elif c.level == "elevated":
            out.append(
                f"{c.channel}: {c.rate:.1%} of calls, CI up to {c.ci[1]:.1%} straddles the "
                f"{cfg.threshold:.0%} threshold with {episodes} episodes — run more episodes "
                f"(more trials) to decide"
            )
    if not out:
        out.append(
            f"every channel is below {cfg.threshold:.0%} of calls at full precision: "
            "low quantization risk"
        )
    return out
