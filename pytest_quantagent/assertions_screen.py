"""Assertion over the full-precision risk screen (see :mod:`pytest_quantagent.report.screen`).

Example::

    from pytest_quantagent.assertions_screen import assert_low_quantization_risk

    def test_safe_to_quantize(quant_screen):
        assert_low_quantization_risk(quant_screen, channels="unknown_tool", threshold=0.05)
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_quantagent.errors import UnknownNameError
from pytest_quantagent.report.screen import ScreenReport, check_threshold
from pytest_quantagent.vocab.channels import ALL_CHANNELS

__all__ = ["assert_low_quantization_risk"]

_CHANNEL_NAMES: tuple[str, ...] = tuple(c.value for c in ALL_CHANNELS)


def _channel_list(channels: str | Iterable[str] | None) -> list[str]:
    if channels is None:
        return list(_CHANNEL_NAMES)
    names = [channels] if isinstance(channels, str) else list(channels)
    if not names:
        raise ValueError(
            "channels=[] checks nothing; give channel names or None for every channel "
            f"({', '.join(_CHANNEL_NAMES)})"
        )
    for n in names:
        if n not in _CHANNEL_NAMES:
            raise UnknownNameError("channel", n, _CHANNEL_NAMES)
    return names


def assert_low_quantization_risk(
    screen: ScreenReport,
    channels: str | Iterable[str] | None = None,
    threshold: float | None = None,
) -> ScreenReport:
    """Assert that the full-precision arm is demonstrably unlikely to suffer from quantization
    on ``channels`` (one name, several, or None for every channel).

    A channel passes when its level is ``low``: the upper bound of its cluster-robust CI of
    failures per tool call is under ``threshold`` (None: the screen's own threshold). A
    ``high`` channel (a propensity a 4-bit arm may amplify) and an ``elevated`` one (too few
    episodes to tell) both fail, with the rates, CIs, levels and the screen's advice.
    Returns the screen judged at ``threshold`` when it passes.
    """
    __tracebackhide__ = True
    if not isinstance(screen, ScreenReport):
        raise TypeError(
            f"screen must be a ScreenReport (the quant_screen fixture or report.screen.screen()), "
            f"got {type(screen).__name__}"
        )
    names = _channel_list(channels)
    judged = screen if threshold is None else screen.at_threshold(check_threshold(threshold))
    bad = [judged.channels[n] for n in names if judged.channels[n].level != "low"]
    if not bad:
        return judged
    lines = []
    for c in bad:
        what = (f"a 4-bit arm may reach {c.predicted_int4_rate[1]:.1%}" if c.level == "high"
                else "too few episodes to show it is small")
        lines.append(
            f"  {c.channel}: {c.count} of {judged.tool_calls} calls = {c.rate:.1%} "
            f"({judged.confidence:.0%} CI {c.ci[0]:.1%}–{c.ci[1]:.1%}), level {c.level}: {what}"
        )
    # Advice lines start with the channel name(s) they are about: "a, b: ...".
    bad_names = {c.channel for c in bad}
    advice = [a for a in judged.advice if bad_names & set(a.split(":", 1)[0].split(", "))]
    raise AssertionError(
        f"{judged.domain} {judged.arm} ({judged.model}): {len(bad)} channel(s) not low-risk at "
        f"threshold {judged.threshold:.1%} of calls ({judged.episodes} episodes, {judged.tasks} "
        "tasks):\n" + "\n".join(lines) + "\nadvice:\n" + "\n".join(f"  - {a}" for a in advice)
    )
