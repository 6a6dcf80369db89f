"""Response parsing of the OpenAI-compatible backend: a chat-completion body → a
:class:`~pytest_quantagent.backends.base.Generation`.

Whatever shape the server gives the model's output, it stays model output: odd
``tool_calls`` entries become nameless calls (``malformed_call``, raw text kept), content
parts are joined, text over the arm's ``max_output_chars`` is cut with a marker, tool-call
markup the server's parser gave up on is read with our own parser, and the logprobs give the
tool-name decisions (:func:`tool_name_decisions`, also used by the vLLM backend). No
transport here: bytes in, a :class:`Generation` (or :class:`BadResponseError`) out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pytest_quantagent.backends import json_codec
from pytest_quantagent.backends.base import Generation, RawToolCall
from pytest_quantagent.vocab.limits import MAX_JSON_DEPTH, JSONDepthError, depth_exceeds
from pytest_quantagent.vocab.messages import Decision

#: Model outputs (text, tool-call arguments) longer than this many characters are truncated
#: with a marker and the call classified as malformed (arm option ``max_output_chars``).
DEFAULT_MAX_OUTPUT_CHARS = 32_768
TRUNCATION_MARKER = "…[truncated by quantagent: {n} characters in all]"


class BadResponseError(Exception):
    """The server's answer was not a chat completion (truncated or garbled body): retried."""


def parse_response(content: bytes, *, max_chars: int, source: str,
                   redact: Callable[[str], str]) -> Generation:
    """A chat-completion response body → :class:`Generation` (:func:`parse_completion` of its
    first choice). Not a chat completion (garbled, truncated, nested past
    :data:`~pytest_quantagent.vocab.limits.MAX_JSON_DEPTH`) → :class:`BadResponseError`
    naming ``source`` (the endpoint) and the start of the body, through ``redact``."""
    try:
        data = json_codec.loads(content)
        choice = data["choices"][0]
        message = choice["message"]
        if not isinstance(message, dict):
            raise TypeError("message is not an object")
        if depth_exceeds(message):
            raise JSONDepthError(f"message nested deeper than {MAX_JSON_DEPTH} levels")
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise BadResponseError(
            f"not a chat completion from {source}: {redact(repr(content[:200]))}"
        ) from e
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    usage = data.get("usage") if isinstance(data, dict) else None
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    return parse_completion(message, logprobs if isinstance(logprobs, dict) else None,
                            usage if isinstance(usage, dict) else None,
                            max_chars=max_chars,
                            finish_reason=finish if isinstance(finish, str) else None)


_CALL_MARKUP = "<tool_call>"

def _cap(text: str, max_chars: int) -> tuple[str, bool]:
    """``text`` cut to ``max_chars`` with a marker saying how long it was."""
    if len(text) <= max_chars:
        return text, False
    return text[:max_chars] + TRUNCATION_MARKER.format(n=len(text)), True


def _content_text(content: Any) -> str | None:
    """Message content as text: a string, or the OpenAI content-part form (a list of
    ``{"type": "text", "text": ...}``), joined; anything else as its JSON."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                parts.append(json.dumps(part, ensure_ascii=False))
        return "".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _raw_call(tc: Any, i: int) -> RawToolCall:
    """One entry of ``tool_calls`` as the model (or the server's parser) wrote it. A shape
    that names no function is kept as a call without a name, its JSON as the arguments, so
    the agent records a ``malformed_call`` with the raw text."""
    if isinstance(tc, dict) and isinstance(tc.get("function"), dict):
        fn = tc["function"]
        args = fn.get("arguments")
        if not isinstance(args, str):
            # Some servers send arguments already decoded; keep the call, re-encode.
            args = "" if args is None else json.dumps(args, ensure_ascii=False)
        name = fn.get("name")
        return RawToolCall(id=str(tc.get("id") or f"call_{i}"),
                           name=name if isinstance(name, str) else "", arguments=args)
    call_id = tc.get("id") if isinstance(tc, dict) else None
    return RawToolCall(id=str(call_id or f"call_{i}"), name="",
                       arguments=json.dumps(tc, ensure_ascii=False))


def parse_completion(
    message: dict[str, Any], logprobs: dict[str, Any] | None, usage: dict[str, Any] | None,
    *, max_chars: int = DEFAULT_MAX_OUTPUT_CHARS, finish_reason: str | None = None,
) -> Generation:
    """A chat-completion ``message`` (+ optional ``logprobs``/``usage``) → :class:`Generation`.

    Whatever shape the server gives the model's output, it stays model output: odd
    ``tool_calls`` entries become nameless calls (``malformed_call``, raw text kept), content
    parts are joined, and any text over ``max_chars`` is cut with a marker
    (``Generation.truncated``). ``finish_reason`` is the choice's (kept as given, at most 32
    characters); the reasoning's length comes from ``reasoning_content`` (or ``reasoning``) and
    ``usage.completion_tokens_details.reasoning_tokens`` where the server sends them."""
    truncated = False
    calls: list[RawToolCall] = []
    raw_calls = message.get("tool_calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        raw_calls = [raw_calls]
    for i, tc in enumerate(raw_calls or ()):
        call = _raw_call(tc, i)
        args, cut = _cap(call.arguments, max_chars)
        name, cut_name = _cap(call.name, 256)
        if cut or cut_name:
            truncated = True
            call = RawToolCall(id=call.id[:256], name="" if cut_name else name, arguments=args)
        calls.append(call)
    content = original = _content_text(message.get("content"))
    if content is not None:
        content, cut = _cap(content, max_chars)
        truncated = truncated or cut
        original = content
    if not calls and isinstance(content, str) and _CALL_MARKUP in content:
        # The server's tool parser gave up (e.g. vLLM's hermes parser on broken JSON) and
        # returned the model's tool-call markup as text. It is still a call, a malformed one:
        # read it with our own parser so the engine records malformed_call, not a message.
        from pytest_quantagent.bundled.chat import parse_tool_calls

        turn = parse_tool_calls(content)
        calls = [RawToolCall(id=f"call_{i}", name=c.name, arguments=c.arguments)
                 for i, c in enumerate(turn.calls)]
        content = turn.content
    lp = (logprobs or {}).get("content")
    tokens = [t for t in lp if isinstance(t, dict)] if isinstance(lp, list) else []
    try:
        decisions = tool_name_decisions(tokens, [c.name for c in calls]) if tokens and calls else []
    except (KeyError, TypeError, ValueError, IndexError):
        decisions = []  # logprobs of an odd shape: no margins, the output stands
    raw_text = "".join(str(t.get("token", "")) for t in tokens) if tokens else original
    if raw_text is not None:
        raw_text, cut = _cap(raw_text, max_chars)
        truncated = truncated or cut
    usage = usage or {}
    pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
    details = usage.get("completion_tokens_details")
    rt = details.get("reasoning_tokens") if isinstance(details, dict) else None
    reasoning = message.get("reasoning_content")
    if not isinstance(reasoning, str):
        reasoning = message.get("reasoning")
    return Generation(
        content=content,
        tool_calls=calls,
        raw_text=raw_text,
        decisions=decisions,
        prompt_tokens=pt if isinstance(pt, int) and not isinstance(pt, bool) else None,
        completion_tokens=_count(ct),
        truncated=truncated,
        finish_reason=finish_reason[:32] if finish_reason else None,
        reasoning_tokens=_count(rt),
        reasoning_chars=len(reasoning) if isinstance(reasoning, str) and reasoning else None,
    )


def _count(v: Any) -> int | None:
    """A token count from the server's ``usage``: a non-negative int, else None (unknown)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def tool_name_decisions(tokens: list[dict[str, Any]], names: list[str]) -> list[Decision]:
    """Top-1 vs top-2 logprob at the first token of each tool name in the generated text.

    The token stream is the text the model generated (tool-call markup included, as vLLM
    returns it); each name is located in order after the previous one. A name not found
    in the text, or a token without two alternatives, yields no decision.
    """
    starts: list[int] = []
    pos = 0
    for t in tokens:
        starts.append(pos)
        pos += len(t.get("token", ""))
    text = "".join(t.get("token", "") for t in tokens)
    out: list[Decision] = []
    search_from = 0
    tok_idx = 0
    for name in names:
        if not name:
            continue
        at = text.find(name, search_from)
        if at < 0:
            continue
        search_from = at + len(name)
        while tok_idx + 1 < len(starts) and starts[tok_idx + 1] <= at:
            tok_idx += 1
        top = tokens[tok_idx].get("top_logprobs") or []
        if len(top) < 2:
            continue
        out.append(
            Decision(
                kind="tool_name",
                top1=str(top[0]["token"]),
                top2=str(top[1]["token"]),
                margin=float(top[0]["logprob"]) - float(top[1]["logprob"]),
                chosen=name,
            )
        )
    return out
