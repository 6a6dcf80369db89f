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
from typing import Any

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


# --------------------------------------------------------------------------- fast worlds


@dataclass(frozen=True)
class World:
    """A simulated world with known truth, drawn straight into :class:`ArmData` (vectorised,
    no records), for calibration at hundreds of cells per row.

    Success: each task has a difficulty ``p_t`` (Beta around ``success_mean``); the
    reference succeeds on (task, trial) when a shared uniform is below ``p_t``; the candidate
    redraws its uniform with probability ``success_noise`` (two-sided discordance), gets a
    task-level effect ``±min(task_effect, p_t, 1 − p_t)`` (random sign per task, mean 0), and
    loses a success with probability ``drop / mean(p_t)`` (only harmful flips: the true
    difference is exactly ``−drop``). Failures per agent call: ``rates`` × a task frailty
    (Gamma mean 1) × an episode frailty, the candidate's multiplied by ``ratio``; with
    ``shared`` the candidate's failures are coupled to the reference's (common random
    numbers, as with shared seeds). ``confined`` puts the failures of ``rates`` only in the
    first ``confined`` tasks. ``burst_p``: chance that an episode (either arm, independently)
    is stuck and adds ``burst_size`` failures of ``burst_channel``. ``user_calls`` and
    ``user_fail`` give the user's own device calls and their failure rate (equal arms).
    An episode with ``max_errors`` failures (agent + user) fails (τ²-bench).
    """

    n_tasks: int = 40
    trials: int = 3
    success_mean: float = 0.6
    success_noise: float = 0.3
    drop: float = 0.0
    task_effect: float = 0.0
    calls_mean: float = 10.0
    rates: tuple[tuple[Channel, float], ...] = tuple(DEFAULT_RATES.items())
    ratio: tuple[tuple[Channel, float], ...] = ()
    shared: bool = False
    confined: int = 0
    burst_p: float = 0.0
    burst_size: int = 9
    burst_channel: Channel = Channel.MALFORMED_CALL
    user_calls: float = 0.0
    user_fail: float = 0.0
    max_errors: int = 10

    def true_ratio(self, channel: Channel) -> float:
        return dict(self.ratio).get(channel, 1.0)


def _arm_data(domain: str, arm: str, tasks: np.ndarray, trials: np.ndarray,
              success: np.ndarray, counts: np.ndarray, agent_calls: np.ndarray,
              user_calls: np.ndarray, user_failed: np.ndarray, max_errors: int) -> Any:
    from collections import Counter

    from pytest_quantagent.metrics.episode import ArmData
    from pytest_quantagent.vocab.channels import ALL_CHANNELS, NAMED_CHANNELS

    n_err = counts.sum(axis=1) + user_failed
    stopped = n_err >= max_errors
    n_err = np.minimum(n_err, max_errors)
    ok = success & ~stopped
    terms = Counter({"user_stop": int((~stopped).sum()), "too_many_errors": int(stopped.sum())})
    uf: Counter[str] = Counter()
    if int(user_failed.sum()):
        uf[Channel.USER_TOOL_ERROR.value] = int(user_failed.sum())
    full = np.zeros((success.size, len(ALL_CHANNELS)), dtype=np.int64)
    full[:, : counts.shape[1]] = counts
    n = success.size
    return ArmData(
        domain=domain, arm=arm, task_ids=tasks, trials=trials, success=ok,
        n_errors=n_err.astype(np.int64), steps=np.full(n, 20, dtype=np.int64),
        tool_calls=(agent_calls + user_calls).astype(np.int64),
        channel_counts=full, failures=n_err.astype(np.int64),
        recovered=np.zeros(n, dtype=np.int64), tokens=np.full(n, np.nan),
        duration_s=np.full(n, np.nan), max_errors=max_errors,
        terminations={k: v for k, v in terms.items() if v}, infrastructure_errors=0,
        termination_of=np.where(stopped, "too_many_errors", "user_stop").astype(object),
        duplicates=0, names={c: Counter() for c in NAMED_CHANNELS},
        margins=np.zeros(0), agent_calls=agent_calls.astype(np.int64),
        user_calls=user_calls.astype(np.int64), user_failed=user_failed.astype(np.int64),
        user_failures=uf,
    )


def simulate_world(rng: np.random.Generator, world: World, *, domain: str = "retail",
                   arm: str = "int4", reference: str = "bf16") -> tuple[Any, Any]:
    """One cell of ``world``: the candidate's and the reference's :class:`ArmData`."""
    from pytest_quantagent.vocab.channels import ALL_CHANNELS

    w = world
    t, m = w.n_tasks, w.trials
    conc = 2.0
    p_t = rng.beta(w.success_mean * conc, (1 - w.success_mean) * conc, t)
    frail = rng.gamma(2.0, 0.5, t)
    task_idx = np.repeat(np.arange(t), m)
    e = t * m
    tasks = np.asarray([f"task_{i:04d}" for i in task_idx], dtype=object)
    trials = np.tile(np.arange(m), t)
    # success
    u = rng.random(e)
    s_ref = u < p_t[task_idx]
    u_a = np.where(rng.random(e) < w.success_noise, rng.random(e), u)
    eff = np.zeros(t)
    if w.task_effect:
        eff = rng.choice([-1.0, 1.0], t) * np.minimum(w.task_effect, np.minimum(p_t, 1 - p_t))
    s_arm = u_a < (p_t + eff)[task_idx]
    if w.drop:
        h = min(1.0, w.drop / float(p_t.mean()))
        s_arm &= rng.random(e) >= h
    # agent failures
    chans = list(ALL_CHANNELS)
    base = np.zeros(len(chans))
    for ch, v in w.rates:
        base[chans.index(ch)] = v
    mult = np.ones(len(chans))
    for ch, v in w.ratio:
        mult[chans.index(ch)] = v
    calls_r = np.maximum(1, rng.poisson(w.calls_mean, e))
    calls_a = calls_r.copy() if w.shared else np.maximum(1, rng.poisson(w.calls_mean, e))
    tf = frail.copy()
    if w.confined:
        tf = np.zeros(t)
        tf[: w.confined] = 1.0
    ep_r = tf[task_idx] * rng.gamma(4.0, 0.25, e)
    ep_a = ep_r if w.shared else tf[task_idx] * rng.gamma(4.0, 0.25, e)
    pr = np.minimum(np.outer(ep_r, base), 0.95)
    pa = np.minimum(np.outer(ep_a, base * mult), 0.95)
    y_r = rng.binomial(np.repeat(calls_r[:, None], len(chans), 1), pr)
    if w.shared:
        up = pa > pr
        extra_p = np.where(up, (pa - pr) / np.maximum(1 - pr, 1e-12), 0.0)
        keep_p = np.where(up, 1.0, pa / np.maximum(pr, 1e-12))
        kept = rng.binomial(y_r, np.clip(keep_p, 0, 1))
        y_a = kept + rng.binomial(np.repeat(calls_a[:, None], len(chans), 1) - y_r,
                                  np.clip(extra_p, 0, 1))
    else:
        y_a = rng.binomial(np.repeat(calls_a[:, None], len(chans), 1), pa)
    bj = chans.index(w.burst_channel)
    for y, calls in ((y_r, calls_r), (y_a, calls_a)):
        if w.burst_p:
            stuck = rng.random(e) < w.burst_p
            y[stuck, bj] += w.burst_size
            calls[stuck] += w.burst_size
    uc_r = rng.poisson(w.user_calls, e) if w.user_calls else np.zeros(e, dtype=np.int64)
    uc_a = rng.poisson(w.user_calls, e) if w.user_calls else np.zeros(e, dtype=np.int64)
    uf_r = rng.binomial(uc_r, w.user_fail) if w.user_fail else np.zeros(e, dtype=np.int64)
    uf_a = rng.binomial(uc_a, w.user_fail) if w.user_fail else np.zeros(e, dtype=np.int64)
    ref = _arm_data(domain, reference, tasks, trials, s_ref, y_r, calls_r, uc_r, uf_r,
                    w.max_errors)
    cand = _arm_data(domain, arm, tasks, trials, s_arm, y_a, calls_a, uc_a, uf_a, w.max_errors)
    return cand, ref


@dataclass(frozen=True)
class Answers:
    """Answer-level truth for :func:`add_answers`: per agent turn, mean output tokens
    (``tokens``, the candidate's × ``token_ratio``), the empty-answer and length-cut rates
    (the candidate's × ``empty_ratio`` / ``cut_ratio``). Tokens have a task scale shared by
    the arms (Gamma mean 1, shape 4) and an episode scale of each arm's own (Gamma mean 1,
    shape ``token_shape``); empty and cut turns a task frailty shared by the arms (Gamma
    mean 1, shape 2). An empty turn is counted as a ``malformed_call`` and an agent call,
    as the engine counts it."""

    tokens: float = 120.0
    token_ratio: float = 1.0
    token_shape: float = 3.0
    empty: float = 0.0
    empty_ratio: float = 1.0
    cut: float = 0.0
    cut_ratio: float = 1.0


def add_answers(rng: np.random.Generator, arm: Any, reference: Any, truth: Answers
                ) -> tuple[Any, Any]:
    """``arm`` and ``reference`` (:class:`ArmData` of one simulated cell, same tasks) with
    answer-level figures drawn from ``truth``; model turns per episode = agent calls + 1."""
    from dataclasses import replace

    from pytest_quantagent.metrics.episode import ANSWER_COLUMNS, CHANNEL_INDEX

    labels = np.unique(np.concatenate([arm.task_ids, reference.task_ids]).astype(str))
    scale = dict(zip(labels.tolist(), rng.gamma(4.0, 0.25, labels.size).tolist(), strict=True))
    frail = dict(zip(labels.tolist(), rng.gamma(2.0, 0.5, labels.size).tolist(), strict=True))
    mal = CHANNEL_INDEX[Channel.MALFORMED_CALL]

    def side(d: Any, token_mult: float, empty_mult: float, cut_mult: float) -> Any:
        tasks = d.task_ids.astype(str)
        turns = d.agent_calls.astype(np.int64) + 1
        s = np.array([scale[t] for t in tasks]) * rng.gamma(truth.token_shape,
                                                             1.0 / truth.token_shape, d.n)
        tokens = rng.poisson(truth.tokens * token_mult * s * turns)
        f = np.array([frail[t] for t in tasks])
        empty = rng.binomial(turns, np.minimum(truth.empty * empty_mult * f, 1.0))
        cut = rng.binomial(turns, np.minimum(truth.cut * cut_mult * f, 1.0))
        ans = np.full((d.n, len(ANSWER_COLUMNS)), 0.0)
        ans[:, 0], ans[:, 1], ans[:, 2], ans[:, 3] = turns, tokens, cut, empty
        counts = d.channel_counts.copy()
        counts[:, mal] += empty
        return replace(d, answers=ans, channel_counts=counts,
                       agent_calls=d.agent_calls + empty, tool_calls=d.tool_calls + empty)

    return (side(arm, truth.token_ratio, truth.empty_ratio, truth.cut_ratio),
            side(reference, 1.0, 1.0, 1.0))
