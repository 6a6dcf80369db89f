"""The oracle agent: performs a task's gold actions through the engine (a data check).

Agent-side gold actions are issued as tool calls, one per message, in order. User-side gold
actions (telecom device actions) are asked of the user in words the scripted user
understands (``Domain.describe_user_action``). When the actions are done the oracle says the
task's ``communicate_info`` and asks whether there is anything else (so the user stops), or,
when the gold actions transferred the user, announces the transfer.

If every task scores 1 with the oracle, the tasks, the tools, the user simulator and the
evaluator agree with each other.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.messages import AssistantMessage, Message, ToolCall
from pytest_quantagent.env.tasks import Task
from pytest_quantagent.runner.episode import EpisodeOutcome, run_episode

TRANSFER_TOOL = "transfer_to_human_agents"
TRANSFER_TEXT = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."
DONE_TEXT = "Is there anything else I can help you with?"


class OracleAgent:
    """Implements the runner's ``Agent`` protocol by replaying the gold actions."""

    def __init__(self, domain: Domain, task: Task) -> None:
        self.domain = domain
        self.task = task
        self.actions = task.gold_actions
        self.next = 0
        self.transferred = False

    async def act(self, view: list[Message]) -> AssistantMessage:
        return self.respond(view)

    def respond(self, view: list[Message]) -> AssistantMessage:
        while self.next < len(self.actions):
            action = self.actions[self.next]
            self.next += 1
            if action.requestor == "user":
                return AssistantMessage(content=self.domain.describe_user_action(action))
            if action.name == TRANSFER_TOOL:
                self.transferred = True
            call = ToolCall(
                id=f"oracle_{self.next}", name=action.name,
                arguments=json.loads(json.dumps(action.arguments)), requestor="assistant",
            )
            return AssistantMessage(tool_calls=[call])
        if self.transferred:
            return AssistantMessage(content=TRANSFER_TEXT)
        ec = self.task.evaluation_criteria
        infos = list(ec.communicate_info or []) if ec is not None else []
        said = " ".join(f"{i}." for i in infos)
        return AssistantMessage(content=f"{said} {DONE_TEXT}".strip())


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
    domain: Domain, task: Task, *, seed: int = 0, max_steps: int = 200, max_errors: int = 10
) -> OracleResult:
    """Run one task with the oracle agent and the domain's scripted user."""
    outcome = await run_episode(
        domain=domain,
        task=task,
        agent=OracleAgent(domain, task),
        user=domain.make_user(task, seed),
        max_steps=max_steps,
        max_errors=max_errors,
    )
    ok = outcome.success
    return OracleResult(task.id, ok, None if ok else failure_reason(outcome), outcome)


def run_oracle(
    domain: Domain, tasks: list[Task] | None = None, *, seed: int = 0
) -> list[OracleResult]:
    """Run the oracle on every task (default: all of the domain's tasks), in order."""

    async def _all() -> list[OracleResult]:
        return [await run_oracle_task(domain, t, seed=seed) for t in (tasks or domain.tasks)]

    return asyncio.run(_all())
