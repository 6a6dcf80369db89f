"""``LLMAgent``: the agent side of an episode, driven by a model through a ModelClient.

τ² messages are converted to OpenAI chat format (system = the domain policy), the model is
called, and its tool calls are parsed. A call whose arguments do not parse as JSON, whose
arguments are not an object, or a turn with neither text nor calls becomes a
``ToolCall(parse_error=...)`` with the raw text kept in ``AssistantMessage.raw``; the engine
answers it with a ``malformed_call`` error. Nothing the model writes is ever evaluated.

Repair: with a repair policy (arm ``X+repair``, see :mod:`pytest_quantagent.runner.repair`),
failed tool results are shown to the model in their reflexive form. Only what the model reads
changes; the episode's messages keep the engine's original result (error, channel and
budget accounting are untouched).

Hot path: tool schemas come in built once per domain; converted history messages are cached
by identity, so each call converts only the messages added since the previous call.

Answers: each model turn's output tokens, finish reason, emptiness and reasoning length are
kept in :attr:`LLMAgent.turns` (the episode record's ``turns``), whatever the turn became.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pytest_quantagent.backends.base import GenerateRequest, Generation
from pytest_quantagent.backends.wrapper import ModelClient
from pytest_quantagent.runner.repair import ReflexiveRepair
from pytest_quantagent.store.records import AnswerTurn
from pytest_quantagent.vocab.limits import loads_bounded
from pytest_quantagent.vocab.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

_SEED_MASK = (1 << 31) - 1
_TRUNCATED = "…[truncated by quantagent:"
"""The marker a backend puts where it cut an over-long output (see ``max_output_chars``)."""


def tool_calls_to_openai(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """τ² tool calls as OpenAI ``tool_calls`` entries.

    A malformed call is replayed with "{}": chat templates parse arguments as JSON, and the
    tool message already tells the model what went wrong."""
    return [
        {"id": tc.id, "type": "function",
         "function": {"name": tc.name, "arguments": json.dumps(tc.arguments)}}
        for tc in calls
    ]


def message_to_openai(m: Message) -> dict[str, Any]:
    """One τ² message as an OpenAI chat message."""
    if isinstance(m, UserMessage):
        return {"role": "user", "content": m.content or ""}
    if isinstance(m, AssistantMessage):
        out: dict[str, Any] = {"role": "assistant", "content": m.content}
        if m.tool_calls:
            out["tool_calls"] = tool_calls_to_openai(m.tool_calls)
        return out
    if isinstance(m, ToolMessage):
        return {"role": "tool", "tool_call_id": m.id, "content": m.content}
    if isinstance(m, SystemMessage):
        return {"role": "system", "content": m.content}
    raise TypeError(f"cannot convert message of type {type(m).__name__}")


def parse_tool_calls(gen: Generation, turn: int) -> tuple[list[ToolCall], bool]:
    """The model's calls as τ² ``ToolCall``s; second item: whether any failed to parse."""
    calls: list[ToolCall] = []
    bad = False
    for i, raw in enumerate(gen.tool_calls):
        call_id = raw.id or f"call_{turn}_{i}"
        problem: str | None = None
        args: Any = {}
        if not raw.name:
            problem = "tool call without a function name"
        text = raw.arguments.strip()
        if _TRUNCATED in text:
            problem = problem or ("arguments longer than the arm's max_output_chars "
                                  "(stored cut, with a marker)")
            text = ""
        if text:
            try:
                args = loads_bounded(text)
            except ValueError as e:
                problem = problem or f"arguments are not valid JSON ({e})"
                args = {}
        if not isinstance(args, dict):
            problem = problem or f"arguments must be a JSON object, got {type(args).__name__}"
            args = {}
        if problem:
            bad = True
        calls.append(ToolCall(id=call_id, name=raw.name, arguments=args, parse_error=problem))
    return calls, bad


class LLMAgent:
    """Implements the episode ``Agent`` protocol on top of a :class:`ModelClient`."""

    def __init__(
        self,
        client: ModelClient,
        system_prompt: str,
        tools: list[dict[str, Any]],
        seed: int,
        *,
        temperature: float = 0.0,
        max_tokens: int = 512,
        want_margins: bool = True,
        repair: ReflexiveRepair | None = None,
    ) -> None:
        self.client = client
        self.repair = repair
        self._calls_by_id: dict[str, ToolCall] = {}
        self.tools = tools
        self.seed = seed
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.want_margins = want_margins
        self._system = {"role": "system", "content": system_prompt}
        self._seen: list[Message] = []
        self._converted: list[dict[str, Any]] = [self._system]
        self._n_calls = 0
        self.turns: list[AnswerTurn] = []
        """What each model turn of this episode produced, in order."""

    def to_openai(self, view: Sequence[Message]) -> list[dict[str, Any]]:
        """The chat messages for ``view``, reusing conversions of an unchanged prefix."""
        seen = self._seen
        keep = 0
        limit = min(len(seen), len(view))
        while keep < limit and seen[keep] is view[keep]:
            keep += 1
        if keep < len(seen):
            del seen[keep:]
            del self._converted[keep + 1 :]
        for m in view[keep:]:
            seen.append(m)
            self._converted.append(self._convert(m))
        # The request gets its own list: the cache keeps growing after it is sent.
        return list(self._converted)

    def _convert(self, m: Message) -> dict[str, Any]:
        if self.repair is not None:
            if isinstance(m, AssistantMessage) and m.tool_calls:
                for tc in m.tool_calls:
                    self._calls_by_id[tc.id] = tc
            elif isinstance(m, ToolMessage) and m.error:
                call = self._calls_by_id.get(m.id)
                if call is not None:
                    m = self.repair.apply(call, m)
        return message_to_openai(m)

    async def act(self, view: list[Message]) -> AssistantMessage:
        turn = self._n_calls
        self._n_calls += 1
        request = GenerateRequest(
            messages=self.to_openai(view),
            tools=self.tools,
            seed=(self.seed * 1_000_003 + turn) & _SEED_MASK,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            want_margins=self.want_margins,
        )
        gen = await self.client.generate(request)
        self.turns.append(answer_turn(gen))
        return generation_to_message(gen, turn)


def is_empty(gen: Generation) -> bool:
    """An empty answer: neither text nor a tool call (what :func:`generation_to_message`
    turns into a ``malformed_call``)."""
    return not gen.tool_calls and not gen.content


def answer_turn(gen: Generation) -> AnswerTurn:
    """The answer-level figures of one model turn."""
    return AnswerTurn(output_tokens=gen.completion_tokens, finish_reason=gen.finish_reason,
                      empty=is_empty(gen), reasoning_tokens=gen.reasoning_tokens,
                      reasoning_chars=gen.reasoning_chars)


def generation_to_message(gen: Generation, turn: int) -> AssistantMessage:
    """A :class:`Generation` as a τ² ``AssistantMessage`` (malformed calls flagged)."""
    calls, bad = parse_tool_calls(gen, turn)
    content = gen.content if gen.content else None
    raw: str | None = None
    if is_empty(gen):
        calls = [ToolCall(id=f"call_{turn}_empty", name="", parse_error="empty turn: no text and no tool call")]
        bad = True
    if bad:
        raw = gen.raw_text if gen.raw_text is not None else _raw_of(gen)
    usage = None
    if gen.prompt_tokens is not None or gen.completion_tokens is not None:
        usage = {"prompt_tokens": gen.prompt_tokens or 0, "completion_tokens": gen.completion_tokens or 0}
    return AssistantMessage(
        content=content,
        tool_calls=calls or None,
        raw=raw,
        decisions=gen.decisions or None,
        usage=usage,
    )


def _raw_of(gen: Generation) -> str:
    parts = [gen.content or ""]
    parts += [f"{c.name}({c.arguments})" for c in gen.tool_calls]
    return "\n".join(p for p in parts if p)
