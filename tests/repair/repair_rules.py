"""Mock-backend rules for the repair and screen tests (loaded as ``repair_rules:<name>``)."""

from __future__ import annotations

from typing import Any

#: Words of the reflexive repair text that tell the model its tool does not exist.
REPAIR_CUE = "does not exist for you"


def _user_and_email(request: Any) -> tuple[str, str]:
    user_text = " ".join(m["content"] or "" for m in request.messages if m["role"] == "user")
    email = next((w.strip(".,") for w in user_text.split() if "@" in w), "new0@x.org")
    return "u" + email.removeprefix("new").split("@")[0], email


def _called(request: Any) -> list[str]:
    return [tc["function"]["name"] for m in request.messages if m["role"] == "assistant"
            for tc in m.get("tool_calls") or ()]


def _solve(request: Any) -> dict[str, Any]:
    uid, email = _user_and_email(request)
    called = _called(request)
    if "get_user" not in called:
        return {"tool_calls": [{"name": "get_user", "arguments": {"user_id": uid}}]}
    if "set_email" not in called:
        return {"tool_calls": [{"name": "set_email", "arguments": {"user_id": uid, "email": email}}]}
    return {"content": "Your email is updated. ###STOP###"}


def solving_rule(request: Any) -> dict[str, Any]:
    """Reads the user, sets the email, stops: never a failed call."""
    return _solve(request)


def hallucinating_rule(request: Any) -> dict[str, Any]:
    """Calls the non-existent ``get_usr`` until a tool result says the tool does not exist
    and lists ``get_user`` (the reflexive repair text); then solves the task. A plain
    ``Error: ...`` result does not change its mind, so without repair it exhausts the error
    budget."""
    repaired = any(m["role"] == "tool" and REPAIR_CUE in (m["content"] or "")
                   and "get_user" in m["content"] for m in request.messages)
    if not repaired:
        uid, _ = _user_and_email(request)
        return {"tool_calls": [{"name": "get_usr", "arguments": {"user_id": uid}}]}
    return _solve(request)
