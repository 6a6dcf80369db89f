"""Reading τ²-bench results files: episodes, failure channels from text, honesty flags.

``read_results(path) -> Tau2Run`` is the entry point; ``quantagent analyze --tau2`` and the
``replay`` backend are built on it.
"""

from __future__ import annotations

from pytest_quantagent.tau2.classify import Classification, ToolNames, classify_error
from pytest_quantagent.tau2.flags import Tau2Flags
from pytest_quantagent.tau2.reader import Tau2Run, read_results

__all__ = [
    "Classification",
    "Tau2Flags",
    "Tau2Run",
    "ToolNames",
    "classify_error",
    "read_results",
]
