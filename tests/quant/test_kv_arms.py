"""KV-cache precision as an arm (issue 38 item 3): the ``+kv-DTYPE`` label modifier (one
order, ``PRECISION[+kv-DTYPE][+repair][@MODEL]``), the arms-TOML key ``kv_cache_dtype``, the
reference a KV arm is paired with, the episode key, and what each backend kind is handed."""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from pytest_quantagent.backends.kv_cache import KV_CACHE_DTYPES
from pytest_quantagent.errors import DataFileError, UnknownNameError
from pytest_quantagent.quant.arms import (
    ArmLabel,
    ArmSpec,
    base_arm,
    label_sources,
    load_arms_config,
    parse_arm_labels,
    parse_label,
    reference_for,
    resolve_arm,
    with_repair,
)
from pytest_quantagent.quant.loading import backend_spec, create_arm_backend
from pytest_quantagent.store.keys import episode_key

FORM = "PRECISION[+kv-DTYPE][+repair][@MODEL]"


@pytest.mark.parametrize(("label", "parts"), [
    ("int4", ArmLabel("int4")),
    ("int4+kv-int8", ArmLabel("int4", "int8")),
    ("bf16+kv-fp8", ArmLabel("bf16", "fp8")),
    ("int4-rtn+kv-fp8_e5m2+repair", ArmLabel("int4-rtn", "fp8_e5m2", True)),
    ("int4+kv-int8+repair@tiny-agent-prone", ArmLabel("int4", "int8", True, "tiny-agent-prone")),
    ("int4+repair@tiny-agent", ArmLabel("int4", None, True, "tiny-agent")),
])
def test_labels_in_the_canonical_order_parse_into_their_parts(label: str, parts: ArmLabel) -> None:
    assert parse_label(label) == parts
    assert str(parts) == label  # and print back the same
    assert base_arm(label) == parts.precision


@pytest.mark.parametrize(("label", "message"), [
    ("int4+repair+kv-int8", "'+kv-int8' is repeated or out of order"),
    ("int4+kv-int8+kv-fp8", "'+kv-fp8' is repeated or out of order"),
    ("int4+repair+repair", "'+repair' is repeated or out of order"),
    ("int4@tiny-agent+kv-int8", "a modifier after '@tiny-agent'"),
    ("int4@tiny-agent+repair", "a modifier after '@tiny-agent'"),
    ("int4+kvint8", "'+kvint8' is not a modifier (+kv-DTYPE, +repair)"),
    ("+kv-int8", "must start with a precision"),
    ("int4;fp8", "is not of the form"),
])
def test_other_orders_and_unknown_modifiers_are_refused_naming_the_label_and_the_form(
        label: str, message: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_label(label)
    assert message in str(e.value) and repr(label) in str(e.value) and FORM in str(e.value)
    with pytest.raises(ValueError, match=r"modifiers|form"):
        resolve_arm(label)  # the resolver refuses them alike


@pytest.mark.parametrize("dtype", ["int3", "fp16", "auto", "", "INT8"])
def test_an_unknown_kv_dtype_lists_the_allowed_ones(dtype: str) -> None:
    with pytest.raises(UnknownNameError) as e:
        parse_label(f"int4+kv-{dtype}")
    assert str(e.value).startswith(f"unknown KV-cache dtype {dtype!r}; known KV-cache dtypes: "
                                   "fp8, fp8_e4m3, fp8_e5m2, int4, int8")


def test_arm_lists_take_kv_arms_of_allowed_base_arms() -> None:
    assert parse_arm_labels("bf16,int4,int4+kv-int8,int4+kv-int8+repair", allowed=["bf16", "int4"]) == [
        "bf16", "int4", "int4+kv-int8", "int4+kv-int8+repair"]
    with pytest.raises(UnknownNameError, match="unknown arm 'fp8\\+kv-int8'; known arms: bf16, int4"):
        parse_arm_labels("bf16,fp8+kv-int8", allowed=["bf16", "int4"])
    with pytest.raises(UnknownNameError, match=r"known arms: bf16, int4\. Arm label 'int4\+repair\+kv-int8'"):
        parse_arm_labels("bf16,int4+repair+kv-int8", allowed=["bf16", "int4"])
    assert label_sources("int4+kv-int8+repair") == ("int4+kv-int8+repair", "int4+kv-int8", "int4+repair", "int4")
    assert label_sources("int4") == ("int4",)


def test_a_kv_arm_of_the_bundled_model_is_its_weights_arm_with_the_dtype() -> None:
    int4 = resolve_arm("int4", "tiny-agent")
    kv = resolve_arm("int4+kv-int8", "tiny-agent")
    assert (kv.label, kv.kv_cache_dtype, kv.precision) == ("int4+kv-int8", "int8", "int4")
    assert dataclasses.replace(kv, label="int4", kv_cache_dtype="auto") == int4
    assert int4.kv_cache_dtype == "auto"
    both = resolve_arm("int4+kv-int8+repair@tiny-agent-prone", "tiny-agent")
    assert (both.model, both.kv_cache_dtype, both.repair) == ("tiny-agent-prone", "int8", "reflexive")
    assert with_repair("int4+kv-int8@tiny-agent-prone") == "int4+kv-int8+repair@tiny-agent-prone"
    # its reference is the same model's bf16, KV cache as served
    assert reference_for("int4+kv-int8", "bf16") == "bf16"
    assert reference_for("int4+kv-int8@tiny-agent-prone", "bf16") == "bf16@tiny-agent-prone"
    assert resolve_arm(reference_for("bf16+kv-fp8@tiny-agent-prone", "bf16")).kv_cache_dtype == "auto"


def _key(arm: ArmSpec, version: str) -> str:
    return episode_key(arm=arm.cache_fields(), backend=arm.backend, backend_version=version,
                       domain="telecom", task_id="t", trial=0, seed=1, max_errors=10,
                       max_steps=200, user_sim="scripted", prompt="p", repair=arm.repair)


def test_the_kv_dtype_is_in_the_episode_key_and_auto_keeps_the_old_key() -> None:
    plain = ArmSpec(label="int4", backend="transformers", model="m", path="/m")
    kv = dataclasses.replace(plain, kv_cache_dtype="int8")  # same label: only the dtype differs
    assert "kv_cache_dtype" not in plain.cache_fields()  # records stored before stay valid
    assert kv.cache_fields() == {**plain.cache_fields(), "kv_cache_dtype": "int8"}
    assert _key(plain, "2/x") != _key(kv, "2/x")
    fp8 = dataclasses.replace(plain, kv_cache_dtype="fp8")
    assert len({_key(plain, "2/x"), _key(kv, "2/x"), _key(fp8, "2/x")}) == 3
    with pytest.raises(ValueError, match="kv_cache_dtype of arm 'int4': 'int9' is not a KV-cache "
                                         "dtype; allowed: auto, int8, int4, fp8, fp8_e4m3, fp8_e5m2"):
        ArmSpec(label="int4", backend="transformers", model="m", kv_cache_dtype="int9")


# -- arms TOML ------------------------------------------------------------------------------

def _config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "arms.toml"
    p.write_text(text)
    return p


MOCK = 'backend = "mock"\nresponses = ["hi"]\n'


def test_the_toml_key_and_the_label_both_set_the_dtype(tmp_path: Path) -> None:
    cfg = load_arms_config(_config(tmp_path, f'[arms.bf16]\n{MOCK}[arms.int4kv]\n{MOCK}kv_cache_dtype = "fp8"\n'
                                             f'[arms."int4+kv-int8"]\n{MOCK}'))
    assert [cfg[k].kv_cache_dtype for k in ("bf16", "int4kv", "int4+kv-int8")] == ["auto", "fp8", "int8"]
    assert "kv_cache_dtype" not in cfg["int4kv"].options  # an arm field, not a backend option
    assert resolve_arm("int4+kv-int8+repair", config=cfg) == dataclasses.replace(
        cfg["int4+kv-int8"], label="int4+kv-int8+repair", repair="reflexive")


@pytest.mark.parametrize(("text", "where", "problem"), [
    (f'[arms.int4]\n{MOCK}kv_cache_dtype = "int3"\n', "arms.int4.kv_cache_dtype",
     "'int3' is not a KV-cache dtype; allowed: auto, int8, int4, fp8, fp8_e4m3, fp8_e5m2"),
    (f'[arms.int4]\n{MOCK}kv_cache_dtype = 8\n', "arms.int4.kv_cache_dtype", "must be a string, got 8"),
    (f'[arms."int4+kv-int8"]\n{MOCK}kv_cache_dtype = "fp8"\n', "arms.int4+kv-int8.kv_cache_dtype",
     "'fp8' contradicts the label's '+kv-int8'"),
    (f'[arms."int4+repair+kv-int8"]\n{MOCK}', "arms.int4+repair+kv-int8",
     "'+kv-int8' is repeated or out of order; modifiers go in the order " + FORM),
    (f'[arms."int4@tiny-agent"]\n{MOCK}', "arms.int4@tiny-agent", "an arms-config label names no model"),
    ('[arms.int4]\nbackend = "vllm"\nmodel = "org/m"\nkv_cache_dtype = "int8"\n', "arms.int4.kv_cache_dtype",
     "vLLM serves no 'int8' KV cache; it accepts auto, fp8, fp8_e4m3, fp8_e5m2"),
])
def test_bad_kv_settings_in_the_toml_are_refused_naming_the_table(
        tmp_path: Path, text: str, where: str, problem: str) -> None:
    with pytest.raises(DataFileError) as e:
        load_arms_config(_config(tmp_path, text))
    assert e.value.location == where and problem in str(e.value), str(e.value)


def test_a_served_arm_cannot_change_its_kv_cache_by_label(tmp_path: Path) -> None:
    cfg = load_arms_config(_config(
        tmp_path, '[arms.int4]\nbackend = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
                  '[arms.fp8]\nbackend = "vllm"\nmodel = "org/m"\nkv_cache_dtype = "fp8"\n'
                  '[arms.bf16]\nbackend = "vllm"\nmodel = "org/m"\n'))
    with pytest.raises(ValueError, match=r"arm 'int4\+kv-fp8': backend 'openai' of 'int4' cannot "
                                         r"change its KV cache .*its own arms-config table"):
        resolve_arm("int4+kv-fp8", config=cfg)
    with pytest.raises(ValueError, match="its base arm 'fp8' already sets kv_cache_dtype = 'fp8'"):
        resolve_arm("fp8+kv-fp8_e5m2", config=cfg)
    assert resolve_arm("fp8+kv-fp8", config=cfg) == dataclasses.replace(cfg["fp8"], label="fp8+kv-fp8")
    with pytest.raises(ValueError, match="vLLM serves no 'int8' KV cache"):
        resolve_arm("bf16+kv-int8", config=cfg)
    assert resolve_arm("bf16+kv-fp8_e5m2", config=cfg).kv_cache_dtype == "fp8_e5m2"


# -- what the backend is handed --------------------------------------------------------------

@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    built: list[dict[str, Any]] = []

    @dataclasses.dataclass
    class EngineArgs:
        model: str = ""
        kv_cache_dtype: str = "auto"

    class LLM:
        def __init__(self, **kw: Any) -> None:
            built.append(kw)

    mod = types.ModuleType("vllm")
    mod.LLM = LLM  # type: ignore[attr-defined]
    mod.EngineArgs = EngineArgs  # type: ignore[attr-defined]
    mod.__version__ = "0.0-fake"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", mod)
    return built


def test_vllm_gets_the_arms_kv_dtype_and_describes_it(fake_vllm: list[dict[str, Any]]) -> None:
    import asyncio

    arm = ArmSpec(label="int4+kv-fp8", backend="vllm", model="org/m", kv_cache_dtype="fp8")
    assert backend_spec(arm).kv_cache_dtype == "fp8"
    backend = create_arm_backend(arm)
    [kw] = fake_vllm
    assert kw["kv_cache_dtype"] == "fp8"
    d = backend.describe()
    assert d["kv_cache_dtype"] == "fp8" and d["engine_args"]["kv_cache_dtype"] == "fp8"
    asyncio.run(backend.aclose())
    create_arm_backend(ArmSpec(label="bf16", backend="vllm", model="org/m"))
    assert "kv_cache_dtype" not in fake_vllm[1]  # auto: the engine's default, not sent


def test_vllm_refuses_an_emulated_only_dtype_before_the_engine(fake_vllm: list[dict[str, Any]]) -> None:
    arm = ArmSpec(label="int4+kv-int8", backend="vllm", model="org/m", kv_cache_dtype="int8")
    with pytest.raises(ValueError, match="arm 'int4\\+kv-int8': kv_cache_dtype 'int8' is not one "
                                         "vLLM serves; vLLM accepts auto, fp8, fp8_e4m3, fp8_e5m2"):
        create_arm_backend(arm)
    twice = ArmSpec(label="int4", backend="vllm", model="org/m",
                    options={"engine_args": {"kv_cache_dtype": "fp8"}})
    with pytest.raises(ValueError, match="give kv_cache_dtype as the arm's own key"):
        create_arm_backend(twice)
    assert fake_vllm == []


def test_every_dtype_is_known_to_the_in_process_emulation() -> None:
    from pytest_quantagent.backends.kv_cache import KV_SCHEMES

    assert set(KV_SCHEMES) == set(KV_CACHE_DTYPES)
