"""Dispatch and channel classification, one crafted call per channel."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.environment import to_json_str
from pytest_quantagent.env.tasks import (
    EnvAssertion,
    EnvFunctionCall,
    InitializationData,
    InitialState,
)
from pytest_quantagent.vocab.channels import Channel
from pytest_quantagent.vocab.messages import ToolCall


def call(tool: str, requestor: str = "assistant", parse_error: str | None = None, **arguments: object) -> ToolCall:
    return ToolCall(id="c1", name=tool, arguments=arguments, requestor=requestor, parse_error=parse_error)  # type: ignore[arg-type]


def test_success_serializes_pydantic_result_like_tau2(toy: Domain) -> None:
    env = toy.make_environment()
    d = env.execute(call("get_account", account_id="a1"))
    assert d.channel is None and not d.message.error
    # τ²-bench: json.dumps(model.model_dump(), default=str)
    assert d.message.content == json.dumps(
        {"account_id": "a1", "name": "Ada", "balance": 10.0, "frozen": False}
    )
    assert d.message.requestor == "assistant" and d.message.id == "c1"


def test_to_json_str_follows_tau2_rules() -> None:
    # Strings pass through; scalars are stringified before json.dumps (τ²-bench quirk).
    assert to_json_str("a1") == "a1"
    assert to_json_str(3) == '"3"'
    assert to_json_str(2.5) == '"2.5"'
    assert to_json_str(True) == '"True"'
    assert to_json_str({"n": 1, "xs": [1, "b"]}) == '{"n": "1", "xs": ["1", "b"]}'
    assert to_json_str(None) == "null"


@pytest.mark.parametrize(
    ("tool_call", "channel", "content", "entity"),
    [
        (call("get_customer", customer_id="a1"), Channel.UNKNOWN_TOOL,
         "Error: Tool 'get_customer' not found.", "get_customer"),
        (call("toggle_wifi"), Channel.CROSS_ROLE_TOOL, "Error: Tool 'toggle_wifi' not found.", "toggle_wifi"),
        (call("get_account", requestor="user", account_id="a1"), Channel.CROSS_ROLE_TOOL,
         "Error: Tool 'get_account' not found.", "get_account"),
        (call("ghost", requestor="user"), Channel.UNKNOWN_TOOL, "Error: Tool 'ghost' not found.", "ghost"),
        (call("get_account", parse_error="Invalid JSON in arguments: '{\"account_id\": '"),
         Channel.MALFORMED_CALL, "Error: Invalid JSON in arguments: '{\"account_id\": '", "get_account"),
        # τ²-bench's text for these is Python's TypeError of the bound method.
        (call("get_account"), Channel.BAD_ARGUMENTS,
         "Error: ToyTools.get_account() missing 1 required positional argument: 'account_id'", None),
        (call("deposit"), Channel.BAD_ARGUMENTS,
         "Error: ToyTools.deposit() missing 2 required positional arguments: 'account_id' and 'amount'", None),
        (call("get_account", account_id="a1", verbose=True), Channel.BAD_ARGUMENTS,
         "Error: ToyTools.get_account() got an unexpected keyword argument 'verbose'", None),
        (call("deposit", account_id="a1", amount="lots"), Channel.BAD_ARGUMENTS, None, None),
        (call("deposit", account_id="a1", amount=-3), Channel.BAD_ARGUMENTS,
         "Error: Amount must be positive", None),
        (call("get_account", account_id="zz9"), Channel.WRONG_ENTITY, "Error: Account not found", "zz9"),
        (call("deposit", account_id="a3", amount=1), Channel.POLICY_VIOLATION,
         "Error: Account is frozen", "a3"),
    ],
)
def test_each_channel_from_a_crafted_call(
    toy: Domain, tool_call: ToolCall, channel: Channel, content: str | None, entity: str | None
) -> None:
    env = toy.make_environment()
    before = env.get_db_hash()
    d = env.execute(tool_call)
    assert d.channel == channel
    assert d.message.channel == channel
    assert d.message.error is True
    assert d.message.requestor == tool_call.requestor
    if content is not None:
        assert d.message.content == content
    else:
        assert d.message.content.startswith("Error: deposit() argument 'amount'")
    assert d.entity == entity
    assert env.get_db_hash() == before, "a failed call must not change the DB"


def test_signature_error_texts_are_pythons(toy: Domain) -> None:
    # Independent reference: what Python itself says when τ²-bench calls the bound method.
    kit = toy.agent_toolkit(toy.db.copy_fresh())
    for kwargs in ({}, {"account_id": "a1", "verbose": True}):
        try:
            kit.get_account(**kwargs)  # type: ignore[call-arg]
        except TypeError as e:
            expected = f"Error: {e}"
        got = toy.make_environment().execute(call("get_account", **kwargs)).message.content
        assert got == expected


def test_plain_value_error_goes_through_domain_hook(toy: Domain) -> None:
    env = toy.make_environment()
    d = env.execute(call("find_account", name="Zed"))
    assert (d.channel, d.message.content, d.entity) == (Channel.WRONG_ENTITY, "Error: User not found", None)
    d = env.execute(call("close_account", account_id="a1"))
    assert d.channel == Channel.POLICY_VIOLATION
    assert d.message.content == "Error: Cannot close an account with a positive balance"


def test_value_error_default_hook_is_policy_violation(toy: Domain) -> None:
    plain = Domain(name="plain", policy="", db=toy.db, tasks=[], agent_toolkit=toy.agent_toolkit)
    env = plain.make_environment()
    assert env.execute(call("find_account", name="Zed")).channel == Channel.POLICY_VIOLATION
    # No user toolkit at all: τ²-bench's text for a user call.
    d = env.execute(call("get_account", requestor="user", account_id="a1"))
    assert d.channel == Channel.CROSS_ROLE_TOOL
    assert d.message.content == "Error: User tools not available"


def test_user_tool_error(toy: Domain) -> None:
    env = toy.make_environment()
    env.run_env_function_call(EnvFunctionCall(env_type="user", func_name="power_off"))
    d = env.execute(call("toggle_wifi", requestor="user"))
    assert d.channel == Channel.USER_TOOL_ERROR
    assert d.message.content == "Error: The phone is off"


def test_write_changes_hash_and_copies_are_independent(toy: Domain) -> None:
    e1, e2 = toy.make_environment(), toy.make_environment()
    h0 = e1.get_db_hash()
    assert e1.execute(call("deposit", account_id="a1", amount=5)).channel is None
    assert e1.get_db_hash() != h0
    assert e2.get_db_hash() == h0, "episodes must not share DB state"
    assert toy.db.get_hash() == h0, "the domain's loaded DB is never mutated"
    # Reads and thinks leave the hash alone.
    e2.execute(call("get_account", account_id="a1"))
    assert e2.get_db_hash() == h0


def test_db_hash_is_stable_across_processes(toy: Domain, toy_domains_dir: object) -> None:
    here = toy.make_environment().get_db_hash()
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from toy.domain import make_db; print(make_db().get_hash())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(toy_domains_dir)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == here


def test_initial_state_data_actions_and_history(toy: Domain) -> None:
    from pytest_quantagent.vocab.messages import AssistantMessage, ToolMessage

    state = InitialState(
        initialization_data=InitializationData(agent_data={"accounts": {"a2": {"balance": 7.0}}}),
        initialization_actions=[EnvFunctionCall(env_type="user", func_name="power_off")],
        message_history=[
            AssistantMessage(tool_calls=[ToolCall(id="h1", name="deposit", arguments={"account_id": "a1", "amount": 1})]),
            ToolMessage(id="h1", content="{}"),
            AssistantMessage(tool_calls=[ToolCall(id="h2", name="nonexistent_tool", arguments={})]),
            ToolMessage(id="h2", content="Error", error=True),
        ],
    )
    env = toy.make_environment()
    env.set_state(state)
    assert env.tools.db.accounts["a2"].balance == 7.0
    assert env.tools.db.accounts["a2"].name == "Bob", "initialization_data merges, not replaces"
    assert env.tools.db.accounts["a1"].balance == 11.0, "history writes are replayed"
    assert env.user_tools is not None and env.user_tools.db.powered is False


def test_env_assertion(toy: Domain) -> None:
    env = toy.make_environment()
    a = EnvAssertion(env_type="assistant", func_name="assert_balance", arguments={"account_id": "a1", "expected": 10.0})
    assert env.run_env_assertion(a) is True
    assert env.run_env_assertion(a.model_copy(update={"assert_value": False})) is False
    with pytest.raises(ValueError, match="function 'nope' not found in the assistant toolkit"):
        env.run_env_function_call(EnvFunctionCall(env_type="assistant", func_name="nope"))
