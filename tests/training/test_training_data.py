"""The reference agent's training tasks never contain a test-split scenario."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.training.data import training_tasks

# Each generator's own notion of "the same scenario" (what makes two tasks one test item).
SCENARIO_KEY = {"retail": "_task_key", "telecom": "scenario_key"}


@pytest.mark.parametrize("name", ["retail", "telecom"])
def test_training_tasks_exclude_every_test_scenario(name: str) -> None:
    domain = get_domain(name)
    gen = importlib.import_module(f"pytest_quantagent_domains.{name}.generate")
    key = getattr(gen, SCENARIO_KEY[name])
    test_keys = {key(domain.task(t)) for t in domain.splits["test"]}
    # Seed 1000 and 2666 tasks are what the telecom corpus once drew from the bare module
    # generator: 48 of its 60 test scenarios came back among them.
    tasks = training_tasks(domain, 2666, seed=1000)
    assert len(tasks) > 2666 * 0.9
    leaked = sorted({key(t) for t in tasks} & test_keys, key=str)
    assert leaked == []


def test_prone_telecom_expert_calls_device_tools_then_asks_the_user() -> None:
    import asyncio
    import random
    from collections import Counter

    from pytest_quantagent.runner.episode import run_episode
    from pytest_quantagent.training.expert import (
        PRONE,
        ROBUST,
        ExpertAgent,
        decoy_ids,
        enum_arguments,
    )
    from pytest_quantagent.vocab.channels import Channel

    domain = get_domain("telecom")
    tasks = [domain.task(t) for t in domain.splits["train"]][:30]
    device_tools = {s["function"]["name"] for s in domain.user_tool_schemas()}

    async def play(noise: Any) -> tuple[int, Counter[Channel]]:
        ok, channels = 0, Counter[Channel]()
        for i, task in enumerate(tasks):
            agent = ExpertAgent(domain, task, noise, random.Random(i), enum_values=enum_arguments(domain),
                                decoys=decoy_ids([]))
            out = await run_episode(domain=domain, task=task, agent=agent, user=domain.make_user(task, i))
            ok += out.success
            for c in out.calls:
                if c.channel == Channel.CROSS_ROLE_TOOL:
                    assert c.requestor == "assistant" and c.name in device_tools
                channels.update([c.channel] if c.channel else [])
        return ok, channels

    ok, channels = asyncio.run(play(PRONE))
    assert ok == len(tasks)  # the expert recovers: it asks the user next
    assert channels[Channel.CROSS_ROLE_TOOL] >= 10
    ok, channels = asyncio.run(play(ROBUST))
    assert ok == len(tasks) and channels[Channel.CROSS_ROLE_TOOL] == 0


def test_restating_expert_has_ids_said_again_right_before_their_first_use() -> None:
    import asyncio
    import random

    from pytest_quantagent.runner.episode import run_episode
    from pytest_quantagent.runner.gold import RESTATE_QUESTIONS
    from pytest_quantagent.training.decisions import CLEAN
    from pytest_quantagent.training.expert import ExpertAgent, decoy_ids, enum_arguments
    from pytest_quantagent.vocab.messages import AssistantMessage, ToolMessage, UserMessage

    domain = get_domain("retail")
    tasks = [domain.task(t) for t in domain.splits["test"]]

    async def play(restate: bool) -> tuple[int, int, int]:
        ok = checked = asked = 0
        for i, task in enumerate(tasks):
            agent = ExpertAgent(domain, task, CLEAN, random.Random(i), enum_values=enum_arguments(domain),
                                decoys=decoy_ids([]), restate_ids=restate)
            out = await run_episode(domain=domain, task=task, agent=agent, user=domain.make_user(task, i))
            ok += out.success
            msgs = out.messages
            asked += sum(isinstance(m, AssistantMessage) and m.content in RESTATE_QUESTIONS.values() for m in msgs)
            if not restate:
                continue
            for key in RESTATE_QUESTIONS:
                for j, m in enumerate(msgs):
                    if isinstance(m, AssistantMessage) and m.tool_calls and key in m.tool_calls[0].arguments:
                        # the first call with this id: the user said it after the last tool result
                        last_tool = max(k for k in range(j) if isinstance(msgs[k], ToolMessage))
                        said = [u.content or "" for u in msgs[last_tool:j] if isinstance(u, UserMessage)]
                        assert any(m.tool_calls[0].arguments[key] in s for s in said), (task.id, key, said)
                        checked += 1
                        break
        return ok, checked, asked

    ok, _, asked = asyncio.run(play(False))
    assert ok == len(tasks)
    ok_r, checked, asked_r = asyncio.run(play(True))
    assert ok_r == len(tasks)  # the scripted user answers both questions
    assert checked >= 40 and asked_r > asked + 30


def test_confirm_args_shows_the_write_call_that_follows_verbatim() -> None:
    import asyncio
    import random

    from pytest_quantagent.bundled.chat import render_call
    from pytest_quantagent.env.toolkit import ToolType
    from pytest_quantagent.runner.episode import run_episode
    from pytest_quantagent.training.decisions import CLEAN
    from pytest_quantagent.training.expert import ExpertAgent, decoy_ids, enum_arguments
    from pytest_quantagent.vocab.messages import AssistantMessage

    domain = get_domain("retail")
    tasks = [domain.task(t) for t in domain.splits["test"]]

    async def play() -> tuple[int, int]:
        ok = writes = 0
        for i, task in enumerate(tasks):
            agent = ExpertAgent(domain, task, CLEAN, random.Random(i), enum_values=enum_arguments(domain),
                                decoys=decoy_ids([]), restate_ids=True, confirm_args=True)
            out = await run_episode(domain=domain, task=task, agent=agent, user=domain.make_user(task, i))
            ok += out.success
            said = [m for m in out.messages if isinstance(m, AssistantMessage)]
            for j, m in enumerate(said):
                if m.tool_calls and domain.tool_type(m.tool_calls[0].name) == ToolType.WRITE:
                    call = m.tool_calls[0]
                    shown = render_call(call.name, call.arguments)
                    # the agent's previous message is the confirmation that holds the call
                    assert said[j - 1].content == f"I will make this call: {shown} Do you confirm that I should proceed?"
                    writes += 1
        return ok, writes

    ok, writes = asyncio.run(play())
    assert ok == len(tasks)  # the scripted user still confirms
    assert writes >= 20  # 23 write calls in the 50 retail test tasks (2026-12-01)


def test_enum_arguments_add_the_values_a_domain_checks_inside_its_tools() -> None:
    from pytest_quantagent.training.expert import enum_arguments

    retail, telecom = get_domain("retail"), get_domain("telecom")
    # retail's cancel reason is a plain string in the schema; the tool checks the value
    assert retail.checked_values == {("cancel_pending_order", "reason"): ("no longer needed", "ordered by mistake")}
    assert enum_arguments(retail)[("cancel_pending_order", "reason")] == ["no longer needed", "ordered by mistake"]
    assert telecom.checked_values == {}


def test_a_per_kind_primed_rate_changes_that_kind_on_primed_pairs_only() -> None:
    import dataclasses
    import random

    from pytest_quantagent.training.expert import PRONE, Temptations, _stable_unit, task_kind

    domain = get_domain("telecom")
    task = next(domain.task(t) for t in domain.splits["train"])
    noise = dataclasses.replace(PRONE, p_primed_by_kind=(("cross_role", 0.42),))
    t = Temptations(domain, task, noise, random.Random(0))
    kind = task_kind(task)
    tools = sorted({a.name for a in domain.tasks[0].gold_actions} | set(domain.agent_tool_names))
    seen = {"primed": 0, "unprimed": 0}
    for tool in tools:
        for what in ("cross_role", "name"):
            primed = _stable_unit(domain.name, tool, kind, what) < PRONE.primed_share
            seen["primed" if primed else "unprimed"] += 1
            want = (0.42 if what == "cross_role" else PRONE.p_primed) if primed else PRONE.p_base
            assert t._p(tool, what) == want
    assert seen["primed"] > 0 and seen["unprimed"] > 0
