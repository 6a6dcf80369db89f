"""τ²-bench message dicts → our message records (``vocab/messages.py``).

τ²-bench messages carry extra fields (cost, usage, raw_data, timestamps, reasoning) that
our records do not keep; trimmed leaderboard files lack ids, which are made up here so
that calls and results still pair.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from pytest_quantagent.tau2.classify import as_requestor, is_error_text
from pytest_quantagent.vocab.messages import (
    AssistantMessage,
    Message,
    Requestor,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)


def convert_messages(messages: list[dict[str, Any]]) -> list[Message]:
    """Convert one simulation's messages; unknown roles are skipped (the reader already
    refused them)."""
    out: list[Message] = []
    pending: deque[tuple[str, Requestor]] = deque()  # (id, requestor) of unanswered calls
    for idx, m in enumerate(messages):
        role = m.get("role")
        turn = m.get("turn_idx")
        if role == "system":
            out.append(SystemMessage(content=str(m.get("content") or ""), turn_idx=turn))
        elif role in ("assistant", "user"):
            calls = []
            for j, tc in enumerate(m.get("tool_calls") or []):
                call_id = str(tc.get("id") or f"call_{idx}_{j}")
                caller = as_requestor(tc.get("requestor"), as_requestor(role, "assistant"))
                args = tc.get("arguments")
                calls.append(
                    ToolCall(
                        id=call_id,
                        name=str(tc.get("name", "")),
                        arguments=args if isinstance(args, dict) else {},
                        requestor=caller,
                    )
                )
                pending.append((call_id, caller))
            content = m.get("content")
            cls = AssistantMessage if role == "assistant" else UserMessage
            out.append(
                cls(
                    content=content if isinstance(content, str) else None,
                    tool_calls=calls or None,
                    turn_idx=turn,
                )
            )
        elif role == "tool":
            content = m.get("content")
            text = content if isinstance(content, str) else str(content)
            answered: tuple[str, Requestor] = _answer(pending, m.get("id"))
            req = as_requestor(m.get("requestor"), answered[1])
            error = bool(m["error"]) if "error" in m else is_error_text(text)
            out.append(
                ToolMessage(id=answered[0], content=text, requestor=req, error=error, turn_idx=turn)
            )
    return out


def _answer(pending: deque[tuple[str, Requestor]], call_id: Any) -> tuple[str, Requestor]:
    if call_id is not None:
        for item in pending:
            if item[0] == call_id:
                pending.remove(item)
                return item
        return str(call_id), "assistant"
    if pending:
        return pending.popleft()
    return "unknown", "assistant"
