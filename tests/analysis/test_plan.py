"""analysis.plan: the design that decides every claim, within the run's pool (issue 33 item 3).

The power functions are checked against statsmodels in tests/stats/test_power_plan.py; the
advised designs are run in benchmarks/calibration.py ("advised design" rows, slow test in
tests/report/test_calibration.py). Here: which design is advised, in which options.
"""

from __future__ import annotations

import pickle
from dataclasses import fields, replace

import numpy as np
import pytest

from pytest_quantagent.analysis.plan import (
    DAMAGE_PLAN_P,
    MeanClaim,
    RateClaim,
    plan_score,
    pool_info,
    trials_useful,
)
from pytest_quantagent.metrics.episode import ArmData
from pytest_quantagent.metrics.synthetic import World, simulate_world
from pytest_quantagent.report.model import AnalysisConfig, CellInput, analyze
from pytest_quantagent.runner.selection import PoolSize, TaskSelection, pool_capacity
from pytest_quantagent.stats.clustered import paired_score
from pytest_quantagent.vocab.channels import Channel

U = Channel.UNKNOWN_TOOL
# a world whose only failures are unknown_tool calls (the other channels silent)
ONE_CHANNEL = World(n_tasks=40, trials=1, rates=((U, 0.15),))


def _plan(world: World, pool: int | None, seed: int = 1,
          cfg: AnalysisConfig | None = None, arms: tuple[ArmData, ArmData] | None = None
          ) -> dict:
    a, r = arms if arms is not None else simulate_world(np.random.default_rng(seed), world)
    cell = analyze([CellInput("retail", a.arm, a, "bf16", r, pool_tasks=pool)],
                   cfg or AnalysisConfig()).cells[0]
    assert cell.plan is not None
    if cell.verdict == "INCONCLUSIVE":
        assert cell.reasons[-1] == f"to decide every claim: {cell.plan['message']}"
    return cell.plan


def _repeat_trials(d: ArmData, m: int) -> ArmData:
    """``d`` with every episode played ``m`` times, identically (deterministic decoding,
    seedless user)."""
    idx = np.repeat(np.arange(d.n), m)
    per_episode = {f.name: getattr(d, f.name)[idx] for f in fields(d)
                   if isinstance(getattr(d, f.name), np.ndarray) and f.name != "margins"
                   and getattr(d, f.name).shape[:1] == (d.n,)}
    per_episode["trials"] = np.tile(np.arange(m), d.n)
    return replace(d, **per_episode,
                   user_event_counts={k: v[idx] for k, v in d.user_event_counts.items()})


def test_pool_capacity_names_the_pool_and_its_fresh_cap() -> None:
    from pytest_quantagent.env.registry import get_domain

    tel = get_domain("telecom")
    pool = pool_capacity(tel, TaskSelection("all"))
    # the bundled test split (60 telecom tasks), telecom generating up to 500 fresh tasks
    assert pool == 60 and isinstance(pool, int) and pool.label == "the telecom test split"
    assert pool.fresh_cap == 500 and not pool.fresh
    fresh = pool_capacity(tel, TaskSelection("fresh", count=20))
    assert fresh == 500 and fresh.fresh
    assert pickle.loads(pickle.dumps(pool)).fresh_cap == 500
    info = pool_info(pool, AnalysisConfig(max_tasks=40))
    assert (info.tasks, info.fresh_cap) == (40, 500)
    assert pool_info(None, AnalysisConfig()).tasks is None


def test_trials_useful_is_read_from_the_data() -> None:
    rng = np.random.default_rng(2)
    a1, r1 = simulate_world(rng, replace(ONE_CHANNEL, trials=1))
    assert trials_useful(a1, r1) is None  # one trial per task: cannot be told
    a2, r2 = simulate_world(rng, replace(ONE_CHANNEL, trials=2))
    assert trials_useful(a2, r2) is True
    assert trials_useful(_repeat_trials(a1, 2), _repeat_trials(r1, 2)) is False


def test_a_fresh_pool_is_advised_rather_than_trials() -> None:
    # the bundled 60-task telecom split: past it, fresh tasks (the domain generates 500;
    # this pilot's claims need ~380 episodes)
    plan = _plan(ONE_CHANNEL, PoolSize(60, "the telecom test split", 500), seed=2)
    assert plan["reachable"] and plan["fresh"] and plan["trials"] == 1
    assert 60 < plan["tasks"] <= 500 and plan["tasks_value"] == f"fresh:{plan['tasks']}"
    assert f"(--quant-tasks fresh:{plan['tasks']})" in plan["message"]
    # quantagent run spells a fresh pool --tasks fresh:N (its --num-tasks takes a count)
    cli = _plan(ONE_CHANNEL, PoolSize(60, "the telecom test split", 500), seed=2,
                cfg=AnalysisConfig(trials_flag="--trials", tasks_flag="--num-tasks"))
    assert f"(--tasks fresh:{cli['tasks']})" in cli["message"]
    # without a generator (τ²-bench data) the same pilot is advised trials over the split
    fixed = _plan(ONE_CHANNEL, PoolSize(60, "the retail test split"), seed=2)
    assert not fixed["fresh"] and fixed["tasks"] <= 60 and fixed["trials"] > 1
    assert f"--quant-tasks {fixed['tasks']} --quant-trials {fixed['trials']}" in fixed["message"]
    assert "trials help only if repeated trials differ" in fixed["message"]


def test_every_claim_is_sized_and_the_largest_decides() -> None:
    plan = _plan(ONE_CHANNEL, None)
    needs = {c["claim"]: c["episodes"] for c in plan["claims"]}
    assert {"score", "channel:unknown_tool", "channel:bad_arguments", "gap:2", "gap:5"} <= set(needs)
    # each claim alone needs no more than the design; the design is at least their max
    assert plan["episodes"] >= max(needs.values()) and plan["power"] >= 0.8
    # a silent channel is decided by its increase bound: z·√2/N < 0.2 per 100 calls needs
    # N > 1163 calls per arm, ~10 calls per episode
    assert 100 <= needs["channel:bad_arguments"] <= 140
    assert plan["claims"][0]["episodes"] == max(needs.values())  # sorted, largest first


def test_deterministic_trials_are_never_advised_and_no_design_is_said_so() -> None:
    # every task's two trials identical in both arms, on a 30-task split without a fresh
    # pool: trials add nothing, the split is too small for the channel bound
    a, r = simulate_world(np.random.default_rng(3), replace(ONE_CHANNEL, n_tasks=30))
    arms = (_repeat_trials(a, 2), _repeat_trials(r, 2))
    plan = _plan(ONE_CHANNEL, PoolSize(30, "the retail test split"), arms=arms)
    assert plan["trials_useful"] is False and plan["trials"] == 1 and not plan["reachable"]
    assert plan["tasks"] == 30 and plan["power"] < 0.8
    assert plan["message"].startswith("no available design decides every claim at 80% power: "
                                      "the retail test split (30 tasks) is exhausted and "
                                      "repeated trials add nothing here")
    assert "the closest is 30 tasks × 1 trial (--quant-tasks 30)" in plan["message"]
    # with a generator the same pilot is advised fresh tasks, still one trial
    fresh = _plan(ONE_CHANNEL, PoolSize(30, "the telecom test split", 500), arms=arms)
    assert fresh["fresh"] and fresh["trials"] == 1


def test_damage_is_planned_only_where_the_pilot_suggests_it() -> None:
    rng = np.random.default_rng(4)
    a, r = simulate_world(rng, replace(ONE_CHANNEL, ratio=((U, 2.5),), n_tasks=20))
    cell = analyze([CellInput("retail", a.arm, a, "bf16", r)]).cells[0]
    ch = cell.channels["unknown_tool"]
    assert ch.p is not None and ch.p < DAMAGE_PLAN_P
    assert cell.plan is not None
    dirs = {c["claim"]: c["direction"] for c in cell.plan["claims"]}
    assert dirs["channel:unknown_tool"] == "damage" and dirs["channel:bad_arguments"] == "decided"


def test_power_functions_grow_with_the_design() -> None:
    rc = RateClaim("channel:x", "x", 0.02, 10.0, 1.2, 1.2, 1.2, 0.002, 0.05, 0.05, 0.02, 0.0125)
    powers = [rc.null_power(t, 1) for t in (50, 200, 800, 3200)]
    assert powers == sorted(powers) and powers[0] < 0.2 < 0.9 < powers[-1]
    dmg = [rc.damage_power(t, 1) or 0.0 for t in (50, 200, 800, 3200)]
    assert dmg == sorted(dmg) and dmg[-1] > 0.9


def test_score_plan_reaches_its_power_in_simulation() -> None:
    # known truth: equal arms (20% of the candidate's episodes redrawn at the same 60%
    # success rate: ~10% of pairs discordant, half each way), one trial per task.
    # plan_score sizes the TOST on a 40-pair pilot; 300 simulated cells of the advised
    # design (Tango's interval, the verdict's test) must pass the TOST at >= 80% - 5 pts
    # (the 80% chi-square bounds of the pilot's variance make it conservative; one-sided
    # binomial: a true 80% falls below 225/300 with probability < 2%)
    rng = np.random.default_rng(5)

    def pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
        ref = rng.random(n) < 0.6
        arm = np.where(rng.random(n) < 0.2, rng.random(n) < 0.6, ref)
        return arm.astype(float), ref.astype(float)

    a, r = pairs(40)
    plan = plan_score(a - r, np.arange(40).astype(str), None, AnalysisConfig())
    assert plan.reachable and plan.trials == 1 and plan.tasks is not None
    n = plan.tasks
    passed = 0
    for _ in range(300):
        a, r = pairs(n)
        passed += paired_score(a, r, clusters=None, margin=0.075, alpha=0.05).tost_p < 0.05
    assert passed / 300 >= 0.75, (n, passed)


def test_mean_claim_one_sided_and_two_sided() -> None:
    from pytest_quantagent.stats.power import variance_components

    var = variance_components(np.r_[np.ones(5), -np.ones(5), np.zeros(30)],
                              np.arange(40).astype(str))
    gap = MeanClaim("gap:2", "gap", var, 0.075, 0.05, False)
    score = MeanClaim("score", "score", var, 0.075, 0.05, True)
    # the one-sided bound is reached before the two-sided TOST at every design
    assert all(gap.null_power(t, 1) >= score.null_power(t, 1) for t in (40, 100, 400))
    with pytest.raises(ValueError, match="equal, non-zero lengths"):
        variance_components([], [])
