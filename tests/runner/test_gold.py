"""The gold-playback agent (runner/gold.py): styles, the domain's gold plan, detours."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence, Set
from typing import Any

import pytest

from pytest_quantagent.env.domain import LOOKUP, Domain, GoldPlan
from pytest_quantagent.env.tasks import Action, Task
from pytest_quantagent.runner.episode import EpisodeOutcome, run_episode
from pytest_quantagent.runner.gold import CONFIRM_TEXT, DONE_TEXT, GoldAgent
from pytest_quantagent.runner.oracle import oracle_agent
from pytest_quantagent.vocab.channels import Channel
from pytest_quantagent.vocab.messages import AssistantMessage, Message


class CheckFirst(GoldPlan):
    """A troubleshooting plan: check the wifi icon first, and read the account (a LOOKUP
    step) before the deposit."""

    def __init__(self, task: Task, db: Any) -> None:
        check = Action(action_id="check", requestor="user", name="check_wifi")
        lookup = Action(action_id="lookup", name=LOOKUP, arguments={"account_id": "a1"})
        gold = task.gold_actions
        super().__init__([check, *gold[:1], lookup, *gold[1:]] if task.id == "deposit" else gold)
        self.seen: list[tuple[str, str]] = []
        self.read = False

    def before(self, action: Action, view: Sequence[Message], visible: str, asked: Set[str]) -> str | Action | None:
        self.seen.append((action.name, visible))
        if action.name == LOOKUP and not self.read:
            self.read = True
            return Action(action_id="r", name="get_account", arguments=dict(action.arguments))
        return None


def _with_plan(toy: Domain) -> Domain:
    return Domain(
        name="toy", policy=toy.policy, db=toy.db, tasks=toy.tasks, agent_toolkit=toy.agent_toolkit,
        user_toolkit=toy.user_toolkit, user_db=toy.user_db, device_intents=toy.device_intents,
        classify_error=toy.classify_error, gold_plan=CheckFirst,
    )


def _play(domain: Domain, task: Task, agent: GoldAgent, seed: int = 0) -> EpisodeOutcome:
    return asyncio.run(run_episode(domain=domain, task=task, agent=agent, user=domain.make_user(task, seed)))


def _said(out: EpisodeOutcome) -> list[str]:
    """Each agent turn after the greeting: its text, or ``call id name(args)``."""
    turns = []
    for m in out.messages[1:]:
        if isinstance(m, AssistantMessage):
            if m.tool_calls:
                turns += [f"call {c.id} {c.name}({sorted(c.arguments.items())})" for c in m.tool_calls]
            else:
                turns.append(m.content or "")
    return turns


def test_default_gold_plan_is_the_gold_actions_and_each_episode_gets_its_own(toy: Domain) -> None:
    task = toy.task("deposit")
    plan = toy.gold_plan(task)
    assert plan.actions == task.gold_actions and plan.actions is not task.gold_actions
    assert plan.before(task.gold_actions[0], [], "", set()) is None
    assert toy.gold_plan(task) is not plan


def test_careful_agent_walks_the_domains_plan_reads_first_and_confirms_writes(toy: Domain) -> None:
    domain = _with_plan(toy)
    task = domain.task("deposit")
    agent = GoldAgent(domain, task, style="careful")
    assert isinstance(agent.plan, CheckFirst)
    out = _play(domain, task, agent)
    assert out.success, out.reward_info
    assert _said(out) == [
        "Please check your wifi icon.",
        "call gold_1 find_account([('name', 'Ada')])",
        "call gold_2 get_account([('account_id', 'a1')])",
        CONFIRM_TEXT,
        "call gold_3 deposit([('account_id', 'a1'), ('amount', 5.0)])",
        f"15. {DONE_TEXT}",
    ]
    # The plan saw what the agent had seen: the account id came from find_account's result.
    lookup_visible = [v for name, v in agent.plan.seen if name == LOOKUP]
    assert lookup_visible and "a1" in lookup_visible[0] and "5 dollars" in lookup_visible[0]


def test_direct_and_conversational_play_the_gold_actions_without_the_plan(toy: Domain) -> None:
    domain = _with_plan(toy)
    task = domain.task("deposit")
    out = _play(domain, task, oracle_agent(domain, task))
    assert out.success
    assert _said(out) == [
        "call oracle_1 find_account([('name', 'Ada')])",
        "call oracle_2 deposit([('account_id', 'a1'), ('amount', 5.0)])",
        f"15. {DONE_TEXT}",
    ]
    chatty = _said(_play(domain, task, oracle_agent(domain, task, style="conversational", seed=3), seed=3))
    calls = [t for t in chatty if t.startswith("call ")]
    assert calls == ["call oracle_1 find_account([('name', 'Ada')])",
                     "call oracle_2 deposit([('account_id', 'a1'), ('amount', 5.0)])"]
    assert "check" not in " ".join(chatty) and "deposit" in chatty[chatty.index(calls[1]) - 1]


class Detour:
    """Tries each gold step's wrong call once: the user's tool itself, an unknown account."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int, str]] = []

    def before_user_step(self, step: int, action: Action) -> tuple[str, dict[str, Any]] | None:
        self.asked.append(("user", step, action.name))
        return (action.name, dict(action.arguments)) if len(self.asked) == 1 else None

    def before_call(self, step: int, action: Action) -> tuple[str, dict[str, Any]] | None:
        self.asked.append(("call", step, action.name))
        if action.name == "deposit" and ("call", step, "deposit") not in self.asked[:-1]:
            return "deposit", {**action.arguments, "account_id": "a9"}
        return None


@pytest.mark.parametrize("style", ["direct", "careful"])
def test_detours_come_before_the_gold_step_and_the_agent_goes_on(toy: Domain, style: Any) -> None:
    wifi, deposit = toy.task("wifi"), toy.task("deposit")
    detour = Detour()
    out = _play(toy, wifi, GoldAgent(toy, wifi, style=style, detours=detour))
    assert out.success
    assert [(c.name, c.channel) for c in out.calls] == [("toggle_wifi", Channel.CROSS_ROLE_TOOL),
                                                         ("toggle_wifi", None)]
    assert out.calls[1].requestor == "user"  # the user did it after being asked
    assert detour.asked == [("user", 0, "toggle_wifi"), ("user", 0, "toggle_wifi")]

    detour = Detour()
    out = _play(toy, deposit, GoldAgent(toy, deposit, style=style, detours=detour))
    assert out.success
    assert [(c.name, c.arguments.get("account_id"), c.channel) for c in out.calls] == [
        ("find_account", None, None), ("deposit", "a9", Channel.WRONG_ENTITY), ("deposit", "a1", None)]
    assert [a for a in detour.asked if a[0] == "call"] == [
        ("call", 0, "find_account"), ("call", 1, "deposit"), ("call", 1, "deposit")]


def test_styles_are_checked(toy: Domain) -> None:
    task = toy.task("deposit")
    with pytest.raises(ValueError, match="gold agent style must be one of direct, conversational, careful"):
        GoldAgent(toy, task, style="chatty")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="oracle style must be 'direct' or 'conversational'"):
        oracle_agent(toy, task, style="careful")  # type: ignore[arg-type]
