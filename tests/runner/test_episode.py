"""The episode loop: τ²-bench's termination, error budget, steps and views."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.tasks import InitialState
from pytest_quantagent.errors import InfrastructureError
from pytest_quantagent.runner.episode import GREETING, run_episode
from pytest_quantagent.vocab.channels import Channel, TerminationReason
from pytest_quantagent.vocab.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)

TOY_DIR = Path(__file__).resolve().parent.parent / "env" / "toy_domains"  # the `toy` fixture's


class ScriptAgent:
    """Plays a fixed list of messages (then repeats the last one); records its views."""

    def __init__(self, messages: list[AssistantMessage]) -> None:
        self.messages = messages
        self.i = 0
        self.views: list[list[Message]] = []

    async def act(self, view: list[Message]) -> AssistantMessage:
        self.views.append(list(view))
        m = self.messages[min(self.i, len(self.messages) - 1)]
        self.i += 1
        return m.model_copy(deep=True)


class ChattyUser:
    """Never stops; optionally makes one device call first; records its views."""

    def __init__(self, device_call: ToolCall | None = None) -> None:
        self.device_call = device_call
        self.views: list[list[Message]] = []

    async def act(self, view: list[Message]) -> UserMessage:
        self.views.append(list(view))
        if self.device_call is not None:
            c, self.device_call = self.device_call, None
            return UserMessage(tool_calls=[c])
        return UserMessage(content="please continue")


def bad_call(i: int) -> AssistantMessage:
    return AssistantMessage(tool_calls=[ToolCall(id=f"b{i}", name="get_customer", arguments={})])


def run(toy: Domain, agent: object, user: object, **kw: int) -> object:
    return asyncio.run(run_episode(domain=toy, task=toy.task("deposit"), agent=agent, user=user, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("k", [1, 2, 5, 10])
def test_too_many_errors_at_exactly_the_kth_error(toy: Domain, k: int) -> None:
    agent = ScriptAgent([bad_call(0)])  # a failing call every turn
    out = run(toy, agent, ChattyUser(), max_errors=k)
    assert out.termination == TerminationReason.TOO_MANY_ERRORS
    assert out.n_errors == k
    assert len(out.calls) == k and all(c.channel == Channel.UNKNOWN_TOOL for c in out.calls)
    assert out.calls[0].entity == "get_customer"
    # Greeting, user, then k × (agent call, tool result): 2 + 2k messages, 1 + 2k steps.
    assert len(out.messages) == 2 + 2 * k and out.steps == 1 + 2 * k
    assert out.reward == 0.0 and not out.success


def test_budget_counts_user_side_and_malformed_errors(toy: Domain) -> None:
    user = ChattyUser(ToolCall(id="u1", name="get_account", arguments={"account_id": "a1"}, requestor="user"))
    malformed = AssistantMessage(tool_calls=[ToolCall(id="m", name="", parse_error="Invalid JSON")])
    out = run(toy, ScriptAgent([malformed]), user, max_errors=3)
    assert out.termination == TerminationReason.TOO_MANY_ERRORS and out.n_errors == 3
    assert [c.channel for c in out.calls] == [Channel.CROSS_ROLE_TOOL, Channel.MALFORMED_CALL, Channel.MALFORMED_CALL]
    assert [c.requestor for c in out.calls] == ["user", "assistant", "assistant"]


def test_several_calls_in_one_message_are_one_step_and_may_overshoot(toy: Domain) -> None:
    two = AssistantMessage(tool_calls=[ToolCall(id="x", name="nope", arguments={}), ToolCall(id="y", name="nope2", arguments={})])
    out = run(toy, ScriptAgent([two]), ChattyUser(), max_errors=3)
    # τ²-bench checks the budget after the whole message: 2 then 4 errors.
    assert out.termination == TerminationReason.TOO_MANY_ERRORS and out.n_errors == 4
    assert out.steps == 5


def test_errors_are_cumulative_and_successes_do_not_reset(toy: Domain) -> None:
    good = AssistantMessage(tool_calls=[ToolCall(id="g", name="count_accounts", arguments={})])
    agent = ScriptAgent([bad_call(0), good, bad_call(1), good, bad_call(2)])
    out = run(toy, agent, ChattyUser(), max_errors=3)
    assert out.termination == TerminationReason.TOO_MANY_ERRORS
    assert [c.error for c in out.calls] == [True, False, True, False, True]


@pytest.mark.parametrize("max_steps", [1, 2, 7, 30])
def test_step_limit(toy: Domain, max_steps: int) -> None:
    out = run(toy, ScriptAgent([AssistantMessage(content="tell me more")]), ChattyUser(), max_steps=max_steps)
    assert out.termination == TerminationReason.MAX_STEPS
    assert out.steps == max_steps and len(out.messages) == max_steps + 1
    assert out.reward == 0.0


def test_step_limit_not_checked_while_a_tool_call_is_pending(toy: Domain) -> None:
    good = AssistantMessage(tool_calls=[ToolCall(id="g", name="count_accounts", arguments={})])
    out = run(toy, ScriptAgent([good]), ChattyUser(), max_steps=2)
    # step 1: user; step 2: agent's call → pending, so the check waits for step 3 (result).
    assert out.steps == 3 and isinstance(out.messages[-1], ToolMessage)


def test_agent_stop_and_greeting(toy: Domain) -> None:
    out = run(toy, ScriptAgent([AssistantMessage(content="Bye ###STOP###")]), ChattyUser())
    assert out.termination == TerminationReason.AGENT_STOP
    assert out.messages[0].content == GREETING and [m.turn_idx for m in out.messages] == [0, 1, 2]


def test_views_hide_the_other_roles_tool_traffic(toy: Domain) -> None:
    user = ChattyUser(ToolCall(id="u1", name="check_wifi", arguments={}, requestor="user"))
    good = AssistantMessage(tool_calls=[ToolCall(id="g", name="count_accounts", arguments={})])
    agent = ScriptAgent([good, AssistantMessage(content="ok"), AssistantMessage(content="###STOP###")])
    out = run(toy, agent, user)
    assert out.termination == TerminationReason.AGENT_STOP
    for view in agent.views:
        assert not any(isinstance(m, UserMessage) and m.tool_calls for m in view)
        assert not any(isinstance(m, ToolMessage) and m.requestor == "user" for m in view)
    for view in user.views:
        assert not any(isinstance(m, AssistantMessage) and m.tool_calls for m in view)
        assert not any(isinstance(m, ToolMessage) and m.requestor == "assistant" for m in view)
    assert any(isinstance(m, ToolMessage) and m.requestor == "user" for m in user.views[-1])


def test_agent_exceptions(toy: Domain) -> None:
    class Broken:
        def __init__(self, exc: Exception) -> None:
            self.exc = exc

        async def act(self, view: list[Message]) -> AssistantMessage:
            raise self.exc

    out = run(toy, Broken(RuntimeError("boom")), ChattyUser())
    assert out.termination == TerminationReason.AGENT_ERROR and "boom" in (out.error_message or "")
    with pytest.raises(InfrastructureError):
        run(toy, Broken(InfrastructureError("503")), ChattyUser())


def test_scripted_user_and_reward_on_success(toy: Domain) -> None:
    task = toy.task("deposit")
    agent = ScriptAgent([
        AssistantMessage(content="Sure. What is your name and zip code?"),
        AssistantMessage(tool_calls=[ToolCall(id="f", name="find_account", arguments={"name": "Ada"})]),
        AssistantMessage(tool_calls=[ToolCall(id="d", name="deposit", arguments={"account_id": "a1", "amount": 5})]),
        AssistantMessage(content="Your balance is now 15. Is there anything else I can help you with?"),
    ])
    out = asyncio.run(run_episode(domain=toy, task=task, agent=agent, user=toy.make_user(task, 0)))
    assert out.termination == TerminationReason.USER_STOP
    assert out.success and out.reward == 1.0 and out.n_errors == 0
    assert "Ada Lovelace" in (out.messages[3].content or "")


def test_bad_limits_are_refused(toy: Domain) -> None:
    with pytest.raises(ValueError, match="max_errors must be >= 1, got 0"):
        run(toy, ScriptAgent([bad_call(0)]), ChattyUser(), max_errors=0)


def test_limits_override_a_stop_in_the_same_step(toy: Domain) -> None:
    # τ²-bench checks max_steps after the step that stopped: the stop is overridden.
    out = run(toy, ScriptAgent([AssistantMessage(content="###STOP###")]), ChattyUser(), max_steps=2)
    assert out.termination == TerminationReason.MAX_STEPS and out.reward == 0.0


def test_task_message_history_replaces_the_greeting(toy: Domain) -> None:
    history = [
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Deposit 5 please"},
        {"role": "assistant", "tool_calls": [{"id": "h", "name": "deposit", "arguments": {"account_id": "a1", "amount": 5}}]},
        {"role": "tool", "id": "h", "content": "{}"},
    ]
    task = toy.task("deposit").model_copy(
        update={"initial_state": InitialState.model_validate({"message_history": history})}
    )
    agent = ScriptAgent([AssistantMessage(content="###STOP###")])
    out = asyncio.run(run_episode(domain=toy, task=task, agent=agent, user=ChattyUser()))
    # The history's last message is a tool result for the agent: the agent speaks next.
    assert [m.role for m in out.messages] == ["assistant", "user", "assistant", "tool", "assistant"]
    assert out.termination == TerminationReason.AGENT_STOP and out.steps == 1
    assert len(agent.views[0]) == 4
    env_balance = out.env.tools.db.accounts["a1"].balance  # type: ignore[union-attr]
    assert env_balance == 15.0, "history writes are applied to the environment"


def test_the_speaker_decides_the_requestor(toy: Domain) -> None:
    # A user implementation that forgets requestor="user" still only reaches user tools.
    sloppy = ToolCall(id="s", name="get_account", arguments={"account_id": "a1"})  # requestor defaults to assistant
    out = run(toy, ScriptAgent([AssistantMessage(content="ok"), AssistantMessage(content="###STOP###")]), ChattyUser(sloppy))
    [c] = out.calls
    assert (c.requestor, c.channel) == ("user", Channel.CROSS_ROLE_TOOL)
    assert isinstance(out.messages[1], UserMessage) and out.messages[1].tool_calls[0].requestor == "user"  # type: ignore[index]


def test_episodes_are_identical_across_processes(tmp_path: Path) -> None:
    # Different hash seeds change set/dict-of-str iteration order; transcripts must not move.
    import os
    import subprocess
    import sys

    code = (
        "import hashlib, json, os\n"
        "from pytest_quantagent.env import registry\n"
        "from pytest_quantagent.runner.oracle import run_oracle\n"
        "d = registry.get_domain('toy')\n"
        "h = hashlib.sha256()\n"
        "for r in run_oracle(d, seed=3, style='conversational'):\n"
        "    h.update(json.dumps([m.model_dump(mode='json') for m in r.outcome.messages]).encode())\n"
        "print(h.hexdigest())\n"
    )
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "QUANTAGENT_DOMAINS_DIR": str(TOY_DIR)}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1
