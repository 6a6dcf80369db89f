"""An LLM user simulator, pinned and cached, shared identically by every arm.

The user simulator is the largest confound of agent benchmarks (a different user model has
moved τ²-bench scores by tens of points), so for a precision comparison it must be *the same
user* in every arm:

- **Pinned.** The user model, its decoding settings (temperature 0 by default), its seed and
  the prompt version form :attr:`LLMUserSpec.identity`, which goes into every episode's cache
  key and the report header.
- **Cached by transcript.** A user turn is looked up by (user identity, task, trial, seed,
  the user's view of the transcript so far). When two arms' transcripts agree up to a point,
  the user's replies up to that point are the *same bytes*, not a second sample. The cache is
  in memory, shared by every arm of the process, and optionally appended to a JSONL file
  (``user_turns.jsonl`` in the store) so resumed runs and pytest-xdist workers reuse it.
- **Failures are the user's.** A user tool call that does not parse becomes a
  ``ToolCall(requestor="user", parse_error=...)``, answered by the engine as a
  ``malformed_call`` *of the user* (``CallRecord.requestor == "user"``). An empty turn is
  re-asked once, then ends the episode with ``user_error``. Server errors are retried by the
  model client and, when retries are exhausted, surface as infrastructure failures (the episode
  is retried by the batch layer, never scored as the agent's fault).

The prompt follows τ²-bench's protocol in our own words: global guidelines, then the task's
scenario (persona, instructions: reason for the call, known and unknown information, task
instructions, or τ²-bench's free-text instructions), the stop tokens ``###STOP###``,
``###TRANSFER###`` and ``###OUT-OF-SCOPE###``, and — in telecom — the device tools offered as
tool calls that run in the user's environment.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_quantagent.backends.base import GenerateRequest, Generation
from pytest_quantagent.backends.wrapper import ModelClient, UsageCounter, bind_episode_usage
from pytest_quantagent.env.tasks import StructuredUserInstructions, Task
from pytest_quantagent.quant.arms import UserModelConfig
from pytest_quantagent.runner.agent import generation_to_message, tool_calls_to_openai
from pytest_quantagent.store.jsonl import (
    aappend_line_locked,
    append_line_locked,
    read_appended_rows,
)
from pytest_quantagent.vocab.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

USER_PROMPT_VERSION = "1"

#: ``runner.agent.generation_to_message``'s parse error for a turn with no text and no call.
EMPTY_TURN = "empty turn: no text and no tool call"

GUIDELINES = """\
# How to play the customer
You are a customer contacting a customer-service agent. Play the customer described in the
scenario below, one message at a time, in your own words.
- Follow the scenario's instructions strictly. Never invent information the scenario does not
  give you: what it does not say, you do not know.
- Reveal information progressively: give a piece of information when the agent asks for it,
  not all at once.
- Do not repeat the scenario's wording verbatim; paraphrase naturally.
- When your goal is met, or nothing more can be done, end the conversation with a message that
  contains only ###STOP###.
- If the agent transfers you to another agent or a human, reply with only ###TRANSFER###.
- If the scenario does not tell you how to continue, reply with only ###OUT-OF-SCOPE###.
"""

DEVICE_GUIDELINES = """\
# Your device
You can act on your own phone with the tools offered to you. When the agent asks you to check
or change something on your device, call the matching tool and report what it returned.
Always ground what you say about your device on the results of your tool calls; never make up
a result.
"""


def scenario_text(task: Task) -> str:
    """The task's user scenario as the user model reads it."""
    us = task.user_scenario
    parts: list[str] = []
    if us.persona:
        parts.append(f"Persona:\n{us.persona}")
    ins = us.instructions
    if isinstance(ins, StructuredUserInstructions):
        if ins.domain:
            parts.append(f"Domain: {ins.domain}")
        parts.append(f"Reason for the call:\n{ins.reason_for_call}")
        if ins.known_info:
            parts.append(f"What you know:\n{ins.known_info}")
        if ins.unknown_info:
            parts.append(f"What you do not know:\n{ins.unknown_info}")
        if ins.task_instructions:
            parts.append(f"Instructions:\n{ins.task_instructions}")
    else:
        parts.append(f"Instructions:\n{ins}")
    return "\n\n".join(parts)


def user_system_prompt(task: Task, *, with_device: bool) -> str:
    """Guidelines + (device guidelines) + the scenario."""
    head = GUIDELINES + ("\n" + DEVICE_GUIDELINES if with_device else "")
    return f"{head}\n<scenario>\n{scenario_text(task)}\n</scenario>"


def view_to_openai(view: Sequence[Message]) -> list[dict[str, Any]]:
    """The user's view with roles flipped: the agent speaks as ``user``, the simulated user's
    own turns are ``assistant`` (with their device tool calls), device results are ``tool``."""
    out: list[dict[str, Any]] = []
    for m in view:
        if isinstance(m, AssistantMessage):
            if m.content:
                out.append({"role": "user", "content": m.content})
        elif isinstance(m, UserMessage):
            msg: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                msg["tool_calls"] = tool_calls_to_openai(m.tool_calls)
            out.append(msg)
        elif isinstance(m, ToolMessage):
            out.append({"role": "tool", "tool_call_id": m.id, "content": m.content})
        elif isinstance(m, SystemMessage):
            continue  # the user has its own system prompt
    return out


#: How a user turn's sampling seed is drawn: from the episode seed (identical in every arm of
#: a run, since arms share the plan's seeds), the user's turn number and the re-ask attempt.
USER_SEED_POLICY = "episode"


@dataclass(frozen=True)
class LLMUserSpec:
    """What pins the user simulator: model, decoding, seed policy, prompt version."""

    model: str
    """The user model as the report names it (model id, plus revision/quantization/options
    digest when the config gives them; see :meth:`from_config`)."""
    backend: str
    temperature: float = 0.0
    max_tokens: int = 512
    prompt_version: str = USER_PROMPT_VERSION
    seed_policy: str = USER_SEED_POLICY

    def __post_init__(self) -> None:
        if not (self.temperature >= 0):
            raise ValueError(f"user temperature must be >= 0, got {self.temperature!r}")
        if self.max_tokens < 1:
            raise ValueError(f"user max_tokens must be >= 1, got {self.max_tokens!r}")

    @classmethod
    def from_config(cls, config: UserModelConfig) -> LLMUserSpec:
        """The spec of a user model given by ``--user-model`` or a ``[user]`` table.

        Everything of the arm that changes the user's replies goes into ``model``: the model
        id, ``@revision``, ``[quantization]``, and a digest of outcome-relevant backend
        options (e.g. a mock's scripted responses); the endpoint URL and key do not.
        """
        arm = config.arm
        fields = arm.cache_fields()
        model = arm.model
        if arm.path and arm.path != arm.model:
            model += f"({arm.path})"
        if arm.revision:
            model += f"@{arm.revision}"
        if arm.quantization:
            model += f"[{arm.quantization}]"
        if fields["options"]:
            blob = json.dumps(fields["options"], sort_keys=True, default=repr)
            model += f"+opts={hashlib.sha256(blob.encode()).hexdigest()[:10]}"
        return cls(model=model, backend=arm.backend, temperature=config.temperature,
                   max_tokens=config.max_tokens)

    @property
    def identity(self) -> str:
        """The user simulator's name in cache keys and reports (``user_sim``)."""
        return (
            f"llm:{self.backend}:{self.model}:t={self.temperature:g}:"
            f"max={self.max_tokens}:seed={self.seed_policy}:p{self.prompt_version}"
        )


@dataclass
class UserTurnCache:
    """User turns by transcript key: in memory, optionally mirrored to a JSONL file.

    The file is append-only (one ``{"key", "message"}`` per line, written by the process's one
    writer under a file lock taken once per batch), so concurrent processes can share it; the first answer stored for a key wins (in memory and
    on reload), and a torn last line is ignored until it is complete. Within one event loop a
    key being sampled is sampled once: other episodes asking for it wait for that answer
    (:meth:`claim`), so arms running concurrently still share the same bytes.
    """

    path: Path | None = None
    _mem: dict[str, dict[str, Any]] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    _offset: int = 0
    _inflight: dict[str, asyncio.Future[None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.path is not None:
            self.path = Path(self.path)
            self._load(self.path)

    def _load(self, path: Path) -> None:
        """Read the lines appended since the last read (complete lines only)."""
        rows, self._offset = read_appended_rows(path, self._offset)
        for row in rows:
            try:
                self._mem.setdefault(row["key"], row["message"])
            except (KeyError, TypeError):
                continue  # foreign line: the turn will simply be asked again

    def __len__(self) -> int:
        return len(self._mem)

    def get(self, key: str) -> UserMessage | None:
        """The stored turn for ``key`` (a fresh object), or None."""
        row = self._mem.get(key)
        if row is None and self.path is not None:
            self._load(self.path)  # another process may have answered it meanwhile
            row = self._mem.get(key)
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return UserMessage.model_validate(row)

    async def claim(self, key: str) -> UserMessage | asyncio.Future[None]:
        """The cached turn, or — when nobody is sampling ``key`` — a future that the caller
        now owns: it samples, stores the answer with :meth:`put` and resolves the future with
        :meth:`release`. Waits while another episode of this loop samples the same key."""
        while True:
            cached = self.get(key)
            if cached is not None:
                return cached
            pending = self._inflight.get(key)
            if pending is None:
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._inflight[key] = fut
                return fut
            await asyncio.shield(pending)

    def release(self, key: str, fut: asyncio.Future[None]) -> None:
        """End the claim on ``key`` (whether or not an answer was stored)."""
        if self._inflight.get(key) is fut:
            del self._inflight[key]
        if not fut.done():
            fut.set_result(None)

    def put(self, key: str, message: UserMessage) -> UserMessage:
        """Store ``message`` for ``key``; returns the stored turn (an earlier answer from
        another process wins, so every arm sees the same bytes)."""
        stored, line = self._remember(key, message)
        if line is not None:
            self._append(line)
        return stored

    async def aput(self, key: str, message: UserMessage) -> UserMessage:
        """:meth:`put` for the event loop: awaits the file's one writer (its batch's write;
        :class:`~pytest_quantagent.store.jsonl.LineAppender`, which fsyncs off this path), no
        thread blocked on a lock."""
        stored, line = self._remember(key, message)
        if line is not None:
            assert self.path is not None
            await aappend_line_locked(self.path, line)
        return stored

    def _remember(self, key: str, message: UserMessage) -> tuple[UserMessage, str | None]:
        """Record ``message`` in memory unless ``key`` is answered; the line to append."""
        if self.path is not None:
            self._load(self.path)
        if key in self._mem:
            return UserMessage.model_validate(self._mem[key]), None
        row = message.model_dump(mode="json", exclude={"turn_idx"})
        self._mem[key] = row
        if self.path is None:
            return message, None
        return message, json.dumps({"key": key, "message": row}, sort_keys=True) + "\n"

    def _append(self, line: str) -> None:
        assert self.path is not None
        append_line_locked(self.path, line)


def transcript_key(identity: str, task_id: str, trial: int, seed: int,
                   messages: Sequence[dict[str, Any]]) -> str:
    """SHA-256 over the user's identity, the episode's identity and the user's view."""
    blob = json.dumps(
        {"u": identity, "task": task_id, "trial": trial, "seed": seed, "view": messages},
        sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class LLMUser:
    """Implements the episode ``User`` protocol with a model behind a :class:`ModelClient`."""

    def __init__(
        self,
        client: ModelClient,
        spec: LLMUserSpec,
        task: Task,
        *,
        trial: int,
        seed: int,
        tools: list[dict[str, Any]] | None = None,
        cache: UserTurnCache | None = None,
    ) -> None:
        self.client = client
        self.spec = spec
        self.task = task
        self.trial = trial
        self.seed = seed
        self.tools = tools or []
        self.cache = cache if cache is not None else UserTurnCache()
        self.system_prompt = user_system_prompt(task, with_device=bool(self.tools))
        self.usage = UsageCounter()
        """The user model's calls, request retries and tokens in this episode: kept out of
        the episode's (agent's) counter; the batch layer adds the retries back."""

    async def act(self, view: list[Message]) -> UserMessage:
        """The user's next turn: from the cache when this transcript was answered before
        (by any arm), else sampled once and stored."""
        messages = [{"role": "system", "content": self.system_prompt}, *view_to_openai(view)]
        key = transcript_key(self.spec.identity, self.task.id, self.trial, self.seed, messages)
        claim = await self.cache.claim(key)
        if isinstance(claim, UserMessage):
            return claim
        try:
            msg = await self._sample(messages, view)
            if msg is None:
                # The episode loop ends an empty user message with user_error. Not cached: a
                # resumed run asks again.
                return UserMessage(content=None, tool_calls=None, raw="")
            return await self.cache.aput(key, msg)
        finally:
            self.cache.release(key, claim)

    async def _sample(self, messages: list[dict[str, Any]], view: Sequence[Message]) -> UserMessage | None:
        # The turn number comes from the transcript, not from a counter: the same transcript
        # gets the same sampling seed whether earlier turns were sampled or read from the cache.
        turn = sum(1 for m in view if isinstance(m, UserMessage))
        for attempt in range(2):  # an empty turn is asked once more, then it is the user's error
            gen = await self._generate(
                GenerateRequest(
                    messages=messages,
                    tools=self.tools,
                    seed=(self.seed * 1_000_003 + 7919 * (turn + 1) + attempt) & ((1 << 31) - 1),
                    temperature=self.spec.temperature,
                    max_tokens=self.spec.max_tokens,
                    want_margins=False,
                )
            )
            am = generation_to_message(gen, turn)
            calls = [c.model_copy(update={"requestor": "user", "id": f"user_{c.id}"})
                     for c in am.tool_calls or () if c.parse_error != EMPTY_TURN]
            if calls or (am.content and am.content.strip()):
                return UserMessage(content=am.content, tool_calls=calls or None, raw=am.raw)
        return None

    async def _generate(self, request: GenerateRequest) -> Generation:
        # Run the call in a copy of the context with its own usage counter, so the user's
        # tokens do not count as the agent's in the episode record.
        ctx = contextvars.copy_context()
        counter = ctx.run(bind_episode_usage)
        try:
            return await ctx.run(asyncio.ensure_future, self.client.generate(request))
        finally:
            self.usage.calls += counter.calls
            self.usage.retries += counter.retries
            self.usage.prompt_tokens += counter.prompt_tokens
            self.usage.completion_tokens += counter.completion_tokens
