"""The gold-playback agent: plays a task's gold actions through the engine.

Agent-side gold actions are issued as tool calls, one per message, in order. User-side
gold actions (telecom device actions) are asked of the user in words the scripted user
understands (``Domain.describe_user_action``). When the actions are done the agent says the
task's ``communicate_info`` and asks whether there is anything else (so the user stops),
or, when the gold actions transferred the user, announces the transfer.

It talks in one of three styles:

- ``"direct"``: only the actions (the oracle's data check: ``quantagent oracle``);
- ``"conversational"``: also asks for identity first, asks for confirmation before each
  state-changing call and varies its wording (chosen by ``seed``): the scripted user must
  cope with ordinary agent talk without derailing the task;
- ``"careful"``: the way a careful human agent would, so that a model imitating it can
  succeed from what it *sees* (the bundled model's training episodes,
  ``training/expert.py``). It follows the domain's :class:`~pytest_quantagent.env.domain.GoldPlan`
  (``Domain.gold_plan``: the checks and reads that find a fault and show its ids), makes
  sure every argument value is visible in the conversation before a call, and otherwise
  asks the user for it first (email, name and zip, order id, reason, ...: words the
  scripted user recognises), and asks for confirmation before a write.

Optionally, a :class:`Detours` policy makes wrong calls before the right ones (the training
expert's temptations: near-miss tool names, wrong ids, the user's device tools); the error
messages tell the agent what went wrong and it goes on with the gold action.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol

from pytest_quantagent.env.domain import LOOKUP, Domain, GoldPlan
from pytest_quantagent.env.tasks import Action, Task
from pytest_quantagent.env.toolkit import ToolType
from pytest_quantagent.vocab.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)

Style = Literal["direct", "conversational", "careful"]
STYLES: tuple[Style, ...] = ("direct", "conversational", "careful")

TRANSFER_TOOL = "transfer_to_human_agents"
TRANSFER_TEXT = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."
DONE_TEXT = "Is there anything else I can help you with?"

# -- conversational wording ---------------------------------------------------------------

_IDENTITY_ASKS = (
    "Sure, I can help with that. Could you please provide the email address on your account?",
    "Happy to help! To verify your identity, what's your email? If you don't remember it, "
    "your full name and zip code work too.",
    "Before we start, may I have your first and last name and your zip code?",
)
_CONFIRM_ASKS = (
    "I'm about to perform {what}. Do you confirm (yes/no)?",
    "Shall I go ahead with the {what}?",
    "Please confirm you'd like me to proceed with the {what}.",
)
_CLOSINGS = (
    "All set. Is there anything else I can help you with?",
    "Your request is complete. Anything else I can do for you today?",
    "Done! Is there something else you need?",
)
_TRANSFERS = (
    TRANSFER_TEXT,
    "I'm transferring you to a human agent now. Please hold.",
)

# -- careful wording ----------------------------------------------------------------------

#: Argument name → a question the scripted user answers (its identity/fact keywords). Other
#: values (item ids, line ids, ...) come from tool results, so the agent never asks for them.
_QUESTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("email",), "Could you please provide your email address?"),
    (("first_name", "last_name", "zip"), "Could you please provide your first name, last name and zip code?"),
    (("phone_number",), "Could you please provide your phone number?"),
    (("order_id",), "Could you please tell me the order id?"),
    (("reason",), "What is the reason?"),
    (("address1", "address2", "city", "state", "country"), "What is the new address?"),
)

#: The identity questions; with ``email_first`` the agent asks the first before the second.
EMAIL_QUESTION = next(q for keys, q in _QUESTIONS if keys == ("email",))
NAME_ZIP_QUESTION = next(q for keys, q in _QUESTIONS if "zip" in keys)

#: Ids the careful agent (with ``restate_ids``) has the user say again right before the
#: first call that needs them, when the user's last message does not hold them. Said in the
#: opening request, an order or payment id is far back and among same-kind ids of tool
#: results (the user's other orders and payment methods); restated, it is the latest such
#: token.
RESTATE_QUESTIONS: dict[str, str] = {
    # the same question as for a missing order id, so that it is never asked twice
    "order_id": next(q for keys, q in _QUESTIONS if "order_id" in keys),
    "payment_method_id": "What payment method do you want to use?",
}

#: The careful confirmation. Generic words only: naming the action ("payment", "data")
#: would read as a device request to the telecom user.
CONFIRM_TEXT = "Do you confirm that I should proceed?"


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


def visible_text(view: Sequence[Message]) -> str:
    """What the agent has seen of the user and the world: user messages and its own tool
    results (the text a value must appear in before the careful agent uses it)."""
    parts: list[str] = []
    for m in view:
        if isinstance(m, UserMessage) and m.content:
            parts.append(m.content)
        elif isinstance(m, ToolMessage) and m.requestor == "assistant":
            parts.append(m.content)
    return "\n".join(parts)


class Detours(Protocol):
    """Wrong calls the agent makes before a gold step (each returns ``(tool name,
    arguments)`` or None). ``step`` is the step's index in the plan; the agent asks again
    after each detour, so a policy decides at most once per step and kind."""

    def before_user_step(self, step: int, action: Action) -> tuple[str, dict[str, Any]] | None:
        """Before asking the user to do ``action`` (e.g. calling the user's tool itself)."""
        ...

    def before_call(self, step: int, action: Action) -> tuple[str, dict[str, Any]] | None:
        """Right before the gold call ``action``."""
        ...


class GoldAgent:
    """Implements the runner's ``Agent`` protocol by playing the gold actions (see the
    module docstring for ``style``).

    Args:
        domain: The task's domain (``describe_user_action``, ``tool_type``, ``gold_plan``).
        task: The task whose gold actions are played.
        style: ``"direct"``, ``"conversational"`` or ``"careful"``.
        seed: Chooses the conversational wording.
        detours: Wrong calls to make before gold steps (None: none).
        restate_ids: Careful: ask for each id of :data:`RESTATE_QUESTIONS` right before its
            first use (once per question) unless the user's last message holds it.
        confirm_args: Careful: show the write call itself (its JSON, as the bundled chat
            format renders it) in the confirmation question, so that the call repeats text
            the agent has just written. Retail only: the call names the action, which the
            telecom user may read as a device request.
        email_first: Careful: ask for the email before the name and zip (retail): a user
            who does not remember it answers with name and zip. Without it the agent asks
            for whichever the task's gold lookup uses, a choice the conversation does not
            show, so a model imitating it guesses.
        call_prefix: Tool call ids are ``<call_prefix>_<n>``, n counting the agent's calls.
    """

    def __init__(
        self, domain: Domain, task: Task, *, style: Style = "direct", seed: int = 0,
        detours: Detours | None = None, restate_ids: bool = False, confirm_args: bool = False,
        email_first: bool = False, call_prefix: str = "gold",
    ) -> None:
        if style not in STYLES:
            raise ValueError(f"gold agent style must be one of {', '.join(STYLES)}, got {style!r}")
        self.domain = domain
        self.task = task
        self.style = style
        self.detours = detours
        self.restate_ids = restate_ids
        self.confirm_args = confirm_args
        self.email_first = email_first
        self.call_prefix = call_prefix
        self.plan = domain.gold_plan(task) if style == "careful" else GoldPlan(task.gold_actions)
        self.rng = random.Random(seed)
        self.transferred = False
        self._step = 0
        self._calls = 0
        self._asked_identity = False
        self._asked: set[str] = set()
        self._confirmed: set[int] = set()

    async def act(self, view: list[Message]) -> AssistantMessage:
        return self.respond(view)

    def _say(self, options: tuple[str, ...], **fmt: str) -> AssistantMessage:
        return AssistantMessage(content=options[self.rng.randrange(len(options))].format(**fmt))

    def _ask(self, question: str) -> AssistantMessage:
        self._asked.add(question)
        return AssistantMessage(content=question)

    def _call(self, name: str, arguments: dict[str, Any]) -> AssistantMessage:
        self._calls += 1
        call = ToolCall(id=f"{self.call_prefix}_{self._calls}", name=name, arguments=arguments,
                        requestor="assistant")
        return AssistantMessage(tool_calls=[call])

    def _before(self, action: Action, view: Sequence[Message], visible: str) -> AssistantMessage | None:
        """The domain plan's question or read before ``action``, if any."""
        step = self.plan.before(action, view, visible, self._asked)
        if step is None:
            return None
        if isinstance(step, str):
            return self._ask(step)
        return self._call(step.name, dict(step.arguments))

    def _careful_asks(self, action: Action, view: Sequence[Message], visible: str) -> AssistantMessage | None:
        """Questions for argument values not yet seen, restated ids, and the plan's reads."""
        missing = [
            k for k, v in action.arguments.items()
            if any(val not in visible for val in _leaf_values(v))
        ]
        for k in missing:
            q = question_for(k)
            if q == NAME_ZIP_QUESTION and self.email_first and EMAIL_QUESTION not in self._asked:
                q = EMAIL_QUESTION
            if q is not None and q not in self._asked:
                return self._ask(q)
        if self.restate_ids:
            last_user = next(
                (m.content or "" for m in reversed(view) if isinstance(m, UserMessage)), ""
            )
            for k, v in action.arguments.items():
                q = RESTATE_QUESTIONS.get(k)
                if q is not None and isinstance(v, str) and v not in last_user and q not in self._asked:
                    return self._ask(q)
        return self._before(action, view, visible)

    def _confirmation(self, action: Action) -> AssistantMessage:
        if self.style == "conversational":
            return self._say(_CONFIRM_ASKS, what=action.name.replace("_", " "))
        if self.confirm_args:
            from pytest_quantagent.bundled.chat import render_call

            shown = render_call(action.name, action.arguments)
            return AssistantMessage(content=f"I will make this call: {shown} {CONFIRM_TEXT}")
        return AssistantMessage(content=CONFIRM_TEXT)

    def respond(self, view: list[Message]) -> AssistantMessage:
        """The agent's next message given its view of the conversation."""
        chatty = self.style == "conversational"
        careful = self.style == "careful"
        if chatty and not self._asked_identity:
            self._asked_identity = True
            return self._say(_IDENTITY_ASKS)
        visible = visible_text(view) if careful else ""
        steps = self.plan.actions
        while self._step < len(steps):
            i, action = self._step, steps[self._step]
            if action.requestor == "user":
                detour = self.detours.before_user_step(i, action) if self.detours else None
                if detour is not None:
                    # The agent runs the user's tool itself; the error tells it to ask the
                    # user, which it does next.
                    return self._call(*detour)
                self._step += 1
                return AssistantMessage(content=self.domain.describe_user_action(action))
            if careful:
                if action.name == LOOKUP:
                    read = self._before(action, view, visible)
                    if read is not None:
                        return read
                    self._step += 1
                    continue
                ask = self._careful_asks(action, view, visible)
                if ask is not None:
                    return ask
            if (
                self.style != "direct"
                and i not in self._confirmed
                and self.domain.tool_type(action.name) == ToolType.WRITE
            ):
                self._confirmed.add(i)
                return self._confirmation(action)
            detour = self.detours.before_call(i, action) if self.detours else None
            if detour is not None:
                return self._call(*detour)
            self._step += 1
            if action.name == TRANSFER_TOOL:
                self.transferred = True
            return self._call(action.name, json.loads(json.dumps(action.arguments)))
        if self.transferred:
            return self._say(_TRANSFERS) if chatty else AssistantMessage(content=TRANSFER_TEXT)
        ec = self.task.evaluation_criteria
        infos = list(ec.communicate_info or []) if ec is not None else []
        said = " ".join(f"{i}." for i in infos)
        closing = self._say(_CLOSINGS).content if chatty else DONE_TEXT
        return AssistantMessage(content=f"{said} {closing}".strip())
