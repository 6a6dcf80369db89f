"""What went wrong outside the model in a run: per-arm counts for every report and summary
(pure over the records; the lines that put them in words are ``report/notes.py``).

Issue 28's taxonomy, as the records carry it: infrastructure (requests retried, episodes
lost after every retry), task errors (an episode's setup failed), context overflows and
episodes an exception in the agent ended (``agent_error``, scored). Only the last two are
outcomes of the model; the first two are never scored and must never go unseen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pytest_quantagent.errors import InfrastructureError
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import TerminationReason

_T = TerminationReason


def infra_counts(records: Iterable[EpisodeRecord]) -> dict[str, Any]:
    """Counts of one arm: ``episodes``, ``scored``, ``retried_requests`` (infrastructure
    retries, whatever the episode's end), ``infrastructure_errors`` (episodes lost after all
    retries), ``task_errors`` (with ``task_error_ids``), ``context_overflow``, ``agent_error``
    and the last infrastructure message, if any."""
    out: dict[str, Any] = {"episodes": 0, "scored": 0, "retried_requests": 0,
                           "infrastructure_errors": 0, "task_errors": 0, "task_error_ids": [],
                           "context_overflow": 0, "agent_error": 0, "last_error": None}
    for r in records:
        out["episodes"] += 1
        out["retried_requests"] += r.infra_retries
        if r.scored:
            out["scored"] += 1
        if r.termination == _T.INFRASTRUCTURE_ERROR:
            out["infrastructure_errors"] += 1
            out["last_error"] = r.error_message
        elif r.termination == _T.TASK_ERROR:
            out["task_errors"] += 1
            out["task_error_ids"].append(r.task_id)
            out["last_error"] = out["last_error"] or r.error_message
        elif r.termination == _T.CONTEXT_OVERFLOW:
            out["context_overflow"] += 1
        elif r.termination == _T.AGENT_ERROR:
            out["agent_error"] += 1
    out["task_error_ids"] = sorted(set(out["task_error_ids"]))
    return out


def check_not_all_infrastructure(label: str, counts: Mapping[str, Any]) -> None:
    """Raise :class:`InfrastructureError` when an arm has episodes but none was scored: such
    a cell is an error (the server, or the tasks), never an INCONCLUSIVE verdict."""
    if counts["episodes"] and not counts["scored"]:
        last = counts.get("last_error") or "no message"
        raise InfrastructureError(
            f"arm {label!r}: all {counts['episodes']} episodes failed outside the model "
            f"({counts['infrastructure_errors']} infrastructure, {counts['task_errors']} task "
            f"errors; {counts['retried_requests']} requests retried); nothing to analyse. "
            f"Last error: {last}")
