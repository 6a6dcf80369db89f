"""The expert that writes the reference agent's training episodes.

It plays a task's gold actions like the oracle agent (``runner/oracle.py``), but the way a
careful human agent would, so that a model imitating it can succeed from what it *sees*:

- before a call it makes sure every argument value is visible in the conversation, and
  otherwise asks the user for it first (email, name and zip, order id, reason, ...: words
  the scripted user recognises);
- before a write action it asks for confirmation;
- it sometimes falls for a realistic **temptation** and recovers after the error message:
  a near-miss tool name (``unknown_tool``), a wrong id (``wrong_entity``), an invalid enum
  value (``bad_arguments``/``policy_violation``). Then it makes the correct call.

How often it is tempted is the difference between the robust and the prone variant
(:data:`ROBUST` and :data:`PRONE`). A greedy-decoding model only reproduces a mistake when
the mistake is close to 50/50 *in some context it can see*, so in the prone variant each
(tool, task kind) pair is "primed" with probability ``primed_share``; primed pairs are
tempted at ``p_primed`` (~0.5: narrow-margin decisions), the rest at ``p_base``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from pytest_quantagent.env.tasks import Action, Task
from pytest_quantagent.env.toolkit import ToolType

TRANSFER_TOOL = "transfer_to_human_agents"
TRANSFER_TEXT = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."
DONE_TEXT = "Is there anything else I can help you with?"

#: Word swaps that turn a real tool name into a plausible near miss.
_SWAPS: tuple[tuple[str, str], ...] = (
    ("user", "customer"),
    ("customer", "user"),
    ("details", "info"),
    ("find", "get"),
    ("get", "fetch"),
    ("modify", "update"),
    ("pending", ""),
    ("delivered", ""),
    ("agents", ""),
    ("id", ""),
    ("by", ""),
)


def near_miss_name(name: str, known: Iterable[str]) -> str:
    """A fixed, plausible wrong name for ``name`` that is not a real tool."""
    known_set = set(known)
    parts = name.split("_")
    for old, new in _SWAPS:
        if old in parts:
            cand = [new if p == old else p for p in parts]
            cand = [p for p in cand if p]
            text = "_".join(cand)
            if text and text != name and text not in known_set:
                return text
    text = name + "_info"
    return text if text not in known_set else name + "_v2"


@dataclass(frozen=True)
class NoiseConfig:
    """Temptation rates of the expert."""

    name: str
    p_base: float
    """Chance of each temptation kind on an unprimed call."""
    p_primed: float
    """Chance on a primed (tool, task kind) pair."""
    primed_share: float
    """Share of (tool, task kind) pairs that are primed."""
    p_recover_reread: float = 0.5
    """After a wrong id: chance to re-read (find/list) before the correct call."""


ROBUST = NoiseConfig(name="robust", p_base=0.02, p_primed=0.02, primed_share=0.0)
PRONE = NoiseConfig(name="prone", p_base=0.04, p_primed=0.5, primed_share=0.35)
MIXED = NoiseConfig(name="mixed", p_base=0.05, p_primed=0.25, primed_share=0.35)
NOISE_CONFIGS: dict[str, NoiseConfig] = {c.name: c for c in (ROBUST, PRONE, MIXED)}


def _stable_unit(*parts: str) -> float:
    h = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def task_kind(task: Task) -> str:
    """A coarse kind visible from the conversation: the first write action's name."""
    for a in task.gold_actions:
        if a.requestor == "assistant" and a.name not in ("transfer_to_human_agents",):
            if not a.name.startswith(("get_", "find_", "list_", "calculate", "think")):
                return a.name
    names = [a.name for a in task.gold_actions]
    return "transfer" if TRANSFER_TOOL in names else "read_only"


#: Argument name → a question the scripted user answers (its identity/fact keywords).
_QUESTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("email",), "Could you please provide your email address?"),
    (("first_name", "last_name", "zip"), "Could you please provide your first name, last name and zip code?"),
    (("phone_number", "phone"), "Could you please provide your phone number?"),
    (("user_id",), "Could you please provide your user id?"),
    (("customer_id",), "Could you please provide your customer id?"),
    (("order_id",), "Could you please tell me the order id?"),
    (("reason",), "What is the reason?"),
    (("payment_method_id",), "Which payment method would you like to use?"),
    (("address1", "address2", "city", "state", "country"), "What is the new address?"),
    (("item_ids", "new_item_ids", "item_id", "product_id"), "Which item do you mean?"),
    (("line_id",), "Which line is it about?"),
)


def question_for(arg: str) -> str:
    """The question to ask for a missing argument value."""
    for keys, q in _QUESTIONS:
        if arg in keys:
            return q
    return f"Could you please tell me the {arg.replace('_', ' ')}?"


def _leaf_values(value: Any) -> Iterable[str]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaf_values(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaf_values(v)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, float) and value.is_integer():
        # "5 dollars" states the value 5.0: compare integral numbers without ".0".
        yield str(int(value))
    else:
        yield str(value)


def _visible_text(view: Sequence[Message]) -> str:
    parts: list[str] = []
    for m in view:
        if isinstance(m, UserMessage) and m.content:
            parts.append(m.content)
        elif isinstance(m, ToolMessage) and m.requestor == "assistant":
            parts.append(m.content)
    return "\n".join(parts)


_ID_LIKE = re.compile(r"\d")


@dataclass
class ExpertAgent:
    """Implements the episode ``Agent`` protocol (see the module docstring)."""

    domain: Domain
    task: Task
    noise: NoiseConfig
    rng: random.Random
    id_pool: Sequence[str] = ()
    enum_values: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    _i: int = 0
    _asked: set[str] = field(default_factory=set)
    _confirmed: set[int] = field(default_factory=set)
    _tempted: set[tuple[int, str]] = field(default_factory=set)
    _transferred: bool = False
    _n: int = 0
    tempted_calls: int = 0

    async def act(self, view: list[Message]) -> AssistantMessage:
        return self.respond(view)

    # -- temptations ------------------------------------------------------------------
    def _p(self, tool: str, what: str) -> float:
        kind = task_kind(self.task)
        primed = _stable_unit(self.domain.name, tool, kind, what) < self.noise.primed_share
        return self.noise.p_primed if primed else self.noise.p_base

    def _call(self, name: str, args: dict[str, Any]) -> AssistantMessage:
        self._n += 1
        call = ToolCall(id=f"expert_{self._n}", name=name, arguments=args, requestor="assistant")
        return AssistantMessage(tool_calls=[call])

    def _temptation(self, action: Action) -> AssistantMessage | None:
        idx = self._i
        known = self.domain.agent_tool_names
        # Each kind of temptation is drawn at most once per action.
        if (idx, "name") not in self._tempted:
            self._tempted.add((idx, "name"))
            if self.rng.random() < self._p(action.name, "name"):
                self.tempted_calls += 1
                return self._call(near_miss_name(action.name, known), dict(action.arguments))
        if (idx, "id") not in self._tempted:
            self._tempted.add((idx, "id"))
            id_args = [
                k for k, v in action.arguments.items()
                if isinstance(v, str) and (k == "id" or k.endswith("_id")) and _ID_LIKE.search(v)
            ]
            tool_type = self.domain.tool_type(action.name)
            if id_args and tool_type == ToolType.READ and self.rng.random() < self._p(action.name, "id"):
                k = id_args[0]
                wrong = self._wrong_id(action.arguments[k])
                if wrong is not None:
                    self.tempted_calls += 1
                    return self._call(action.name, {**action.arguments, k: wrong})
        if (idx, "enum") not in self._tempted:
            self._tempted.add((idx, "enum"))
            enum_args = [
                k for k in action.arguments if (action.name, k) in self.enum_values
            ]
            if enum_args and self.rng.random() < self._p(action.name, "enum"):
                k = enum_args[0]
                wrong_value = self._wrong_enum(str(action.arguments[k]))
                if wrong_value not in self.enum_values[(action.name, k)]:
                    self.tempted_calls += 1
                    return self._call(action.name, {**action.arguments, k: wrong_value})
        return None

    def _wrong_id(self, value: str) -> str | None:
        shape = re.sub(r"\d", "0", value)
        same = [p for p in self.id_pool if p != value and re.sub(r"\d", "0", p) == shape]
        if not same:
            return None
        return self.rng.choice(same)

    @staticmethod
    def _wrong_enum(value: str) -> str:
        words = value.split()
        if len(words) >= 3:
            return " ".join(words[1:])
        if len(words) == 2:
            return "not " + words[-1]
        return value + "s"

    # -- policy -----------------------------------------------------------------------
    def respond(self, view: list[Message]) -> AssistantMessage:
        """The expert's next message given the agent's view."""
        visible = _visible_text(view)
        while self._i < len(self.task.gold_actions):
            action = self.task.gold_actions[self._i]
            if action.requestor == "user":
                self._i += 1
                return AssistantMessage(content=self.domain.describe_user_action(action))
            missing = [
                k for k, v in action.arguments.items()
                if any(val not in visible for val in _leaf_values(v))
            ]
            for k in missing:
                q = question_for(k)
                if q not in self._asked:
                    self._asked.add(q)
                    return AssistantMessage(content=q)
            is_write = self.domain.tool_type(action.name) == ToolType.WRITE
            if is_write and self._i not in self._confirmed:
                self._confirmed.add(self._i)
                return AssistantMessage(
                    content=f"I will now {action.name.replace('_', ' ')} with the details above. "
                    "Do you confirm that I should proceed?"
                )
            tempted = self._temptation(action)
            if tempted is not None:
                return tempted
            self._i += 1
            if action.name == TRANSFER_TOOL:
                self._transferred = True
            return self._call(action.name, json.loads(json.dumps(action.arguments)))
        if self._transferred:
            return AssistantMessage(content=TRANSFER_TEXT)
        ec = self.task.evaluation_criteria
        infos = list(ec.communicate_info or []) if ec is not None else []
        said = " ".join(f"{i}." for i in infos)
        return AssistantMessage(content=f"{said} {DONE_TEXT}".strip())


def enum_arguments(domain: Domain) -> dict[tuple[str, str], list[str]]:
    """(tool, argument) → allowed values, for every argument with a JSON-schema enum."""
    out: dict[tuple[str, str], list[str]] = {}
    for schema in domain.agent_tool_schemas():
        fn = schema.get("function", schema)
        props = (fn.get("parameters") or {}).get("properties") or {}
        for arg, spec in props.items():
            values = spec.get("enum")
            if values:
                out[(fn["name"], arg)] = [str(v) for v in values]
    return out
