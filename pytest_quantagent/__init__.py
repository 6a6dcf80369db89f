"""pytest-quantagent: catch what quantization does to LLM agents before a checkpoint ships.

The public API, importable from here. Names load lazily: the pytest plugin imports this
package in every pytest run, so nothing heavy (numpy, statistics, runner) is imported until
a name is used.

>>> from pytest_quantagent import assert_score_equivalent, analyze
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pytest_quantagent.version import __version__

#: Public name → module that defines it.
_EXPORTS: dict[str, str] = {
    # assertions (tests)
    "assert_score_equivalent": "pytest_quantagent.assertions",
    "assert_no_channel_amplification": "pytest_quantagent.assertions",
    "assert_budget_robust": "pytest_quantagent.assertions",
    "assert_failure_set_invariant": "pytest_quantagent.assertions",
    "ScoreEquivalence": "pytest_quantagent.assertions",
    "BudgetRobustness": "pytest_quantagent.assertions",
    # what fixtures return, and the hooks' data
    "QuantCell": "pytest_quantagent.quant_cell",
    "CellKey": "pytest_quantagent.quant_cell",
    "CellEpisodes": "pytest_quantagent.quant_cell",
    "QuantAgentConfig": "pytest_quantagent.config",
    "TaskSelection": "pytest_quantagent.runner.selection",
    # arms
    "ArmSpec": "pytest_quantagent.quant.arms",
    "load_arms_config": "pytest_quantagent.quant.arms",
    "resolve_arm": "pytest_quantagent.quant.arms",
    # records and taxonomy
    "EpisodeRecord": "pytest_quantagent.store.records",
    "CallRecord": "pytest_quantagent.store.records",
    "Channel": "pytest_quantagent.vocab.channels",
    "TerminationReason": "pytest_quantagent.vocab.channels",
    # analysis and reports
    "AnalysisConfig": "pytest_quantagent.report.model",
    "CellInput": "pytest_quantagent.report.model",
    "analyze": "pytest_quantagent.report.model",
    "render_html": "pytest_quantagent.report.html",
    "read_report": "pytest_quantagent.report.json_io",
    "write_report": "pytest_quantagent.report.json_io",
    "validate_report": "pytest_quantagent.report.json_io",
    "report_schema": "pytest_quantagent.report.json_io",
}

__all__ = [
    "AnalysisConfig",
    "ArmSpec",
    "BudgetRobustness",
    "CallRecord",
    "CellEpisodes",
    "CellInput",
    "CellKey",
    "Channel",
    "EpisodeRecord",
    "QuantAgentConfig",
    "QuantCell",
    "ScoreEquivalence",
    "TaskSelection",
    "TerminationReason",
    "__version__",
    "analyze",
    "assert_budget_robust",
    "assert_failure_set_invariant",
    "assert_no_channel_amplification",
    "assert_score_equivalent",
    "load_arms_config",
    "read_report",
    "render_html",
    "report_schema",
    "resolve_arm",
    "validate_report",
    "write_report",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_quantagent' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:
    from pytest_quantagent.assertions import (
        BudgetRobustness,
        ScoreEquivalence,
        assert_budget_robust,
        assert_failure_set_invariant,
        assert_no_channel_amplification,
        assert_score_equivalent,
    )
    from pytest_quantagent.config import QuantAgentConfig
    from pytest_quantagent.quant.arms import ArmSpec, load_arms_config, resolve_arm
    from pytest_quantagent.quant_cell import CellEpisodes, CellKey, QuantCell
    from pytest_quantagent.report.html import render_html
    from pytest_quantagent.report.json_io import (
        read_report,
        report_schema,
        validate_report,
        write_report,
    )
    from pytest_quantagent.report.model import AnalysisConfig, CellInput, analyze
    from pytest_quantagent.runner.selection import TaskSelection
    from pytest_quantagent.store.records import CallRecord, EpisodeRecord
    from pytest_quantagent.vocab.channels import Channel, TerminationReason
