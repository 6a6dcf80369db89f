"""The oracle: runs tasks with the gold-playback agent (a data check).

:func:`run_oracle` plays each task's gold actions with
:class:`~pytest_quantagent.runner.gold.GoldAgent` (style ``"direct"``, or ``"conversational"``
to check that the scripted user copes with ordinary agent talk) against the domain's
scripted user. If every task scores 1 with the oracle, the tasks, the tools, the user
simulator and the evaluator agree with each other.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.tasks import Task
from pytest_quantagent.runner.episode import EpisodeOutcome, run_episode
from pytest_quantagent.runner.gold import GoldAgent

OracleStyle = Literal["direct", "conversational"]


def oracle_agent(domain: Domain, task: Task, *, style: OracleStyle = "direct", seed: int = 0) -> GoldAgent:
    """The oracle's agent for ``task``: the gold actions as they are (no domain plan)."""
    if style not in ("direct", "conversational"):
        raise ValueError(f"oracle style must be 'direct' or 'conversational', got {style!r}")
    return GoldAgent(domain, task, style=style, seed=seed, call_prefix="oracle")


@dataclass(frozen=True)
class OracleResult:
    task_id: str
    success: bool
    reason: str | None
    outcome: EpisodeOutcome


def failure_reason(outcome: EpisodeOutcome) -> str:
    """A one-line explanation of why an oracle episode did not score 1."""
    info = outcome.reward_info
    parts = [f"termination={outcome.termination.value}", f"reward={info.reward:g}"]
    if info.db_match is False:
        parts.append("DB hash differs from the gold replay")
    failed_ea = [a["func_name"] for a in info.env_assertions if not a["met"]]
    if failed_ea:
        parts.append(f"env assertions failed: {', '.join(failed_ea)}")
    failed_act = [a["action_id"] for a in info.action_checks if not a["met"]]
    if failed_act:
        parts.append(f"actions not matched: {', '.join(failed_act)}")
    failed_com = [c["info"] for c in info.communicate_checks if not c["met"]]
    if failed_com:
        parts.append(f"not communicated: {failed_com}")
    errs = [f"{c.name}: {c.detail}" for c in outcome.calls if c.error]
    if errs:
        parts.append(f"tool errors: {errs[:3]}")
    if info.note:
        parts.append(info.note)
    if outcome.error_message:
        parts.append(outcome.error_message)
    return "; ".join(parts)


async def run_oracle_task(
    domain: Domain, task: Task, *, seed: int = 0, max_steps: int = 200, max_errors: int = 10,
    style: OracleStyle = "direct",
) -> OracleResult:
    """Run one task with the oracle agent and the domain's scripted user."""
    outcome = await run_episode(
        domain=domain,
        task=task,
        agent=oracle_agent(domain, task, style=style, seed=seed),
        user=domain.make_user(task, seed),
        max_steps=max_steps,
        max_errors=max_errors,
    )
    ok = outcome.success
    return OracleResult(task.id, ok, None if ok else failure_reason(outcome), outcome)


def run_oracle(
    domain: Domain, tasks: list[Task] | None = None, *, seed: int = 0,
    style: OracleStyle = "direct",
) -> list[OracleResult]:
    """Run the oracle on every task (default: all of the domain's tasks), in order."""

    async def _all() -> list[OracleResult]:
        return [
            await run_oracle_task(domain, t, seed=seed, style=style)
            for t in (tasks if tasks is not None else domain.tasks)
        ]

    return asyncio.run(_all())
