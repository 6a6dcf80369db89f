"""Per-endpoint figures of a run's served arms, for the CLI and pytest summaries (gathered
here from the backends; put in words by ``report/notes.py: endpoint_lines``).

Backends with several endpoints (``endpoints`` in the arm's table) report, per endpoint,
requests (attempts), failures (infrastructure: refused, dropped, timed out, 5xx), ejections
and the latency of successful requests (p50/p95, ms). Failures here were retried, on another
endpoint where one was up; they are never the model's failures (see ``metrics/faults.py`` for
the per-arm retry and loss counts).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def collect(runtimes: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
    """Arm label → its backend's ``endpoint_stats()`` (arms without endpoints left out)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for rt in runtimes:
        stats = rt.backend.endpoint_stats()
        if stats:
            out[rt.arm.label] = stats
    return out
