"""A domain: policy, toolkits, the DB loaded once, tasks, and the factories of one episode.

Domain content (``domains/<name>/domain.py``) builds a :class:`Domain` in its
``make_domain(data_dir, tasks_file, official)``; it may pass hooks as constructor arguments
or subclass :class:`Domain` and override the methods (``classify_error``,
``describe_user_action``, ``make_user``, ``gold_plan``, ...).

The DB is loaded once per process and each episode gets a deep copy
(:meth:`DB.copy_fresh`), so starting an episode costs a copy, not a parse.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pytest_quantagent.env.db import DB
from pytest_quantagent.env.environment import Environment
from pytest_quantagent.env.tasks import Action, Task
from pytest_quantagent.env.toolkit import Toolkit, ToolType
from pytest_quantagent.env.user import DeviceIntent, ScriptedUser, script_for_task
from pytest_quantagent.errors import UnknownNameError
from pytest_quantagent.vocab.channels import Channel
from pytest_quantagent.vocab.messages import Message, ToolCall

LOOKUP = "__lookup__"
"""Name of a :class:`GoldPlan` step that is reads only: the agent makes the reads
:meth:`GoldPlan.before` asks for with the step's arguments, and no call of its own."""


@dataclass(frozen=True, slots=True)
class GoldState:
    """End state of a fresh environment after replaying a task's gold actions."""

    db_hash: str
    user_db_hash: str | None
    failed_writes: tuple[str, ...]
    """Gold actions that change state but raised (the gold state is then incomplete)."""
    write_log: tuple[tuple[str, str, str], ...] = ()
    """The gold replay's state-changing calls (see ``Environment.write_log``)."""


class GoldPlan:
    """How a careful agent plays one task's gold actions: the domain's troubleshooting
    knowledge, for one episode (it may keep state, such as the reads already made).

    This default is the gold actions in order with nothing read or asked first. A domain
    whose gold actions start at the fix (telecom: ``resume_line(C02, L02)``) returns a
    subclass whose ``actions`` also hold the checks that find the fault (user-side steps)
    and :data:`LOOKUP` steps, and whose :meth:`before` makes the reads that show the ids.
    """

    def __init__(self, actions: Sequence[Action]) -> None:
        self.actions: list[Action] = list(actions)

    def before(
        self, action: Action, view: Sequence[Message], visible: str, asked: Set[str]
    ) -> str | Action | None:
        """What a careful agent does before the agent-side step ``action``: a question to
        ask the user (the agent records it among ``asked``), a read to call, or None (go
        on). ``visible`` is the text the agent has seen: user messages and its own tool
        results."""
        return None


class Domain:
    """Everything the engine needs about one domain.

    Args:
        name: Domain name (``retail``, ``telecom``, ...).
        policy: The agent's policy text (the system prompt's core).
        db: The agent-side DB, loaded once; episodes get copies.
        tasks: The tasks of this domain.
        agent_toolkit: Toolkit class of the agent.
        user_toolkit: Toolkit class of the user (device) tools, if any (telecom).
        user_db: The user-side DB (telecom device state), loaded once.
        splits: Split name → task ids (``base``, ``train``, ``test``, ...).
        environment_cls: :class:`Environment` subclass (telecom overrides ``sync_tools``).
        classify_error: ``message -> Channel`` for plain ``ValueError``s raised by tools
            (default: ``policy_violation``).
        device_intents: What the scripted user understands as requests to use its tools.
        gold_plan: ``(task, db) -> GoldPlan``: how a careful agent plays the task's gold
            actions (default: :class:`GoldPlan` of the gold actions unchanged).
        checked_values: (tool, argument) → the values a tool accepts that its schema does
            not list (the tool checks them itself; retail's cancellation reasons).
        official: True when built from τ²-bench's own data files.
    """

    def __init__(
        self,
        *,
        name: str,
        policy: str,
        db: DB,
        tasks: Sequence[Task],
        agent_toolkit: type[Toolkit],
        user_toolkit: type[Toolkit] | None = None,
        user_db: DB | None = None,
        splits: dict[str, list[str]] | None = None,
        environment_cls: type[Environment] = Environment,
        classify_error: Callable[[str], Channel] | None = None,
        device_intents: Sequence[DeviceIntent] = (),
        gold_plan: Callable[[Task, DB], GoldPlan] | None = None,
        checked_values: Mapping[tuple[str, str], Sequence[str]] | None = None,
        official: bool = False,
    ) -> None:
        self.name = name
        self.policy = policy
        self.db = db
        self.user_db = user_db
        self.tasks: list[Task] = list(tasks)
        self.agent_toolkit = agent_toolkit
        self.user_toolkit = user_toolkit
        self.splits: dict[str, list[str]] = dict(splits or {})
        self.environment_cls = environment_cls
        self._classify_error = classify_error
        self.device_intents: tuple[DeviceIntent, ...] = tuple(device_intents)
        self._gold_plan = gold_plan
        self.checked_values: dict[tuple[str, str], tuple[str, ...]] = {
            k: tuple(v) for k, v in (checked_values or {}).items()
        }
        self.official = official
        self.code_dirs: tuple[Path, ...] = ()
        """Folders whose ``*.py`` files define this domain (its package; set by the
        registry), hashed into :attr:`instrument_hash` with the environment's own code."""
        self._task_hashes: dict[str, str] = {}
        self._by_id = {t.id: t for t in self.tasks}
        self._gold: dict[str, tuple[Task, GoldState]] = {}
        clash = self.agent_tool_names & self.user_tool_names
        if clash:
            raise ValueError(
                f"domain {name!r}: tool names used by both agent and user toolkits: {sorted(clash)}"
            )

    # -- tasks and tools ------------------------------------------------------------------

    def task(self, task_id: str) -> Task:
        """The task with this id (a bundled one or one of a fresh pool); unknown ids raise
        an error listing the known ones."""
        try:
            return self._by_id[task_id]
        except KeyError:
            raise UnknownNameError(f"{self.name} task id", task_id, self._by_id) from None

    def task_hash(self, task_id: str) -> str:
        """Hash of the task's content (scenario, initial state, gold actions, criteria): part
        of its episodes' cache key, so a task that changes under the same id is re-run."""
        h = self._task_hashes.get(task_id)
        if h is None:
            text = self.task(task_id).model_dump_json()
            h = self._task_hashes[task_id] = hashlib.sha256(text.encode()).hexdigest()[:16]
        return h

    @cached_property
    def instrument_hash(self) -> str:
        """Hash of what scores an episode besides the model: the environment's and scripted
        user's code (``pytest_quantagent/env`` and :attr:`code_dirs`) and the databases. Part
        of every episode's cache key: after an upgrade that changes how the user replies or
        how a tool behaves, stored episodes are re-run rather than reused."""
        h = hashlib.sha256()
        env_dir = Path(__file__).resolve().parent
        for d in (env_dir, *self.code_dirs):
            for f in sorted(Path(d).glob("*.py")):
                h.update(f.name.encode() + b"\x00" + f.read_bytes() + b"\x00")
        h.update(self.db.get_hash().encode())
        if self.user_db is not None:
            h.update(self.user_db.get_hash().encode())
        return h.hexdigest()[:16]

    def add_tasks(self, tasks: Sequence[Task]) -> None:
        """Make generated tasks (a fresh pool) known to :meth:`task`, without adding them
        to :attr:`tasks` or a split."""
        for t in tasks:
            self._by_id.setdefault(t.id, t)

    @cached_property
    def agent_tool_names(self) -> frozenset[str]:
        return self.agent_toolkit.tool_names()

    @cached_property
    def user_tool_names(self) -> frozenset[str]:
        return self.user_toolkit.tool_names() if self.user_toolkit is not None else frozenset()

    def agent_tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI tool schemas of the agent's tools (built once per toolkit class)."""
        return self._agent_schemas

    @cached_property
    def _agent_schemas(self) -> list[dict[str, Any]]:
        return sorted(self.agent_toolkit.openai_schemas(), key=lambda s: s["function"]["name"])

    def user_tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI tool schemas of the user's (device) tools; empty when there are none."""
        return self._user_schemas

    @cached_property
    def _user_schemas(self) -> list[dict[str, Any]]:
        if self.user_toolkit is None:
            return []
        return sorted(self.user_toolkit.openai_schemas(), key=lambda s: s["function"]["name"])

    def tool_type(self, name: str) -> ToolType | None:
        for kit in (self.agent_toolkit, self.user_toolkit):
            if kit is not None and name in kit.specs():
                return kit.specs()[name].tool_type
        return None

    # -- hooks ----------------------------------------------------------------------------

    def classify_error(self, message: str) -> Channel:
        """Channel of a plain ``ValueError`` raised by one of this domain's tools."""
        if self._classify_error is not None:
            return self._classify_error(message)
        return Channel.POLICY_VIOLATION

    def error_entity(self, call: ToolCall, message: str) -> str | None:
        """The offending id of a ``wrong_entity`` failure raised as a plain ``ValueError``:
        the first string argument whose value appears in the message, else the first
        argument named ``*_id``/``id``."""
        values = [(k, v) for k, v in call.arguments.items() if isinstance(v, str)]
        for _, v in values:
            if v and v in message:
                return v
        for k, v in values:
            if k == "id" or k.endswith("_id"):
                return v
        return None

    def describe_user_action(self, action: Action) -> str:
        """Ordinary words asking the user to perform a user-side gold action (the oracle
        uses this; the scripted user must understand it)."""
        for intent in self.device_intents:
            if intent.tool == action.name:
                return intent.ask(action.arguments)
        args = json.dumps(action.arguments, sort_keys=True)
        return f"Please use {action.name} on your phone with {args}."

    def gold_plan(self, task: Task) -> GoldPlan:
        """A fresh :class:`GoldPlan` for one episode of ``task`` (the careful gold agent's
        route through its gold actions)."""
        if self._gold_plan is not None:
            return self._gold_plan(task, self.db)
        return GoldPlan(task.gold_actions)

    # -- episode factories ----------------------------------------------------------------

    def make_environment(self, task: Task | None = None) -> Environment:
        """A fresh environment: DB copies, the task's initial state applied."""
        env = self.environment_cls(
            self,
            self.db.copy_fresh(),
            self.user_db.copy_fresh() if self.user_db is not None else None,
        )
        if task is not None:
            env.set_state(task.initial_state)
        return env

    def make_user(self, task: Task, seed: int) -> ScriptedUser:
        """The scripted user for ``task`` (deterministic given ``seed``)."""
        return ScriptedUser(
            script_for_task(task),
            seed=seed,
            intents=self.device_intents,
            user_tool_names=self.user_tool_names,
        )

    def gold_state(self, task: Task) -> GoldState:
        """Hashes after replaying the gold actions on a fresh environment (cached per task).

        Failing gold calls are ignored (τ²-bench logs and continues); unknown names are
        skipped. A failing state-changing gold call is reported in ``failed_writes``.
        """
        cached = self._gold.get(task.id)
        if cached is not None and cached[0] is task:
            return cached[1]
        env = self.make_environment(task)
        failed: list[str] = []
        for i, action in enumerate(task.gold_actions):
            if not env.has_tool(action.name):
                continue
            call = ToolCall(
                id=f"gold_{i}", name=action.name, arguments=action.arguments,
                requestor=action.requestor,
            )
            d = env.execute(call)
            if d.channel is not None and env.is_mutating(action.name):
                failed.append(action.action_id)
        state = GoldState(
            env.get_db_hash(), env.get_user_db_hash(), tuple(failed), tuple(env.write_log)
        )
        # Keyed by id but checked by identity: a modified copy of a task is never served
        # the original's gold state.
        self._gold[task.id] = (task, state)
        return state

    def __repr__(self) -> str:
        return f"Domain({self.name!r}, tasks={len(self.tasks)}, official={self.official})"
