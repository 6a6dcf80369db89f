"""What a test gets from the ``quant_cell`` fixture (:class:`QuantCell`), and the cell's key
and episodes the hooks pass around (:class:`CellKey`, :class:`CellEpisodes`).

Below the session and the assertions: the assertions read a :class:`QuantCell` without
importing the session that produces its episodes (a :class:`CellSource`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pytest_quantagent.store.records import EpisodeRecord


class CellSource(Protocol):
    """Where a :class:`QuantCell` gets its episodes and its analysis (the plugin's
    ``QuantAgentSession``)."""

    def episodes(self, key: CellKey) -> CellEpisodes: ...

    def cell_analysis(self, key: CellKey) -> dict[str, Any]: ...


@dataclass(frozen=True, order=True)
class CellKey:
    """One (domain, candidate arm) cell, compared with the reference arm."""

    domain: str
    arm: str
    reference: str

    @property
    def id(self) -> str:
        """The test id part, e.g. ``telecom-int4``."""
        return f"{self.domain}-{self.arm}"


@dataclass(frozen=True)
class CellEpisodes:
    """Both arms' episode records of one cell (same tasks, trials and seeds)."""

    arm: list[EpisodeRecord]
    reference: list[EpisodeRecord]
    sequential: dict[str, Any] | None = None
    """With ``--quant-until-decided``: the cell's run-until-decided block (its records are
    those of its last look, judged at that look's ``alphas[looks_taken - 1]``)."""


@dataclass
class QuantCell:
    """What a test gets from the ``quant_cell`` fixture.

    Episodes are produced on first access and shared by every test on the same cell.
    ``budget`` is the error budget the assertions judge at: the run's ``--error-budget``, or
    the test's ``@pytest.mark.error_budget(K)``.
    """

    key: CellKey
    budget: int
    run_budget: int
    trials: int
    _session: CellSource = field(repr=False)

    @property
    def domain(self) -> str:
        return self.key.domain

    @property
    def arm(self) -> str:
        return self.key.arm

    @property
    def reference(self) -> str:
        return self.key.reference

    @property
    def id(self) -> str:
        return self.key.id

    @property
    def episodes(self) -> list[EpisodeRecord]:
        """The candidate arm's episode records."""
        return self._session.episodes(self.key).arm

    @property
    def reference_episodes(self) -> list[EpisodeRecord]:
        """The reference arm's episode records."""
        return self._session.episodes(self.key).reference

    def analysis(self) -> dict[str, Any]:
        """This cell's entry of the report JSON (DESIGN.md schema), analyzed on its own."""
        return self._session.cell_analysis(self.key)

    def at_budget(self, k: int) -> QuantCell:
        """The same cell judged at error budget ``k`` (0 <= k <= the run's budget)."""
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= self.run_budget:
            raise ValueError(
                f"budget k={k!r} is not allowed; k must be an integer from 0 to the run's "
                f"error budget {self.run_budget}"
            )
        return QuantCell(self.key, k, self.run_budget, self.trials, self._session)
