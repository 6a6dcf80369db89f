"""Run until decided: episodes in waves, every open cell re-judged after each wave with α
spent over the planned looks (:mod:`pytest_quantagent.stats.sequential`), each cell stopped
when its verdict is decided or at the cap.

The waves are planned before the first episode (:func:`plan_waves`): the first look is the
run's own design (``--quant-tasks`` × ``--quant-trials``), each later look about doubles the
episodes per arm, growing the tasks while the pool has more (``fresh:N`` up to the domain's
fresh cap, ``N`` up to its split) and then the trials, and the last look is the cap
(``--quant-max-episodes``). Every look re-runs the same request with a bigger design, so the
store resumes: a wave runs only the episodes the previous looks did not, and a killed run
restarts where it stopped (the same looks, the same levels, the same verdicts).

A cell stops when its verdict is not INCONCLUSIVE at its look's level, when its arms are not
comparable (a serving setting differs that the user did not accept: no number of episodes
can decide it, so it stops after its first look), when the next look
would exceed the cap, when the pool holds no more tasks and more trials would only repeat
the first (every repeated trial of both arms identical to the task's first: deterministic
decoding with a user that does not vary), or at the last planned look. The report's
``sequential`` block of each cell states the plan, the looks it took, the episodes used, the
α spent and why it stopped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_quantagent.stats.sequential import DEFAULT_RHO, SpendingPlan, geometric_looks
from pytest_quantagent.store.records import EpisodeRecord

DEFAULT_MAX_EPISODES = 1000
"""Episodes per arm of a cell's last look when no cap is given."""


@dataclass(frozen=True)
class Design:
    """Tasks × trials of one look (episodes per arm = their product)."""

    tasks: int
    trials: int

    @property
    def episodes(self) -> int:
        return self.tasks * self.trials


def plan_waves(first: Design, *, pool: int, grow_tasks: bool, max_episodes: int,
               factor: float = 2.0) -> list[Design]:
    """The planned designs, first look first: about ``factor``× the episodes at each look,
    tasks first (up to ``pool`` when ``grow_tasks``), then trials, never above
    ``max_episodes`` per arm."""
    if max_episodes < 1:
        raise ValueError(f"max_episodes={max_episodes} is not allowed; it must be >= 1")
    if first.episodes > max_episodes:
        raise ValueError(f"the first look already has {first.episodes} episodes per arm "
                         f"({first.tasks} tasks x {first.trials} trials), above the cap "
                         f"{max_episodes}; raise the cap or start smaller")
    pool = max(pool, first.tasks)
    out: list[Design] = []
    for target in geometric_looks(first.episodes, max_episodes, factor):
        if grow_tasks:
            tasks = min(pool, math.ceil(target / first.trials))
            trials = first.trials
            if tasks * trials < target:
                trials = max(first.trials, target // tasks)
        else:
            tasks = first.tasks
            trials = max(first.trials, target // tasks)
        while tasks * trials > max_episodes and trials > first.trials:
            trials -= 1
        if tasks * trials > max_episodes:
            tasks = max(first.tasks, max_episodes // trials)
        d = Design(tasks, trials)
        if not out or d.episodes > out[-1].episodes:
            out.append(d)
    return out


@dataclass
class Look:
    """One look at one cell."""

    look: int
    tasks: int
    trials: int
    episodes: int
    """Episodes of the candidate arm analysed at this look."""
    alpha: float
    verdict: str


@dataclass
class CellSequence:
    """What run-until-decided did for one cell."""

    arm: str
    looks: list[Look] = field(default_factory=list)
    stopped: str = ""
    """``decided``, ``cap`` (the last planned look), ``pool`` (no more tasks, and repeated
    trials only repeat the first) or ``not_comparable`` (served differently: undecidable)."""
    why: str = ""
    records: tuple[list[EpisodeRecord], list[EpisodeRecord]] | None = None
    """(the arm's, the reference's) records at the last look taken."""

    @property
    def alpha(self) -> float:
        """The level of the last look taken (what the cell's verdict was tested at)."""
        return self.looks[-1].alpha if self.looks else 0.0


@dataclass(frozen=True)
class SequentialPlan:
    """The waves and the spending of one run, fixed before any episode."""

    designs: tuple[Design, ...]
    spending: SpendingPlan

    @classmethod
    def make(cls, first: Design, *, pool: int, grow_tasks: bool, max_episodes: int,
             alpha: float, rho: float = DEFAULT_RHO) -> SequentialPlan:
        designs = tuple(plan_waves(first, pool=pool, grow_tasks=grow_tasks,
                                   max_episodes=max_episodes))
        return cls(designs, SpendingPlan(tuple(d.episodes for d in designs), alpha, rho))

    def describe(self, seq: CellSequence) -> dict[str, Any]:
        """The report's ``sequential`` block of a cell."""
        return {
            "planned_looks": [asdict(d) | {"episodes": d.episodes} for d in self.designs],
            "alphas": list(self.spending.alphas),
            "alpha": self.spending.alpha,
            "spending": self.spending.describe(),
            "looks": [asdict(lk) for lk in seq.looks],
            "looks_taken": len(seq.looks),
            "episodes_used": seq.looks[-1].episodes if seq.looks else 0,
            "alpha_spent": self.spending.spent(len(seq.looks)),
            "stopped": seq.stopped,
            "why": seq.why,
        }


def _signature(r: EpisodeRecord) -> str:
    return json.dumps([r.success, str(r.termination), r.n_errors, r.steps,
                       [[str(c.requestor), c.name, c.error, str(c.channel), c.arguments]
                        for c in r.calls]], sort_keys=True, default=str)


def trials_repeat(records: Sequence[EpisodeRecord], since_trial: int) -> bool:
    """True when every episode of trial ≥ ``since_trial`` is identical (outcome, budget use,
    steps, every call) to its task's trial 0: more trials of this arm add nothing."""
    first = {r.task_id: _signature(r) for r in records if r.trial == 0}
    later = [r for r in records if r.trial >= since_trial]
    return bool(later) and all(first.get(r.task_id) == _signature(r) for r in later)


RunWave = Callable[[Design, list[str]], Mapping[str, list[EpisodeRecord]]]
"""Runs (resumes) the reference and the open arms at a design; their records by label."""
JudgeLook = Callable[[str, list[EpisodeRecord], list[EpisodeRecord], float], str]
"""The verdict of a cell (arm label, its records, the reference's) at a level α."""


def run_until_decided(arms: Sequence[str], reference: str, plan: SequentialPlan,
                      run_wave: RunWave, judge_look: JudgeLook, *,
                      on_look: Callable[[int, SequentialPlan, dict[str, CellSequence]], None]
                      | None = None,
                      undecidable: Mapping[str, str] | None = None,
                      ) -> dict[str, CellSequence]:
    """Run the planned waves until every cell of ``arms`` (each compared with
    ``reference``) is decided or its looks are spent; each cell's sequence by label.
    ``undecidable`` names cells no look can decide (arm label → why, e.g. the serving
    settings that differ): they stop after their first look."""
    undecidable = undecidable or {}
    seqs = {a: CellSequence(a) for a in arms}
    open_ = list(arms)
    for k, design in enumerate(plan.designs, start=1):
        if not open_:
            break
        got = run_wave(design, list(open_))
        alpha = plan.spending.alpha_at(k)
        ref = list(got[reference])
        prev = plan.designs[k - 2] if k > 1 else None
        repeats = (prev is not None and design.trials > prev.trials and design.tasks == prev.tasks
                   and trials_repeat(ref, prev.trials))
        for arm in list(open_):
            recs = list(got[arm])
            verdict = judge_look(arm, recs, ref, alpha)
            seq = seqs[arm]
            seq.looks.append(Look(k, design.tasks, design.trials, len(recs), alpha, verdict))
            seq.records = (recs, ref)
            last = k == len(plan.designs)
            if verdict != "INCONCLUSIVE":
                seq.stopped, seq.why = "decided", f"decided at look {k} of {len(plan.designs)}"
            elif arm in undecidable:
                seq.stopped = "not_comparable"
                seq.why = (f"stopped at look {k}: {undecidable[arm]}; more episodes cannot "
                           "decide it")
            elif repeats and trials_repeat(recs, prev.trials if prev else 1):
                seq.stopped = "pool"
                seq.why = (f"undecided at look {k}: the pool's {design.tasks} tasks are all "
                           "played and repeated trials repeat the first in both arms "
                           "(deterministic decoding and user), so more add nothing")
            elif last:
                seq.stopped = "cap"
                seq.why = (f"undecided at the last planned look ({k}, {design.episodes} "
                           "episodes per arm, the cap)")
            else:
                continue
            open_.remove(arm)
        if on_look is not None:
            on_look(k, plan, seqs)
    return seqs


@dataclass
class SequentialRun:
    """A run until decided: each cell's sequence, the plan, and the last wave's run (its
    backends and endpoints; ``records`` holds each arm's records at its last look)."""

    plan: SequentialPlan
    cells: dict[str, CellSequence]
    run: Any
    """The last wave's :class:`~pytest_quantagent.runner.service.ArmsRun`."""

    def cell_block(self, arm: str) -> dict[str, Any]:
        return self.plan.describe(self.cells[arm])


def run_arms_until_decided(
    domain: str, arms: Sequence[Any], request: Any, store_dir: Any, cfg: Any, *,
    max_episodes: int = DEFAULT_MAX_EPISODES, cells: Sequence[str] | None = None,
    progress: Callable[[], Any] | None = None,
    on_look: Callable[[int, SequentialPlan, dict[str, CellSequence]], None] | None = None,
    comparability: Mapping[str, dict[str, Any] | None] | None = None,
) -> SequentialRun:
    """:func:`~pytest_quantagent.runner.service.run_arms` in planned waves until every cell
    (each arm of ``cells``, default every arm after the first, against ``arms[0]``) is decided
    at its look's α (``cfg`` gives the thresholds and the total α) or its looks are spent.

    ``request`` is the run's :class:`~pytest_quantagent.runner.service.RunRequest`: its tasks
    and trials are the first look. ``progress`` makes a fresh progress display per wave.
    ``comparability``: each cell's serving comparison (arm label → block of
    :func:`~pytest_quantagent.runner.preflight.compare_serving`): a cell whose arms are not
    comparable is judged with it at every look and stops after its first."""
    from dataclasses import replace

    from pytest_quantagent.analysis.arms import CellInput
    from pytest_quantagent.analysis.cell import analyze_cells, not_comparable
    from pytest_quantagent.env.registry import get_domain_for_split
    from pytest_quantagent.runner.selection import pool_capacity
    from pytest_quantagent.runner.service import run_arms

    if any(s.source != "model" for s in arms):
        raise ValueError("run-until-decided runs live arms only; replay arms (tau2-bench "
                         "results files) hold a fixed set of episodes")
    reference = arms[0].label
    labels = list(cells) if cells is not None else [s.label for s in arms[1:]]
    if not labels:
        raise ValueError("run-until-decided needs a reference and at least one other arm")
    sel = request.tasks
    dom = get_domain_for_split(domain, request.tau2_data, sel.split)
    first = Design(len(sel.task_ids(dom, arms)), request.trials)
    pool = pool_capacity(dom, sel, arms) if sel.growable else first.tasks
    plan = SequentialPlan.make(first, pool=pool, grow_tasks=sel.growable,
                               max_episodes=max_episodes, alpha=cfg.alpha)
    last: list[Any] = [None]
    comparability = comparability or {}
    undecidable = {arm: "not comparable: " + "; ".join(diff) for arm in labels
                   if (diff := not_comparable(comparability.get(arm)))}

    def wave(design: Design, open_arms: list[str]) -> Mapping[str, list[EpisodeRecord]]:
        tasks = sel.with_count(design.tasks) if sel.growable else sel
        req = replace(request, tasks=tasks, trials=design.trials,
                      preflight=request.preflight and last[0] is None)
        got = run_arms(domain, arms, req, store_dir, run=[reference, *open_arms],
                       progress=None if progress is None else progress())
        last[0] = got
        return got.records

    def judge(arm: str, recs: list[EpisodeRecord], ref: list[EpisodeRecord], alpha: float) -> str:
        cell, _ = analyze_cells([CellInput(domain=domain, arm=arm, records=recs,
                                           reference=reference, reference_records=ref,
                                           pool_tasks=pool, alpha=alpha,
                                           comparability=comparability.get(arm))], cfg)
        return str(cell[0].verdict)

    seqs = run_until_decided(labels, reference, plan, wave, judge, on_look=on_look,
                             undecidable=undecidable)
    return SequentialRun(plan, seqs, last[0])


__all__ = ["DEFAULT_MAX_EPISODES", "CellSequence", "Design", "Look", "SequentialPlan",
           "SequentialRun", "plan_waves", "run_arms_until_decided", "run_until_decided",
           "trials_repeat"]
