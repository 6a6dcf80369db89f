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
from pytest_quantagent.env.tasks import Action, Task
from pytest_quantagent.env.toolkit import ToolType
from pytest_quantagent.vocab.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)

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
    cross_role: bool = False
    """Also tempt the agent to call a user-side (device) tool itself, at the rates above,
    before it asks the user (τ²-bench telecom's cross-role failure). Off: no random draw,
    so the other variants' corpora are unchanged."""


ROBUST = NoiseConfig(name="robust", p_base=0.02, p_primed=0.02, primed_share=0.0)
PRONE = NoiseConfig(name="prone", p_base=0.04, p_primed=0.5, primed_share=0.35, cross_role=True)
MIXED = NoiseConfig(name="mixed", p_base=0.05, p_primed=0.25, primed_share=0.35)
NOISE_CONFIGS: dict[str, NoiseConfig] = {c.name: c for c in (ROBUST, PRONE, MIXED)}


#: Telecom troubleshooting checklists: complaint kind → (device check, gold tools it covers).
#: The expert walks the checklist in order, asks the user to run each check, and applies
#: the gold fixes the check covers right after it; so the model sees a check's output
#: before every fix *and* checks that show nothing wrong, and learns to read the output
#: (the faults themselves are hidden device state it cannot know otherwise).
TELECOM_CHECKLISTS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "service": (
        ("check_network_status", ("toggle_airplane_mode",)),
        ("check_sim_status", ("reseat_sim_card",)),
        ("__lookup__", ("send_payment_request", "make_payment", "resume_line")),
        ("check_apn_settings", ("reset_apn_settings",)),
    ),
    "data": (
        ("check_network_status", ("toggle_airplane_mode", "toggle_data", "enable_roaming", "toggle_roaming")),
        ("check_data_restriction_status", ("toggle_data_saver_mode",)),
        ("check_network_mode_preference", ("set_network_mode_preference",)),
        ("check_vpn_status", ("disconnect_vpn",)),
        ("__lookup__", ("refuel_data",)),
    ),
    "mms": (
        ("check_network_status", ("toggle_airplane_mode", "toggle_data")),
        ("check_network_mode_preference", ("set_network_mode_preference",)),
        ("check_apn_settings", ("reset_apn_settings",)),
        ("check_wifi_calling_status", ("toggle_wifi_calling",)),
        ("check_app_permissions", ("grant_app_permission",)),
    ),
}
TELECOM_LAST = ("reboot_device",)


def _telecom_ids(task: Task, db: Any) -> tuple[str, str] | None:
    """(customer id, line id) of the phone the task's user calls about."""
    phone = None
    for act in task.initial_state.initialization_actions or [] if task.initial_state else []:
        if act.func_name == "set_user_info":
            phone = act.arguments.get("phone_number")
    if phone is None or db is None:
        return None
    for line in db.lines:
        if line.phone_number == phone:
            for c in db.customers:
                if line.line_id in c.line_ids:
                    return c.customer_id, line.line_id
    return None


def telecom_plan(task: Task, db: Any = None) -> list[Action]:
    """The gold actions of a telecom troubleshooting task in checklist order, with the
    device checks inserted (other tasks: the gold actions unchanged)."""
    gold = task.gold_actions
    kind = task.id.split("_")[0] if "_" in task.id else ""
    if task.id.startswith("service_transfer"):
        kind = "service"
    checklist = TELECOM_CHECKLISTS.get(kind)
    if checklist is None:
        return list(gold)
    used: set[int] = set()
    plan: list[Action] = []
    ids = _telecom_ids(task, db)
    for check, covers in checklist:
        if check == "__lookup__":
            if ids is not None:
                plan.append(Action(action_id="lookup", requestor="assistant", name="__lookup__",
                                   arguments={"customer_id": ids[0], "line_id": ids[1]}))
        elif check:
            args = {"app_name": "messaging"} if check == "check_app_permissions" else {}
            for a in gold:
                if a.name == "grant_app_permission" and check == "check_app_permissions":
                    args = {"app_name": a.arguments.get("app_name", "messaging")}
            plan.append(Action(action_id=f"check_{check}", requestor="user", name=check, arguments=args))
        for i, a in enumerate(gold):
            if i not in used and a.name in covers:
                used.add(i)
                plan.append(a)
    rest = [a for i, a in enumerate(gold) if i not in used and a.name not in TELECOM_LAST]
    last = [a for i, a in enumerate(gold) if i not in used and a.name in TELECOM_LAST]
    return plan + rest + last


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


#: Argument name → a question the scripted user answers (its identity/fact keywords). Other
#: values (item ids, line ids, ...) come from tool results, so the expert never asks for them.
_QUESTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("email",), "Could you please provide your email address?"),
    (("first_name", "last_name", "zip"), "Could you please provide your first name, last name and zip code?"),
    (("phone_number",), "Could you please provide your phone number?"),
    (("order_id",), "Could you please tell me the order id?"),
    (("reason",), "What is the reason?"),
    (("address1", "address2", "city", "state", "country"), "What is the new address?"),
)


#: The identity questions; with ``email_first`` the expert asks the first before the second.
EMAIL_QUESTION = next(q for keys, q in _QUESTIONS if keys == ("email",))
NAME_ZIP_QUESTION = next(q for keys, q in _QUESTIONS if "zip" in keys)


#: Ids the expert (with ``restate_ids``) has the user say again right before the first call
#: that needs them, when the user's last message does not hold them. Said in the opening
#: request, an order or payment id is far back and among same-kind ids of tool results
#: (the user's other orders and payment methods); restated, it is the latest such token.
RESTATE_QUESTIONS: dict[str, str] = {
    # the same question as for a missing order id, so that it is never asked twice
    "order_id": next(q for keys, q in _QUESTIONS if "order_id" in keys),
    "payment_method_id": "What payment method do you want to use?",
}


def question_for(arg: str) -> str | None:
    """The question to ask for a missing argument value (None: not the user's to give)."""
    for keys, q in _QUESTIONS:
        if arg in keys:
            return q
    return None


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
_PHONE = re.compile(r"\b\d{3}-\d{3,4}(?:-\d{4})?\b")
_LINE_IDS = re.compile(r'"line_ids":\[([^\]]*)\]')


def _compact(text: str) -> str:
    return text.replace(" ", "")


def _user_text(view: Sequence[Message]) -> str:
    return "\n".join(m.content for m in view if isinstance(m, UserMessage) and m.content)


def _customer_lines(visible: str) -> list[str]:
    m = _LINE_IDS.search(_compact(visible))
    if m is None:
        return []
    return [x.strip('"') for x in m.group(1).split(",") if x.strip('"')]


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


@dataclass
class ExpertAgent:
    """Implements the episode ``Agent`` protocol (see the module docstring)."""

    domain: Domain
    task: Task
    noise: NoiseConfig
    rng: random.Random
    id_pool: Sequence[str] = ()
    enum_values: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    decoys: dict[str, list[str]] = field(default_factory=dict)
    """Id shape → ids of that shape that exist nowhere (see :func:`decoy_ids`)."""
    restate_ids: bool = False
    """Ask for each id of :data:`RESTATE_QUESTIONS` right before its first use (once per
    question) unless the user's last message holds it."""
    confirm_args: bool = False
    """Show the write call itself (its JSON, as the call will render it) in the
    confirmation question, so that the call repeats text the agent has just written.
    Retail only: the call names the action, which the telecom user may read as a device
    request (the corpus for the experiments in ``models/README.md`` used it for retail)."""
    email_first: bool = False
    """Ask for the email before the name and zip (retail): a user who does not remember it
    answers with name and zip. Without it the expert asks for whichever the task's gold
    lookup uses, a choice the conversation does not show, so a model imitating it guesses."""
    _i: int = 0
    _asked: set[str] = field(default_factory=set)
    _confirmed: set[int] = field(default_factory=set)
    _tempted: set[tuple[int, str]] = field(default_factory=set)
    _transferred: bool = False
    _done_reads: set[str] = field(default_factory=set)
    _plan: list[Action] | None = None
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
        same = self.decoys.get(id_shape(value))
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

    # -- discovery (telecom) --------------------------------------------------------------
    def _discover(self, action: Action, view: Sequence[Message], visible: str) -> AssistantMessage | None:
        """Reads a careful agent makes before a call whose ids it has not seen yet.

        Telecom's gold actions start at the fix (``resume_line(C02, L02)``); a real agent
        first finds the customer by the phone number, reads the lines until the one with
        that number, and lists the bills before asking for a payment.
        """
        if self.domain.name != "telecom":
            return None
        args = action.arguments
        cid = args.get("customer_id")
        if isinstance(cid, str) and f'"customer_id":"{cid}"' not in _compact(visible):
            phone = _PHONE.search(_user_text(view))
            if phone is None:
                q = "Could you please provide your phone number?"
                if q not in self._asked:
                    self._asked.add(q)
                    return AssistantMessage(content=q)
                return None
            if "get_customer_by_phone" not in self._done_reads:
                self._done_reads.add("get_customer_by_phone")
                return self._call("get_customer_by_phone", {"phone_number": phone.group(0)})
        lid = args.get("line_id")
        if isinstance(lid, str) and f"line:{lid}" not in self._done_reads:
            listed = _customer_lines(visible)
            for other in listed:
                if f"line:{other}" not in self._done_reads:
                    self._done_reads.add(f"line:{other}")
                    return self._call("get_details_by_id", {"id": other})
                if other == lid:
                    break
        bid = args.get("bill_id")
        if isinstance(bid, str) and isinstance(cid, str) and "bills" not in self._done_reads:
            self._done_reads.add("bills")
            return self._call("get_bills_for_customer", {"customer_id": cid})
        return None

    # -- policy -----------------------------------------------------------------------
    def respond(self, view: list[Message]) -> AssistantMessage:
        """The expert's next message given the agent's view."""
        visible = _visible_text(view)
        if self._plan is None:
            self._plan = (
                telecom_plan(self.task, self.domain.db) if self.domain.name == "telecom"
                else list(self.task.gold_actions)
            )
        while self._i < len(self._plan):
            action = self._plan[self._i]
            if action.requestor == "user":
                if self.noise.cross_role and (self._i, "cross_role") not in self._tempted:
                    self._tempted.add((self._i, "cross_role"))
                    if self.rng.random() < self._p(action.name, "cross_role"):
                        # The agent runs the user's phone tool itself; the error tells it
                        # to ask the user, which it does next.
                        self.tempted_calls += 1
                        return self._call(action.name, dict(action.arguments))
                self._i += 1
                return AssistantMessage(content=self.domain.describe_user_action(action))
            if action.name == "__lookup__":
                lookup = self._discover(action, view, visible)
                if lookup is not None:
                    return lookup
                self._i += 1
                continue
            missing = [
                k for k, v in action.arguments.items()
                if any(val not in visible for val in _leaf_values(v))
            ]
            for k in missing:
                q = question_for(k)
                if q == NAME_ZIP_QUESTION and self.email_first and EMAIL_QUESTION not in self._asked:
                    q = EMAIL_QUESTION
                if q is not None and q not in self._asked:
                    self._asked.add(q)
                    return AssistantMessage(content=q)
            if self.restate_ids:
                last_user = next(
                    (m.content or "" for m in reversed(view) if isinstance(m, UserMessage)), ""
                )
                for k, v in action.arguments.items():
                    q = RESTATE_QUESTIONS.get(k)
                    if q is not None and isinstance(v, str) and v not in last_user and q not in self._asked:
                        self._asked.add(q)
                        return AssistantMessage(content=q)
            lookup = self._discover(action, view, visible)
            if lookup is not None:
                return lookup
            is_write = self.domain.tool_type(action.name) == ToolType.WRITE
            if is_write and self._i not in self._confirmed:
                self._confirmed.add(self._i)
                if self.confirm_args:
                    from pytest_quantagent.bundled.chat import render_call

                    shown = render_call(action.name, action.arguments)
                    return AssistantMessage(content=f"I will make this call: {shown} Do you confirm that I should proceed?")
                # Generic words only: naming the action ("payment", "data") would read as a
                # device request to the telecom user.
                return AssistantMessage(content="Do you confirm that I should proceed?")
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


#: Closed value sets that a domain checks inside the tool rather than in the schema.
_CHECKED_IN_TOOL: dict[str, dict[tuple[str, str], tuple[str, ...]]] = {
    "retail": {("cancel_pending_order", "reason"): ("no longer needed", "ordered by mistake")},
}


def enum_arguments(domain: Domain) -> dict[tuple[str, str], list[str]]:
    """(tool, argument) → allowed values, for every argument with a JSON-schema enum (and
    the closed sets our bundled domains check inside the tool)."""
    out: dict[tuple[str, str], list[str]] = {
        k: list(v) for k, v in _CHECKED_IN_TOOL.get(domain.name, {}).items()
        if k[0] in domain.agent_tool_names
    }
    for schema in domain.agent_tool_schemas():
        fn = schema.get("function", schema)
        props = (fn.get("parameters") or {}).get("properties") or {}
        for arg, spec in props.items():
            values = spec.get("enum")
            if values:
                out[(fn["name"], arg)] = [str(v) for v in values]
    return out
