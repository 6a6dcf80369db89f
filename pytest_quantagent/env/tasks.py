"""Tasks in τ²-bench's JSON schema, plus our scripted-user extension.

One loader reads τ²-bench's own task files (``domains/<d>/tasks.json``) and ours. Field
names and meanings are τ²-bench's (``data_model/tasks.py``): a task has a user scenario, an
optional initial state (data patches, initialization function calls, a message history) and
evaluation criteria (gold actions, environment assertions, information to communicate,
natural-language assertions, and the ``reward_basis`` saying which of these count).

Our generated tasks add ``user_scenario.script`` (see :class:`pytest_quantagent.env.scenario.
UserScript`), the structured scenario the deterministic scripted user follows. τ²-bench's
files have no script; the scripted user then derives one from the structured instructions.

:func:`load_tasks` refuses a bad file with a :class:`~pytest_quantagent.errors.DataFileError`
naming the file, the task id and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer

from pytest_quantagent.env.scenario import UserScript
from pytest_quantagent.errors import DataFileError, UnknownNameError
from pytest_quantagent.vocab.messages import Message, Requestor, ToolCall


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RewardType(str, Enum):
    """Components a task's reward can be based on (τ²-bench's values)."""

    DB = "DB"
    ENV_ASSERTION = "ENV_ASSERTION"
    NL_ASSERTION = "NL_ASSERTION"
    ACTION = "ACTION"
    COMMUNICATE = "COMMUNICATE"


class Description(_Model):
    purpose: str | None = None
    relevant_policies: str | None = None
    notes: str | None = None


class StructuredUserInstructions(_Model):
    """τ²-bench's structured user instructions (what the LLM user simulator is told)."""

    domain: str | None = None
    reason_for_call: str
    known_info: str | None = None
    unknown_info: str | None = None
    task_instructions: str | None = None


class UserScenario(_Model):
    persona: str | None = None
    instructions: StructuredUserInstructions | str
    script: UserScript | None = None
    """Our scripted user's scenario (:class:`pytest_quantagent.env.scenario.UserScript`).
    Absent in τ²-bench's files."""

    @field_serializer("script")
    def _script_as_given(self, script: UserScript | None) -> dict[str, Any] | None:
        # Only the fields the task file set: task files round-trip unchanged.
        return None if script is None else script.model_dump(mode="json", exclude_unset=True)


class EnvFunctionCall(_Model):
    """A call of any function of the agent-side (``assistant``) or user-side toolkit; used
    for initialization actions and (with an expected value) environment assertions."""

    env_type: Literal["user", "assistant"]
    func_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class EnvAssertion(EnvFunctionCall):
    """An environment function that must return ``assert_value`` at the end of the episode."""

    assert_value: bool = True
    message: str | None = None


class InitializationData(_Model):
    """Partial DB contents merged into the agent-side / user-side DB before the episode."""

    agent_data: dict[str, Any] | None = None
    user_data: dict[str, Any] | None = None


class InitialState(_Model):
    initialization_data: InitializationData | None = None
    initialization_actions: list[EnvFunctionCall] | None = None
    message_history: list[Message] | None = None


class Action(_Model):
    """A gold tool call. ``compare_args`` (None = all of ``arguments``) are the argument
    names compared by the ACTION check."""

    action_id: str
    requestor: Requestor = "assistant"
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    info: str | None = None
    compare_args: list[str] | None = None

    def matches(self, call: ToolCall) -> bool:
        """τ²-bench's ACTION check: same name and equal values for the compared arguments
        (a missing argument compares as None)."""
        if call.name != self.name:
            return False
        keys = self.compare_args if self.compare_args is not None else list(self.arguments)
        return all(call.arguments.get(k) == self.arguments.get(k) for k in keys)


class EvaluationCriteria(_Model):
    actions: list[Action] | None = None
    env_assertions: list[EnvAssertion] | None = None
    communicate_info: list[str] | None = None
    nl_assertions: list[str] | None = None
    reward_basis: list[RewardType] = Field(
        default_factory=lambda: [RewardType.DB, RewardType.COMMUNICATE]
    )


class Task(_Model):
    """One task (τ²-bench schema)."""

    id: str
    description: Description | None = None
    user_scenario: UserScenario
    ticket: str | None = None
    initial_state: InitialState | None = None
    evaluation_criteria: EvaluationCriteria | None = None
    issues: Any | None = None
    """Present in a few τ²-bench telecom tasks (free-form annotations); never used."""

    @property
    def gold_actions(self) -> list[Action]:
        ec = self.evaluation_criteria
        return list(ec.actions or []) if ec is not None else []

    @property
    def structured_instructions(self) -> StructuredUserInstructions | None:
        ins = self.user_scenario.instructions
        return ins if isinstance(ins, StructuredUserInstructions) else None


def _task_id_of(raw: Any, index: int) -> str:
    if isinstance(raw, dict) and isinstance(raw.get("id"), (str, int)):
        return str(raw["id"])
    return f"#{index}"


def parse_tasks(raw: Any, source: str | Path) -> list[Task]:
    """Validate a decoded task list. ``source`` names the file in errors."""
    if not isinstance(raw, list):
        raise DataFileError(source, "", f"expected a JSON list of tasks, got {type(raw).__name__}")
    return parse_task_items(raw, source)


def parse_task_items(raw: Iterable[Any], source: str | Path) -> list[Task]:
    """Validate task objects one at a time (a list, or a stream from
    :func:`pytest_quantagent.env.tasksets.iter_task_items`)."""
    tasks: list[Task] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        tid = _task_id_of(item, i)
        if isinstance(item, dict) and isinstance(item.get("id"), int):
            item = {**item, "id": str(item["id"])}
        try:
            task = Task.model_validate(item)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            raise DataFileError(
                source, f"task {tid!r}, field {loc!r}", f"{first['msg']} (input: {first.get('input')!r:.80})"
            ) from None
        if task.id in seen:
            raise DataFileError(source, f"task {tid!r}, field 'id'", "duplicate task id")
        seen.add(task.id)
        tasks.append(task)
    return tasks


#: Task files larger than this are parsed one task at a time (ijson).
STREAM_TASKS_ABOVE = 4 * 1024 * 1024


def load_tasks(path: str | Path) -> list[Task]:
    """Load and validate a task file (τ²-bench's JSON format or ours)."""
    p = Path(path)
    if p.is_file() and p.stat().st_size > STREAM_TASKS_ABOVE:
        # Thousands of generated tasks (telecom's full set): never one decoded document.
        from pytest_quantagent.env.tasksets import iter_task_items

        return parse_task_items(iter_task_items(p), p)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        others = sorted(x.name for x in p.parent.glob("tasks*.json")) if p.parent.is_dir() else []
        hint = f" (task files there: {', '.join(others)})" if others else ""
        raise DataFileError(p, "", f"file not found{hint}") from None
    except json.JSONDecodeError as e:
        raise DataFileError(p, f"line {e.lineno} column {e.colno}", f"invalid JSON: {e.msg}") from None
    return parse_tasks(raw, p)


def load_splits(path: str | Path, task_ids: list[str]) -> dict[str, list[str]]:
    """Load a τ²-bench ``split_tasks.json`` (split name → task ids); every id must exist."""
    from pytest_quantagent.env.tasksets import read_split_file

    p = Path(path)
    splits = read_split_file(p)
    known = set(task_ids)
    for name, ids in splits.items():
        for tid in ids:
            if tid not in known:
                raise DataFileError(p, f"split {name!r}", f"unknown task id {tid!r}")
    return splits


def select_tasks(tasks: list[Task], ids: list[str]) -> list[Task]:
    """The tasks with the given ids, in the given order; unknown ids raise
    :class:`~pytest_quantagent.errors.UnknownNameError` listing the known ones."""
    by_id = {t.id: t for t in tasks}
    out: list[Task] = []
    for tid in ids:
        if tid not in by_id:
            raise UnknownNameError("task id", tid, by_id)
        out.append(by_id[tid])
    return out


def check_task_functions(
    tasks: list[Task],
    source: str | Path,
    *,
    agent_tools: frozenset[str],
    user_tools: frozenset[str],
    agent_functions: frozenset[str],
    user_functions: frozenset[str],
) -> None:
    """Refuse tasks whose gold actions name a tool the requestor's toolkit does not have, or
    whose initialization actions / environment assertions name a function neither toolkit
    side has. A gold action on an unknown tool would otherwise be skipped by the gold replay
    and the oracle would report a task it never solved as solved.

    ``agent_tools``/``user_tools`` are the tool names of each side; ``*_functions`` every
    public callable of each side's toolkit (initialization and assertion functions need not
    be tools). Raises :class:`~pytest_quantagent.errors.DataFileError` naming the file, the
    task, the field and the allowed names (the closest ones first)."""
    import difflib

    def refuse(tid: str, field: str, name: str, allowed: frozenset[str], what: str) -> None:
        close = difflib.get_close_matches(name, sorted(allowed), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        listing = ", ".join(sorted(allowed)) if len(allowed) <= 12 else f"{len(allowed)} names"
        raise DataFileError(
            source, f"task {tid!r}, field {field!r}",
            f"{what} {name!r} does not exist (known: {listing}){hint}",
        )

    for t in tasks:
        for i, a in enumerate(t.gold_actions):
            allowed = agent_tools if a.requestor == "assistant" else user_tools
            if a.name not in allowed:
                refuse(t.id, f"evaluation_criteria.actions[{i}].name", a.name, allowed,
                       f"gold action tool of the {a.requestor} side")
        calls: list[tuple[str, EnvFunctionCall]] = []
        if t.initial_state is not None:
            calls += [(f"initial_state.initialization_actions[{i}].func_name", c)
                      for i, c in enumerate(t.initial_state.initialization_actions or [])]
        if t.evaluation_criteria is not None:
            calls += [(f"evaluation_criteria.env_assertions[{i}].func_name", c)
                      for i, c in enumerate(t.evaluation_criteria.env_assertions or [])]
        for field, c in calls:
            allowed = user_functions if c.env_type == "user" else agent_functions
            if c.func_name not in allowed:
                refuse(t.id, field, c.func_name, allowed, f"function of the {c.env_type} toolkit")


def public_functions(kit: type | None) -> frozenset[str]:
    """Names of the public callables of a toolkit class (what an initialization action or
    an environment assertion may call)."""
    if kit is None:
        return frozenset()
    return frozenset(n for n in dir(kit) if not n.startswith("_") and callable(getattr(kit, n, None)))
