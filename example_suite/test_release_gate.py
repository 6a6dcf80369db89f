"""A release gate for a quantized checkpoint.

Each test runs once per (domain, arm) cell of the run: ``pytest example_suite --quant=int4
--domain=telecom`` gives the cell ``telecom-int4`` (int4 against the bf16 reference, same
tasks and seeds). The episodes run once and every test below judges the same records.
"""

from __future__ import annotations

import pytest

from pytest_quantagent.assertions import (
    assert_budget_robust,
    assert_failure_set_invariant,
    assert_no_channel_amplification,
    assert_score_equivalent,
)


def test_final_score_is_equivalent(quant_cell):
    """The headline number: success at the run's error budget, within ±7.5 points."""
    assert_score_equivalent(quant_cell, margin=0.075)


@pytest.mark.error_budget(2)
def test_score_holds_when_two_failed_calls_end_the_episode(quant_cell):
    """The error budget absorbs extra failed tool calls; at K=2 it no longer can."""
    assert_score_equivalent(quant_cell, margin=0.075)


def test_no_failure_channel_is_amplified(quant_cell):
    """Hallucinated tool names, malformed calls, wrong ids...: none more frequent than ×1.2."""
    assert_no_channel_amplification(quant_cell, channel=None, max_ratio=1.2)


def test_gap_does_not_widen_under_tight_budgets(quant_cell):
    assert_budget_robust(quant_cell, budgets=(2, 5, 10))


def test_fails_in_the_same_ways(quant_cell):
    """More failures of the same kind is amplification; new kinds of failure are drift."""
    assert_failure_set_invariant(quant_cell, min_rank_corr=0.9)


@pytest.mark.domain("telecom")
def test_agent_does_not_call_device_tools(quant_cell):
    """Telecom only: the agent must ask the user to act on the phone, not call phone tools."""
    assert_no_channel_amplification(quant_cell, channel="cross_role_tool", max_ratio=1.2)
