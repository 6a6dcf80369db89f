"""vLLM engine arguments from the arm's table (issue 25): tensor/pipeline/data parallel
sizes and any other engine argument reach ``vllm.LLM`` unchanged; bad values are refused
before the engine is built. A stand-in ``vllm`` module records what it is given."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.backends.vllm import engine_kwargs
from pytest_quantagent.errors import DataFileError
from pytest_quantagent.quant.arms import ArmSpec, load_arms_config
from pytest_quantagent.quant.loading import backend_spec, create_arm_backend


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    built: list[dict[str, Any]] = []

    @dataclasses.dataclass
    class EngineArgs:
        model: str = ""
        tensor_parallel_size: int = 1
        data_parallel_size: int = 1
        max_num_seqs: int = 256
        num_scheduler_steps: int = 1

    class LLM:
        def __init__(self, **kw: Any) -> None:
            built.append(kw)

    mod = types.ModuleType("vllm")
    mod.LLM = LLM  # type: ignore[attr-defined]
    mod.EngineArgs = EngineArgs  # type: ignore[attr-defined]
    mod.__version__ = "0.0-fake"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", mod)
    return built


def _arm(**options: Any) -> ArmSpec:
    return ArmSpec(label="int4", backend="vllm", model="org/m", options=options)


def test_parallel_sizes_and_engine_args_pass_through(fake_vllm: list[dict[str, Any]]) -> None:
    b = create_arm_backend(_arm(tensor_parallel_size=4, data_parallel_size=2, max_num_seqs=128,
                                engine_args={"num_scheduler_steps": 8}))
    [kw] = fake_vllm
    assert (kw["model"], kw["tensor_parallel_size"], kw["data_parallel_size"]) == ("org/m", 4, 2)
    assert kw["max_num_seqs"] == 128 and kw["num_scheduler_steps"] == 8
    assert b.describe()["engine_args"] == {"tensor_parallel_size": 4, "data_parallel_size": 2,
                                           "max_num_seqs": 128, "num_scheduler_steps": 8}
    asyncio.run(b.aclose())


def test_unknown_engine_argument_is_named_with_a_suggestion(fake_vllm: list[dict[str, Any]]) -> None:
    with pytest.raises(ValueError, match=r"'num_scheduler_step' is not a vLLM engine argument; "
                                         r"did you mean 'num_scheduler_steps'"):
        create_arm_backend(_arm(engine_args={"num_scheduler_step": 8}))
    assert fake_vllm == []  # refused before any engine was built


@pytest.mark.parametrize("options,match", [
    ({"tensor_parallel_size": 0}, r"tensor_parallel_size \(0\) must be an integer >= 1"),
    ({"data_parallel_size": "2"}, r"data_parallel_size \('2'\) must be an integer >= 1"),
    ({"engine_args": {"tensor_parallel_size": 2}, "tensor_parallel_size": 2}, "both in the arm's table"),
    ({"engine_args": "tp=2"}, "engine_args must be a table"),
])
def test_bad_engine_arguments_are_refused(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        engine_kwargs(backend_spec(_arm(**options)))


def test_arms_config_takes_engine_arguments(tmp_path: Path) -> None:
    p = tmp_path / "arms.toml"
    p.write_text('[arms.bf16]\nbackend = "vllm"\nmodel = "org/m"\ntensor_parallel_size = 2\n'
                 'data_parallel_size = 4\n[arms.bf16.engine_args]\nnum_scheduler_steps = 8\n')
    arm = load_arms_config(p)["bf16"]
    assert engine_kwargs(backend_spec(arm)) == {"tensor_parallel_size": 2, "data_parallel_size": 4,
                                  "num_scheduler_steps": 8}
    assert arm.cache_fields()["options"]["tensor_parallel_size"] == 2  # a layout is in the key
    p.write_text('[arms.bf16]\nbackend = "vllm"\nmodel = "org/m"\ntensor_paralel_size = 2\n')
    with pytest.raises(DataFileError, match="did you mean 'tensor_parallel_size'"):
        load_arms_config(p)
