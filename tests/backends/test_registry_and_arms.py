"""Backend registry, the mock backend, arms config parsing and arm-label resolution."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pytest_quantagent.backends import registry
from pytest_quantagent.backends.base import Backend, BackendOptions, GenerateRequest, Generation
from pytest_quantagent.backends.mock import MockBackend
from pytest_quantagent.backends.mock import create_backend as create_mock
from pytest_quantagent.backends.spec import BackendSpec
from pytest_quantagent.errors import DataFileError, UnknownNameError
from pytest_quantagent.quant import arms
from pytest_quantagent.quant.arms import ArmSpec, load_arms_config, parse_arm_labels, resolve_arm

USER = {"role": "user", "content": "hi"}


def _req(n_model_turns: int) -> GenerateRequest:
    msgs = [{"role": "system", "content": "p"}, {"role": "assistant", "content": "Hi!"}, USER]
    for _ in range(n_model_turns):
        msgs += [{"role": "assistant", "content": "x"}, USER]
    return GenerateRequest(messages=msgs, tools=[], seed=0)


# -- registry -----------------------------------------------------------------------------

def test_builtins_listed_and_unknown_name_lists_them() -> None:
    names = registry.list_backends()
    assert {"mock", "openai"} <= set(names)
    with pytest.raises(UnknownNameError) as e:
        registry.get_backend_factory("opneai")
    assert str(e.value).startswith("unknown backend 'opneai'; known backends: ")
    assert ", ".join(sorted(names)) in str(e.value)


def test_register_backend_decorator_and_create(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_REGISTERED", {})

    class Echo(Backend):
        name = "echo"

        async def generate(self, request: GenerateRequest) -> Generation:
            return Generation(content=request.messages[-1]["content"])

    @registry.register_backend("echo")
    def _factory(spec: BackendSpec, options: BackendOptions) -> Backend:
        return Echo()

    assert "echo" in registry.list_backends()
    b = registry.create_backend(BackendSpec(backend="echo", model="x"))
    assert asyncio.run(b.generate(_req(0))).content == "hi"


def test_entry_point_backends_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_entry_points_cache", {"thirdparty": "pytest_quantagent.backends.mock:create_backend"})
    assert "thirdparty" in registry.list_backends()
    assert registry.get_backend_factory("thirdparty") is create_mock


# -- mock ---------------------------------------------------------------------------------

def test_mock_responses_by_model_turn_not_by_call_order() -> None:
    b = MockBackend(responses=["first", {"tool_calls": [{"name": "f", "arguments": {"a": 1}}]}, "last"])
    # Interleaved "episodes": the answer depends on the conversation only.
    got = [asyncio.run(b.generate(_req(n))) for n in (2, 0, 1, 5, 0)]
    assert [g.content for g in got] == ["last", "first", None, "last", "first"]
    assert got[2].tool_calls[0].name == "f" and got[2].tool_calls[0].arguments == '{"a": 1}'
    cyc = MockBackend(responses=["a", "b"], cycle=True)
    assert [asyncio.run(cyc.generate(_req(n))).content for n in range(4)] == ["a", "b", "a", "b"]


def test_mock_from_toml_with_rule_and_bad_options(tmp_path: Path) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(
        '[arms.bf16]\nbackend = "mock"\nrule = "tests_mock_rule:rule"\n'
        '[arms.int4]\nbackend = "mock"\nresponses = [{content = "x ###STOP###"}]\nlatency_s = 0.0\n'
    )
    spec = load_arms_config(cfg)
    assert spec["int4"].options == {"responses": [{"content": "x ###STOP###"}], "latency_s": 0.0}
    b = create_mock(spec["int4"], BackendOptions())
    assert asyncio.run(b.generate(_req(0))).content == "x ###STOP###"
    ruled = create_mock(spec["bf16"], BackendOptions())
    assert asyncio.run(ruled.generate(_req(0))).content == "seed=0"
    typo = tmp_path / "typo.toml"
    typo.write_text('[arms.fp8]\nbackend = "mock"\nresponse = ["typo"]\n')
    with pytest.raises(DataFileError, match=r"typo.toml at arms.fp8.response: unknown key 'response' "
                       r"for backend 'mock'; did you mean 'responses'\?"):
        load_arms_config(typo)
    with pytest.raises(ValueError, match=r"unknown mock option.*response.*allowed: cycle, latency_s, responses, rule"):
        create_mock(ArmSpec(label="fp8", backend="mock", model="m", options={"response": ["typo"]}),
                    BackendOptions())
    with pytest.raises(ValueError, match="either 'responses' or 'rule'"):
        MockBackend(responses=["a"], rule=lambda r: "b")
    with pytest.raises(ValueError, match=r"'package\.module:function'"):
        create_mock(ArmSpec(label="x", backend="mock", model="m", options={"rule": "nocolon"}), BackendOptions())


def test_mock_rejects_unknown_response_keys() -> None:
    b = MockBackend(responses=[{"contnet": "typo"}])
    with pytest.raises(ValueError, match=r"unknown keys \['contnet'\]; allowed: content, raw_text, tool_calls"):
        asyncio.run(b.generate(_req(0)))


# -- arms ---------------------------------------------------------------------------------

def test_arms_config_fields_options_and_repair(tmp_path: Path) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(
        '[arms.bf16]\nbackend = "openai"\nbase_url = "http://127.0.0.1:8000/v1"\nmodel = "Qwen/Qwen3-8B"\n'
        'api_key_env = "OPENAI_API_KEY"\nconstrained = true\n'
        '[arms."int4+repair"]\nbackend = "openai"\nbase_url = "http://h/v1"\nmodel = "Q-AWQ"\nquantization = "w4a16-awq-g128"\n'
    )
    a = load_arms_config(cfg)
    assert a["bf16"] == ArmSpec(label="bf16", backend="openai", model="Qwen/Qwen3-8B",
                                base_url="http://127.0.0.1:8000/v1", api_key_env="OPENAI_API_KEY",
                                options={"constrained": True})
    assert a["int4+repair"].repair == "reflexive" and a["int4+repair"].precision == "int4"
    # X+repair not in the file falls back to arm X with repair on.
    r = resolve_arm("bf16+repair", config=a)
    assert (r.label, r.repair, r.model) == ("bf16+repair", "reflexive", "Qwen/Qwen3-8B")
    assert r.cache_fields() != a["bf16"].cache_fields()
    with pytest.raises(UnknownNameError, match=r"unknown arm 'fp8'; known arms: bf16, int4\+repair"):
        resolve_arm("fp8", config=a)


@pytest.mark.parametrize("text,where,problem", [
    ("[arms.bf16]\nmodel = 'x'\n", "arms.bf16", "missing string key 'backend'"),
    ("[arms.bf16]\nbackend = 'mock'\nrepair = 'always'\n", "arms.bf16.repair", "'always' is not one of none, reflexive"),
    ("[arms.bf16]\nbackend = 'mock'\nbase_url = 8000\n", "arms.bf16.base_url", "must be a string"),
    ("[model]\nname = 'x'\n", "model", "unknown table or key [model]"),
    ("[user]\nbackend = 'mock'\n", "arms", "no [arms.<label>] tables"),
    ("[arms.bf16\n", "", "not valid TOML"),
])
def test_bad_arms_config_names_file_and_table(tmp_path: Path, text: str, where: str, problem: str) -> None:
    cfg = tmp_path / "arms.toml"
    cfg.write_text(text)
    with pytest.raises(DataFileError) as e:
        load_arms_config(cfg)
    assert e.value.location == where and problem in str(e.value) and str(cfg) in str(e.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="arms config file not found"):
        load_arms_config(tmp_path / "nope.toml")


def test_parse_arm_labels() -> None:
    assert parse_arm_labels("bf16, int4+repair") == ["bf16", "int4+repair"]
    assert parse_arm_labels("bf16,int4+repair", allowed=["bf16", "int4"]) == ["bf16", "int4+repair"]
    with pytest.raises(UnknownNameError, match="unknown arm 'int3'; known arms: bf16, int4"):
        parse_arm_labels("bf16,int3", allowed=["bf16", "int4"])
    with pytest.raises(UnknownNameError, match="known arms: bf16, fp16, fp32, fp8, int4, int4-rtn, int8"):
        parse_arm_labels("bf16;int4")
    with pytest.raises(ValueError, match="listed twice"):
        parse_arm_labels("int4,int4")


def test_model_spec_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arms, "_MODEL_SPECS", {})
    monkeypatch.setattr(arms, "_bundled_loaded", True)
    arms.register_model_spec("toy", lambda label: ArmSpec(label=label, backend="mock", model=f"toy-{label}"),
                             arms=("bf16", "int4"))
    assert arms.list_model_specs() == ["toy"]
    assert resolve_arm("int4", model_spec="toy").model == "toy-int4"
    assert resolve_arm("int4+repair", model_spec="toy").repair == "reflexive"
    with pytest.raises(UnknownNameError, match="unknown arm 'fp8'; known arms: bf16, int4"):
        resolve_arm("fp8", model_spec="toy")
    with pytest.raises(UnknownNameError, match="unknown model spec 'big'; known model specs: toy"):
        resolve_arm("bf16", model_spec="big")
