"""Failure channels of τ²-bench tool errors, recovered from the error text.

τ²-bench records a failed tool call as a tool message ``"Error: <exception text>"`` with
``error=True``; it does not say *why* the call failed. Our own engine decides the channel
when the failure happens (``env/environment.py``); for third-party results files the
channel has to be recovered from the text plus the domain's tool lists. The rules, in the
order they are tried (they agree with the channels our engine assigns to the same texts,
see ``tests/tau2/test_tau2_engine_agreement.py``):

1. ``Tool 'X' not found.`` (τ²-bench's ``ToolKitBase.use_tool``) → ``cross_role_tool``
   when X is a tool of the *other* side (the agent called a user/device tool or the
   reverse), else ``unknown_tool``. The entity is X.
2. Python call-signature and validation errors (unexpected/missing keyword argument,
   pydantic validation, wrong types, invalid enum value) and the domains' refusals of an
   argument value (``Invalid reason``, "should be different from", "must be positive")
   → ``bad_arguments``.
3. A failing call made by the user simulator to one of its own tools → ``user_tool_error``
   (telecom device-side failures).
4. ``... not found`` / unknown id format → ``wrong_entity``; the entity is the id when the
   text or the call's ``*_id`` argument gives it ("not found or available" is a business
   rule, rule 5).
5. Anything else is a business rule refusing the action → ``policy_violation``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_quantagent.vocab.channels import Channel
from pytest_quantagent.vocab.messages import Requestor

ERROR_PREFIX = "Error:"

_TOOL_NOT_FOUND = re.compile(r"Tool '(?P<name>[^']*)' not found")

# Texts of Python's own call-signature errors (TypeError), pydantic validation errors and
# conversion errors: the call reached the tool with arguments of the wrong shape.
_BAD_ARGUMENTS = re.compile(
    r"unexpected keyword argument"
    r"|missing \d+ required (?:positional |keyword-only )?arguments?"
    r"|takes (?:from )?\d+ (?:to \d+ )?positional arguments? but"
    r"|got multiple values for argument"
    r"|validation errors? for"
    r"|Input should be"
    r"|Field required"
    r"|Extra inputs are not permitted"
    r"|invalid literal for int\(\)"
    r"|could not convert string to float"
    r"|unhashable type"
    r"|object has no attribute"
    r"|object is not (?:subscriptable|iterable|callable)"
    r"|not supported between instances of"
    r"|unsupported operand type"
    r"|must be (?:str|int|float|a string|an integer|a number|a list|a dict)\b",
    re.IGNORECASE,
)

# Argument *values* the τ²-bench domains refuse; our domains raise ArgumentError for the
# same texts (domains/retail/tools.py, domains/telecom/tools.py), so both readings agree.
# Case-sensitive: "'x' is not a valid NetworkModePreference" is an enum conversion, while a
# device answering "... is not a valid option" is a user-side failure.
_BAD_VALUES = re.compile(
    r"^Invalid\b"
    r"|is not a valid [A-Z]\w*"
    r"|should be different from"
    r"|to be exchanged should match"
    r"|must be positive"
    r"|^Expression too long"
    r"|^division by zero"
    r"|^Unsupported operation"
)

# Exists but cannot be had: a business rule, not a wrong id ("New item 123 not found or
# available" — the retail domain raises PolicyViolationError for it).
_UNAVAILABLE = re.compile(r"not found or (?:un)?available", re.IGNORECASE)

_NOT_FOUND = re.compile(
    r"\bnot found\b|\bdoes not exist\b|\bno such\b|\bunknown id\b|\binvalid id\b"
    r"|\bUnknown ID format\b",
    re.IGNORECASE,
)

# "Customer with ID C1001 not found", "Line with phone number 555-0101 not found",
# "Line L1002 not found for customer C1001", "Bill B1 not found".
_ENTITY_IN_TEXT = (
    re.compile(r"with (?:ID|id|phone number|email) '?(?P<v>[^\s']+?)'? not found"),
    re.compile(r"\b[A-Za-z_]+ '?(?P<v>[#\w.@+-]*\d[#\w.@+-]*)'? not found"),
    re.compile(r"Unknown ID format or type: '?(?P<v>[^\s']+)"),
)


@dataclass(frozen=True)
class ToolNames:
    """The tool names of each side of a domain (τ²-bench: agent tools, user/device tools)."""

    agent: frozenset[str] = field(default_factory=frozenset)
    user: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, agent: Iterable[str] = (), user: Iterable[str] = ()) -> ToolNames:
        return cls(frozenset(agent), frozenset(user))

    def union(self, other: ToolNames) -> ToolNames:
        return ToolNames(self.agent | other.agent, self.user | other.user)

    def own(self, requestor: Requestor) -> frozenset[str]:
        """Tools the requestor may call."""
        return self.agent if requestor == "assistant" else self.user

    def other(self, requestor: Requestor) -> frozenset[str]:
        """Tools of the other side."""
        return self.user if requestor == "assistant" else self.agent


@dataclass(frozen=True)
class Classification:
    """Channel of one failed call, and the offending name or id when one is known."""

    channel: Channel
    entity: str | None = None


def as_requestor(value: Any, default: Requestor) -> Requestor:
    """``value`` when it is a τ²-bench requestor string, else ``default``."""
    if value == "assistant":
        return "assistant"
    if value == "user":
        return "user"
    return default


def is_error_text(content: str | None) -> bool:
    """τ²-bench's error convention, used when a (trimmed) file has no ``error`` field."""
    return content is not None and content.lstrip().startswith(ERROR_PREFIX)


def classify_error(
    content: str,
    *,
    tool_name: str,
    requestor: Requestor,
    tools: ToolNames,
    arguments: Mapping[str, Any] | None = None,
) -> Classification:
    """Channel of a failed τ²-bench tool call from its error text (rules in the module doc).

    Parameters
    ----------
    content
        The tool message's content, e.g. ``"Error: Tool 'get_customer' not found."``.
    tool_name
        The name the call used.
    requestor
        ``"assistant"`` for the agent, ``"user"`` for the user simulator.
    tools
        The domain's tool names per side; a name in the other side's set makes an
        unknown-tool error a ``cross_role_tool``.
    arguments
        The call's arguments, used to name the entity of a ``wrong_entity`` failure.

    Examples
    --------
    >>> names = ToolNames.of(agent=["get_order"], user=["toggle_airplane_mode"])
    >>> classify_error("Error: Tool 'toggle_airplane_mode' not found.",
    ...                tool_name="toggle_airplane_mode", requestor="assistant", tools=names)
    Classification(channel=<Channel.CROSS_ROLE_TOOL: 'cross_role_tool'>, entity='toggle_airplane_mode')
    >>> classify_error("Error: Order not found", tool_name="get_order",
    ...                requestor="assistant", tools=names, arguments={"order_id": "#W1"}).entity
    '#W1'
    """
    text = content.strip()
    if text.startswith(ERROR_PREFIX):
        text = text[len(ERROR_PREFIX) :].strip()

    m = _TOOL_NOT_FOUND.search(text)
    if m:
        name = m.group("name")
        # The message names the tool the environment looked up; it is the called name.
        if name in tools.other(requestor) and name not in tools.own(requestor):
            return Classification(Channel.CROSS_ROLE_TOOL, name)
        return Classification(Channel.UNKNOWN_TOOL, name)

    if _BAD_ARGUMENTS.search(text) or _BAD_VALUES.search(text):
        return Classification(Channel.BAD_ARGUMENTS, None)

    if requestor == "user":
        return Classification(Channel.USER_TOOL_ERROR, None)

    if _UNAVAILABLE.search(text):
        return Classification(Channel.POLICY_VIOLATION, None)

    if _NOT_FOUND.search(text):
        return Classification(Channel.WRONG_ENTITY, _entity(text, arguments))

    return Classification(Channel.POLICY_VIOLATION, None)


def _entity(text: str, arguments: Mapping[str, Any] | None) -> str | None:
    for pattern in _ENTITY_IN_TEXT:
        m = pattern.search(text)
        if m and m.group("v"):
            return m.group("v")
    if not arguments:
        return None
    # "Order not found" carries no id: the looked-up id is the call's id-like argument.
    for key, value in arguments.items():
        if isinstance(value, (str, int)) and (key == "id" or key.endswith("_id")):
            return str(value)
    for key, value in arguments.items():
        if isinstance(value, str) and key in ("email", "phone_number"):
            return value
    return None
