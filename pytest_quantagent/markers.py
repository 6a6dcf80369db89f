"""The plugin's markers, their registration lines and their validation.

- ``@pytest.mark.error_budget(K)``: assertions in the test judge the cell as if episodes
  had ended at the K-th failed tool call (a counterfactual over stored trajectories); K must
  be between 0 and the run's ``--error-budget``.
- ``@pytest.mark.domain("telecom", ...)``: run the test only on these domains.
- ``@pytest.mark.precision("int4", ...)``: run the test only on these candidate arms.

A known domain or arm that the run does not include narrows the test to nothing: it is
skipped with the reason, so one suite serves runs with different ``--quant``/``--domain``.

Markers take positional arguments only; any keyword is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

MARKER_LINES: tuple[str, ...] = (
    "error_budget(K): judge the quant cell at error budget K (counterfactual over stored "
    "episodes; 0 <= K <= --error-budget)",
    "domain(name, ...): run this quant test only on these domains",
    "precision(arm, ...): run this quant test only on these candidate arms",
)

MARKER_NAMES: tuple[str, ...] = ("error_budget", "domain", "precision")


class MarkerError(ValueError):
    """A marker used with bad arguments; the message names the test and the marker."""


@dataclass(frozen=True)
class MarkerArgs:
    """What a test's markers say (closest marker wins)."""

    error_budget: int | None = None
    domains: tuple[str, ...] | None = None
    precisions: tuple[str, ...] | None = None


class _Mark(Protocol):
    """What this module reads of a ``pytest.Mark``."""

    @property
    def name(self) -> str: ...
    @property
    def args(self) -> tuple[Any, ...]: ...
    @property
    def kwargs(self) -> Mapping[str, Any]: ...


def _names(test: str, mark: _Mark, what: str) -> tuple[str, ...]:
    if mark.kwargs:
        bad = ", ".join(sorted(mark.kwargs))
        raise MarkerError(
            f"{test}: @pytest.mark.{mark.name} takes {what} names as positional arguments only; "
            f"unknown keyword argument(s): {bad}"
        )
    if not mark.args:
        raise MarkerError(
            f"{test}: @pytest.mark.{mark.name} needs at least one {what} name, "
            f"e.g. @pytest.mark.{mark.name}({'telecom' if what == 'domain' else 'int4'!r})"
        )
    out: list[str] = []
    for a in mark.args:
        if not isinstance(a, str) or not a:
            raise MarkerError(
                f"{test}: @pytest.mark.{mark.name} arguments must be {what} names (strings); "
                f"got {a!r}"
            )
        out.append(a)
    return tuple(out)


def parse_markers(
    test: str,
    marks: Iterable[_Mark],
    *,
    run_budget: int,
    known_domains: Sequence[str] | None,
    known_arms: Sequence[str],
) -> MarkerArgs:
    """Validate the plugin's markers of one test and return what they ask for.

    ``marks`` is ``item.iter_markers()`` (closest first); the closest marker of each name wins.
    ``known_domains`` None skips the domain-name check (registry unavailable).

    Raises
    ------
    MarkerError
        For keyword arguments, a budget that is not an integer in ``0..run_budget``, an unknown
        domain or an unknown arm. A known domain or arm that this run does not include is no
        error: the grid simply has no cell for it (the test is skipped).
    """
    budget: int | None = None
    domains: tuple[str, ...] | None = None
    precisions: tuple[str, ...] | None = None
    seen: set[str] = set()
    for mark in marks:
        if mark.name not in MARKER_NAMES or mark.name in seen:
            continue
        seen.add(mark.name)
        if mark.name == "error_budget":
            budget = _budget(test, mark, run_budget)
        elif mark.name == "domain":
            domains = _names(test, mark, "domain")
            if known_domains is not None:
                for d in domains:
                    if d not in known_domains:
                        raise MarkerError(
                            f"{test}: @pytest.mark.domain: unknown domain {d!r}; known domains: "
                            + ", ".join(sorted(known_domains))
                        )
        else:
            precisions = _names(test, mark, "arm")
            for p in precisions:
                if p not in known_arms:
                    raise MarkerError(
                        f"{test}: @pytest.mark.precision: unknown arm {p!r}; known arms: "
                        f"{', '.join(sorted(known_arms))}"
                    )
    return MarkerArgs(budget, domains, precisions)


def _budget(test: str, mark: _Mark, run_budget: int) -> int:
    if mark.kwargs:
        raise MarkerError(
            f"{test}: @pytest.mark.error_budget takes one positional K; unknown keyword "
            f"argument(s): {', '.join(sorted(mark.kwargs))}"
        )
    if len(mark.args) != 1:
        raise MarkerError(
            f"{test}: @pytest.mark.error_budget takes exactly one K (an integer from 0 to "
            f"{run_budget}); got {len(mark.args)} arguments"
        )
    k = mark.args[0]
    if isinstance(k, bool) or not isinstance(k, int):
        raise MarkerError(
            f"{test}: @pytest.mark.error_budget K must be an integer from 0 to {run_budget}; "
            f"got {k!r}"
        )
    if k < 0 or k > run_budget:
        raise MarkerError(
            f"{test}: @pytest.mark.error_budget({k}) is above the run's error budget "
            f"{run_budget}; K must be from 0 to {run_budget} (raise --error-budget to "
            f"at least {k}, or lower K)"
            if k > run_budget
            else f"{test}: @pytest.mark.error_budget K must be from 0 to {run_budget}; got {k}"
        )
    return k
