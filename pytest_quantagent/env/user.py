"""The scripted user: a deterministic user simulator driven by a task's structured scenario.

A real LLM agent talks to it, so it reacts to *intents* recognised by keyword sets (robust
to paraphrase within reason), never to exact strings. Given the same script, seed and agent
messages it always says the same thing.

The scenario (``user_scenario.script`` of our tasks; schema :class:`UserScript`)::

    {
      "requests": ["I want to cancel order #W123 ...", "Also ..."],  # opening, then follow-ups
      "identity": {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122",
                   "email": "...", "phone": "...", "user_id": "...", "customer_id": "..."},
      "facts": {"order_id": "#W123", "reason": "no longer needed", "payment_method": "...",
                "address": "...", "item": "...", "<any key>": "..."},
      "answers": [{"keywords": [["gift", "card"], ["balance"]], "say": "..."}],
      "confirm": true,               # answer to "shall I proceed?"-type questions
      "refusal": "No, please don't do that.",
      "device_actions": [{"tool": "toggle_data", "arguments": {}}],  # telecom: user tools
      "end": "stop",                 # "stop" → ###STOP###; "transfer" expected → ###TRANSFER###
      "closing": "Thanks, that's all.",
      "max_fallbacks": 3
    }

How it answers an agent message: the message is split into segments and each is given a
dialogue act (:mod:`pytest_quantagent.env.dialogue`); statements (explanations, recaps,
past-tense reports, empathy, conditionals, closing summaries) get no reaction.

1. a transfer notice anywhere in the message → ``###TRANSFER###``;
2. device actions asked for by request segments (domain :class:`DeviceIntent` table, or a
   literal user-tool name) → the tool call(s), then the result(s) in words (see the
   domain's user, e.g. the telecom one, for negation, checks and de-duplication);
3. every question, request and offer of the message, answered together in one reply
   (:meth:`ScriptedUser.answers`): an offer or confirmation request → yes (``confirm``) or
   the refusal (a transfer offer: yes when the scenario ends in a transfer); identity asked
   for (email, name, zip, phone, user/customer id; a zip asked as part of an address is
   not identity); custom ``answers`` rules, then ``facts`` topics (order id, reason,
   payment, address, item, line, location);
   a choice between alternatives ("keep troubleshooting, or be transferred?") → the one the
   scenario wants (:meth:`ScriptedUser.choose`);
4. nothing answered: a closing question or a completion report → next request or stop (a
   scenario that ends in a transfer asks for a human once before it leaves with the token);
5. the greeting → the opening request; otherwise restate the request (after
   ``max_fallbacks`` unproductive turns it leaves with ``###OUT-OF-SCOPE###``).

τ²-bench's task files have no script: :func:`script_from_instructions` derives one from the
structured instructions (reason for call, known info: name, zip, email, phone).

Domains extend it with their :class:`DeviceIntent` table (passed by ``Domain.make_user``) or
by subclassing :class:`ScriptedUser` and overriding :meth:`ScriptedUser.respond_text`.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_quantagent.env import dialogue
from pytest_quantagent.env.dialogue import Act, Segment
from pytest_quantagent.env.scenario import AnswerRule, DeviceAction, UserScript
from pytest_quantagent.env.scenario_text import opening_request, read_scenario
from pytest_quantagent.vocab.messages import (
    OUT_OF_SCOPE_TOKEN,
    STOP_TOKEN,
    TRANSFER_TOKEN,
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = [
    "USER_EVENTS", "AnswerRule", "DeviceAction", "DeviceIntent", "ScriptedUser", "UserScript",
    "matches",
]

#: The kinds :meth:`ScriptedUser.events` counts (``EpisodeRecord.user_events``).
# Text no reader could act on: a tool call leaked into the message ('","arguments":{...}}'),
# JSON keys, or the bundled model's alias tokens ("<place5>"). Not understanding it is no
# misreading, so it is no not_understood turn.
_NOT_LANGUAGE = re.compile(r'"\w+"\s*:|[{}]|<[a-z]+\d+>')

USER_EVENTS = ("not_understood", "unrequested_change")
"""What the user may do of its own accord that can decide an episode. (Stores made before
0.1 may also hold ``premature_transfer``: the user left a transfer scenario with the transfer
token when the agent closed without transferring, an agent failure, not the user's; it now
stops with ``###STOP###`` and counts nothing.)"""

if TYPE_CHECKING:
    from pytest_quantagent.env.tasks import Task


# -- intent recognition ---------------------------------------------------------------------

Keywords = tuple[tuple[str, ...], ...]


def _norm(text: str) -> str:
    return " " + re.sub(r"[^a-z0-9#@._\-]+", " ", text.lower()) + " "


def matches(text: str, groups: Iterable[Iterable[str]]) -> bool:
    """True when every word of at least one group occurs in ``text`` (normalised; words
    match at word starts, so "cancel" matches "cancelled" and "cancellation")."""
    t = _norm(text)
    return any(all((" " + w.lower()) in t for w in group) for group in groups)


@dataclass(frozen=True)
class DeviceIntent:
    """How the user recognises a request to use one of its tools.

    ``keywords``: keyword groups (see :func:`matches`); ``phrase``: how the oracle asks for
    it (``str.format`` with the arguments); ``extract``: arguments read from the agent's
    text when the script gives none for this tool.
    """

    tool: str
    keywords: Keywords
    phrase: str = ""
    extract: Callable[[str], dict[str, Any]] | None = None
    defaults: dict[str, Any] = field(default_factory=dict)

    def ask(self, arguments: dict[str, Any]) -> str:
        if self.phrase:
            return self.phrase.format(**arguments)
        return f"Please use {self.tool} on your phone with {json.dumps(arguments, sort_keys=True)}."


_IDENTITY: dict[str, Keywords] = {
    "email": (("email",), ("e-mail",)),
    "name": (("name",),),
    "zip": (("zip",), ("postal",), ("postcode",)),
    "phone": (("phone", "number"), ("mobile", "number"), ("cell", "number"), ("number", "on", "the", "account")),
    "user_id": (("user", "id"),),
    "customer_id": (("customer", "id"),),
}
_FACT_TOPICS: dict[str, Keywords] = {
    "order_id": (("order", "id"), ("order", "number"), ("which", "order")),
    "reason": (("reason",), ("why",), ("because",)),
    "payment_method": (("payment",), ("refund", "to"), ("pay",), ("card",), ("gift", "card")),
    "address": (("address",), ("ship", "to")),
    "item": (("which", "item"), ("item",), ("product",)),
    "line_id": (("which", "line"), ("line",)),
    "location": (
        ("where", "are", "you"), ("location",), ("abroad",), ("travel",), ("outside", "the"),
        ("overseas",), ("which", "country"), ("another", "country"), ("where", "you", "are"),
        ("back", "home"), ("back", "in", "the"), ("at", "home"), ("in", "the", "us"),
        ("in", "the", "united", "states"), ("in", "the", "u.s"), ("in", "your", "home", "country"),
        ("out", "of", "the", "country"), ("what", "country"), ("in", "the", "country"), ("left", "the", "country"),
    ),
}
# The same phrases, in order and whole ("there's no outage, your line is active, ..." is no
# "is there anything").
_DONE_SAID = re.compile(
    r"\b(?:anything|something) else\b|\belse i can help\b|\ball set\b|\bhave a (?:great|nice) day\b|"
    r"\bis there anything\b|\bfurther assistance\b|\banything more\b", re.IGNORECASE)
_COMPLETED = re.compile(
    r"\b(?:has|have) been (?:successfully )?(?:cancell?ed|updated|changed|modified|processed|"
    r"submitted|refunded|exchanged|returned|initiated|placed|resolved|fixed|applied|completed)\b",
    re.IGNORECASE,
)
# "Order #W2876133 is now set to be paid with PayPal.": a change reported as done.
_NOW_SET = re.compile(r"\b(?:is|are) now (?:set|updated|changed|switched|linked|cancell?ed)\b", re.IGNORECASE)
# What the agent tells in answer to a question: an amount, an order status.
_TOLD_VALUE = re.compile(
    r"\$\s?\d|\b\d+(?:\.\d+)? (?:usd|dollars)\b|\b(?:pending|processed|delivered|shipped|cancell?ed)\b",
    re.IGNORECASE,
)
# Said before it is done, or about what comes: not the answer yet.
_NOT_YET = re.compile(
    r"\b(?:i'll|i will|let me|i can|i could|i'm going to|going to|once|before|after|if|would|should|"
    r"need|needs|may|might|will be able)\b", re.IGNORECASE)
_ADDRESS_CONTEXT = re.compile(
    r"\baddress\b|\bship(?:ping|ped)? to\b|\bdeliver|\b(?:street|city)\b.*\b(?:state|zip|country)\b",
    re.IGNORECASE,
)
# A phone number asked without the word "phone" ("Which number is having the problem?").
_PHONE_ASK = re.compile(
    r"\b(?:which|what|your|the affected|the same) (?:(?:phone|mobile|cell|line|telephone) )?number\b(?! of\b)|"
    r"\bname,? and (?:your )?number\b",
    re.IGNORECASE,
)
_VERIFY_IDENTITY = re.compile(
    # ("can you confirm that you're back in the US?" asks where the customer is.)
    r"\b(?:verify|confirm|authenticate|validate|identify)\b[^.?!]*\b(?:identity|account|yourself|"
    r"you\b(?!(?:'re| are| were)? (?:back|still|currently|now|at home|in|outside|abroad|overseas|travell?ing)\b))",
    re.IGNORECASE,
)
# Names that are not the customer's.
_NOT_A_PERSON = re.compile(
    r"\b(?:access point|apn|network|wi-?fi|app|application|plan|product|item|file|device|model|"
    r"brand|company|store|street|ssid|operator|carrier)\s+names?\b|\bnames\b",
    re.IGNORECASE,
)
_GREETING: Keywords = (("how", "can", "i", "help"), ("how", "may", "i", "help"), ("what", "can", "i", "do"))

def script_from_instructions(task: Task) -> UserScript:
    """Derive a script from τ²-bench's structured (or free-text) instructions: identity and
    facts read from the prose (:func:`pytest_quantagent.env.scenario_text.read_scenario`),
    user-side gold actions as its device actions, a transfer end when the gold has one."""
    ins = task.structured_instructions
    if ins is not None:
        reason = ins.reason_for_call.strip()
        known = ins.known_info or ""
        read = read_scenario(reason, known, ins.unknown_info or "", ins.task_instructions or "")
    else:
        reason = str(task.user_scenario.instructions).strip()
        read = read_scenario(reason, reason)
    identity = {k: v for k, v in read.identity.items() if k != "name"}
    transfer = any(a.name == "transfer_to_human_agents" for a in task.gold_actions)
    return UserScript(
        requests=[opening_request(reason)],
        identity=identity,
        facts=read.facts,
        answers=read.answers,
        device_actions=[
            DeviceAction(tool=a.name, arguments=a.arguments)
            for a in task.gold_actions
            if a.requestor == "user"
        ],
        end="transfer" if transfer else "stop",
        on_confirm=read.on_confirm,
        fallbacks=read.fallbacks,
    )


def script_for_task(task: Task) -> UserScript:
    """The task's script, or one derived from its instructions when it has none."""
    if task.user_scenario.script is not None:
        return task.user_scenario.script
    return script_from_instructions(task)


# -- the user -------------------------------------------------------------------------------


class ScriptedUser:
    """Deterministic user following a :class:`UserScript`.

    Implements the runner's ``User`` protocol: ``await user.act(view) -> UserMessage``,
    where ``view`` is the user's view of the conversation (agent texts, the user's own
    messages and its own tool results).
    """

    def __init__(
        self,
        script: UserScript,
        *,
        seed: int = 0,
        intents: Sequence[DeviceIntent] = (),
        user_tool_names: Iterable[str] = (),
    ) -> None:
        self.script = script
        self.rng = random.Random(seed)
        self.intents = tuple(intents)
        self.user_tool_names = frozenset(user_tool_names)
        self._next_request = 0
        self._fallbacks = 0
        self._pending: list[ToolCall] = []
        self._results: list[str] = []
        self._n_calls = 0
        self._used_device: set[int] = set()
        self._opened = False
        self._asked_transfer = False
        self._events: dict[str, int] = dict.fromkeys(USER_EVENTS, 0)

    def events(self) -> dict[str, int]:
        """What the user did of its own accord so far, per kind (see :data:`USER_EVENTS`):
        ``not_understood`` turns (no request or question it could act on: it asked for
        clarification; not counted when the agent's message was no language: leaked tool-call
        JSON or alias tokens, which no reader could act on), ``unrequested_change`` (a
        state-changing call nobody asked for)."""
        return dict(self._events)

    def _event(self, kind: str) -> None:
        self._events[kind] += 1

    async def act(self, view: list[Message]) -> UserMessage:
        return self.respond(view)

    def respond(self, view: list[Message]) -> UserMessage:
        """Synchronous core of :meth:`act`: after its own tool result, the next pending
        device call or a report of the results; after an agent text, the device calls it
        asks for or :meth:`respond_text`."""
        last = view[-1] if view else None
        if isinstance(last, ToolMessage):
            self._results.append(self._describe_result(last))
            if self._pending:
                return self._call(self._pending.pop(0))
            said = " ".join(self._results)
            self._results = []
            return UserMessage(content=said)
        text = (last.content or "") if isinstance(last, AssistantMessage) else ""
        text = dialogue.retype(text)  # "pls send ur email", "Helo, how cn I help yuo"
        calls = self.device_calls(text)
        if calls:
            self.note_unrequested(calls, text)
            self._pending = calls[1:]
            return self._call(calls[0])
        return UserMessage(content=self.respond_text(text))

    def changes_state(self, tool: str) -> bool:
        """Whether a user tool changes state (reads are named ``check_*``, ``get_*``,
        ``can_*``, ``run_*``; domains may say otherwise)."""
        return not tool.startswith(("check_", "get_", "can_", "run_"))

    def names_tool(self, tool: str, text: str) -> bool:
        """Whether ``text`` names ``tool``: its literal name or one of its intent's keyword
        groups."""
        if re.search(rf"(?<![a-z0-9_]){re.escape(tool.lower())}(?![a-z0-9_])", text.lower()):
            return True
        return any(i.tool == tool and matches(text, i.keywords) for i in self.intents)

    def note_unrequested(self, calls: Sequence[ToolCall], text: str) -> None:
        """Count an ``unrequested_change`` for each state-changing call that the agent's
        message does not ask for in its own words: a tool it names nowhere once the phrases
        asking for a state to stay are left out ("keep data roaming on" names no change of
        roaming), i.e. one the user inferred (a pronoun resolved from an earlier message, a
        misread recap). A reading the user could get wrong, counted by an independent rule."""
        said = "\n".join(dialogue.strip_keep(dialogue.strip_markdown(line))
                         for line in dialogue.strip_reasoning(text).splitlines())
        for call in calls:
            if self.changes_state(call.name) and not self.names_tool(call.name, said):
                self._event("unrequested_change")

    def _call(self, call: ToolCall) -> UserMessage:
        return UserMessage(tool_calls=[call])

    def _describe_result(self, msg: ToolMessage) -> str:
        if msg.error:
            return f"I tried, but my phone says: {msg.content}"
        return f"Done. My phone shows: {msg.content}"

    # -- device actions -------------------------------------------------------------------

    def _script_args(self, tool: str) -> dict[str, Any] | None:
        for i, act in enumerate(self.script.device_actions):
            if act.tool == tool and i not in self._used_device:
                self._used_device.add(i)
                return dict(act.arguments)
        for act in self.script.device_actions:
            if act.tool == tool:
                return dict(act.arguments)
        return None

    def device_calls(self, text: str) -> list[ToolCall]:
        """The user tool calls an agent message asks for (in the order mentioned), read
        only in its requests and questions (not in statements, offers, or negated,
        conditional or past-tense requests)."""
        if not text or (not self.intents and not self.user_tool_names):
            return []
        text = " ".join(
            p.text for p in dialogue.read(text)
            if p.act in (Act.REQUEST, Act.QUESTION) and not (p.negated or p.conditional or p.past)
        )
        found: list[tuple[int, str, dict[str, Any]]] = []
        seen: set[str] = set()
        low = text.lower()
        # A literal tool name (with optional JSON arguments after it) is always understood.
        for name in sorted(self.user_tool_names):
            # Whole identifiers only: "toggle_wifi_calling" does not mention "toggle_wifi".
            m = re.search(rf"(?<![a-z0-9_]){re.escape(name.lower())}(?![a-z0-9_])", low)
            if m is not None:
                pos = m.start()
                args = self._script_args(name)
                if args is None:
                    args = _json_after(text, pos + len(name)) or {}
                found.append((pos, name, args))
                seen.add(name)
        for intent in self.intents:
            if intent.tool in seen or not matches(text, intent.keywords):
                continue
            args = self._script_args(intent.tool)
            if args is None:
                args = dict(intent.defaults)
                if intent.extract is not None:
                    args.update(intent.extract(text))
            pos = min((low.find(g[0]) for g in intent.keywords if g and g[0] in low), default=len(low))
            found.append((pos, intent.tool, args))
            seen.add(intent.tool)
        found.sort(key=lambda x: (x[0], x[1]))
        calls = []
        for _, name, args in found:
            self._n_calls += 1
            calls.append(ToolCall(id=f"user_call_{self._n_calls}", name=name, arguments=args, requestor="user"))
        return calls

    # -- text answers ---------------------------------------------------------------------

    def _pick(self, *variants: str) -> str:
        return variants[self.rng.randrange(len(variants))]

    def _current_request(self) -> str:
        return self.script.requests[min(self._next_request, len(self.script.requests)) - 1] if self._next_request else self.script.requests[0]

    def _identity_answer(self, text: str) -> str | None:
        ident = self.script.identity
        asked = [k for k, kw in _IDENTITY.items() if matches(text, kw)]
        if "phone" not in asked and _PHONE_ASK.search(text):
            asked.append("phone")  # "Which number is having the problem?"
        if "name" in asked and not re.search(r"\bname\b", _NOT_A_PERSON.sub(" ", text), re.I):
            asked.remove("name")  # "Settings > Access Point Names" asks for no name
        if _ADDRESS_CONTEXT.search(text):
            # "the new address, including street, city, state, zip code": the zip of the
            # address asked for, not the user's identity.
            asked = [k for k in asked if k not in ("zip", "name")]
        if not asked and _VERIFY_IDENTITY.search(text):
            # "I'll need to verify your identity": what identifies the customer.
            asked = ["email"] if "email" in ident else ["name", "zip", "phone"]
        if not asked:
            return None
        parts: list[str] = []
        if "email" in asked:
            if "email" in ident:
                parts.append(f"My email is {ident['email']}.")
            else:
                parts.append("I don't remember my email address.")
                asked += ["name", "zip"]
        if "user_id" in asked and "user_id" in ident:
            parts.append(f"My user id is {ident['user_id']}.")
        if "customer_id" in asked and "customer_id" in ident:
            parts.append(f"My customer id is {ident['customer_id']}.")
        if "name" in asked and ("first_name" in ident or "name" in ident):
            full = ident.get("name") or f"{ident.get('first_name', '')} {ident.get('last_name', '')}".strip()
            parts.append(f"My name is {full}.")
        if "zip" in asked and "zip" in ident:
            parts.append(f"My zip code is {ident['zip']}.")
        if "phone" in asked and "phone" in ident:
            parts.append(f"My phone number is {ident['phone']}.")
        if not parts:
            return None
        return " ".join(dict.fromkeys(parts))

    def _fact_answer(self, text: str) -> str | None:
        for rule in self.script.answers:
            if matches(text, rule.keywords):
                return rule.say
        for key, value in self.script.facts.items():
            topic = _FACT_TOPICS.get(key, ((key.replace("_", " "),),))
            if matches(text, topic) or (key == "location" and _IN_PLACE.search(text)):
                return _location_yes_no(text, value) if key == "location" else value
        return None

    def _done(self) -> str:
        """The agent says it is done: the next request, or stop."""
        self._fallbacks = 0
        if self._next_request < len(self.script.requests):
            req = self.script.requests[self._next_request]
            self._next_request += 1
            return req
        if self.script.end == "transfer" and not self._asked_transfer:
            # The customer came for a human: it asks for one before it gives up.
            self._asked_transfer = True
            return "I'd like to be transferred to a human agent, please."
        return self._stop()

    def respond_text(self, text: str) -> str:
        """The user's reply to an agent text message (no device action asked).

        The message is read segment by segment (:mod:`pytest_quantagent.env.dialogue`):
        statements (explanations, recaps, reports, empathy, conditionals, summaries) get no
        reaction; every question, request and offer is answered, together, in one reply
        (:meth:`answers`); a transfer notice anywhere ends with the transfer token."""
        parts = dialogue.read(text)
        if self.transferred(parts):
            return TRANSFER_TOKEN
        if not self._opened:
            self._opened = True
            self._next_request = 1
            return self.script.requests[0]
        said = self.answers(parts)
        if said:
            self._fallbacks = 0
            return join_answers(said)
        asks = [p for p in parts if p.asks]
        if any(p.act == Act.CLOSING for p in parts) or (
            not asks and (_DONE_SAID.search(text) or _COMPLETED.search(text) or _NOW_SET.search(text)
                          or self._told_answer(parts))
        ):
            return self._done()
        if any(p.act == Act.GREETING for p in parts):
            return self._current_request()
        if not dialogue.understood(parts) and dialogue.acknowledges(parts):
            # "That's all the info I need.", "Let me look into that.": nothing to answer.
            return self._wait(parts)
        return self._fallback(parts)

    def _told_answer(self, parts: Sequence[Segment]) -> bool:
        """A message that asks nothing and tells what the user's last request asked ("How
        much is left on my gift card?" to "Your gift card has $214.00 remaining."): a
        statement sharing a content word with the question and telling a value (an amount,
        an order status), none of it conditional, negated or what comes next."""
        request = self._current_request()
        if "?" not in request or not parts:
            return False
        told = [p for p in parts if p.act == Act.STATEMENT]
        if len(told) != len(parts) or any(p.conditional or p.negated or _NOT_YET.search(p.text) for p in told):
            return False
        return any(_TOLD_VALUE.search(p.text) and _shares_content(p.text, request) for p in told)

    def _wait(self, parts: Sequence[Segment]) -> str:
        """The agent is working or has what it needs: the user acknowledges and waits (no
        not-understood turn; a run of such turns still ends after ``max_fallbacks``)."""
        if self._fallbacks + 1 >= self.script.max_fallbacks:
            return self._fallback(parts)
        self._fallbacks += 1
        return self._pick("Okay, please go ahead.", "Okay, thank you. Please go ahead.", "Sure, go ahead.")

    def transferred(self, parts: Sequence[Segment]) -> bool:
        """The agent hands the user over now: a transfer notice, and nothing else in the
        message asks the user for anything ("Before transferring you, what's your name?" is
        answered, not left)."""
        return any(p.act == Act.TRANSFER for p in parts) and not any(
            p.asks and not p.negated and not _HOLD.search(p.text) for p in parts
        )

    def _stop(self) -> str:
        # A transfer scenario whose agent closes without transferring (after the user asked
        # for a human, see _done) stops: the user cannot transfer itself, and the episode's
        # missing transfer is the agent's failure, not something the user did.
        return f"{self.script.closing} {STOP_TOKEN}"

    def _fallback(self, parts: Sequence[Segment] = ()) -> str:
        """Nothing in the message could be acted on or answered. A question about something
        the scenario does not say gets "I don't know"; otherwise the user says it has not
        understood and asks what is wanted (counted as ``not_understood``), never
        restating its request or guessing; after ``max_fallbacks`` such turns in a row it
        leaves with ``###OUT-OF-SCOPE###``."""
        self._fallbacks += 1
        if self._fallbacks >= self.script.max_fallbacks:
            self._event("not_understood")
            # τ²-bench's token for "the scenario gives me nothing more to say".
            return f"I don't think I can get further with this. {OUT_OF_SCOPE_TOKEN}"
        return self.clarify(parts)

    def clarify(self, parts: Sequence[Segment]) -> str:
        """The reply to a message with nothing the user can act on (see :meth:`_fallback`)."""
        asks = [p for p in parts if p.asks and not (p.negated and p.act == Act.REQUEST)]
        request = self._current_request()
        said = " ".join(p.text for p in parts)
        if any(_ABOUT_THE_REQUEST.search(p.text) for p in asks):
            # "What would you like to do with it?", "Can you tell me more about what's
            # happening?": what the customer came for (an answer, not a fallback).
            self._fallbacks = 0
            return request
        questions = [p for p in asks if not dialogue.vague(p.text)]
        if questions and _shares_content(said, request):
            # "How long would you like the line suspended for?" when the request says it: the
            # sentence of the scenario that answers it, said as an answer, not "As I said: <the
            # whole request>".
            self._fallbacks = 0
            return _closest_sentence(" ".join(p.text for p in questions),
                                     [request, *self.script.facts.values()])
        if any(p.act == Act.QUESTION and not dialogue.vague(p.text) for p in asks):
            return self._pick("I'm not sure, I don't know that.", "Sorry, I don't know that.")
        if not _NOT_LANGUAGE.search(said):
            self._event("not_understood")
        if any(p.check or re.search(r"\bcheck\b", p.text, re.I) for p in asks):
            return "Sorry, what do you need me to check?"
        if asks:
            return "Sorry, I'm not sure what you need me to do. Could you say it more specifically?"
        return "Sorry, I'm not sure what you need from me. What should I do?"

    def answers(self, parts: Sequence[Segment]) -> list[str]:
        """What the user says to the segments that ask something, in the order asked:
        a yes/no to an offer (once), identity asked for, facts asked for."""
        said: list[str] = []
        offered = False
        first_reply = ""
        prev: Segment | None = None
        statements: list[str] = []
        for i, seg in enumerate(parts):
            before, prev = prev, seg
            if not seg.asks:
                statements.append(seg.text)
            if not seg.asks or (seg.negated and seg.act == Act.REQUEST):
                continue
            options = next((t for t in reversed(statements) if re.search(r"\bor\b", t)), "")
            listed = dialogue.options_before(list(parts), i)
            list_header = next((p.header for p in reversed(parts[:i]) if p.header), "") if listed else ""
            if listed and (dialogue.choice(seg.text) or not options):
                # "You have two options: - Upgrade ... - Refuel ... Which would you prefer?"
                options = " or ".join(t.strip(" .") for t in listed)
            told, statements = " ".join(statements[-2:]), []
            if seg.act == Act.OFFER:
                if told and before is not None and not before.asks and _REFERS_BACK.search(seg.text):
                    # "Another option is a plan change. Would you like me to do that?"
                    seg = replace(seg, text=f"{told} {seg.text}")
                if not offered:
                    offered = True
                    reply = first_reply = self.answer_offer(seg)
                    said.append(reply)
                    if not _ACTION_OFFER.search(seg.text) and not reply.lower().startswith("no"):
                        # "Would you be willing to refuel some data?": yes, and what the
                        # scenario says about it.
                        said.extend(r.say for r in self.script.answers if matches(seg.text, r.keywords))
                else:
                    # "Shall I proceed? Also, would you like me to cancel #W2 too?": every
                    # offer of the message gets its answer, not only the first.
                    more = self.answer_more_offer(seg, first_reply)
                    if more:
                        said.append(more)
                continue
            context = f"{seg.header} {seg.text}".strip()
            if seg.text.rstrip(" *").endswith(":") and _ASKS_FOR_LIST.search(seg.text):
                # "To pull up your account, I'll need one of the following: - your email, or
                # - your name and zip": what the list under it names is what is asked.
                context = " ".join([context, *(p.text for p in parts[i + 1:]
                                               if p.header and seg.text[:30] in p.header)])
            if before is not None and (not before.asks or before.negated) and _REFERS_BACK.search(seg.text):
                # "I see two payment methods ... Which one would you like to use?"
                context = f"{before.text} {context}"
            elif told and _confirms_details(seg.text):
                # "I've pulled up Tara Jensen, 555-0150. Is that the right number?": what is
                # to be confirmed was told just before.
                context = f"{told} {context}"
            # "Should I also update your pending orders, or only the default address?": the
            # alternative the customer wants, when the others are ones it does not.
            pick = self.choose(seg, options) if (seg.either_or and _ASKS_PREFERENCE.match(seg.text)) or (
                listed and dialogue.choice(seg.text)) else None
            if not pick and self.unknown_fact(seg):
                # "What's the IMEI of your phone?", "Please enter your SIM PIN": it says so,
                # rather than answering with the number it does know.
                said.append(self._pick("I'm not sure, I don't know that.", "Sorry, I don't know that."))
                continue
            got = [pick] if pick else self.answer_question(context, seg)
            if not got and options and dialogue.choice(seg.text):
                # "The refund can go to PayPal or a gift card. Which do you prefer?"; "I found
                # these Travel Mug variants: ... Which would you like?"
                got = self.answer_question(f"{list_header} {options} {seg.text}".strip(), seg)
            if not got:
                choice = self.choose(seg, options)
                got = [choice] if choice else []
            if not got and seg.either_or and seg.act == Act.QUESTION:
                # "Is the data completely not working, or just slow?": what the scenario says
                # of the alternative it speaks to.
                told_alt = self.scenario_alternative(seg.text)
                got = [told_alt] if told_alt else []
            said.extend(got)
        return said

    def unknown_fact(self, seg: Segment) -> bool:
        """Whether a question or request asks for a fact the customer cannot know and its
        scenario does not tell it (:func:`unknowable`)."""
        if seg.act not in (Act.QUESTION, Act.REQUEST):
            return False
        scen = " ".join([*self.script.requests, *self.script.facts.values(), *self.script.identity.values(),
                         *(r.say for r in self.script.answers)])
        return unknowable(seg.text, scen)

    def scenario_alternative(self, text: str) -> str | None:
        """For an either/or question, the scenario's sentence about the one alternative that
        shares content words with it (None when none or several do)."""
        text = text.rsplit(":", 1)[-1]
        alts = [a for a in _ALTERNATIVE.split(text) if a.strip(" ,.?!")]
        if len(alts) < 2:
            return None
        scen = [*self.script.requests, *self.script.facts.values()]
        stems = {w[:5] for t in scen for w in _CONTENT.findall(t.lower()) if w not in dialogue.EMPTY_WORDS}
        own = [len({w[:5] for w in _CONTENT.findall(a.lower()) if w not in dialogue.EMPTY_WORDS}
                   - {w[:5] for b in alts if b is not a for w in _CONTENT.findall(b.lower())} & stems)
               for a in alts]
        if sum(1 for n in own if n) != 1:
            return None
        best = alts[own.index(max(own))]
        return _closest_sentence(best, scen, shortest=False)

    def answer_more_offer(self, seg: Segment, first: str) -> str | None:
        """The answer to a further offer of a message whose first offer got ``first``: a
        decline when the customer accepted the first and does not want this one ("Yes, I
        confirm. But not the other part, please: just what I asked for."); nothing when the
        answer is the same as the first's."""
        agreed = not first.lower().startswith(("no", "i don't", "sorry"))
        if agreed and not self.wants(seg.text):
            return "But not the other part, please: just what I asked for, nothing else."
        return None

    def offer_wanted(self, text: str) -> bool:
        """Whether the customer wants what an offer or an option proposes (the base user
        wants everything; domains decline what their scenario does not ask for)."""
        return True

    def wants(self, text: str) -> bool:
        """:meth:`offer_wanted`, and a transfer only when the scenario ends in one."""
        if _TRANSFER_OFFER.search(text) and self.script.end != "transfer":
            return False
        return self.offer_wanted(text)

    def choose(self, seg: Segment, told: str = "") -> str | None:
        """The customer's pick in a choice between alternatives ("Do you want me to keep
        troubleshooting, or would you prefer a technician?"; "I can add data or move you to
        a bigger plan. Which would you prefer?"): the one alternative it wants when the
        others are ones it does not (None when that does not single one out)."""
        text = seg.text if seg.either_or else ""
        if not text and told and dialogue.choice(seg.text) and re.search(r"\bor\b", told):
            text = told
        if not text:
            return None
        alts = [a.strip(" ,.?!") for a in _ALTERNATIVE.split(text) if a.strip(" ,.?!")]
        if len(alts) < 2:
            return None
        wanted = [a for a in alts if self.wants(a)]
        if len(wanted) != 1 or len(wanted) == len(alts):
            return None
        what = _OPTION_LEAD.sub("", wanted[0]).strip(" ,.?!")
        what = re.sub(r"\byou\b", "me", re.sub(r"\byour\b", "my", what))
        if not what:
            return None
        what = what[0].lower() + what[1:] if what[:2] != what[:2].upper() else what
        if re.match(r"(?:only|just|the|a|an|my|both|all|one|some)\b", what, re.I):
            return f"I'd prefer {what}, please."
        return f"I'd prefer to {what}, please."

    def answer_offer(self, seg: Segment) -> str:
        """Yes or no to an offer or confirmation request, as the scenario says."""
        if _TRANSFER_OFFER.search(seg.text):
            if self.script.end == "transfer":
                return "Yes, please transfer me to a human agent."
            agree = False
        else:
            agree = self.script.confirm
        if agree and (m := _YOUR_ACTION.match(seg.text.strip())) and not _JUST_GO_ON.match(m.group(1)):
            # "Do you want to pay the overdue bill today?": the customer does it, and says so.
            what = re.sub(r"\byour\b", "my", re.sub(r"\byou\b", "me", m.group(1)))
            return f"Yes, I'd like to {what}."
        if agree:
            return self._pick(
                "Yes, please go ahead.", "Yes, I confirm.", "Yes, that's correct. Please proceed."
            )
        return self.script.refusal

    def answer_question(self, text: str, seg: Segment) -> list[str]:
        """Identity and facts one question or request asks for (none when it asks for
        nothing the scenario knows)."""
        confirms = _confirms_details(seg.text)
        if confirms:
            # "I have Tara Jensen on 555-0150. Is that the right number?": each identity detail
            # told is checked against the customer's own; a wrong one is corrected.
            fix = self.identity_mismatch(text)
            if fix is not None:
                return [fix]
        if _YES_NO_QUESTION.search(seg.text) and self._mentions_identity(text if confirms else seg.text):
            return ["Yes, that's right."]  # "Is the number on the account 555-0106?"
        out: list[str] = []
        ident = self._identity_answer(text)
        if ident is not None:
            out.append(ident)
        fact = self._fact_answer(text)
        if fact is not None and fact not in out:
            out.append(fact)
        return out

    def identity_mismatch(self, text: str) -> str | None:
        """The customer's correction of a phone number, date of birth, zip code or email that
        ``text`` tells and that is not its own (None when every one told is)."""
        plain = dialogue.strip_markdown(text)
        dob = next((r.say for r in self.script.answers if any("birth" in " ".join(g) for g in r.keywords)), "")
        ident = self.script.identity
        kinds = (
            (_PHONE_DETAIL, ident.get("phone", ""), f"My phone number is {ident.get('phone', '')}."),
            (_DATE_DETAIL, dob, dob),
            (_ZIP_DETAIL, ident.get("zip", ""), f"My zip code is {ident.get('zip', '')}."),
            (_EMAIL_DETAIL, ident.get("email", "").lower(), f"My email is {ident.get('email', '')}."),
        )
        for pattern, mine, say in kinds:
            own = set(pattern.findall(mine))
            told = set(pattern.findall(plain.lower() if pattern is _EMAIL_DETAIL else plain))
            if own and told and not own & told:
                return f"No, that's not right. {say}"
        return None

    def _mentions_identity(self, text: str) -> bool:
        low = text.lower()
        return any(v and v.lower() in low for v in self.script.identity.values())


# Facts a customer is never told and cannot read off its own phone without a tool: the IMEI, a
# serial or model number, an app's version, a tracking or reference number, a card's or its id,
# a SIM PIN/PUK, the data used so far. Each with the words the scenario would use if it did know.
_UNKNOWABLE = (
    (re.compile(r"\bimei\b", re.I), r"\bimei\b"),
    (re.compile(r"\b(?:serial|model) (?:number|no)\b", re.I), r"\b(?:serial|model)\b"),
    (re.compile(r"\b(?:app|software|firmware|android|ios|os) version\b|\bversion\b[^?.]*\b(?:running|installed|"
                r"app|software|firmware)\b", re.I), r"\bversion\b"),
    (re.compile(r"\b(?:tracking|reference|confirmation|receipt|ticket|case) (?:number|id|code|no)\b", re.I),
     r"\b(?:tracking|reference|confirmation|receipt|ticket)\b"),
    (re.compile(r"\b(?:its|the card's|card|gift card|gift card's) (?:id|number)\b", re.I), r"\bgift_card_\w+|\bcard (?:id|number)\b"),
    (re.compile(r"\b(?:sim )?(?:pin|puk)(?: code| number)?\b", re.I), r"\b(?:pin|puk)\b"),
    (re.compile(r"\bhow (?:many|much)\b[^?.]*\b(?:used|use so far|gone through|get through|got through|consumed|"
                r"burned through)\b|\b(?:data )?usage (?:so far|this month|last month)\b", re.I),
     r"\b(?:used|usage)\b"),
)


def unknowable(text: str, scenario: str) -> bool:
    """Whether a question or request asks for a fact the customer cannot know (see
    :data:`_UNKNOWABLE`) and its scenario does not tell it."""
    return any(asked.search(text) and not re.search(known, scenario, re.I) for asked, known in _UNKNOWABLE)


_ABOUT_THE_REQUEST = re.compile(
    r"\bwhat (?:would|do|can|did) you (?:\w+ )?(?:like|want|need|wish|hope)(?: me)? to (?:do|get|achieve|"
    r"change|have)\b|\bwhat (?:do|would) you (?:need|want)\b|\bhow (?:can|may) i (?:help|assist)\b|"
    r"\bwhat (?:brings you|can i do)\b|\bwhat(?:'s| is| seems to be) the (?:issue|problem|matter)\b|"
    r"\bwhat(?:'s| is) (?:going on|happening|wrong)\b|\bwhat seems to be\b|\btell me (?:a bit |a little )?"
    r"more\b|\b(?:describe|explain)\b[^?]*\b(?:issue|problem|happening|request)\b|"
    r"\b(?:which|what) order (?:would|do) you (?:like|want|need)\b|\bwhat (?:kind of )?(?:help|assistance)\b",
    re.IGNORECASE,
)
# "A, or B": the alternatives of a choice; what leads an option in ("I can either",
# "would you prefer to") is not the option.
_ALTERNATIVE = re.compile(r",?\s+\bor\b\s+(?:would you (?:rather|prefer|like)(?: to| me to)?\s+|do you want(?: me)? to\s+)?",
                          re.IGNORECASE)
_OPTION_LEAD = re.compile(
    r"^(?:(?:so|okay|ok|alright),?\s+)?(?:(?:i|we) (?:can|could)(?: also)?(?: either)?|either|"
    r"(?:do|would) you (?:want|like|prefer|rather)(?: me| us)?(?: to)?|would you rather|"
    r"(?:should|shall|can) (?:i|we)|you (?:can|could))\s+(?:either\s+)?",
    re.IGNORECASE,
)
# An offer of an action the agent would take ("would you like me to", "shall I").
_ACTION_OFFER = re.compile(r"\b(?:me|us) to\b|\b(?:shall|should|can|may) (?:i|we)\b|\bi(?:'ll| will)\b",
                           re.IGNORECASE)
# A question that asks which of its alternatives the customer wants ("Would you like me to
# also update your pending orders, or only the default address?").
_ASKS_PREFERENCE = re.compile(r"^(?:so,? |and |okay,? |ok,? )?(?:would|do|shall|should|can|could|may) "
                              r"(?:you|i|we)\b", re.IGNORECASE)
# A request whose list says what to give ("I'll need one of the following:"), not one to
# review ("let me confirm the details:").
_ASKS_FOR_LIST = re.compile(r"^(?!.*\b(?:confirm|review|double-check|summary)\b).*\b(?:need|provide|share|send|"
                            r"give|tell)\b", re.IGNORECASE)
_HOLD = re.compile(r"\b(?:hold|wait|stay on the line|one moment|bear with)\b", re.IGNORECASE)
_CONTENT = re.compile(r"[a-z][a-z0-9-]{3,}")


def _shares_content(question: str, request: str) -> bool:
    """Whether a question is about something the request says (a content word in common, by
    its first five letters: "suspended" and "suspend")."""
    stems = {w[:5] for w in _CONTENT.findall(request.lower()) if w not in dialogue.EMPTY_WORDS}
    return any(
        w[:5] in stems for w in _CONTENT.findall(question.lower()) if w not in dialogue.EMPTY_WORDS
    )


# "Are you in France right now?": a question about where the customer is.
_IN_PLACE = re.compile(r"\b(?i:are|were) you (?i:currently |still |now |right now )?(?i:in|at) (?:the )?[A-Z][a-z]")
_ASKS_ABROAD = re.compile(r"\b(?:abroad|travel\w*|overseas|outside (?:of )?(?:the|your)|out of the country|"
                          r"left (?:the|your (?:home )?) ?country|"
                          r"another country|foreign)\b", re.IGNORECASE)
_ASKS_HOME = re.compile(r"\b(?:in the (?:us|u\.s\.?|usa|united states)|at home|(?:back )?home\b|"
                        r"in your home country|inside the (?:us|country))", re.IGNORECASE)
_YES_NO_LEAD = re.compile(r"(?:^|[:,—–-]\s*)(?:and |so |also )?(?:are|is|were|do|did|have) (?:you|your)\b",
                          re.IGNORECASE)


def _closest_sentence(question: str, texts: Sequence[str], shortest: bool = True) -> str:
    """What the scenario says about ``question``: the sentences of ``texts`` sharing two or
    more content words with it (by their first five letters), in order ("I have an order
    sent to Texas ... I don't remember the order number." to "the order number of the order
    that went to Texas?"); else the one sharing the most (of equals the shortest, else the
    first); the first text when none shares any."""
    stems = {w[:5] for w in _CONTENT.findall(question.lower()) if w not in dialogue.EMPTY_WORDS}
    best, score = texts[0], 0
    close: list[str] = []
    for t in texts:
        for sent in re.split(r"(?<=[.!?])\s+", t):
            n = len(stems & {w[:5] for w in _CONTENT.findall(sent.lower()) if w not in dialogue.EMPTY_WORDS})
            if n >= 2 and sent not in close:
                close.append(sent)
            if n > score or (shortest and n == score and n and len(sent) < len(best)):
                best, score = sent, n
    return " ".join(close) if len(close) > 1 else best


def _location_yes_no(question: str, fact: str) -> str:
    """The location fact, led by yes or no when the question asks it as yes/no ("Are you in
    the United States right now?" to a customer abroad in France: "No, I'm currently abroad
    in France.")."""
    if not _YES_NO_LEAD.search(question.strip()) or re.search(r"\bor\b", question):
        return fact  # "Where are you?", "In the US or abroad?": the place only
    abroad = "abroad" in fact.lower()
    place = re.search(r"\b(?:in|to) ([A-Z][a-z]+(?: [A-Z][a-z]+)*)\b", question)
    named = place.group(1) if place and place.group(1) not in ("The", "United States") else None
    if named is not None and not re.search(r"^(?:US|USA|U)$", named):
        yes = named.lower() in fact.lower()
    elif _ASKS_ABROAD.search(question):
        yes = abroad
    elif _ASKS_HOME.search(question):
        yes = not abroad
    else:
        return fact
    return f"{'Yes' if yes else 'No'}, {fact[0].lower()}{fact[1:]}" if not fact.startswith("I") else (
        f"{'Yes' if yes else 'No'}, {fact}")


def join_answers(parts: Sequence[str]) -> str:
    """One reply from several answers, each sentence said once ("My name is X." answered
    for two list items of the same question is said once)."""
    out: list[str] = []
    for part in parts:
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", part.strip()):
            if sentence and sentence not in out:
                out.append(sentence)
    return " ".join(out)


# An offer of something the customer does itself ("Would you like to pay the bill now?").
_YOUR_ACTION = re.compile(r"^(?:so,? |and |okay,? |ok,? )?(?:do|would) you (?:still |also )?(?:want|like|wish) to "
                          r"([a-z][^?]{2,80}?)(?: today| now| right now)?\?$", re.IGNORECASE)
_JUST_GO_ON = re.compile(r"(?:proceed|go ahead|continue|confirm|move forward|do that|do this|do it)\b", re.IGNORECASE)
_TRANSFER_OFFER = re.compile(r"\btransfer|\bhuman\b|\blive agent\b", re.IGNORECASE)
# "Is that right / correct?", "Can you confirm that's correct?", "Does that match?"
_CONFIRM_DETAILS = re.compile(r"\b(?:right|correct|accurate|match(?:es)?)\b(?! now| away| here| there| after| before)|"
                              # "Can you confirm that's you?", "Is that yours?"
                              r"\b(?:that(?:'s| is)|is (?:that|this|it)) (?:you|yours|your account)\s*\?",
                              re.IGNORECASE)
_EMAIL_DETAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_PHONE_DETAIL = re.compile(r"\b\d{3}-\d{3,4}(?:-\d{4})?\b")
_DATE_DETAIL = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_ZIP_DETAIL = re.compile(r"(?<![\d-])\d{5}(?![\d-])")


def _confirms_details(text: str) -> bool:
    """A yes/no question whether something told is right ("Is that correct?", "Could you
    confirm that's right?")."""
    return bool(_CONFIRM_DETAILS.search(text)) and bool(
        _YES_NO_QUESTION.search(text) or re.match(r"^\W*(?:could|would|can) you (?:please )?confirm\b", text, re.I))


_YES_NO_QUESTION = re.compile(
    r"(?:^|:\s*)(?:\w+[,:]?\s+){0,4}?(?:is|are|was|do|does|did|have|has|can|will)\b", re.IGNORECASE
)
_REFERS_BACK = re.compile(
    r"^(?:do you |would you |are you |would you be )?(?:want|fancy|like|interested|keen)\b[^?]{0,12}\?$|\bwhich one\b|\bthe (?:new|other|same|old) one\b|\b(?:it|them|those|these|one of them)\b|"
    r"\bthat (?:code|one|number|item|order|card|address|method)\b|\bdo (?:that|this)\b|"
    r"\blike (?:that|this)\b",
    re.IGNORECASE,
)


def _json_after(text: str, start: int) -> dict[str, Any] | None:
    """A JSON object following position ``start`` in ``text`` (the oracle's default form)."""
    brace = text.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                try:
                    val = json.loads(text[brace : i + 1])
                except json.JSONDecodeError:
                    return None
                return val if isinstance(val, dict) else None
    return None
