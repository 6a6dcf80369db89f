"""The expert that writes the reference agent's training episodes.

It is the careful gold agent (:class:`~pytest_quantagent.runner.gold.GoldAgent` with
``style="careful"``: it asks for every value it has not seen, follows the domain's
troubleshooting plan, confirms writes) plus a noise policy, :class:`Temptations`: it
sometimes falls for a realistic **temptation** and recovers after the error message: a
near-miss tool name (``unknown_tool``), a wrong id (``wrong_entity``), an invalid enum
value (``bad_arguments``/``policy_violation``), or (``cross_role``) the user's device tool
called by the agent itself (``cross_role_tool``). Then it makes the correct call.

How often it is tempted is the difference between the robust and the prone variant
(:data:`ROBUST` and :data:`PRONE`). A greedy-decoding model only reproduces a mistake when
the mistake is close to 50/50 *in some context it can see*, so in the prone variant each
(tool, task kind) pair is "primed" with probability ``primed_share``; primed pairs are
tempted at ``p_primed`` (~0.5: narrow-margin decisions), the rest at ``p_base``.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.env.tasks import Action, Task
from pytest_quantagent.env.toolkit import ToolType
from pytest_quantagent.runner.gold import TRANSFER_TOOL, GoldAgent

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
    cross_role: bool = False
    """Also tempt the agent to call a user-side (device) tool itself, at the rates above,
    before it asks the user (τ²-bench telecom's cross-role failure). Off: no random draw,
    so the other variants' corpora are unchanged."""
    p_primed_by_kind: tuple[tuple[str, float], ...] = ()
    """Per temptation kind (``name``, ``id``, ``enum``, ``cross_role``), a chance on primed
    pairs other than ``p_primed``: below 0.5 the right call stays the more likely one at a
    primed pair, by a small margin (the narrow-margin decisions of the paper's mechanism)."""


ROBUST = NoiseConfig(name="robust", p_base=0.02, p_primed=0.02, primed_share=0.0)
PRONE = NoiseConfig(name="prone", p_base=0.04, p_primed=0.5, primed_share=0.35, cross_role=True)
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


def id_shape(value: str) -> str:
    """An id with every digit replaced by 0 (ids of one kind share a shape)."""
    return re.sub(r"\d", "0", value)


def decoy_ids(pool: Sequence[str], *, per_shape: int = 40, min_members: int = 20) -> dict[str, list[str]]:
    """For each id shape with at least ``min_members`` ids in ``pool``: ``per_shape`` ids of
    the same shape that are not in the pool (so a call with one fails with "not found").
    Deterministic; the decoys go into the tokenizer's vocabulary as single tokens, so a
    model that picks a wrong id picks a whole one, as a larger model would."""
    by_shape: dict[str, list[str]] = {}
    for p in sorted(set(pool)):
        if sum(c.isdigit() for c in p) >= 3:
            by_shape.setdefault(id_shape(p), []).append(p)
    existing = set(pool)
    out: dict[str, list[str]] = {}
    for shape, members in sorted(by_shape.items()):
        if len(members) < min_members:
            continue
        rng = random.Random(shape)
        found: list[str] = []
        tries = 0
        while len(found) < per_shape and tries < per_shape * 50:
            tries += 1
            base = rng.choice(members)
            cand = "".join(str(rng.randrange(10)) if c.isdigit() else c for c in base)
            if cand not in existing and cand not in found:
                found.append(cand)
        out[shape] = found
    return out


_ID_LIKE = re.compile(r"\d")


@dataclass
class Temptations:
    """The expert's noise: a :class:`~pytest_quantagent.runner.gold.Detours` policy that
    draws, once per gold step and kind, whether to make a wrong call first (see the module
    docstring). Its own ``rng`` makes every draw, so a corpus is fixed by its seed."""

    domain: Domain
    task: Task
    noise: NoiseConfig
    rng: random.Random
    enum_values: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    decoys: dict[str, list[str]] = field(default_factory=dict)
    """Id shape → ids of that shape that exist nowhere (see :func:`decoy_ids`)."""
    tempted_calls: int = 0
    _tempted: set[tuple[int, str]] = field(default_factory=set)

    def _p(self, tool: str, what: str) -> float:
        kind = task_kind(self.task)
        primed = _stable_unit(self.domain.name, tool, kind, what) < self.noise.primed_share
        if not primed:
            return self.noise.p_base
        return dict(self.noise.p_primed_by_kind).get(what, self.noise.p_primed)

    def _draw(self, step: int, what: str, tool: str) -> bool:
        """Whether the ``what`` temptation is drawn at ``step`` (one draw per step and kind)."""
        if (step, what) in self._tempted:
            return False
        self._tempted.add((step, what))
        return self.rng.random() < self._p(tool, what)

    def before_user_step(self, step: int, action: Action) -> tuple[str, dict[str, Any]] | None:
        """``cross_role``: the agent runs the user's phone tool itself."""
        if self.noise.cross_role and self._draw(step, "cross_role", action.name):
            self.tempted_calls += 1
            return action.name, dict(action.arguments)
        return None

    def before_call(self, step: int, action: Action) -> tuple[str, dict[str, Any]] | None:
        """A near-miss name, a wrong id (reads only) or a wrong enum value."""
        if self._draw(step, "name", action.name):
            self.tempted_calls += 1
            return near_miss_name(action.name, self.domain.agent_tool_names), dict(action.arguments)
        if (step, "id") not in self._tempted:
            self._tempted.add((step, "id"))
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
                    return action.name, {**action.arguments, k: wrong}
        if (step, "enum") not in self._tempted:
            self._tempted.add((step, "enum"))
            enum_args = [k for k in action.arguments if (action.name, k) in self.enum_values]
            if enum_args and self.rng.random() < self._p(action.name, "enum"):
                k = enum_args[0]
                wrong_value = _wrong_enum(str(action.arguments[k]))
                if wrong_value not in self.enum_values[(action.name, k)]:
                    self.tempted_calls += 1
                    return action.name, {**action.arguments, k: wrong_value}
        return None

    def _wrong_id(self, value: str) -> str | None:
        same = self.decoys.get(id_shape(value))
        if not same:
            return None
        return self.rng.choice(same)


def _wrong_enum(value: str) -> str:
    words = value.split()
    if len(words) >= 3:
        return " ".join(words[1:])
    if len(words) == 2:
        return "not " + words[-1]
    return value + "s"


class ExpertAgent(GoldAgent):
    """The careful :class:`~pytest_quantagent.runner.gold.GoldAgent` with the
    :class:`Temptations` of ``noise`` (drawn from ``rng``); ``restate_ids``,
    ``confirm_args`` and ``email_first`` are the careful style's switches (see there)."""

    def __init__(
        self, domain: Domain, task: Task, noise: NoiseConfig, rng: random.Random, *,
        enum_values: dict[tuple[str, str], list[str]] | None = None,
        decoys: dict[str, list[str]] | None = None, restate_ids: bool = False,
        confirm_args: bool = False, email_first: bool = False,
    ) -> None:
        self.temptations = Temptations(domain, task, noise, rng, dict(enum_values or {}), dict(decoys or {}))
        super().__init__(domain, task, style="careful", detours=self.temptations,
                         restate_ids=restate_ids, confirm_args=confirm_args,
                         email_first=email_first, call_prefix="expert")

    @property
    def tempted_calls(self) -> int:
        """Wrong calls made so far (the corpus statistics count them)."""
        return self.temptations.tempted_calls


def enum_arguments(domain: Domain) -> dict[tuple[str, str], list[str]]:
    """(tool, argument) → allowed values, for every argument with a JSON-schema enum (and
    the closed sets the domain's tools check themselves, ``Domain.checked_values``)."""
    out: dict[tuple[str, str], list[str]] = {
        k: list(v) for k, v in domain.checked_values.items() if k[0] in domain.agent_tool_names
    }
    for schema in domain.agent_tool_schemas():
        fn = schema.get("function", schema)
        props = (fn.get("parameters") or {}).get("properties") or {}
        for arg, spec in props.items():
            values = spec.get("enum")
            if values:
                out[(fn["name"], arg)] = [str(v) for v in values]
    return out
