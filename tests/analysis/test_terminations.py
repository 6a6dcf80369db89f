"""Termination reasons as evidence (issue 38 item 2): a spike of ``agent_error`` endings at a
flat score is named and called MASKED_DAMAGE; equal endings claim nothing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pytest_quantagent.metrics.synthetic import World, simulate_world
from pytest_quantagent.report.model import AnalysisConfig, CellInput, analyze
from pytest_quantagent.vocab.channels import Channel

# Few channel failures, so the channels neither decide damage nor hold the test up.
QUIET = World(n_tasks=400, trials=1, success_noise=0.0, shared=True,
              rates=((Channel.UNKNOWN_TOOL, 0.001),))


def _cell(agent_error_arm: float, agent_error_ref: float, seed: int = 3):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    a, r = simulate_world(rng, QUIET)
    # endings drawn among each arm's failed episodes only: the success rates stay as they are
    for d, share in ((a, agent_error_arm), (r, agent_error_ref)):
        term = d.termination_of.copy()
        failed = np.flatnonzero(~d.success)
        pick = rng.choice(failed, size=round(share * d.n), replace=False)
        term[pick] = "agent_error"
        d.termination_of = term
    return analyze([CellInput("telecom", "int4", a, "bf16", r)], AnalysisConfig()).cells[0]


def test_an_agent_error_spike_at_a_flat_score_is_masked_damage() -> None:
    c = _cell(0.16, 0.02)  # 8x: 64 vs 8 of 400 episodes
    assert abs(c.success.diff or 0.0) < 1e-9
    assert c.verdict == "MASKED_DAMAGE"
    assert any(r.startswith("episodes ending as agent_error ×8 (64 vs 8), +14 per 100 episodes: "
                            "above ×1.2 and more than +2 per 100 episodes") for r in c.reasons), c.reasons
    t = c.termination_tests["agent_error"]
    assert (t["arm_count"], t["reference_count"]) == (64, 8)
    assert t["p_holm"] is not None and t["p_holm"] < 0.05
    assert "termination:agent_error" in c.holm["tests"]


def test_equal_endings_claim_no_damage_and_a_small_rise_is_not_damage() -> None:
    same = _cell(0.02, 0.02)
    assert same.verdict != "MASKED_DAMAGE" and same.verdict != "DEGRADED"
    assert not any("agent_error" in r and "Holm p" in r for r in same.reasons)
    # x1.5 but +1 per 100 episodes: under the per-episode tolerance of +2, never damage
    small = _cell(0.03, 0.02)
    assert small.verdict not in ("MASKED_DAMAGE", "DEGRADED")


def test_cells_without_ending_data_skip_the_termination_tests() -> None:
    rng = np.random.default_rng(1)
    a, r = simulate_world(rng, QUIET)
    c = analyze([CellInput("telecom", "int4", replace(a, termination_of=None), "bf16", r)],
                AnalysisConfig()).cells[0]
    assert c.termination_tests is None
