"""The full-precision risk screen: is this model likely to suffer from 4-bit quantization?

The seed finding: quantization amplifies a failure channel only where the full-precision
model already has a propensity for it (a 4-bit model called non-existent tools 2× as often as
bf16 where bf16 did so on 19.5% of calls; models with near-zero full-precision rates showed
no amplification). So the screen runs the reference arm alone and, per channel, asks whether
the full-precision failure rate per tool call is demonstrably small.

Risk level per channel, from the cluster-robust 95% CI of the rate per tool call
(:func:`pytest_quantagent.stats.ratio.rate_ci`), widened to Wilson's interval over calls
where that is wider (identical tasks make the cluster-robust interval collapse). Tasks are
the clusters: trials of one task
share the scenario, so their failures are not independent and counting them as separate
clusters would make the interval too narrow.

- ``low``: the upper CI bound is below ``threshold`` (default 2% of calls): the propensity is
  demonstrably small, and a 4-bit arm is expected to leave the channel alone;
- ``high``: the lower CI bound is at or above ``threshold``: there is a propensity, and a 4-bit
  arm may amplify it (the paper's factor: ~2×);
- ``elevated``: neither can be shown with these episodes (run more episodes to decide).

The prediction for a 4-bit arm is a range, not a promise: the rate stays put for a ``low``
channel and may reach ``amplification × rate`` (default 2.0) for the others.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from pytest_quantagent.stats.intervals import wilson_interval
from pytest_quantagent.stats.ratio import rate_ci
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import ALL_CHANNELS

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

RiskLevel = Literal["low", "elevated", "high"]
RISK_LEVELS: tuple[RiskLevel, ...] = ("low", "elevated", "high")
_ORDER: dict[str, int] = {lv: i for i, lv in enumerate(RISK_LEVELS)}


@dataclass(frozen=True)
class ScreenConfig:
    """Thresholds of the screen."""

    threshold: float = 0.02
    """Failure rate per tool call below which a channel is low-risk (upper CI bound)."""
    amplification: float = 2.0
    """Factor applied to a non-low channel's rate to predict a 4-bit arm's worst case."""
    confidence: float = 0.95

    def __post_init__(self) -> None:
        check_threshold(self.threshold)
        if not _is_number(self.amplification) or not 1.0 <= self.amplification < math.inf:
            raise ValueError(
                f"amplification must be a finite number >= 1, got {self.amplification!r}"
            )
        if not _is_number(self.confidence) or not 0.5 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0.5, 1), got {self.confidence!r}")


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_threshold(threshold: object) -> float:
    """``threshold`` as a float, or ``ValueError`` unless it is a number in (0, 1)."""
    if not _is_number(threshold) or not 0.0 < threshold < 1.0:  # type: ignore[operator]
        raise ValueError(
            f"threshold must be a failure rate per tool call in (0, 1), got {threshold!r}"
        )
    return float(threshold)  # type: ignore[arg-type]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChannelRisk(_Model):
    """One channel of the screen."""

    channel: str
    count: int
    """Failed calls of this channel."""
    rate: float
    """Failures of this channel per tool call."""
    ci: tuple[float, float]
    """CI of ``rate``: the wider of the cluster-robust CI (tasks are the clusters) and
    Wilson's over calls."""
    episodes_with: int
    """Episodes with at least one failure of this channel."""
    level: RiskLevel
    predicted_int4_rate: tuple[float, float]
    """Range expected for a 4-bit arm: (rate, rate × amplification) unless low."""


class ScreenReport(_Model):
    """The screen of one arm (normally the full-precision reference) in one domain."""

    domain: str
    arm: str
    model: str
    episodes: int
    """Scored episodes screened."""
    tasks: int
    """Distinct tasks (the clusters of the CIs)."""
    tool_calls: int
    infrastructure_errors: int = 0
    """Episodes left out because the model could not be reached (not scored)."""
    success: float
    success_ci: tuple[float, float]
    """Wilson CI over episodes."""
    threshold: float
    amplification: float
    confidence: float = 0.95
    channels: dict[str, ChannelRisk]
    level: RiskLevel
    """The worst channel's level."""
    advice: list[str]

    def channels_at_or_above(self, level: RiskLevel) -> list[ChannelRisk]:
        """Channels whose level is ``level`` or worse."""
        if level not in _ORDER:
            raise ValueError(f"level must be one of {', '.join(RISK_LEVELS)}, got {level!r}")
        return [c for c in self.channels.values() if _ORDER[c.level] >= _ORDER[level]]

    def at_threshold(self, threshold: float) -> ScreenReport:
        """The same screen judged at another ``threshold`` (levels, predictions and advice
        recomputed from the stored CIs; nothing is re-run)."""
        cfg = ScreenConfig(threshold=threshold, amplification=self.amplification,
                           confidence=self.confidence)
        channels = {
            name: _risk(c.channel, c.count, c.rate, c.ci, c.episodes_with, cfg)
            for name, c in self.channels.items()
        }
        return self.model_copy(update={
            "threshold": cfg.threshold,
            "channels": channels,
            "level": _worst(channels),
            "advice": _advice(channels, cfg, self.episodes),
        })


def _level(lo: float, hi: float, threshold: float) -> RiskLevel:
    if hi < threshold:
        return "low"
    if lo >= threshold:
        return "high"
    return "elevated"


def _risk(channel: str, count: int, rate: float, ci: tuple[float, float], episodes_with: int,
          cfg: ScreenConfig) -> ChannelRisk:
    level = _level(ci[0], ci[1], cfg.threshold)
    hi_pred = rate if level == "low" else min(1.0, rate * cfg.amplification)
    return ChannelRisk(channel=channel, count=count, rate=rate, ci=ci,
                       episodes_with=episodes_with, level=level, predicted_int4_rate=(rate, hi_pred))


def _worst(channels: dict[str, ChannelRisk]) -> RiskLevel:
    return max((c.level for c in channels.values()), key=lambda lv: _ORDER[lv])


def _rate_interval(counts: np.ndarray, calls: np.ndarray, confidence: float) -> tuple[float, float]:
    """The wider of the cluster-robust CI and Wilson's CI over calls.

    A gate must not call a rate demonstrably small on little evidence: when every task has
    the same failure share (deterministic agents, few tasks) the cluster-robust variance is
    zero and its interval collapses to a point, while Wilson's still reflects the number of
    calls. With real between-task variation the cluster-robust interval is the wider one.
    """
    cr = rate_ci(counts, calls, confidence=confidence)
    w = wilson_interval(int(counts.sum()), int(calls.sum()), confidence).ci if calls.sum() else cr
    return (min(cr.low, w.low), max(cr.high, w.high))


def screen(records: Iterable[EpisodeRecord], config: ScreenConfig | None = None) -> ScreenReport:
    """Screen one arm's episodes (normally the full-precision reference).

    Episodes that ended in an infrastructure error are left out (and counted). Raises
    ``ValueError`` when no scored episode remains or the records mix domains or arms.
    """
    cfg = config or ScreenConfig()
    all_recs = list(records)
    recs = [r for r in all_recs if r.scored]
    if not recs:
        raise ValueError(
            f"screen needs at least one scored episode; got none of {len(all_recs)} "
            "(every episode was an infrastructure error)" if all_recs else
            "screen needs at least one scored episode; got none"
        )
    domains = sorted({r.domain for r in recs})
    arms = sorted({r.arm for r in recs})
    if len(domains) != 1 or len(arms) != 1:
        raise ValueError(
            f"screen one domain and one arm at a time; got domains {domains} and arms {arms}"
        )
    tasks = sorted({r.task_id for r in recs})
    cluster = {t: i for i, t in enumerate(tasks)}
    calls = np.zeros(len(tasks))
    per_task = {c: np.zeros(len(tasks)) for c in ALL_CHANNELS}
    episodes_with = dict.fromkeys(ALL_CHANNELS, 0)
    for r in recs:
        g = cluster[r.task_id]
        calls[g] += len(r.calls)
        seen = set()
        for call in r.calls:
            if call.channel is not None:
                per_task[call.channel][g] += 1
                seen.add(call.channel)
        for ch in seen:
            episodes_with[ch] += 1
    total_calls = int(calls.sum())
    channels: dict[str, ChannelRisk] = {}
    for ch in ALL_CHANNELS:
        counts = per_task[ch]
        n = int(counts.sum())
        rate = n / total_calls if total_calls else 0.0
        channels[ch.value] = _risk(ch.value, n, rate, _rate_interval(counts, calls, cfg.confidence),
                                   episodes_with[ch], cfg)
    succ = sum(r.success for r in recs)
    sci = wilson_interval(succ, len(recs), cfg.confidence).ci
    return ScreenReport(
        domain=domains[0],
        arm=arms[0],
        model=recs[0].model,
        episodes=len(recs),
        tasks=len(tasks),
        tool_calls=total_calls,
        infrastructure_errors=len(all_recs) - len(recs),
        success=succ / len(recs),
        success_ci=(sci.low, sci.high),
        threshold=cfg.threshold,
        amplification=cfg.amplification,
        confidence=cfg.confidence,
        channels=channels,
        level=_worst(channels),
        advice=_advice(channels, cfg, len(recs)),
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
        elif c.level == "elevated" and c.count:
            out.append(
                f"{c.channel}: {c.rate:.1%} of calls, CI up to {c.ci[1]:.1%} straddles the "
                f"{cfg.threshold:.0%} threshold with {episodes} episodes — run more episodes "
                f"(more trials) to decide"
            )
    unseen = [c for c in channels.values() if c.level == "elevated" and not c.count]
    if unseen:
        # Zero failures all share one interval (Wilson over the same calls): one line for all.
        out.append(
            f"{', '.join(c.channel for c in unseen)}: no failure seen, but these episodes "
            f"cannot show a rate under {cfg.threshold:.0%} (CI up to {unseen[0].ci[1]:.1%}) — "
            "run more episodes (more trials) to decide"
        )
    if not out:
        out.append(
            f"every channel is below {cfg.threshold:.0%} of calls at full precision: "
            "low quantization risk"
        )
    return out


_LEVEL_STYLE: dict[str, str] = {"low": "green", "elevated": "yellow", "high": "bold red"}


def screen_table(report: ScreenReport) -> Table:
    """The rich table of a screen: one row per channel."""
    from rich.table import Table

    table = Table(
        title=f"quantagent screen: {report.model} {report.arm} on {report.domain}",
        caption=(f"eps: episodes with a failure; low: CI under {report.threshold:.1%} of calls; "
                 f"high: CI at or above it; "
                 f"4-bit: rate … ×{report.amplification:g}"),
    )
    table.add_column("channel", no_wrap=True)
    table.add_column("fails", justify="right", no_wrap=True)
    table.add_column(f"rate/call [{report.confidence:.0%} CI]", justify="right", no_wrap=True)
    table.add_column("eps", justify="right")
    table.add_column("risk", no_wrap=True)
    table.add_column("4-bit", justify="right", no_wrap=True)
    for c in report.channels.values():
        lo, hi = c.predicted_int4_rate
        table.add_row(
            c.channel, str(c.count), f"{c.rate:.1%} [{100 * c.ci[0]:.1f}, {100 * c.ci[1]:.1f}]",
            str(c.episodes_with),
            f"[{_LEVEL_STYLE[c.level]}]{c.level}[/]",
            f"{lo:.1%}" if lo == hi else f"{lo:.1%}–{hi:.1%}",
        )
    return table


def render_screen(report: ScreenReport, console: Console | None = None) -> None:
    """Print the screen's table, the success rate and the advice lines."""
    from rich.console import Console

    con = console or Console()
    con.print(screen_table(report))
    lo, hi = report.success_ci
    extra = (f"; {report.infrastructure_errors} episode(s) left out (infrastructure errors)"
             if report.infrastructure_errors else "")
    con.print(f"{report.episodes} episodes, {report.tasks} tasks, {report.tool_calls} tool calls; "
              f"success {report.success:.1%} ({report.confidence:.0%} CI {lo:.1%} – {hi:.1%}){extra}",
              highlight=False, soft_wrap=True)
    style = _LEVEL_STYLE[report.level]
    con.print(f"overall risk: [{style}]{report.level}[/]", highlight=False)
    for line in report.advice:
        con.print(f"  • {line}", highlight=False, markup=False, soft_wrap=True)
