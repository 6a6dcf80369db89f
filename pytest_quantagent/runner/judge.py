"""An LLM judge for τ²-bench's natural-language assertions (``NL_ASSERTION``).

τ²-bench decides a task's ``nl_assertions`` ("the agent told the customer the refund takes
5-7 days") with an LLM judge and multiplies the result into the reward when the task's
``reward_basis`` lists ``NL_ASSERTION``. This module is that judge, under the rules a
precision comparison needs:

- **Pinned.** Temperature 0, a fixed prompt version, the model named with its revision and
  options digest: :attr:`JudgeSpec.identity` is written into every judged record
  (``reward_info.judge``) and the report's run block.
- **Strict answers.** The judge is given the conversation and the numbered assertions, and
  must answer one JSON object ``{"verdicts": [{"index": 1, "met": true, "reason": "..."}]}``
  with exactly one verdict per assertion. Anything else is asked again (``retries`` times);
  then the assertions are recorded as a **judge error**: ``met`` is None and the component
  scores 0 — a judge error is never a pass. A judge server that fails past the client's
  retries is a judge error too (the agent's episode is not re-run for it).
- **Cached.** A verdict is stored under (judge identity, task id, assertion, trajectory hash)
  in memory and in ``judge_verdicts.jsonl`` beside the episode store, so a re-run, a resumed
  run or a second arm with the same trajectory never asks again. Judge errors are not cached.

The prompt is ours, not τ²-bench's; the reward rule is τ²-bench's (the NL component is 1 when
every assertion is met, else 0; see :func:`pytest_quantagent.env.evaluate.apply_nl_verdicts`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_quantagent.backends.base import Backend, BackendOptions, GenerateRequest
from pytest_quantagent.backends.wrapper import ModelClient, RetryPolicy
from pytest_quantagent.env.evaluate import RewardInfo, apply_nl_verdicts, needs_judge
from pytest_quantagent.env.tasks import RewardType, Task
from pytest_quantagent.errors import ConfigurationError, QuantAgentError
from pytest_quantagent.quant.arms import ArmSpec, UserModelConfig
from pytest_quantagent.quant.loading import create_arm_backend
from pytest_quantagent.store.jsonl import (
    aappend_line_locked,
    append_line_locked,
    read_appended_rows,
)
from pytest_quantagent.store.records import EpisodeRecord
from pytest_quantagent.vocab.channels import SCORABLE_TERMINATIONS
from pytest_quantagent.vocab.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

JUDGE_PROMPT_VERSION = "1"
JUDGE_CACHE_FILE = "judge_verdicts.jsonl"
#: Extra attempts after an unparsable judge answer.
DEFAULT_JUDGE_RETRIES = 2
#: Longest reason kept per verdict.
MAX_REASON_CHARS = 300

JUDGE_SYSTEM_PROMPT = """\
You grade a finished customer-service conversation between a customer ("user") and a
support agent ("assistant"); the agent's tool calls and their results are shown too.
You are then given numbered statements about what happened in the conversation.

For every statement decide whether the conversation shows it to be true:
- judge only from what the conversation contains; a statement the conversation does not
  show is not met;
- judge each statement on its own.

Answer with one JSON object and nothing else, in exactly this form:
{"verdicts": [{"index": 1, "met": true, "reason": "one short sentence"}, ...]}
with one entry per statement, in the order given, "index" as numbered, "met" true or false.
"""


class JudgeParseError(ValueError):
    """A judge answer that is not the strict verdict JSON."""


@dataclass(frozen=True)
class JudgeSpec:
    """What pins the judge: model, backend, decoding, prompt version."""

    model: str
    backend: str
    max_tokens: int = 512
    prompt_version: str = JUDGE_PROMPT_VERSION

    @property
    def temperature(self) -> float:
        return 0.0

    @classmethod
    def from_config(cls, config: UserModelConfig) -> JudgeSpec:
        """The spec of a judge model given by ``--judge-model`` or a ``[judge]`` table (the
        same schema as the LLM user's). The judge always decodes at temperature 0."""
        if config.temperature != 0:
            raise ValueError(
                f"judge temperature must be 0 (a pinned judge), got {config.temperature!r}; "
                "drop 'temperature' from the [judge] table"
            )
        from pytest_quantagent.runner.llm_user import LLMUserSpec

        model = LLMUserSpec.from_config(config).model  # model + revision/quant/options digest
        return cls(model=model, backend=config.arm.backend, max_tokens=config.max_tokens)

    @property
    def identity(self) -> str:
        """The judge's name in records, cache keys and reports."""
        return f"judge:{self.backend}:{self.model}:t=0:max={self.max_tokens}:p{self.prompt_version}"


# --------------------------------------------------------------------------- prompt


def render_conversation(messages: Sequence[Message]) -> str:
    """The conversation as the judge reads it (system prompts left out)."""
    lines: list[str] = []
    for m in messages:
        if isinstance(m, SystemMessage):
            continue
        if isinstance(m, (AssistantMessage, UserMessage)):
            role = "assistant" if isinstance(m, AssistantMessage) else "user"
            if m.content:
                lines.append(f"[{role}] {m.content}")
            for tc in m.tool_calls or ():
                args = json.dumps(tc.arguments, sort_keys=True, ensure_ascii=False)
                lines.append(f"[{role} tool call] {tc.name}({args})")
        elif isinstance(m, ToolMessage):
            tag = "tool error" if m.error else "tool result"
            lines.append(f"[{tag}] {m.content}")
    return "\n".join(lines)


def judge_request_messages(conversation: str, assertions: Sequence[str]) -> list[dict[str, Any]]:
    statements = "\n".join(f"{i}. {a}" for i, a in enumerate(assertions, 1))
    user = (f"<conversation>\n{conversation}\n</conversation>\n\n"
            f"<statements>\n{statements}\n</statements>")
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_verdicts(text: str | None, n: int) -> list[tuple[bool, str]]:
    """The ``n`` verdicts of a judge answer as (met, reason), in statement order. Raises
    :class:`JudgeParseError` unless the answer is exactly the asked JSON (a code fence
    around it is tolerated)."""
    if not text or not text.strip():
        raise JudgeParseError("empty answer")
    body = text.strip()
    m = _FENCE.match(body)
    if m:
        body = m.group(1)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise JudgeParseError(f"not JSON ({e.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("verdicts"), list):
        raise JudgeParseError("expected an object with a 'verdicts' list")
    verdicts = data["verdicts"]
    if len(verdicts) != n:
        raise JudgeParseError(f"{len(verdicts)} verdicts for {n} statements")
    out: dict[int, tuple[bool, str]] = {}
    for v in verdicts:
        if not isinstance(v, dict):
            raise JudgeParseError("a verdict is not an object")
        idx, met, reason = v.get("index"), v.get("met"), v.get("reason", "")
        if isinstance(idx, bool) or not isinstance(idx, int) or not 1 <= idx <= n or idx in out:
            raise JudgeParseError(f"bad or repeated index {idx!r}")
        if not isinstance(met, bool):
            raise JudgeParseError(f"'met' of statement {idx} is {met!r}, not true/false")
        if not isinstance(reason, str):
            raise JudgeParseError(f"'reason' of statement {idx} is not a string")
        out[idx] = (met, reason[:MAX_REASON_CHARS])
    return [out[i] for i in range(1, n + 1)]


def trajectory_hash(conversation: str) -> str:
    return hashlib.sha256(conversation.encode("utf-8")).hexdigest()


def verdict_key(identity: str, task_id: str, assertion: str, traj_hash: str) -> str:
    blob = json.dumps({"j": identity, "task": task_id, "a": assertion, "t": traj_hash},
                      sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- cache


@dataclass
class JudgeCache:
    """Verdicts by key, in memory and optionally appended to a JSONL file (first answer
    for a key wins; foreign or torn lines are ignored)."""

    path: Path | None = None
    _mem: dict[str, dict[str, Any]] = field(default_factory=dict)
    _offset: int = 0

    def __post_init__(self) -> None:
        if self.path is not None:
            self.path = Path(self.path)
            self._load()

    def _load(self) -> None:
        if self.path is None:
            return
        rows, self._offset = read_appended_rows(self.path, self._offset)
        for row in rows:
            try:
                if isinstance(row["met"], bool) and isinstance(row["reason"], str):
                    self._mem.setdefault(str(row["key"]), {"met": row["met"], "reason": row["reason"]})
            except (KeyError, TypeError):
                continue

    def __len__(self) -> int:
        return len(self._mem)

    def get(self, key: str) -> dict[str, Any] | None:
        row = self._mem.get(key)
        if row is None and self.path is not None:
            self._load()
            row = self._mem.get(key)
        return row

    def _remember(self, key: str, met: bool, reason: str) -> str | None:
        """Record a verdict in memory unless ``key`` has one; the line to append."""
        if key in self._mem:
            return None
        self._mem[key] = {"met": met, "reason": reason}
        if self.path is None:
            return None
        return json.dumps({"key": key, "met": met, "reason": reason}, ensure_ascii=False) + "\n"

    def put(self, key: str, met: bool, reason: str) -> None:
        line = self._remember(key, met, reason)
        if line is not None:
            assert self.path is not None
            append_line_locked(self.path, line)

    async def aput(self, key: str, met: bool, reason: str) -> None:
        """:meth:`put` for the event loop: awaits the file's one writer's batch write
        (:class:`~pytest_quantagent.store.jsonl.LineAppender`); the loop never blocks."""
        line = self._remember(key, met, reason)
        if line is not None:
            assert self.path is not None
            await aappend_line_locked(self.path, line)


# --------------------------------------------------------------------------- runtime


@dataclass
class JudgeRuntime:
    """The run's one judge: backend, client, verdict cache. Build with :func:`build_judge`
    inside the event loop that uses it."""

    spec: JudgeSpec
    arm: ArmSpec
    backend: Backend
    client: ModelClient
    cache: JudgeCache
    retries: int = DEFAULT_JUDGE_RETRIES
    requests: int = 0
    """Judge requests sent by this process (cache hits send none)."""
    judge_errors: int = 0

    @property
    def identity(self) -> str:
        return self.spec.identity

    async def judge(self, task_id: str, assertions: Sequence[str],
                    messages: Sequence[Message]) -> list[dict[str, Any]]:
        """One verdict per assertion: ``{"assertion", "met", "reason"}``, plus
        ``"judge_error"`` (and ``met`` None) when the judge could not answer."""
        conversation = render_conversation(messages)
        traj = trajectory_hash(conversation)
        keys = [verdict_key(self.identity, task_id, a, traj) for a in assertions]
        out: list[dict[str, Any] | None] = []
        todo: list[int] = []
        for i, (a, k) in enumerate(zip(assertions, keys, strict=True)):
            hit = self.cache.get(k)
            if hit is None:
                todo.append(i)
                out.append(None)
            else:
                out.append({"assertion": a, "met": hit["met"], "reason": hit["reason"]})
        if todo:
            asked = [assertions[i] for i in todo]
            verdicts, error = await self._ask(conversation, asked)
            for j, i in enumerate(todo):
                if verdicts is None:
                    self.judge_errors += 1
                    out[i] = {"assertion": assertions[i], "met": None, "reason": "",
                              "judge_error": error}
                else:
                    met, reason = verdicts[j]
                    await self.cache.aput(keys[i], met, reason)
                    out[i] = {"assertion": assertions[i], "met": met, "reason": reason}
        return [v for v in out if v is not None]

    async def _ask(self, conversation: str,
                   assertions: Sequence[str]) -> tuple[list[tuple[bool, str]] | None, str]:
        messages = judge_request_messages(conversation, assertions)
        last = ""
        for attempt in range(self.retries + 1):
            self.requests += 1
            try:
                gen = await self.client.generate(GenerateRequest(
                    messages=messages, tools=[], seed=attempt, temperature=0.0,
                    max_tokens=self.spec.max_tokens, want_margins=False,
                ))
            except ConfigurationError as e:
                # The judge's server refused the request (key, URL, model): the run stops,
                # like an arm's refusal, rather than scoring every assertion "not met". A
                # stopped judge (its breaker open) names itself already.
                if e.role is not None:
                    raise
                raise ConfigurationError(f"judge: {e}", role="judge") from e
            except (QuantAgentError, OSError) as e:
                # The client already retried transient faults; the agent's episode stands.
                return None, f"judge server: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            try:
                return parse_verdicts(gen.content, len(assertions)), ""
            except JudgeParseError as e:
                last = f"unparsable judge answer after {attempt + 1} attempt(s): {e}"
        return None, last

    def describe(self) -> dict[str, Any]:
        """The judge for the report's ``run`` block (no secrets)."""
        return {"identity": self.identity, "backend": self.arm.backend, "model": self.spec.model,
                "temperature": 0.0, "max_tokens": self.spec.max_tokens,
                "prompt_version": self.spec.prompt_version, "retries": self.retries,
                "server": self.backend.describe(),
                "cache": str(self.cache.path) if self.cache.path is not None else None}

    async def aclose(self) -> None:
        await self.client.aclose()


def build_judge(
    config: UserModelConfig,
    *,
    cache_path: str | Path | None = None,
    concurrency: int = 8,
    request_timeout_s: float = 120.0,
    retry: RetryPolicy | None = None,
    retries: int = DEFAULT_JUDGE_RETRIES,
) -> JudgeRuntime:
    """Create the judge's backend and client and its verdict cache (``cache_path``, usually
    ``<store>/judge_verdicts.jsonl``; None = memory only)."""
    spec = JudgeSpec.from_config(config)
    backend = create_arm_backend(config.arm, BackendOptions(concurrency=concurrency,
                                                            request_timeout_s=request_timeout_s))
    return JudgeRuntime(
        spec=spec, arm=config.arm, backend=backend,
        client=ModelClient(backend, concurrency=concurrency, retry=retry, role="judge"),
        cache=JudgeCache(Path(cache_path) if cache_path is not None else None),
        retries=retries,
    )


def resolve_judge(judge_model: str | None, config_path: str | Path | None = None) -> UserModelConfig | None:
    """The judge's model: ``judge_model`` (a spec, as ``--user-model``) wins over the
    ``[judge]`` table of ``config_path``; None when neither gives one (NL assertions are then
    not evaluated)."""
    from pytest_quantagent.quant.arms import load_judge_config, parse_user_model

    if judge_model is not None:
        return parse_user_model(judge_model)
    if config_path is not None:
        return load_judge_config(config_path)
    return None


# --------------------------------------------------------------------------- scoring


async def judge_reward(judge: JudgeRuntime, task: Task, info: RewardInfo,
                       messages: Sequence[Message]) -> RewardInfo:
    """``info`` with its NL_ASSERTION component decided by ``judge`` (unchanged when the
    task has none or the episode ended prematurely)."""
    if not needs_judge(task, info):
        return info
    ec = task.evaluation_criteria
    assert ec is not None
    verdicts = await judge.judge(task.id, list(ec.nl_assertions or []), messages)
    return apply_nl_verdicts(info, verdicts, judge.identity)


async def judge_record(judge: JudgeRuntime, task: Task, record: EpisodeRecord) -> EpisodeRecord:
    """A stored record judged by ``judge`` (from its messages): the same record when it was
    judged by this judge already or needs no judge; a copy with the new reward otherwise."""
    info = RewardInfo.model_validate(record.reward_info) if record.reward_info else None
    if info is None:
        return record
    errors = any(v.get("met") is None for v in info.nl_assertions)
    if info.judge == judge.identity and not errors:
        return record
    if info.judge is not None:
        # Judged by another judge, or a judge error (never kept): decide again from the
        # un-judged basis.
        info.reward_breakdown.pop(RewardType.NL_ASSERTION.value, None)
        info.nl_assertions, info.judge = [], None
        info.not_evaluated.append(RewardType.NL_ASSERTION.value)
        info.note = "; ".join(p for p in (info.note or "").split("; ")
                              if p and not p.startswith("judge error on ")) or None
        reward = 1.0
        for v in info.reward_breakdown.values():
            reward *= v
        info.reward = reward
    if not needs_judge(task, info):
        return record
    new = await judge_reward(judge, task, info, record.messages)
    return record.model_copy(update={
        "reward": new.reward, "reward_info": new.model_dump(mode="json"),
        "success": new.reward >= 1.0 - 1e-6 and record.termination in SCORABLE_TERMINATIONS,
    })


def judge_identity(judge_model: str | None, config_path: str | Path | None = None) -> str | None:
    """The identity of the judge these settings name (None: no judge)."""
    cfg = resolve_judge(judge_model, config_path)
    return None if cfg is None else JudgeSpec.from_config(cfg).identity
