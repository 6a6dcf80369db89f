"""Run until decided (analysis/sequential.py): the planned waves, and the loop's stopping
rules on scripted waves and verdicts."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from pytest_quantagent.analysis.sequential import (
    Design,
    SequentialPlan,
    plan_waves,
    run_until_decided,
    trials_repeat,
)
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import TerminationReason


def test_waves_grow_the_tasks_while_the_pool_has_them_then_the_trials() -> None:
    fresh = plan_waves(Design(40, 1), pool=500, grow_tasks=True, max_episodes=1000)
    assert [(d.tasks, d.trials) for d in fresh] == [(40, 1), (80, 1), (160, 1), (320, 1),
                                                     (500, 1), (500, 2)]
    fixed = plan_waves(Design(60, 1), pool=60, grow_tasks=False, max_episodes=500)
    assert [(d.tasks, d.trials) for d in fixed] == [(60, 1), (60, 2), (60, 4), (60, 8)]
    assert all(d.episodes <= 500 for d in fixed)
    small = plan_waves(Design(10, 3), pool=50, grow_tasks=True, max_episodes=200)
    assert [(d.tasks, d.trials) for d in small] == [(10, 3), (20, 3), (40, 3), (50, 4)]


def test_a_first_look_above_the_cap_is_refused_with_both_numbers() -> None:
    with pytest.raises(ValueError, match=r"first look already has 120 episodes per arm \(60 tasks "
                                         r"x 2 trials\), above the cap 100"):
        plan_waves(Design(60, 2), pool=60, grow_tasks=False, max_episodes=100)


def _rec(task: str, trial: int, success: bool, arm: str = "a") -> EpisodeRecord:
    return EpisodeRecord(key=f"{arm}-{task}-{trial}", model="m", arm=arm, backend="mock",
                         domain="d", task_id=task, trial=trial, seed=trial, max_errors=10,
                         max_steps=50, termination=TerminationReason.USER_STOP,
                         reward=float(success), success=success, n_errors=0, steps=4)


def _records(design: Design, arm: str, vary: bool = False) -> list[EpisodeRecord]:
    return [_rec(f"t{i}", j, (i + (j if vary else 0)) % 2 == 0, arm)
            for i in range(design.tasks) for j in range(design.trials)]


def _waves(vary: bool = False):  # type: ignore[no-untyped-def]
    ran: list[tuple[Design, list[str]]] = []

    def run_wave(design: Design, open_arms: list[str]) -> Mapping[str, list[EpisodeRecord]]:
        ran.append((design, open_arms))
        return {a: _records(design, a, vary) for a in ["ref", *open_arms]}

    return ran, run_wave


def test_each_cell_stops_when_decided_and_the_others_go_on() -> None:
    plan = SequentialPlan.make(Design(10, 1), pool=100, grow_tasks=True, max_episodes=80, alpha=0.05)
    ran, run_wave = _waves()
    seen: list[tuple[str, int, float]] = []

    def judge(arm: str, recs: list[EpisodeRecord], ref: list[EpisodeRecord], alpha: float) -> str:
        seen.append((arm, len(recs), alpha))
        if arm == "int2":
            return "DEGRADED"
        return "LOSSLESS" if len(recs) >= 40 else "INCONCLUSIVE"

    seqs = run_until_decided(["int2", "int4"], "ref", plan, run_wave, judge)
    assert [d.tasks for d, _ in ran] == [10, 20, 40]
    assert [arms for _, arms in ran] == [["int2", "int4"], ["int4"], ["int4"]]
    assert seqs["int2"].stopped == "decided" and len(seqs["int2"].looks) == 1
    assert seqs["int4"].stopped == "decided" and seqs["int4"].why == "decided at look 3 of 4"
    assert [lk.verdict for lk in seqs["int4"].looks] == ["INCONCLUSIVE", "INCONCLUSIVE", "LOSSLESS"]
    # each look judged at its own increment of the spending plan
    assert [a for arm, _, a in seen if arm == "int4"] == list(plan.spending.alphas[:3])
    recs, ref = seqs["int4"].records or ([], [])
    assert len(recs) == len(ref) == 40
    block = plan.describe(seqs["int4"])
    assert block["looks_taken"] == 3 and block["episodes_used"] == 40
    assert block["alpha_spent"] == pytest.approx(sum(plan.spending.alphas[:3]))


def test_an_undecided_cell_stops_at_the_cap() -> None:
    plan = SequentialPlan.make(Design(10, 1), pool=100, grow_tasks=True, max_episodes=40, alpha=0.05)
    _, run_wave = _waves()
    seqs = run_until_decided(["int4"], "ref", plan, run_wave, lambda *a: "INCONCLUSIVE")
    s = seqs["int4"]
    assert s.stopped == "cap" and len(s.looks) == 3
    assert "last planned look (3, 40 episodes per arm, the cap)" in s.why
    assert plan.describe(s)["alpha_spent"] == pytest.approx(0.05)


def test_repeated_trials_that_repeat_the_first_end_the_run_early() -> None:
    plan = SequentialPlan.make(Design(10, 1), pool=10, grow_tasks=False, max_episodes=80, alpha=0.05)
    ran, run_wave = _waves(vary=False)  # trial j of task i = trial 0: deterministic arms
    seqs = run_until_decided(["int4"], "ref", plan, run_wave, lambda *a: "INCONCLUSIVE")
    assert [(d.tasks, d.trials) for d, _ in ran] == [(10, 1), (10, 2)]
    assert seqs["int4"].stopped == "pool"
    assert "repeated trials repeat the first in both arms" in seqs["int4"].why
    ran2, run_wave2 = _waves(vary=True)  # trials that differ go on to the cap
    seqs2 = run_until_decided(["int4"], "ref", plan, run_wave2, lambda *a: "INCONCLUSIVE")
    assert [d.trials for d, _ in ran2] == [1, 2, 4, 8] and seqs2["int4"].stopped == "cap"


def test_trials_repeat_compares_every_later_trial_with_the_first() -> None:
    same = [_rec("t0", 0, True), _rec("t0", 1, True), _rec("t1", 0, False), _rec("t1", 1, False)]
    assert trials_repeat(same, 1)
    differ = [*same[:3], _rec("t1", 1, True)]
    assert not trials_repeat(differ, 1)
    assert not trials_repeat(same[::2], 1)  # no later trial: nothing shown
