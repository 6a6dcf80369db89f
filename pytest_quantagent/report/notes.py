"""The run's notes in words, from its finished figures: what went wrong outside the model
per arm (the counts of :func:`pytest_quantagent.metrics.faults.infra_counts`, as the report's
``cells[].extra.faults`` carries them) and each endpoint's figures (``run.endpoints``, as
``runner/endpoints.py: collect`` gathers them). Shared by ``quantagent run`` and the pytest
summary; plain data in, lines out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def summary_lines(counts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per arm with anything to say (for the CLI and pytest summaries)."""
    lines = []
    for label, c in counts.items():
        parts = []
        if c["retried_requests"]:
            parts.append(f"{c['retried_requests']} request(s) retried (server faults)")
        if c["infrastructure_errors"]:
            parts.append(f"{c['infrastructure_errors']} episode(s) lost to infrastructure "
                         "failures after retries (not scored)")
        if c["task_errors"]:
            ids = ", ".join(c["task_error_ids"][:5]) + (" ..." if len(c["task_error_ids"]) > 5 else "")
            parts.append(f"{c['task_errors']} task error(s) (not scored): {ids}")
        if c["context_overflow"]:
            parts.append(f"{c['context_overflow']} context overflow(s) (scored, counted apart)")
        if c["agent_error"]:
            parts.append(f"{c['agent_error']} agent_error episode(s) (scored; see error_message)")
        if parts:
            lines.append(f"{label}: " + "; ".join(parts))
    return lines


def _ms(x: Any) -> str:
    return "-" if x is None else f"{x:.0f}"


def endpoint_lines(stats: Mapping[str, Sequence[Mapping[str, Any]]], *, all_arms: bool = False) -> list[str]:
    """One line per endpoint of every arm served by several endpoints (or by any, with
    ``all_arms``; a single endpoint's figures add little to the run's own)."""
    lines = []
    for label, eps in stats.items():
        if len(eps) < 2 and not all_arms:
            continue
        for e in eps:
            ej = f", {e['ejections']} ejection(s)" if e.get("ejections") else ""
            lines.append(f"{label} endpoint {e['url']}: {e['requests']} requests, "
                         f"{e['failures']} failed{ej}, p50 {_ms(e.get('p50_ms'))} ms, "
                         f"p95 {_ms(e.get('p95_ms'))} ms")
    return lines
