"""Which τ²-bench produced a results file, and how it accounted for failures.

Results files differ by τ²-bench version and branch in ways that change what the score
means, so two files are only paired or pooled when their *failure accounting* agrees:

- ``pre-1.0``: a malformed tool call or a hallucinated tool name is a failed tool call in
  the trajectory; the episode goes on and is scored.
- ``1.0-drop``: since 1.0.0 a malformed tool call, an empty message or a provider error is
  retried three times and then the whole episode becomes ``infrastructure_error``, excluded
  from the score; up to 1.0.1 (commit 2be6916, 2026-03 to 2026-04) every hallucinated tool
  name ended the same way.
- ``1.0``: 1.0.1 on: malformed turns as above; a hallucinated tool name is a failed call.
- ``1.0?``: a 1.0-family file (new termination reasons, voice ``ticks``, 1.0 tools) that
  does not record its version: ``1.0`` or ``1.0-drop``, the file cannot say which.
- ``gym``: the ``feature/gym`` branch keeps rejected turns as ``errors`` on the message
  (retried, not counted in the error budget) instead of excluding the episode.
- ``unknown``: nothing in the file tells (no version, no version-specific field).

The version comes from ``info`` (:data:`~pytest_quantagent.tau2.flags.VERSION_KEYS`); the
branch and family from the fields present. Tool names are classified against the tool list
of the file's version: retail gained ``get_item_details`` in 1.0.0, so in an older file a
call to it is a hallucinated name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_quantagent.tau2.flags import DROPPING_VERSIONS, parse_version

ACCOUNTING: dict[str, str] = {
    "pre-1.0": "malformed calls and hallucinated tool names are failed tool calls, scored",
    "1.0-drop": "malformed turns retried 3 times, then the episode is an excluded "
                "infrastructure_error; hallucinated tool names likewise",
    "1.0": "malformed turns retried 3 times, then the episode is an excluded "
           "infrastructure_error; hallucinated tool names are failed tool calls",
    "1.0?": "1.0 family, version not recorded: malformed turns end as excluded "
            "infrastructure_error; hallucinated names excluded too if written before 1.0.1",
    "gym": "feature/gym: rejected turns kept as message 'errors' (retried, not in the error "
           "budget); the episode continues and is scored",
    "unknown": "the file records no version and no version-specific field",
}

#: Termination reasons τ²-bench introduced in 1.0.
V1_TERMINATIONS = frozenset({"infrastructure_error", "timeout", "context_window_exceeded",
                             "unexpected_error"})
#: (domain, tool) → the first version whose tool list has it.
TOOLS_ADDED: dict[tuple[str, str], tuple[int, int, int]] = {("retail", "get_item_details"): (1, 0, 0)}

#: Families that may be paired with each other without --allow-mixed-tau2.
_COMPATIBLE: dict[str, frozenset[str]] = {
    "1.0?": frozenset({"1.0", "1.0-drop", "1.0?"}),
    "1.0": frozenset({"1.0", "1.0?"}),
    "1.0-drop": frozenset({"1.0-drop", "1.0?"}),
}


@dataclass
class Signals:
    """What the reader saw that tells versions apart."""

    message_errors: bool = False
    """Some message carries an ``errors`` field (feature/gym)."""
    terminations: set[str] = field(default_factory=set)
    ticks: bool = False
    ok_tool_names: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Provenance:
    version: str | None
    branch: str
    """``main``, ``feature/gym`` or ``unknown``."""
    accounting: str
    """A key of :data:`ACCOUNTING`."""
    evidence: tuple[str, ...] = ()

    def describe(self) -> str:
        v = f"tau2-bench {self.version}" if self.version else "tau2-bench (version not recorded)"
        why = f"; from {', '.join(self.evidence)}" if self.evidence else ""
        return f"{v}, branch {self.branch}: failure accounting {self.accounting!r} ({ACCOUNTING[self.accounting]}{why})"

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "branch": self.branch, "accounting": self.accounting,
                "evidence": list(self.evidence)}


def detect(version: str | None, info: Mapping[str, Any], signals: Signals, domain: str) -> Provenance:
    """The producing version, branch and failure accounting of a file."""
    evidence: list[str] = []
    if signals.message_errors:
        evidence.append("messages with an 'errors' field")
        return Provenance(version, "feature/gym", "gym", tuple(evidence))
    parsed = parse_version(version)
    if parsed is not None:
        evidence.append(f"info version {version}")
        low, high = DROPPING_VERSIONS
        acc = "pre-1.0" if parsed < low else "1.0-drop" if parsed < high else "1.0"
        return Provenance(version, "main", acc, tuple(evidence))
    new_terms = sorted(signals.terminations & V1_TERMINATIONS)
    if new_terms:
        evidence.append(f"termination reasons {', '.join(new_terms)}")
    if signals.ticks:
        evidence.append("voice ticks")
    env = info.get("environment_info") if isinstance(info.get("environment_info"), Mapping) else {}
    tool_defs = env.get("tool_defs") if isinstance(env, Mapping) else None
    added = [t for (d, t) in TOOLS_ADDED if d == domain
             and ((isinstance(tool_defs, Mapping) and t in tool_defs) or t in signals.ok_tool_names)]
    if added:
        evidence.append(f"1.0 tool {', '.join(added)}")
    if evidence:
        return Provenance(None, "main", "1.0?", tuple(evidence))
    return Provenance(None, "unknown", "unknown", ())


def tools_of_version(domain: str, names: Iterable[str], version: str | None) -> frozenset[str]:
    """``names`` without the tools the file's version did not have yet (only when the
    version is recorded)."""
    parsed = parse_version(version)
    out = set(names)
    if parsed is not None:
        for (d, tool), since in TOOLS_ADDED.items():
            if d == domain and parsed < since:
                out.discard(tool)
    return frozenset(out)


def accounting_conflict(reference: Provenance, candidate: Provenance) -> str | None:
    """What differs between two files' failure accounting, or None when they may be paired
    (identical, or one of them cannot tell: ``unknown``)."""
    a, b = reference.accounting, candidate.accounting
    if a == b or "unknown" in (a, b) or b in _COMPATIBLE.get(a, frozenset()):
        return None
    return f"reference: {ACCOUNTING[a]} ({a}); candidate: {ACCOUNTING[b]} ({b})"
