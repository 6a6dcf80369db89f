"""Reflexive repair: message content, which failures it touches, and that it never changes
what is counted."""

from __future__ import annotations

import pytest

from pytest_quantagent.runner.repair import ReflexiveRepair, describe_arguments, make_repair
from pytest_quantagent.vocab.channels import Channel
from pytest_quantagent.vocab.messages import ToolCall, ToolMessage

TOOLS = [
    {"type": "function", "function": {"name": "get_order_details", "description": "",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"]}}},
    {"type": "function", "function": {"name": "cancel_pending_order", "description": "",
     "parameters": {"type": "object", "properties": {
         "order_id": {"type": "string"},
         "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]}},
         "required": ["order_id", "reason"]}}},
]


def _fail(channel: Channel, content: str, requestor: str = "assistant") -> ToolMessage:
    return ToolMessage(id="c1", content=content, error=True, channel=channel, requestor=requestor)  # type: ignore[arg-type]


def test_unknown_tool_lists_every_valid_name_and_asks_to_reissue() -> None:
    rep = ReflexiveRepair(tools=TOOLS)
    call = ToolCall(id="c1", name="get_order_status", arguments={"order_id": "#W1"})
    out = rep.apply(call, _fail(Channel.UNKNOWN_TOOL, "Error: Tool 'get_order_status' not found."))
    assert out.content.startswith("Error: Tool 'get_order_status' not found.")
    assert "'get_order_status' does not exist" in out.content
    assert "get_order_details, cancel_pending_order" in out.content
    assert "Diagnose" in out.content and "re-issue" in out.content
    # Still a failure of the same channel: the budget and the rates count it as before.
    assert out.error is True and out.channel == Channel.UNKNOWN_TOOL


def test_bad_arguments_lists_the_expected_arguments() -> None:
    rep = ReflexiveRepair(tools=TOOLS)
    call = ToolCall(id="c1", name="cancel_pending_order", arguments={"order_id": "#W1"})
    out = rep.apply(call, _fail(Channel.BAD_ARGUMENTS, "Error: missing 'reason'"))
    assert "order_id (string, required)" in out.content
    assert "reason (one of 'no longer needed', 'ordered by mistake', required)" in out.content
    assert "re-issue the call with corrected arguments" in out.content


@pytest.mark.parametrize("channel", [Channel.WRONG_ENTITY, Channel.POLICY_VIOLATION])
def test_other_channels_are_left_verbatim(channel: Channel) -> None:
    rep = ReflexiveRepair(tools=TOOLS)
    msg = _fail(channel, "Error: Order not found")
    assert rep.apply(ToolCall(id="c1", name="get_order_details"), msg) is msg


def test_success_and_user_side_failures_are_untouched() -> None:
    rep = ReflexiveRepair(tools=TOOLS)
    ok = ToolMessage(id="c1", content="{}", error=False)
    assert rep.apply(ToolCall(id="c1", name="get_order_details"), ok) is ok
    user_fail = _fail(Channel.UNKNOWN_TOOL, "Error: Tool 'x' not found.", requestor="user")
    assert rep.apply(ToolCall(id="c1", name="x", requestor="user"), user_fail) is user_fail


def test_modes() -> None:
    assert make_repair("none", TOOLS) is None
    assert isinstance(make_repair("reflexive", TOOLS), ReflexiveRepair)
    with pytest.raises(ValueError, match="repair mode 'loud' is unknown; allowed: 'none', 'reflexive'"):
        make_repair("loud", TOOLS)
    with pytest.raises(ValueError, match="cannot repair channel"):
        ReflexiveRepair(tools=TOOLS, channels=frozenset({Channel.WRONG_ENTITY}))


def test_describe_arguments_without_parameters() -> None:
    assert describe_arguments({"function": {"name": "t", "parameters": {"type": "object", "properties": {}}}}) == "no arguments"
