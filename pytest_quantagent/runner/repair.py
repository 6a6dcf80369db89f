"""Reflexive repair: a measured mitigation arm.

After a failed agent tool call of a repaired channel, the tool result the agent sees is
rewritten into a *reflexive* message: it says what was wrong (the tool does not exist, or the
arguments were wrong), lists what is valid (the agent's tool names, or the tool's expected
arguments), and asks the agent to diagnose the mistake and re-issue the call.

Only the text changes. The call still failed: ``error=True`` and the channel stay as the
engine decided, so the failure counts against the error budget and in the channel rates
exactly as without repair — the arm labelled ``int4+repair`` is compared with ``int4`` on
the same footing.

Channels repaired by mode ``reflexive``: ``unknown_tool`` and ``cross_role_tool`` (the tool
does not exist for the agent, the paper's intervention) and ``bad_arguments`` (the expected
arguments are listed). Other failures (``wrong_entity``, ``policy_violation``, ...) carry
information the agent needs verbatim and are left alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_quantagent.vocab.channels import Channel
from pytest_quantagent.vocab.messages import ToolCall, ToolMessage

REPAIRED_CHANNELS: frozenset[Channel] = frozenset(
    {Channel.UNKNOWN_TOOL, Channel.CROSS_ROLE_TOOL, Channel.BAD_ARGUMENTS}
)


def _type_name(schema: Mapping[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    if "anyOf" in schema:
        kinds = [_type_name(s) for s in schema["anyOf"] if s.get("type") != "null"]
        return " or ".join(kinds) or "any"
    t = schema.get("type")
    if t == "array":
        return f"list of {_type_name(schema.get('items', {}))}"
    return str(t or "any")


def describe_arguments(tool_schema: Mapping[str, Any]) -> str:
    """``order_id (string, required), reason (one of 'a', 'b', required)`` for an OpenAI tool
    schema; ``no arguments`` when it takes none."""
    params = tool_schema.get("function", tool_schema).get("parameters", {})
    props: Mapping[str, Any] = params.get("properties", {})
    required = set(params.get("required", ()))
    if not props:
        return "no arguments"
    parts = []
    for name, schema in props.items():
        flag = "required" if name in required else "optional"
        parts.append(f"{name} ({_type_name(schema)}, {flag})")
    return ", ".join(parts)


@dataclass(frozen=True)
class ReflexiveRepair:
    """Rewrites failed agent tool results of :data:`REPAIRED_CHANNELS`.

    ``tools`` are the agent's OpenAI tool schemas (the same list the model sees).
    """

    tools: Sequence[Mapping[str, Any]]
    channels: frozenset[Channel] = REPAIRED_CHANNELS

    def __post_init__(self) -> None:
        unknown = set(self.channels) - REPAIRED_CHANNELS
        if unknown:
            raise ValueError(
                f"reflexive repair cannot repair channel(s) {sorted(c.value for c in unknown)}; "
                f"allowed: {sorted(c.value for c in REPAIRED_CHANNELS)}"
            )

    @property
    def tool_names(self) -> list[str]:
        return [t.get("function", t)["name"] for t in self.tools]

    def _schema(self, name: str) -> Mapping[str, Any] | None:
        for t in self.tools:
            if t.get("function", t).get("name") == name:
                return t
        return None

    def message(self, call: ToolCall, result: ToolMessage) -> str:
        """The reflexive text for a failed call (the original error first, verbatim)."""
        original = result.content
        if result.channel in (Channel.UNKNOWN_TOOL, Channel.CROSS_ROLE_TOOL):
            return (
                f"{original}\nThe tool '{call.name}' does not exist for you. "
                f"The tools you can call are: {', '.join(self.tool_names)}. "
                "Diagnose what went wrong — which of these tools does what you intended? — "
                "and re-issue the call with a valid tool name."
            )
        schema = self._schema(call.name)
        expected = describe_arguments(schema) if schema is not None else "see the tool list"
        return (
            f"{original}\nThe arguments of '{call.name}' were wrong. "
            f"It expects: {expected}. "
            "Diagnose what went wrong and re-issue the call with corrected arguments."
        )

    def apply(self, call: ToolCall, result: ToolMessage) -> ToolMessage:
        """The tool message the agent sees; unchanged unless an agent call of a repaired
        channel failed."""
        if (
            not result.error
            or result.requestor != "assistant"
            or result.channel not in self.channels
        ):
            return result
        return result.model_copy(update={"content": self.message(call, result)})


def make_repair(mode: str, tools: Sequence[Mapping[str, Any]]) -> ReflexiveRepair | None:
    """The repair policy of an arm's ``repair`` mode (``none`` → None)."""
    if mode == "none":
        return None
    if mode == "reflexive":
        return ReflexiveRepair(tools=tools)
    raise ValueError(f"repair mode {mode!r} is unknown; allowed: 'none', 'reflexive'")
