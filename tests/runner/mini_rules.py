"""Mock-backend rules for the mini domain (importable as ``mini_rules:solving_rule``)."""

from __future__ import annotations

from typing import Any


def solving_rule(request: Any) -> dict[str, Any]:
    """A mock-backend rule that solves a mini task: read the user, set the email, stop."""
    turns = sum(1 for m in request.messages if m["role"] == "assistant")
    user_text = " ".join(m["content"] or "" for m in request.messages if m["role"] == "user")
    email = next((w.strip(".,") for w in user_text.split() if "@" in w), "new0@x.org")
    uid = "u" + email.removeprefix("new").split("@")[0]
    if turns <= 1:
        return {"tool_calls": [{"name": "get_user", "arguments": {"user_id": uid}}]}
    if turns == 2:
        return {"tool_calls": [{"name": "set_email", "arguments": {"user_id": uid, "email": email}}]}
    return {"content": "Your email is updated. ###STOP###"}


def failing_rule(request: Any) -> dict[str, Any]:
    """A backend that refuses the request for a reason no retry fixes (as a server's
    HTTP 400 "context length exceeded")."""
    raise ValueError("prompt is longer than the model's context (4096 tokens)")


def logged_solving_rule(request: Any) -> dict[str, Any]:
    """:func:`solving_rule`, appending one line to the file ``$MINI_RULES_EPISODE_LOG`` at
    each episode's first model call: a count of the episodes a process actually ran."""
    import os

    if not any(m["role"] == "tool" for m in request.messages):
        with open(os.environ["MINI_RULES_EPISODE_LOG"], "a", encoding="utf-8") as f:
            f.write("episode\n")
    return solving_rule(request)
