"""The release gate over a report's cells: GO, NO-GO or INCONCLUSIVE, and its exit code.

A release gate answers one of three things, like a launch review: **GO** (every cell
``LOSSLESS``: shown equivalent on the score, no channel amplified beyond the threshold, no
gap widened beyond the margin), **NO-GO** (some cell ``MASKED_DAMAGE`` or ``DEGRADED``:
damage shown) and **INCONCLUSIVE** (no damage shown, but some cell not shown lossless
either: the run cannot say yes or no). ``quantagent run`` and ``quantagent analyze`` exit
with the gate's code; pytest's ``--quant-require`` fails a run whose cells do not meet the
requirement, instead of letting "cannot judge" pass as a skip.

Exit codes follow pytest's where they overlap (0 passed, 1 failed, 4 usage error):

======  ==================  =====================================================
code    outcome             when
======  ==================  =====================================================
0       GO                  every cell LOSSLESS (or no candidate cell at all)
1       NO-GO               any cell MASKED_DAMAGE or DEGRADED
2       INCONCLUSIVE        no damage, some cell INCONCLUSIVE
4       usage error         bad input, nothing judged (:data:`EXIT_USAGE`)
======  ==================  =====================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_quantagent.errors import EXIT_INTERRUPTED, EXIT_USAGE
from pytest_quantagent.verdict import Verdict

__all__ = ["EXIT_GO", "EXIT_INCONCLUSIVE", "EXIT_INTERRUPTED", "EXIT_NO_GO", "EXIT_USAGE",
           "REQUIREMENTS", "GateResult", "cell_id", "exit_with_gate", "gate", "gate_line"]

EXIT_GO = 0
EXIT_NO_GO = 1
EXIT_INCONCLUSIVE = 2

#: ``--quant-require`` values: ``none`` (a test that cannot judge skips; the default),
#: ``decision`` (an INCONCLUSIVE cell or a test that cannot judge fails the run),
#: ``lossless`` (every cell must be LOSSLESS: damage fails the run as well).
REQUIREMENTS: tuple[str, ...] = ("none", "decision", "lossless")

_DAMAGE = frozenset({Verdict.MASKED_DAMAGE.value, Verdict.DEGRADED.value})


@dataclass(frozen=True)
class GateResult:
    """The gate over a set of cells."""

    outcome: str
    """``GO``, ``NO-GO`` or ``INCONCLUSIVE``."""
    exit_code: int
    cells: tuple[tuple[str, str], ...]
    """(cell id, verdict) of every cell, in report order."""

    def failing(self, require: str) -> list[tuple[str, str]]:
        """The cells that do not meet ``require`` (see :data:`REQUIREMENTS`)."""
        if require == "none":
            return []
        if require == "decision":
            return [(c, v) for c, v in self.cells if v == Verdict.INCONCLUSIVE.value]
        if require == "lossless":
            return [(c, v) for c, v in self.cells if v != Verdict.LOSSLESS.value]
        raise ValueError(f"require={require!r}; allowed: {', '.join(REQUIREMENTS)}")

    def as_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "exit_code": self.exit_code,
                "cells": {c: v for c, v in self.cells}}


def cell_id(cell: Mapping[str, Any]) -> str:
    """``<domain>-<arm>``, the id a cell has in test ids and reports."""
    return f"{cell.get('domain')}-{cell.get('arm')}"


def gate(cells: Iterable[Mapping[str, Any]]) -> GateResult:
    """The gate over report cells (the report JSON's ``cells``). A cell without a reference
    (a one-arm run) has nothing to judge and does not count."""
    judged = tuple((cell_id(c), str(c.get("verdict"))) for c in cells
                   if c.get("reference") is not None and c.get("verdict") is not None)
    verdicts = {v for _, v in judged}
    if verdicts & _DAMAGE:
        return GateResult("NO-GO", EXIT_NO_GO, judged)
    if verdicts - {Verdict.LOSSLESS.value}:
        return GateResult("INCONCLUSIVE", EXIT_INCONCLUSIVE, judged)
    return GateResult("GO", EXIT_GO, judged)


def exit_with_gate(cells: Iterable[Mapping[str, Any]]) -> int:
    """The commands' exit: the gate's line on stderr (so that ``--json -`` keeps stdout JSON
    only) and its exit code (0 GO, 1 NO-GO, 2 INCONCLUSIVE)."""
    import sys

    result = gate(cells)
    print(gate_line(result), file=sys.stderr)
    return result.exit_code


def gate_line(result: GateResult) -> str:
    """One line for a terminal: the outcome and the cells that made it."""
    if not result.cells:
        return "gate: GO (no candidate cell to judge)"
    parts = ", ".join(f"{c} {v}" for c, v in result.cells)
    return f"gate: {result.outcome} (exit {result.exit_code}): {parts}"
