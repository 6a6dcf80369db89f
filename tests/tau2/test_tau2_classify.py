"""Channel classification of τ²-bench error texts.

The texts are the exception messages τ²-bench's tools and Python itself produce
(``Error: {exception}`` as written by ``Environment.get_response``): ``ToolKitBase.use_tool``
for unknown names, Python's ``TypeError`` for call signatures, pydantic for validation,
retail/telecom tools for ids and business rules.
"""

from __future__ import annotations

import pytest

from pytest_quantagent.tau2.classify import ToolNames, classify_error, is_error_text
from pytest_quantagent.vocab.channels import Channel
from pytest_quantagent.vocab.messages import Requestor

NAMES = ToolNames.of(
    agent=["get_order_details", "get_customer_by_id", "suspend_line"],
    user=["toggle_airplane_mode", "check_network_status"],
)


@pytest.mark.parametrize(
    ("text", "tool", "requestor", "channel", "entity"),
    [
        # unknown_tool: the name is in neither toolkit
        (
            "Error: Tool 'get_customer_details' not found.",
            "get_customer_details",
            "assistant",
            Channel.UNKNOWN_TOOL,
            "get_customer_details",
        ),
        (
            "Error: Tool 'reboot_phone' not found.",
            "reboot_phone",
            "user",
            Channel.UNKNOWN_TOOL,
            "reboot_phone",
        ),
        # cross_role_tool: the other side's tool
        (
            "Error: Tool 'toggle_airplane_mode' not found.",
            "toggle_airplane_mode",
            "assistant",
            Channel.CROSS_ROLE_TOOL,
            "toggle_airplane_mode",
        ),
        (
            "Error: Tool 'suspend_line' not found.",
            "suspend_line",
            "user",
            Channel.CROSS_ROLE_TOOL,
            "suspend_line",
        ),
        # bad_arguments: Python call-signature errors and validation
        (
            "Error: TelecomTools.get_customer_by_id() got an unexpected keyword argument "
            "'customer'",
            "get_customer_by_id",
            "assistant",
            Channel.BAD_ARGUMENTS,
            None,
        ),
        (
            "Error: RetailTools.get_order_details() missing 1 required positional argument: "
            "'order_id'",
            "get_order_details",
            "assistant",
            Channel.BAD_ARGUMENTS,
            None,
        ),
        (
            "Error: 1 validation error for Address\nzip\n  Field required",
            "get_order_details",
            "assistant",
            Channel.BAD_ARGUMENTS,
            None,
        ),
        (
            "Error: 'bogus' is not a valid NetworkModePreference",
            "toggle_airplane_mode",
            "user",
            Channel.BAD_ARGUMENTS,
            None,
        ),
        # wrong_entity: ids that do not exist
        (
            "Error: Customer with ID C9999 not found",
            "get_customer_by_id",
            "assistant",
            Channel.WRONG_ENTITY,
            "C9999",
        ),
        (
            "Error: Line L1002 not found for customer C1001",
            "suspend_line",
            "assistant",
            Channel.WRONG_ENTITY,
            "L1002",
        ),
        (
            "Error: Unknown ID format or type: X12",
            "get_customer_by_id",
            "assistant",
            Channel.WRONG_ENTITY,
            "X12",
        ),
        # bad_arguments: argument values the domains refuse (our engine's ArgumentError)
        ("Error: Invalid reason", "cancel_pending_order", "assistant", Channel.BAD_ARGUMENTS, None),
        (
            "Error: The new item id should be different from the old item id",
            "modify_pending_order_items",
            "assistant",
            Channel.BAD_ARGUMENTS,
            None,
        ),
        (
            "Error: get_order_details() missing 1 required argument: 'order_id'",
            "get_order_details",
            "assistant",
            Channel.BAD_ARGUMENTS,
            None,
        ),
        # a device refusing a value is a user-side failure, not an enum conversion error
        (
            "Error: Failed to set network mode: 'bogus' is not a valid option.",
            "set_network_mode_preference",
            "user",
            Channel.USER_TOOL_ERROR,
            None,
        ),
        # exists but unavailable: a business rule, not a wrong id
        (
            "Error: New item 1234567890 not found or available",
            "modify_pending_order_items",
            "assistant",
            Channel.POLICY_VIOLATION,
            None,
        ),
        # policy_violation: business rules
        (
            "Error: Non-pending order cannot be cancelled",
            "get_order_details",
            "assistant",
            Channel.POLICY_VIOLATION,
            None,
        ),
        (
            "Error: Line must be active to suspend",
            "suspend_line",
            "assistant",
            Channel.POLICY_VIOLATION,
            None,
        ),
        # user_tool_error: a device-side failure of the user's own tool
        (
            "Error: Cannot toggle airplane mode while the phone is off",
            "toggle_airplane_mode",
            "user",
            Channel.USER_TOOL_ERROR,
            None,
        ),
    ],
)
def test_channel_from_text(
    text: str, tool: str, requestor: Requestor, channel: Channel, entity: str | None
) -> None:
    c = classify_error(text, tool_name=tool, requestor=requestor, tools=NAMES)
    assert c.channel == channel
    assert c.entity == entity


def test_entity_from_arguments_when_text_has_no_id() -> None:
    c = classify_error(
        "Error: Order not found",
        tool_name="get_order_details",
        requestor="assistant",
        tools=NAMES,
        arguments={"order_id": "#W0000000"},
    )
    assert (c.channel, c.entity) == (Channel.WRONG_ENTITY, "#W0000000")


def test_name_known_to_both_sides_is_not_cross_role() -> None:
    both = ToolNames.of(agent=["x"], user=["x"])
    c = classify_error(
        "Error: Tool 'x' not found.", tool_name="x", requestor="assistant", tools=both
    )
    assert c.channel == Channel.UNKNOWN_TOOL


def test_without_tool_lists_every_missing_tool_is_unknown() -> None:
    c = classify_error(
        "Error: Tool 'toggle_airplane_mode' not found.",
        tool_name="toggle_airplane_mode",
        requestor="assistant",
        tools=ToolNames(),
    )
    assert c.channel == Channel.UNKNOWN_TOOL


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("Error: Order not found", True),
        ("  Error: x", True),
        ('{"order_id": "#W1", "status": "Error: none"}', False),
        ("", False),
        (None, False),
    ],
)
def test_error_prefix(content: str | None, expected: bool) -> None:
    assert is_error_text(content) is expected
