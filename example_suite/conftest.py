"""What a team adds next to its release gate: a hook publishing the verdicts to CI.

On GitHub Actions, ``$GITHUB_STEP_SUMMARY`` names a Markdown file shown on the run's page;
the hook appends one line per cell there. Locally (variable unset) it does nothing.
"""

from __future__ import annotations

import os
from typing import Any

import pytest


def pytest_quantagent_report_ready(config: pytest.Config, report: dict[str, Any]) -> None:
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if not summary:
        return
    lines = ["| cell | success (candidate vs reference) | verdict |", "|---|---|---|"]
    for cell in report["cells"]:
        s = cell["success"]
        lines.append(
            f"| {cell['domain']}-{cell['arm']} | {s['arm']:.1%} vs {s['reference']:.1%} "
            f"| {cell['verdict']} |"
        )
    with open(summary, "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
