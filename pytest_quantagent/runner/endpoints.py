"""Per-endpoint figures of a run's served arms, for the CLI and pytest summaries.

Backends with several endpoints (``endpoints`` in the arm's table) report, per endpoint,
requests (attempts), failures (infrastructure: refused, dropped, timed out, 5xx), ejections
and the latency of successful requests (p50/p95, ms). Failures here were retried, on another
endpoint where one was up; they are never the model's failures (see ``runner/faults.py`` for
the per-arm retry and loss counts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def collect(runtimes: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
    """Arm label → its backend's ``endpoint_stats()`` (arms without endpoints left out)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for rt in runtimes:
        stats = rt.backend.endpoint_stats()
        if stats:
            out[rt.arm.label] = stats
    return out


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
