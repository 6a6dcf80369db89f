"""Facts the scripted user can state, read from τ²-bench's free-text ``user_scenario``.

τ²-bench tells its LLM user who it is and what it wants in prose (``known_info``,
``reason_for_call``, ``unknown_info``, ``task_instructions``). The scripted user answers
from a :class:`~pytest_quantagent.env.scenario.UserScript`; this module reads the prose into
one, phrase by phrase, in the first person:

- identity (``known_info``): full name ("You are X Y", "Your/You name is", "called X Y"), zip
  code, email (the first of several), phone number, user id;
- telecom facts: where the customer is ("currently abroad in France" / "at home in the United
  States") as ``location``; no Wi-Fi access; how much data it will refuel ("willing to refuel
  2.0 GB"); since when the problem lasts ("for the past few hours"); that it does not want a
  plan change (``no_plan_change``; the telecom user declines plan changes it did not ask for);
  the internet speed it wants ("absolutely want to get excellent internet speed": the fact
  ``speed_goal``, by which the telecom user judges speed results and "is it resolved?"); the
  app the problem is in ("using your messaging app");
- retail facts (``reason_for_call``): the order ids; the sentences about what to do with which
  item (``item``), the payment or refund method (``payment_method``), an address
  (``address``) and the reason (``reason``), each as the customer says it.

The opening request is the reason for the call without the sentences and clauses that tell
the simulated user how to behave (:func:`opening_request`).

Conditional instructions (:func:`read_conditions`, retail mostly): a change of mind at the
agent's confirmation (``on_confirm``: "if the agent asks for confirmation, only exchange the
desk lamp"); what the customer wants when the agent refuses its wish (``fallbacks``: "if there
is no clicky keyboard, go for no backlight", chains of "If not, ..."); what to say when asked for
something ("if asked for the reason, say you ordered by mistake"); a preference among several
options ("if multiple colors are available, you prefer blue").

What is *not* read (official telecom and retail tasks; see also ``docs/USER_SIMULATOR.md``):

- persona and mood instructions ("express mild frustration", "you are a private person");
- changes of mind at other moments ("once the agent has confirmed the changes, you regret it");
- conditions on numbers or judgements ("if the price is above $300, cancel it", "whatever saves
  you most money"), and "if and only if the agent gives you several options";
- hidden truths the user must not reveal ("everything except a keyboard and a mouse, but do
  not reveal it"): dropped, so the user cannot say which items to keep;
- preference orders ("prefer battery > USB > AC") and multi-order mappings ("refund each order
  to the other order's payment method"): said verbatim, never resolved into a choice or ids;
- success criteria other than the speed goal ("resolved when the status bar shows signal",
  "until you can send an MMS"), and unknown info other than the email ("you don't remember
  the order number");
- "if the agent asks you to pay a bill, you accept": not read, it agrees with the default
  ``confirm``;
- scripted exact wordings other than a fallback's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pytest_quantagent.env.scenario import AnswerRule, Fallback

_SECOND_PERSON: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), r)
    for p, r in (
        (r"\byou're\b", "I'm"), (r"\byou are\b", "I am"), (r"\byou've\b", "I've"),
        (r"\byou were\b", "I was"), (r"\byou'd\b", "I'd"), (r"\byou'll\b", "I'll"),
        (r"\byourself\b", "myself"), (r"\byours\b", "mine"), (r"\byour\b", "my"),
        (r"\byou mobile\b", "my mobile"), (r"\byou\b", "I"),
    )
)


def first_person(text: str) -> str:
    """τ²-bench's second-person instructions ("You want to return ...") as the user says them
    ("I want to return ..."), well enough for a scripted reply."""
    out = text
    for pat, rep in _SECOND_PERSON:

        def swap(m: re.Match[str], rep: str = rep) -> str:
            return rep if m.group(0)[0].islower() or rep[0] == "I" else rep.capitalize()

        out = pat.sub(swap, out)
    return out


_NAME_RE = re.compile(
    r"\b(?i:you are|you're|your name is|you name is|name is|called|named)\s+"
    r"(?:(?i:an?|the)\s+[a-z]+(?:\s+[a-z]+)?\s+(?i:called|named)\s+)?([A-Z][a-z]+) ([A-Z][a-z]+)\b"
)
_ZIP_RE = re.compile(r"(?<![\d-])(\d{5})(?![\d-])")
_EMAIL_RE = re.compile(r"[\w.+\-]+@[\w\-]+\.[\w.]+")
_PHONE_RE = re.compile(r"\b\d{3}-\d{3}-\d{4}\b|\b\d{3}-\d{4}\b")
_USER_ID_RE = re.compile(r"\b([a-z]+)_([a-z]+)_\d{3,}\b")
_ORDER_ID_RE = re.compile(r"#W\d{5,}")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")

_ABROAD = re.compile(r"\b(?:currently |now )?(?:abroad|travel(?:l?ing)?|overseas) (?:in|to) ([A-Z][a-z]+(?: [A-Z][a-z]+)*)")
_HOME = re.compile(r"\bat home in (the [A-Z][a-z]+(?: [A-Z][a-z]+)*|[A-Z][a-z]+)")
_NO_WIFI = re.compile(r"\b(?:do not|don't) have (?:access to )?(?:a )?wi-?fi\b", re.I)
_REFUEL = re.compile(r"\bwilling to refuel ([\d.]+ ?GB)\b", re.I)
_DURATION = re.compile(
    r"\bfor the (?:past|last) ([^.,;]+?)(?=[.,;]|$)|\bsince ((?:yesterday|this morning|last \w+|"
    r"\d+ \w+ ago|[A-Z][a-z]+day)\b[^.,;]*?)(?=[.,;]|$)",
    re.I,
)
# "absolutely want to get excellent internet speed": the speed the customer is satisfied with.
_SPEED_GOAL = re.compile(r"\bwant to get (excellent|good|fast) internet speed\b", re.I)
# "using your messaging app": the app the problem is in.
_APP = re.compile(r"\busing (?:your|the) (\w+) app\b", re.I)
_NO_PLAN_CHANGE = re.compile(r"\b(?:do not|don't) want to change (?:your|the)? ?(?:mobile )?(?:data )?plan\b", re.I)

# Retail: which sentence of the reason answers which question.
_ITEM_SENTENCE = re.compile(r"\b(?:exchange|return|modify|change|cancel|replace|upgrade|swap)\b", re.I)
_PAY_SENTENCE = re.compile(r"\b(?:paypal|gift ?card|credit card|card ending|refund|pay(?:ment)?|amex|visa|mastercard)\b", re.I)
_ADDRESS_SENTENCE = re.compile(r"\baddress\b|\bdelivered to\b|\bsuite\b|\bapt\b", re.I)
_REASON_SENTENCE = re.compile(r"\bbecause\b|\bdue to\b|\bno longer need|\bby mistake\b|\bsince they\b|\breason\b|\bdamaged\b|\bbroken\b", re.I)
# Sentences that tell the simulated user how to behave, not what it wants.
_META = re.compile(
    r"^(?:if|when|once|whenever|but if|make sure|do not|don't|never|always|you (?:are|were) "
    r"(?:a|an|in|now|detail|polite|sad|angry)|mention|respond|provide)\b|\bthe agent\b",
    re.I,
)


@dataclass
class ScenarioFacts:
    """What :func:`read_scenario` found: identity, facts and answer rules for a script."""

    identity: dict[str, str] = field(default_factory=dict)
    facts: dict[str, str] = field(default_factory=dict)
    answers: list[AnswerRule] = field(default_factory=list)
    no_email: bool = False
    no_plan_change: bool = False
    on_confirm: list[str] = field(default_factory=list)
    fallbacks: list[Fallback] = field(default_factory=list)


# -- conditional instructions (retail mostly) -----------------------------------------------

# "If/when the agent asks (you) for confirmation (again), X": a scripted change of mind.
_ON_CONFIRM = re.compile(
    r"\b(?:if|when)\s+(?:the agent\s+)?asks?\s+(?:you\s+)?(?:for\s+|to\s+)?(?:final\s+|the\s+)?"
    r"confirm\w*(?P<again>\s+again)?(?:\s+before proceeding)?\s*,\s*(?:then\s+)?(?P<then>.+?)\s*$",
    re.I)
# "If not, X" / "If that is not possible, X": X replaces the wish said just before.
_IF_NOT = re.compile(
    r"^(?:but |and )?if (?:not possible|not|(?:that|this|it) (?:is not possible|isn't possible|does not work|"
    r"doesn't work|fails|is not available|isn't available|is not|isn't))\b\s*[,.]?\s*(?P<then>.+)$", re.I)
# "If there is no X / you cannot X / the agent cannot X / X is not possible, Y".
_IF_CANNOT = re.compile(
    r"^(?:but |and )?if (?:and only if )?(?P<cond>(?:there (?:is|are) no|no |you cannot|you can't|you can not|"
    r"it cannot|it can't|it is not|the agent (?:cannot|can't|can not|doesn't|does not|refuses|says|tells you|"
    r"mentions)|[^,]*\b(?:is|are) not (?:possible|available)|[^,]*\bnot possible|[^,]*\bcannot\b).*),"
    r"\s*(?:then\s+)?(?P<then>(?:you|i|just|only|ask|cancel|return|exchange|modify|change|get|go|keep|tell|use|"
    r"using|proceed|agree|confirm|do|provide|choose|pick|buy|refund|switch|try|see|mention|say|no)\b.+)$", re.I)
# "If there are NO cheaper boots available you want ...": no comma before the consequence.
_IF_NONE = re.compile(r"^(?:but |and )?if (?P<cond>there (?:is|are) no .+?) (?P<then>you (?:want|would|'d|prefer)\b.+)$",
                      re.I)
# "..., and if the agent cannot help, transfer to a human", "(..., but if it is not available
# just return it)": a fallback inside a sentence that says the wish.
_EMBEDDED_IF = re.compile(
    r"[,(]\s*(?:and |but )?if (?P<cond>the agent (?:cannot|can't|can not|says|tells you|is unable)[^,]*|"
    r"(?:it|that) is not (?:available|possible)|it's not (?:available|possible)|not possible)\s*,?\s*(?:then\s+)?"
    r"(?P<then>(?:just |only )?(?:you |transfer|ask|return|cancel|exchange|go|get|use|keep|request)[^)]+)", re.I)
# "If the agent asks for the cancellation reason, you say X", "If asked for your zip code, ...",
# "When asked for order ID, provide X first".
_IF_ASKED = re.compile(
    r"^(?:but |and )?(?:if|when) (?:the agent )?(?:asks?|asked) (?:you )?(?:for|about) (?:the |your |which )?"
    r"(?P<what>[\w -]{2,40}?)\s*,\s*(?:then )?(?:you )?(?:say|mention|provide|tell them|tell the agent|respond|"
    r"it is|it's|answer)?\s*(?:that )?(?P<then>.+)$", re.I)
# "If multiple colors are available (for the backpack), you prefer grey."
_IF_SEVERAL = re.compile(
    r"^(?:but |and )?if (?:multiple|several|more than one|many) (?P<what>[a-z -]+?) (?:options )?(?:are )?"
    r"available[^,]*,\s*you (?:prefer|want|would like|'d like) (?P<then>.+)$", re.I)
_CONTENT_WORD = re.compile(r"[a-z0-9][a-z0-9-]{2,}")
_WEAK_WORDS = frozenset(
    "you your the and that this with for are can could would will not agent want wants wish "
    "possible available there then also just only able help item items order orders one any all "
    "which what when you'd you're they them their its it's does don't cannot can't have has two "
    "each other given tells says say said mentions mention find know knows long shot but try "
    "wonder ask asks whether down bring exact same then asked provide first more way doesn don isn "
    "care common yourself".split())


_GENERIC_HEADS = frozenset({"code", "number", "id", "name", "method", "option", "options", "type", "one"})
_HOW_TO_PLAY = re.compile(r"\btool\b|`|\bground (?:your|the) response|\bexpress (?:mild )?frustration|"
                          r"\bfollow (?:their|the agent's) guidance|\bask the agent for clarification\b", re.I)


def content_words(text: str) -> list[str]:
    """The words of ``text`` that say what it is about (lower case, no function words)."""
    words = [w.strip("-") for w in _CONTENT_WORD.findall(text.lower().replace("full-size", "full size"))]
    return list(dict.fromkeys(w for w in words if w and w not in _WEAK_WORDS))


def _as_said(then: str) -> str:
    """A consequence of the scenario ("you'd rather only exchange the thermostat", "only
    exchange the desk lamp", "say that you forgot the W") as the customer says it."""
    t = then.strip().rstrip(".").strip()
    t = re.sub(r"^(?:then )?(?:you )?(?:say|mention|tell (?:the agent|them)|explain)(?: to the agent)? (?:that )?", "", t, flags=re.I)
    t = re.sub(r"^(?:suddenly )?(?:you )?change your mind (?:and |to )?(?:ask to |decide to )?", "I've changed my mind: I want to ",
               t, flags=re.I)
    t = re.sub(r"^do not say yes immediately,? because you ", "Not yet: I ", t, flags=re.I)
    t = re.sub(r"^you (?:are|become|would be) (?:angry|upset|annoyed)\b[^,]*,\s*(?:then\s+)?", "", t, flags=re.I)
    t = re.sub(r"^you (?:are|become|would be) (?:angry|upset|annoyed)(?: but)? (?:and )?", "", t, flags=re.I)
    t = re.sub(r"^you (?:wonder|ask(?: the agent)?) (?=what|which|if|whether|how)", "Then I'd like to know ", t, flags=re.I)
    t = re.sub(r"^(?:you )?(?:ask|tell) (?:the agent|it|them) to ", "Then please ", t, flags=re.I)
    t = re.sub(r"^do not ", "I don't want to ", t, flags=re.I)
    t = re.sub(r"^no (?:action|cancell?ation|exchange|change)\b.*", "Then I don't want to go ahead with it", t, flags=re.I)
    if m := re.match(r"^respond exactly with ['\"](.+?)['\"]$", t, re.I):
        t = m.group(1)
    # "say that it is 98178 first (common mistake), then correct yourself ...": the first thing said.
    t = re.sub(r"\s+first\b.*$|\s+\((?:common )?mistake\).*$", "", t, flags=re.I)
    if re.match(r"(?:you|i|then)\b", t, re.I) or t.startswith("I've") or t.startswith("Not yet"):
        out = first_person(t)
        # "change your mind to PayPal" / "to using PayPal": to use it.
        out = re.sub(r"\bI want to (?:using |use )?(?=[A-Z][a-z]*[A-Z]|[A-Z][a-z]+\b(?! I\b))", "I want to use ", out)
    elif re.match(r"(?:ask|request) (?:for )?(?:a )?human|(?:ask|request) (?:for )?(?:a )?(?:human )?representative|"
                  r"transfer", t, re.I):
        out = "I'd like to talk to a human representative, please"
    elif re.match(r"(?:only |just )?(?:ask|cancel|return|exchange|modify|change|get|go|keep|use|proceed|agree|"
                  r"confirm|do|provide|choose|pick|buy|refund|switch|try|see|upgrade|add|remove)\b", t, re.I):
        out = "I'd like to " + first_person(t[0].lower() + t[1:])
    else:
        out = first_person(t)
    out = out[0].upper() + out[1:]
    return out + ("" if out.endswith((".", "!", "?")) else ".")


def read_conditions(text: str, out: ScenarioFacts) -> None:
    """The scenario's conditional instructions that the scripted user can follow: changes of
    mind at a confirmation (``on_confirm``), what it wants when the agent refuses
    (``fallbacks``), what to say when asked for something (answer rules), and preferences
    among several options (answer rules)."""
    previous = ""
    wishes: list[str] = []
    for sentence in _sentences(text):
        sent = sentence.strip()
        if previous and (not wishes or wishes[-1] != previous):
            wishes.append(previous)
        if _HOW_TO_PLAY.search(sent):
            continue  # how the simulated user should use its tools or behave, not a wish
        if re.match(r"^(?:but |and )?if (?:so|yes|that is possible|it is possible|this is possible)\b", sent, re.I):
            continue  # what to do when the wish before is granted: the wish itself
        if m := _ON_CONFIRM.search(sent):
            said = _as_said(m.group("then"))
            lead = "No, wait." if re.search(r"\b(?:regret|keep it|rethink|changed my mind|not yet|"
                                            r"do not|don't)\b", said, re.I) else "Actually,"
            keep_case = lead != "Actually," or said.startswith(("I ", "I'"))
            out.on_confirm.append(f"{lead} {said if keep_case else said[0].lower() + said[1:]}")
            continue
        if m := _IF_SEVERAL.match(sent):
            what = m.group("what").strip().lower()
            stem = what.rstrip("s") if not what.endswith("ss") else what
            out.answers.append(AnswerRule(keywords=[[w] for w in dict.fromkeys([stem, stem[:5]]) if w],
                                          say=f"I'd prefer {first_person(m.group('then').strip().rstrip('.'))}."))
            continue
        if m := _IF_ASKED.match(sent):
            what = [w for w in re.findall(r"[a-z0-9]+", m.group("what").lower()) if w not in ("the", "your", "a", "an")]
            if what:
                groups = [what] + ([[what[-1]]] if len(what) > 1 and what[-1] not in _GENERIC_HEADS else [])
                out.answers.append(AnswerRule(keywords=groups, say=_as_said(m.group("then"))))
                previous = m.group("then")
                continue
        if m := _IF_NOT.match(sent):
            # (The wish is the last sentence before that says one: "(You know it's a long
            # shot, but you want to try)." says none.)
            when = next((w for h in reversed(wishes) if (w := content_words(_without_if(h)))), [])
            if when:
                out.fallbacks.append(Fallback(when=when, say=_as_said(m.group("then"))))
            previous = m.group("then")
            continue
        if m := _IF_CANNOT.match(sent) or _IF_NONE.match(sent):
            when = content_words(m.group("cond")) or content_words(_without_if(previous))
            if when:
                out.fallbacks.append(Fallback(when=when, say=_as_said(m.group("then"))))
            previous = m.group("then")
            continue
        if m := _EMBEDDED_IF.search(sent):
            # "You want the refund to your amex card, and if the agent cannot help, transfer to
            # a human": the wish before the clause is what the refusal is about.
            when = content_words(sent[: m.start()]) + content_words(m.group("cond"))
            if when:
                out.fallbacks.append(Fallback(when=when, say=_as_said(m.group("then"))))
        previous = sent


def same_word(a: str, b: str) -> bool:
    """Whether two content words are one ("cancelling" and "cancel", "part" and "partial")."""
    if a == b:
        return True
    k = min(5, len(a), len(b))
    return k >= 4 and a[:k] == b[:k]


def refusal_matches(when: list[str], text: str) -> bool:
    """Whether ``text`` names enough of a fallback's ``when`` words (two, or all when fewer)."""
    said = content_words(text)
    hits = sum(1 for w in when if any(same_word(w, x) for x in said))
    return hits >= min(2, len(when))


def _without_if(sentence: str) -> str:
    m = _IF_NOT.match(sentence) or _IF_CANNOT.match(sentence)
    return m.group("then") if m else sentence


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text.replace("\n", " ")) if s.strip()]


_META_CLAUSE = re.compile(
    r"\s*\([^)]*\bthe agent\b[^)]*\)|(?<=\w),\s*(?:and |but )?(?:if|when|unless|once) the agent\b[^.!?]*", re.I
)


def _without_meta_clause(sentence: str) -> str:
    """``sentence`` without a clause about what the agent does ("You want the refund to
    your amex card, and if the agent cannot help, transfer to a human": the wish stays)."""
    out = _META_CLAUSE.sub("", sentence).strip()
    if not out.strip(" .!?"):
        return ""
    return out if out == sentence.strip() or out.endswith((".", "!", "?")) else out + "."


def opening_request(reason: str) -> str:
    """What the customer says first: the reason for the call in the first person, without
    the sentences that tell the simulated user how to behave ("If the agent asks for
    confirmation, ...", "Make sure to ...", "do not reveal it to the agent"), which a customer
    does not say."""
    said = [s for s in map(_without_meta_clause, _sentences(reason)) if s and not _META.search(s)]
    return first_person(" ".join(said) if said else reason.strip())


def read_identity(known: str) -> dict[str, str]:
    """Name, zip, email, phone and user id stated in ``known``."""
    identity: dict[str, str] = {}
    if m := _NAME_RE.search(known):
        identity["first_name"], identity["last_name"] = m.group(1), m.group(2)
        identity["name"] = f"{m.group(1)} {m.group(2)}"
    if m := _ZIP_RE.search(known):
        identity["zip"] = m.group(1)
    if m := _EMAIL_RE.search(known):
        identity["email"] = m.group(0).rstrip(".")
    if m := _PHONE_RE.search(known):
        identity["phone"] = m.group(0)
    if m := _USER_ID_RE.search(known):
        identity["user_id"] = m.group(0)
        if "first_name" not in identity:
            identity["first_name"], identity["last_name"] = m.group(1).title(), m.group(2).title()
    return identity


def read_scenario(reason: str, known: str = "", unknown: str = "", instructions: str = "") -> ScenarioFacts:
    """The facts of a τ²-bench scenario's free text (see the module docstring)."""
    out = ScenarioFacts(identity=read_identity(known))
    if re.search(r"\b(?:do not|don't) (?:remember|know|have) (?:your |an )?e-?mail", unknown, re.I):
        out.no_email = True
        out.identity.pop("email", None)
    everything = " ".join([known, reason, instructions])
    # Where the customer is (telecom: abroad means roaming is needed).
    if m := _ABROAD.search(known) or _ABROAD.search(reason):
        out.facts["location"] = f"I'm currently abroad in {m.group(1)}."
    elif m := _HOME.search(known):
        out.facts["location"] = f"I'm at home in {m.group(1)}, not travelling."
    if _NO_WIFI.search(everything):
        out.answers.append(AnswerRule(
            keywords=[["access", "wi-fi"], ["access", "wifi"], ["wi-fi", "available"], ["wifi", "available"],
                      ["wi-fi", "network", "you"], ["wifi", "network", "you"], ["near", "wi-fi"]],
            say="I don't have access to Wi-Fi.",
        ))
    if m := _REFUEL.search(everything):
        amount = m.group(1)
        out.answers.append(AnswerRule(
            keywords=[["refuel"], ["how", "much", "data"], ["how", "many", "gb"], ["top", "up"],
                      ["top-up"], ["add", "data"], ["more", "data"], ["how", "much", "would"],
                      ["extra", "data"], ["additional", "data"], ["gb", "enough"]],
            say=f"I'm willing to refuel {amount} of data if necessary.",
        ))
    if m := _DURATION.search(reason):
        span = (m.group(1) or m.group(2)).strip()
        lead = "for the past" if m.group(1) else "since"
        out.answers.append(AnswerRule(
            keywords=[["how", "long"], ["since", "when"], ["when", "did"], ["when", "start"]],
            say=f"It's been happening {lead} {span}.",
        ))
    if m := _SPEED_GOAL.search(everything):
        # What the telecom user judges a speed test by (see its ``speed_goal`` handling).
        out.facts["speed_goal"] = m.group(1).lower()
    if m := _APP.search(reason):
        out.answers.append(AnswerRule(
            keywords=[["which", "app"], ["what", "app"], ["app", "are", "you", "using"],
                      ["app", "do", "you", "use"]],
            say=f"I'm using the {m.group(1).lower()} app on my phone.",
        ))
    out.no_plan_change = bool(_NO_PLAN_CHANGE.search(everything))
    read_conditions(" ".join([reason, instructions]), out)
    # Retail: order ids and the sentences about items, payment, address and reason.
    orders = list(dict.fromkeys(_ORDER_ID_RE.findall(reason)))
    if orders:
        out.facts["order_id"] = "The order id is " + " and ".join(orders) + "." if len(orders) == 1 else (
            "The order ids are " + " and ".join(orders) + "."
        )
    wants = [s for s in map(_without_meta_clause, _sentences(reason)) if s and not _META.search(s)]
    for key, pattern in (("item", _ITEM_SENTENCE), ("payment_method", _PAY_SENTENCE),
                         ("address", _ADDRESS_SENTENCE), ("reason", _REASON_SENTENCE)):
        said = [first_person(s) for s in wants if pattern.search(s)]
        if said:
            out.facts.setdefault(key, " ".join(said))
    return out
