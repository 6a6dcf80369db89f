"""The retail scripted user: the engine's :class:`ScriptedUser` plus retail-specific reading.

Retail agents ask compound questions ("which item, and which payment method for the
difference?") and the generic keyword rules can mistake them for a confirmation request
(the word "method" starts with "me" as in "would you like me to"). This user checks
whole-word patterns first:

1. a real confirmation request ("do you confirm", "shall I proceed", "yes/no"; not
   "could you confirm which item ...") or a
   closing question ("anything else?") → the base user (it confirms or refuses as
   scripted, or moves on / stops);
2. identity questions → the base user;
3. in a task whose correct outcome is a refusal, an agent message that refuses → accept
   and stop;
4. questions about the order id, the items/options, the payment method, the address or the
   reason → every matching fact of the script, in that order; other questions → the
   script's custom answers, else the request restated (never a confirmation);
5. anything else → the base user.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from pytest_quantagent.env.messages import STOP_TOKEN
from pytest_quantagent.env.user import DeviceIntent, ScriptedUser, UserScript

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
            r"|\bitems?\b|\boptions?\b|\bexchange (it )?for\b",
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
    ("address", re.compile(r"(?<!email )(?<!e-mail )\baddress\b", re.IGNORECASE)),
    ("reason", re.compile(r"\breason\b|\bwhy\b", re.IGNORECASE)),
)
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
    r"does not have enough|unfortunately)\b",
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

    def respond_text(self, text: str) -> str:
        confirming = bool(_STRONG_CONFIRM.search(text)) or (
            bool(_CONFIRM.search(text)) and not _CONFIRM_QUESTION.search(text)
        )
        if (
            not self._opened
            or confirming
            or _DONE.search(text)
            or _GREETING.search(text)
        ):
            return super().respond_text(text)
        if self.expect_refusal and _REFUSAL.search(text):
            return f"I understand. {self.script.closing} {STOP_TOKEN}"
        asking = bool(_ASKING.search(text))
        if asking and _IDENTITY.search(text):
            ident = self._identity_answer(text)
            if ident is not None:
                self._fallbacks = 0
                return ident
        if asking:
            facts = self._retail_facts(text)
            if facts is not None:
                self._fallbacks = 0
                return facts
            custom = self._fact_answer(text)
            if custom is not None:
                self._fallbacks = 0
                return custom
            # A question the script cannot answer: restate the request rather than let the
            # generic rules read it as a confirmation request.
            self._fallbacks += 1
            if self._fallbacks >= self.script.max_fallbacks:
                return self._stop()
            return f"I'm not sure. What I need is: {self._current_request()}"
        return super().respond_text(text)
