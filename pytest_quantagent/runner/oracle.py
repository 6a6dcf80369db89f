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
import random
from dataclasses import dataclass
from typing import Literal

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.tasks import Task
from pytest_quantagent.env.toolkit import ToolType
from pytest_quantagent.runner.episode import EpisodeOutcome, run_episode
from pytest_quantagent.vocab.messages import AssistantMessage, Message, ToolCall

TRANSFER_TOOL = "transfer_to_human_agents"
TRANSFER_TEXT = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."
DONE_TEXT = "Is there anything else I can help you with?"


_IDENTITY_ASKS = (
    "Sure, I can help with that. Could you please provide the email address on your account?",
    "Happy to help! To verify your identity, what's your email? If you don't remember it, "
    "your full name and zip code work too.",
    "Before we start, may I have your first and last name and your zip code?",
)
_CONFIRM_ASKS = (
    "I'm about to perform {what}. Do you confirm (yes/no)?",
    "Shall I go ahead with the {what}?",
    "Please confirm you'd like me to proceed with the {what}.",
)
_CLOSINGS = (
    "All set. Is there anything else I can help you with?",
    "Your request is complete. Anything else I can do for you today?",
    "Done! Is there something else you need?",
)
_TRANSFERS = (
    TRANSFER_TEXT,
    "I'm transferring you to a human agent now. Please hold.",
)


class OracleAgent:
    """Implements the runner's ``Agent`` protocol by replaying the gold actions.

    ``style="direct"`` only does the actions; ``"conversational"`` also talks like a careful
    agent would (asks for identity first, asks for confirmation before each state-changing
    call, varies its closings, chosen by ``seed``), which checks that the scripted user
    copes with ordinary agent talk without derailing the task.
    """

    def __init__(
        self, domain: Domain, task: Task, *, style: Literal["direct", "conversational"] = "direct",
        seed: int = 0,
    ) -> None:
        if style not in ("direct", "conversational"):
            raise ValueError(f"oracle style must be 'direct' or 'conversational', got {style!r}")
        self.domain = domain
        self.task = task
        self.actions = task.gold_actions
        self.next = 0
        self.transferred = False
        self.style = style
        self.rng = random.Random(seed)
        self._asked_identity = False
        self._confirmed = -1

    async def act(self, view: list[Message]) -> AssistantMessage:
        return self.respond(view)

    def _say(self, options: tuple[str, ...], **fmt: str) -> AssistantMessage:
        return AssistantMessage(content=options[self.rng.randrange(len(options))].format(**fmt))

    def respond(self, view: list[Message]) -> AssistantMessage:
        chatty = self.style == "conversational"
        if chatty and not self._asked_identity:
            self._asked_identity = True
            return self._say(_IDENTITY_ASKS)
        while self.next < len(self.actions):
            action = self.actions[self.next]
            if action.requestor == "user":
                self.next += 1
                return AssistantMessage(content=self.domain.describe_user_action(action))
            if (
                chatty
                and self._confirmed != self.next
                and self.domain.tool_type(action.name) == ToolType.WRITE
            ):
                self._confirmed = self.next
                return self._say(_CONFIRM_ASKS, what=action.name.replace("_", " "))
            self.next += 1
            if action.name == TRANSFER_TOOL:
                self.transferred = True
            call = ToolCall(
                id=f"oracle_{self.next}", name=action.name,
                arguments=json.loads(json.dumps(action.arguments)), requestor="assistant",
            )
            return AssistantMessage(tool_calls=[call])
        if self.transferred:
            return self._say(_TRANSFERS) if chatty else AssistantMessage(content=TRANSFER_TEXT)
        ec = self.task.evaluation_criteria
        infos = list(ec.communicate_info or []) if ec is not None else []
        said = " ".join(f"{i}." for i in infos)
        closing = self._say(_CLOSINGS).content if chatty else DONE_TEXT
        return AssistantMessage(content=f"{said} {closing}".strip())


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
    style: Literal["direct", "conversational"] = "direct",
) -> OracleResult:
    """Run one task with the oracle agent and the domain's scripted user."""
    outcome = await run_episode(
        domain=domain,
        task=task,
        agent=OracleAgent(domain, task, style=style, seed=seed),
        user=domain.make_user(task, seed),
        max_steps=max_steps,
        max_errors=max_errors,
    )
    ok = outcome.success
    return OracleResult(task.id, ok, None if ok else failure_reason(outcome), outcome)


def run_oracle(
    domain: Domain, tasks: list[Task] | None = None, *, seed: int = 0,
    style: Literal["direct", "conversational"] = "direct",
) -> list[OracleResult]:
    """Run the oracle on every task (default: all of the domain's tasks), in order."""

    async def _all() -> list[OracleResult]:
        return [
            await run_oracle_task(domain, t, seed=seed, style=style)
            for t in (tasks if tasks is not None else domain.tasks)
        ]

    return asyncio.run(_all())
