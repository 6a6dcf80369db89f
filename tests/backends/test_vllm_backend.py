"""The vLLM backend on a machine without vLLM: a clear install hint, and the pure
conversion code (logprobs → margins, output text → calls) on vLLM-shaped objects."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import pytest

from pytest_quantagent.backends import vllm as vllm_backend
from pytest_quantagent.errors import MissingDependencyError
from pytest_quantagent.quant.arms import ArmSpec
from pytest_quantagent.quant.loading import create_arm_backend

needs_no_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here"
)


@needs_no_vllm
def test_missing_vllm_gives_the_exact_pip_line() -> None:
    arm = ArmSpec(label="int4", backend="vllm", model="some/model")
    with pytest.raises(MissingDependencyError) as ei:
        create_arm_backend(arm)
    assert "pip install 'pytest-quantagent[vllm]'" in str(ei.value)
    assert "vLLM backend" in str(ei.value)


def test_unknown_option_is_refused_with_allowed_list() -> None:
    arm = ArmSpec(label="int4", backend="vllm", model="m", options={"gpu_mem": 0.5})
    with pytest.raises(ValueError, match=r"unknown vllm option.*gpu_mem.*allowed: .*gpu_memory_utilization"):
        create_arm_backend(arm)


def test_quantization_mapping() -> None:
    assert vllm_backend.vllm_quantization(None) is None
    assert vllm_backend.vllm_quantization("fp8-dynamic") == "fp8"
    # Compressed-tensors checkpoints carry their own scheme: vLLM reads it from the config.
    assert vllm_backend.vllm_quantization("w4a16-awq-g128") is None


@dataclass
class _LP:
    logprob: float
    rank: int | None
    decoded_token: str


def test_margins_at_tool_name_from_vllm_logprobs() -> None:
    # Generated: '<tool_call>{"name": "get_user", ...' with top-2 at every token.
    pieces = [
        ({1: _LP(-0.01, 1, "<tool_call>"), 2: _LP(-5.0, 2, "Hello")}),
        ({3: _LP(-0.02, 1, '{"name": "'), 4: _LP(-4.0, 2, "{")}),
        ({5: _LP(-0.40, 1, "get_user"), 6: _LP(-1.10, 2, "find_user")}),
        ({7: _LP(-0.01, 1, '"}'), 8: _LP(-6.0, 2, '",')}),
    ]
    tokens = vllm_backend.logprobs_to_tokens(pieces)
    assert [t["token"] for t in tokens] == ["<tool_call>", '{"name": "', "get_user", '"}']
    gen = vllm_backend.output_to_generation(
        '<tool_call>{"name": "get_user"}</tool_call>', tokens, prompt_tokens=10, completion_tokens=4
    )
    assert [c.name for c in gen.tool_calls] == ["get_user"]
    assert len(gen.decisions) == 1
    d = gen.decisions[0]
    assert (d.top1, d.top2, d.chosen) == ("get_user", "find_user", "get_user")
    assert d.margin == pytest.approx(0.70)


def test_sampled_token_outside_the_top_two_is_the_generated_token() -> None:
    # Under sampling vLLM returns the sampled token (rank 3 here) beside the top-2.
    entry = {1: _LP(-0.1, 1, "a"), 2: _LP(-0.5, 2, "b"), 3: _LP(-2.0, 3, "c")}
    (tok,) = vllm_backend.logprobs_to_tokens([entry], token_ids=[3])
    assert tok["token"] == "c"
    assert [t["token"] for t in tok["top_logprobs"]] == ["a", "b"]
    (greedy,) = vllm_backend.logprobs_to_tokens([entry])
    assert greedy["token"] == "a"


def test_unparseable_call_keeps_raw_text_with_empty_name() -> None:
    gen = vllm_backend.output_to_generation("<tool_call>{not json</tool_call>", [], None, None)
    assert len(gen.tool_calls) == 1
    assert gen.tool_calls[0].name == ""
    assert gen.raw_text == "<tool_call>{not json</tool_call>"
