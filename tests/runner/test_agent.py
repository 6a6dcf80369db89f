"""LLMAgent: message conversion, tool-call parsing (malformed → parse_error, raw kept), hot path."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from pytest_quantagent.backends.base import GenerateRequest, Generation, RawToolCall
from pytest_quantagent.backends.mock import MockBackend
from pytest_quantagent.backends.wrapper import ModelClient
from pytest_quantagent.runner.agent import LLMAgent, generation_to_message, message_to_openai
from pytest_quantagent.vocab.messages import (
    AssistantMessage,
    Decision,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

TOOLS = [{"type": "function", "function": {"name": "get_user", "parameters": {"type": "object"}}}]


def _gen(*calls: tuple[str, str], content: str | None = None, raw: str | None = None) -> Generation:
    return Generation(content=content, tool_calls=[RawToolCall(f"c{i}", n, a) for i, (n, a) in enumerate(calls)],
                      raw_text=raw)


def test_valid_call_parsed() -> None:
    m = generation_to_message(_gen(("get_user", '{"user_id": "u1"}')), 0)
    assert m.tool_calls == [ToolCall(id="c0", name="get_user", arguments={"user_id": "u1"})]
    assert m.raw is None and m.content is None


@pytest.mark.parametrize("name,args,problem", [
    ("get_user", '{"user_id": "u1"', "not valid JSON"),
    ("get_user", "{'user_id': 'u1'}", "not valid JSON"),
    ("get_user", '["u1"]', "must be a JSON object, got list"),
    ("get_user", '"u1"', "must be a JSON object, got str"),
    ("", '{"user_id": "u1"}', "without a function name"),
])
def test_malformed_call_becomes_parse_error_with_raw_text(name: str, args: str, problem: str) -> None:
    m = generation_to_message(_gen((name, args), raw=f"<tool_call>{args}"), 3)
    (tc,) = m.tool_calls or []
    assert tc.parse_error is not None and problem in tc.parse_error
    assert tc.arguments == ({} if name else {"user_id": "u1"})  # parsable arguments are kept
    assert m.raw == f"<tool_call>{args}"


def test_raw_rebuilt_when_backend_has_no_raw_text() -> None:
    m = generation_to_message(_gen(("get_user", "{oops")), 0)
    assert m.raw is not None and "get_user({oops)" in m.raw


def test_empty_arguments_mean_no_arguments() -> None:
    m = generation_to_message(_gen(("list_all", "")), 0)
    assert m.tool_calls is not None and m.tool_calls[0].parse_error is None


def test_empty_turn_is_a_malformed_call() -> None:
    m = generation_to_message(Generation(content="", raw_text=""), 5)
    (tc,) = m.tool_calls or []
    assert tc.name == "" and tc.parse_error is not None and "empty turn" in tc.parse_error
    assert m.raw == ""


def test_decisions_and_usage_carried() -> None:
    d = Decision(top1="get", top2="find", margin=1.5, chosen="get_user")
    g = Generation(content="hello", decisions=[d], prompt_tokens=10, completion_tokens=2)
    m = generation_to_message(g, 0)
    assert m.decisions == [d] and m.usage == {"prompt_tokens": 10, "completion_tokens": 2}


def test_message_conversion() -> None:
    am = AssistantMessage(content=None, tool_calls=[ToolCall(id="c1", name="f", arguments={"a": 1}),
                                                    ToolCall(id="c2", name="g", parse_error="bad")])
    out = message_to_openai(am)
    assert out["tool_calls"][0] == {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    assert json.loads(out["tool_calls"][1]["function"]["arguments"]) == {}
    assert message_to_openai(ToolMessage(id="c1", content="Error: x", error=True)) == {
        "role": "tool", "tool_call_id": "c1", "content": "Error: x"}
    assert message_to_openai(UserMessage(content="hi")) == {"role": "user", "content": "hi"}
    assert message_to_openai(SystemMessage(content="s")) == {"role": "system", "content": "s"}


def test_agent_builds_requests_and_reuses_converted_prefix() -> None:
    seen: list[GenerateRequest] = []

    def rule(req: GenerateRequest) -> dict[str, object]:
        seen.append(req)
        return {"content": "ok"}

    agent = LLMAgent(ModelClient(MockBackend(rule=rule)), "POLICY", TOOLS, seed=11)
    view: list = [AssistantMessage(content="Hi!"), UserMessage(content="help")]
    asyncio.run(agent.act(view))
    view += [AssistantMessage(content="ok"), UserMessage(content="more")]
    asyncio.run(agent.act(view))
    r1, r2 = seen
    assert r1.messages[0] == {"role": "system", "content": "POLICY"}
    assert [m["role"] for m in r2.messages] == ["system", "assistant", "user", "assistant", "user"]
    assert r2.messages[1] is r1.messages[1]  # converted once, reused
    assert r1.tools is TOOLS and r1.seed != r2.seed
    # A view that diverges (e.g. a new episode) is converted afresh.
    asyncio.run(agent.act([UserMessage(content="other")]))
    assert [m["content"] for m in seen[2].messages] == ["POLICY", "other"]


@pytest.mark.slow  # a timing threshold: flaky on a loaded machine, so not in the default run
def test_harness_cpu_per_call_well_under_a_millisecond() -> None:
    agent = LLMAgent(ModelClient(MockBackend(responses=[{"tool_calls": [{"name": "get_user", "arguments": {"user_id": "u1"}}]}])),
                     "P" * 20_000, TOOLS * 16, seed=1)
    view: list = [AssistantMessage(content="Hi!"), UserMessage(content="help")]

    async def run() -> float:
        t0 = time.process_time()
        for i in range(300):
            am = await agent.act(view)
            view.append(am)
            view.append(ToolMessage(id=f"c{i}", content='{"name": "x", "orders": ["#W1", "#W2"]}'))
        return (time.process_time() - t0) / 300

    per_call = asyncio.run(run())
    # Measured ~0.05 ms on the 2-core dev box; 1 ms leaves room for a loaded CI machine.
    assert per_call < 1e-3, f"{per_call * 1000:.3f} ms per call"
