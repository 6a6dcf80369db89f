"""Synthetic episode records with known ground truth, for calibration tests and benchmarks.

Each task has a difficulty (success probability shared by both arms, so a flat score is
really flat) and a frailty (a task-level multiplier of every failure rate, shared by both
arms, so calls cluster within tasks as they do in real runs). A candidate arm multiplies the
reference's per-call failure rate of chosen channels by a known ratio; its failures draw
names from the same name distribution as the reference.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from pytest_quantagent.store.records import CallRecord, EpisodeRecord
from pytest_quantagent.vocab.channels import Channel, TerminationReason
from pytest_quantagent.vocab.messages import Decision

#: Per-call reference failure rates used when none are given.
DEFAULT_RATES: dict[Channel, float] = {
    Channel.UNKNOWN_TOOL: 0.06,
    Channel.BAD_ARGUMENTS: 0.03,
    Channel.WRONG_ENTITY: 0.02,
}
_VALID_TOOLS = ("get_user_details", "get_order_details", "cancel_pending_order",
                "modify_pending_order_items", "transfer_to_human_agents", "calculate")
_UNKNOWN_NAMES = tuple(f"hallucinated_tool_{i}" for i in range(12))
_ENTITIES = tuple(f"#W{1000 + i}" for i in range(20))


@dataclass(frozen=True)
class SyntheticTasks:
    """Task-level parameters shared by every arm of one simulated cell."""

    task_ids: tuple[str, ...]
    success_p: np.ndarray
    frailty: np.ndarray
    seed: int = 0
    """Seeds the per-(task, trial) uniform shared by the arms (paired success draws)."""


def make_tasks(
    rng: np.random.Generator, n_tasks: int, *, success_mean: float = 0.6,
    frailty_shape: float = 2.0,
) -> SyntheticTasks:
    """Draw task difficulties (Beta around ``success_mean``) and gamma frailties (mean 1)."""
    if n_tasks < 1:
        raise ValueError(f"n_tasks={n_tasks} is not allowed; n_tasks must be >= 1")
    if not 0 < success_mean < 1:
        raise ValueError(f"success_mean={success_mean} is not allowed; it must be in (0, 1)")
    conc = 2.0
    p = rng.beta(success_mean * conc, (1 - success_mean) * conc, n_tasks)
    f = rng.gamma(frailty_shape, 1.0 / frailty_shape, n_tasks)
    seed = int(rng.integers(2**31))
    return SyntheticTasks(tuple(f"task_{i:04d}" for i in range(n_tasks)), p, f, seed)


def _name_weights() -> np.ndarray:
    w = 1.0 / np.arange(1, len(_UNKNOWN_NAMES) + 1)  # Zipf-like: a few favourite wrong names
    out: np.ndarray = w / w.sum()
    return out


def synthetic_episodes(
    rng: np.random.Generator,
    tasks: SyntheticTasks,
    *,
    arm: str,
    domain: str = "retail",
    trials: int = 3,
    calls_mean: float = 10.0,
    rates: Mapping[Channel, float] | None = None,
    ratio: Mapping[Channel, float] | None = None,
    success_shift: float = 0.0,
    success_noise: float = 0.3,
    max_errors: int = 10,
    decisions: bool = False,
) -> Iterator[EpisodeRecord]:
    """Yield one record per (task, trial).

    ``ratio`` multiplies the per-call rate of the given channels (the true rate ratio vs an
    arm simulated with ``ratio=None`` on the same ``tasks``). ``success_shift`` is added to
    every task's success probability (clipped to [0, 1]). Success draws share one uniform
    per (task, trial) across arms, except with probability ``success_noise`` where the arm
    draws its own (paired arms agree on most episodes, as with shared seeds). An episode reaching ``max_errors``
    failed calls ends ``too_many_errors`` with reward 0, like τ²-bench.
    """
    base = dict(DEFAULT_RATES if rates is None else rates)
    mult = dict(ratio or {})
    for ch in mult:
        base.setdefault(ch, 0.0)
    chans = list(base)
    probs = np.array([base[c] * mult.get(c, 1.0) for c in chans])
    weights = _name_weights()
    for t_idx, task_id in enumerate(tasks.task_ids):
        p_task = float(np.clip(tasks.success_p[t_idx] + success_shift, 0.0, 1.0))
        for trial in range(trials):
            n_calls = max(1, int(rng.poisson(calls_mean)))
            episode_f = tasks.frailty[t_idx] * rng.gamma(4.0, 0.25)
            pc = np.minimum(probs * episode_f, 0.95)
            total_p = min(0.95, float(pc.sum()))
            fail = rng.random(n_calls) < total_p
            which = rng.choice(len(chans), size=n_calls, p=pc / pc.sum()) if pc.sum() > 0 else \
                np.zeros(n_calls, dtype=int)
            n_err = 0
            calls: list[CallRecord] = []
            for i in range(n_calls):
                if fail[i]:
                    ch = chans[int(which[i])]
                    n_err += 1
                    if ch == Channel.UNKNOWN_TOOL:
                        name = _UNKNOWN_NAMES[int(rng.choice(len(_UNKNOWN_NAMES), p=weights))]
                        entity: str | None = name
                    else:
                        name = _VALID_TOOLS[i % len(_VALID_TOOLS)]
                        entity = _ENTITIES[int(rng.integers(len(_ENTITIES)))] \
                            if ch == Channel.WRONG_ENTITY else None
                    calls.append(CallRecord(step=2 * i + 1, requestor="assistant", name=name,
                                            error=True, channel=ch, entity=entity))
                else:
                    calls.append(CallRecord(step=2 * i + 1, requestor="assistant",
                                            name=_VALID_TOOLS[i % len(_VALID_TOOLS)],
                                            error=False))
                if n_err >= max_errors:
                    break
            if n_err >= max_errors:
                term, success = TerminationReason.TOO_MANY_ERRORS, False
            else:
                u = float(np.random.default_rng([tasks.seed, t_idx, trial]).random())
                if rng.random() < success_noise:
                    u = float(rng.random())
                term, success = TerminationReason.USER_STOP, u < p_task
            decs: list[Decision] = []
            if decisions:
                for c in calls[:8]:
                    m = float(rng.exponential(2.0))
                    decs.append(Decision(top1=c.name, top2="other", margin=m, chosen=c.name))
            yield EpisodeRecord(
                key=f"{domain}:{arm}:{task_id}:{trial}", model="synthetic", arm=arm,
                backend="mock", domain=domain, task_id=task_id, trial=trial,
                seed=t_idx * 1000 + trial, max_errors=max_errors, max_steps=200,
                termination=term, reward=1.0 if success else 0.0, success=success,
                n_errors=n_err, steps=2 * len(calls) + 4, calls=calls, decisions=decs,
                tokens=int(200 * max(1, len(calls))), duration_s=1.0,
            )
