"""The environment of one episode: tool dispatch with channel classification.

:meth:`Environment.execute` runs one :class:`ToolCall` and decides, at the point of
failure, which channel a failed call belongs to:

- ``call.parse_error`` set → ``malformed_call`` (τ²-bench retries and drops these
  silently; we answer with an error tool message and count it against the budget);
- the name is in no toolkit → ``unknown_tool``; it is in the *other* role's toolkit →
  ``cross_role_tool``. Both get τ²-bench's text ``Error: Tool '<name>' not found.``;
- :class:`ArgumentError` (missing/unexpected keys, wrong types) → ``bad_arguments``;
- any other :class:`ToolError` → the channel of its class (``wrong_entity``,
  ``policy_violation``, ``user_tool_error``);
- a plain ``ValueError`` from a domain tool (τ²-bench's retail tools raise
  ``ValueError("User not found")`` and the like) → the domain's ``classify_error`` hook.

Any other exception from a tool is a domain bug and propagates.

Results are serialized exactly like τ²-bench's ``Environment.to_json_str`` (pydantic models
dumped in python mode, scalars stringified, ``json.dumps(..., default=str)``) so replays of
τ²-bench trajectories compare equal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from pytest_quantagent.env.db import DB
from pytest_quantagent.env.tasks import EnvAssertion, EnvFunctionCall, InitialState
from pytest_quantagent.env.toolkit import ArgumentError, ToolError, Toolkit, ToolType
from pytest_quantagent.vocab.channels import Channel
from pytest_quantagent.vocab.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)

if TYPE_CHECKING:
    from pytest_quantagent.env.domain import Domain

_PURE = (ToolType.READ, ToolType.THINK)


@dataclass(slots=True)
class Dispatch:
    """The outcome of one tool call: the tool message plus the engine's classification."""

    message: ToolMessage
    channel: Channel | None
    """None when the call succeeded."""
    entity: str | None
    """wrong_entity: the offending id; unknown/cross-role: the called name."""
    result: Any = None
    """The tool's raw return value (None on failure)."""


def _to_plain(resp: Any) -> Any:
    # Mirrors τ²-bench: models dumped (python mode, not recursed further), scalars
    # stringified, containers recursed.
    if isinstance(resp, BaseModel):
        return resp.model_dump()
    if isinstance(resp, str) or resp is None:
        return resp
    if isinstance(resp, (bool, int, float)):
        return str(resp)
    if isinstance(resp, list):
        return [_to_plain(x) for x in resp]
    if isinstance(resp, tuple):
        return tuple(_to_plain(x) for x in resp)
    if isinstance(resp, dict):
        return {k: _to_plain(v) for k, v in resp.items()}
    if isinstance(resp, (datetime, date)):
        return resp.isoformat()
    raise TypeError(f"tool returned an unsupported type {type(resp).__name__}")


def _args_key(call: ToolCall) -> str:
    return json.dumps(call.arguments, sort_keys=True, default=str)


def to_json_str(resp: Any) -> str:
    """Serialize a tool result the way τ²-bench does (strings pass through unchanged)."""
    if isinstance(resp, str):
        return resp
    return json.dumps(_to_plain(resp), default=str)


def deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Recursively merge ``patch`` into a copy of ``base`` (dicts merge, anything else
    replaces), as τ²-bench's ``update_db`` does for ``initialization_data``."""
    out = dict(base)
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


class Environment:
    """Agent-side and user-side toolkits bound to this episode's DB copies.

    Domains with dual control (telecom) subclass this and override :meth:`sync_tools`
    (and, if their toolkits need more than one DB, :meth:`make_toolkits`). ``sync_tools``
    must be idempotent (a function of the current state): the engine calls it after each
    successful tool call and after each tool step, not after every message as τ²-bench does.
    """

    def __init__(self, domain: Domain, db: DB, user_db: DB | None = None) -> None:
        self.domain = domain
        self.tools: Toolkit
        self.user_tools: Toolkit | None
        self.tools, self.user_tools = self.make_toolkits(db, user_db)
        self.write_log: list[tuple[str, str, str]] = []
        """State-changing calls that reached their tool since the initial state was set, as
        ``(requestor, name, canonical JSON arguments)`` (requestor prefixed ``!`` when the
        tool refused). Two environments with the same initial state and the same log are in
        the same state (tools are deterministic), which lets evaluation skip hashing the DB
        in the common case."""
        self.sync_tools()

    # -- construction ---------------------------------------------------------------------

    def make_toolkits(self, db: DB, user_db: DB | None) -> tuple[Toolkit, Toolkit | None]:
        """Instantiate the domain's toolkits on this episode's DBs."""
        user_cls = self.domain.user_toolkit
        return self.domain.agent_toolkit(db), (
            user_cls(user_db) if user_cls is not None else None
        )

    def sync_tools(self) -> None:
        """Propagate state between agent-side and user-side DBs (telecom). No-op here."""

    # -- dispatch -------------------------------------------------------------------------

    def _toolkits_for(self, requestor: str) -> tuple[Toolkit | None, Toolkit | None, str]:
        if requestor == "user":
            return self.user_tools, self.tools, "User tools not available"
        return self.tools, self.user_tools, "Tools not available"

    def _fail(
        self, call: ToolCall, channel: Channel, text: str, entity: str | None
    ) -> Dispatch:
        msg = ToolMessage(
            id=call.id,
            content=f"Error: {text}",
            requestor=call.requestor,
            error=True,
            channel=channel,
        )
        return Dispatch(msg, channel, entity)

    def execute(self, call: ToolCall) -> Dispatch:
        """Run one tool call and classify its failure, if any."""
        if call.parse_error is not None:
            return self._fail(call, Channel.MALFORMED_CALL, call.parse_error, call.name or None)
        own, other, missing_text = self._toolkits_for(call.requestor)
        if own is None or not own.has_tool(call.name):
            cross = other is not None and other.has_tool(call.name)
            channel = Channel.CROSS_ROLE_TOOL if cross else Channel.UNKNOWN_TOOL
            text = missing_text if own is None else f"Tool '{call.name}' not found."
            return self._fail(call, channel, text, call.name)
        mutating = own.tool_type(call.name) not in _PURE
        try:
            result = own.call(call.name, call.arguments)
        except (ToolError, ValueError) as e:
            if mutating:
                # A refused write may have changed state before raising; logged too, so
                # equal logs still mean equal states.
                self.write_log.append(("!" + call.requestor, call.name, _args_key(call)))
            return self._refused(call, e)
        self.sync_tools()
        if mutating:
            self.write_log.append((call.requestor, call.name, _args_key(call)))
        msg = ToolMessage(id=call.id, content=to_json_str(result), requestor=call.requestor)
        return Dispatch(msg, None, None, result)

    def _refused(self, call: ToolCall, e: Exception) -> Dispatch:
        if isinstance(e, ArgumentError):
            return self._fail(call, Channel.BAD_ARGUMENTS, self._tau2_signature_text(call, str(e)), e.entity)
        if isinstance(e, ToolError):
            return self._fail(call, e.channel, str(e), e.entity)
        text = str(e)
        channel = self.domain.classify_error(text)
        entity = self.domain.error_entity(call, text) if channel == Channel.WRONG_ENTITY else None
        return self._fail(call, channel, text, entity)

    def _tau2_signature_text(self, call: ToolCall, text: str) -> str:
        """τ²-bench calls tools as bound methods without a schema check, so a missing or
        unexpected key surfaces as Python's ``TypeError`` text, e.g. ``RetailTools.
        get_order_details() missing 1 required positional argument: 'order_id'``. Render
        the toolkit's signature errors the same way so replays compare equal."""
        prefix = f"{call.name}() "
        if not text.startswith(prefix):
            return text
        rest = text[len(prefix):]
        if rest.startswith("missing "):
            rest = rest.replace(" required argument", " required positional argument", 1)
        elif not rest.startswith("got an unexpected keyword argument"):
            return text
        kit = self.user_tools if call.requestor == "user" else self.tools
        return f"{type(kit).__name__}.{call.name}() {rest}"

    def get_response(self, call: ToolCall) -> ToolMessage:
        """τ²-bench's interface: the tool message answering ``call``."""
        return self.execute(call).message

    def has_tool(self, name: str) -> bool:
        return self.tools.has_tool(name) or (
            self.user_tools is not None and self.user_tools.has_tool(name)
        )

    def is_mutating(self, name: str) -> bool:
        """τ²-bench's ``mutates_state``: WRITE tools (unknown names count as mutating).
        Used for history replay and for "the gold state is incomplete" decisions."""
        for kit in (self.tools, self.user_tools):
            if kit is not None and kit.has_tool(name):
                return kit.tool_type(name) == ToolType.WRITE
        return True

    # -- state ----------------------------------------------------------------------------

    def run_env_function_call(self, call: EnvFunctionCall) -> Any:
        """Call any function (not only tools) of the agent-side or user-side toolkit."""
        kit = self.user_tools if call.env_type == "user" else self.tools
        if kit is None:
            raise ValueError(
                f"env_type {call.env_type!r}: domain {self.domain.name!r} has no user toolkit"
            )
        func = getattr(kit, call.func_name, None)
        if func is None or not callable(func):
            raise ValueError(
                f"function {call.func_name!r} not found in the {call.env_type} toolkit of "
                f"domain {self.domain.name!r}"
            )
        res = func(**call.arguments)
        self.sync_tools()
        return res

    def run_env_assertion(self, assertion: EnvAssertion) -> bool:
        """True when the assertion function returns ``assertion.assert_value``."""
        res = self.run_env_function_call(assertion)
        if not isinstance(res, bool):
            raise TypeError(
                f"assertion function {assertion.func_name!r} returned "
                f"{type(res).__name__}, expected bool"
            )
        return res == assertion.assert_value

    def update_db(self, agent_data: dict[str, Any] | None, user_data: dict[str, Any] | None) -> None:
        """Merge partial DB contents (τ²-bench's ``initialization_data``)."""
        if agent_data:
            db = self.tools.db
            self.tools.db = type(db).model_validate(deep_merge(db.model_dump(), agent_data))
        if user_data:
            if self.user_tools is None:
                raise ValueError(f"domain {self.domain.name!r} has no user DB for user_data")
            udb = self.user_tools.db
            self.user_tools.db = type(udb).model_validate(deep_merge(udb.model_dump(), user_data))
        self.sync_tools()

    def replay_history(self, messages: Iterable[Message]) -> None:
        """Re-apply the state-changing tool calls of a message history (skipping unknown
        names and reads, as τ²-bench's ``set_state`` does)."""
        for m in messages:
            if isinstance(m, (AssistantMessage, UserMessage)) and m.tool_calls:
                for tc in m.tool_calls:
                    if tc.parse_error is None and self.has_tool(tc.name) and self.is_mutating(tc.name):
                        self.execute(tc)

    def set_state(self, initial_state: InitialState | None) -> None:
        """Apply a task's initial state: data patches, initialization actions, history."""
        if initial_state is None:
            return
        data = initial_state.initialization_data
        if data is not None:
            self.update_db(data.agent_data, data.user_data)
        for action in initial_state.initialization_actions or []:
            self.run_env_function_call(action)
        if initial_state.message_history:
            self.replay_history(initial_state.message_history)
        self.sync_tools()
        self.write_log.clear()

    def get_db_hash(self) -> str:
        db: DB = self.tools.db
        return db.get_hash()

    def get_user_db_hash(self) -> str | None:
        udb = self.user_tools.db if self.user_tools is not None else None
        return udb.get_hash() if udb is not None else None
