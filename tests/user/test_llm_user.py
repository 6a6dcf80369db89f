"""The LLM user simulator with the mock backend playing the user."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pytest_quantagent.backends.base import GenerateRequest, Generation, RawToolCall
from pytest_quantagent.backends.mock import MockBackend
from pytest_quantagent.backends.wrapper import ModelClient
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.runner.episode import run_episode
from pytest_quantagent.runner.llm_user import (
    LLMUser,
    LLMUserSpec,
    UserTurnCache,
    user_system_prompt,
    view_to_openai,
)
from pytest_quantagent.vocab.channels import Channel, TerminationReason
from pytest_quantagent.vocab.messages import AssistantMessage, Message, ToolCall, UserMessage

SPEC = LLMUserSpec(model="scripted-user", backend="mock")


def _client(rule) -> tuple[ModelClient, MockBackend]:  # type: ignore[no-untyped-def]
    backend = MockBackend(rule=rule)
    return ModelClient(backend, concurrency=4), backend


class ScriptAgent:
    """An agent that says fixed things in order, then stops."""

    def __init__(self, turns: list[AssistantMessage]) -> None:
        self.turns = turns
        self.i = 0

    async def act(self, view: list[Message]) -> AssistantMessage:
        msg = self.turns[min(self.i, len(self.turns) - 1)]
        self.i += 1
        return msg.model_copy(deep=True)


def test_prompt_carries_the_scenario_and_stop_tokens() -> None:
    dom = get_domain("retail")
    task = dom.tasks[0]
    prompt = user_system_prompt(task, with_device=False)
    ins = task.user_scenario.instructions
    assert not isinstance(ins, str)
    assert ins.reason_for_call in prompt
    if ins.known_info:
        assert ins.known_info in prompt
    for tok in ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"):
        assert tok in prompt
    assert "Your device" not in prompt
    assert "Your device" in user_system_prompt(task, with_device=True)


def test_roles_are_flipped_for_the_user_model() -> None:
    view: list[Message] = [
        AssistantMessage(content="Hi! How can I help you today?"),
        UserMessage(content=None, tool_calls=[ToolCall(id="u1", name="check_status_bar", requestor="user")]),
    ]
    out = view_to_openai(view)
    assert out[0] == {"role": "user", "content": "Hi! How can I help you today?"}
    assert out[1]["role"] == "assistant" and out[1]["tool_calls"][0]["function"]["name"] == "check_status_bar"


def test_stop_token_ends_the_episode_with_user_stop() -> None:
    dom = get_domain("retail")
    task = dom.tasks[0]
    seen: list[GenerateRequest] = []

    def rule(req: GenerateRequest) -> str:
        seen.append(req)
        return "I want to cancel my order." if len(req.messages) <= 2 else "Thanks! ###STOP###"

    client, _ = _client(rule)
    user = LLMUser(client, SPEC, task, trial=0, seed=1)
    agent = ScriptAgent([AssistantMessage(content="Sure, anything else?")])
    out = asyncio.run(run_episode(domain=dom, task=task, agent=agent, user=user))
    assert out.termination == TerminationReason.USER_STOP
    assert seen[0].messages[0]["role"] == "system"
    assert "<scenario>" in seen[0].messages[0]["content"]
    assert seen[0].temperature == 0.0


def test_cached_replies_are_reused_across_arms(tmp_path: Path) -> None:
    dom = get_domain("retail")
    task = dom.tasks[0]
    calls = {"n": 0}

    def rule(req: GenerateRequest) -> str:
        calls["n"] += 1
        if len(req.messages) <= 6:
            return f"re: {req.messages[-1]['content']} (sample {calls['n']})"
        return "###STOP###"

    cache = UserTurnCache(tmp_path / "user_turns.jsonl")
    client, _ = _client(rule)
    # Two arms whose agents say the same first thing and then diverge.
    same = AssistantMessage(content="Hello, what do you need?")
    arm_a = ScriptAgent([same, AssistantMessage(content="A says this.")])
    arm_b = ScriptAgent([same, AssistantMessage(content="B says that.")])
    out_a = asyncio.run(run_episode(domain=dom, task=task, agent=arm_a,
                                    user=LLMUser(client, SPEC, task, trial=0, seed=5, cache=cache)))
    n_after_a = calls["n"]
    out_b = asyncio.run(run_episode(domain=dom, task=task, agent=arm_b,
                                    user=LLMUser(client, SPEC, task, trial=0, seed=5, cache=cache)))
    users_a = [m.content for m in out_a.messages if isinstance(m, UserMessage)]
    users_b = [m.content for m in out_b.messages if isinstance(m, UserMessage)]
    # Identical transcripts up to the agent's divergence → identical user bytes, no new sample.
    assert users_a[:2] == users_b[:2]
    assert users_a[2] != users_b[2]
    assert calls["n"] - n_after_a == len(users_b) - 2
    assert cache.hits >= 2
    # A fresh process reads the same answers from the file.
    again = UserTurnCache(tmp_path / "user_turns.jsonl")
    client2, backend2 = _client(rule)
    asyncio.run(run_episode(domain=dom, task=task, agent=ScriptAgent([same, AssistantMessage(content="A says this.")]),
                            user=LLMUser(client2, SPEC, task, trial=0, seed=5, cache=again)))
    assert backend2.calls == 0


def test_another_seed_or_user_model_does_not_share_the_cache() -> None:
    dom = get_domain("retail")
    task = dom.tasks[0]
    cache = UserTurnCache()
    client, backend = _client(lambda req: "###STOP###")
    agent = AssistantMessage(content="Hello")
    for seed, spec in ((1, SPEC), (2, SPEC), (1, LLMUserSpec(model="other", backend="mock"))):
        asyncio.run(run_episode(domain=dom, task=task, agent=ScriptAgent([agent]),
                                user=LLMUser(client, spec, task, trial=0, seed=seed, cache=cache)))
    assert backend.calls == 3


def test_user_device_calls_change_the_telecom_device() -> None:
    dom = get_domain("telecom")
    task = dom.tasks[0]

    def rule(req: GenerateRequest) -> Generation:
        last = req.messages[-1]
        if last["role"] == "tool":
            return Generation(content="Done, I checked. ###STOP###")
        if "status bar" in (last.get("content") or ""):
            return Generation(content=None, tool_calls=[RawToolCall(id="d1", name="check_status_bar", arguments="{}")])
        return Generation(content="My phone has no service.")

    client, _ = _client(rule)
    user = LLMUser(client, SPEC, task, trial=0, seed=3, tools=dom.user_tool_schemas())
    agent = ScriptAgent([AssistantMessage(content="Please look at your status bar and tell me what it shows.")])
    out = asyncio.run(run_episode(domain=dom, task=task, agent=agent, user=user, evaluate_reward=False))
    user_calls = [c for c in out.calls if c.requestor == "user"]
    assert [c.name for c in user_calls] == ["check_status_bar"]
    assert not user_calls[0].error
    assert out.termination == TerminationReason.USER_STOP


def test_user_malformed_call_is_the_users_and_counts() -> None:
    dom = get_domain("telecom")
    task = dom.tasks[0]

    def rule(req: GenerateRequest) -> Generation:
        if req.messages[-1]["role"] == "tool":
            return Generation(content="###STOP###")
        return Generation(content=None, tool_calls=[RawToolCall(id="d1", name="check_status_bar", arguments="{oops")])

    client, _ = _client(rule)
    user = LLMUser(client, SPEC, task, trial=0, seed=3, tools=dom.user_tool_schemas())
    out = asyncio.run(run_episode(domain=dom, task=task, agent=ScriptAgent([AssistantMessage(content="Hi")]),
                                  user=user, evaluate_reward=False))
    (bad,) = [c for c in out.calls if c.error]
    assert bad.requestor == "user" and bad.channel == Channel.MALFORMED_CALL
    assert out.n_errors == 1


def test_empty_user_turn_is_asked_again_then_ends_with_user_error() -> None:
    dom = get_domain("retail")
    task = dom.tasks[0]
    client, backend = _client(lambda req: Generation(content=None))
    out = asyncio.run(run_episode(domain=dom, task=task, agent=ScriptAgent([AssistantMessage(content="Hi")]),
                                  user=LLMUser(client, SPEC, task, trial=0, seed=0)))
    assert out.termination == TerminationReason.USER_ERROR
    assert backend.calls == 2


@pytest.mark.parametrize(("kw", "msg"), [({"temperature": -1.0}, "temperature must be >= 0"),
                                         ({"max_tokens": 0}, "max_tokens must be >= 1")])
def test_bad_spec(kw: dict[str, float], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        LLMUserSpec(model="m", backend="mock", **kw)  # type: ignore[arg-type]


def test_identity_pins_model_and_decoding() -> None:
    assert SPEC.identity == "llm:mock:scripted-user:t=0:max=512:seed=episode:p1"


def test_cache_file_first_answer_wins_and_torn_line_waits(tmp_path: Path) -> None:
    path = tmp_path / "user_turns.jsonl"
    a, b = UserTurnCache(path), UserTurnCache(path)  # two processes sharing the store
    first = a.put("k", UserMessage(content="first"))
    assert first.content == "first"
    # b had not seen a's line: its own answer loses, and it is not written twice.
    assert b.put("k", UserMessage(content="second")).content == "first"
    assert len(path.read_text().splitlines()) == 1
    # A line being written (no newline yet) is not read until it is complete.
    with path.open("a") as f:
        f.write('{"key": "k2", "message": {"role": "user", "content": "la')
    assert b.get("k2") is None
    with path.open("a") as f:
        f.write('ter"}}\n')
    got = b.get("k2")
    assert got is not None and got.content == "later"


def test_async_put_writes_the_same_line_as_put_and_first_answer_wins(tmp_path: Path) -> None:
    sync_path, async_path = tmp_path / "sync.jsonl", tmp_path / "async.jsonl"
    UserTurnCache(sync_path).put("k", UserMessage(content="first"))
    a, b = UserTurnCache(async_path), UserTurnCache(async_path)

    async def both() -> tuple[UserMessage, UserMessage]:
        first = await a.aput("k", UserMessage(content="first"))
        return first, await b.aput("k", UserMessage(content="second"))

    first, second = asyncio.run(both())
    assert first.content == second.content == "first"
    assert async_path.read_bytes() == sync_path.read_bytes()  # one line, byte for byte
    assert UserTurnCache(async_path).get("k").content == "first"  # type: ignore[union-attr]
    memory_only = UserTurnCache()
    assert asyncio.run(memory_only.aput("k", UserMessage(content="m"))).content == "m"
    assert memory_only.get("k").content == "m"  # type: ignore[union-attr]
