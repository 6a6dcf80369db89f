"""The ``transformers`` backend with a real pretrained model (SmolLM2-135M-Instruct) on CPU.

A plumbing check, not a precision comparison (the weights come from a 4-bit GGUF): the chat
template renders the retail tools, the model's turn is parsed into a tool call or text, a
cut-off call becomes ``malformed_call`` in the engine, and a whole retail episode runs
through the runner's batch layer and store with this model as the agent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pytest_quantagent.backends.base import BackendOptions, GenerateRequest, Generation
from pytest_quantagent.backends.transformers import TransformersBackend
from pytest_quantagent.backends.wrapper import ModelClient
from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.quant.arms import ArmSpec
from pytest_quantagent.quant.loading import create_arm_backend
from pytest_quantagent.runner.agent import generation_to_message
from pytest_quantagent.runner.batch import RunSettings, plan_episodes, run_arm
from pytest_quantagent.runner.build import AgentPrompt, ArmRuntime
from pytest_quantagent.runner.episode import GREETING
from pytest_quantagent.store.jsonl import EpisodeStore
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import ALL_CHANNELS, Channel, TerminationReason

pytestmark = pytest.mark.slow

OPENING = (
    "Hi, I want to cancel my pending order #W2378156 because I ordered it by mistake. "
    "My email is mira.okafor@example.com."
)


@pytest.fixture(scope="module")
def retail() -> Domain:
    return get_domain("retail")


@pytest.fixture(scope="module")
def prompt(retail: Domain) -> AgentPrompt:
    return AgentPrompt.for_domain(retail)


@pytest.fixture(scope="module")
def arm(smollm2_dir: Path) -> ArmSpec:
    # 96 new tokens: enough for one call or a sentence, short enough for a busy CPU.
    return ArmSpec(
        label="smollm2",
        backend="transformers",
        model="smollm2-135m-instruct",
        path=str(smollm2_dir),
        options={"max_new_tokens": 96},
    )


@pytest.fixture(scope="module")
def backend(arm: ArmSpec) -> TransformersBackend:
    # Built through the registry, exactly as `quantagent run` / the plugin build an arm.
    b = create_arm_backend(arm, BackendOptions(concurrency=1))
    assert isinstance(b, TransformersBackend)
    return b


def _request(prompt: AgentPrompt, max_tokens: int) -> GenerateRequest:
    return GenerateRequest(
        messages=[
            {"role": "system", "content": prompt.system_prompt},
            {"role": "user", "content": OPENING},
        ],
        tools=prompt.tools,
        seed=0,
        max_tokens=max_tokens,
    )


@pytest.fixture(scope="module")
def first_turn(backend: TransformersBackend, prompt: AgentPrompt) -> Generation:
    return asyncio.run(backend.generate(_request(prompt, 96)))


def test_chat_template_renders_tools_and_tool_turns(
    backend: TransformersBackend, prompt: AgentPrompt
) -> None:
    request = _request(prompt, 48)
    text = backend.hf_tok.decode(backend.prompt_ids(request))
    assert text.startswith("<|im_start|>system\n" + prompt.system_prompt[:40])
    assert "<tools>" in text and "<tool_call>" in text
    for tool in prompt.tools:
        assert f'"name": "{tool["function"]["name"]}"' in text
    assert text.endswith("<|im_start|>assistant\n")
    # A later turn: an assistant tool call (content null) and its result render too.
    history = GenerateRequest(
        messages=[
            *request.messages,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c0",
                        "type": "function",
                        "function": {
                            "name": "find_user_id_by_email",
                            "arguments": '{"email": "mira.okafor@example.com"}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c0", "content": "mira_okafor_1234"},
        ],
        tools=prompt.tools,
        seed=0,
    )
    later = backend.hf_tok.decode(backend.prompt_ids(history))
    assert later.startswith(text[: -len("<|im_start|>assistant\n")])
    assert '<tool_call>\n{"name": "find_user_id_by_email", "arguments": {"email":' in later
    assert "<tool_response>\nmira_okafor_1234\n</tool_response>" in later


def test_turn_is_parsed_into_calls_or_text(
    first_turn: Generation, backend: TransformersBackend, prompt: AgentPrompt, retail: Domain
) -> None:
    gen = first_turn
    assert gen.prompt_tokens == len(backend.prompt_ids(_request(prompt, 96)))
    assert gen.prompt_tokens is not None and gen.prompt_tokens > 1000  # policy + 16 schemas
    assert gen.completion_tokens is not None and 0 < gen.completion_tokens <= 96
    assert gen.raw_text
    msg = generation_to_message(gen, turn=0)
    assert msg.tool_calls or msg.content
    env = retail.make_environment(retail.tasks[0])
    named = [c for c in msg.tool_calls or [] if c.name]
    # Every named call got a margin at its name, with top-1 at least top-2. (A call whose
    # JSON was cut off still has a decision at the name it started to write.)
    chosen = [d.chosen for d in gen.decisions]
    assert all(c.name in chosen for c in named)
    assert all(d.chosen and d.chosen in gen.raw_text for d in gen.decisions)
    assert all(d.margin >= 0 for d in gen.decisions)
    for call in msg.tool_calls or []:
        dispatch = env.execute(call)
        assert dispatch.message.content
        if dispatch.channel is not None:
            assert dispatch.channel in ALL_CHANNELS
            assert dispatch.message.error and dispatch.message.content.startswith("Error:")


def test_cut_off_call_is_malformed_not_a_crash(
    backend: TransformersBackend, prompt: AgentPrompt, first_turn: Generation, retail: Domain
) -> None:
    # Observed property of this model: on this prompt it opens its turn with the
    # template's call tag. Cutting the turn a few tokens later leaves broken JSON.
    assert first_turn.raw_text is not None and first_turn.raw_text.startswith("<tool_call>")
    gen = asyncio.run(backend.generate(_request(prompt, 6)))
    assert gen.raw_text is not None and gen.raw_text.startswith("<tool_call>")
    msg = generation_to_message(gen, turn=0)
    assert msg.tool_calls is not None and len(msg.tool_calls) == 1
    call = msg.tool_calls[0]
    assert call.parse_error is not None
    assert msg.raw == gen.raw_text
    dispatch = retail.make_environment(retail.tasks[0]).execute(call)
    assert dispatch.channel is Channel.MALFORMED_CALL
    assert dispatch.message.error


def test_retail_episode_end_to_end(
    backend: TransformersBackend, arm: ArmSpec, retail: Domain, tmp_path: Path
) -> None:
    runtime = ArmRuntime(arm=arm, backend=backend, client=ModelClient(backend, concurrency=1))
    plan = plan_episodes([retail.tasks[0].id], trials=1, run_seed=0)
    # A tight budget and step limit keep one episode to a few model turns on a busy CPU.
    settings = RunSettings(max_errors=2, max_steps=8, concurrency=1, episode_timeout_s=1800)
    store = EpisodeStore(tmp_path / "store")

    async def go() -> list[EpisodeRecord]:
        try:
            return await run_arm(
                domain=retail, runtime=runtime, plan=plan, settings=settings, store=store
            )
        finally:
            await runtime.aclose()

    [record] = asyncio.run(go())
    assert record.scored, record.error_message
    assert record.termination in {
        TerminationReason.TOO_MANY_ERRORS,
        TerminationReason.MAX_STEPS,
        TerminationReason.USER_STOP,
        TerminationReason.AGENT_STOP,
    }
    assert record.steps <= 8
    assert record.n_errors == sum(c.error for c in record.calls)
    assert all(c.channel is not None for c in record.calls if c.error)
    if record.termination is TerminationReason.TOO_MANY_ERRORS:
        assert record.n_errors == 2 and not record.success
    # Every assistant turn after the engine's fixed greeting came from the model.
    assistant = [m for m in record.messages if m.role == "assistant"]
    assert assistant[0].content == GREETING and assistant[0].usage is None
    assert len(assistant) > 1 and all(m.usage for m in assistant[1:])
    assert record.tokens is not None and record.tokens > 1000
    assert record.backend == "transformers" and record.arm == "smollm2"
    # The episode went to disk and reads back identical.
    stored = EpisodeStore(tmp_path / "store").load()
    assert stored[record.key] == record
