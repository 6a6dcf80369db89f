"""A cell whose arms differ through the simulated user claims no damage from the episodes
the user may decide, but may from the others (issue 35 item 4 with issue 34's int2 cell:
36 vs 3 not-understood turns beside 73 vs 0 unknown-tool calls)."""

from __future__ import annotations

import numpy as np

from pytest_quantagent.metrics.synthetic import World, simulate_world
from pytest_quantagent.report.model import AnalysisConfig, CellInput, analyze
from pytest_quantagent.vocab.channels import Channel

U = Channel.UNKNOWN_TOOL


def _cell(ratio: float, misread_where: str, seed: int = 5):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    a, r = simulate_world(rng, World(n_tasks=300, trials=1, rates=((U, 0.01),), ratio=((U, ratio),)))
    ev_a = np.zeros(a.n, dtype=np.int64)
    ev_r = np.zeros(r.n, dtype=np.int64)
    from pytest_quantagent.vocab.channels import ALL_CHANNELS

    has = a.channel_counts[:, list(ALL_CHANNELS).index(U)] > 0
    rows = np.flatnonzero(has if misread_where == "failures" else ~has)[:40]
    ev_a[rows] = 1  # the user misreads 40 of the candidate's episodes, 2 of the reference's
    ev_r[:2] = 1
    a.user_event_counts = {"not_understood": ev_a}
    r.user_event_counts = {"not_understood": ev_r}
    cell = analyze([CellInput("telecom", "int4", a, "bf16", r)], AnalysisConfig()).cells[0]
    cell.extra["quiet_pairs"] = int(((ev_a == 0) & (ev_r == 0)).sum())  # rows pair 1:1 here
    return cell


def test_damage_outside_the_misread_episodes_is_claimed_with_the_difference_named() -> None:
    c = _cell(4.0, misread_where="elsewhere")
    assert c.verdict == "MASKED_DAMAGE", c.reasons
    assert c.reasons[0].startswith("the arms differ through the simulated user: 40 vs 2 "
                                   "not-understood turns")
    assert any(x.startswith("on the ") and "in which the simulated user reported nothing in "
               "either arm, damage is shown (MASKED_DAMAGE)" in x for x in c.reasons)
    assert c.extra["without_user_events"]["paired"] == c.extra["quiet_pairs"] > 250


def test_damage_only_in_the_misread_episodes_is_not_claimed() -> None:
    # every candidate failure is in an episode the user misread: nothing is left to show it
    c = _cell(4.0, misread_where="failures")
    assert c.verdict == "INCONCLUSIVE", c.reasons
    assert any("no damage shown" in x for x in c.reasons)


def test_equal_arms_with_a_user_difference_claim_nothing() -> None:
    c = _cell(1.0, misread_where="elsewhere")
    assert c.verdict not in ("MASKED_DAMAGE", "DEGRADED"), c.reasons
