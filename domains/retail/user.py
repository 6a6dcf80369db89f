"""The retail scripted user: the engine's :class:`ScriptedUser` plus retail-specific reading.

The message is read segment by segment (:mod:`pytest_quantagent.env.dialogue`), so a
list-formatted question ("Please provide:" then bullets) is a question, a recap is not,
and every question of the message is answered in one reply:

1. the opening, a transfer notice or a greeting → the base user;
2. in a task whose correct outcome is a refusal, an agent message that refuses (and offers
   nothing) → accept and stop;
3. an offer or confirmation request ("do you confirm", "shall I proceed", "yes/no"; not
   "could you confirm which item ...") → yes or the refusal, as scripted;
4. each question or request: identity when identity is asked (an address asked "including
   street, city, state, zip code" asks for the new address, not the user's zip), every
   fact of the script it is about (order id, items/options, payment method, address,
   reason; either/or questions included), else the script's custom answers;
5. nothing answered: a closing question or a plain statement → the base user (next
   request, stop, or restate); an unanswerable question → the request restated (never a
   confirmation).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from pytest_quantagent.env import dialogue
from pytest_quantagent.env.dialogue import Act, Segment
from pytest_quantagent.env.user import (
    _YES_NO_QUESTION,
    DeviceIntent,
    ScriptedUser,
    UserScript,
    join_answers,
)
from pytest_quantagent.vocab.messages import STOP_TOKEN

_CONFIRM = re.compile(
    r"\b(do you confirm|can you confirm|could you confirm|please confirm|to confirm|"
    r"confirm (that|this|the|if|whether)|"
    r"(shall|should|may|can) i (go ahead|proceed|continue|submit|process|place|cancel|return|"
    r"exchange|modify|change|update|make)|"
    r"would you like me to|do you want me to|want me to proceed|proceed\?|like to proceed|"
    r"go ahead\?|yes/no|yes or no|\(yes\)|is (that|this) correct|ok to|okay to)",
    re.IGNORECASE,
)
_STRONG_CONFIRM = re.compile(
    r"\b(do you confirm|yes/no|yes or no|\(yes\)|shall i proceed|should i proceed|"
    r"would you like me to proceed|do you want me to proceed|is (that|this) correct)",
    re.IGNORECASE,
)
_CONFIRM_QUESTION = re.compile(
    r"\bconfirm (which|what|your|the (items?|order( id)?|payment method|new address|reason))\b",
    re.IGNORECASE,
)
_GREETING = re.compile(r"\bhow (can|may) i (help|assist)\b", re.IGNORECASE)
_ASKING = re.compile(
    r"\?|\b(please (provide|tell|share|let me know|specify|confirm)|could you|can you|"
    r"would you|let me know|which|what)\b",
    re.IGNORECASE,
)
_TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("order_id", re.compile(r"\border (id|number)\b|\bwhich order\b", re.IGNORECASE)),
    (
        "item",
        re.compile(
            r"\b(which|what) (items?|products?|options?|colou?r|size|variant)\b"
            r"|\bitems?\b|\boptions?\b|\bexchange (it )?for\b"
            r"|\b(?:different|another|other) (?:colou?r|size|option|variant|model)s?\b",
            re.IGNORECASE,
        ),
    ),
    (
        "payment_method",
        re.compile(
            r"\bpayment( method)?s?\b|\bpay\b|\brefund(ed)?\b|\bcard\b|\bpaypal\b|\bprice difference\b",
            re.IGNORECASE,
        ),
    ),
    (
        "address",
        re.compile(
            r"(?<!email )(?<!e-mail )\baddress\b|\bwhere should (?:we|i) (?:ship|send|deliver)\b|"
            r"\b(?:street|city)\b.*\b(?:state|zip|country)\b",
            re.IGNORECASE,
        ),
    ),
    ("reason", re.compile(r"\breason\b|\bwhy\b", re.IGNORECASE)),
)
_TOPICS_BY_NAME = dict(_TOPICS)
# Identity words that are never part of an address ("zip code" and "name" can be).
_IDENTITY_NOT_ADDRESS = re.compile(r"\b(e-?mail|user id|your (full )?name|first name|last name)\b", re.I)
_IDENTITY = re.compile(
    r"\b(e-?mail|zip( code)?|postal code|your (full )?name|first name|last name|user id)\b",
    re.IGNORECASE,
)
_DONE = re.compile(
    r"\b(anything else|something else|further assistance|anything more|all set|have a (great|nice) day)\b",
    re.IGNORECASE,
)
_REFUSAL = re.compile(
    r"\b(cannot|can't|can not|unable|not able|not possible|isn't possible|not eligible|"
    r"not allowed|only (pending|delivered)|insufficient|not enough|doesn't have enough|"
    r"does not have enough|unfortunately|can no longer|no longer be|won't be able|isn't possible)\b",
    re.IGNORECASE,
)


class RetailUser(ScriptedUser):
    """Scripted retail customer (see the module docstring for the rules).

    Args:
        script: The scenario.
        seed: Seeds the choice among equivalent phrasings.
        expect_refusal: The task's correct outcome is the agent refusing the request; an
            agent refusal then ends the conversation instead of a restated request.
    """

    def __init__(
        self,
        script: UserScript,
        *,
        seed: int = 0,
        intents: Sequence[DeviceIntent] = (),
        user_tool_names: Iterable[str] = (),
        expect_refusal: bool = False,
    ) -> None:
        super().__init__(script, seed=seed, intents=intents, user_tool_names=user_tool_names)
        self.expect_refusal = expect_refusal

    def _retail_facts(self, text: str) -> str | None:
        said: list[str] = []
        for key, pattern in _TOPICS:
            value = self.script.facts.get(key)
            if value and pattern.search(text) and value not in said:
                said.append(value)
        return " ".join(said) if said else None

    def answer_question(self, text: str, seg: Segment) -> list[str]:
        """Identity when identity is asked (and not just given), else every fact of the
        script the question is about, in the order of :data:`_TOPICS`; then custom answers."""
        if _YES_NO_QUESTION.search(seg.text) and self._mentions_identity(seg.text):
            return ["Yes, that's right."]
        out: list[str] = []
        address = bool(_TOPICS_BY_NAME["address"].search(text))
        if _IDENTITY.search(text) and not (address and not _IDENTITY_NOT_ADDRESS.search(text)):
            ident = self._identity_answer(text)
            if ident is not None:
                out.append(ident)
        facts = self._retail_facts(text)
        if facts is not None:
            out.append(facts)
        if not out:
            custom = self._fact_answer(text)
            if custom is not None:
                out.append(custom)
        return out

    def respond_text(self, text: str) -> str:
        parts = dialogue.read(text)
        if not self._opened or any(p.act in (Act.TRANSFER, Act.GREETING) for p in parts):
            return super().respond_text(text)
        asks = [p for p in parts if p.asks and not p.negated]
        if self.expect_refusal and _REFUSAL.search(text) and not any(
            p.act == Act.OFFER for p in asks
        ):
            return f"I understand. {self.script.closing} {STOP_TOKEN}"
        said = self.answers(parts)
        if said:
            self._fallbacks = 0
            return join_answers(said)
        if any(p.act == Act.CLOSING for p in parts) or not asks:
            return super().respond_text(text)
        # A question the script cannot answer: restate the request rather than guess.
        self._fallbacks += 1
        if self._fallbacks >= self.script.max_fallbacks:
            return self._stop()
        return f"I'm not sure. What I need is: {self._current_request()}"
