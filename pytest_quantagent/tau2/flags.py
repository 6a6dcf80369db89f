"""Honesty flags of a τ²-bench results file: what its headline score does not show.

τ²-bench's score hides three things this product cares about:

- episodes recorded as ``infrastructure_error`` (or ``context_window_exceeded``) are
  excluded from its metrics; before 1.0.1 a run whose agent hallucinated a tool name could
  end up there (the replay of the trajectory raised, the task was retried and finally
  binned as an infrastructure error — CHANGELOG 1.0.1, "Hallucinated tool calls ... are now
  treated as no-ops"), so these episodes may hide exactly the failures we measure;
- premature terminations (any ending other than a user or agent stop) score 0 whatever the
  agent did before;
- malformed turns that τ²-bench silently retried (recorded only in a message's ``errors``
  list by versions that keep them) never reach the error budget.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

#: τ²-bench package versions whose evaluation turned hallucinated tool names into
#: infrastructure errors: from 1.0.0 (inclusive) to 1.0.1 (exclusive), where it was fixed.
DROPPING_VERSIONS: tuple[tuple[int, int, int], tuple[int, int, int]] = ((1, 0, 0), (1, 0, 1))

#: Keys of a results file's ``info`` that may carry the τ²-bench version (the format has no
#: fixed field for it; tools that post-process results add one of these).
VERSION_KEYS: tuple[str, ...] = ("tau2_version", "tau2_bench_version", "version", "package_version")

_STOP_TERMINATIONS = frozenset({"user_stop", "agent_stop"})
_NOT_EVALUABLE = frozenset({"infrastructure_error", "context_window_exceeded"})
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass
class Tau2Flags:
    """Counts of everything a τ²-bench score may hide, for one results file."""

    episodes: int = 0
    infrastructure_errors: int = 0
    """Episodes τ²-bench excluded from its metrics (``infrastructure_error`` and
    ``context_window_exceeded``): they may hide malformed or hallucinated calls."""
    infrastructure_episodes: list[tuple[str, int]] = field(default_factory=list)
    """(task_id, trial) of those episodes."""
    premature: Counter[str] = field(default_factory=Counter)
    """Scored episodes that ended other than by a user/agent stop, by τ²-bench's reason."""
    hidden_malformed: int = 0
    """Malformed turns τ²-bench retried without counting them (message ``errors`` lists)."""
    duplicate_keys: int = 0
    """Simulations repeating an earlier (task_id, trial): pairing keeps one of them."""
    tick_only: int = 0
    """Full-duplex (voice) simulations stored as ``ticks`` without ``messages``: their tool
    calls are not read (they count as episodes with no calls)."""
    tau2_version: str | None = None
    """The τ²-bench version from ``info`` when the file records one, else None."""
    drops_hallucinated: bool = False
    """True when the file was written by a version that dropped hallucinated-name episodes
    (1.0.0 up to, not including, 1.0.1)."""
    trimmed: bool = False
    """Messages lack ``error``/``requestor``/``id`` (leaderboard files); errors were read
    from the ``Error:`` prefix and requestors from the calling message."""
    tool_names_source: str = "domain"
    """``domain`` (the registered domain's tool lists), ``file`` (names seen in the file),
    or ``domain+file``."""
    notes: list[str] = field(default_factory=list)
    branch: str = "unknown"
    """``main``, ``feature/gym`` or ``unknown`` (see :mod:`pytest_quantagent.tau2.version`)."""
    accounting: str = "unknown"
    """Failure-accounting family of the producing version (``pre-1.0``, ``1.0-drop``,
    ``1.0``, ``1.0?``, ``gym``, ``unknown``)."""
    evidence: list[str] = field(default_factory=list)
    """What the version, branch and accounting were read from."""

    def count(self, termination: str, task_id: str, trial: int) -> None:
        """Account for one episode by its τ²-bench termination string."""
        self.episodes += 1
        if termination in _NOT_EVALUABLE:
            self.infrastructure_errors += 1
            self.infrastructure_episodes.append((task_id, trial))
        elif termination not in _STOP_TERMINATIONS:
            self.premature[termination] += 1

    def set_version(self, version: str | None) -> None:
        """Record the τ²-bench version and whether it is one that dropped episodes."""
        self.tau2_version = version
        parsed = parse_version(version)
        low, high = DROPPING_VERSIONS
        self.drops_hallucinated = parsed is not None and low <= parsed < high

    @property
    def n_premature(self) -> int:
        return sum(self.premature.values())

    def lines(self) -> list[str]:
        """Human-readable warnings, empty when nothing is hidden."""
        out: list[str] = []
        if self.infrastructure_errors:
            out.append(
                f"{self.infrastructure_errors} of {self.episodes} episodes recorded as "
                "infrastructure errors (excluded from scores; they may hide malformed or "
                "hallucinated tool calls)"
            )
        if self.premature:
            parts = ", ".join(f"{k}: {v}" for k, v in sorted(self.premature.items()))
            out.append(f"{self.n_premature} premature terminations ({parts})")
        if self.hidden_malformed:
            out.append(
                f"{self.hidden_malformed} malformed turns silently retried by tau2-bench "
                "(counted here as malformed_call, not in its error budget)"
            )
        if self.infrastructure_errors and self.tau2_version is None:
            out.append(
                "the file does not record its tau2-bench version: if written by 1.0.0 to "
                "1.0.1, its infrastructure errors may be episodes with hallucinated tool names"
            )
        if self.drops_hallucinated:
            out.append(
                f"written by tau2-bench {self.tau2_version}: versions 1.0.0 to 1.0.1 binned "
                "episodes with hallucinated tool names as infrastructure errors"
            )
        if self.duplicate_keys:
            out.append(
                f"{self.duplicate_keys} simulations repeat an earlier (task_id, trial); "
                "pairing uses one of each"
            )
        if self.tick_only:
            out.append(
                f"{self.tick_only} voice (full-duplex) simulations store ticks, not messages: "
                "read for their scores only; tool-call channels are unavailable for them"
            )
        if self.trimmed:
            out.append("trimmed file: tool errors read from the 'Error:' prefix")
        out.extend(self.notes)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tau2Flags:
        """Inverse of :meth:`to_dict` (e.g. flags read back from a saved report)."""
        return cls(
            episodes=int(data.get("episodes", 0)),
            infrastructure_errors=int(data.get("infrastructure_errors", 0)),
            infrastructure_episodes=[(str(t), int(n)) for t, n in data.get("infrastructure_episodes", [])],
            premature=Counter({str(k): int(v) for k, v in (data.get("premature") or {}).items()}),
            hidden_malformed=int(data.get("hidden_malformed", 0)),
            duplicate_keys=int(data.get("duplicate_keys", 0)),
            tick_only=int(data.get("tick_only", 0)),
            tau2_version=data.get("tau2_version"),
            drops_hallucinated=bool(data.get("drops_hallucinated", False)),
            trimmed=bool(data.get("trimmed", False)),
            tool_names_source=str(data.get("tool_names_source", "domain")),
            notes=[str(n) for n in data.get("notes", [])],
            branch=str(data.get("branch", "unknown")),
            accounting=str(data.get("accounting", "unknown")),
            evidence=[str(e) for e in data.get("evidence", [])],
        )

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (for reports)."""
        return {
            "episodes": self.episodes,
            "infrastructure_errors": self.infrastructure_errors,
            "infrastructure_episodes": [list(x) for x in self.infrastructure_episodes],
            "premature": dict(sorted(self.premature.items())),
            "hidden_malformed": self.hidden_malformed,
            "tick_only": self.tick_only,
            "duplicate_keys": self.duplicate_keys,
            "tau2_version": self.tau2_version,
            "drops_hallucinated": self.drops_hallucinated,
            "trimmed": self.trimmed,
            "tool_names_source": self.tool_names_source,
            "notes": list(self.notes),
            "branch": self.branch,
            "accounting": self.accounting,
            "evidence": list(self.evidence),
        }


def parse_version(version: str | None) -> tuple[int, int, int] | None:
    """``"1.0.0"`` → ``(1, 0, 0)``; None for anything that is not a version."""
    if not version:
        return None
    m = _VERSION.match(version.strip())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
