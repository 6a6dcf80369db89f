"""Alpha spending over planned looks: the error budget of run-until-decided.

A run that looks at its data after every wave and stops when a claim is decided must not
test each look at the full α: with five looks at α = 0.05 a null cell is called damaged far
more often than 5% of the time (Armitage, McPherson & Rowe, 1969). Group-sequential designs
spend α across the looks instead. We use:

- **a spending function** of the information fraction ``t`` (planned episodes at the look
  over planned episodes at the last look), the power family of Kim & DeMets (1987),
  ``α(t) = α · t^ρ``, written down before any episode runs (Lan & DeMets, 1983). ``ρ = 1``
  spends like Pocock's boundaries, ``ρ = 3`` like O'Brien–Fleming's; the default ``ρ = 2``
  keeps most of α for the late looks, where LOSSLESS (which needs a large sample) is
  decided, while a gross effect (a DEGRADED int2) still stops at an early look.
- **Bonferroni over looks**: look ``k`` tests every claim at the increment
  ``α_k = α(t_k) − α(t_{k−1})``. By the union bound the probability of a false claim at any
  look is at most ``Σ α_k = α`` whatever the correlation between looks. The exact
  group-sequential boundaries (Jennison & Turnbull, 2000, ch. 7) would spend the same α
  less conservatively, but they need the looks' statistics to be jointly normal with
  known correlation, which the verdict's small-count channel score tests, Tango intervals
  and intersection-union tests do not give. Stopping before the last planned look (the cell
  decided, the pool exhausted, the cap reached) only forfeits the α not yet spent.

Both directions of every claim use ``α_k``: a damage test is rejected at ``α_k`` (Holm
within the cell) and LOSSLESS needs every equivalence bound at ``α_k``, so false damage and
false LOSSLESS each stay at or below α over the whole run.

References
----------
Lan, K. K. G. & DeMets, D. L. (1983). Discrete sequential boundaries for clinical trials.
*Biometrika* 70(3), 659–663.
Kim, K. & DeMets, D. L. (1987). Design and analysis of group sequential tests based on the
type I error spending rate function. *Biometrika* 74(1), 149–154.
Jennison, C. & Turnbull, B. W. (2000). *Group Sequential Methods with Applications to
Clinical Trials*. Chapman & Hall/CRC.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytest_quantagent.stats._validate import check_probability

DEFAULT_RHO = 2.0
"""Exponent of the power-family spending function (Kim & DeMets, 1987)."""


@dataclass(frozen=True)
class SpendingPlan:
    """α spent over planned looks, fixed before the first episode.

    ``looks`` are the planned episodes per arm at each look (strictly increasing);
    ``alpha`` the total level of each direction; ``rho`` the spending exponent.
    """

    looks: tuple[int, ...]
    alpha: float = 0.05
    rho: float = DEFAULT_RHO

    def __post_init__(self) -> None:
        check_probability("alpha", self.alpha)
        if not (isinstance(self.rho, (int, float)) and math.isfinite(self.rho) and self.rho > 0):
            raise ValueError(f"rho={self.rho!r} is not allowed; rho must be a finite number > 0")
        if not self.looks:
            raise ValueError("looks is empty; plan at least one look")
        if any(n < 1 for n in self.looks) or any(b <= a for a, b in zip(self.looks[:-1], self.looks[1:], strict=True)):
            raise ValueError(f"looks={list(self.looks)} is not allowed; give strictly increasing "
                             "positive episode counts")

    def spent(self, k: int) -> float:
        """α spent up to and including look ``k`` (1-based; ``k = 0``: nothing)."""
        if k <= 0:
            return 0.0
        k = min(k, len(self.looks))
        if k == len(self.looks):
            return self.alpha
        t = self.looks[k - 1] / self.looks[-1]
        return float(self.alpha * t ** self.rho)

    def alpha_at(self, k: int) -> float:
        """The level look ``k`` (1-based) tests at: ``α(t_k) − α(t_{k−1})``."""
        if not 1 <= k <= len(self.looks):
            raise ValueError(f"look {k} is not planned; looks are 1 to {len(self.looks)}")
        return self.spent(k) - self.spent(k - 1)

    @property
    def alphas(self) -> tuple[float, ...]:
        return tuple(self.alpha_at(k) for k in range(1, len(self.looks) + 1))

    def describe(self) -> str:
        return (f"alpha {self.alpha:g} spent over {len(self.looks)} planned looks by "
                f"alpha*t^{self.rho:g} (Kim-DeMets power family), each look at its increment "
                "(Bonferroni over looks)")


def geometric_looks(first: int, cap: int, factor: float = 2.0) -> tuple[int, ...]:
    """Planned episode counts ``first, first·factor, …`` up to ``cap`` (the last look is
    ``cap`` itself unless the previous one is within 10% of it)."""
    if first < 1 or cap < 1:
        raise ValueError(f"first={first}, cap={cap}: both must be >= 1")
    if not (math.isfinite(factor) and factor > 1):
        raise ValueError(f"factor={factor!r} is not allowed; factor must be > 1")
    if first >= cap:
        return (cap,)
    out = [first]
    while out[-1] * factor < cap:
        nxt = max(out[-1] + 1, round(out[-1] * factor))
        out.append(nxt)
    if cap - out[-1] > 0.1 * cap:
        out.append(cap)
    else:
        out[-1] = cap
    return tuple(out)


__all__ = ["DEFAULT_RHO", "SpendingPlan", "geometric_looks"]
