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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from pytest_quantagent.env import dialogue
from pytest_quantagent.env.dialogue import Act, Segment
from pytest_quantagent.env.scenario_text import content_words, refusal_matches, same_word
from pytest_quantagent.env.user import (
    _YES_NO_QUESTION,
    DeviceIntent,
    ScriptedUser,
    UserScript,
    _confirms_details,
    join_answers,
    matches,
)
from pytest_quantagent.vocab.messages import OUT_OF_SCOPE_TOKEN, STOP_TOKEN

_CONFIRM = re.compile(
    r"\b(do you confirm|can you confirm|could you confirm|please confirm|to confirm|"
    r"confirm (that|this|the|if|whether)|"
    r"(shall|should|may|can) i (go ahead|proceed|continue|submit|process|place|cancel|return|"
    r"exchange|modify|change|update|make)|"
    r"would you like me to|do you want me to|want me to proceed|proceed\?|like to proceed|"
    r"go ahead\?|yes/no|yes or no|\(yes\)|is (that|this) correct|ok to|okay to|"
    r"(?:reply|respond|answer|type|say) (?:with )?[\"'“]?yes\b)",
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
            r"|\bitems?\b|\boptions?\b|\bexchange\b[^.?!]{0,25}\bfor\b|\bwhat (?:would|do) you (?:like|want) to "
            r"(?:exchange|return|modify|change)\b"
            r"|\b(?:different|another|other) (?:colou?r|size|option|variant|model)s?\b"
            r"|\b(?:size|colou?r|material|capacity|power source|style|model)s? (?:would|do) you\b"
            r"|\bwhat kind of\b|\bwhich \w+(?: \w+)? (?:size|colou?r|model|version|variant)\b"
            r"|\bvariants?\b|\bversions\b",
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
    r"\b(e-?mail|zip( code)?|postal code|your (full )?name|first name|last name|user id|identity)\b|"
    r"\b(?:verify|authenticate|identify) (?:you|yourself)\b",
    re.IGNORECASE,
)
_DONE = re.compile(
    r"\b(anything else|something else|further assistance|anything more|all set|have a (great|nice) day)\b",
    re.IGNORECASE,
)
_REFUSAL = re.compile(
    r"\b(cannot|can't|can not|unable|not able|not possible|isn't possible|not eligible|"
    r"not allowed|only (pending|delivered)|insufficient|not enough|isn't enough|is not enough|"
    r"doesn't cover|does not cover|won't cover|can only (?:go|be)|only be (?:refunded|returned|sent)|"
    r"(?:has|have|must|needs?) to (?:go|be refunded|be returned) (?:back )?to the original|out of stock|"
    r"(?:isn't|is not|aren't|are not) supported|not supported|(?:isn't|is not|aren't|are not) eligible|"
    r"(?:isn't|is not|aren't|are not) available|no longer available|out of stock|doesn't have enough|"
    r"does not have enough|unfortunately|can no longer|no longer be|won't be able|isn't possible)\b",
    re.IGNORECASE,
)


# What an offer proposes to do, by family; an offer naming a family the customer's goal does
# not have is declined ("Would you like me to set up a return instead?" to a customer who
# wants a cancellation). "Instead of X" names what is *not* offered and is left out first.
_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cancel", re.compile(r"\bcancel", re.I)),
    ("return", re.compile(r"\breturn", re.I)),
    ("exchange", re.compile(r"\bexchang", re.I)),
    ("refund", re.compile(r"\brefund", re.I)),
    ("items", re.compile(r"\b(?:modify|change|swap|replace|switch)\b[^.?!]{0,40}\b(?:items?|products?|"
                         r"size|colou?r|options?|variant|model)\b", re.I)),
    ("user_address", re.compile(r"\bdefault (?:shipping )?address\b|\baddress (?:on|of|in|for) (?:your|the) "
                                r"(?:account|profile)\b|\baccount(?:'s)? (?:default )?address\b|"
                                r"\bprofile address\b|\b(?:your|the|my) (?:profile|account) only\b|"
                                r"\b(?:to|on|for) (?:your|the|my) profile\b", re.I)),
    ("order_address", re.compile(r"\bapply (?:it|this|that|the (?:new )?address) to\b[^.?!]*\borders?\b|"
                                 r"\b(?:shipping|delivery) address\b(?! (?:on|of) (?:your|the) "
                                 r"(?:account|profile))|\baddress (?:of|on|for) (?:the|this|that|your|"
                                 r"these|those) (?:pending )?orders?\b|\b(?:open|pending|existing|current|"
                                 r"upcoming) orders\b", re.I)),
    # "set this Visa as the default payment method for all your future orders": more than the order.
    ("default_payment", re.compile(r"\bdefault (?:payment|card|method)\b|\b(?:for|on) all (?:of )?(?:your )?"
                                   r"(?:future|upcoming) (?:orders|purchases)\b", re.I)),
    ("payment", re.compile(r"\b(?:pay|payment method|payment)\b", re.I)),
    ("transfer", re.compile(r"\btransfer|\bhuman\b|\blive agent\b|\bspecialist\b|"
                            r"\brepresentative\b", re.I)),
    ("reship", re.compile(r"\bre-?ship|\bre-?send|\bsend (?:you )?(?:a )?(?:new|replacement)\b|"
                          r"\breplacement (?:order|item|unit)\b", re.I)),
    ("purchase", re.compile(r"\bplace (?:a |an )?(?:new |separate |second )?order\b|\bnew order\b|\bpurchase\b|"
                            r"\bbuy\b|\border (?:a|another|one more)\b", re.I)),
    ("extra", re.compile(r"\bupgrade|\bexpress\b|\bexpedite|\bwarranty\b|\bprotection plan\b|"
                         r"\bstore credit\b|\badd (?:more )?(?:funds|money|credit|balance)\b|\breload\b|"
                         r"\brewards? program\b|"
                         r"\bsubscri|\bnewsletter\b|\bsign (?:you )?up\b|\bmembership\b|"
                         r"\binsurance\b|\breceipt\b", re.I)),
)
# A family the goal "has" through another ("refund" comes with a cancellation or a return).
_IMPLIED = {
    "refund": {"cancel", "return", "refund"},
    "items": {"items", "exchange"},
    "exchange": {"exchange", "items"},
}
_MORE_THAN_ASKED = re.compile(
    r"\b(?:the other|any other|other|the rest of the|remaining|more|additional)(?: \w+)? (?:items?|products?|orders?)\b|"
    r"\banything else\b|\ball (?:of )?the (?:other )?items\b",
    re.I,
)
# "There's no clicky keyboard available", "we don't have it in blue": what the customer wanted
# is not there.
_NOT_THERE = re.compile(r"\bthere(?:'s| is| are) no\b|\bno (?:\w+[ ,-]+){0,4}(?:is |are )?(?:available|in stock|left)\b|"
                        r"\bwe (?:don't|do not) have\b|\b(?:couldn't|could not|can't|cannot) (?:find|locate)\b",
                        re.I)
# An offer of more than the action under way ("Would you also like to return the boots?",
# "while I'm at it, shall I cancel #W2 too?").
_ALSO = re.compile(r"\balso\b|\bas well\b|\btoo\b|\bwhile (?:i'm|i am|we're) at it\b|\bin addition\b|"
                   r"\badditionally\b|\bsince you (?:also )?have\b", re.I)
# A question asking whether an alternative will do ("Would that work for you instead?").
_WILL_IT_DO = re.compile(r"^\W*(?:is it |would it be )?(?:ok|okay|alright|fine) (?:to|if i) \w+|\bwould (?:the|that|this|it)\b[^?]{0,60}\bwork\b|\b(?:would|will|does|could) (?:that|this|it|one of these|either)(?: one)? (?:work|do|suit you|be "
                         r"(?:ok|okay|fine|alright|acceptable))\b|\b(?:is|would) (?:that|this)(?: one)? (?:be )?(?:ok|okay|"
                         r"fine|alright|acceptable)\b|\bhow about (?:that|this)\b", re.I)
# A suite, unit or apartment number of an address ("Suite 641", "Apt 2B").
_UNIT = re.compile(r"\b(?:suite|ste\.?|unit|apt\.?|apartment|#)\s*(\w+)", re.I)
_KEPT = re.compile(r"\bkeep\b[^.?!]*?\b(?:as (?:they|it) (?:are|is)|unchanged|the same)\b", re.I)
_DO_NOT_WANT = re.compile(r"\b(?:do not|don't|never) (?:want|wish|need) to (?:cancel|return|exchange|modify|change|update)\b", re.I)
_WHOLE_ORDER = re.compile(r"\b(?:entire|whole|full) order\b", re.I)
_CANCEL_ITEM_FROM = re.compile(r"\bcancel (?:the |my )?[\w -]{2,40}? from (?:the |my )?(?:\w+ )?order\b", re.I)
# What the scenario's request leaves out ("return all items except the pet bed").
_EXCEPT = re.compile(r"\b(?:except(?: for)?|but not|other than|apart from|excluding)\s+(?:the\s+|my\s+|for\s+)?"
                     r"([a-z][a-z -]*?[a-z])(?=\s*(?:[.,;)]|$|\band\b|\bwhich\b))", re.I)
# Words of an offer that name no thing ("would you also like to return ... from that order").
_OFFER_WORDS = frozenset(
    "would like also want wish return cancel exchange modify change items item order orders same that this "
    "from these those them well while shall proceed pending still too them there their your mine".split())
_ASKS_ACTION = re.compile(r"\b(?:would|do) you (?:like|want) (?:me|us) to\b|\b(?:shall|should|can) (?:i|we)\b", re.I)
_ACTION_WORDS = frozenset("exchange return cancel modify change order rather like would only".split())
_MUST_VERIFY = re.compile(r"\bneed to (?:verify|confirm|authenticate|validate) (?:your identity|you)\b", re.I)
_WOULD_YOU = re.compile(r"^(?:and |so )?(?:would|do) you (?:also |still )?(?:like|want|wish)\b", re.I)
_INSTEAD_OF = re.compile(
    r"\b(?:instead of|rather than)\b[^.?!,]*|^(?:instead of|rather than)\b[^,]*,", re.I
)


def families(text: str) -> set[str]:
    """The action families ``text`` names (see :data:`_FAMILIES`)."""
    text = _INSTEAD_OF.sub(" ", text)
    return {name for name, pattern in _FAMILIES if pattern.search(text)}


_ORDER_ID = re.compile(r"#W\d{5,}")
_SIZE = re.compile(r"\bsize\s+(xxs|xs|s|m|l|xl|xxl|small|medium|large)\b|\b(xxs|xs|s|m|l|xl|xxl)[ -]size\b|"
                   r"\b(small|medium|large|extra[ -]large)\s+size\b", re.I)
_SIZE_NAMES = {"small": "s", "medium": "m", "large": "l", "extra large": "xl", "extra-large": "xl"}


def _sizes(text: str) -> set[str]:
    """The clothing sizes ``text`` names ("size M", "s size", "medium size"), as letters."""
    out = set()
    for m in _SIZE.finditer(text):
        word = next(g for g in m.groups() if g).lower()
        out.add(_SIZE_NAMES.get(word, word))
    return out


_ASKS_HUMAN = re.compile(r"\b(?:human|real person|representative|live agent)\b", re.I)
# "just the Floor Lamp", "only the Rain Umbrella", "only one item": the action limited to a part.
_ONLY_PART = re.compile(r"\b(?:just|only)\s+(?:the|one|a single)\b(?!\s+(?:order|whole|entire|full|same|way|thing|things|one you)\b)", re.I)
# An item the scenario names by its catalogue name ("the Plant Pot and the Floor Lamp").
_WHOLE = re.compile(r"\b(?:whole|entire|full|complete) order\b|\ball (?:of the |the )?items\b|\bevery item\b", re.I)
_NAMED_ITEM = re.compile(r"\bthe ((?:[A-Z][\w-]*)(?: [A-Z][\w-]*)*)")
# "do you want to keep the same material?": asks what the customer prefers, not leave to act.
_PREFERENCE = re.compile(
    r"\b(?:do|would) you (?:want|like|prefer) (?:to )?(?:keep|have|get|stay with|stick with|the same)\b|"
    r"\bdoes \w+(?: \w+)? matter to you\b|\bdo you (?:care|mind) (?:about|if)\b|"
    # "do you want the new tent in the same green color?", "would you like it in blue?"
    r"\b(?:do|would) you (?:still |also )?(?:want|like|prefer)\b[^?]*\b(?:in (?:the same|a different|another)|"
    r"same (?:one|colou?r|size|material|capacity|version|variant|style|model|kind|type)|colou?r|size|material|"
    r"capacity|version|variant|style|model)\b",
    re.I,
)
# The state of a US address ("Boise, ID 83760").
_STATE_ZIP = re.compile(r",\s*([A-Z]{2})\s+\d{5}\b")
_ZIP5 = re.compile(r"(?<![\d-])\d{5}(?![\d-])")
_PAY_KINDS = (
    ("gift card", re.compile(r"\bgift ?card", re.I)),
    ("paypal", re.compile(r"\bpaypal\b", re.I)),
    ("credit card", re.compile(r"\bcredit card\b|\b(?:visa|mastercard|amex|american express|"
                               r"discover)\b|\bcard ending\b", re.I)),
)
_PLACEHOLDER = re.compile(r"<[a-z_]+\d*>", re.I)
_BRAND = re.compile(r"\b(visa|mastercard|amex|american express|discover)\b", re.I)
_CARD_DIGITS = re.compile(r"\bending (?:in )?(\d{4})\b", re.I)
_REASONS = (
    ("no longer needed", re.compile(r"\bno longer need", re.I)),
    ("ordered by mistake", re.compile(r"\bby mistake\b|\bmistaken", re.I)),
)


# "the Camping Tent (capacity 2 person, color green) for the one with capacity 4 person, ..."
_WANTED_ITEM = re.compile(r"\bthe ([A-Z][\w' -]*?) \(([^)]*)\) for the one with (.+?)(?= and the [A-Z]|\.?$)")
# Option values that are ordinary words in a sentence, never read as a stated option.
_AMOUNT = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
_PLAIN_VALUES = frozenset(
    "long short light standard single regular house speed tube classic plain type wood large small "
    "medium bath english spanish digital".split()
)
# Options whose every value is distinctive ("fleece", "1080p", "trifold").
_DISTINCT_KEYS = frozenset({"material", "band", "style", "bulb", "firmness", "rating", "resolution",
                            "connection", "display", "edition", "finish", "handle"})


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
        options: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        super().__init__(script, seed=seed, intents=intents, user_tool_names=user_tool_names)
        self.expect_refusal = expect_refusal
        self.options = {k: frozenset(v) for k, v in (options or {}).items()}
        self._message = ""
        self._parts: list[Segment] = []
        self._confirms = 0
        self._fallen_back: set[int] = set()

    def fallback_wish(self, text: str, parts: Sequence[Segment]) -> str | None:
        """What the customer wants instead when the agent says its wish cannot be met (the
        scenario's "if there is no clicky keyboard, only exchange the thermostat"; "if not,
        you wonder what the most expensive item is"), each once; None when the message
        refuses nothing the scenario has a fallback for."""
        text = dialogue.strip_markdown(text)
        if not self.script.fallbacks or not (_REFUSAL.search(text) or _NOT_THERE.search(text)):
            return None
        for i, fb in enumerate(self.script.fallbacks):
            if i in self._fallen_back or not refusal_matches(fb.when, text):
                continue
            self._fallen_back.add(i)
            if not any(p.asks and p.act != Act.REQUEST for p in parts) or any(p.act == Act.CLOSING for p in parts):
                return fb.say
            told = " ".join(p.text for p in parts)
            # "I could offer one with no backlight. Shall I?" to "you'd go for no backlight": yes.
            agree = any(same_word(w, x) for w in content_words(fb.say) for x in content_words(told)
                        if w not in _ACTION_WORDS)
            for m in re.finditer(r"\b(?:no|without)\s+(\w+)", fb.say, re.I):
                # "I'd go for no backlight" to "the closest is clicky, white backlight":
                # the offer must have no backlight too, not just name it.
                if not re.search(rf"\b(?:no|without)\s+(?:\w+\s+)?{re.escape(m.group(1))}", told, re.I):
                    agree = False
            return f"{'Yes' if agree else 'No, thank you'}. {fb.say}"
        return None

    def _goal(self) -> set[str]:
        """The action families the scenario's requests name (transfer: its end)."""
        # "I do not want to cancel any orders.": what a sentence rules out is no goal.
        sentences = re.split(r"(?<=[.!?])\s+", " ".join(self.script.requests))
        goal = families(" ".join(s for s in sentences if not _DO_NOT_WANT.search(s)))
        if self.script.end == "transfer":
            goal.add("transfer")
        return goal

    def offer_wanted(self, text: str) -> bool:
        """False when the offer proposes an action the customer did not come for."""
        goal = self._goal()
        offered = families(text)
        if not offered and self._message:
            # "I can reship it right away. Would you like that?": what the message proposes,
            # told in its statements (another offer of the message is not this one's).
            # (A refund or payment the message mentions comes with the action, not as one.)
            told = " ".join(p.text for p in self._parts if not p.asks) or self._message
            # "I'll keep the items and the address exactly as they are and only change the
            # payment": what is kept is not offered.
            told = _KEPT.sub(" ", told)
            offered = families(told) - {"refund", "payment"}
        if offered - {"refund", "payment"} and _MORE_THAN_ASKED.search(text):
            # "Would you like me to return the other items as well?"
            return False
        also = _ALSO.search(text)
        if also and self._beyond_scenario(text[also.start():], offered):
            # "Would you also like to return the hiking boots?", "since you also have #W2
            # pending, shall I cancel that one too?": orders or items the scenario never names.
            return False
        if "transfer" in offered and "transfer" not in goal:
            return False
        if "cancel" in offered and _WHOLE_ORDER.search(text) and _CANCEL_ITEM_FROM.search(" ".join(self.script.requests)):
            # "Do you want me to cancel the entire order?" to a customer cancelling one item
            # from it.
            return False
        return all(f in goal or goal & _IMPLIED.get(f, set()) for f in offered)

    def _scenario_text(self) -> str:
        return " ".join([*self.script.requests, *self.script.facts.values()])

    def _beyond_scenario(self, text: str, offered: set[str]) -> bool:
        """An offer naming an order id, or (for an action on items) only things, that the
        scenario never names."""
        mine = set(_ORDER_ID.findall(self._scenario_text()))
        theirs = set(_ORDER_ID.findall(text))
        if theirs and mine and not theirs & mine:
            return True
        if not offered & {"cancel", "return", "exchange", "items"}:
            return False
        words = {w for w in re.findall(r"[a-z]{4,}", dialogue.strip_markdown(text).lower())
                 if w not in dialogue.EMPTY_WORDS and w not in _OFFER_WORDS}
        scen = self._scenario_text().lower()
        return bool(words) and not any(w[:5] in scen for w in words)

    def correction(self, text: str, offer: str = "") -> str | None:
        """What is wrong in a confirmation the agent asks for, as the customer says it: an
        order id, a payment method, an address zip or a cancellation reason that is not the
        scenario's (None when nothing is)."""
        facts = self.script.facts
        goal_text = " ".join([*self.script.requests, *facts.values()])
        mine = set(_ORDER_ID.findall(goal_text))
        theirs = set(_ORDER_ID.findall(text))
        if mine and theirs and not theirs & mine:
            return f"No, that's not the right order. {facts.get('order_id') or 'My order is ' + ' and '.join(sorted(mine)) + '.'}"
        pay = facts.get("payment_method", "")
        if pay:
            want = {k for k, p in _PAY_KINDS if p.search(pay)}
            said = {k for k, p in _PAY_KINDS if p.search(offer)} or {
                k for k, p in _PAY_KINDS if p.search(text)
            }
            digits_want = set(_CARD_DIGITS.findall(pay))
            digits_said = set(_CARD_DIGITS.findall(text))
            brands_want = set(_BRAND.findall(pay.lower()))
            brands_said = set(_BRAND.findall((offer if _BRAND.search(offer) else text).lower()))
            if (said and want and not said & want) or (
                digits_said and digits_want and not digits_said & digits_want
            ) or (brands_said and brands_want and not brands_said & brands_want):
                return f"No, that's not the payment method I want. {pay}"
        address = facts.get("address", "")
        if address and _ZIP5.search(text):
            zips = set(_ZIP5.findall(address))
            said_zips = set(_ZIP5.findall(text)) - set(self.script.identity.values())
            if zips and said_zips and not said_zips & zips:
                return f"No, that's not quite right. {address}"
        state = _STATE_ZIP.search(address)
        said_state = _STATE_ZIP.search(dialogue.strip_markdown(text))
        if state and said_state and said_state.group(1) != state.group(1):
            # "Boise, IA 83760" when the scenario's address is in ID.
            return f"No, that's not quite right. {address}"
        street = re.search(r"\d+ ([A-Z][a-z]+)", address)
        if street and street.group(1) in text and not _PLACEHOLDER.search(text):
            # (A placeholder such as "<num8>", which the bundled models write for a number
            # their tool call fills in, is no wrong detail.)
            # The street is the scenario's: every number of the address must be there too.
            numbers = set(re.findall(r"\d+", address))
            if not numbers <= set(re.findall(r"\d+", text)):
                return f"No, that's not quite right. {address}"
        units = {u.lower() for u in _UNIT.findall(address)}
        said_units = {u.lower() for u in _UNIT.findall(dialogue.strip_markdown(text))}
        if units and said_units and not said_units & units:
            # "Suite 614" when the customer said Suite 641.
            return f"No, that's not quite right. {address}"
        item = facts.get("item", "")
        want_sizes, said_sizes = _sizes(item), _sizes(dialogue.strip_markdown(text))
        if want_sizes and said_sizes and not want_sizes & said_sizes:
            # "size M" to a customer who wants its t-shirts in size S.
            return f"No, that's not the size I want. {item}"
        if self._wrong_item(text):
            return f"No, that's not the item I want. {facts['item']}"
        part = self._only_part(text)
        if part is not None:
            return part
        left_out = self._left_out(text)
        if left_out is not None:
            return f"No, not the {left_out}. {facts.get('item') or self.script.requests[0]}"
        reason = facts.get("reason", "")
        if reason:
            want_r = {k for k, p in _REASONS if p.search(reason)}
            said_r = {k for k, p in _REASONS if p.search(text)}
            if want_r and said_r and not said_r & want_r:
                return f"No, the reason is different: {reason}"
        return None

    def _only_part(self, text: str) -> str | None:
        """A confirmation that limits the action to part of what the customer wants ("just the
        Floor Lamp to return" when it returns the Plant Pot and the Floor Lamp; "I'll cancel
        only the Rain Umbrella" when it cancels the whole order): what it wants, said as a
        correction (None otherwise)."""
        plain = dialogue.strip_markdown(text)
        request = self.script.requests[0] if self.script.requests else ""
        asked = " ".join([*self.script.requests, self.script.facts.get("item", "")])
        acts = families(request) & {"cancel", "return", "exchange"}
        wanted = list(dict.fromkeys(_NAMED_ITEM.findall(asked)))
        if not _ONLY_PART.search(plain):
            # "Let me confirm the return: 1. Kayak Paddle 2. Alarm Clock" for three items: a
            # list of two or more of the items wanted that leaves one out.
            named = [w for w in wanted if re.search(rf"\b{re.escape(w)}\b", plain, re.I)]
            if acts and families(plain) & acts and len(named) >= 2 and len(named) < len(wanted):
                return f"No, not only those. {self.script.facts.get('item') or request}"
            return None
        if not acts or not families(plain) & acts:
            return None
        if wanted:
            if any(not re.search(rf"\b{re.escape(w.split()[-1])}\b", plain, re.I) for w in wanted):
                return f"No, not only that. {self.script.facts.get('item') or request}"
            return None
        if "cancel" in acts and _ORDER_ID.search(request) and not _WHOLE.search(plain):
            # The customer cancels the order (no item named): all of it.
            return f"No, I want the whole order cancelled, not just part of it. {request}"
        return None

    def _left_out(self, text: str) -> str | None:
        """A thing the scenario's request leaves out ("all items except the pet bed") that a
        confirmation includes ("I can return all three items: the kettle, ... and the Pet
        Bed"); None when there is none."""
        plain = dialogue.strip_markdown(text).lower()
        for m in _EXCEPT.finditer(" ".join(self.script.requests)):
            thing = m.group(1).lower()
            head = thing.split()[-1]
            if not re.search(rf"\b{re.escape(head)}", plain):
                continue
            if re.search(rf"\b(?:except|but not|not|other than|apart from|excluding|keep|keeping|without)\b"
                         rf"(?:\s+(?:for|the|your|my))*\s+(?:\w+\s+)?{re.escape(head)}", plain):
                continue
            return thing
        return None

    def wanted_items(self) -> list[tuple[str, dict[str, str], set[str]]]:
        """``(item name, {option: wanted value}, every value the scenario names)`` for each
        item the scenario's item fact wants changed ("the Camping Tent (capacity 2 person,
        color green) for the one with capacity 4 person, color green")."""
        out: list[tuple[str, dict[str, str], set[str]]] = []
        keys = sorted(self.options, key=len, reverse=True)
        for m in _WANTED_ITEM.finditer(self.script.facts.get("item", "")):
            want: dict[str, str] = {}
            values: set[str] = set()
            for phrase in [*m.group(2).split(","), *m.group(3).split(",")]:
                phrase = phrase.strip()
                key = next((k for k in keys if phrase.lower().startswith(k.lower() + " ")), None)
                if key is None:
                    continue
                values.add(phrase[len(key):].strip().lower())
            for phrase in m.group(3).split(","):
                phrase = phrase.strip()
                key = next((k for k in keys if phrase.lower().startswith(k.lower() + " ")), None)
                if key is not None:
                    want[key] = phrase[len(key):].strip().lower()
            if want:
                out.append((m.group(1), want, values))
        return out

    def _wrong_item(self, text: str) -> bool:
        """The confirmation names, for an item the customer wants changed, an option value
        the scenario never says (the 4-person tent in blue when it wants green)."""
        lines = [ln for ln in re.split(r"\n|(?<=[.!?])\s+", text) if ln.strip()]
        to_col = self._to_column(lines)
        wanted = self.wanted_items()
        for name, want, values in wanted:
            head = name.split()[-1].lower()[:5]
            about = self._lines_about(lines, head, [n.split()[-1].lower()[:5] for n, _, _ in wanted])
            if not about and len(wanted) == 1 and not re.search(r"\|", text):
                # "the 8 outlets / 6 ft variant isn't showing, but I have 8 outlets with a 10 ft
                # cord": values of its options, with the item left unnamed.
                about = lines
            for line in about:
                low = re.sub(r"(?<=\d)-(?=[a-z])", " ", line.lower())
                new = re.split(r"→|->|⇒|\binto\b|\bfor the one\b|\bswitched to\b", low)
                cells = [c.strip() for c in low.strip().strip("|").split("|")]
                if to_col is not None and len(cells) > to_col:
                    # A table with a "To" column: that cell is the new side.
                    new = [" ".join(cells[:to_col]), cells[to_col]]
                if len(new) > 1:
                    # "16 oz steel → 12 oz steel" when it wants 12 oz blue: the new side names
                    # another value of an option it wants changed.
                    for key, value in want.items():
                        for other in self.options.get(key, ()):
                            o = other.lower()
                            if o != value and len(o) >= 3 and o not in _PLAIN_VALUES and re.search(
                                    rf"(?<![\w-]){re.escape(o)}(?![\w-])", new[-1]):
                                return True
                for key in want:
                    for other in self.options.get(key, ()):
                        o = other.lower()
                        if o in values or len(o) < 3 or o in _PLAIN_VALUES or not (
                            key == "color" or re.search(r"\d", o) or key in _DISTINCT_KEYS
                        ):
                            continue
                        if re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", low):
                            return True
                    unit = _AMOUNT.fullmatch(want[key])
                    if unit is not None:
                        # "Duffel Bag (50L, black)" when it wants 40L: an amount of the same
                        # unit the scenario never says.
                        said = {f"{n}{unit.group(2)}" for n in re.findall(
                            rf"(\d+(?:\.\d+)?)\s*{re.escape(unit.group(2))}\b", low)}
                        if said - {v.replace(" ", "") for v in values}:
                            return True
        return False

    @staticmethod
    def _lines_about(lines: Sequence[str], head: str, heads: Sequence[str]) -> list[str]:
        """The lines that name an item (by ``head``) and those after them that name no other
        item ("the yellow compact umbrella is sold out. I could offer the red compact one
        instead")."""
        out: list[str] = []
        on = False
        for ln in lines:
            low = ln.lower()
            if head in low:
                on = True
            elif any(h in low for h in heads if h != head) or ln.count("|") >= 2:
                on = False
            if on:
                out.append(ln)
        return out

    @staticmethod
    def _to_column(lines: Sequence[str]) -> int | None:
        """The index of a table's "To" / "New" column (the new side of an exchange)."""
        for ln in lines:
            if ln.count("|") >= 2:
                cells = [dialogue.strip_markdown(c).strip().lower() for c in ln.strip().strip("|").split("|")]
                for i, c in enumerate(cells):
                    if re.fullmatch(r"(?:to|new(?: \w+)?|exchange (?:to|for)|replacement|changed to|becomes)", c):
                        return i
                return None
        return None

    def choose(self, seg: Segment, told: str = "") -> str | None:
        """As the base user's, only for an alternative that names what the customer came for
        (a retail option naming no action, "to a gift card", is no pick)."""
        listed = self._listed_pick(told) if dialogue.choice(seg.text) or re.match(
            r"^(?:which|what)\b", seg.text, re.I) else None
        if listed is not None:
            return listed
        pick = super().choose(seg, told)
        if pick is None or not families(pick) & self._goal():
            return None
        return pick

    def _listed_pick(self, told: str) -> str | None:
        """The customer's pick among options listed before a choice question: the order the
        scenario names ("1. #W2620022 ... 3. #W3451342. Which of these ...?"), or the variant
        with the most values the scenario wants ("Yellow, golf / Yellow, compact")."""
        alts = [a.strip() for a in re.split(r"\s+\bor\b\s+", told) if a.strip()]
        if len(alts) < 2:
            return None
        mine = set(_ORDER_ID.findall(self._scenario_text()))
        ids = [a for a in alts if _ORDER_ID.search(a)]
        if mine and len(ids) >= 2:
            hit = [a for a in ids if set(_ORDER_ID.findall(a)) & mine]
            if len(hit) == 1:
                return self.script.facts.get("order_id") or f"It's {_ORDER_ID.search(hit[0]).group(0)}."  # type: ignore[union-attr]
            return None
        wanted = {v for _, want, _ in self.wanted_items() for v in want.values()}
        if not wanted:
            return None
        score = [sum(bool(re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", a.lower())) for v in wanted) for a in alts]
        best = max(score)
        if best and score.count(best) == 1:
            return f"I'd like the {alts[score.index(best)].strip(' .')} one, please."
        return None

    def answer_offer(self, seg: Segment) -> str:
        """Yes only to what the customer came for, with the scenario's details: an offer of
        another action is declined, a confirmation with a wrong detail corrected."""
        fix = self.correction(self._message, seg.text)
        if fix is not None:
            # "I can refund it to your credit card. Shall I?" to a customer who wants the
            # refund on its gift card: what it wants instead, not just a no.
            return fix
        told = " ".join([*(p.text for p in self._parts if not p.asks), seg.text])
        if (self.script.end == "transfer" and _ASKS_HUMAN.search(" ".join(self.script.requests))
                and "transfer" not in families(told)):
            # A customer who asked for a human agent wants that, not the agent's own help
            # first ("I could look into the charges myself. Would you like me to try that?").
            return "No, thank you. I'd like to speak to a human agent, please."
        if not self.offer_wanted(seg.text):
            if self.script.end == "transfer":
                # The customer came for a human: it says so when it declines.
                return "No, thank you. I'd like to speak to a human agent, please."
            return "No, thank you. That's not what I want."
        if self._confirms < len(self.script.on_confirm) and _CONFIRM.search(seg.text):
            # τ²-bench's "if the agent asks for confirmation, only exchange the desk lamp".
            self._confirms += 1
            return self.script.on_confirm[self._confirms - 1]
        fix = self.correction(self._message, seg.text)
        if fix is not None:
            return fix
        return super().answer_offer(seg)

    def answers(self, parts: Sequence[Segment]) -> list[str]:
        """As the base user's, a correction of the agent's confirmation said first; a
        preference question put as an offer ("do you want to keep the same material?") is
        answered with the scenario's item facts when they speak to it."""
        parts = [
            replace(p, act=Act.QUESTION) if p.act == Act.OFFER and _PREFERENCE.search(p.text)
            and self._speaks_to(p.text) and self.offer_wanted(p.text) else p
            for p in parts
        ]
        parts = [replace(p, act=Act.OFFER) if p.act == Act.QUESTION and self._is_offer(p) else p
                 for p in parts]
        said = super().answers(parts)
        fixes = [a for a in said if a.startswith("No, ")]
        return fixes + [a for a in said if a not in fixes] if fixes else said

    def _is_offer(self, seg: Segment) -> bool:
        """A question that proposes something to say yes or no to: "Would that work for you
        instead?", or an either/or offer of actions none of which the customer wants
        ("Would you like me to start a return or exchange for any of these items?")."""
        if _WILL_IT_DO.search(seg.text) and not dialogue.choice(seg.text):
            return True
        if seg.either_or and _ASKS_ACTION.search(seg.text) and families(seg.text) - {"refund", "payment"}:
            alts = [a for a in re.split(r"\s+\bor\b\s+", seg.text) if a.strip()]
            return not any(self.offer_wanted(a) and families(a) for a in alts)
        return False

    def _speaks_to(self, text: str) -> bool:
        item = self.script.facts.get("item", "")
        words = {w for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in dialogue.EMPTY_WORDS}
        return bool(item) and any(w[:5] in item.lower() for w in words - {"keep", "same", "matter"})

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
        if _confirms_details(seg.text) and (fix := self.identity_mismatch(text)) is not None:
            return [fix]  # "I found an account under pavel.romeo2558@… — is that you?"
        if _YES_NO_QUESTION.search(seg.text) and self._mentions_identity(seg.text):
            return ["Yes, that's right."]
        if re.match(r"^\W*(?:so,? |and )?(?:which|what)\b", seg.text, re.I) and not _TOPICS_BY_NAME[
                "order_id"].search(seg.text):
            # "1. #W2620022 ... 3. #W3451342. Which of these should go to the new address?"
            pick = self._listed_pick(" or ".join(p.text for p in self._parts if _ORDER_ID.search(p.text)))
            if pick is not None:
                return [pick]
        if _PREFERENCE.search(seg.text) and self._speaks_to(seg.text) and self.offer_wanted(seg.text):
            return [self.script.facts["item"]]
        if _MUST_VERIFY.search(seg.text) and "?" not in seg.text:
            # "To update your address, I first need to verify your identity.": identity only.
            ident = self._identity_answer(seg.text)
            return [ident] if ident is not None else []
        if _WOULD_YOU.match(seg.text) and _MORE_THAN_ASKED.search(seg.text):
            # "Would you like to exchange or modify any other items?": no more than it asked.
            return ["No, thank you. Just what I asked for."]
        out: list[str] = []
        address = bool(_TOPICS_BY_NAME["address"].search(text))
        if _IDENTITY.search(text) and not (address and not _IDENTITY_NOT_ADDRESS.search(text)):
            ident = self._identity_answer(text)
            if ident is not None:
                out.append(ident)
        facts = self._retail_facts(text)
        if facts is not None:
            out.append(facts)
        rule = next((r for r in self.script.answers if matches(text, r.keywords)), None)
        if rule is not None:
            # The scenario says what to answer to this ("if asked for the reason, say you
            # ordered by mistake", "if asked for your zip code, say 98178 first"): that, not
            # the facts read from its prose (nor its identity, when the rule is about it).
            about_identity = any(_IDENTITY.search(" ".join(g)) for g in rule.keywords)
            return [*(o for o in out if o != facts and not about_identity), rule.say]
        if not out:
            custom = self._fact_answer(text)
            if custom is not None:
                out.append(custom)
        return out

    def respond_text(self, text: str) -> str:
        self._message = text
        parts = self._parts = dialogue.read(text)
        if not self._opened or self.transferred(parts) or any(p.act == Act.GREETING for p in parts):
            return super().respond_text(text)
        asks = [p for p in parts if p.asks and not p.negated]
        if self.expect_refusal and _REFUSAL.search(text):
            if not any(p.act == Act.OFFER for p in asks):
                return f"I understand. {self.script.closing} {STOP_TOKEN}"
            if not any(self.offer_wanted(p.text) and families(p.text) & self._goal() - {"payment"}
                       for p in asks if p.act == Act.OFFER) or any(_REFUSAL.search(p.text) for p in parts
                                                                  if not p.asks):
                # "It can't be cancelled. Would you like to start a return instead?": the
                # scenario says to accept the refusal and end; what else is offered is declined.
                return f"No, thank you. I understand. {self.script.closing} {STOP_TOKEN}"
        wish = self.fallback_wish(text, parts)
        if wish is not None:
            self._fallbacks = 0
            return wish
        said = self.answers(parts)
        if said:
            self._fallbacks = 0
            return join_answers(said)
        if any(p.act == Act.CLOSING for p in parts) or not asks:
            return super().respond_text(text)
        # A question the script cannot answer: say so, or ask what is meant; never guess.
        reply = self._fallback(parts)
        return self._stop() if OUT_OF_SCOPE_TOKEN in reply else reply
