"""Logit margins (top-1 − top-2) at tool-name decisions, and decision flips between arms."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: Margin bin edges in logits; the last bin is open-ended.
DEFAULT_MARGIN_BINS: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)


def margin_histogram(
    margins: npt.ArrayLike, bins: Sequence[float] = DEFAULT_MARGIN_BINS
) -> dict[str, object]:
    """Counts per margin bin (``[b_i, b_{i+1})``, last bin open) with count and quantiles."""
    m = np.asarray(margins, dtype=float).ravel()
    edges = np.asarray([*list(bins), np.inf])
    counts = np.histogram(np.clip(m, edges[0], None), bins=edges)[0] if m.size else np.zeros(len(bins), int)
    q = np.quantile(m, [0.1, 0.5, 0.9]).tolist() if m.size else [None, None, None]
    return {"count": int(m.size), "hist": [int(c) for c in counts],
            "p10": q[0], "median": q[1], "p90": q[2]}


@dataclass(frozen=True)
class FlipRates:
    """Share of paired decisions whose top-1 differs between arms, per reference-margin bin."""

    bins: tuple[float, ...]
    n: tuple[int, ...]
    flips: tuple[int, ...]

    @property
    def rates(self) -> list[float | None]:
        return [f / n if n else None for f, n in zip(self.flips, self.n, strict=False)]


def flip_rates(
    pairs: Iterable[tuple[Sequence[str], Sequence[float], Sequence[str]]],
    bins: Sequence[float] = DEFAULT_MARGIN_BINS,
) -> FlipRates:
    """Flip rate by the reference's margin bin.

    ``pairs`` yields, per paired episode, the reference's top-1 choices and margins and the
    candidate's top-1 choices at the same decision positions (position ``i`` of each list:
    the i-th tool-name decision; only the common prefix is compared, since after a flip
    the two trajectories diverge and later positions are no longer the same decision).
    """
    edges = np.asarray([*list(bins), np.inf])
    n = np.zeros(len(bins), dtype=int)
    f = np.zeros(len(bins), dtype=int)
    for ref_top, ref_margin, arm_top in pairs:
        for rt, rm, at in zip(ref_top, ref_margin, arm_top, strict=False):
            b = int(np.searchsorted(edges, max(rm, edges[0]), side="right") - 1)
            b = min(b, len(bins) - 1)
            n[b] += 1
            if rt != at:
                f[b] += 1
                break  # positions after the first flip are different decisions
    return FlipRates(tuple(float(x) for x in bins), tuple(int(x) for x in n), tuple(int(x) for x in f))
