"""Chat format of the bundled reference agent, and tool-call parsing for any model family.

The bundled model sees a compact transcript (its 1k-token context cannot hold a policy
document or JSON tool schemas; it was trained on one fixed toolset per domain, so the
system prompt and tool list are *not* rendered — only their presence is marked)::

    <bos><|system|><|end|><|user|>Hi, I want to cancel ...<|end|>
    <|assistant|><|call|>{"name":"find_user_id_by_email","arguments":{"email":"..."}}<|end|>
    <|tool|>sara_doe_496<|end|>
    <|assistant|>Your order is cancelled.<|end|>

Tool results are re-serialised as compact JSON (null fields dropped) when they parse as JSON. Generation starts
after ``<|assistant|>`` and stops at ``<|end|>``.

:func:`parse_tool_calls` reads the calls out of a model's text for the bundled format
(``<|call|>{json}``), the Hermes/Qwen/SmolLM format (``<tool_call>{json}</tool_call>``) and
a bare JSON object; a call that cannot be read comes back with an empty name and its raw
text as ``arguments`` so the agent records a ``malformed_call``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_quantagent.bundled.tokenizer import (
    ASSISTANT,
    BOS,
    CALL,
    END,
    SYSTEM,
    TOOL,
    USER,
)


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def compact_json(text: str) -> str:
    """``text`` re-serialised as compact JSON (keys with null values left out: the small
    model's context is short) when it parses as a JSON object or list, else unchanged."""
    s = text.strip()
    if not s or s[0] not in "{[":
        return text
    try:
        value = json.loads(s)
    except json.JSONDecodeError:
        return text
    return json.dumps(_drop_nulls(value), ensure_ascii=False, separators=(",", ":"))


def render_call(name: str, arguments: Mapping[str, Any] | str) -> str:
    """One tool call in the bundled format (without the leading ``<|call|>``)."""
    if isinstance(arguments, str):
        try:
            args_value: Any = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            # Keep what the model wrote so that a replayed malformed call stays malformed.
            return '{"name":' + json.dumps(name) + ',"arguments":' + arguments + "}"
    else:
        args_value = dict(arguments)
    return json.dumps(
        {"name": name, "arguments": args_value}, ensure_ascii=False, separators=(",", ":")
    )


def render_messages(
    messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True
) -> str:
    """Render OpenAI-format chat messages in the bundled model's format."""
    parts: list[str] = [BOS]
    for m in messages:
        role = m.get("role")
        content = m.get("content") or ""
        if role == "system":
            parts.append(f"{SYSTEM}{END}")
        elif role == "user":
            parts.append(f"{USER}{content}{END}")
        elif role == "assistant":
            body = content
            for call in m.get("tool_calls") or []:
                fn = call.get("function", call)
                body += CALL + render_call(fn.get("name", ""), fn.get("arguments", {}))
            parts.append(f"{ASSISTANT}{body}{END}")
        elif role == "tool":
            parts.append(f"{TOOL}{compact_json(content)}{END}")
        else:
            raise ValueError(
                f"message role {role!r} is not one of 'system', 'user', 'assistant', 'tool'"
            )
    if add_generation_prompt:
        parts.append(ASSISTANT)
    return "".join(parts)


@dataclass(frozen=True)
class ParsedCall:
    """A tool call read from model text. ``name == ""`` means it could not be read;
    ``arguments`` then holds the raw text."""

    name: str
    arguments: str
    raw: str


@dataclass(frozen=True)
class ParsedTurn:
    """A model turn split into free text and tool calls."""

    content: str | None
    calls: list[ParsedCall]


_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def _read_call(body: str) -> ParsedCall:
    text = body.strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        # A complete object followed by trailing text is still a call (models ramble).
        try:
            obj, _ = json.JSONDecoder().raw_decode(text)
        except json.JSONDecodeError:
            return ParsedCall(name="", arguments=text, raw=body)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return ParsedCall(name="", arguments=text, raw=body)
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        args_text = args
    else:
        args_text = json.dumps(args, ensure_ascii=False)
    return ParsedCall(name=obj["name"], arguments=args_text, raw=body)


def parse_tool_calls(text: str) -> ParsedTurn:
    """Split generated text into content and tool calls (bundled, Hermes or bare JSON)."""
    if CALL in text:
        head, *bodies = text.split(CALL)
        calls = [_read_call(b.replace(END, "")) for b in bodies]
        return ParsedTurn(content=head.strip() or None, calls=calls)
    if "<tool_call>" in text:
        calls = [_read_call(b) for b in _HERMES.findall(text)]
        head = text.split("<tool_call>", 1)[0].strip()
        return ParsedTurn(content=head or None, calls=calls)
    stripped = text.strip()
    if stripped.startswith("{") and '"name"' in stripped:
        call = _read_call(stripped)
        if call.name:
            return ParsedTurn(content=None, calls=[call])
    return ParsedTurn(content=stripped or None, calls=[])
