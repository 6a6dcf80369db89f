"""τ²-compatible message records.

Field names and meanings follow τ²-bench's message schema (``role``, ``content``,
``tool_calls`` with ``id``/``name``/``arguments``/``requestor``, tool messages with
``error``), so trajectories round-trip with τ²-bench results files. Our additions are
optional fields: ``channel`` on tool messages (decided by the engine), ``raw`` on
assistant/user messages (the model's text when a call could not be parsed) and
``decisions`` (top-2 logit margins at tool-name decisions, when the backend gives them).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_quantagent.vocab.channels import Channel

Requestor = Literal["assistant", "user"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolCall(_Record):
    """One tool call, as requested by the agent (``assistant``) or the user."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    requestor: Requestor = "assistant"
    parse_error: str | None = None
    """Set by the backend's parser when the model's call could not be parsed (bad JSON,
    non-object arguments, empty turn). The engine answers such a call with an error tool
    message of channel ``malformed_call``; it counts against the error budget."""


class Decision(_Record):
    """Top-1 vs top-2 logits at one decision point (e.g. the first token of a tool name).

    ``margin = top1_logit - top2_logit`` (in logits; logprob differences are the same).
    """

    kind: Literal["tool_name", "argument"] = "tool_name"
    top1: str
    top2: str
    margin: float
    chosen: str | None = None
    """The full name/value the model went on to produce at this decision."""


class SystemMessage(_Record):
    role: Literal["system"] = "system"
    content: str
    turn_idx: int | None = None


class AssistantMessage(_Record):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    turn_idx: int | None = None
    raw: str | None = None
    """The unparsed model output when a tool call could not be parsed (malformed_call)."""
    decisions: list[Decision] | None = None
    usage: dict[str, int] | None = None

    def is_stop(self, token: str = "###STOP###") -> bool:
        return self.content is not None and token in self.content


class UserMessage(_Record):
    role: Literal["user"] = "user"
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    turn_idx: int | None = None
    raw: str | None = None


class ToolMessage(_Record):
    role: Literal["tool"] = "tool"
    id: str
    content: str
    requestor: Requestor = "assistant"
    error: bool = False
    turn_idx: int | None = None
    channel: Channel | None = None
    """Set by the engine for every failed or malformed call; None when the call succeeded."""


Message = Annotated[
    SystemMessage | AssistantMessage | UserMessage | ToolMessage,
    Field(discriminator="role"),
]

STOP_TOKEN = "###STOP###"
TRANSFER_TOKEN = "###TRANSFER###"
OUT_OF_SCOPE_TOKEN = "###OUT-OF-SCOPE###"
USER_STOP_TOKENS: tuple[str, ...] = (STOP_TOKEN, TRANSFER_TOKEN, OUT_OF_SCOPE_TOKEN)
