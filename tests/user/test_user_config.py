"""The user model's spec string, the ``[user]`` table, the identity, and how the analysis
separates the user's failed calls from the agent's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_quantagent.errors import DataFileError, UnknownNameError
from pytest_quantagent.metrics.episode import LEAN_RECORD, ArmAccumulator
from pytest_quantagent.quant.arms import (
    ArmSpec,
    UserModelConfig,
    load_arms_config,
    load_user_config,
    parse_user_model,
)
from pytest_quantagent.runner.build import resolve_user
from pytest_quantagent.runner.llm_user import LLMUserSpec
from pytest_quantagent.store.records import CallRecord, EpisodeRecord
from pytest_quantagent.vocab.channels import Channel, TerminationReason


def test_spec_with_backend_model_and_url() -> None:
    cfg = parse_user_model("openai:gpt-4.1@http://127.0.0.1:8001/v1")
    assert (cfg.arm.label, cfg.arm.backend, cfg.arm.model, cfg.arm.base_url) == (
        "user", "openai", "gpt-4.1", "http://127.0.0.1:8001/v1")
    assert (cfg.temperature, cfg.max_tokens) == (0.0, 512)
    cfg = parse_user_model("vllm:Qwen/Qwen3-8B")
    assert (cfg.arm.backend, cfg.arm.model, cfg.arm.base_url, cfg.arm.path) == ("vllm", "Qwen/Qwen3-8B", None, None)


def test_spec_with_a_directory_is_a_checkpoint(tmp_path: Path) -> None:
    cfg = parse_user_model(f"transformers:{tmp_path}")
    assert cfg.arm.path == str(tmp_path)


def test_spec_from_a_model_spec() -> None:
    bf16 = parse_user_model("tiny-agent")
    int4 = parse_user_model("tiny-agent:int4")
    assert bf16.arm.label == int4.arm.label == "user"
    assert bf16.arm.backend == "transformers"
    # Two precisions of the same model are two different users.
    assert LLMUserSpec.from_config(bf16).identity != LLMUserSpec.from_config(int4).identity


@pytest.mark.parametrize(("spec", "exc", "text"), [
    ("openai:gpt-4.1", ValueError, "backend 'openai' needs a base URL"),
    ("openai:", ValueError, "no model after 'openai:'"),
    ("openai:m@", ValueError, "empty base URL"),
    ("no-such-thing", UnknownNameError, "unknown user model spec 'no-such-thing'; known user model specs: "),
    ("tiny-agent:int3", UnknownNameError, "unknown arm 'int3'"),
    ("two words", ValueError, "no spaces"),
])
def test_bad_specs(spec: str, exc: type[Exception], text: str) -> None:
    with pytest.raises(exc, match=re.escape(text)):
        parse_user_model(spec)


def test_unknown_spec_lists_backends_and_model_specs() -> None:
    with pytest.raises(UnknownNameError) as e:
        parse_user_model("gpt-4.1")
    assert "openai:MODEL" in str(e.value) and "tiny-agent" in str(e.value)


ARM = '[arms.bf16]\nbackend = "mock"\n'


def test_user_table(tmp_path: Path) -> None:
    p = tmp_path / "a.toml"
    p.write_text(ARM + '[user]\nbackend = "openai"\nmodel = "u"\nbase_url = "http://h/v1"\n'
                 'api_key_env = "K"\ntemperature = 0.5\nmax_tokens = 100\ntimeout_s = 30\n')
    cfg = load_user_config(p)
    assert cfg is not None
    assert (cfg.arm.backend, cfg.arm.model, cfg.arm.base_url, cfg.arm.api_key_env) == ("openai", "u", "http://h/v1", "K")
    assert (cfg.temperature, cfg.max_tokens, dict(cfg.arm.options)) == (0.5, 100, {"timeout_s": 30})
    assert list(load_arms_config(p)) == ["bf16"]  # the user is not an arm
    # Plumbing options (timeout) do not change the identity; outcome options do.
    plain = LLMUserSpec.from_config(UserModelConfig(arm=ArmSpec("user", "openai", "u"), temperature=0.5,
                                                    max_tokens=100))
    assert LLMUserSpec.from_config(cfg).identity == plain.identity
    scripted = UserModelConfig(arm=ArmSpec("user", "mock", "u", options={"responses": ["a"]}))
    other = UserModelConfig(arm=ArmSpec("user", "mock", "u", options={"responses": ["b"]}))
    assert LLMUserSpec.from_config(scripted).identity != LLMUserSpec.from_config(other).identity


def test_no_user_table(tmp_path: Path) -> None:
    p = tmp_path / "a.toml"
    p.write_text(ARM)
    assert load_user_config(p) is None
    with pytest.raises(ValueError, match=r"needs a model: give --user-model SPEC .* has no \[user\] table"):
        resolve_user(None, config_path=p)


@pytest.mark.parametrize(("body", "where", "problem"), [
    ('user = "openai"', "user", "must be a table"),
    ('[user]\nmodel = "u"', "user", "missing string key 'backend'"),
    ('[user]\nbackend = "openai"\ntemperature = -1', "user.temperature", "must be a number >= 0, got -1"),
    ('[user]\nbackend = "openai"\ntemperature = "hot"', "user.temperature", "must be a number >= 0, got 'hot'"),
    ('[user]\nbackend = "openai"\nmax_tokens = 0', "user.max_tokens", "must be an integer >= 1, got 0"),
    ('[user]\nbackend = "openai"\nmodel = 3', "user.model", "must be a string, got 3"),
    ('[user]\nbackend = "openai"\nrepair = "reflexive"', "user.repair", "no repair mode"),
])
def test_bad_user_tables(tmp_path: Path, body: str, where: str, problem: str) -> None:
    p = tmp_path / "a.toml"
    p.write_text(body + "\n" + ARM)  # top-level keys before the first table
    with pytest.raises(DataFileError) as e:
        load_user_config(p)
    assert e.value.location == where and problem in e.value.problem
    assert str(p) in str(e.value)


def test_spec_flag_wins_over_table_and_overrides(tmp_path: Path) -> None:
    p = tmp_path / "a.toml"
    p.write_text(ARM + '[user]\nbackend = "openai"\nmodel = "table"\nbase_url = "http://h/v1"\ntemperature = 0.3\n')
    assert resolve_user(None, config_path=p).arm.model == "table"
    assert resolve_user("openai:flag@http://h/v1", config_path=p).arm.model == "flag"
    cfg = resolve_user(None, config_path=p, temperature=0.0, max_tokens=7)
    assert (cfg.temperature, cfg.max_tokens) == (0.0, 7)
    with pytest.raises(ValueError, match="user temperature must be >= 0"):
        resolve_user(None, config_path=p, temperature=-0.1)


def _record(calls: list[CallRecord], user_sim: str = "llm:x") -> EpisodeRecord:
    return EpisodeRecord(key="k", model="m", arm="a", backend="mock", domain="telecom", task_id="t",
                         trial=0, seed=0, max_errors=10, max_steps=200, user_sim=user_sim,
                         termination=TerminationReason.USER_STOP, reward=1.0, success=True,
                         n_errors=sum(c.error for c in calls), steps=5, calls=calls)


def test_user_failures_counted_apart_on_both_paths() -> None:
    calls = [
        CallRecord(step=1, requestor="user", name="check_status_bar", error=True, channel=Channel.MALFORMED_CALL),
        CallRecord(step=2, requestor="user", name="make_payment", error=True, channel=Channel.USER_TOOL_ERROR),
        CallRecord(step=3, requestor="assistant", name="nope", error=True, channel=Channel.UNKNOWN_TOOL),
        CallRecord(step=4, requestor="user", name="nope", error=True, channel=Channel.UNKNOWN_TOOL),
        CallRecord(step=5, requestor="assistant", name="get_customer", error=False),
    ]
    rec = _record(calls)
    slow = ArmAccumulator("telecom", "a")
    slow.add(rec)
    fast = ArmAccumulator("telecom", "a")
    fast.add_raw(LEAN_RECORD.validate_json(rec.model_dump_json()))
    for acc in (slow.finish(), fast.finish()):
        by = dict(zip([c.value for c in Channel], acc.channel_counts[0].tolist(), strict=False))
        # every failed call of the user is the simulator's (issue 22.6/23), device-side included
        assert by["malformed_call"] == 0 and by["unknown_tool"] == 1 and by["user_tool_error"] == 0
        assert dict(acc.user_failures) == {"malformed_call": 1, "unknown_tool": 1,
                                           "user_tool_error": 1}
        assert acc.user_sims == {"llm:x"}
        assert acc.tool_calls[0] == 5
        assert acc.agent_calls is not None and acc.agent_calls[0] == 2  # the rate denominator
        assert acc.user_calls is not None and acc.user_calls[0] == 3
        assert acc.user_failed is not None and acc.user_failed[0] == 3
        assert dict(acc.names[Channel.UNKNOWN_TOOL]) == {"nope": 1}  # the agent's one only
